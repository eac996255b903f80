//! The run lifecycle under faults (issue 14): concurrent runs in one repository, two
//! resumes of one run at once, kills during set-up, and what `fabro runs`, `fabro run`
//! and `fabro resume` say about runs they cannot use.
//!
//! Kills during set-up use the test hook `FABRO_TEST_PAUSE_AT={point}`: the process
//! creates `{FABRO_HOME}/test-paused-{point}` when it reaches `point`, then sleeps until
//! it is killed.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use fabro_test_support::TestEnv;
use serde_json::Value;

use crate::git::{git, git_available};
use crate::{code, fabro, stderr, stdout};

fn init_repo(env: &TestEnv, files: &[(&str, &str)]) {
    git(env, &["init", "-q", "-b", "main"]);
    for (name, text) in files {
        env.write(name, text);
        git(env, &["add", name]);
    }
    git(env, &["commit", "-q", "-m", "init"]);
}

pub(crate) fn spawn(env: &TestEnv, args: &[&str], extra_env: &[(&str, &str)]) -> Child {
    let mut command = env.command(env!("CARGO_BIN_EXE_fabro"));
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in extra_env {
        command.env(key, value);
    }
    command.spawn().expect("fabro starts")
}

pub(crate) fn kill(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Waits until `path` exists; fails when `child` exits first or after 60 s.
pub(crate) fn wait_for_file(path: &Path, child: &mut Child, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what}: the process exited ({status}) before {path:?} appeared");
        }
        assert!(Instant::now() < deadline, "{what}: {path:?} never appeared");
        std::thread::sleep(Duration::from_millis(5));
    }
}

pub(crate) fn runs_json(env: &TestEnv) -> Vec<Value> {
    let output = fabro(env, &["runs", "--json"]);
    assert_eq!(code(&output), 0, "fabro runs: {}", stderr(&output));
    serde_json::from_str::<Value>(&stdout(&output))
        .expect("JSON")
        .as_array()
        .expect("array")
        .clone()
}

pub(crate) fn find_run<'a>(runs: &'a [Value], run_id: &str) -> Option<&'a Value> {
    runs.iter().find(|run| run["run_id"] == run_id)
}

fn checkpoint(run_dir: &Path) -> Value {
    serde_json::from_str(&fs_err::read_to_string(run_dir.join("checkpoint.json")).expect("read"))
        .expect("checkpoint is JSON")
}

/// How many `StageCompleted` events each node has in the run's `events.jsonl`.
fn completed_stages(run_dir: &Path) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    let events = fs_err::read_to_string(run_dir.join("events.jsonl")).expect("events");
    for line in events.lines() {
        let event: Value = serde_json::from_str(line).expect("event");
        if event["event"] == "StageCompleted" {
            let node = event["node_id"].as_str().expect("node").to_owned();
            *counts.entry(node).or_insert(0) += 1;
        }
    }
    counts
}

pub(crate) fn refs(env: &TestEnv, prefix: &str) -> Vec<String> {
    git(env, &["for-each-ref", "--format=%(refname)", prefix])
        .lines()
        .map(str::to_owned)
        .collect()
}

pub(crate) fn assert_fsck_clean(env: &TestEnv) {
    let fsck = env
        .command("git")
        .args(["fsck", "--strict", "--no-dangling"])
        .output()
        .expect("git fsck");
    assert!(
        fsck.status.success() && fsck.stderr.is_empty(),
        "git fsck: {}",
        String::from_utf8_lossy(&fsck.stderr)
    );
}

