//! `fabro run`: end-to-end runs on the real binary, checking exit codes, stdout, run
//! directory files and events.

use std::path::PathBuf;

use fabro_test_support::TestEnv;
use serde_json::Value;

use crate::{code, fabro, stderr, stdout};

/// Runs `workflow` as `w.fabro` with `args` and a fixed run id; returns the output and
/// the run directory.
fn run(env: &TestEnv, workflow: &str, args: &[&str]) -> (std::process::Output, PathBuf) {
    env.write("w.fabro", workflow);
    let mut all = vec!["run", "w.fabro", "--run-id", "r1"];
    all.extend_from_slice(args);
    let output = fabro(env, &all);
    (output, env.fabro_home().join("scratch/r1"))
}

/// Runs `workflow` as `w.fabro` (run id `r1`) with the simulated provider scripted by
/// `responses`.
fn run_scripted(env: &TestEnv, workflow: &str, responses: &str) -> std::process::Output {
    env.write("w.fabro", workflow);
    env.write("responses.json", responses);
    env.command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro", "--run-id", "r1"])
        .env(
            "FABRO_SIMULATED_RESPONSES",
            env.work_dir().join("responses.json"),
        )
        .output()
        .expect("fabro runs")
}

fn events(run_dir: &std::path::Path) -> Vec<Value> {
    fs_err::read_to_string(run_dir.join("events.jsonl"))
        .expect("events written")
        .lines()
        .map(|line| serde_json::from_str(line).expect("valid event line"))
        .collect()
}

