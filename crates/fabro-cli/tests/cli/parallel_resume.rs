//! Resuming a run killed inside a parallel stage (SPEC 8.7 at branch granularity): finished
//! branches are reused, not run again; stale lock files of the run's branch refs are removed;
//! and a parallel stage never falls back silently to a shared working directory.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use fabro_test_support::TestEnv;
use serde_json::Value;

use crate::git::git_available;
use crate::{code, fabro, stderr};

/// Branch `a` finishes at once; branch `b` waits for the file `go` in `FABRO_HOME`
/// (outside the worktree), so a test can kill the run while `b` runs and `a` is done. Every
/// stage appends its id to `trace` (also outside the worktree).
fn workflow(env: &TestEnv) -> String {
    let trace = env.fabro_home().join("trace");
    let go = env.fabro_home().join("go");
    let (trace, go) = (trace.display(), go.display());
    format!(
        r#"digraph w {{
  start [shape=Mdiamond]
  exit [shape=Msquare]
  fan [shape=component]
  a [shape=parallelogram, script="echo a >> {trace}; echo A > a.txt"]
  b [shape=parallelogram, script="echo b >> {trace}; while [ ! -f {go} ]; do sleep 0.02; done; echo B > b.txt"]
  merge [shape=tripleoctagon]
  after [shape=parallelogram, script="echo after >> {trace}; ls > listing.txt"]
  start -> fan
  fan -> a -> merge
  fan -> b -> merge
  merge -> after -> exit
}}
"#
    )
}

fn git(env: &TestEnv, args: &[&str]) -> String {
    crate::git::git(env, args).trim().to_owned()
}

/// A repository in the working directory, holding the workflow.
fn init_repo(env: &TestEnv) {
    git(env, &["init", "-q", "-b", "main"]);
    env.write("w.fabro", &workflow(env));
    git(env, &["add", "w.fabro"]);
    git(env, &["commit", "-q", "-m", "init"]);
}

fn spawn_run(env: &TestEnv, run_id: &str) -> Child {
    env.command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro", "--run-id", run_id])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("fabro starts")
}

