//! Budgets (SPEC 17.1): a run stops at `max_stages`, `max_tokens`, `max_cost_usd` or
//! `max_duration` like a cancellation (status `canceled`, exit 1, `BudgetExhausted`
//! before `WorkflowRunFailed {failure_class: "budget_exhausted"}`) and resumes with a
//! higher limit.

use std::path::Path;
use std::time::{Duration, Instant};

use fabro_test_support::TestEnv;
use fabro_twin::{Reply, Turn, Twin};
use serde_json::Value;

use crate::{code, fabro, stderr, stdout};

/// A loop of successful command stages that never reaches exit: the goal gate `check`
/// never succeeds, so exit sends the run back to `work` (SPEC 9.10).
pub(crate) const COMMAND_LOOP: &str = r#"digraph spin {
  graph [goal="Spin"]
  start [shape=Mdiamond]
  exit [shape=Msquare]
  work [shape=parallelogram, script="true"]
  check [shape=parallelogram, script="echo looping", goal_gate=true, retry_target="work"]
  start -> work -> check
  check -> exit [condition="context.never=1"]
  check -> work
}
"#;

/// The same loop through an LLM stage.
pub(crate) fn llm_loop(model: &str) -> String {
    format!(
        r#"digraph think {{
  graph [goal="Think forever"]
  start [shape=Mdiamond]
  exit [shape=Msquare]
  think [shape=tab, prompt="Think about the goal once more", model="{model}"]
  check [shape=parallelogram, script="true"]
  start -> think -> check
  check -> exit [condition="context.never=1"]
  check -> think
}}
"#
    )
}

fn events(run_dir: &Path) -> Vec<Value> {
    fs_err::read_to_string(run_dir.join("events.jsonl"))
        .expect("events")
        .lines()
        .map(|line| serde_json::from_str(line).expect("event JSON"))
        .collect()
}

fn checkpoint(run_dir: &Path) -> Value {
    serde_json::from_str(&fs_err::read_to_string(run_dir.join("checkpoint.json")).expect("read"))
        .expect("checkpoint JSON")
}

fn stages_started(run_dir: &Path) -> usize {
    events(run_dir)
        .iter()
        .filter(|event| event["event"] == "StageStarted")
        .count()
}

/// The reason line of a finished run.
fn reason(output: &std::process::Output) -> String {
    stdout(output)
        .lines()
        .find_map(|line| line.strip_prefix("reason: "))
        .unwrap_or_default()
        .to_owned()
}

/// Checks the stop of SPEC 17.1 and returns the `BudgetExhausted` properties.
fn assert_budget_stop(output: &std::process::Output, run_dir: &Path, kind: &str) -> Value {
    assert_eq!(code(output), 1, "{}{}", stdout(output), stderr(output));
    assert!(
        stdout(output).contains("status: canceled\n"),
        "{}",
        stdout(output)
    );
    let reason = reason(output);
    assert!(
        reason.starts_with(&format!("budget exhausted: {kind} ")),
        "{reason}"
    );
    let events = events(run_dir);
    let n = events.len();
    assert_eq!(
        events[n - 1]["event"],
        "WorkflowRunFailed",
        "{:?}",
        events[n - 1]
    );
    assert_eq!(
        events[n - 1]["properties"]["failure_class"],
        "budget_exhausted"
    );
    assert_eq!(events[n - 1]["properties"]["reason"], reason.as_str());
    let budget = events
        .iter()
        .rposition(|event| event["event"] == "BudgetExhausted")
        .expect("a BudgetExhausted event");
    assert!(budget < n - 1);
    let properties = events[budget]["properties"].clone();
    assert_eq!(properties["kind"], kind);
    assert_eq!(
        reason,
        format!(
            "budget exhausted: {kind} {} of {}",
            properties["used"].as_str().expect("used"),
            properties["limit"].as_str().expect("limit")
        )
    );
    assert_eq!(checkpoint(run_dir)["run_status"], "canceled");
    properties
}

