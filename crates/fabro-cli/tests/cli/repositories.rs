//! Runs on a repository named by URL (SPEC 18.3, issue 32): the remote is a bare
//! repository path; each worker keeps its own mirror of it under its state directory,
//! pushes `fabro/run/{id}` and `refs/fabro/{id}` after each checkpoint and fetches them
//! when it takes a run over. What the tests read is the remote's refs and trees, the
//! database's rows and events, and an execution log outside the repository.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fabro_test_support::TestEnv;
use nix::sys::signal::Signal;
use serde_json::{json, Value};

use crate::git::git_available;
use crate::server::Server;
use crate::workers::{
    check_resumed, events_of, log_lines, longest_takeover, post_queued, stages_workflow, wait_for,
    Killings, Shared, Worker, TAKEOVER_BOUND,
};
use crate::{code, stderr};

/// `git` with `args` in `dir`, under the test's isolated configuration; its output.
fn git_at(env: &TestEnv, dir: &Path, args: &[&str]) -> String {
    let output = env
        .command("git")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// A repository holding `flows/build.fabro` (`workflow`) on `main`, cloned bare to
/// `remote.git` beside the working directory: the remote's path (its URL).
fn remote_with(env: &TestEnv, workflow: &str) -> PathBuf {
    let source = env.work_dir().join("source");
    fs_err::create_dir_all(source.join("flows")).expect("source directory");
    fs_err::write(source.join("flows/build.fabro"), workflow).expect("workflow written");
    fs_err::write(source.join("README.md"), "a repository by URL\n").expect("readme written");
    git_at(env, &source, &["init", "-q", "-b", "main"]);
    git_at(env, &source, &["add", "-A"]);
    git_at(env, &source, &["commit", "-q", "-m", "the workflow"]);
    let remote = env.work_dir().with_file_name("remote.git");
    git_at(
        env,
        &source,
        &[
            "clone",
            "-q",
            "--bare",
            ".",
            remote.to_str().expect("a UTF-8 path"),
        ],
    );
    remote
}

/// Queues run `run_id` of `flows/build.fabro` of the repository at `remote` (`main`).
fn queue_from(server: &Server, remote: &Path, run_id: &str) {
    post_queued(
        server,
        &json!({
            "repository": {"url": remote.display().to_string(), "ref": "main"},
            "workflow": "flows/build.fabro",
            "run_id": run_id,
            "vars": {"mark": run_id},
        }),
    );
}

/// The run's two refs on the remote, as `git ls-remote` shows them.
fn remote_refs(env: &TestEnv, remote: &Path, run_id: &str) -> String {
    git_at(
        env,
        remote,
        &[
            "ls-remote",
            ".",
            &format!("refs/heads/fabro/run/{run_id}"),
            &format!("refs/fabro/{run_id}"),
        ],
    )
}

/// What a run's final pushed checkpoint says of its outcome, its id replaced by `RUN`:
/// its context (without the worktree's path, which names the worker's directory), its
/// completed stages, their outcomes and the run's status.
fn final_state(git: &dyn Fn(&[&str]) -> String, run_id: &str) -> Value {
    let text = git(&["show", &format!("refs/fabro/{run_id}:checkpoint.json")]);
    let checkpoint: Value = serde_json::from_str(&text.replace(run_id, "RUN")).expect("JSON");
    let mut context = checkpoint["context_values"].clone();
    if let Some(values) = context.as_object_mut() {
        values.remove("internal.work_dir");
    }
    json!({
        "context": context,
        "completed": checkpoint["completed_nodes"],
        "outcomes": checkpoint["node_outcomes"],
        "visits": checkpoint["node_visits"],
        "status": checkpoint["run_status"],
    })
}

/// SPEC 18.3, 18.4.1: runs on a repository by URL whose workers are killed with
/// SIGKILL at random moments finish on the others, each with the run-branch tree of an
/// uninterrupted run on the remote, and no stage whose checkpoint was stored runs again.
#[test]
fn runs_on_a_repository_by_url_survive_killed_workers_with_the_tree_of_an_uninterrupted_run() {
    const RUNS: usize = 4;
    const KILLS: usize = 6;
    let env = TestEnv::new("repositories-sigkill");
    if !git_available("repositories_sigkill") {
        return;
    }
    let Some(shared) = Shared::create("repositories_sigkill", &env) else {
        return;
    };
    let log = env.work_dir().join("executions.log");
    // Each stage appends its name to `out.txt` in the run's worktree.
    let remote = remote_with(&env, &stages_workflow(&log, 4, "echo {stage} >> out.txt; "));
    let server = shared.queueing_server(&env);
    for index in 0..RUNS {
        queue_from(&server, &remote, &format!("by-url-{index}"));
    }
    let workers = Killings {
        env: &env,
        shared: &shared,
        prefix: "u",
        workers: 2,
        concurrency: 2,
        kills: KILLS,
        pause_ms: (300, 900),
    }
    .until_all_succeed(RUNS);
    let watched: Vec<&Worker> = workers.iter().collect();
    // An uninterrupted run of the same workflow, for its tree.
    queue_from(&server, &remote, "uninterrupted");
    wait_for(
        &shared,
        "SELECT status FROM runs WHERE run_id = 'uninterrupted'",
        "success",
        Duration::from_secs(60),
        &watched,
    );
    let git = |args: &[&str]| git_at(&env, &remote, args);
    let expected_tree = git(&["rev-parse", "fabro/run/uninterrupted^{tree}"]);
    assert_eq!(
        git(&["show", "fabro/run/uninterrupted:out.txt"]),
        "s1\ns2\ns3\ns4",
        "each stage appended once"
    );
    let lines = log_lines(&log);
    for index in 0..RUNS {
        let run_id = format!("by-url-{index}");
        assert_eq!(
            git(&["rev-parse", &format!("fabro/run/{run_id}^{{tree}}")]),
            expected_tree,
            "run {run_id}: the remote's run branch has the tree of an uninterrupted run"
        );
        // The metadata ref names the run branch's head as its final checkpoint's commit.
        let checkpoint: Value = serde_json::from_str(&git(&[
            "show",
            &format!("refs/fabro/{run_id}:checkpoint.json"),
        ]))
        .expect("the pushed checkpoint");
        assert_eq!(checkpoint["run_status"], "success", "run {run_id}");
        assert_eq!(
            checkpoint["git_commit_sha"],
            git(&["rev-parse", &format!("fabro/run/{run_id}")]),
            "run {run_id}"
        );
        assert_eq!(
            final_state(&git, &run_id),
            final_state(&git, "uninterrupted"),
            "run {run_id}: the context, stages and status of an uninterrupted run"
        );
        let waited = longest_takeover(&shared, &run_id);
        assert!(
            waited <= TAKEOVER_BOUND,
            "run {run_id} waited {waited:?} for a new worker"
        );
        let events = events_of(&shared, &run_id);
        for stage in 1..=4 {
            let node = format!("s{stage}");
            let checkpoints = events
                .iter()
                .filter(|event| event["event"] == "CheckpointCompleted" && event["node_id"] == node)
                .count();
            assert!(
                checkpoints <= 1,
                "run {run_id}: {node} is checkpointed once"
            );
            assert!(
                lines.contains(&format!("{run_id} {node} end")),
                "run {run_id}: {node} ran to its end"
            );
        }
    }
    // A server that executed none of them shows a stage's diff from the pushed refs.
    let (status, body) = server.request("GET", "/api/v1/runs/by-url-0/stages", None);
    assert_eq!(status, 200, "{body}");
    let stages: Value = serde_json::from_str(&body).expect("the stages");
    let rank = stages["stages"]
        .as_array()
        .and_then(|stages| stages.iter().rev().find(|stage| stage["node_id"] == "s2"))
        .map(|stage| stage["rank"].clone())
        .unwrap_or_else(|| panic!("no stage s2: {stages}"));
    let (status, diff) = server.request(
        "GET",
        &format!("/api/v1/runs/by-url-0/stages/{rank}/diff"),
        None,
    );
    assert_eq!(status, 200, "{diff}");
    assert!(
        diff.contains("+++ b/out.txt") && diff.contains("\n+s2\n"),
        "{diff}"
    );
    let resumed = shared.query(
        "SELECT count(*) FROM run_events WHERE envelope::jsonb ->> 'event' = 'WorkflowRunStarted' \
         AND (envelope::jsonb -> 'properties' ->> 'resumed')::boolean",
    );
    assert!(
        resumed.parse::<usize>().expect("a count") >= 1,
        "the kills took runs over ({resumed} resumed starts)"
    );
}

/// SPEC 18.3, 18.4.2: a worker paused longer than its lease pushes nothing more: the
/// remote's refs of the run stay those of the worker that took it over and finished it.
#[test]
fn a_paused_worker_pushes_nothing_after_another_took_its_run_over() {
    let env = TestEnv::new("repositories-sigstop");
    if !git_available("repositories_sigstop") {
        return;
    }
    let Some(shared) = Shared::create("repositories_sigstop", &env) else {
        return;
    };
    let first = env.work_dir().join("first-execution");
    let workflow = format!(
        "digraph build {{
  start [shape=Mdiamond]
  exit [shape=Msquare]
  prepare [shape=parallelogram, script=\"echo prepared > prepared.txt\"]
  long [shape=parallelogram, script=\"if [ -e {first} ]; then echo second > long.txt; else touch {first}; sleep 30; echo first > long.txt; fi\"]
  start -> prepare -> long -> exit
}}
",
        first = first.display()
    );
    let remote = remote_with(&env, &workflow);
    let server = shared.queueing_server(&env);
    let paused = Worker::start(&env, &shared, "paused", 1);
    queue_from(&server, &remote, "paused-run");
    paused.wait_until(
        Duration::from_secs(60),
        "the long stage never started",
        || first.exists(),
    );
    // The checkpoint after `prepare` is on the remote before `long` starts.
    let pushed = remote_refs(&env, &remote, "paused-run");
    assert_eq!(pushed.lines().count(), 2, "{pushed}");
    paused.signal(Signal::SIGSTOP);
    let other = Worker::start(&env, &shared, "other", 1);
    wait_for(
        &shared,
        "SELECT status || ' ' || owner FROM runs",
        "success other",
        Duration::from_secs(60),
        &[&paused, &other],
    );
    let finished = remote_refs(&env, &remote, "paused-run");
    assert_ne!(finished, pushed);
    paused.signal(Signal::SIGCONT);
    paused.wait_until(
        Duration::from_secs(15),
        "the paused worker said nothing",
        || paused.stderr().contains("lost the lease of run paused-run"),
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        remote_refs(&env, &remote, "paused-run"),
        finished,
        "the paused worker pushed nothing"
    );
    let git = |args: &[&str]| git_at(&env, &remote, args);
    assert_eq!(git(&["show", "fabro/run/paused-run:long.txt"]), "second");
    assert_eq!(
        git(&["show", "fabro/run/paused-run:prepared.txt"]),
        "prepared"
    );
    check_resumed(&shared, "paused-run", ["paused", "other"]);
}

/// SPEC 18.3: `fabro run --server` in a checkout with an `origin` sends its URL and
/// `HEAD`, refusing (exit 2) a tree with uncommitted changes and a `HEAD` that is not on
/// `origin`; the run's refs are pushed to `origin`.
#[test]
fn a_run_from_a_checkout_runs_on_its_origin_at_head() {
    let env = TestEnv::new("repositories-checkout");
    if !git_available("repositories_checkout") {
        return;
    }
    let remote = remote_with(
        &env,
        "digraph build {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  write [shape=parallelogram, script=\"cat README.md > copy.txt\"]
  start -> write -> exit
}
",
    );
    let checkout = env.work_dir().join("checkout");
    git_at(
        &env,
        &env.work_dir(),
        &["clone", "-q", remote.to_str().expect("UTF-8"), "checkout"],
    );
    let server = Server::start_local(&env, &[]);
    let url = server.url();
    let run = |run_id: &str| {
        env.command(env!("CARGO_BIN_EXE_fabro"))
            .current_dir(&checkout)
            .args([
                "run",
                "flows/build.fabro",
                "--auto-approve",
                "--run-id",
                run_id,
            ])
            .args(["--server", &url])
            .output()
            .expect("fabro runs")
    };
    fs_err::write(checkout.join("README.md"), "changed\n").expect("README changed");
    let dirty = run("dirty");
    assert_eq!(code(&dirty), 2, "{}", stderr(&dirty));
    assert!(
        stderr(&dirty).contains("uncommitted changes"),
        "{}",
        stderr(&dirty)
    );
    git_at(&env, &checkout, &["commit", "-q", "-am", "not pushed"]);
    let head = git_at(&env, &checkout, &["rev-parse", "HEAD"]);
    let unpushed = run("unpushed");
    assert_eq!(code(&unpushed), 2, "{}", stderr(&unpushed));
    assert!(
        stderr(&unpushed).contains(&format!("error: HEAD {head} is not pushed to origin")),
        "{}",
        stderr(&unpushed)
    );
    git_at(&env, &checkout, &["push", "-q", "origin", "main"]);
    let pushed = run("from-checkout");
    assert_eq!(code(&pushed), 0, "{}", stderr(&pushed));
    let git = |args: &[&str]| git_at(&env, &remote, args);
    assert_eq!(
        git(&["show", "fabro/run/from-checkout:copy.txt"]),
        "changed"
    );
    assert_eq!(
        git(&["merge-base", &head, "fabro/run/from-checkout"]),
        head,
        "the run branch starts at the checkout's HEAD"
    );
    let checkpoint: Value =
        serde_json::from_str(&git(&["show", "refs/fabro/from-checkout:checkpoint.json"]))
            .expect("the pushed checkpoint");
    assert_eq!(checkpoint["run_status"], "success");
    // A URL with credentials is refused without being repeated.
    let (status, body) = server.request(
        "POST",
        "/api/v1/runs",
        Some(&json!({
            "repository": {"url": "https://me:s3cret@example.invalid/r.git"},
            "workflow": "flows/build.fabro",
        })),
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("credentials") && !body.contains("s3cret"),
        "{body}"
    );
    git_at(
        &env,
        &checkout,
        &[
            "remote",
            "set-url",
            "origin",
            "https://me:s3cret@example.invalid/r.git",
        ],
    );
    let with_token = run("with-token");
    assert_eq!(code(&with_token), 2, "{}", stderr(&with_token));
    assert!(
        stderr(&with_token).contains("credentials") && !stderr(&with_token).contains("s3cret"),
        "{}",
        stderr(&with_token)
    );
    // Neither refused run left anything.
    for run_id in ["dirty", "unpushed"] {
        assert!(remote_refs(&env, &remote, run_id).is_empty());
    }
}