fn events(run_dir: &Path) -> Vec<Value> {
    fs_err::read_to_string(run_dir.join("events.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

fn warnings(run_dir: &Path, code: &str) -> usize {
    events(run_dir)
        .iter()
        .filter(|event| event["event"] == "Warning" && event["properties"]["code"] == code)
        .count()
}

/// Waits until branch `a` has completed in the run at `run_dir`.
fn wait_for_branch_a(run_dir: &Path, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let done = events(run_dir)
            .iter()
            .any(|event| event["event"] == "ParallelBranchCompleted" && event["node_id"] == "a");
        if done {
            return;
        }
        assert!(
            child.try_wait().expect("poll").is_none(),
            "the run ended before branch a completed"
        );
        assert!(Instant::now() < deadline, "branch a never completed");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn trace(env: &TestEnv) -> Vec<String> {
    fs_err::read_to_string(env.fabro_home().join("trace"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Runs `reference` uninterrupted, then `killed` killed while branch `b` runs, with
/// `prepare` applied to the repository before the resume; returns the trace of the killed
/// run and its run directory.
fn kill_during_branch_b(env: &TestEnv, prepare: impl FnOnce()) -> (Vec<String>, PathBuf) {
    fs_err::write(env.fabro_home().join("go"), "").expect("go");
    let reference = fabro(env, &["run", "w.fabro", "--run-id", "reference"]);
    assert_eq!(code(&reference), 0, "{}", stderr(&reference));
    fs_err::remove_file(env.fabro_home().join("go")).expect("go removed");
    fs_err::remove_file(env.fabro_home().join("trace")).expect("trace removed");

    let run_dir = env.fabro_home().join("scratch/killed");
    let mut child = spawn_run(env, "killed");
    wait_for_branch_a(&run_dir, &mut child);
    child.kill().expect("killed");
    child.wait().expect("reaped");
    prepare();
    fs_err::write(env.fabro_home().join("go"), "").expect("go");
    let resumed = fabro(env, &["resume", "killed"]);
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
    (trace(env), run_dir)
}

#[test]
fn a_resumed_parallel_stage_reuses_the_branches_that_had_finished() {
    if !git_available("a_resumed_parallel_stage_reuses_the_branches_that_had_finished") {
        return;
    }
    resumed_branches_are_reused("parallel_resume_reuse", true);
}

#[test]
fn without_git_a_resumed_parallel_stage_also_reuses_finished_branches() {
    resumed_branches_are_reused("parallel_resume_reuse_no_git", false);
}

fn resumed_branches_are_reused(name: &str, with_git: bool) {
    let env = TestEnv::new(name);
    if with_git {
        init_repo(&env);
    } else {
        env.write("w.fabro", &workflow(&env));
    }
    let (executed, run_dir) = kill_during_branch_b(&env, || {});
    let count = |id: &str| executed.iter().filter(|entry| *entry == id).count();
    assert_eq!(count("a"), 1, "branch a ran again: {executed:?}");
    assert_eq!(count("b"), 2, "{executed:?}");
    assert_eq!(count("after"), 1, "{executed:?}");
    if with_git {
        assert_eq!(warnings(&run_dir, "parallel_no_isolation"), 0);
        assert_eq!(
            git(&env, &["rev-parse", "fabro/run/killed^{tree}"]),
            git(&env, &["rev-parse", "fabro/run/reference^{tree}"]),
            "the resumed run's tree differs from the uninterrupted run's"
        );
    }
    let checkpoint: Value = serde_json::from_str(
        &fs_err::read_to_string(run_dir.join("checkpoint.json")).expect("checkpoint"),
    )
    .expect("json");
    assert_eq!(checkpoint["run_status"], "success");
    let completed: Vec<&str> = checkpoint["completed_nodes"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for node in ["a", "b", "fan", "merge", "after"] {
        assert_eq!(
            completed.iter().filter(|id| **id == node).count(),
            1,
            "{node} in {completed:?}"
        );
    }
    // Stage ranks stay unique across the interrupted and the resumed attempt, and the
    // interrupted attempt of branch b left no stage directory behind.
    let names: Vec<String> = fs_err::read_dir(run_dir.join("stages"))
        .expect("stages")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let mut ranks: Vec<u64> = names
        .iter()
        .map(|name| name.split('-').next().expect("rank").parse().expect("rank"))
        .collect();
    ranks.sort_unstable();
    ranks.dedup();
    assert_eq!(
        ranks.len(),
        names.len(),
        "two stage directories share a rank: {names:?}"
    );
    assert_eq!(
        names.iter().filter(|name| name.contains("-b@")).count(),
        1,
        "{names:?}"
    );
}

#[test]
fn stale_locks_of_branch_refs_are_removed_on_resume() {
    if !git_available("stale_locks_of_branch_refs_are_removed_on_resume") {
        return;
    }
    let env = TestEnv::new("parallel_resume_stale_lock");
    init_repo(&env);
    let lock = env
        .work_dir()
        .join(".git/refs/heads/fabro/parallel/killed/fan/1/b.lock");
    let (executed, run_dir) = kill_during_branch_b(&env, || {
        // A process killed while moving branch b's ref leaves its lock file behind.
        fs_err::write(&lock, "0000000000000000000000000000000000000000\n").expect("lock");
    });
    assert!(!lock.exists(), "the stale lock is still there");
    assert_eq!(
        warnings(&run_dir, "parallel_no_isolation"),
        0,
        "the resumed run lost its isolation"
    );
    assert_eq!(executed.iter().filter(|entry| *entry == "after").count(), 1);
    assert_eq!(
        git(&env, &["rev-parse", "fabro/run/killed^{tree}"]),
        git(&env, &["rev-parse", "fabro/run/reference^{tree}"])
    );
}

#[test]
fn a_parallel_stage_whose_branches_cannot_be_isolated_fails() {
    if !git_available("a_parallel_stage_whose_branches_cannot_be_isolated_fails") {
        return;
    }
    let env = TestEnv::new("parallel_isolation_failure");
    init_repo(&env);
    fs_err::write(env.fabro_home().join("go"), "").expect("go");
    // Another process holds branch b's ref lock.
    let lock = env
        .work_dir()
        .join(".git/refs/heads/fabro/parallel/r1/fan/1/b.lock");
    fs_err::create_dir_all(lock.parent().expect("parent")).expect("dirs");
    fs_err::write(&lock, "").expect("lock");
    let output = fabro(&env, &["run", "w.fabro", "--run-id", "r1"]);
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    let run_dir = env.fabro_home().join("scratch/r1");
    assert_eq!(warnings(&run_dir, "parallel_no_isolation"), 0);
    let failure = events(&run_dir)
        .into_iter()
        .find(|event| event["event"] == "StageCompleted" && event["node_id"] == "fan")
        .expect("the parallel stage completed");
    assert_eq!(failure["properties"]["status"], "fail");
    let reason = failure["properties"]["failure_reason"]
        .as_str()
        .unwrap_or_default();
    assert!(reason.contains("engine error"), "{reason}");
    assert!(trace(&env).is_empty(), "branches ran: {:?}", trace(&env));
}