#[test]
fn a_loop_of_successes_stops_at_max_stages_and_resumes_with_a_higher_limit() {
    let env = TestEnv::new("budget_stages");
    env.write("w.fabro", COMMAND_LOOP);
    let output = fabro(
        &env,
        &["run", "w.fabro", "--run-id", "r1", "--max-stages", "30"],
    );
    let run_dir = env.fabro_home().join("scratch/r1");
    let budget = assert_budget_stop(&output, &run_dir, "stages");
    assert_eq!(reason(&output), "budget exhausted: stages 30 of 30");
    // SPEC 17.5: after a cancellation, stderr says how to go on.
    assert!(
        crate::stderr(&output).ends_with("resume with: fabro resume r1\n"),
        "{}",
        crate::stderr(&output)
    );
    assert_eq!(budget["used"], "30");
    assert_eq!(stages_started(&run_dir), 30);
    assert_eq!(checkpoint(&run_dir)["stage_rank"], 30);

    // The stage count carries over: a resume with a higher limit runs 10 more stages.
    let resumed = fabro(&env, &["resume", "r1", "--max-stages", "40"]);
    assert_budget_stop(&resumed, &run_dir, "stages");
    assert_eq!(reason(&resumed), "budget exhausted: stages 40 of 40");
    assert_eq!(stages_started(&run_dir), 40);
}