/// Acceptance 2 (issue 14): 20 runs started at once in one repository and one
/// `FABRO_HOME`, five times: every run succeeds with its own branch and metadata ref, the
/// repository stays sound, and every run has its index row.
#[test]
fn twenty_runs_started_at_once_in_one_repository_all_succeed() {
    if !git_available("twenty_runs_started_at_once_in_one_repository_all_succeed") {
        return;
    }
    let env = TestEnv::new("concurrent_runs");
    init_repo(
        &env,
        &[(
            "w.fabro",
            "digraph w { start [shape=Mdiamond]; exit [shape=Msquare]; start -> exit }\n",
        )],
    );
    let main_before = git(&env, &["rev-parse", "HEAD"]);
    for batch in 0..5 {
        let children: Vec<(String, Child)> = (0..20)
            .map(|number| {
                let run_id = format!("b{batch}r{number}");
                let child = spawn(&env, &["run", "w.fabro", "--run-id", &run_id], &[]);
                (run_id, child)
            })
            .collect();
        for (run_id, child) in children {
            let output = child.wait_with_output().expect("waits");
            assert_eq!(
                code(&output),
                0,
                "batch {batch}, run {run_id}: {}",
                stderr(&output)
            );
        }
        let expected = 20 * (batch + 1);
        let runs = runs_json(&env);
        assert_eq!(runs.len(), expected, "batch {batch}: index rows");
        assert!(
            runs.iter().all(|run| run["status"] == "success"),
            "batch {batch}: {runs:?}"
        );
        let branches = refs(&env, "refs/heads/fabro/run/");
        assert_eq!(branches.len(), expected, "batch {batch}: {branches:?}");
        let metadata = refs(&env, "refs/fabro/");
        assert_eq!(metadata.len(), expected, "batch {batch}: {metadata:?}");
        for number in 0..20 {
            let run_id = format!("b{batch}r{number}");
            assert!(branches.contains(&format!("refs/heads/fabro/run/{run_id}")));
            assert!(metadata.contains(&format!("refs/fabro/{run_id}")));
        }
        assert_fsck_clean(&env);
        // Finished runs keep no worktree registration.
        let worktrees = git(&env, &["worktree", "list", "--porcelain"]);
        assert_eq!(
            worktrees.matches("worktree ").count(),
            1,
            "batch {batch}: {worktrees}"
        );
    }
    assert_eq!(git(&env, &["rev-parse", "HEAD"]), main_before);
    assert_eq!(git(&env, &["status", "--porcelain"]), "");
}

