//! Agent and prompt stages end to end (SPEC 5.2, 5.3, 6.6, 7): a plan → implement →
//! review workflow on the simulated provider where the agent writes files through
//! scripted tool calls, stage files per visit, fidelity, threads and output schemas.

use std::path::Path;

use fabro_test_support::TestEnv;
use serde_json::{json, Value};

use crate::{code, stderr};

/// Runs `workflow` as `w.fabro` (run id `r1`) with the simulated provider scripted by
/// `responses`; returns the output and the run directory.
fn run_scripted(
    env: &TestEnv,
    workflow: &str,
    responses: &Value,
) -> (std::process::Output, std::path::PathBuf) {
    env.write("w.fabro", workflow);
    env.write("responses.json", &responses.to_string());
    let output = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro", "--run-id", "r1"])
        .env(
            "FABRO_SIMULATED_RESPONSES",
            env.work_dir().join("responses.json"),
        )
        .output()
        .expect("fabro runs");
    (output, env.fabro_home().join("scratch/r1"))
}

fn read(path: &Path) -> String {
    fs_err::read_to_string(path).unwrap_or_else(|error| panic!("{error}"))
}

fn json_file(path: &Path) -> Value {
    serde_json::from_str(&read(path)).expect("valid JSON")
}

fn events(run_dir: &Path) -> Vec<Value> {
    read(&run_dir.join("events.jsonl"))
        .lines()
        .map(|line| serde_json::from_str(line).expect("event line"))
        .collect()
}

fn write_call(path: &str, content: &str) -> Value {
    json!({"tool_calls": [{"name": "write_file", "arguments": {"file_path": path, "content": content}}]})
}

const PLAN_IMPLEMENT_REVIEW: &str = r#"digraph w {
  graph [goal="Add a greeting module"]
  start [shape=Mdiamond]
  exit [shape=Msquare]
  plan [shape=tab, prompt="Plan: $goal"]
  implement [shape=box, prompt="Implement the plan"]
  review [shape=tab, prompt="Review the change"]
  start -> plan -> implement -> review
  review -> implement [label="revise"]
  review -> exit [label="approve"]
}
"#;

#[test]
fn plan_implement_review_loops_once_and_succeeds() {
    let env = TestEnv::new("stages_pir");
    let responses = json!({"nodes": {
        "plan": [{"text": "1. Write src/greet.rs"}],
        "implement": [
            write_call("src/greet.rs", "pub fn greet() {}\n"),
            {"text": "Implemented greet."},
            write_call("src/greet.rs", "/// Greets.\npub fn greet() {}\n"),
            {"text": "Documented greet."}
        ],
        "review": [
            {"text": "The function lacks docs.\n\nMy verdict: {\"preferred_next_label\": \"revise\", \"context_updates\": {\"review_round\": 1}} Please fix."},
            {"text": "Looks good now. {\"preferred_next_label\": \"approve\"}"}
        ]
    }});
    let (output, run_dir) = run_scripted(&env, PLAN_IMPLEMENT_REVIEW, &responses);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(
        read(&env.work_dir().join("src/greet.rs")),
        "/// Greets.\npub fn greet() {}\n"
    );
    let visits = [
        ("002-plan@1", "plan"),
        ("003-implement@1", "implement"),
        ("004-review@1", "review"),
        ("005-implement@2", "implement"),
        ("006-review@2", "review"),
    ];
    for (dir, node) in visits {
        let stage = run_dir.join("stages").join(dir);
        for file in ["prompt.md", "response.md", "status.json"] {
            assert!(stage.join(file).is_file(), "{dir}/{file} missing");
        }
        let status = json_file(&stage.join("status.json"));
        assert_eq!(status["node_id"], node);
        assert_eq!(status["status"], "success");
        assert_eq!(status["model"], "simulated");
    }
    let implement = json_file(&run_dir.join("stages/003-implement@1/status.json"));
    assert_eq!(implement["files_touched"], json!(["src/greet.rs"]));
    assert_eq!(
        read(&run_dir.join("stages/003-implement@1/response.md")),
        "Implemented greet."
    );
    let review = json_file(&run_dir.join("stages/004-review@1/status.json"));
    assert_eq!(review["preferred_next_label"], "revise");
    // The second implement visit sees the earlier stages in its compact preamble.
    let prompt = read(&run_dir.join("stages/005-implement@2/prompt.md"));
    assert!(
        prompt.starts_with("Goal: Add a greeting module\n"),
        "{prompt}"
    );
    assert!(prompt.contains("- **implement**: success\n"), "{prompt}");
    assert!(prompt.contains("  - Files: src/greet.rs\n"), "{prompt}");
    assert!(prompt.contains("- review_round: 1\n"), "{prompt}");
    assert!(prompt.ends_with("\n\nImplement the plan"), "{prompt}");
    let events = events(&run_dir);
    let completed: Vec<&Value> = events
        .iter()
        .filter(|event| event["event"] == "StageCompleted" && event["node_id"] == "implement")
        .collect();
    assert_eq!(completed.len(), 2);
    assert_eq!(
        completed[0]["properties"]["files_touched"],
        json!(["src/greet.rs"])
    );
    let tool_calls = events
        .iter()
        .filter(|event| event["event"] == "Agent.ToolCallStarted")
        .count();
    assert_eq!(tool_calls, 2);
    let checkpoint = json_file(&run_dir.join("checkpoint.json"));
    assert_eq!(
        checkpoint["node_outcomes"]["implement"]["files_touched"],
        json!(["src/greet.rs"])
    );
    assert_eq!(
        checkpoint["context_values"]["last_stage"], "review",
        "{checkpoint}"
    );
}

