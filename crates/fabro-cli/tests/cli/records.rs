//! Self-contained run records (SPEC 4.1, 8.3, 8.7 step 2, decided item 44): child
//! workflows stored under `children/` in the run directory and the first metadata commit,
//! resumes that need no original workflow files, and resumes that rebuild a lost run
//! directory from the repository's metadata.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use fabro_test_support::TestEnv;
use serde_json::Value;

use crate::git::git_available;
use crate::{code, fabro, stderr, stdout};

fn git(env: &TestEnv, args: &[&str]) -> String {
    let output = env.command("git").args(args).output().expect("git runs");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A parent whose sub_workflow node runs `child.fabro`, which runs `grand.fabro` in turn.
/// With `block`, the parent's first stage blocks once (until killed) after touching
/// `{home}/started`, before any child runs.
fn write_family(env: &TestEnv, block: bool) {
    let home = env.fabro_home();
    let slow = if block {
        format!(
            "if [ ! -e {once} ]; then touch {once} {started}; sleep 30; fi; echo slow > slow.txt",
            once = home.join("once").display(),
            started = home.join("started").display(),
        )
    } else {
        "echo slow > slow.txt".to_owned()
    };
    env.write(
        "flows/parent.fabro",
        &format!(
            "digraph parent {{\n  goal=\"family goal\"\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  slow [shape=parallelogram, script=\"{slow}\"]\n  manage [shape=house, stack.child_workflow=\"child.fabro\"]\n  check [shape=parallelogram, script=\"grep -q 'family goal' grand.txt\"]\n  start -> slow -> manage -> check -> exit\n}}\n"
        ),
    );
    env.write(
        "flows/child.fabro",
        "digraph child {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  nested [shape=house, stack.child_workflow=\"sub/grand.fabro\"]\n  start -> nested -> exit\n}\n",
    );
    env.write(
        "flows/sub/grand.fabro",
        "digraph grand {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  build [shape=parallelogram, script=\"echo $goal > grand.txt\"]\n  start -> build -> exit\n}\n",
    );
}

fn delete_originals(env: &TestEnv) {
    fs_err::remove_file(env.work_dir().join("flows/child.fabro")).expect("remove child");
    fs_err::remove_file(env.work_dir().join("flows/sub/grand.fabro")).expect("remove grand");
}

fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn start_parent(env: &TestEnv) -> std::process::Child {
    env.command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "flows/parent.fabro", "--run-id", "p1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("fabro starts")
}

fn checkpoint(run_dir: &Path) -> Value {
    serde_json::from_str(&fs_err::read_to_string(run_dir.join("checkpoint.json")).expect("read"))
        .expect("checkpoint is JSON")
}

#[test]
fn child_workflows_are_stored_in_the_run_directory_and_the_first_metadata_commit() {
    if !git_available(
        "child_workflows_are_stored_in_the_run_directory_and_the_first_metadata_commit",
    ) {
        return;
    }
    let env = TestEnv::new("records_children");
    git(&env, &["init", "-q", "-b", "main"]);
    write_family(&env, false);
    git(&env, &["add", "flows"]);
    git(&env, &["commit", "-q", "-m", "init"]);
    let output = fabro(&env, &["run", "flows/parent.fabro", "--run-id", "p1"]);
    assert_eq!(code(&output), 0, "{}\n{}", stdout(&output), stderr(&output));

    let run_dir = env.fabro_home().join("scratch/p1");
    let graph = fs_err::read_to_string(run_dir.join("graph.fabro")).expect("graph");
    assert!(
        graph.contains(r#""stack.child_workflow"="children/child.fabro""#),
        "the stored graph names its child by the stored path: {graph}"
    );
    let child = fs_err::read_to_string(run_dir.join("children/child.fabro")).expect("child");
    assert!(
        child.contains(r#""stack.child_workflow"="grand.fabro""#),
        "the stored child names its own child beside it: {child}"
    );
    let grand = fs_err::read_to_string(run_dir.join("children/grand.fabro")).expect("grand");
    assert!(grand.contains("echo $goal > grand.txt"), "{grand}");

    // The first metadata commit holds the same files.
    let metadata = git(&env, &["rev-list", "--first-parent", "refs/fabro/p1"]);
    let initial = metadata.lines().last().expect("an initial metadata commit");
    assert_eq!(
        git(&env, &["log", "-1", "--format=%s", initial]).trim(),
        "fabro(p1): initialize"
    );
    for (name, text) in [
        ("graph.fabro", &graph),
        ("children/child.fabro", &child),
        ("children/grand.fabro", &grand),
    ] {
        assert_eq!(&git(&env, &["show", &format!("{initial}:{name}")]), text);
        assert_eq!(
            &git(&env, &["show", &format!("refs/fabro/p1:{name}")]),
            text
        );
    }
    // The grandchild really ran, in the parent's worktree.
    let files = git(&env, &["ls-tree", "-r", "--name-only", "fabro/run/p1"]);
    assert!(files.lines().any(|file| file == "grand.txt"), "{files}");
}

#[test]
fn a_resumed_run_needs_no_original_child_workflow_files() {
    let env = TestEnv::new("records_resume_children");
    write_family(&env, true);
    let child = start_parent(&env);
    wait_for(&env.fabro_home().join("started"));
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid fits"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("signal sent");
    let output = child.wait_with_output().expect("exits");
    assert_eq!(code(&output), 130);
    let run_dir = env.fabro_home().join("scratch/p1");
    assert_eq!(checkpoint(&run_dir)["run_status"], "canceled");

    delete_originals(&env);
    let output = fabro(&env, &["resume", "p1"]);
    assert_eq!(code(&output), 0, "{}\n{}", stdout(&output), stderr(&output));
    let done = checkpoint(&run_dir);
    assert_eq!(done["run_status"], "success");
    assert_eq!(done["context_values"]["stack.child.status"], "success");
    assert_eq!(
        fs_err::read_to_string(env.work_dir().join("grand.txt")).expect("grand ran"),
        "family goal\n"
    );
}

#[test]
fn resume_rebuilds_a_lost_run_directory_from_the_repository() {
    if !git_available("resume_rebuilds_a_lost_run_directory_from_the_repository") {
        return;
    }
    let env = TestEnv::new("records_lost_run_dir");
    git(&env, &["init", "-q", "-b", "main"]);
    write_family(&env, true);
    git(&env, &["add", "flows"]);
    git(&env, &["commit", "-q", "-m", "init"]);
    let mut child = start_parent(&env);
    wait_for(&env.fabro_home().join("started"));
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");

    let run_dir = env.fabro_home().join("scratch/p1");
    fs_err::remove_dir_all(&run_dir).expect("remove the run directory");
    delete_originals(&env);
    let output = fabro(&env, &["resume", "p1"]);
    assert_eq!(code(&output), 0, "{}\n{}", stdout(&output), stderr(&output));
    let done = checkpoint(&run_dir);
    assert_eq!(done["run_status"], "success");
    assert_eq!(
        done["completed_nodes"],
        serde_json::json!(["start", "slow", "manage", "check", "exit"])
    );
    for name in [
        "manifest.json",
        "graph.fabro",
        "config.json",
        "children/child.fabro",
        "children/grand.fabro",
    ] {
        assert!(run_dir.join(name).is_file(), "{name} was recreated");
    }
    let subjects = git(&env, &["log", "--format=%s", "fabro/run/p1"]);
    assert_eq!(
        subjects.lines().collect::<Vec<_>>(),
        [
            "fabro(p1): exit (success)",
            "fabro(p1): check (success)",
            "fabro(p1): manage (success)",
            "fabro(p1): slow (success)",
            "fabro(p1): start (success)",
            "init",
        ]
    );
    let files = git(&env, &["ls-tree", "-r", "--name-only", "fabro/run/p1"]);
    assert!(files.lines().any(|file| file == "grand.txt"), "{files}");

    // Without metadata in the repository, the refusal stays.
    let output = fabro(&env, &["resume", "fabro/run/nothing"]);
    assert_eq!(code(&output), 2);
    assert!(
        stderr(&output).contains("run nothing has no run directory"),
        "{}",
        stderr(&output)
    );
}