#[test]
fn max_stages_comes_from_the_run_config_and_the_flag_overrides_it() {
    let env = TestEnv::new("budget_config");
    env.write("w.fabro", COMMAND_LOOP);
    env.write("run.toml", "[run]\nmax_stages = 12\n");
    let output = fabro(
        &env,
        &["run", "w.fabro", "--run-id", "r1", "--config", "run.toml"],
    );
    assert_budget_stop(&output, &env.fabro_home().join("scratch/r1"), "stages");
    assert_eq!(reason(&output), "budget exhausted: stages 12 of 12");
    let output = fabro(
        &env,
        &[
            "run",
            "w.fabro",
            "--run-id",
            "r2",
            "--config",
            "run.toml",
            "--max-stages",
            "7",
        ],
    );
    assert_eq!(reason(&output), "budget exhausted: stages 7 of 7");

    env.write("bad.toml", "[run]\nmax_stage = 12\n");
    let output = fabro(&env, &["run", "w.fabro", "--config", "bad.toml"]);
    assert_eq!(code(&output), 2);
    assert!(
        stderr(&output).contains("did you mean 'run.max_stages'?"),
        "{}",
        stderr(&output)
    );
    env.write("bad.toml", "[run]\nmax_duration = \"soon\"\n");
    let output = fabro(&env, &["run", "w.fabro", "--config", "bad.toml"]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    let output = fabro(&env, &["run", "w.fabro", "--max-duration", "soon"]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
}

#[test]
fn the_default_limit_stops_a_runaway_loop_at_1000_stages() {
    let env = TestEnv::new("budget_default");
    env.write("w.fabro", COMMAND_LOOP);
    let output = fabro(&env, &["run", "w.fabro", "--run-id", "r1"]);
    let run_dir = env.fabro_home().join("scratch/r1");
    assert_budget_stop(&output, &run_dir, "stages");
    assert_eq!(reason(&output), "budget exhausted: stages 1000 of 1000");
}

#[test]
fn max_tokens_stops_after_the_llm_call_that_reaches_it_and_totals_carry_across_resumes() {
    let env = TestEnv::new("budget_tokens");
    env.write("w.fabro", &llm_loop("sonnet"));
    let output = fabro(
        &env,
        &[
            "run",
            "w.fabro",
            "--run-id",
            "r1",
            "--provider",
            "simulated",
            "--max-tokens",
            "300",
        ],
    );
    let run_dir = env.fabro_home().join("scratch/r1");
    let budget = assert_budget_stop(&output, &run_dir, "tokens");
    assert_eq!(budget["limit"], "300");
    let used: u64 = budget["used"]
        .as_str()
        .expect("used")
        .parse()
        .expect("number");
    assert!(used >= 300, "{used}");
    // The run stopped at the first call that reached the limit: without it the run
    // was below the limit.
    let usage: Vec<u64> = events(&run_dir)
        .iter()
        .filter(|event| event["event"] == "StageCompleted" && event["node_id"] == "think")
        .map(|event| {
            event["properties"]["usage"]["input_tokens"]
                .as_u64()
                .unwrap_or(0)
                + event["properties"]["usage"]["output_tokens"]
                    .as_u64()
                    .unwrap_or(0)
        })
        .collect();
    assert_eq!(usage.iter().sum::<u64>(), used, "{usage:?}");
    assert!(used - usage.last().expect("a think stage") < 300);
    assert_eq!(checkpoint(&run_dir)["llm_tokens"], used);

    let resumed = fabro(
        &env,
        &[
            "resume",
            "r1",
            "--provider",
            "simulated",
            "--max-tokens",
            "600",
        ],
    );
    let budget = assert_budget_stop(&resumed, &run_dir, "tokens");
    let total: u64 = budget["used"]
        .as_str()
        .expect("used")
        .parse()
        .expect("number");
    assert!(total >= 600 && total > used, "{total}");
}

#[test]
fn max_cost_counts_the_catalog_price_of_every_call() {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = runtime.block_on(Twin::start()).expect("the twin starts");
    // 100,000 input tokens of claude-sonnet-4-6 at 3 $ per million: 0.30 $ a call.
    twin.set_fallback(Reply::Turn(Turn {
        input_tokens: 100_000,
        output_tokens: 0,
        ..Turn::text("Still thinking.")
    }));
    let env = TestEnv::new("budget_cost");
    env.write("w.fabro", &llm_loop("claude-sonnet-4-6"));
    let output = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro", "--run-id", "r1", "--max-cost", "1"])
        .env("ANTHROPIC_API_KEY", "sk-ant-test-key")
        .env("ANTHROPIC_BASE_URL", twin.base_url())
        .output()
        .expect("fabro runs");
    let run_dir = env.fabro_home().join("scratch/r1");
    assert_budget_stop(&output, &run_dir, "cost");
    assert_eq!(reason(&output), "budget exhausted: cost 1.20 of 1.00");
    assert_eq!(twin.requests().len(), 4);

    let resumed = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["resume", "r1", "--max-cost", "1.4"])
        .env("ANTHROPIC_API_KEY", "sk-ant-test-key")
        .env("ANTHROPIC_BASE_URL", twin.base_url())
        .output()
        .expect("fabro runs");
    assert_budget_stop(&resumed, &run_dir, "cost");
    assert_eq!(reason(&resumed), "budget exhausted: cost 1.50 of 1.40");
    assert_eq!(twin.requests().len(), 5);
}

#[test]
fn max_duration_interrupts_the_running_stage() {
    let env = TestEnv::new("budget_duration");
    env.write(
        "w.fabro",
        r#"digraph slow {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  nap [shape=parallelogram, script="sleep 5"]
  start -> nap -> exit
}
"#,
    );
    let started = Instant::now();
    let output = fabro(
        &env,
        &["run", "w.fabro", "--run-id", "r1", "--max-duration", "1s"],
    );
    let elapsed = started.elapsed();
    let run_dir = env.fabro_home().join("scratch/r1");
    assert_budget_stop(&output, &run_dir, "duration");
    assert!(elapsed < Duration::from_secs(4), "{elapsed:?}");
    assert_eq!(checkpoint(&run_dir)["next_node_id"], "nap");
    // The duration restarts at each resume: with time enough the run finishes.
    let resumed = fabro(&env, &["resume", "r1", "--max-duration", "1m"]);
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
}

