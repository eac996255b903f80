//! Git isolation of parallel branches (SPEC 5.7) and the fan-in move of the run branch
//! (SPEC 5.8), checked with the `git` command on the real binary; plus the `skipped` stage
//! of a branch cancelled by a satisfied `first_success` join.

use std::path::{Path, PathBuf};

use fabro_test_support::TestEnv;
use serde_json::Value;

use crate::{code, fabro, stderr};

use crate::git::{git_available, snapshot};

/// `git` with its output trimmed.
fn git(env: &TestEnv, args: &[&str]) -> String {
    crate::git::git(env, args).trim().to_owned()
}

/// Whether `git` succeeds with `args`.
fn git_ok(env: &TestEnv, args: &[&str]) -> bool {
    env.command("git")
        .args(args)
        .output()
        .expect("git runs")
        .status
        .success()
}

/// A repository whose one commit holds `w.fabro` with `workflow`.
fn init_repo(env: &TestEnv, workflow: &str) {
    git(env, &["init", "-q", "-b", "main"]);
    env.write("w.fabro", workflow);
    env.write("README.md", "user file\n");
    git(env, &["add", "w.fabro", "README.md"]);
    git(env, &["commit", "-q", "-m", "init"]);
}

fn run(env: &TestEnv) -> (std::process::Output, PathBuf) {
    let output = fabro(env, &["run", "w.fabro", "--run-id", "r1"]);
    (output, env.fabro_home().join("scratch/r1"))
}

fn events(run_dir: &Path) -> Vec<Value> {
    fs_err::read_to_string(run_dir.join("events.jsonl"))
        .expect("events written")
        .lines()
        .map(|line| serde_json::from_str(line).expect("valid event line"))
        .collect()
}

fn warnings(run_dir: &Path, code: &str) -> usize {
    events(run_dir)
        .iter()
        .filter(|event| event["event"] == "Warning" && event["properties"]["code"] == code)
        .count()
}

fn checkpoint(run_dir: &Path) -> Value {
    serde_json::from_str(
        &fs_err::read_to_string(run_dir.join("checkpoint.json")).expect("checkpoint"),
    )
    .expect("json")
}

fn assert_fsck_clean(env: &TestEnv) {
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
}

/// Branch `a` (two stages) and branch `b` (one stage) each write their own file and check
/// that the other's is absent while both run; the fan-in node joins them.
const FAN_IN: &str = r#"digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  fan [shape=component]
  a [shape=parallelogram, script="echo A > a.txt; sleep 0.3; test ! -e b.txt"]
  a2 [shape=parallelogram, script="test -e a.txt && test ! -e b.txt"]
  b [shape=parallelogram, script="echo B > b.txt; sleep 0.3; test ! -e a.txt"]
  merge [shape=tripleoctagon]
  after [shape=parallelogram, script="cat a.txt > seen.txt"]
  start -> fan
  fan -> a -> a2 -> merge
  fan -> b -> merge
  merge -> after -> exit
}
"#;