/// Issue 14 item 1 and acceptance 2: a run killed in stage `b`, then two `fabro resume`
/// started together, 20 times: exactly one resumes, the other is refused with exit 2
/// and names the lock holder, and the run ends `success` with every stage completed
/// once.
#[test]
fn two_resumes_of_one_killed_run_started_together_run_it_once() {
    if !git_available("two_resumes_of_one_killed_run_started_together_run_it_once") {
        return;
    }
    let env = TestEnv::new("resume_race");
    init_repo(&env, &[("README.md", "user file\n")]);
    // The workflows live outside the repository, so that each can name its own files.
    let workflows = env.fabro_home().join("workflows");
    fs_err::create_dir_all(&workflows).expect("mkdir");
    for attempt in 0..20 {
        let run_id = format!("race{attempt}");
        let trace = workflows.join(format!("{run_id}.trace"));
        let mark = workflows.join(format!("{run_id}.mark"));
        let workflow = workflows.join(format!("{run_id}.fabro"));
        fs_err::write(
            &workflow,
            format!(
                "digraph w {{
  start [shape=Mdiamond]
  exit [shape=Msquare]
  a [shape=parallelogram, script=\"echo a >> {trace}; echo a > a.txt\"]
  b [shape=parallelogram, script=\"echo b >> {trace}; if [ ! -e {mark} ]; then touch {mark}; sleep 60; fi; sleep 0.3; echo b > b.txt\"]
  c [shape=parallelogram, script=\"echo c >> {trace}; echo c > c.txt\"]
  start -> a -> b -> c -> exit
}}
",
                trace = trace.display(),
                mark = mark.display()
            ),
        )
        .expect("write");
        let workflow = workflow.display().to_string();
        let mut run = spawn(&env, &["run", &workflow, "--run-id", &run_id], &[]);
        wait_for_file(&mark, &mut run, &run_id);
        kill(run);

        let first = spawn(&env, &["resume", &run_id], &[]);
        let second = spawn(&env, &["resume", &run_id], &[]);
        let outputs = [
            first.wait_with_output().expect("waits"),
            second.wait_with_output().expect("waits"),
        ];
        let mut codes: Vec<i32> = outputs.iter().map(code).collect();
        codes.sort_unstable();
        let texts: Vec<String> = outputs.iter().map(stderr).collect();
        assert_eq!(codes, [0, 2], "attempt {attempt}: {texts:#?}");
        let refused = outputs
            .iter()
            .find(|output| code(output) == 2)
            .map(stderr)
            .unwrap_or_default();
        assert!(
            refused.contains(&format!(
                "error: run {run_id} is being resumed by another process (pid "
            )),
            "attempt {attempt}: {refused}"
        );
        let run_dir = env.fabro_home().join("scratch").join(&run_id);
        assert_eq!(checkpoint(&run_dir)["run_status"], "success", "{run_id}");
        let completed = completed_stages(&run_dir);
        for node in ["start", "a", "b", "c", "exit"] {
            assert_eq!(
                completed.get(node),
                Some(&1),
                "attempt {attempt}: {completed:?}"
            );
        }
        let executed = fs_err::read_to_string(&trace).expect("trace");
        assert_eq!(executed, "a\nb\nb\nc\n", "attempt {attempt}");
        assert_eq!(
            git(&env, &["show", &format!("fabro/run/{run_id}:c.txt")]),
            "c\n"
        );
    }
    assert_fsck_clean(&env);
}

/// Issue 14 item 2: a run whose git set-up fails (here: its run branch exists already)
/// leaves nothing behind, or is listed as failed with its reason; the user's branch is
/// untouched.
#[test]
fn a_run_that_fails_during_set_up_leaves_nothing_or_is_listed_as_failed() {
    if !git_available("a_run_that_fails_during_set_up_leaves_nothing_or_is_listed_as_failed") {
        return;
    }
    let env = TestEnv::new("setup_failure");
    init_repo(
        &env,
        &[(
            "w.fabro",
            "digraph w { start [shape=Mdiamond]; exit [shape=Msquare]; start -> exit }\n",
        )],
    );
    git(&env, &["branch", "fabro/run/dup"]);
    let before = git(&env, &["rev-parse", "fabro/run/dup"]);
    let output = fabro(&env, &["run", "w.fabro", "--run-id", "dup"]);
    assert_ne!(code(&output), 0, "{}", stderr(&output));
    let said = format!("{}{}", stdout(&output), stderr(&output));
    assert!(said.contains("fabro/run/dup"), "{said}");
    assert_eq!(git(&env, &["rev-parse", "fabro/run/dup"]), before);
    let run_dir = env.fabro_home().join("scratch/dup");
    let runs = runs_json(&env);
    match find_run(&runs, "dup") {
        None => assert!(!run_dir.exists(), "leftovers in {run_dir:?}"),
        Some(run) => {
            assert_eq!(run["status"], "fail", "{run}");
            let events = fs_err::read_to_string(run_dir.join("events.jsonl")).expect("events");
            let last: Value =
                serde_json::from_str(events.lines().last().expect("an event")).expect("JSON");
            assert_eq!(last["event"], "WorkflowRunFailed", "{events}");
            assert!(
                last["properties"]["reason"]
                    .as_str()
                    .is_some_and(|reason| reason.contains("fabro/run/dup")),
                "{last}"
            );
        }
    }
    assert!(!env
        .command("git")
        .args(["worktree", "list"])
        .output()
        .map(|output| stdout(&output).contains("fabro-run-dup"))
        .unwrap_or(false));
    assert_eq!(refs(&env, "refs/fabro/"), Vec::<String>::new());
    // The next run is not disturbed.
    let output = fabro(&env, &["run", "w.fabro", "--run-id", "next"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
}

/// The workflow of the set-up kill tests: two commands that record their runs in a
/// trace outside the working directory.
fn traced_workflow(trace: &Path) -> String {
    format!(
        "digraph w {{
  start [shape=Mdiamond]
  exit [shape=Msquare]
  a [shape=parallelogram, script=\"echo a >> {trace}; echo a > a.txt\"]
  b [shape=parallelogram, script=\"echo b >> {trace}; echo b > b.txt\"]
  start -> a -> b -> exit
}}
",
        trace = trace.display()
    )
}

/// Starts a run that pauses at `point` (the `FABRO_TEST_PAUSE_AT` hook), and kills it
/// there with SIGKILL.
fn kill_at(env: &TestEnv, workflow: &str, run_id: &str, point: &str) {
    let marker = env.fabro_home().join(format!("test-paused-{point}"));
    let _ = fs_err::remove_file(&marker);
    let mut child = spawn(
        env,
        &["run", workflow, "--run-id", run_id],
        &[("FABRO_TEST_PAUSE_AT", point)],
    );
    wait_for_file(&marker, &mut child, &format!("{run_id} at {point}"));
    kill(child);
    fs_err::remove_file(&marker).expect("remove marker");
}

/// Issue 14 item 4: a kill at any point of set-up leaves either nothing that `fabro runs`
/// lists (and nothing in git), or a listed run that resumes from its start to success
/// with every stage run once. A run listed at all is always resumable; later runs are
/// not disturbed by leftovers.
#[test]
fn runs_killed_during_set_up_are_garbage_or_resumable() {
    if !git_available("runs_killed_during_set_up_are_garbage_or_resumable") {
        return;
    }
    let env = TestEnv::new("setup_kill");
    let trace = env.fabro_home().join("trace");
    init_repo(&env, &[("w.fabro", &traced_workflow(&trace))]);
    for (point, must_be_listed) in [
        ("before_manifest", false),
        ("after_manifest", true),
        ("after_git_setup", true),
    ] {
        let run_id = format!("kill-{point}");
        let _ = fs_err::remove_file(&trace);
        kill_at(&env, "w.fabro", &run_id, point);
        let runs = runs_json(&env);
        let Some(run) = find_run(&runs, &run_id) else {
            assert!(!must_be_listed, "{point}: not listed: {runs:?}");
            assert!(
                refs(&env, &format!("refs/heads/fabro/run/{run_id}")).is_empty(),
                "{point}: a run branch without a listed run"
            );
            assert!(refs(&env, &format!("refs/fabro/{run_id}")).is_empty());
            let admin = env
                .work_dir()
                .join(format!(".git/worktrees/fabro-run-{run_id}"));
            assert!(!admin.exists(), "{point}: {admin:?} left behind");
            let output = fabro(&env, &["resume", &run_id]);
            assert_eq!(code(&output), 2, "{point}: {}", stderr(&output));
            continue;
        };
        assert_eq!(run["status"], "interrupted", "{point}: {run}");
        let output = fabro(&env, &["resume", &run_id]);
        assert_eq!(code(&output), 0, "{point}: {}", stderr(&output));
        let run_dir = env.fabro_home().join("scratch").join(&run_id);
        assert_eq!(checkpoint(&run_dir)["run_status"], "success");
        assert_eq!(
            fs_err::read_to_string(&trace).expect("trace"),
            "a\nb\n",
            "{point}"
        );
        assert_eq!(
            git(&env, &["show", &format!("fabro/run/{run_id}:b.txt")]),
            "b\n"
        );
        let subjects = git(
            &env,
            &["log", "--format=%s", &format!("refs/fabro/{run_id}")],
        );
        assert!(
            subjects.trim_end().ends_with("initialize"),
            "{point}: the first metadata commit holds the run's records: {subjects}"
        );
    }
    assert_fsck_clean(&env);
    let output = fabro(&env, &["run", "w.fabro", "--run-id", "after"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
}

/// The same without git: killed after its manifest, a run resumes from its start.
#[test]
fn a_run_killed_right_after_its_manifest_resumes_without_git() {
    let env = TestEnv::new("setup_kill_nogit");
    let trace = env.fabro_home().join("trace");
    env.write("w.fabro", &traced_workflow(&trace));
    kill_at(&env, "w.fabro", "k1", "after_manifest");
    let runs = runs_json(&env);
    let run = find_run(&runs, "k1").expect("listed");
    assert_eq!(run["status"], "interrupted");
    let output = fabro(&env, &["resume", "k1"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(fs_err::read_to_string(&trace).expect("trace"), "a\nb\n");
    let run_dir: PathBuf = env.fabro_home().join("scratch/k1");
    assert_eq!(checkpoint(&run_dir)["run_status"], "success");
}

/// Issue 14 item 9: `--answer` naming no human gate of the workflow is a usage error
/// that lists the gates; nothing runs.
#[test]
fn answers_for_unknown_gates_are_usage_errors() {
    let env = TestEnv::new("answer_unknown_gate");
    env.write(
        "w.fabro",
        "digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  approve [shape=hexagon, label=\"Approve?\"]
  review [shape=hexagon, label=\"Review?\"]
  work [shape=parallelogram, script=\"touch ran\"]
  start -> work -> approve
  approve -> review [label=\"[Y] yes\"]
  review -> exit [label=\"[Y] yes\"]
}
",
    );
    let output = fabro(
        &env,
        &[
            "run",
            "w.fabro",
            "--run-id",
            "a1",
            "--answer",
            "approve=yes",
            "--answer",
            "nosuch=yes",
        ],
    );
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    let text = stderr(&output);
    assert!(
        text.contains("error: ") && text.contains("'nosuch'"),
        "{text}"
    );
    assert!(text.contains("approve, review"), "{text}");
    assert!(!env.work_dir().join("ran").exists());
    assert!(!env.fabro_home().join("scratch/a1").exists());
    // Answers naming the gates run.
    let output = fabro(
        &env,
        &[
            "run",
            "w.fabro",
            "--answer",
            "approve=yes",
            "--answer",
            "review=Y",
        ],
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
}

/// Issue 14 item 9: a run whose `manifest.json` is corrupt is listed with status
/// `unreadable` and the reason, whether or not the index knew it.
#[test]
fn runs_with_a_corrupt_manifest_are_listed_as_unreadable() {
    let env = TestEnv::new("corrupt_manifest");
    env.write(
        "w.fabro",
        "digraph w { start [shape=Mdiamond]; exit [shape=Msquare]; start -> exit }\n",
    );
    for run_id in ["good", "bad"] {
        let output = fabro(&env, &["run", "w.fabro", "--run-id", run_id]);
        assert_eq!(code(&output), 0, "{}", stderr(&output));
    }
    fs_err::write(
        env.fabro_home().join("scratch/bad/manifest.json"),
        "{\"run_id\": \"bad\", trunc",
    )
    .expect("write");
    for rebuilt in [false, true] {
        if rebuilt {
            fs_err::remove_file(env.fabro_home().join("runs.db")).expect("remove");
        }
        let runs = runs_json(&env);
        assert_eq!(runs.len(), 2, "rebuilt {rebuilt}: {runs:?}");
        assert_eq!(find_run(&runs, "good").expect("good")["status"], "success");
        let bad = find_run(&runs, "bad").expect("listed");
        assert_eq!(bad["status"], "unreadable", "{bad}");
        assert!(
            bad["reason"]
                .as_str()
                .is_some_and(|reason| reason.contains("manifest.json")),
            "{bad}"
        );
        let output = fabro(&env, &["runs"]);
        assert_eq!(code(&output), 0, "{}", stderr(&output));
        let line = stdout(&output)
            .lines()
            .find(|line| line.starts_with("bad "))
            .map(str::to_owned)
            .unwrap_or_default();
        assert!(line.contains("unreadable"), "{}", stdout(&output));
    }
    let output = fabro(&env, &["resume", "bad"]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("manifest.json"),
        "{}",
        stderr(&output)
    );
}
