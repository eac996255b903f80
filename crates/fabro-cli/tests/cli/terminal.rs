//! The terminal view of SPEC 17.5, seen through a pseudo-terminal (util-linux `script`):
//! a spinner and the elapsed time while a stage runs with its last line of output, node
//! labels, the summary line, the resume hint and the gate prompt; and plain lines only
//! with `NO_COLOR` or a pipe.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use fabro_test_support::{skip, TestEnv};
use serde_json::Value;

use crate::{code, fabro, stderr};

/// The frames of the spinner.
const SPINNER: &[char] = &['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/// A labelled command that prints a line, then another a second later, and runs for
/// about 2.5 s; then a simulated LLM stage without a label.
const SLOW: &str = r#"digraph slow {
  graph [goal="Be slow"]
  start [shape=Mdiamond]
  exit [shape=Msquare]
  build [label="Build it", shape=parallelogram, script="echo first-line; sleep 1; echo second-line; sleep 1.5"]
  greet [shape=tab, prompt="Say hello"]
  start -> build -> greet -> exit
}
"#;

/// Whether `script` (util-linux) is there; CI installs it.
fn script_available(test: &str) -> bool {
    let found = Command::new("script")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success());
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have util-linux `script`"
        );
        skip(test, "util-linux `script` is not installed");
    }
    found
}

