//! `fabro fork` (SPEC 20.2) on runs with git checkpointing: only the stages after the
//! checkpoint run, on a run branch that starts at the checkpoint's commit, with the
//! checkpoint's context, visit counts and simulated-provider cursors; the source is
//! left byte for byte as it was; an edited workflow runs if it still has every
//! completed node; a fork killed while it is set up can be resumed or made again.

use std::path::Path;

use fabro_test_support::TestEnv;
use serde_json::Value;

use crate::git::{git, git_available};
use crate::lifecycle::{assert_fsck_clean, find_run, kill, runs_json, spawn, wait_for_file};
use crate::{code, stderr};

/// Six stages, ranks 1 to 6: `start`, `a`, `think` (simulated, scripted), `b`, `c`,
/// `exit`. Every command appends its node to `trace` (outside the repository) and writes
/// a file of its own.
pub(crate) fn six_stages(trace: &Path, prompt: &str) -> String {
    let trace = trace.display();
    format!(
        r#"digraph six {{
  graph [goal="Fork and rewind"]
  start [shape=Mdiamond]
  exit [shape=Msquare]
  a [shape=parallelogram, script="echo a >> {trace}; echo a > a.txt"]
  think [shape=tab, prompt="{prompt}"]
  b [shape=parallelogram, script="echo b >> {trace}; echo b > b.txt"]
  c [shape=parallelogram, script="echo c >> {trace}; cat a.txt b.txt > c.txt"]
  start -> a -> think -> b -> c -> exit
}}
"#
    )
}

/// The simulated provider's script: `think` consumes one reply per visit.
const RESPONSES: &str =
    r#"{"nodes": {"think": [{"text": "first thought"}, {"text": "second thought"}]}}"#;

/// A repository with `w.fabro` committed, and the responses file outside it.
pub(crate) fn init_repo(env: &TestEnv, workflow: &str) {
    git(env, &["init", "-q", "-b", "main"]);
    env.write("w.fabro", workflow);
    git(env, &["add", "w.fabro"]);
    git(env, &["commit", "-q", "-m", "init"]);
    fs_err::write(env.fabro_home().join("responses.json"), RESPONSES).expect("responses");
}

/// `fabro {args}` with the scripted simulated provider.
pub(crate) fn fabro_sim(env: &TestEnv, args: &[&str]) -> std::process::Output {
    env.command(env!("CARGO_BIN_EXE_fabro"))
        .args(args)
        .env(
            "FABRO_SIMULATED_RESPONSES",
            env.fabro_home().join("responses.json"),
        )
        .output()
        .expect("fabro runs")
}

/// The trace's lines, then the trace emptied.
pub(crate) fn take_trace(env: &TestEnv) -> Vec<String> {
    let path = env.fabro_home().join("trace");
    let lines = fs_err::read_to_string(&path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    let _ = fs_err::remove_file(path);
    lines
}

/// `(rank, node)` of every `StageStarted` in the run's events.
pub(crate) fn started_stages(env: &TestEnv, run_id: &str) -> Vec<(u64, String)> {
    let events = fs_err::read_to_string(
        env.fabro_home()
            .join("scratch")
            .join(run_id)
            .join("events.jsonl"),
    )
    .expect("events");
    events
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["event"] == "StageStarted")
        .map(|event| {
            (
                event["properties"]["rank"].as_u64().expect("rank"),
                event["node_id"].as_str().expect("node").to_owned(),
            )
        })
        .collect()
}

/// The run-branch commit of `node`'s stage in run `run_id`.
pub(crate) fn stage_commit(env: &TestEnv, run_id: &str, node: &str) -> String {
    let log = git(
        env,
        &["log", "--format=%H %s", &format!("fabro/run/{run_id}")],
    );
    log.lines()
        .find_map(|line| {
            let (sha, subject) = line.split_once(' ')?;
            (subject == format!("fabro({run_id}): {node} (success)")).then(|| sha.to_owned())
        })
        .unwrap_or_else(|| panic!("no commit of {node} in {log}"))
}

/// The `checkpoint.json` of the run's metadata commit with subject `fabro({run_id}):
/// {subject}`.
fn metadata_checkpoint(env: &TestEnv, run_id: &str, subject: &str) -> Value {
    let log = git(
        env,
        &["log", "--format=%H %s", &format!("refs/fabro/{run_id}")],
    );
    let sha = log
        .lines()
        .find_map(|line| {
            let (sha, found) = line.split_once(' ')?;
            (found == format!("fabro({run_id}): {subject}")).then_some(sha)
        })
        .unwrap_or_else(|| panic!("no metadata commit {subject} in {log}"));
    serde_json::from_str(&git(env, &["show", &format!("{sha}:checkpoint.json")])).expect("JSON")
}