fn event_names(run_dir: &std::path::Path) -> Vec<String> {
    events(run_dir)
        .iter()
        .map(|event| event["event"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn completed(run_dir: &std::path::Path) -> Vec<String> {
    let checkpoint: Value = serde_json::from_str(
        &fs_err::read_to_string(run_dir.join("checkpoint.json")).expect("checkpoint"),
    )
    .expect("json");
    checkpoint["completed_nodes"]
        .as_array()
        .expect("list")
        .iter()
        .map(|node| node.as_str().unwrap_or_default().to_owned())
        .collect()
}

const FRAME_START: &str = "digraph w {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n";

#[test]
fn linear_pipeline_of_commands_succeeds_with_records() {
    let env = TestEnv::new("run_linear");
    let mut workflow = FRAME_START.to_owned();
    let mut chain = vec!["start".to_owned()];
    for index in 1..=10 {
        workflow.push_str(&format!(
            "  c{index} [shape=parallelogram, script=\"echo step{index} >> log.txt\"]\n"
        ));
        chain.push(format!("c{index}"));
    }
    chain.push("exit".to_owned());
    workflow.push_str(&format!("  {}\n}}\n", chain.join(" -> ")));
    let (output, run_dir) = run(&env, &workflow, &[]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        format!(
            "run_id: r1\nrun_dir: {}\nstatus: success\n",
            run_dir.display()
        )
    );
    let log = fs_err::read_to_string(env.work_dir().join("log.txt")).expect("commands ran");
    assert_eq!(log.lines().count(), 10);
    assert_eq!(completed(&run_dir), chain);
    let status: Value = serde_json::from_str(
        &fs_err::read_to_string(run_dir.join("stages/002-c1@1/status.json")).expect("status.json"),
    )
    .expect("json");
    assert_eq!(status["status"], "success");
    assert_eq!(status["handler"], "command");
    assert!(run_dir.join("stages/002-c1@1/stdout.log").exists());
    let names = event_names(&run_dir);
    assert_eq!(
        names.first().map(String::as_str),
        Some("WorkflowRunStarted")
    );
    assert_eq!(
        names.last().map(String::as_str),
        Some("WorkflowRunCompleted")
    );
    assert_eq!(
        &names[1..6],
        [
            "StageStarted",
            "StageCompleted",
            "EdgeSelected",
            "CheckpointCompleted",
            "StageStarted"
        ]
    );
    let manifest: Value = serde_json::from_str(
        &fs_err::read_to_string(run_dir.join("manifest.json")).expect("manifest"),
    )
    .expect("json");
    assert_eq!(manifest["workflow_name"], "w");
    assert_eq!(manifest["node_count"], 12);
}

#[test]
fn conditions_route_on_command_results_and_beat_weights() {
    let env = TestEnv::new("run_conditions");
    let workflow = format!(
        "{FRAME_START}  check [shape=parallelogram, script=\"echo ALL PASS\"]\n  gate [shape=diamond]\n  good [shape=parallelogram, script=\"touch good\"]\n  bad [shape=parallelogram, script=\"touch bad\"]\n  start -> check -> gate\n  gate -> good [condition=\"command.output contains PASS && outcome=success\"]\n  gate -> bad [weight=100]\n  good -> exit\n  bad -> exit\n}}\n"
    );
    let (output, run_dir) = run(&env, &workflow, &[]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(env.work_dir().join("good").exists());
    assert!(!env.work_dir().join("bad").exists());
    let selected: Vec<Value> = events(&run_dir)
        .into_iter()
        .filter(|event| event["event"] == "EdgeSelected" && event["properties"]["from"] == "gate")
        .collect();
    assert_eq!(selected[0]["properties"]["reason"], "condition");
}

#[test]
fn failed_command_routed_to_exit_is_partial_success_with_exit_3() {
    let env = TestEnv::new("run_partial");
    let workflow = format!(
        "{FRAME_START}  t [shape=parallelogram, script=\"exit 4\"]\n  start -> t -> exit\n}}\n"
    );
    let (output, _) = run(&env, &workflow, &[]);
    assert_eq!(code(&output), 3, "{}", stderr(&output));
    assert!(stdout(&output).ends_with("status: partial_success\n"));
}

#[test]
fn failure_without_an_edge_fails_the_run_with_the_reason() {
    let env = TestEnv::new("run_fail");
    let workflow = format!("{FRAME_START}  t [shape=parallelogram, script=\"exit 4\"]\n  start -> t\n  t -> exit [condition=\"outcome=success\"]\n}}\n");
    let (output, run_dir) = run(&env, &workflow, &[]);
    assert_eq!(code(&output), 1);
    assert!(
        stdout(&output).contains("status: fail\nreason: Script failed with exit code: 4"),
        "{}",
        stdout(&output)
    );
    let last = events(&run_dir).pop().expect("events");
    assert_eq!(last["event"], "WorkflowRunFailed");
    assert_eq!(last["properties"]["failure_class"], "deterministic");
    assert_eq!(last["properties"]["node_id"], "t");
}

#[test]
fn timeouts_are_retried_per_policy_until_the_command_succeeds() {
    let env = TestEnv::new("run_retry");
    let script = "n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count; if [ $n -lt 3 ]; then sleep 5; fi";
    let workflow = format!(
        "{FRAME_START}  flaky [shape=parallelogram, retry_policy=linear, timeout=\"300ms\", script=\"{script}\"]\n  start -> flaky -> exit\n}}\n"
    );
    let (output, run_dir) = run(&env, &workflow, &[]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(
        fs_err::read_to_string(env.work_dir().join("count"))
            .expect("count")
            .trim(),
        "3"
    );
    let retries = event_names(&run_dir)
        .iter()
        .filter(|name| *name == "StageRetrying")
        .count();
    assert_eq!(retries, 2);
    assert!(run_dir
        .join("stages/002-flaky@1/attempts/1/status.json")
        .exists());
    assert!(run_dir
        .join("stages/002-flaky@1/attempts/2/status.json")
        .exists());
}

#[test]
fn goal_gate_sends_the_run_back_to_its_retry_target() {
    let env = TestEnv::new("run_goal_gate");
    let workflow = format!(
        "{FRAME_START}  fix [shape=parallelogram, script=\"touch fixed\"]\n  verify [shape=parallelogram, goal_gate=true, retry_target=fix, script=\"test -f fixed\"]\n  start -> verify -> exit\n  fix -> verify\n}}\n"
    );
    let (output, run_dir) = run(&env, &workflow, &[]);
    // The gate's latest outcome is success, so the run is a success (SPEC 4.7).
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let nodes = completed(&run_dir);
    assert_eq!(nodes, ["start", "verify", "fix", "verify", "exit"]);
    assert!(event_names(&run_dir).contains(&"GoalGateUnsatisfied".to_owned()));
}

#[test]
fn human_gates_follow_answers_and_auto_approve() {
    let env = TestEnv::new("run_human");
    let workflow = format!(
        "{FRAME_START}  ask [shape=hexagon, label=\"Ship?\"]\n  yes [shape=parallelogram, script=\"touch yes\"]\n  no [shape=parallelogram, script=\"touch no\"]\n  start -> ask\n  ask -> yes [label=\"[Y] Yes\"]\n  ask -> no [label=\"[N] No\"]\n  yes -> exit\n  no -> exit\n}}\n"
    );
    let (output, _) = run(&env, &workflow, &["--answer", "ask=N"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(env.work_dir().join("no").exists());
    assert!(!env.work_dir().join("yes").exists());

    let env = TestEnv::new("run_human_auto");
    let (output, _) = run(&env, &workflow, &["--auto-approve"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(env.work_dir().join("yes").exists());

    let env = TestEnv::new("run_human_none");
    let (output, _) = run(&env, &workflow, &[]);
    assert_eq!(code(&output), 1);
    assert!(
        stdout(&output).contains(
            "human input unavailable: no interactive terminal (use --answer or --auto-approve)"
        ),
        "{}",
        stdout(&output)
    );
}

#[test]
fn visit_limits_stop_cycles_with_the_spec_message() {
    let env = TestEnv::new("run_visits");
    let workflow = format!(
        "{FRAME_START}  spin [shape=parallelogram, max_visits=3, script=\"true\"]\n  start -> spin\n  spin -> spin\n  spin -> exit [condition=\"outcome=fail\"]\n}}\n"
    );
    let (output, run_dir) = run(&env, &workflow, &[]);
    assert_eq!(code(&output), 1);
    assert!(
        stdout(&output).contains(
            "reason: node \"spin\" visited 3 times (node limit 3); run is stuck in a cycle"
        ),
        "{}",
        stdout(&output)
    );
    let last = events(&run_dir).pop().expect("events");
    assert_eq!(last["properties"]["failure_class"], "compilation_loop");
}

#[test]
fn repeated_deterministic_failures_trip_the_circuit_breaker() {
    let env = TestEnv::new("run_breaker");
    let workflow = format!(
        "{FRAME_START}  t [shape=parallelogram, script=\"exit 2\"]\n  start -> t\n  t -> t [condition=\"outcome=fail\"]\n  t -> exit [condition=\"outcome=success\"]\n}}\n"
    );
    let (output, run_dir) = run(&env, &workflow, &[]);
    assert_eq!(code(&output), 1);
    assert!(
        stdout(&output).contains("reason: deterministic failure cycle detected: signature t|deterministic|script failed with exit code: <n> repeated 3 times (limit 3)"),
        "{}",
        stdout(&output)
    );
    assert!(event_names(&run_dir).contains(&"CircuitBreakerTripped".to_owned()));
}

#[test]
fn llm_stages_run_on_the_simulated_provider_and_route_on_scripted_json() {
    let env = TestEnv::new("run_llm");
    let responses = r#"{"nodes": {"review": [{"text": "Needs work {\"preferred_next_label\": \"revise\"}"}, {"text": "LGTM {\"preferred_next_label\": \"done\"}"}]}}"#;
    let workflow = format!(
        "{FRAME_START}  draft [shape=tab, prompt=\"Draft $goal\"]\n  review [shape=tab, prompt=\"Review\"]\n  start -> draft -> review\n  review -> draft [label=\"revise\"]\n  review -> exit [label=\"done\"]\n  goal=\"a poem\"\n  max_node_visits=5\n}}\n"
    );
    let output = run_scripted(&env, &workflow, responses);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("note: no LLM credentials found; using the simulated provider")
    );
    let run_dir = env.fabro_home().join("scratch/r1");
    assert_eq!(
        completed(&run_dir),
        ["start", "draft", "review", "draft", "review", "exit"]
    );
    let prompt =
        fs_err::read_to_string(run_dir.join("stages/002-draft@1/prompt.md")).expect("prompt.md");
    assert!(prompt.ends_with("Draft a poem"), "{prompt}");
    let response = fs_err::read_to_string(run_dir.join("stages/002-draft@1/response.md"))
        .expect("response.md");
    assert_eq!(response, "[Simulated] Response for stage: draft");
    let manifest: Value = serde_json::from_str(
        &fs_err::read_to_string(run_dir.join("manifest.json")).expect("manifest"),
    )
    .expect("json");
    assert_eq!(manifest["simulated_llm"], true);
}

#[test]
fn validation_errors_exit_one_before_a_run_directory_exists() {
    let env = TestEnv::new("run_invalid");
    let (output, run_dir) = run(&env, "digraph { a -> b }\n", &[]);
    assert_eq!(code(&output), 1);
    assert!(
        stderr(&output).contains("error[start_node]"),
        "{}",
        stderr(&output)
    );
    assert!(!run_dir.exists());
}

#[test]
fn sigint_cancels_the_run_with_exit_130() {
    let env = TestEnv::new("run_sigint");
    let workflow = format!("{FRAME_START}  slow [shape=parallelogram, script=\"touch started; sleep 30\"]\n  start -> slow -> exit\n}}\n");
    env.write("w.fabro", &workflow);
    let child = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro", "--run-id", "r1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starts");
    let started = env.work_dir().join("started");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !started.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the command never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid fits"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("signal sent");
    let output = child.wait_with_output().expect("exits");
    assert_eq!(
        code(&output),
        130,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let run_dir = env.fabro_home().join("scratch/r1");
    let checkpoint: Value = serde_json::from_str(
        &fs_err::read_to_string(run_dir.join("checkpoint.json")).expect("checkpoint"),
    )
    .expect("json");
    assert_eq!(checkpoint["run_status"], "canceled");
    assert_eq!(checkpoint["next_node_id"], "slow");
}

const PARALLEL: &str = "digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  fan [shape=component, max_parallel=3, join_policy=POLICY]
  a [shape=parallelogram, script=\"sleep 0.3; echo A > a.txt\"]
  b [shape=tab, prompt=\"Branch b\"]
  b2 [shape=parallelogram, script=\"echo B2 > b2.txt\"]
  c [shape=parallelogram, script=\"SCRIPT_C\"]
  merge [shape=tripleoctagon]
  start -> fan
  fan -> a
  fan -> b
  fan -> c
  b -> b2
  a -> merge
  b2 -> merge
  c -> merge
  merge -> exit
}
";

#[test]
fn parallel_branches_run_concurrently_and_fan_in_picks_the_best() {
    let env = TestEnv::new("run_parallel");
    let workflow = PARALLEL
        .replace("POLICY", "wait_all")
        .replace("SCRIPT_C", "sleep 0.3; exit 3");
    let started = std::time::Instant::now();
    let (output, run_dir) = run(&env, &workflow, &[]);
    assert_eq!(code(&output), 3, "{}", stderr(&output));
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert!(env.work_dir().join("a.txt").exists());
    assert!(env.work_dir().join("b2.txt").exists());
    let nodes = completed(&run_dir);
    assert_eq!(nodes[..2], ["start", "fan"]);
    assert_eq!(nodes[nodes.len() - 2..], ["merge", "exit"]);
    let mut branch_nodes = nodes[2..nodes.len() - 2].to_vec();
    branch_nodes.sort();
    assert_eq!(branch_nodes, ["a", "b", "b2", "c"]);
    let checkpoint: Value = serde_json::from_str(
        &fs_err::read_to_string(run_dir.join("checkpoint.json")).expect("checkpoint"),
    )
    .expect("json");
    let context = &checkpoint["context_values"];
    let results = context["parallel.results"].as_array().expect("results");
    let statuses: Vec<&str> = results
        .iter()
        .map(|result| result["status"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(statuses, ["success", "success", "fail"]);
    assert_eq!(context["parallel.branch_count"], 3);
    assert_eq!(context["parallel.fan_in.best_id"], "a");
    assert_eq!(context["response.b"], "[Simulated] Response for stage: b");
    assert!(
        context.get("internal.parallel.branch").is_none(),
        "branch-local keys stay in the branch"
    );
    let names = event_names(&run_dir);
    for name in [
        "ParallelStarted",
        "ParallelBranchStarted",
        "ParallelBranchCompleted",
        "ParallelCompleted",
        "FanInSelected",
    ] {
        assert!(names.iter().any(|event| event == name), "{name} missing");
    }
    let selected: Vec<Value> = events(&run_dir)
        .into_iter()
        .filter(|event| event["event"] == "EdgeSelected" && event["properties"]["from"] == "fan")
        .collect();
    assert_eq!(selected[0]["properties"]["reason"], "parallel_join");
    assert_eq!(selected[0]["properties"]["to"], "merge");
}

#[test]
fn first_success_cancels_the_remaining_branches() {
    let env = TestEnv::new("run_first_success");
    let workflow = PARALLEL
        .replace("POLICY", "first_success")
        .replace("SCRIPT_C", "sleep 20; touch late");
    let started = std::time::Instant::now();
    let (output, run_dir) = run(&env, &workflow, &[]);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "the slow branch was not cancelled"
    );
    assert!(!env.work_dir().join("late").exists());
    let checkpoint: Value = serde_json::from_str(
        &fs_err::read_to_string(run_dir.join("checkpoint.json")).expect("checkpoint"),
    )
    .expect("json");
    let results = checkpoint["context_values"]["parallel.results"]
        .as_array()
        .expect("results")
        .clone();
    assert!(
        results.iter().any(|result| result["status"] == "skipped"),
        "{results:?}"
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
}

#[test]
fn every_corpus_workflow_terminates_under_dry_run() {
    let Some(files) = fabro_test_support::corpus_files() else {
        fabro_test_support::skip(
            "every_corpus_workflow_terminates_under_dry_run",
            "../shared/corpus/fabro is absent",
        );
        return;
    };
    let env = TestEnv::new("run_corpus_dry");
    for (index, path) in files.iter().enumerate() {
        if path.file_name().is_some_and(|name| name == "invalid.fabro") {
            continue;
        }
        let run_id = format!("dry{index}");
        let argument = path.to_str().expect("UTF-8 path");
        let output = fabro(&env, &["run", argument, "--dry-run", "--run-id", &run_id]);
        // Dry runs answer every LLM stage with plain success, so workflows that route on
        // custom outcomes may stop at a node without a matching edge or at the dry-run
        // visit limit; what must hold is that every run ends with a status and its events.
        assert!(
            matches!(code(&output), 0 | 1 | 3),
            "{argument}: exit {}\n{}",
            code(&output),
            stderr(&output)
        );
        assert!(
            stdout(&output).contains("\nstatus: "),
            "{argument}: {}",
            stdout(&output)
        );
        let run_dir = env.fabro_home().join("scratch").join(&run_id);
        let last = events(&run_dir).pop().expect("events");
        assert!(
            last["event"] == "WorkflowRunCompleted" || last["event"] == "WorkflowRunFailed",
            "{argument}: {last}"
        );
        assert!(
            !env.work_dir().join("greet.sh").exists(),
            "dry runs have no side effects"
        );
    }
}

#[test]
fn the_stall_watchdog_cancels_a_silent_run_with_exit_1() {
    let env = TestEnv::new("run_stall");
    let workflow = format!(
        "{FRAME_START}  stall_timeout=\"1s\"\n  quiet [shape=parallelogram, script=\"sleep 20\"]\n  start -> quiet -> exit\n}}\n"
    );
    let started = std::time::Instant::now();
    let (output, run_dir) = run(&env, &workflow, &[]);
    assert!(started.elapsed() < std::time::Duration::from_secs(15));
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    assert!(
        stdout(&output).contains("status: canceled\nreason: stall timeout: no events for 1s"),
        "{}",
        stdout(&output)
    );
    let names = event_names(&run_dir);
    assert!(names.contains(&"Watchdog.Timeout".to_owned()));
    let checkpoint: Value = serde_json::from_str(
        &fs_err::read_to_string(run_dir.join("checkpoint.json")).expect("checkpoint"),
    )
    .expect("json");
    assert_eq!(checkpoint["run_status"], "canceled");
    assert_eq!(checkpoint["next_node_id"], "quiet");
}

#[test]
fn node_timeouts_fail_the_attempt_as_transient() {
    let env = TestEnv::new("run_node_timeout");
    let workflow = format!(
        "{FRAME_START}  pause [shape=insulator, duration=\"10s\", timeout=\"200ms\", retry_policy=none]\n  start -> pause -> exit\n}}\n"
    );
    let (output, run_dir) = run(&env, &workflow, &[]);
    assert_eq!(code(&output), 3, "{}", stderr(&output));
    let status: Value = serde_json::from_str(
        &fs_err::read_to_string(run_dir.join("stages/002-pause@1/status.json"))
            .expect("status.json"),
    )
    .expect("json");
    assert_eq!(status["failure_reason"], "stage timed out after 200ms");
    assert_eq!(status["failure_class"], "transient_infra");
}

#[test]
fn allow_partial_accepts_exhausted_transient_retries() {
    let env = TestEnv::new("run_allow_partial");
    let workflow = format!(
        "{FRAME_START}  flaky [shape=parallelogram, retry_policy=linear, timeout=\"100ms\", allow_partial=true, script=\"sleep 5\"]\n  start -> flaky\n  flaky -> exit [condition=\"outcome=partial_success\"]\n}}\n"
    );
    let (output, run_dir) = run(&env, &workflow, &[]);
    assert_eq!(code(&output), 3, "{}", stderr(&output));
    let status: Value = serde_json::from_str(
        &fs_err::read_to_string(run_dir.join("stages/002-flaky@1/status.json"))
            .expect("status.json"),
    )
    .expect("json");
    assert_eq!(status["status"], "partial_success");
    assert_eq!(status["attempt"], 3);
    assert_eq!(status["notes"], "retries exhausted, partial accepted");
}

#[test]
fn loop_restart_is_blocked_for_deterministic_failures() {
    let env = TestEnv::new("run_loop_restart");
    let workflow = format!(
        "{FRAME_START}  work [shape=parallelogram, script=\"exit 1\"]\n  start -> work\n  work -> work [loop_restart=true]\n  work -> exit [condition=\"outcome=success\"]\n}}\n"
    );
    let (output, run_dir) = run(&env, &workflow, &[]);
    assert_eq!(code(&output), 1);
    assert!(
        stdout(&output).contains(
            "reason: loop_restart blocked: failure_class=deterministic (requires transient_infra)"
        ),
        "{}",
        stdout(&output)
    );
    let last = events(&run_dir).pop().expect("events");
    assert_eq!(last["properties"]["failure_class"], "deterministic");
}

#[test]
fn goal_gates_use_the_graph_retry_target_or_fail_without_one() {
    let env = TestEnv::new("run_goal_gate_graph");
    let workflow = format!(
        "{FRAME_START}  retry_target=fix\n  fix [shape=parallelogram, script=\"touch fixed\"]\n  verify [shape=parallelogram, goal_gate=true, script=\"test -f fixed\"]\n  start -> verify -> exit\n  fix -> verify\n}}\n"
    );
    let (output, run_dir) = run(&env, &workflow, &[]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(
        completed(&run_dir),
        ["start", "verify", "fix", "verify", "exit"]
    );

    let env = TestEnv::new("run_goal_gate_none");
    let workflow = format!(
        "{FRAME_START}  verify [shape=parallelogram, goal_gate=true, script=\"exit 1\"]\n  start -> verify -> exit\n}}\n"
    );
    let (output, _) = run(&env, &workflow, &[]);
    assert_eq!(code(&output), 1);
    assert!(
        stdout(&output)
            .contains("reason: goal gate unsatisfied for node verify and no retry target"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn json_mode_prints_the_event_stream_on_stdout() {
    let env = TestEnv::new("run_json");
    let workflow = format!("{FRAME_START}  start -> exit\n}}\n");
    let (output, run_dir) = run(&env, &workflow, &["--json"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let lines: Vec<Value> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).expect("every stdout line is an event"))
        .collect();
    assert_eq!(
        lines.first().map(|event| event["event"].clone()),
        Some(Value::from("WorkflowRunStarted"))
    );
    assert_eq!(
        lines
            .first()
            .map(|event| event["properties"]["run_dir"].clone()),
        Some(Value::from(run_dir.display().to_string()))
    );
    assert_eq!(
        lines.last().map(|event| event["event"].clone()),
        Some(Value::from("WorkflowRunCompleted"))
    );
    assert_eq!(
        lines,
        events(&run_dir),
        "stdout carries exactly the stored envelopes"
    );
}

#[test]
fn every_condition_operator_routes_on_context_from_routing_json() {
    let env = TestEnv::new("run_operators");
    let responses = r#"{"nodes": {"probe": [{"text": "{\"context_updates\": {\"score\": 7, \"tags\": [\"fast\", \"safe\"], \"version\": \"v1.2\", \"flag\": \"yes\", \"empty\": \"\"}}"}]}}"#;
    let gates = [
        ("g1", "score=7"),
        ("g2", "score!=8"),
        ("g3", "score>6"),
        ("g4", "score<8"),
        ("g5", "score>=7"),
        ("g6", "score<=7"),
        ("g7", "tags contains safe"),
        ("g8", "version matches ^v\\\\d+\\\\.\\\\d+$"),
        ("g9", "flag && !empty"),
        ("g10", "score=1 || context.score=7 && outcome=success"),
    ];
    let mut workflow = format!("{FRAME_START}  probe [shape=tab, prompt=\"probe\"]\n  wrong [shape=parallelogram, script=\"exit 9\"]\n  start -> probe -> g1\n");
    for (index, (gate, condition)) in gates.iter().enumerate() {
        let next = gates.get(index + 1).map_or("exit", |(next, _)| next);
        workflow.push_str(&format!("  {gate} [shape=diamond]\n  {gate} -> {next} [condition=\"{condition}\"]\n  {gate} -> wrong\n"));
    }
    workflow.push_str("  wrong -> exit [condition=\"outcome=success\"]\n}\n");
    let output = run_scripted(&env, &workflow, responses);
    assert_eq!(code(&output), 0, "{}\n{}", stdout(&output), stderr(&output));
    let run_dir = env.fabro_home().join("scratch/r1");
    assert!(!completed(&run_dir).contains(&"wrong".to_owned()));
}

#[test]
fn sub_workflow_nodes_run_the_child_as_its_own_run() {
    let env = TestEnv::new("run_sub_workflow");
    env.write(
        "flows/child.fabro",
        "digraph child {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  build [shape=parallelogram, script=\"echo $goal > built.txt\"]\n  start -> build -> exit\n}\n",
    );
    env.write(
        "flows/parent.fabro",
        "digraph parent {\n  goal=\"parent goal\"\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  manage [shape=house, stack.child_workflow=\"child.fabro\"]\n  check [shape=parallelogram, script=\"grep -q 'parent goal' built.txt\"]\n  start -> manage -> check -> exit\n}\n",
    );
    let output = fabro(&env, &["run", "flows/parent.fabro", "--run-id", "parent1"]);
    assert_eq!(code(&output), 0, "{}\n{}", stdout(&output), stderr(&output));
    let run_dir = env.fabro_home().join("scratch/parent1");
    let checkpoint: Value = serde_json::from_str(
        &fs_err::read_to_string(run_dir.join("checkpoint.json")).expect("checkpoint"),
    )
    .expect("json");
    let context = &checkpoint["context_values"];
    assert_eq!(context["stack.child.status"], "success");
    assert_eq!(context["stack.child.completed_count"], 3);
    let child_id = context["stack.child.run_id"]
        .as_str()
        .expect("child run id")
        .to_owned();
    let child_manifest: Value = serde_json::from_str(
        &fs_err::read_to_string(
            env.fabro_home()
                .join("scratch")
                .join(&child_id)
                .join("manifest.json"),
        )
        .expect("child manifest"),
    )
    .expect("json");
    assert_eq!(child_manifest["parent_run_id"], "parent1");
    assert_eq!(
        child_manifest["goal"], "parent goal",
        "a child without a goal inherits the parent's"
    );
    let names = event_names(&run_dir);
    assert!(names.contains(&"SubWorkflowStarted".to_owned()));
    assert!(names.contains(&"SubWorkflowCompleted".to_owned()));

    env.write(
        "flows/broken_child.fabro",
        "digraph child {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  fail [shape=parallelogram, script=\"exit 5\"]\n  start -> fail\n  fail -> exit [condition=\"outcome=success\"]\n}\n",
    );
    env.write(
        "flows/parent2.fabro",
        "digraph parent {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  manage [shape=house, stack.child_workflow=\"broken_child.fabro\"]\n  start -> manage\n  manage -> exit [condition=\"outcome=success\"]\n}\n",
    );
    let output = fabro(&env, &["run", "flows/parent2.fabro", "--run-id", "parent2"]);
    assert_eq!(code(&output), 1);
    assert!(
        stdout(&output).contains("reason: Script failed with exit code: 5"),
        "{}",
        stdout(&output)
    );
}

/// The console interviewer (SPEC 5.5, answer source 3) on a real terminal: `script` gives
/// `fabro` a pseudo-terminal as stdin and stderr; an answer that matches nothing is asked
/// again, then an accelerator key selects the option.
#[test]
fn human_gates_ask_on_a_terminal() {
    use std::io::Write as _;
    if !fabro_test_support::require_program("human_gates_ask_on_a_terminal", "script") {
        return;
    }
    let env = TestEnv::new("run_human_tty");
    env.write(
        "w.fabro",
        &format!(
            "{FRAME_START}  ask [shape=hexagon, label=\"Ship?\", human.default_choice=yes]\n  yes [shape=parallelogram, script=\"touch yes\"]\n  no [shape=parallelogram, script=\"touch no\"]\n  start -> ask\n  ask -> yes [label=\"[S] Ship it\"]\n  ask -> no [label=\"[H] Hold\"]\n  yes -> exit\n  no -> exit\n}}\n"
        ),
    );
    let command = format!("{} run w.fabro --run-id tty1", env!("CARGO_BIN_EXE_fabro"));
    let mut child = env
        .command("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("script starts");
    child
        .stdin
        .as_mut()
        .expect("stdin")
        .write_all(b"maybe\nh\n")
        .expect("answer");
    let output = child.wait_with_output().expect("script ends");
    let screen = String::from_utf8_lossy(&output.stdout);
    assert_eq!(code(&output), 0, "{screen}");
    assert!(screen.contains("[?] Ship?"), "{screen}");
    // SPEC 17.5: each key once, the default marked, how to answer, what was chosen.
    assert!(screen.contains("  [S] Ship it (default)"), "{screen}");
    assert!(screen.contains("  [H] Hold"), "{screen}");
    assert!(!screen.contains("[S] [S]"), "{screen}");
    assert!(
        screen.contains("type a key, a label, or a number"),
        "{screen}"
    );
    assert!(screen.contains("✓ Ship? (ask) → [H] Hold"), "{screen}");
    assert!(screen.contains("'maybe' matches no option"), "{screen}");
    assert!(screen.contains("Select: "), "{screen}");
    assert_eq!(
        screen.matches("Select: ").count(),
        2,
        "asked again: {screen}"
    );
    assert!(env.work_dir().join("no").exists(), "{screen}");
    assert!(!env.work_dir().join("yes").exists());
    let events = events(&env.fabro_home().join("scratch/tty1"));
    let answer = events
        .iter()
        .find(|event| event["event"] == "HumanAnswer")
        .expect("HumanAnswer event");
    assert_eq!(answer["properties"]["source"], "console", "{answer}");
}

/// SPEC 17.6: an unknown `--provider`, or a `--model` alias of another provider, is a usage
/// error (exit 2) before a run is created: nothing is written under FABRO_HOME.
#[test]
fn bad_provider_and_model_flags_are_usage_errors_before_a_run_exists() {
    let env = TestEnv::new("run_model_flags");
    let workflow = format!(
        "{FRAME_START}  c [shape=parallelogram, script=\"echo hi\"]\n  start -> c -> exit\n}}\n"
    );
    let refused: [(&[&str], &str); 3] = [
        (
            &["--provider", "foo"],
            "error: unknown provider 'foo' for --provider; expected one of: anthropic, openai, gemini, openai_compatible, simulated, kimi, zai, minimax, inception, openrouter, fireworks, ollama, litellm\n",
        ),
        (
            &["--provider", "openai", "--model", "sonnet"],
            "error: --model sonnet is the catalog alias of claude-sonnet-4-6, a model of provider anthropic, but --provider is openai; use a model of openai or drop one of the flags\n",
        ),
        (
            &["--model", "gemini-pro", "--provider", "anthropic", "--dry-run"],
            "error: --model gemini-pro is the catalog alias of gemini-3.1-pro-preview, a model of provider gemini, but --provider is anthropic; use a model of anthropic or drop one of the flags\n",
        ),
    ];
    for (args, message) in refused {
        let (output, _) = run(&env, &workflow, args);
        assert_eq!(code(&output), 2, "{args:?}: {}", stderr(&output));
        assert_eq!(stderr(&output), message, "{args:?}");
        assert_eq!(stdout(&output), "", "{args:?}");
        let written: Vec<_> = fs_err::read_dir(env.fabro_home())
            .expect("FABRO_HOME exists")
            .collect();
        assert!(written.is_empty(), "{args:?} wrote {written:?}");
    }
    // A provider's own alias, an id, and any model under the simulated provider pass.
    for (index, args) in [
        ["--provider", "openai", "--model", "gpt5"],
        ["--provider", "openai_compatible", "--model", "local-llama"],
        ["--provider", "simulated", "--model", "opus"],
    ]
    .iter()
    .enumerate()
    {
        env.write("w.fabro", &workflow);
        let run_id = format!("ok{index}");
        let mut all = vec!["run", "w.fabro", "--run-id", &run_id];
        all.extend_from_slice(args);
        let output = fabro(&env, &all);
        assert_eq!(code(&output), 0, "{args:?}: {}", stderr(&output));
    }
}

/// A workflow naming a provider outside SPEC 10.1 does not run (`provider_known`), except
/// where its providers are never called: dry runs and the simulated provider (17.3).
#[test]
fn unknown_workflow_providers_stop_real_runs_but_not_simulated_ones() {
    let env = TestEnv::new("run_unknown_provider");
    let workflow = format!(
        "{FRAME_START}  ask [label=\"Ask\", prompt=\"Hi\", provider=azure]\n  start -> ask -> exit\n}}\n"
    );
    let (output, run_dir) = run(&env, &workflow, &[]);
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    assert!(
        stderr(&output).contains(
            "w.fabro:4:34: error[provider_known]: unknown provider 'azure' on node 'ask'"
        ),
        "{}",
        stderr(&output)
    );
    assert!(!run_dir.exists());
    let output = fabro(&env, &["run", "w.fabro", "--dry-run", "--run-id", "dry"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
}

/// SPEC 5.10: the manager loop cancels a child that outlives `manager.max_cycles`
/// (the stage fails) or that meets `manager.stop_condition` (the stage succeeds).
#[test]
fn sub_workflow_manager_stops_slow_children() {
    let env = TestEnv::new("run_sub_workflow_manager");
    env.write(
        "flows/slow.fabro",
        "digraph child {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  wait [shape=parallelogram, script=\"sleep 30\"]\n  start -> wait -> exit\n}\n",
    );
    let parent = |manager: &str| {
        format!("digraph parent {{\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  manage [shape=house, stack.child_workflow=\"slow.fabro\", manager.poll_interval=\"20ms\", {manager}]\n  start -> manage -> exit\n}}\n")
    };
    let child_status = |run_id: &str| {
        let checkpoint: Value = serde_json::from_str(
            &fs_err::read_to_string(
                env.fabro_home()
                    .join("scratch")
                    .join(run_id)
                    .join("checkpoint.json"),
            )
            .expect("checkpoint"),
        )
        .expect("json");
        checkpoint["context_values"]["stack.child.status"].clone()
    };

    env.write("flows/capped.fabro", &parent("manager.max_cycles=3"));
    let output = fabro(&env, &["run", "flows/capped.fabro", "--run-id", "capped"]);
    // The failed stage routes to exit without a condition: partial_success.
    assert_eq!(code(&output), 3, "{}\n{}", stdout(&output), stderr(&output));
    assert!(
        stderr(&output).contains("Max cycles exceeded"),
        "{}",
        stderr(&output)
    );

    env.write(
        "flows/stopped.fabro",
        &parent("manager.stop_condition=\"context.stack.child.status=running\""),
    );
    let output = fabro(&env, &["run", "flows/stopped.fabro", "--run-id", "stopped"]);
    assert_eq!(code(&output), 0, "{}\n{}", stdout(&output), stderr(&output));
    assert_eq!(child_status("stopped"), "canceled");
}
