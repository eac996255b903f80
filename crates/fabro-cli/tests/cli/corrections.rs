//! SPEC 17.7: command stages record the files their run-branch commit changed, and
//! `fabro inspect` names the node whose stage is running, with its elapsed time.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use fabro_test_support::TestEnv;
use serde_json::Value;

use crate::git::{git, git_available};
use crate::{code, fabro, stderr, stdout};

const WORKFLOW: &str = r#"digraph files {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  write [shape=parallelogram, script="mkdir -p out && echo one > out/a.txt && echo two > b.txt"]
  none [shape=parallelogram, script="echo nothing"]
  start -> write -> none -> exit
}
"#;

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&fs_err::read_to_string(path).expect("file exists")).expect("JSON")
}

fn files_completed(run_dir: &Path, node: &str) -> Value {
    fs_err::read_to_string(run_dir.join("events.jsonl"))
        .expect("events")
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("event JSON"))
        .find(|event| event["event"] == "StageCompleted" && event["node_id"] == node)
        .map(|event| event["properties"]["files_touched"].clone())
        .expect("a StageCompleted event")
}

#[test]
fn command_stages_record_the_files_of_their_commit() {
    if !git_available("command_stages_record_the_files_of_their_commit") {
        return;
    }
    let env = TestEnv::new("command_files");
    git(&env, &["init", "-q", "-b", "main"]);
    env.write("w.fabro", WORKFLOW);
    git(&env, &["add", "w.fabro"]);
    git(&env, &["commit", "-q", "-m", "init"]);
    let output = fabro(&env, &["run", "w.fabro", "--run-id", "files"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let run_dir = env.fabro_home().join("scratch/files");

    let status = read_json(&run_dir.join("stages/002-write@1/status.json"));
    assert_eq!(
        status["files_touched"],
        serde_json::json!(["b.txt", "out/a.txt"])
    );
    assert_eq!(files_completed(&run_dir, "write"), status["files_touched"]);
    let changed = git(
        &env,
        // The run branch: start, write, none, exit.
        &[
            "diff-tree",
            "--no-commit-id",
            "--name-only",
            "-r",
            "fabro/run/files~2",
        ],
    );
    let changed: Vec<&str> = changed.lines().collect();
    assert_eq!(changed, ["b.txt", "out/a.txt"], "the stage's commit");
    let status = read_json(&run_dir.join("stages/003-none@1/status.json"));
    assert_eq!(status["files_touched"], serde_json::json!([]));

    let inspect = stdout(&fabro(&env, &["inspect", "files"]));
    let row = inspect
        .lines()
        .find(|line| line.split_whitespace().nth(1) == Some("write"))
        .unwrap_or_else(|| panic!("a row of write: {inspect}"));
    assert_eq!(row.split_whitespace().last(), Some("2"), "FILES: {row}");
}

#[test]
fn without_git_command_stages_touch_no_files() {
    let env = TestEnv::new("command_files_no_git");
    env.write("w.fabro", WORKFLOW);
    let output = fabro(&env, &["run", "w.fabro", "--run-id", "nogit"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let run_dir = env.fabro_home().join("scratch/nogit");
    let status = read_json(&run_dir.join("stages/002-write@1/status.json"));
    assert_eq!(status["files_touched"], serde_json::json!([]));
}

fn spawn_fabro(env: &TestEnv, args: &[&str]) -> Child {
    env.command(env!("CARGO_BIN_EXE_fabro"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fabro starts")
}

fn wait_for_file(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn inspect_names_the_running_stage_and_its_elapsed_time() {
    let env = TestEnv::new("inspect_running");
    env.write(
        "w.fabro",
        "digraph w {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  hold [shape=parallelogram, script=\"touch started; while [ ! -f go ]; do sleep 0.02; done\"]\n  start -> hold -> exit\n}\n",
    );
    let child = spawn_fabro(&env, &["run", "w.fabro", "--run-id", "held"]);
    wait_for_file(&env.work_dir().join("started"));
    std::thread::sleep(Duration::from_millis(300));

    let output = fabro(&env, &["inspect", "held", "--json"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let json: Value = serde_json::from_str(&stdout(&output)).expect("JSON");
    assert_eq!(json["current_node"], "hold", "{json}");
    let stage = &json["stages"][1];
    assert_eq!(stage["node_id"], "hold");
    assert_eq!(stage["status"], "running");
    let elapsed = stage["duration_ms"].as_u64().unwrap_or(0);
    assert!(elapsed >= 300, "the running stage's elapsed time: {stage}");

    let text = stdout(&fabro(&env, &["inspect", "held"]));
    assert!(text.contains("\ncurrent node: hold\n"), "{text}");
    let row = text
        .lines()
        .find(|line| line.split_whitespace().nth(1) == Some("hold"))
        .unwrap_or_else(|| panic!("a row of hold: {text}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[4], "running", "{row}");
    assert!(
        cells[6].ends_with('s') && cells[6] != "-",
        "the elapsed time in DURATION: {row}"
    );

    fs_err::write(env.work_dir().join("go"), "").expect("writes");
    let output = child.wait_with_output().expect("the run ends");
    assert_eq!(
        code(&output),
        0,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: Value =
        serde_json::from_str(&stdout(&fabro(&env, &["inspect", "held", "--json"]))).expect("JSON");
    assert_eq!(json["current_node"], "exit");
}