/// `fabro {args}` inside a pseudo-terminal (stdin, stdout and stderr all on it), with
/// colour unless `no_color`; `input` is typed into the terminal.
fn spawn_in_pty(env: &TestEnv, args: &[&str], no_color: bool, input: &str) -> Child {
    let quoted: Vec<String> = std::iter::once(env!("CARGO_BIN_EXE_fabro"))
        .chain(args.iter().copied())
        .map(|word| format!("'{}'", word.replace('\'', "'\\''")))
        .collect();
    let mut command = env.command("script");
    command
        .args(["-q", "-e", "-c", &quoted.join(" "), "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if !no_color {
        command.env_remove("NO_COLOR");
    }
    let mut child = command.spawn().expect("script runs");
    let mut stdin = child.stdin.take().expect("piped stdin");
    stdin.write_all(input.as_bytes()).expect("types the input");
    // Closing stdin makes `script` send an end-of-file to the terminal after the input.
    drop(stdin);
    child
}

fn wait(child: Child) -> Output {
    let output = child.wait_with_output().expect("script ends");
    assert!(
        output.stderr.is_empty(),
        "script complains: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// What the terminal showed, with the terminal's `\r\n` line ends turned into `\n`.
fn screen(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).replace("\r\n", "\n")
}

/// Input plus output tokens of the stages of a run.
fn run_tokens(run_dir: &Path) -> u64 {
    let mut tokens = 0;
    for entry in fs_err::read_dir(run_dir.join("stages")).expect("stages") {
        let status = entry.expect("entry").path().join("status.json");
        if let Ok(text) = fs_err::read_to_string(&status) {
            let json: Value = serde_json::from_str(&text).expect("status JSON");
            tokens += json["usage"]["input_tokens"].as_u64().unwrap_or(0)
                + json["usage"]["output_tokens"].as_u64().unwrap_or(0);
        }
    }
    tokens
}

/// The seconds of an elapsed time as the live line prints it (`850ms`, `1.2s`).
fn seconds(text: &str) -> Option<f64> {
    if let Some(milliseconds) = text.strip_suffix("ms") {
        return milliseconds.parse::<f64>().ok().map(|value| value / 1000.0);
    }
    text.strip_suffix('s')?.parse().ok()
}

#[test]
fn a_running_stage_shows_a_spinner_its_elapsed_time_and_its_last_output_line() {
    if !script_available(
        "a_running_stage_shows_a_spinner_its_elapsed_time_and_its_last_output_line",
    ) {
        return;
    }
    let env = TestEnv::new("terminal_live");
    env.write("slow.fabro", SLOW);
    let output = wait(spawn_in_pty(
        &env,
        &["run", "slow.fabro", "--run-id", "slow"],
        false,
        "",
    ));
    let text = screen(&output);
    assert_eq!(code(&output), 0, "{text}");

    // The live line is redrawn in place: each redraw starts with a carriage return and
    // an erase-line sequence.
    let redraws: Vec<&str> = text
        .split('\r')
        .filter_map(|part| part.strip_prefix("\x1b[2K"))
        .map(|part| part.split('\n').next().unwrap_or(""))
        .filter(|part| part.contains("Build it (build)"))
        // An erase before a finished line's mark is not a redraw.
        .filter(|part| !part.contains(" success ("))
        .collect();
    assert!(
        redraws.len() >= 4,
        "at least two redraws a second over 2.5 s: {text:?}"
    );
    let mut latest = 0.0;
    let mut saw_second_line = false;
    for redraw in &redraws {
        let mut words = redraw.split_whitespace();
        let spinner = words.next().unwrap_or("");
        assert!(
            spinner.chars().count() == 1 && spinner.chars().all(|c| SPINNER.contains(&c)),
            "a spinner frame first: {redraw:?}"
        );
        let rest = redraw
            .split_once("Build it (build) ")
            .map_or("", |(_, rest)| rest);
        let elapsed = rest.split_whitespace().next().unwrap_or("");
        let elapsed = seconds(elapsed).unwrap_or_else(|| panic!("an elapsed time: {redraw:?}"));
        assert!(elapsed >= latest, "the elapsed time grows: {redraws:?}");
        latest = elapsed;
        if rest.ends_with("second-line") {
            assert!(
                elapsed >= 0.9,
                "second-line appears after a second: {redraw:?}"
            );
            saw_second_line = true;
        }
    }
    assert!(latest >= 2.0, "redraws until the stage ends: {redraws:?}");
    assert!(saw_second_line, "the last output line: {redraws:?}");
    let frames: std::collections::BTreeSet<&str> = redraws
        .iter()
        .filter_map(|redraw| redraw.split_whitespace().next())
        .collect();
    assert!(frames.len() >= 3, "the spinner turns: {frames:?}");

    // Finished stages get their line, named by label; the run ends with the summary line
    // and then the status.
    assert!(
        text.contains("Build it (build) success ("),
        "the finished line: {text:?}"
    );
    let tokens = run_tokens(&env.fabro_home().join("scratch/slow"));
    assert!(tokens > 0);
    let summary = text
        .split(['\n', '\r'])
        .find(|line| line.starts_with("4 stages in "))
        .unwrap_or_else(|| panic!("a summary line: {text:?}"));
    assert!(
        summary.ends_with(&format!("; {tokens} tokens; $0.0000")),
        "{summary:?}"
    );
    let summary_at = text.find("4 stages in ").unwrap_or(0);
    let status_at = text.find("status: success").expect("the status line");
    assert!(summary_at < status_at, "{text:?}");
}

/// A human gate whose default is approval; revising goes back to `draft`.
const GATE: &str = r#"digraph gate {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  draft [shape=parallelogram, script="true"]
  review [shape=hexagon, label="Review the change", human.default_choice="exit"]
  start -> draft -> review
  review -> exit [label="[A] Approve"]
  review -> draft [label="[R] Revise"]
}
"#;

#[test]
fn the_gate_prompt_shows_each_key_once_marks_the_default_and_names_the_choice() {
    if !script_available(
        "the_gate_prompt_shows_each_key_once_marks_the_default_and_names_the_choice",
    ) {
        return;
    }
    let env = TestEnv::new("terminal_gate");
    env.write("gate.fabro", GATE);
    // `r` first, then `a`: the gate is visited twice.
    let output = wait(spawn_in_pty(&env, &["run", "gate.fabro"], true, "r\na\n"));
    let text = screen(&output);
    assert_eq!(code(&output), 0, "{text}");
    assert!(text.contains("[?] Review the change\n"), "{text}");
    assert!(text.contains("\n  [A] Approve (default)\n"), "{text}");
    assert!(text.contains("\n  [R] Revise\n"), "{text}");
    assert!(
        !text.contains("[A] [A]") && !text.contains("[R] [R]"),
        "{text}"
    );
    assert!(text.contains("type a key, a label, or a number"), "{text}");
    assert!(
        text.contains("✓ Review the change (review) → [R] Revise ("),
        "{text}"
    );
    assert!(
        text.contains("✓ Review the change (review) → [A] Approve ("),
        "{text}"
    );
}

/// A command that waits until the test cancels the run.
const HOLD: &str = r#"digraph hold {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  hold [label="Hold on", shape=parallelogram, script="touch started; sleep 30"]
  start -> hold -> exit
}
"#;

