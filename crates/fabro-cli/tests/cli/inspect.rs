//! `fabro runs`, `fabro inspect` and `fabro events`: real runs in a `TestEnv`, then the
//! read commands on their records, the run index rebuild, and interrupted runs.

use std::path::{Path, PathBuf};
use std::process::{Child, Output};
use std::time::{Duration, Instant};

use fabro_test_support::TestEnv;
use serde_json::{json, Value};

use crate::{code, fabro, stderr, stdout};

const FRAME_START: &str = "digraph w {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n";

/// Two commands: succeeds.
fn commands_workflow() -> String {
    format!("{FRAME_START}  a [shape=parallelogram, script=\"echo a\"]\n  b [shape=parallelogram, script=\"echo b\"]\n  start -> a -> b -> exit\n}}\n")
}

/// A failing command routed to exit: `partial_success`.
fn partial_workflow() -> String {
    format!("{FRAME_START}  t [shape=parallelogram, script=\"exit 4\"]\n  start -> t -> exit\n}}\n")
}

/// An LLM stage and a command; no credentials, so the simulated provider is chosen.
fn llm_workflow() -> String {
    format!("{FRAME_START}  goal=\"Say hello\"\n  greet [shape=tab, prompt=\"Say hello to $goal\"]\n  check [shape=parallelogram, script=\"echo ok\"]\n  start -> greet -> check -> exit\n}}\n")
}

/// Runs `workflow` (written to `{run_id}.fabro`) as `run_id` and checks the exit code.
fn run(env: &TestEnv, run_id: &str, workflow: &str, expected_code: i32) -> PathBuf {
    let file = format!("{run_id}.fabro");
    env.write(&file, workflow);
    let output = fabro(env, &["run", &file, "--run-id", run_id]);
    assert_eq!(code(&output), expected_code, "{}", stderr(&output));
    env.fabro_home().join("scratch").join(run_id)
}

fn json_stdout(output: &Output) -> Value {
    assert_eq!(code(output), 0, "{}", stderr(output));
    serde_json::from_str(&stdout(output)).expect("stdout is one JSON document")
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&fs_err::read_to_string(path).expect("file exists")).expect("valid JSON")
}

/// The fields of `runs --json` that do not depend on when the runs happened.
fn stable_runs(runs: &Value) -> Vec<Value> {
    runs.as_array()
        .expect("an array")
        .iter()
        .map(|run| {
            json!({
                "run_id": run["run_id"], "workflow_name": run["workflow_name"],
                "status": run["status"], "started_at": run["started_at"],
                "run_dir": run["run_dir"], "goal": run["goal"], "simulated_llm": run["simulated_llm"],
            })
        })
        .collect()
}

/// Waits for `path` to exist; the timeout is only a safety net.
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