/// Every file of the run's directory with its bytes, and the run's refs: what a fork
/// must leave alone.
pub(crate) fn run_snapshot(env: &TestEnv, run_id: &str) -> (Vec<(String, Vec<u8>)>, String) {
    fn walk(directory: &Path, base: &Path, files: &mut Vec<(String, Vec<u8>)>) {
        for entry in fs_err::read_dir(directory).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, base, files);
            } else {
                let relative = path.strip_prefix(base).expect("inside");
                files.push((
                    relative.display().to_string(),
                    fs_err::read(&path).expect("read"),
                ));
            }
        }
    }
    let run_dir = env.fabro_home().join("scratch").join(run_id);
    let mut files = Vec::new();
    walk(&run_dir, &run_dir, &mut files);
    files.sort();
    let refs = git(env, &["for-each-ref", "--format=%(refname) %(objectname)"])
        .lines()
        .filter(|line| {
            line.contains(&format!("/{run_id} ")) || line.contains(&format!("/{run_id}/"))
        })
        .collect::<Vec<_>>()
        .join("\n");
    (files, refs)
}

fn manifest(env: &TestEnv, run_id: &str) -> Value {
    let path = env
        .fabro_home()
        .join("scratch")
        .join(run_id)
        .join("manifest.json");
    serde_json::from_str(&fs_err::read_to_string(path).expect("manifest")).expect("JSON")
}

/// The parts of a checkpoint a fork takes over (SPEC 20.2), without the two context
/// keys that name the run and its working directory.
fn inherited(checkpoint: &Value) -> Vec<Value> {
    let mut context = checkpoint["context_values"].clone();
    let map = context.as_object_mut().expect("context");
    map.remove("internal.run_id");
    map.remove("internal.work_dir");
    [
        "completed_nodes",
        "node_visits",
        "epoch_node_visits",
        "node_retries",
        "simulated_cursors",
        "stage_rank",
        "next_node_id",
    ]
    .iter()
    .map(|key| checkpoint[*key].clone())
    .chain([context])
    .collect()
}