#[test]
fn a_cancelled_run_ends_with_the_summary_and_the_resume_hint() {
    if !script_available("a_cancelled_run_ends_with_the_summary_and_the_resume_hint") {
        return;
    }
    let env = TestEnv::new("terminal_cancel");
    env.write("hold.fabro", HOLD);
    let child = spawn_in_pty(&env, &["run", "hold.fabro", "--run-id", "held"], false, "");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !env.work_dir().join("started").exists() {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Long enough for several redraws of the live line.
    std::thread::sleep(Duration::from_millis(600));
    let cancel = fabro(&env, &["cancel", "held"]);
    assert_eq!(code(&cancel), 0, "{}", stderr(&cancel));
    let output = wait(child);
    let text = screen(&output);
    assert!(
        text.contains("\x1b[2K"),
        "the live line was drawn: {text:?}"
    );
    let stages = stages_completed(&env.fabro_home().join("scratch/held"));
    let summary = text
        .split(['\n', '\r'])
        .find(|line| line.starts_with(&format!("{stages} stages in ")))
        .unwrap_or_else(|| panic!("a summary line: {text:?}"));
    assert!(
        summary.ends_with("; 0 tokens"),
        "no cost without LLM calls: {summary:?}"
    );
    assert!(text.contains("status: canceled\n"), "{text:?}");
    assert!(
        text.contains("resume with: fabro resume held\n"),
        "{text:?}"
    );
}

/// Lines without escape codes, carriage returns or spinner frames.
fn assert_plain(text: &str) {
    assert!(!text.contains('\x1b'), "no escape codes: {text:?}");
    assert!(!text.contains('\r'), "no redraws: {text:?}");
    assert!(!text.contains(SPINNER), "no spinner: {text:?}");
}

#[test]
fn with_no_color_a_terminal_gets_plain_lines() {
    if !script_available("with_no_color_a_terminal_gets_plain_lines") {
        return;
    }
    let env = TestEnv::new("terminal_no_color");
    env.write("slow.fabro", SLOW);
    let output = wait(spawn_in_pty(
        &env,
        &["run", "slow.fabro", "--run-id", "plain"],
        true,
        "",
    ));
    let text = screen(&output);
    assert_eq!(code(&output), 0, "{text}");
    assert_plain(&text);
    assert!(text.contains("\n✓ Build it (build) success ("), "{text}");
    assert!(text.contains("\n4 stages in "), "{text}");
}

/// A goal gate that never passes: exit sends the run back to `think`, through a simulated
/// LLM node that pins its own model, until a budget or the circuit breaker stops it.
const LOOP: &str = r#"digraph spin {
  graph [goal="Spin"]
  start [shape=Mdiamond]
  exit [shape=Msquare]
  think [label="Think", shape=tab, prompt="Think", model="claude-sonnet-4-6"]
  check [shape=parallelogram, script="exit 1", goal_gate=true, retry_target="think"]
  start -> think -> check -> exit
}
"#;

/// The number of `StageCompleted` events of a run.
fn stages_completed(run_dir: &Path) -> usize {
    fs_err::read_to_string(run_dir.join("events.jsonl"))
        .expect("events")
        .lines()
        .filter(|line| line.contains("\"event\":\"StageCompleted\""))
        .count()
}

#[test]
fn a_pipe_gets_plain_lines_with_labels_loop_and_budget_events_and_the_summary() {
    let env = TestEnv::new("terminal_pipe");
    env.write("spin.fabro", LOOP);
    let output = fabro(
        &env,
        &[
            "run",
            "spin.fabro",
            "--run-id",
            "budget",
            "--provider",
            "simulated",
            "--max-stages",
            "5",
        ],
    );
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    let text = stderr(&output);
    assert_plain(&text);
    let think = text
        .lines()
        .find(|line| line.starts_with("✓ Think (think) success ("))
        .unwrap_or_else(|| panic!("a line named by the label: {text}"));
    assert!(
        think.contains(" claude-sonnet-4-6 (simulated) "),
        "the model, marked simulated: {think}"
    );
    assert!(text.contains("\n✗ check fail ("), "{text}");
    assert!(
        text.contains("\n↺ goal gate check unsatisfied; back to Think (think)\n"),
        "{text}"
    );
    assert!(
        text.contains("\n■ budget exhausted: stages 5 of 5\n"),
        "{text}"
    );
    let stages = stages_completed(&env.fabro_home().join("scratch/budget"));
    let tokens = run_tokens(&env.fabro_home().join("scratch/budget"));
    let summary = text
        .lines()
        .find(|line| line.starts_with(&format!("{stages} stages in ")))
        .unwrap_or_else(|| panic!("a summary line: {text}"));
    assert!(
        summary.ends_with(&format!("; {tokens} tokens; $0.0000")),
        "{summary}"
    );
    assert!(
        text.ends_with("resume with: fabro resume budget\n"),
        "{text}"
    );

    let output = fabro(
        &env,
        &[
            "run",
            "spin.fabro",
            "--run-id",
            "breaker",
            "--provider",
            "simulated",
        ],
    );
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    let text = stderr(&output);
    assert_plain(&text);
    assert!(
        text.contains("\n✗ circuit breaker tripped: check|deterministic|script failed with exit code: <n> repeated 3 times (limit 3)\n"),
        "{text}"
    );
}