#[test]
fn branches_run_in_their_own_worktrees_and_the_fan_in_takes_the_best() {
    if !git_available("branches_run_in_their_own_worktrees_and_the_fan_in_takes_the_best") {
        return;
    }
    let env = TestEnv::new("parallel_git_fan_in");
    init_repo(&env, FAN_IN);
    let before = snapshot(&env);
    let (output, run_dir) = run(&env);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(snapshot(&env), before, "the user's repository changed");

    // One commit per branch stage on fabro/parallel/r1/fan/1/{target}, from the base.
    let base = git(
        &env,
        &[
            "log",
            "--format=%H",
            "--grep=^fabro(r1): start",
            "fabro/run/r1",
        ],
    );
    let a_ref = "fabro/parallel/r1/fan/1/a";
    let b_ref = "fabro/parallel/r1/fan/1/b";
    assert_eq!(
        git(&env, &["log", "--format=%s", &format!("{base}..{a_ref}")]),
        "fabro(r1): a2 (success)\nfabro(r1): a (success)"
    );
    assert_eq!(
        git(&env, &["log", "--format=%s", &format!("{base}..{b_ref}")]),
        "fabro(r1): b (success)"
    );
    assert_eq!(
        git(&env, &["log", "-1", "--format=%b", a_ref]),
        "Fabro-Run: r1\nFabro-Parallel: fan@1/a"
    );
    let a_head = git(&env, &["rev-parse", a_ref]);
    let b_head = git(&env, &["rev-parse", b_ref]);
    assert!(git_ok(&env, &["cat-file", "-e", &format!("{a_ref}:a.txt")]));
    assert!(!git_ok(
        &env,
        &["cat-file", "-e", &format!("{a_ref}:b.txt")]
    ));
    assert_eq!(git(&env, &["show", &format!("{b_ref}:b.txt")]), "B");

    // parallel.results, the events and the fan-in name the same heads.
    let context = &checkpoint(&run_dir)["context_values"];
    let results = context["parallel.results"].as_array().expect("results");
    let heads: Vec<(&str, &str)> = results
        .iter()
        .map(|result| {
            (
                result["id"].as_str().unwrap_or_default(),
                result["head_sha"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(heads, [("a", a_head.as_str()), ("b", b_head.as_str())]);
    assert_eq!(context["parallel.fan_in.best_id"], "a");
    assert_eq!(context["parallel.fan_in.best_head_sha"], a_head.as_str());
    let all = events(&run_dir);
    let mut completed_heads: Vec<(String, String)> = all
        .iter()
        .filter(|event| event["event"] == "ParallelBranchCompleted")
        .map(|event| {
            (
                event["node_id"].as_str().unwrap_or_default().to_owned(),
                event["properties"]["head_sha"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    completed_heads.sort();
    assert_eq!(
        completed_heads,
        [("a".to_owned(), a_head.clone()), ("b".to_owned(), b_head)]
    );
    let selected = all
        .iter()
        .find(|event| event["event"] == "FanInSelected")
        .expect("FanInSelected");
    assert_eq!(selected["properties"]["best_head_sha"], a_head.as_str());
    assert_eq!(warnings(&run_dir, "parallel_no_isolation"), 0);

    // The run branch went through a's head; the parallel stage's commit was kept on top.
    assert_eq!(
        git(
            &env,
            &["log", "--format=%s", &format!("{base}..fabro/run/r1")]
        ),
        [
            "fabro(r1): exit (success)",
            "fabro(r1): after (success)",
            "fabro(r1): merge (success)",
            "fabro(r1): fan (success)",
            "fabro(r1): a2 (success)",
            "fabro(r1): a (success)",
        ]
        .join("\n")
    );
    assert!(git_ok(
        &env,
        &["merge-base", "--is-ancestor", &a_head, "fabro/run/r1"]
    ));
    assert_eq!(git(&env, &["show", "fabro/run/r1:a.txt"]), "A");
    assert_eq!(git(&env, &["show", "fabro/run/r1:seen.txt"]), "A");
    assert!(!git_ok(&env, &["cat-file", "-e", "fabro/run/r1:b.txt"]));

    // Every stage is recorded; worktrees are gone, branches stay.
    let checkpoint = checkpoint(&run_dir);
    let nodes: Vec<&str> = checkpoint["completed_nodes"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(nodes[..2], ["start", "fan"]);
    assert_eq!(nodes[5..], ["merge", "after", "exit"]);
    let mut branch_nodes = nodes[2..5].to_vec();
    branch_nodes.sort_unstable();
    assert_eq!(branch_nodes, ["a", "a2", "b"]);
    assert!(!run_dir.join("branches/fan@1").exists());
    assert_eq!(git(&env, &["worktree", "list"]).lines().count(), 1);
    assert_fsck_clean(&env);
}

/// The same file written with different contents; branch `a` fails, and the join node is
/// an ordinary command, so the parallel stage itself moves the run branch to `b`.
const SAME_FILE: &str = r#"digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  fan [shape=component]
  a [shape=parallelogram, script="echo A > out.txt; sleep 0.3; grep -qx A out.txt; exit 1"]
  b [shape=parallelogram, script="echo B > out.txt; sleep 0.3; grep -qx B out.txt"]
  join [shape=parallelogram, script="cp out.txt seen.txt"]
  start -> fan
  fan -> a -> join
  fan -> b -> join
  join -> exit
}
"#;

#[test]
fn without_a_fan_in_node_the_parallel_stage_moves_the_run_branch_to_the_best_success() {
    if !git_available(
        "without_a_fan_in_node_the_parallel_stage_moves_the_run_branch_to_the_best_success",
    ) {
        return;
    }
    let env = TestEnv::new("parallel_git_same_file");
    init_repo(&env, SAME_FILE);
    let before = snapshot(&env);
    let (output, run_dir) = run(&env);
    // wait_all with a failed branch: partial_success.
    assert_eq!(code(&output), 3, "{}", stderr(&output));
    assert_eq!(snapshot(&env), before, "the user's repository changed");
    assert_eq!(
        git(&env, &["show", "fabro/parallel/r1/fan/1/a:out.txt"]),
        "A"
    );
    assert_eq!(
        git(&env, &["show", "fabro/parallel/r1/fan/1/b:out.txt"]),
        "B"
    );
    assert_eq!(
        git(
            &env,
            &["log", "-1", "--format=%s", "fabro/parallel/r1/fan/1/a"]
        ),
        "fabro(r1): a (fail)"
    );
    let b_head = git(&env, &["rev-parse", "fabro/parallel/r1/fan/1/b"]);
    assert!(git_ok(
        &env,
        &["merge-base", "--is-ancestor", &b_head, "fabro/run/r1"]
    ));
    assert_eq!(git(&env, &["show", "fabro/run/r1:out.txt"]), "B");
    assert_eq!(git(&env, &["show", "fabro/run/r1:seen.txt"]), "B");
    assert_eq!(warnings(&run_dir, "parallel_no_isolation"), 0);
    assert_fsck_clean(&env);
}

#[test]
fn without_git_branches_share_the_working_directory_with_a_warning() {
    let env = TestEnv::new("parallel_no_git");
    env.write("w.fabro", SAME_FILE);
    let (output, run_dir) = run(&env);
    assert_eq!(code(&output), 3, "{}", stderr(&output));
    assert_eq!(warnings(&run_dir, "parallel_no_isolation"), 1);
    let context = &checkpoint(&run_dir)["context_values"];
    for result in context["parallel.results"].as_array().expect("results") {
        assert!(result["head_sha"].is_null(), "{result}");
    }
    assert!(env.work_dir().join("seen.txt").exists());
}

/// `fast` waits until `slow` is running, so `slow` is cancelled in the middle of its stage.
fn first_success_workflow(marker: &Path, late: &Path) -> String {
    format!(
        r#"digraph w {{
  start [shape=Mdiamond]
  exit [shape=Msquare]
  fan [shape=component, join_policy=first_success]
  fast [shape=parallelogram, script="while [ ! -e {marker} ]; do sleep 0.02; done; echo fast > fast.txt"]
  slow [shape=parallelogram, script="touch {marker}; sleep 20; touch {late}"]
  merge [shape=tripleoctagon]
  start -> fan
  fan -> fast -> merge
  fan -> slow -> merge
  merge -> exit
}}
"#,
        marker = marker.display(),
        late = late.display()
    )
}

fn assert_slow_stage_skipped(run_dir: &Path) {
    let stages: Vec<PathBuf> = fs_err::read_dir(run_dir.join("stages"))
        .expect("stages")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.to_string_lossy().ends_with("-slow@1"))
        .collect();
    assert_eq!(stages.len(), 1, "{stages:?}");
    let status: Value = serde_json::from_str(
        &fs_err::read_to_string(stages[0].join("status.json")).expect("status.json of slow"),
    )
    .expect("json");
    assert_eq!(status["status"], "skipped");
    assert_eq!(
        status["notes"],
        "canceled: join policy first_success satisfied"
    );
    let context = &checkpoint(run_dir)["context_values"];
    let results = context["parallel.results"].as_array().expect("results");
    assert_eq!(results[0]["status"], "success");
    assert_eq!(results[1]["status"], "skipped");
    assert_eq!(context["parallel.fan_in.best_id"], "fast");
    let completed = events(run_dir)
        .into_iter()
        .find(|event| event["event"] == "ParallelCompleted")
        .expect("ParallelCompleted");
    assert_eq!(completed["properties"]["failure_count"], 0);
}

#[test]
fn first_success_ends_the_cancelled_branch_stage_skipped_with_its_status_file() {
    if !git_available("first_success_ends_the_cancelled_branch_stage_skipped_with_its_status_file")
    {
        return;
    }
    let env = TestEnv::new("parallel_git_first_success");
    let marker = env.fabro_home().join("slow-started");
    let late = env.fabro_home().join("late");
    init_repo(&env, &first_success_workflow(&marker, &late));
    let started = std::time::Instant::now();
    let (output, run_dir) = run(&env);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "the slow branch was not cancelled"
    );
    assert!(!late.exists());
    assert_slow_stage_skipped(&run_dir);
    // The cancelled stage is committed on its branch like any other.
    assert_eq!(
        git(
            &env,
            &["log", "-1", "--format=%s", "fabro/parallel/r1/fan/1/slow"]
        ),
        "fabro(r1): slow (skipped)"
    );
    assert_eq!(git(&env, &["show", "fabro/run/r1:fast.txt"]), "fast");
    assert_fsck_clean(&env);
}

#[test]
fn first_success_without_git_also_writes_the_skipped_status_file() {
    let env = TestEnv::new("parallel_first_success_no_git");
    let marker = env.fabro_home().join("slow-started");
    let late = env.fabro_home().join("late");
    env.write("w.fabro", &first_success_workflow(&marker, &late));
    let (output, run_dir) = run(&env);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(!late.exists());
    assert_slow_stage_skipped(&run_dir);
}

/// A parallel stage inside a branch builds on that branch: its branches start from the
/// outer branch's worktree and its fan-in moves the outer branch.
const NESTED: &str = r#"digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  outer [shape=component]
  x [shape=parallelogram, script="echo x > x.txt"]
  inner [shape=component]
  y1 [shape=parallelogram, script="test -e x.txt && echo y1 > y1.txt"]
  y2 [shape=parallelogram, script="test -e x.txt && test ! -e y1.txt && echo y2 > y2.txt"]
  ij [shape=tripleoctagon]
  z [shape=parallelogram, script="test ! -e x.txt && echo z > z.txt"]
  m [shape=tripleoctagon]
  start -> outer
  outer -> x -> inner
  inner -> y1 -> ij
  inner -> y2 -> ij
  ij -> m
  outer -> z -> m
  m -> exit
}
"#;

#[test]
fn a_nested_parallel_stage_builds_on_its_enclosing_branch() {
    if !git_available("a_nested_parallel_stage_builds_on_its_enclosing_branch") {
        return;
    }
    let env = TestEnv::new("parallel_git_nested");
    init_repo(&env, NESTED);
    let (output, run_dir) = run(&env);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let files = git(&env, &["ls-tree", "--name-only", "fabro/run/r1"]);
    assert_eq!(
        files.lines().collect::<Vec<_>>(),
        ["README.md", "w.fabro", "x.txt", "y1.txt"]
    );
    assert_eq!(
        git(&env, &["show", "fabro/parallel/r1/inner/1/y2:y2.txt"]),
        "y2"
    );
    assert!(git_ok(
        &env,
        &[
            "merge-base",
            "--is-ancestor",
            "fabro/parallel/r1/inner/1/y1",
            "fabro/parallel/r1/outer/1/x"
        ]
    ));
    assert_eq!(warnings(&run_dir, "parallel_no_isolation"), 0);
    assert!(!run_dir.join("branches/inner@1").exists());
    assert!(!run_dir.join("branches/outer@1").exists());
    assert_eq!(git(&env, &["worktree", "list"]).lines().count(), 1);
    assert_fsck_clean(&env);
}