/// Waits for `child` to exit; kills it and fails after a generous timeout.
fn wait_with_timeout(mut child: Child) -> Output {
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().expect("child status").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("process did not exit: {:?}", child.wait_with_output());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

fn spawn_fabro(env: &TestEnv, args: &[&str]) -> Child {
    env.command(env!("CARGO_BIN_EXE_fabro"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("fabro starts")
}

#[test]
fn runs_lists_newest_first_in_both_forms_and_survives_losing_the_index() {
    let env = TestEnv::new("runs_list");
    let ok_dir = run(&env, "r-ok", &commands_workflow(), 0);
    run(&env, "r-partial", &partial_workflow(), 3);
    run(&env, "r-llm", &llm_workflow(), 0);

    let output = fabro(&env, &["runs"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    let header: Vec<&str> = lines[0]
        .split("  ")
        .map(str::trim)
        .filter(|cell| !cell.is_empty())
        .collect();
    assert_eq!(
        header,
        ["RUN ID", "WORKFLOW", "STATUS", "STARTED", "DURATION"]
    );
    let expected = [
        ("r-llm", "success (simulated LLM)"),
        ("r-partial", "partial_success"),
        ("r-ok", "success"),
    ];
    for (line, (run_id, status)) in lines[1..].iter().zip(expected) {
        let cells: Vec<&str> = line
            .split("  ")
            .map(str::trim)
            .filter(|cell| !cell.is_empty())
            .collect();
        assert_eq!(cells.len(), 5, "{line}");
        assert_eq!(cells[0], run_id);
        // SPEC 17.4: every run's workflow is called `w`, so the paths tell them apart.
        assert_eq!(cells[1], format!("w ({run_id}.fabro)"));
        assert_eq!(cells[2], status);
        let manifest = read_json(
            &env.fabro_home()
                .join("scratch")
                .join(run_id)
                .join("manifest.json"),
        );
        // SPEC 17.4: local time (the tests run in UTC) to the minute, with the age.
        let started = manifest["started_at"].as_str().unwrap_or("");
        let minute = started.get(..16).unwrap_or("").replace('T', " ");
        assert!(
            cells[3].starts_with(&format!("{minute} (")) && cells[3].ends_with(" ago)"),
            "{line}"
        );
        assert!(cells[4].ends_with('s'), "a duration: {line}");
    }

    let runs = json_stdout(&fabro(&env, &["runs", "--json"]));
    let first = &runs[2];
    let mut keys: Vec<&String> = first.as_object().expect("an object").keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "finished_at",
            "goal",
            "run_dir",
            "run_id",
            "simulated_llm",
            "started_at",
            "status",
            "workflow_name"
        ]
    );
    assert_eq!(first["run_dir"], ok_dir.display().to_string());
    assert!(first["finished_at"]
        .as_str()
        .is_some_and(|at| at >= first["started_at"].as_str().unwrap_or("")));
    let summary: Vec<(Value, Value, Value)> = runs
        .as_array()
        .expect("an array")
        .iter()
        .map(|run| {
            (
                run["run_id"].clone(),
                run["status"].clone(),
                run["simulated_llm"].clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (json!("r-llm"), json!("success"), json!(true)),
            (json!("r-partial"), json!("partial_success"), json!(false)),
            (json!("r-ok"), json!("success"), json!(false)),
        ]
    );
    assert_eq!(runs[0]["goal"], "Say hello");

    // SPEC 11.4: a missing or corrupt index is rebuilt from the run directories.
    let database = env.fabro_home().join("runs.db");
    assert!(database.exists());
    fs_err::remove_file(&database).expect("removes");
    let rebuilt = json_stdout(&fabro(&env, &["runs", "--json"]));
    assert_eq!(stable_runs(&rebuilt), stable_runs(&runs));
    assert!(rebuilt[0]["finished_at"].is_string());
    assert!(database.exists(), "the rebuild writes a new index");

    fs_err::write(
        &database,
        "not a database, just some text that SQLite cannot read",
    )
    .expect("writes");
    let rebuilt = json_stdout(&fabro(&env, &["runs", "--json"]));
    assert_eq!(stable_runs(&rebuilt), stable_runs(&runs));
    let output = fabro(&env, &["runs"]);
    assert_eq!(stdout(&output).lines().count(), 4);
}

#[test]
fn runs_with_an_empty_home_prints_only_the_header() {
    let env = TestEnv::new("runs_empty");
    let output = fabro(&env, &["runs"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "RUN ID  WORKFLOW  STATUS  STARTED  DURATION\n"
    );
    assert_eq!(json_stdout(&fabro(&env, &["runs", "--json"])), json!([]));
}

#[test]
fn inspect_summarises_the_run_with_one_row_per_stage_and_totals() {
    let env = TestEnv::new("inspect_summary");
    let run_dir = run(&env, "inspect-run", &llm_workflow(), 0);
    let greet = read_json(&run_dir.join("stages/002-greet@1/status.json"));
    let input = greet["usage"]["input_tokens"].as_u64().expect("tokens");
    let output_tokens = greet["usage"]["output_tokens"].as_u64().expect("tokens");
    assert!(input > 0 && output_tokens > 0);
    let tokens = input + output_tokens;

    let output = fabro(&env, &["inspect", "insp"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let text = stdout(&output);
    let manifest = read_json(&run_dir.join("manifest.json"));
    let (summary, table) = text.split_once("\n\n").expect("summary, blank line, table");
    let summary: Vec<&str> = summary.lines().collect();
    assert_eq!(summary[0], "run id: inspect-run");
    assert_eq!(summary[1], "workflow: w (inspect-run.fabro)");
    assert_eq!(summary[2], "goal: Say hello");
    assert_eq!(summary[3], "status: success");
    assert_eq!(
        summary[4],
        format!("started: {}", manifest["started_at"].as_str().unwrap_or(""))
    );
    assert!(summary[5].starts_with("finished: 20"), "{}", summary[5]);
    assert!(summary[6].starts_with("duration: "), "{}", summary[6]);
    assert_eq!(
        &summary[7..],
        [
            format!("run dir: {}", run_dir.display()).as_str(),
            "base SHA: -",
            "run branch: -",
            "simulated LLM: yes",
            "current node: exit",
            "next node: -",
        ]
    );
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        [
            "RANK", "NODE", "VISIT", "HANDLER", "STATUS", "ATTEMPTS", "DURATION", "TOKENS",
            "CACHED", "COST", "FILES"
        ]
    );
    let stage = |row: &[&str]| -> Vec<String> {
        // Everything but the duration, which varies.
        row.iter()
            .enumerate()
            .filter(|(column, _)| *column != 6)
            .map(|(_, cell)| (*cell).to_owned())
            .collect()
    };
    let tokens_text = tokens.to_string();
    assert_eq!(
        stage(&rows[1]),
        ["1", "start", "1", "start", "success", "1", "-", "-", "-", "0"]
    );
    assert_eq!(
        stage(&rows[2]),
        [
            "2",
            "greet",
            "1",
            "prompt",
            "success",
            "1",
            &tokens_text,
            "0%",
            "$0.0000",
            "0"
        ]
    );
    assert_eq!(
        stage(&rows[3]),
        ["3", "check", "1", "command", "success", "1", "-", "-", "-", "0"]
    );
    assert_eq!(
        stage(&rows[4]),
        ["4", "exit", "1", "exit", "success", "1", "-", "-", "-", "0"]
    );
    assert_eq!(
        [&rows[5][..4], &rows[5][5..]].concat(),
        [
            "total",
            "4",
            "stages",
            "4",
            &tokens_text,
            "0%",
            "$0.0000",
            "0"
        ]
    );
    assert_eq!(rows.len(), 6);

    let mut view = json_stdout(&fabro(&env, &["inspect", "inspect-run", "--json"]));
    assert_eq!(view["started_at"], manifest["started_at"]);
    assert!(view["finished_at"].is_string());
    assert!(view["duration_ms"].is_u64());
    for key in ["started_at", "finished_at", "duration_ms"] {
        view[key] = json!("<varies>");
    }
    let stages = view["stages"].as_array_mut().expect("stages");
    for stage in stages.iter_mut() {
        assert!(stage["duration_ms"].is_u64());
        stage["duration_ms"] = json!(0);
    }
    assert!(view["totals"]["duration_ms"].is_u64());
    view["totals"]["duration_ms"] = json!(0);
    let plain = |rank: u32, node: &str, handler: &str| {
        json!({"rank": rank, "node_id": node, "visit": 1, "handler": handler, "status": "success",
               "attempts": 1, "duration_ms": 0, "tokens": null, "input_tokens": null,
               "output_tokens": null, "cache_read_tokens": null, "cost_usd": null,
               "files_touched": []})
    };
    assert_eq!(
        view,
        json!({
            "run_id": "inspect-run",
            "workflow_name": "w",
            "workflow_path": "inspect-run.fabro",
            "goal": "Say hello",
            "status": "success",
            "started_at": "<varies>",
            "finished_at": "<varies>",
            "duration_ms": "<varies>",
            "run_dir": run_dir.display().to_string(),
            "base_sha": null,
            "run_branch": null,
            "simulated_llm": true,
            "dry_run": false,
            "parent_run_id": null,
            "current_node": "exit",
            "next_node_id": null,
            "stages": [
                plain(1, "start", "start"),
                {"rank": 2, "node_id": "greet", "visit": 1, "handler": "prompt", "status": "success",
                 "attempts": 1, "duration_ms": 0, "tokens": tokens, "input_tokens": input,
                 "output_tokens": output_tokens, "cache_read_tokens": 0, "cost_usd": 0.0,
                 "files_touched": []},
                plain(3, "check", "command"),
                plain(4, "exit", "exit"),
            ],
            "totals": {"stages": 4, "attempts": 4, "duration_ms": 0, "tokens": tokens,
                       "input_tokens": input, "output_tokens": output_tokens,
                       "cache_read_tokens": 0, "cost_usd": 0.0, "files_touched": []},
        })
    );
}

#[test]
fn inspect_of_a_failed_run_shows_the_failed_stage_without_the_simulated_line() {
    let env = TestEnv::new("inspect_fail");
    let workflow = format!("{FRAME_START}  t [shape=parallelogram, script=\"exit 4\"]\n  start -> t\n  t -> exit [condition=\"outcome=success\"]\n}}\n");
    run(&env, "failing", &workflow, 1);
    let output = fabro(&env, &["inspect", "failing"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("\nstatus: fail\n"), "{text}");
    assert!(!text.contains("simulated LLM"), "{text}");
    let failed = text
        .lines()
        .find(|line| line.starts_with("2 "))
        .expect("a row for rank 2");
    let cells: Vec<&str> = failed.split_whitespace().collect();
    assert_eq!(&cells[..6], ["2", "t", "1", "command", "fail", "1"]);
}

#[test]
fn events_print_human_lines_or_stored_envelopes_and_resolve_prefixes() {
    let env = TestEnv::new("events_print");
    let run_dir = run(&env, "evt-run-1", &commands_workflow(), 0);
    let stored = fs_err::read_to_string(run_dir.join("events.jsonl")).expect("events");
    let envelopes: Vec<Value> = stored
        .lines()
        .map(|line| serde_json::from_str(line).expect("envelope"))
        .collect();

    let output = fabro(&env, &["events", "evt-run-1", "--json"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        stored,
        "--json prints the stored lines verbatim"
    );

    let output = fabro(&env, &["events", "evt-"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), envelopes.len());
    for (line, envelope) in lines.iter().zip(&envelopes) {
        let node = envelope["node_id"].as_str().unwrap_or("-");
        let prefix = format!(
            "{} {} {node}",
            envelope["ts"].as_str().expect("ts"),
            envelope["event"].as_str().expect("event")
        );
        assert!(
            line.starts_with(&prefix),
            "{line} should start with {prefix}"
        );
    }
    assert!(
        lines[0].contains(" WorkflowRunStarted - ") && lines[0].contains(" workflow_name=w"),
        "{}",
        lines[0]
    );
    let stage_started = lines
        .iter()
        .find(|line| line.contains(" StageStarted a "))
        .expect("stage a started");
    assert!(
        stage_started.ends_with(
            r#" attempt=1 handler=command isolation={"enforced":[],"mode":"none","network":true} rank=2 visit=1"#
        ),
        "{stage_started}"
    );
    assert!(lines
        .last()
        .is_some_and(|line| line.contains(" WorkflowRunCompleted - ")));

    // A truncated final line (a crash mid-write) is ignored.
    fs_err::write(
        run_dir.join("events.jsonl"),
        format!("{stored}{{\"id\": 99, \"ts\": \"2026"),
    )
    .expect("writes");
    let output = fabro(&env, &["events", "evt-run-1", "--json"]);
    assert_eq!(stdout(&output), stored);
    let output = fabro(&env, &["events", "evt-run-1"]);
    assert_eq!(stdout(&output), text);

    // Unknown, ambiguous and too-short arguments exit 2 with `error: …`.
    run(&env, "evt-run-2", &commands_workflow(), 0);
    let check_refused = |run: &str, message: &str| {
        let output = fabro(&env, &["events", run]);
        assert_eq!(code(&output), 2, "{run}: {}", stderr(&output));
        assert_eq!(stdout(&output), "");
        assert_eq!(stderr(&output), format!("error: {message}\n"));
    };
    check_refused("nope-nope", "unknown run 'nope-nope'");
    check_refused(
        "evt-run",
        "ambiguous run 'evt-run': it matches evt-run-1, evt-run-2",
    );
    check_refused(
        "evt",
        "unknown run 'evt': a prefix needs at least 4 characters",
    );
    let output = fabro(&env, &["inspect", "nope-nope"]);
    assert_eq!(code(&output), 2);
    assert_eq!(stderr(&output), "error: unknown run 'nope-nope'\n");
}

#[test]
fn follow_on_a_finished_run_prints_every_event_and_exits_zero() {
    let env = TestEnv::new("events_follow_finished");
    let run_dir = run(&env, "done", &partial_workflow(), 3);
    let stored = fs_err::read_to_string(run_dir.join("events.jsonl")).expect("events");
    let output = wait_with_timeout(spawn_fabro(&env, &["events", "done", "--follow", "--json"]));
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(stdout(&output), stored);

    let plain = fabro(&env, &["events", "done"]);
    let output = wait_with_timeout(spawn_fabro(&env, &["events", "done", "--follow"]));
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(stdout(&output), stdout(&plain));
}

#[test]
fn running_runs_are_followed_to_the_end_and_killed_runs_are_interrupted() {
    let env = TestEnv::new("events_follow_live");
    let workflow = format!("{FRAME_START}  hold [shape=parallelogram, script=\"touch started; while [ ! -f go ]; do sleep 0.02; done\"]\n  start -> hold -> exit\n}}\n");
    env.write("live.fabro", &workflow);
    let live = spawn_fabro(&env, &["run", "live.fabro", "--run-id", "live"]);
    wait_for_file(&env.work_dir().join("started"));

    let runs = json_stdout(&fabro(&env, &["runs", "--json"]));
    assert_eq!(runs[0]["status"], "running");
    assert!(runs[0]["finished_at"].is_null());
    let inspect = json_stdout(&fabro(&env, &["inspect", "live", "--json"]));
    assert_eq!(inspect["status"], "running");
    assert_eq!(inspect["stages"][1]["node_id"], "hold");
    assert_eq!(inspect["stages"][1]["status"], "running");

    let follower = spawn_fabro(&env, &["events", "live", "--follow", "--json"]);
    fs_err::write(env.work_dir().join("go"), "").expect("writes");
    let run_output = wait_with_timeout(live);
    assert_eq!(code(&run_output), 0, "{}", stderr(&run_output));
    let followed = wait_with_timeout(follower);
    assert_eq!(code(&followed), 0, "{}", stderr(&followed));
    let stored =
        fs_err::read_to_string(env.fabro_home().join("scratch/live/events.jsonl")).expect("events");
    assert_eq!(stdout(&followed), stored);
    assert_eq!(
        json_stdout(&fabro(&env, &["runs", "--json"]))[0]["status"],
        "success"
    );

    // A run whose process dies keeps `running` in its records, but nobody holds its
    // lock: it is reported as interrupted (SPEC 11.4).
    let workflow = format!("{FRAME_START}  hang [shape=parallelogram, script=\"echo $$ > pid; sleep 30\"]\n  start -> hang -> exit\n}}\n");
    env.write("killed.fabro", &workflow);
    let mut killed = spawn_fabro(&env, &["run", "killed.fabro", "--run-id", "killed"]);
    wait_for_file(&env.work_dir().join("pid"));
    killed.kill().expect("SIGKILL");
    killed.wait().expect("reaped");
    let script_pid = fs_err::read_to_string(env.work_dir().join("pid")).expect("pid");
    if let Ok(pid) = script_pid.trim().parse::<i32>() {
        // The script leads its own process group; end it so it does not outlive the test.
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let run_dir = env.fabro_home().join("scratch/killed");
    assert_eq!(
        read_json(&run_dir.join("checkpoint.json"))["run_status"],
        "running"
    );

    let output = fabro(&env, &["runs"]);
    let row = stdout(&output)
        .lines()
        .find(|line| line.starts_with("killed "))
        .map(str::to_owned)
        .expect("listed");
    assert!(row.contains("  interrupted  "), "{row}");
    let inspect = json_stdout(&fabro(&env, &["inspect", "kill", "--json"]));
    assert_eq!(inspect["status"], "interrupted");
    assert_eq!(inspect["stages"][1]["status"], "incomplete");
    assert_eq!(inspect["next_node_id"], "hang");

    let output = wait_with_timeout(spawn_fabro(&env, &["events", "killed", "--follow"]));
    assert_eq!(code(&output), 1);
    assert_eq!(
        stderr(&output),
        "error: run killed is interrupted: no process holds its lock and it has no terminal event\n"
    );
    assert!(stdout(&output).contains(" StageStarted hang "));
}
