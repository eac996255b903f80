//! Human gates away from a terminal (SPEC 17.4, 14.2): detached runs wait for
//! `fabro answer`, their timeout default still applies, and `fabro cancel` stops a
//! detached run so that it can be resumed.

use std::path::Path;
use std::time::{Duration, Instant};

use fabro_test_support::TestEnv;
use serde_json::Value;

use crate::{code, fabro, stderr, stdout};

/// A gate `review` choosing between `ship` and `revise`, each touching a file named
/// after itself; `gate_attributes` go on the gate.
fn gate_workflow(gate_attributes: &str) -> String {
    format!(
        "digraph w {{
  start [shape=Mdiamond]
  exit [shape=Msquare]
  review [shape=hexagon, label=\"Ship it?\"{gate_attributes}]
  ship [shape=parallelogram, script=\"touch shipped\"]
  revise [shape=parallelogram, script=\"touch revised\"]
  start -> review
  review -> ship [label=\"[A] Approve\"]
  review -> revise [label=\"[R] Revise\"]
  ship -> exit
  revise -> exit
}}
"
    )
}

fn events(run_dir: &Path) -> Vec<Value> {
    fs_err::read_to_string(run_dir.join("events.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

fn checkpoint(run_dir: &Path) -> Value {
    serde_json::from_str(
        &fs_err::read_to_string(run_dir.join("checkpoint.json")).expect("checkpoint"),
    )
    .expect("checkpoint is JSON")
}

/// Waits (at most 30 s) until `ready` holds.
fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `w.fabro` detached as run `run_id`; returns its run directory.
fn start_detached(env: &TestEnv, run_id: &str) -> std::path::PathBuf {
    let output = fabro(env, &["run", "w.fabro", "--detach", "--run-id", run_id]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    env.fabro_home().join("scratch").join(run_id)
}

fn human_answer(run_dir: &Path) -> Value {
    events(run_dir)
        .into_iter()
        .find(|event| event["event"] == "HumanAnswer")
        .expect("HumanAnswer event")
}

#[test]
fn detached_runs_wait_at_human_gates_for_fabro_answer() {
    let env = TestEnv::new("human_detached_answer");
    env.write("w.fabro", &gate_workflow(""));
    let run_dir = start_detached(&env, "h1");
    // The question is published where `fabro answer` finds it, and the run waits.
    let pending = run_dir.join("answers/pending.json");
    wait_for("the pending question", || pending.exists());
    let question: Value =
        serde_json::from_str(&fs_err::read_to_string(&pending).expect("pending.json"))
            .expect("pending.json is JSON");
    assert_eq!(question["node_id"], "review", "{question}");
    assert_eq!(question["text"], "Ship it?", "{question}");

    // An answer that matches nothing is refused, and the question stays open.
    let output = fabro(&env, &["answer", "h1", "later"]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("answer 'later' matches no option of gate review"),
        "{}",
        stderr(&output)
    );
    assert!(pending.exists());

    // A label (normalised, as in 5.5) routes the run along its edge.
    let output = fabro(&env, &["answer", "h1", "revise"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        stdout(&output).contains("[R] Revise"),
        "{}",
        stdout(&output)
    );
    let output = fabro(&env, &["events", "h1", "--follow"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(checkpoint(&run_dir)["run_status"], "success");
    assert!(env.work_dir().join("revised").exists());
    assert!(!env.work_dir().join("shipped").exists());
    let answer = human_answer(&run_dir);
    assert_eq!(answer["properties"]["source"], "api", "{answer}");
    assert_eq!(answer["properties"]["selected_key"], "R", "{answer}");
    assert!(
        !pending.exists(),
        "the answered question is no longer pending"
    );

    // Nothing is pending any more.
    let output = fabro(&env, &["answer", "h1", "a"]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("no pending human question"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn detached_human_gates_still_take_their_timeout_default() {
    let env = TestEnv::new("human_detached_timeout");
    env.write(
        "w.fabro",
        &gate_workflow(", timeout=\"1s\", human.default_choice=ship"),
    );
    let run_dir = start_detached(&env, "h2");
    let output = fabro(&env, &["events", "h2", "--follow"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(checkpoint(&run_dir)["run_status"], "success");
    assert!(env.work_dir().join("shipped").exists());
    let answer = human_answer(&run_dir);
    assert_eq!(
        answer["properties"]["source"], "timeout_default",
        "{answer}"
    );
    assert!(!run_dir.join("answers/pending.json").exists());
}

#[test]
fn answer_without_a_pending_question_exits_2() {
    let env = TestEnv::new("human_answer_none");
    env.write(
        "w.fabro",
        "digraph w { start [shape=Mdiamond]\n exit [shape=Msquare]\n start -> exit }\n",
    );
    let output = fabro(&env, &["run", "w.fabro", "--run-id", "n1"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let output = fabro(&env, &["answer", "n1", "yes"]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("run n1 has no pending human question"),
        "{}",
        stderr(&output)
    );
    let output = fabro(&env, &["answer", "nope-nope", "yes"]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
}

#[test]
fn cancel_stops_a_detached_run_which_can_then_resume() {
    let env = TestEnv::new("human_cancel");
    env.write(
        "w.fabro",
        "digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  work [shape=parallelogram, script=\"while [ ! -e go ]; do sleep 0.02; done; echo done > out.txt\"]
  start -> work -> exit
}
",
    );
    let run_dir = start_detached(&env, "c1");
    wait_for("the stage to start", || {
        events(&run_dir)
            .iter()
            .any(|event| event["event"] == "StageStarted" && event["node_id"] == "work")
    });
    let output = fabro(&env, &["cancel", "c1"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(checkpoint(&run_dir)["run_status"], "canceled");
    assert_eq!(checkpoint(&run_dir)["next_node_id"], "work");
    let output = fabro(&env, &["runs", "--json"]);
    let runs: Value = serde_json::from_str(&stdout(&output)).expect("runs --json");
    assert_eq!(runs[0]["status"], "canceled", "{runs}");

    // A canceled run is not running any more.
    let output = fabro(&env, &["cancel", "c1"]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("run c1 is not running"),
        "{}",
        stderr(&output)
    );
    let output = fabro(&env, &["cancel", "zzzz-unknown"]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));

    // It resumes from the interrupted stage.
    env.write("go", "");
    let output = fabro(&env, &["resume", "c1"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(checkpoint(&run_dir)["run_status"], "success");
    assert_eq!(
        fs_err::read_to_string(env.work_dir().join("out.txt")).expect("the work ran"),
        "done\n"
    );
}
