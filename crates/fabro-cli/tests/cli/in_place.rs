//! In-place runs keep the user's changes (SPEC 17.2): before the first stage of a run in a
//! dirty working tree, fabro saves the tree as it is under `refs/fabro-before/{run_id}`
//! without touching the index or the working tree, and `dirty_worktree = "refuse"` (or
//! `--no-in-place`) refuses such a run before anything starts.

use std::collections::BTreeMap;
use std::path::Path;

use fabro_test_support::TestEnv;

use crate::git::{git, git_available};
use crate::{code, fabro, stderr};

/// A stage that changes a tracked file, deletes another and adds one.
const WORKFLOW: &str = r#"digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  work [shape=parallelogram, script="echo by-agent > tracked.txt; rm -f gone.txt; echo new > agent.txt"]
  start -> work -> exit
}
"#;

/// A repository with tracked files, then the user's uncommitted work: a modified file,
/// a staged new file, a deleted file, an untracked file in a new directory, an executable
/// script and an ignored file.
fn dirty_repo(env: &TestEnv) {
    git(env, &["init", "-q", "-b", "main"]);
    env.write("w.fabro", WORKFLOW);
    env.write("tracked.txt", "committed\n");
    env.write("gone.txt", "committed\n");
    env.write("removed.txt", "committed\n");
    env.write(".gitignore", "*.log\n");
    git(env, &["add", "."]);
    git(env, &["commit", "-q", "-m", "init"]);
    env.write("tracked.txt", "user edit\n");
    env.write("staged.txt", "staged by the user\n");
    git(env, &["add", "staged.txt"]);
    fs_err::remove_file(env.work_dir().join("removed.txt")).expect("remove");
    env.write("notes/todo.md", "untracked\n");
    env.write("run.sh", "#!/bin/sh\necho hi\n");
    let script = env.work_dir().join("run.sh");
    let mut permissions = fs_err::metadata(&script).expect("meta").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    fs_err::set_permissions(&script, permissions).expect("chmod");
    env.write("debug.log", "ignored\n");
}

/// Every file under `root` except `.git`, with its content and executable bit.
fn files(root: &Path) -> BTreeMap<String, (Vec<u8>, bool)> {
    fn walk(root: &Path, directory: &Path, out: &mut BTreeMap<String, (Vec<u8>, bool)>) {
        for entry in fs_err::read_dir(directory).expect("dir").flatten() {
            let path = entry.path();
            if entry.file_name() == ".git" {
                continue;
            }
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let mode = std::os::unix::fs::PermissionsExt::mode(
                    &fs_err::metadata(&path).expect("meta").permissions(),
                );
                let relative = path
                    .strip_prefix(root)
                    .expect("inside")
                    .to_string_lossy()
                    .into_owned();
                out.insert(
                    relative,
                    (fs_err::read(&path).expect("read"), mode & 0o111 != 0),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

#[test]
fn an_in_place_run_saves_the_users_changes_and_restores_them_exactly() {
    if !git_available("an_in_place_run_saves_the_users_changes_and_restores_them_exactly") {
        return;
    }
    let env = TestEnv::new("in_place_snapshot");
    dirty_repo(&env);
    let before = files(&env.work_dir());
    let index_before = git(&env, &["ls-files", "--stage"]);
    let output = fabro(&env, &["run", "w.fabro", "--run-id", "r1"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        stderr(&output).contains(
            "warning: working tree has uncommitted changes; running in place without git \
             checkpoints (saved as refs/fabro-before/r1; restore with: git restore \
             --source=refs/fabro-before/r1 --worktree -- .)"
        ),
        "{}",
        stderr(&output)
    );
    assert_eq!(
        stderr(&output)
            .matches("working tree has uncommitted changes")
            .count(),
        1,
        "the warning is printed once: {}",
        stderr(&output)
    );
    assert_eq!(
        git(&env, &["ls-files", "--stage"]),
        index_before,
        "the index changed"
    );
    let head = git(&env, &["rev-parse", "HEAD"]);
    assert_eq!(
        git(&env, &["rev-parse", "refs/fabro-before/r1^"]).trim(),
        head.trim(),
        "the snapshot's parent is HEAD"
    );
    // The stage changed files in place; the snapshot brings the user's work back.
    assert_eq!(
        fs_err::read_to_string(env.work_dir().join("tracked.txt")).expect("read"),
        "by-agent\n"
    );
    git(
        &env,
        &[
            "restore",
            "--source=refs/fabro-before/r1",
            "--worktree",
            "--",
            ".",
        ],
    );
    fs_err::remove_file(env.work_dir().join("agent.txt")).expect("the stage's new file");
    assert_eq!(files(&env.work_dir()), before, "the restored tree differs");
}

#[test]
fn refuse_stops_a_run_in_a_dirty_tree_before_anything_starts() {
    if !git_available("refuse_stops_a_run_in_a_dirty_tree_before_anything_starts") {
        return;
    }
    let env = TestEnv::new("in_place_refuse");
    dirty_repo(&env);
    env.write("run.toml", "[run]\ndirty_worktree = \"refuse\"\n");
    let before = files(&env.work_dir());
    for args in [
        &["run", "w.fabro", "--config", "run.toml"][..],
        &["run", "w.fabro", "--no-in-place"][..],
    ] {
        let output = fabro(&env, args);
        assert_eq!(code(&output), 2, "{args:?}: {}", stderr(&output));
        assert!(
            stderr(&output).contains(
                "error: working tree has uncommitted changes; commit or stash them, or allow \
                 in-place runs"
            ),
            "{}",
            stderr(&output)
        );
        assert_eq!(files(&env.work_dir()), before, "{args:?} changed files");
    }
    let scratch = env.fabro_home().join("scratch");
    let runs = fs_err::read_dir(&scratch).map_or(0, Iterator::count);
    assert_eq!(runs, 0, "a run directory was created");
    assert!(git(&env, &["for-each-ref", "refs/fabro-before"])
        .trim()
        .is_empty());
}