#[test]
fn full_fidelity_continues_the_thread_without_a_preamble() {
    let env = TestEnv::new("stages_full");
    let workflow = r#"digraph w {
  graph [goal="g", default_fidelity="full"]
  start [shape=Mdiamond]
  exit [shape=Msquare]
  ask [shape=tab, prompt="Question one"]
  follow [shape=tab, prompt="Question two"]
  brief [shape=tab, prompt="Summarise", fidelity="truncate"]
  start -> ask -> follow -> brief -> exit
}
"#;
    let (output, run_dir) = run_scripted(&env, workflow, &json!({}));
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(
        read(&run_dir.join("stages/003-follow@1/prompt.md")),
        "Question two"
    );
    assert_eq!(
        read(&run_dir.join("stages/004-brief@1/prompt.md")),
        "Goal: g\nRun ID: r1\n\nSummarise"
    );
}

#[test]
fn a_custom_schema_that_is_never_met_fails_the_run_with_the_exact_reason() {
    let env = TestEnv::new("stages_schema");
    let workflow = r#"digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  judge [shape=tab, output_retries=2, output_schema="{\"type\":\"object\",\"required\":[\"score\"]}"]
  start -> judge
  judge -> exit [condition="outcome=success"]
}
"#;
    let responses = json!({"nodes": {"judge": [{"text": "{\"grade\": 1}"}]}});
    let (output, run_dir) = run_scripted(&env, workflow, &responses);
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    let status = json_file(&run_dir.join("stages/002-judge@1/status.json"));
    assert_eq!(
        status["failure_reason"],
        "output schema validation failed after 2 repair attempt(s)"
    );
    assert_eq!(status["failure_class"], "deterministic");
    let repairs: Vec<Value> = events(&run_dir)
        .into_iter()
        .filter(|event| event["event"] == "StageOutputRepair")
        .collect();
    assert_eq!(repairs.len(), 2);
    assert_eq!(repairs[1]["properties"]["attempt"], 2);
    assert_eq!(repairs[1]["properties"]["max"], 2);
}

#[test]
fn a_custom_schema_that_is_met_stores_the_output_for_conditions() {
    let env = TestEnv::new("stages_output");
    let workflow = r#"digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  judge [shape=tab, output_schema="{\"type\":\"object\",\"required\":[\"score\"]}"]
  high [shape=parallelogram, script="echo high"]
  start -> judge
  judge -> high [condition="context.last_stage=judge"]
  high -> exit
}
"#;
    let responses =
        json!({"nodes": {"judge": [{"text": "Score: {\"score\": 9, \"outcome\": \"fail\"}"}]}});
    let (output, run_dir) = run_scripted(&env, workflow, &responses);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let checkpoint = json_file(&run_dir.join("checkpoint.json"));
    assert_eq!(
        checkpoint["context_values"]["output.judge"],
        json!({"score": 9, "outcome": "fail"})
    );
    assert_eq!(checkpoint["node_outcomes"]["judge"]["status"], "success");
}