/// Bytes of every file under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let Ok(metadata) = fs_err::symlink_metadata(&path) else {
            continue;
        };
        if metadata.is_dir() {
            for entry in fs_err::read_dir(&path).into_iter().flatten().flatten() {
                stack.push(entry.path());
            }
        } else {
            total += metadata.len();
        }
    }
    total
}

/// Issue 16, acceptance 4: with the default budgets every corpus workflow that
/// validates, run offline, ends within 60 s and writes less than 100 MB
/// (`bench/corpus_budget.sh` prints the numbers).
#[test]
fn every_corpus_workflow_ends_within_60_s_and_100_mb_with_the_defaults() {
    let Some(files) = fabro_test_support::corpus_files() else {
        fabro_test_support::skip(
            "every_corpus_workflow_ends_within_60_s_and_100_mb_with_the_defaults",
            "../shared/corpus/fabro is not next to this checkout",
        );
        return;
    };
    let mut ran = 0;
    for path in files {
        if path.file_name().is_some_and(|name| name == "invalid.fabro") {
            continue;
        }
        let env = TestEnv::new("budget_corpus");
        let workflow = path.to_str().expect("UTF-8 corpus path");
        if code(&fabro(&env, &["validate", workflow])) != 0 {
            continue;
        }
        let started = Instant::now();
        let mut child = env
            .command(env!("CARGO_BIN_EXE_fabro"))
            .args(["run", workflow, "--auto-approve", "--provider", "simulated"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("fabro starts");
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break Some(status);
            }
            if started.elapsed() > Duration::from_secs(60) {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let elapsed = started.elapsed();
        assert!(
            status.is_some(),
            "{workflow} still running after {elapsed:?}"
        );
        let output = child.wait_with_output().expect("output");
        let text = stdout(&output);
        let final_status = text
            .lines()
            .find_map(|line| line.strip_prefix("status: "))
            .unwrap_or_default();
        assert!(
            ["success", "partial_success", "fail", "canceled"].contains(&final_status),
            "{workflow}: {text}"
        );
        if final_status == "canceled" {
            assert!(
                reason(&output).starts_with("budget exhausted: "),
                "{workflow}: {text}"
            );
        }
        let written = bytes_under(&env.fabro_home()) + bytes_under(&env.work_dir());
        assert!(
            written < 100 * 1024 * 1024,
            "{workflow} wrote {written} bytes"
        );
        ran += 1;
    }
    assert!(ran > 40, "only {ran} corpus workflows ran");
}

#[test]
fn stages_of_parallel_branches_count_against_max_stages() {
    let env = TestEnv::new("budget_parallel");
    env.write(
        "w.fabro",
        r#"digraph fan {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  fork [shape=component]
  a1 [shape=parallelogram, script="true"]
  a2 [shape=parallelogram, script="true"]
  a3 [shape=parallelogram, script="true"]
  b1 [shape=parallelogram, script="true"]
  b2 [shape=parallelogram, script="true"]
  b3 [shape=parallelogram, script="true"]
  join [shape=tripleoctagon]
  start -> fork
  fork -> a1 -> a2 -> a3 -> join
  fork -> b1 -> b2 -> b3 -> join
  join -> exit
}
"#,
    );
    let output = fabro(
        &env,
        &["run", "w.fabro", "--run-id", "r1", "--max-stages", "5"],
    );
    let run_dir = env.fabro_home().join("scratch/r1");
    assert_budget_stop(&output, &run_dir, "stages");
    assert_eq!(reason(&output), "budget exhausted: stages 5 of 5");
    assert_eq!(stages_started(&run_dir), 5);
    // Without a limit in the way the resumed run completes the branches.
    let resumed = fabro(&env, &["resume", "r1", "--max-stages", "0"]);
    assert_eq!(
        code(&resumed),
        0,
        "{}{}",
        stdout(&resumed),
        stderr(&resumed)
    );
}
