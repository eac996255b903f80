//! Git checkpointing (SPEC 8), checked with the `git` command: the run branch, the
//! metadata ref, their trailers, `git fsck`, and the user's repository left untouched.

use std::path::Path;

use fabro_test_support::TestEnv;

use crate::{code, fabro, stderr};

const WORKFLOW: &str = r#"digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  a [shape=parallelogram, script="echo hello > a.txt"]
  b [shape=parallelogram, script="echo world >> a.txt; mkdir -p sub; echo x > sub/y.txt"]
  start -> a -> b -> exit
}
"#;

pub(crate) fn git(env: &TestEnv, args: &[&str]) -> String {
    let output = env.command("git").args(args).output().expect("git runs");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Whether the `git` program is installed; when it is not, `test` is skipped (and fails
/// where `CI` is set, see `fabro_test_support::skip`).
pub(crate) fn git_available(test: &str) -> bool {
    fabro_test_support::require_program(test, "git")
}

/// HEAD, current branch, status, index bytes and every file of the working directory.
pub(crate) type RepositorySnapshot = (String, String, String, Vec<u8>, Vec<(String, Vec<u8>)>);

/// Everything of the user's repository that fabro must leave alone.
pub(crate) fn snapshot(env: &TestEnv) -> RepositorySnapshot {
    let work = env.work_dir();
    let mut files = Vec::new();
    for entry in fs_err::read_dir(&work).expect("work dir") {
        let path = entry.expect("entry").path();
        if path.is_file() {
            files.push((
                path.file_name()
                    .expect("name")
                    .to_string_lossy()
                    .into_owned(),
                fs_err::read(&path).expect("read"),
            ));
        }
    }
    files.sort();
    (
        git(env, &["rev-parse", "HEAD"]),
        git(env, &["symbolic-ref", "HEAD"]),
        git(env, &["status", "--porcelain", "--untracked-files=all"]),
        fs_err::read(work.join(".git/index")).expect("index"),
        files,
    )
}

fn init_repo(env: &TestEnv) {
    git(env, &["init", "-q", "-b", "main"]);
    env.write("w.fabro", WORKFLOW);
    env.write("README.md", "user file\n");
    git(env, &["add", "w.fabro", "README.md"]);
    git(env, &["commit", "-q", "-m", "init"]);
}

#[test]
fn runs_in_a_clean_repository_checkpoint_into_git() {
    if !git_available("runs_in_a_clean_repository_checkpoint_into_git") {
        return;
    }
    let env = TestEnv::new("git_checkpoints");
    init_repo(&env);
    let before = snapshot(&env);
    let base = git(&env, &["rev-parse", "HEAD"]).trim().to_owned();

    let output = fabro(&env, &["run", "w.fabro", "--run-id", "r1"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(snapshot(&env), before, "the user's repository changed");

    // One run-branch commit per stage, with the exact subject and trailers.
    let log = git(
        &env,
        &[
            "log",
            "--format=%H%n%P%n%B%x00",
            &format!("{base}..fabro/run/r1"),
        ],
    );
    let commits: Vec<&str> = log
        .split('\0')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .collect();
    assert_eq!(commits.len(), 4, "{log}");
    let metadata_log = git(&env, &["log", "--format=%H %s", "refs/fabro/r1"]);
    let metadata: Vec<(&str, &str)> = metadata_log
        .lines()
        .map(|line| line.split_once(' ').expect("sha and subject"))
        .collect();
    let subjects: Vec<&str> = metadata.iter().map(|(_, subject)| *subject).collect();
    assert_eq!(
        subjects,
        [
            "fabro(r1): success",
            "fabro(r1): checkpoint exit",
            "fabro(r1): checkpoint b",
            "fabro(r1): checkpoint a",
            "fabro(r1): checkpoint start",
            "fabro(r1): initialize",
        ]
    );
    // The metadata history is an orphan chain.
    let roots = git(&env, &["rev-list", "--max-parents=0", "refs/fabro/r1"]);
    assert_eq!(roots.lines().count(), 1);
    assert_eq!(roots.trim(), metadata.last().expect("initialize").0);
    for (index, (node, completed)) in [("exit", 4), ("b", 3), ("a", 2), ("start", 1)]
        .iter()
        .enumerate()
    {
        let mut lines = commits[index].lines();
        let _sha = lines.next();
        let _parent = lines.next();
        let message: Vec<&str> = lines.collect();
        let checkpoint = metadata
            .iter()
            .find(|(_, subject)| *subject == format!("fabro(r1): checkpoint {node}"))
            .expect("metadata commit")
            .0;
        assert_eq!(
            message,
            [
                format!("fabro(r1): {node} (success)").as_str(),
                "",
                "Fabro-Run: r1",
                format!("Fabro-Completed: {completed}").as_str(),
                format!("Fabro-Checkpoint: {checkpoint}").as_str(),
            ],
            "commit of {node}"
        );
    }
    // The metadata commits hold the run's records and the stage files.
    let files = git(&env, &["ls-tree", "-r", "--name-only", "refs/fabro/r1"]);
    for file in [
        "manifest.json",
        "graph.fabro",
        "config.json",
        "checkpoint.json",
        "nodes/a/status.json",
        "nodes/a/diff.patch",
        "stages/002-a@1/status.json",
        "stages/003-b@1/diff.patch",
    ] {
        assert!(files.lines().any(|line| line == file), "{file}: {files}");
    }
    let patch = git(&env, &["show", "refs/fabro/r1:nodes/b/diff.patch"]);
    assert!(patch.contains("+world"), "{patch}");
    // The work product is on the run branch.
    assert_eq!(git(&env, &["show", "fabro/run/r1:a.txt"]), "hello\nworld\n");
    assert_eq!(git(&env, &["show", "fabro/run/r1:sub/y.txt"]), "x\n");
    // The final checkpoint names the last run-branch commit; the worktree is gone.
    let checkpoint: serde_json::Value =
        serde_json::from_str(&git(&env, &["show", "refs/fabro/r1:checkpoint.json"])).expect("json");
    assert_eq!(
        checkpoint["git_commit_sha"].as_str(),
        Some(git(&env, &["rev-parse", "fabro/run/r1"]).trim())
    );
    let run_dir = env.fabro_home().join("scratch/r1");
    assert!(!run_dir.join("worktree").exists());
    let manifest: serde_json::Value = serde_json::from_str(
        &fs_err::read_to_string(run_dir.join("manifest.json")).expect("manifest"),
    )
    .expect("json");
    assert_eq!(manifest["base_sha"].as_str(), Some(base.as_str()));
    assert_eq!(manifest["run_branch"], "fabro/run/r1");
    let fsck = env
        .command("git")
        .args(["fsck", "--strict"])
        .output()
        .expect("git fsck");
    assert!(
        fsck.status.success() && fsck.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&fsck.stderr)
    );
    assert!(!Path::new(&env.work_dir().join("a.txt")).exists());
}

#[test]
fn a_dirty_working_tree_runs_in_place_without_checkpoints() {
    if !git_available("a_dirty_working_tree_runs_in_place_without_checkpoints") {
        return;
    }
    let env = TestEnv::new("git_dirty");
    init_repo(&env);
    env.write("README.md", "changed\n");
    let output = fabro(&env, &["run", "w.fabro", "--run-id", "r1"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        stderr(&output).contains(
            "warning: working tree has uncommitted changes; running in place without git checkpoints"
        ),
        "{}",
        stderr(&output)
    );
    assert_eq!(
        fs_err::read_to_string(env.work_dir().join("a.txt")).expect("ran in place"),
        "hello\nworld\n"
    );
    let branches = git(&env, &["branch", "--list", "fabro/*"]);
    assert!(branches.is_empty(), "{branches}");
    let events =
        fs_err::read_to_string(env.fabro_home().join("scratch/r1/events.jsonl")).expect("events");
    assert!(events.contains("\"dirty_worktree\""));
}

/// SIGKILL in the middle of a stage, then `fabro resume`: the run continues from the
/// metadata history in a fresh worktree reset to the last complete checkpoint, so the
/// interrupted stage's partial work is discarded and no completed stage runs twice.
#[test]
fn a_killed_run_resumes_from_the_git_history() {
    if !git_available("a_killed_run_resumes_from_the_git_history") {
        return;
    }
    let env = TestEnv::new("git_resume");
    let once = env.fabro_home().join("once");
    let started = env.fabro_home().join("started");
    let trace = env.fabro_home().join("trace");
    let workflow = format!(
        r#"digraph w {{
  start [shape=Mdiamond]
  exit [shape=Msquare]
  a [shape=parallelogram, script="echo a >> {trace}; echo a > a.txt"]
  slow [shape=parallelogram, script="echo slow >> {trace}; echo partial > partial.txt; if [ ! -e {once} ]; then touch {once} {started}; sleep 30; fi; rm partial.txt; echo done > slow.txt"]
  c [shape=parallelogram, script="echo c >> {trace}; echo c > c.txt"]
  start -> a -> slow -> c -> exit
}}
"#,
        trace = trace.display(),
        once = once.display(),
        started = started.display(),
    );
    git(&env, &["init", "-q", "-b", "main"]);
    env.write("w.fabro", &workflow);
    git(&env, &["add", "w.fabro"]);
    git(&env, &["commit", "-q", "-m", "init"]);
    let mut child = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro", "--run-id", "r1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("fabro starts");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !started.exists() {
        assert!(std::time::Instant::now() < deadline, "slow never started");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");

    let output = fabro(&env, &["resume", "r1"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(
        fs_err::read_to_string(&trace).expect("trace"),
        "a\nslow\nslow\nc\n",
        "only the interrupted stage ran again"
    );
    let subjects = git(&env, &["log", "--format=%s", "fabro/run/r1"]);
    assert_eq!(
        subjects.lines().collect::<Vec<_>>(),
        [
            "fabro(r1): exit (success)",
            "fabro(r1): c (success)",
            "fabro(r1): slow (success)",
            "fabro(r1): a (success)",
            "fabro(r1): start (success)",
            "init",
        ]
    );
    let files = git(&env, &["ls-tree", "-r", "--name-only", "fabro/run/r1"]);
    assert_eq!(
        files.lines().collect::<Vec<_>>(),
        ["a.txt", "c.txt", "slow.txt", "w.fabro"]
    );
    let fsck = env
        .command("git")
        .args(["fsck", "--strict"])
        .output()
        .expect("git fsck");
    assert!(
        fsck.status.success(),
        "{}",
        String::from_utf8_lossy(&fsck.stderr)
    );
    assert_eq!(
        git(&env, &["status", "--porcelain"]),
        "",
        "the user's checkout is untouched"
    );
}

/// The README's first command: `examples/quickstart.fabro` runs to success offline, both in
/// a clean git repository (run worktree, parallel branches isolated in their own
/// worktrees, so each branch must find the files earlier stages committed) and without git.
#[test]
fn the_quickstart_example_succeeds_with_and_without_git() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/quickstart.fabro");
    let workflow = fs_err::read_to_string(&example).expect("the example exists");
    let ignore =
        fs_err::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.gitignore"))
            .expect("the repository's .gitignore");
    for with_git in [true, false] {
        if with_git && !git_available("the_quickstart_example_succeeds_with_and_without_git") {
            continue;
        }
        let env = TestEnv::new("quickstart");
        env.write("quickstart.fabro", &workflow);
        env.write(".gitignore", &ignore);
        if with_git {
            git(&env, &["init", "-q", "-b", "main"]);
            git(&env, &["add", "quickstart.fabro", ".gitignore"]);
            git(&env, &["commit", "-q", "-m", "init"]);
        }
        let output = fabro(
            &env,
            &[
                "run",
                "quickstart.fabro",
                "--auto-approve",
                "--provider",
                "simulated",
                "--run-id",
                "qs1",
            ],
        );
        assert_eq!(
            code(&output),
            0,
            "with git: {with_git}\n{}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains("✓ Lint (lint) success"),
            "{}",
            stderr(&output)
        );
    }
}