#[test]
fn node_retries_keep_the_stage_files_of_every_attempt() {
    let env = TestEnv::new("stages_retry");
    let workflow = r#"digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  graph [goal="g"]
  flaky [shape=tab, prompt="Try", max_retries=1]
  start -> flaky -> exit
}
"#;
    // A routing status of `retry` retries the node (LLM-level errors are retried inside
    // the call by the LLM layer, so they would not reach the node's retry policy).
    let responses =
        json!({"nodes": {"flaky": [{"text": "not yet {\"outcome\": \"retry\"}"}, {"text": "ok"}]}});
    let (output, run_dir) = run_scripted(&env, workflow, &responses);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let stage = run_dir.join("stages/002-flaky@1");
    assert_eq!(read(&stage.join("attempts/1/prompt.md")), "Goal: g\n\nTry");
    let first = json_file(&stage.join("attempts/1/status.json"));
    assert_eq!(first["status"], "retry");
    assert_eq!(read(&stage.join("prompt.md")), "Goal: g\n\nTry");
    assert_eq!(read(&stage.join("response.md")), "ok");
    assert_eq!(json_file(&stage.join("status.json"))["attempt"], 2);
}

/// Issue 6's acceptance run inside a git repository: the files the implement agent wrote
/// through tool calls are on the run branch, commit by commit, and the user's checkout
/// is untouched.
#[test]
fn plan_implement_review_in_a_repository_commits_the_agent_work() {
    if !crate::git::git_available("plan_implement_review_in_a_repository_commits_the_agent_work") {
        return;
    }
    let env = TestEnv::new("stages_pir_git");
    let git = |args: &[&str]| {
        let output = env.command("git").args(args).output().expect("git runs");
        assert!(output.status.success(), "git {args:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let responses = json!({"nodes": {
        "plan": [{"text": "1. Write src/greet.rs"}],
        "implement": [
            write_call("src/greet.rs", "pub fn greet() {}\n"),
            {"text": "Implemented greet."},
            write_call("src/greet.rs", "/// Greets.\npub fn greet() {}\n"),
            {"text": "Documented greet."}
        ],
        "review": [
            {"text": "Needs docs. {\"preferred_next_label\": \"revise\"}"},
            {"text": "Good. {\"preferred_next_label\": \"approve\"}"}
        ]
    }});
    env.write("w.fabro", PLAN_IMPLEMENT_REVIEW);
    env.write("responses.json", &responses.to_string());
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "w.fabro", "responses.json"]);
    git(&["commit", "-q", "-m", "init"]);
    let output = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro", "--run-id", "r1"])
        .env(
            "FABRO_SIMULATED_RESPONSES",
            env.work_dir().join("responses.json"),
        )
        .output()
        .expect("fabro runs");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        !env.work_dir().join("src").exists(),
        "the user's tree changed"
    );
    assert_eq!(
        git(&["show", "fabro/run/r1:src/greet.rs"]),
        "/// Greets.\npub fn greet() {}\n"
    );
    let subjects = git(&["log", "--format=%s", "fabro/run/r1"]);
    let first_implement = git(&[
        "log",
        "--format=%H",
        "--grep=^fabro(r1): implement",
        "fabro/run/r1",
    ]);
    let first_implement = first_implement.lines().last().expect("an implement commit");
    assert_eq!(
        git(&["show", &format!("{first_implement}:src/greet.rs")]),
        "pub fn greet() {}\n",
        "{subjects}"
    );
    let stage_files = git(&["ls-tree", "-r", "--name-only", "refs/fabro/r1"]);
    for file in [
        "stages/003-implement@1/prompt.md",
        "stages/003-implement@1/response.md",
        "stages/005-implement@2/diff.patch",
        "nodes/review/response.md",
    ] {
        assert!(stage_files.lines().any(|line| line == file), "{file}");
    }
}