#[test]
fn a_fork_at_stage_3_runs_stages_4_to_6_from_the_checkpoint_and_leaves_the_source_alone() {
    if !git_available("a_fork_at_stage_3_runs_stages_4_to_6_from_the_checkpoint") {
        return;
    }
    let env = TestEnv::new("fork_at_stage");
    let trace = env.fabro_home().join("trace");
    init_repo(&env, &six_stages(&trace, "Think"));
    let output = fabro_sim(&env, &["run", "w.fabro", "--run-id", "src"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(take_trace(&env), ["a", "b", "c"]);
    let before = run_snapshot(&env, "src");

    let output = fabro_sim(&env, &["fork", "src", "--at-rank", "3", "--run-id", "f1"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(take_trace(&env), ["b", "c"], "only stages 4 to 6 run");
    assert_eq!(
        started_stages(&env, "f1"),
        [
            (4, "b".to_owned()),
            (5, "c".to_owned()),
            (6, "exit".to_owned())
        ]
    );
    let manifest = manifest(&env, "f1");
    assert_eq!(manifest["parent_run_id"], "src");
    assert_eq!(manifest["forked_from"]["run_id"], "src");
    assert_eq!(manifest["forked_from"]["rank"], 3);
    // The fork's run branch grows from the source's stage-3 commit.
    let think = stage_commit(&env, "src", "think");
    let new_commits = git(
        &env,
        &["rev-list", "--reverse", &format!("{think}..fabro/run/f1")],
    );
    let first = new_commits.lines().next().expect("a new commit");
    assert_eq!(
        git(&env, &["rev-parse", &format!("{first}^")]).trim(),
        think
    );
    assert_eq!(git(&env, &["show", "fabro/run/f1:c.txt"]), "a\nb\n");
    // Its first checkpoint carries the source's state after stage 3.
    let source = metadata_checkpoint(&env, "src", "checkpoint think");
    let fork = metadata_checkpoint(&env, "f1", "initialize");
    assert_eq!(inherited(&fork), inherited(&source));
    assert_eq!(fork["context_values"]["internal.run_id"], "f1");
    assert_eq!(source["simulated_cursors"]["think"], 1);
    // The source is byte for byte as it was, and git is consistent.
    assert_eq!(run_snapshot(&env, "src"), before);
    assert_fsck_clean(&env);
    let inspect = crate::fabro(&env, &["inspect", "f1"]);
    assert!(
        crate::stdout(&inspect).contains("forked from: run src after stage 3"),
        "{}",
        crate::stdout(&inspect)
    );
}

#[test]
fn a_fork_runs_the_stored_workflow_or_an_edited_one_that_keeps_the_completed_nodes() {
    if !git_available("a_fork_runs_the_stored_workflow_or_an_edited_one") {
        return;
    }
    let env = TestEnv::new("fork_edited");
    let trace = env.fabro_home().join("trace");
    // `think` is stage 3: forking after `a` (stage 2) runs it again.
    init_repo(&env, &six_stages(&trace, "Think about the ORIGINAL plan"));
    let output = fabro_sim(&env, &["run", "w.fabro", "--run-id", "src"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    // The working directory's copy changes; a plain fork still runs the stored graph.
    env.write(
        "w.fabro",
        &six_stages(&trace, "Think about the CHANGED plan"),
    );
    let prompt = |run_id: &str| {
        fs_err::read_to_string(
            env.fabro_home()
                .join("scratch")
                .join(run_id)
                .join("stages/003-think@1/prompt.md"),
        )
        .expect("prompt.md")
    };
    let output = fabro_sim(&env, &["fork", "src", "--at", "a", "--run-id", "stored"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        prompt("stored").contains("ORIGINAL"),
        "{}",
        prompt("stored")
    );
    // `--workflow` runs the edited prompt.
    env.write(
        "edited.fabro",
        &six_stages(&trace, "Think about the EDITED plan"),
    );
    let output = fabro_sim(
        &env,
        &[
            "fork",
            "src",
            "--at",
            "a@1",
            "--workflow",
            "edited.fabro",
            "--run-id",
            "edited",
        ],
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(prompt("edited").contains("EDITED"), "{}", prompt("edited"));
    // A workflow without a completed node is refused, naming it; nothing is created.
    let dropped = six_stages(&trace, "Think")
        .replace("start -> a -> think", "start -> think")
        .replace(
            &format!(
                "  a [shape=parallelogram, script=\"echo a >> {}; echo a > a.txt\"]\n",
                trace.display()
            ),
            "",
        );
    env.write("dropped.fabro", &dropped);
    let output = fabro_sim(
        &env,
        &[
            "fork",
            "src",
            "--at-rank",
            "3",
            "--workflow",
            "dropped.fabro",
            "--run-id",
            "dropped",
        ],
    );
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(stderr(&output).contains("'a'"), "{}", stderr(&output));
    assert!(!env.fabro_home().join("scratch/dropped").exists());
    // An unknown stage is a usage error too.
    let output = fabro_sim(&env, &["fork", "src", "--at", "nowhere"]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("no stage nowhere"),
        "{}",
        stderr(&output)
    );
}

/// Crash safety: a fork killed with SIGKILL at each point of its set-up is either
/// nothing `fabro runs` lists (the fork is made again) or a run that resumes to the
/// end with stages 4 to 6 run once; the source is untouched and git stays consistent.
#[test]
fn a_fork_killed_during_set_up_is_resumed_or_made_again() {
    if !git_available("a_fork_killed_during_set_up_is_resumed_or_made_again") {
        return;
    }
    let env = TestEnv::new("fork_kill");
    let trace = env.fabro_home().join("trace");
    init_repo(&env, &six_stages(&trace, "Think"));
    let output = fabro_sim(&env, &["run", "w.fabro", "--run-id", "src"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    take_trace(&env);
    let before = run_snapshot(&env, "src");
    let responses = env.fabro_home().join("responses.json");
    let responses = responses.to_str().expect("utf-8");
    for point in ["before_manifest", "after_manifest", "after_git_setup"] {
        let fork_id = format!("kill-{point}").replace('_', "-");
        let marker = env.fabro_home().join(format!("test-paused-{point}"));
        let mut child = spawn(
            &env,
            &["fork", "src", "--at-rank", "3", "--run-id", &fork_id],
            &[
                ("FABRO_TEST_PAUSE_AT", point),
                ("FABRO_SIMULATED_RESPONSES", responses),
            ],
        );
        wait_for_file(&marker, &mut child, &format!("fork at {point}"));
        kill(child);
        fs_err::remove_file(&marker).expect("marker");
        let listed = find_run(&runs_json(&env), &fork_id).is_some();
        let finished = if listed {
            fabro_sim(&env, &["resume", &fork_id])
        } else {
            assert_eq!(point, "before_manifest");
            let again = format!("{fork_id}-again");
            let output = fabro_sim(&env, &["fork", "src", "--at-rank", "3", "--run-id", &again]);
            assert_eq!(started_stages(&env, &again).len(), 3, "{point}");
            output
        };
        assert_eq!(code(&finished), 0, "{point}: {}", stderr(&finished));
        assert_eq!(take_trace(&env), ["b", "c"], "{point}: each stage once");
        assert_eq!(
            run_snapshot(&env, "src"),
            before,
            "{point}: the source changed"
        );
        assert_fsck_clean(&env);
    }
}
