//! The command handler (SPEC 5.4): runs a node's shell or Python script in a process
//! group of its own, streams stdout and stderr to `stdout.log` and `stderr.log` in the
//! stage directory while it runs, stores both streams as blobs once it ends (SPEC 7.7)
//! and turns the exit status, a timeout or a cancellation into an outcome.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabro_language::model::ScriptLanguage;
use serde_json::Value;

use super::StageInput;
use crate::blob::{BlobError, BlobStore};
use crate::event::kind::{CommandCompleted, CommandStarted};
use crate::event::Event;
use crate::failure::FailureClass;
use crate::id::BlobRef;
use crate::outcome::Outcome;
use crate::script::{supervise, Capture, Ending, Script, ScriptError, KILL_GRACE, TAIL_LINES};

/// The timeout of a command node without a `timeout` attribute (SPEC 2.10).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
/// Logs up to this size are stored from memory; larger ones are streamed.
const SMALL_LOG_BYTES: u64 = 1024 * 1024;

/// Context key of the stdout blob ref (SPEC 6.2).
const OUTPUT_KEY: &str = "command.output";
/// Context key of the stderr blob ref (SPEC 6.2).
const STDERR_KEY: &str = "command.stderr";

pub(super) async fn execute(input: &StageInput<'_>) -> Outcome {
    run(input, KILL_GRACE).await
}

/// [`execute`] with the SIGTERM-to-SIGKILL grace as a parameter, so tests of the
/// escalation need not wait the real 2 seconds.
async fn run(input: &StageInput<'_>, kill_grace: Duration) -> Outcome {
    // SPEC 2.7: defined run variables are expanded in scripts; shell variables survive.
    let script = input.services.variables.expand(input.node.script());
    let script = script.as_ref();
    if script.is_empty() {
        return not_run(
            input,
            Outcome::fail("No script specified", FailureClass::Deterministic),
        );
    }
    let interpreter = match Interpreter::of(input.node.language()) {
        Ok(interpreter) => interpreter,
        Err(value) => {
            return not_run(
                input,
                Outcome::fail(
                    format!(r#"Invalid language: "{value}" (expected "shell" or "python")"#),
                    FailureClass::Deterministic,
                ),
            )
        }
    };
    if input.services.dry_run {
        // SPEC 4.9: the script does not run; both streams are empty blobs.
        return not_run(
            input,
            Outcome::success().with_notes(format!("[Simulated] Script not run: {script}")),
        );
    }
    if input.services.cancel.is_cancelled() {
        return not_run(input, canceled());
    }
    run_script(input, script, interpreter, kill_grace).await
}

/// How a script language is run.
#[derive(Debug, Clone, Copy)]
struct Interpreter {
    /// The program, given `-c {script}`.
    program: &'static str,
    /// The language name, for events.
    language: &'static str,
}

impl Interpreter {
    /// The interpreter of `language`, or the unsupported value.
    fn of(language: &ScriptLanguage) -> Result<Interpreter, &str> {
        match language {
            ScriptLanguage::Shell => Ok(Interpreter {
                program: "/bin/sh",
                language: "shell",
            }),
            ScriptLanguage::Python => Ok(Interpreter {
                program: "python3",
                language: "python",
            }),
            ScriptLanguage::Other(value) => Err(value),
        }
    }
}

/// Why a script could not be run or its output not be kept. A failure to keep the output
/// (log files, blob store) is fabro's own storage failing: an engine error that stops the
/// run (issue 14). The others fail the stage as `deterministic`, the default class of
/// SPEC 9.1.
#[derive(Debug, thiserror::Error)]
enum CommandError {
    #[error("cannot create {}", .path.display())]
    CreateLog {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Script(#[from] ScriptError),
    #[error("cannot read the captured {stream}")]
    ReadLog {
        stream: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot store the {stream} of the script")]
    Store {
        stream: &'static str,
        #[source]
        source: BlobError,
    },
    #[error("storing the {stream} of the script panicked")]
    StorePanicked { stream: &'static str },
    #[error("preparing the log files panicked")]
    PreparePanicked,
}

impl CommandError {
    /// The failed outcome: the message followed by each cause.
    fn into_outcome(self) -> Outcome {
        let mut reason = self.to_string();
        let mut source = std::error::Error::source(&self);
        while let Some(cause) = source {
            reason.push_str(": ");
            reason.push_str(&cause.to_string());
            source = cause.source();
        }
        if self.is_storage() {
            Outcome::engine_error(reason)
        } else {
            Outcome::fail(reason, FailureClass::Deterministic)
        }
    }

    /// Whether fabro's own storage failed (the stage dir's logs or the blob store), rather
    /// than the script or its process.
    fn is_storage(&self) -> bool {
        match self {
            CommandError::Script(error) => error.is_storage(),
            CommandError::CreateLog { .. }
            | CommandError::ReadLog { .. }
            | CommandError::Store { .. } => true,
            CommandError::StorePanicked { .. } | CommandError::PreparePanicked => false,
        }
    }
}

/// Fails or succeeds without running anything, still setting both context keys to refs
/// of empty-string blobs (SPEC 4.9, 5.4: "in all cases").
fn not_run(input: &StageInput<'_>, outcome: Outcome) -> Outcome {
    match store_text(&input.services.blobs, String::new(), "output") {
        Ok(reference) => outcome
            .with_update(OUTPUT_KEY, Value::String(reference.to_string()))
            .with_update(STDERR_KEY, Value::String(reference.into_string())),
        Err(error) => error.into_outcome(),
    }
}

/// Runs the script and reports it with `CommandStarted` and `CommandCompleted`.
async fn run_script(
    input: &StageInput<'_>,
    script: &str,
    interpreter: Interpreter,
    kill_grace: Duration,
) -> Outcome {
    let node_id = input.node.id.as_str();
    let emitter = &*input.services.emitter;
    let timeout = input.node.timeout().unwrap_or(DEFAULT_TIMEOUT);
    emitter.emit(Event::node(
        node_id,
        CommandStarted {
            language: interpreter.language.to_owned(),
            script: script.to_owned(),
            timeout_ms: millis(timeout),
        },
    ));
    // SPEC 7.8: fingerprint the candidate files before the attempt, or reuse the
    // rescan after the previous attempt when no other stage ran since. The log files
    // are created in the same trip to a blocking thread.
    let assets = &input.services.assets;
    let stage = assets.current_stage();
    let reused = assets.reusable_baseline(stage, input.work_dir);
    let mut stdout = Capture::new(input.stage_dir.join("stdout.log"), "stdout");
    let mut stderr = Capture::new(input.stage_dir.join("stderr.log"), "stderr");
    let (baseline, logs) = prepare_attempt(input, reused, [&stdout.path, &stderr.path]).await;
    let started = Instant::now();
    let ending = match logs {
        Ok([stdout_log, stderr_log]) => {
            stdout.file = Some(tokio::fs::File::from_std(stdout_log));
            stderr.file = Some(tokio::fs::File::from_std(stderr_log));
            let env = crate::sandbox::stage_env(
                &input.services.sandbox_env,
                input.tmpdir,
                crate::sandbox::ProcessKind::Command,
            );
            let arguments = [OsString::from("-c"), OsString::from(script)];
            let script = Script {
                env: &env,
                program: interpreter.program,
                arguments: &arguments,
                work_dir: input.work_dir,
                stdin: None,
                timeout,
                kill_grace,
                cancel: &input.services.cancel,
                emitter,
            };
            supervise(&script, &mut stdout, &mut stderr)
                .await
                .map_err(CommandError::from)
        }
        Err(error) => Err(error),
    };
    stdout.finish().await;
    stderr.finish().await;
    let duration_ms = millis(started.elapsed());

    let stored = finish_attempt(input, &stdout, &stderr, baseline).await;
    let (stdout_ref, stderr_ref) = (stored.stdout, stored.stderr);
    let reference = |stored: &Result<BlobRef, CommandError>| stored.as_ref().ok().cloned();
    emitter.emit(Event::node(
        node_id,
        CommandCompleted {
            duration_ms,
            exit_code: ending.as_ref().ok().and_then(Ending::exit_code),
            stderr_ref: reference(&stderr_ref),
            stdout_ref: reference(&stdout_ref),
            timed_out: matches!(ending, Ok(Ending::TimedOut(_))),
        },
    ));

    if let Some(captured) = stored.assets {
        record_assets(input, stage, captured);
    }
    let outcome = outcome_of(script, timeout, ending, &mut stdout, &mut stderr);
    match (stdout_ref, stderr_ref) {
        (Ok(stdout_ref), Ok(stderr_ref)) => outcome
            .with_update(OUTPUT_KEY, Value::String(stdout_ref.into_string()))
            .with_update(STDERR_KEY, Value::String(stderr_ref.into_string())),
        (Err(error), _) | (_, Err(error)) => error.into_outcome(),
    }
}

/// The outcome of a finished run, before the context updates. Cancellation and timeout
/// take precedence over a lost log, which takes precedence over the exit status.
fn outcome_of(
    script: &str,
    timeout: Duration,
    ending: Result<Ending, CommandError>,
    stdout: &mut Capture,
    stderr: &mut Capture,
) -> Outcome {
    let status = match ending {
        Err(error) => return error.into_outcome(),
        Ok(Ending::Canceled(_)) => return canceled(),
        Ok(Ending::TimedOut(_)) => {
            return Outcome::fail(
                format!("Script timed out after {}ms: {script}", millis(timeout)),
                FailureClass::TransientInfra,
            )
        }
        Ok(Ending::Exited(status)) => status,
    };
    if let Some(error) = stdout.error.take().or_else(|| stderr.error.take()) {
        return CommandError::from(error).into_outcome();
    }
    // A signal fabro did not send (fabro only signals on timeout and cancellation)
    // reports -1, and any non-zero exit is deterministic whatever the output says
    // (SPEC 5.4, 9.1).
    match status.code().unwrap_or(-1) {
        0 => Outcome::success().with_notes(format!("Script completed: {script}")),
        code => Outcome::fail(
            exit_failure_reason(code, &stdout.tail.text(), &stderr.tail.text()),
            FailureClass::Deterministic,
        ),
    }
}

/// `Script failed with exit code: {code}`, then the tail of each non-empty stream under
/// a heading naming it.
fn exit_failure_reason(code: i32, stdout_tail: &str, stderr_tail: &str) -> String {
    let mut reason = format!("Script failed with exit code: {code}");
    for (stream, tail) in [("stdout", stdout_tail), ("stderr", stderr_tail)] {
        if !tail.is_empty() {
            reason.push_str(&format!("\n{stream} (last {TAIL_LINES} lines):\n{tail}"));
        }
    }
    reason
}

/// The outcome of a cancelled stage (SPEC 4.8).
fn canceled() -> Outcome {
    Outcome::fail("canceled", FailureClass::Canceled)
}

/// In one trip to a blocking thread (STYLE 11): the attempt's asset baseline (scanned
/// unless `reused`) and the two log files, created or truncated. No baseline if the
/// trip panicked.
async fn prepare_attempt(
    input: &StageInput<'_>,
    reused: Option<crate::asset_capture::Baseline>,
    logs: [&Path; 2],
) -> (
    Option<crate::asset_capture::Baseline>,
    Result<[std::fs::File; 2], CommandError>,
) {
    let scanner = Arc::clone(&input.services.assets.scanner);
    let work_dir = input.work_dir.to_path_buf();
    let logs = logs.map(Path::to_path_buf);
    tokio::task::spawn_blocking(move || {
        let baseline = reused.unwrap_or_else(|| scanner.baseline(&work_dir));
        let [stdout, stderr] = logs;
        let files = create_log(&stdout).and_then(|out| Ok([out, create_log(&stderr)?]));
        (Some(baseline), files)
    })
    .await
    .unwrap_or_else(|_| (None, Err(CommandError::PreparePanicked)))
}

/// Creates (or truncates) a log file.
#[expect(
    clippy::disallowed_methods,
    reason = "CommandError::CreateLog names the path already"
)]
fn create_log(path: &Path) -> Result<std::fs::File, CommandError> {
    std::fs::File::create(path).map_err(|source| CommandError::CreateLog {
        path: path.to_path_buf(),
        source,
    })
}

/// Keeps the rescan for the next attempt, counts the copied assets and reports skipped
/// ones as `asset_skipped` warnings.
fn record_assets(
    input: &StageInput<'_>,
    stage: u64,
    (report, snapshot): (
        crate::asset_capture::CaptureReport,
        crate::asset_capture::Snapshot,
    ),
) {
    let assets = &input.services.assets;
    assets.keep(stage, snapshot);
    assets
        .captured
        .fetch_add(report.captured.len(), std::sync::atomic::Ordering::SeqCst);
    for skip in &report.skipped {
        input.services.emitter.emit(Event::warning(
            Some(&input.node.id),
            "asset_skipped",
            &skip.to_string(),
        ));
    }
}

/// What [`finish_attempt`] did.
struct Finished {
    /// The stdout blob ref.
    stdout: Result<BlobRef, CommandError>,
    /// The stderr blob ref.
    stderr: Result<BlobRef, CommandError>,
    /// The assets copied (SPEC 7.8) and the rescan, when there was a baseline.
    assets: Option<(
        crate::asset_capture::CaptureReport,
        crate::asset_capture::Snapshot,
    )>,
}

/// In one trip to a blocking thread (STYLE 11): stores both captured logs as blobs, each
/// log's bytes decoded as UTF-8 (invalid sequences replaced) and serialised as a
/// compact JSON string (SPEC 7.7; a log never created counts as empty), then copies the
/// assets the attempt wrote. Large outputs are streamed, so memory stays bounded.
async fn finish_attempt(
    input: &StageInput<'_>,
    stdout: &Capture,
    stderr: &Capture,
    baseline: Option<crate::asset_capture::Baseline>,
) -> Finished {
    let blobs = input.services.blobs.clone();
    let logs = [
        (stdout.path.clone(), stdout.stream),
        (stderr.path.clone(), stderr.stream),
    ];
    let scanner = Arc::clone(&input.services.assets.scanner);
    let directory = crate::asset_capture::asset_dir(
        &input.services.assets.run_dir,
        &input.node.id,
        input.attempt,
    );
    tokio::task::spawn_blocking(move || {
        let [(stdout, out_stream), (stderr, err_stream)] = logs;
        Finished {
            stdout: store_log(&blobs, &stdout, out_stream),
            stderr: store_log(&blobs, &stderr, err_stream),
            assets: baseline.map(|baseline| scanner.capture_with_snapshot(&baseline, &directory)),
        }
    })
    .await
    .unwrap_or(Finished {
        stdout: Err(CommandError::StorePanicked { stream: "stdout" }),
        stderr: Err(CommandError::StorePanicked { stream: "stderr" }),
        assets: None,
    })
}

/// Stores the log at `path` (see [`store_logs`]).
fn store_log(
    blobs: &dyn BlobStore,
    path: &Path,
    stream: &'static str,
) -> Result<BlobRef, CommandError> {
    // Small logs (the usual case) are hashed first, so output seen before costs no
    // write and no sync; large ones are streamed.
    let small = fs_err::metadata(path).map_or(true, |metadata| metadata.len() <= SMALL_LOG_BYTES);
    if small {
        let bytes = match fs_err::read(path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => return Err(CommandError::ReadLog { stream, source }),
        };
        return blobs
            .put_text_bytes(&bytes)
            .map(|(reference, _)| reference)
            .map_err(|source| CommandError::Store { stream, source });
    }
    let mut log = match fs_err::File::open(path) {
        Ok(file) => Box::new(std::io::BufReader::new(file)) as Box<dyn std::io::Read>,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Box::new(std::io::empty()),
        Err(source) => return Err(CommandError::ReadLog { stream, source }),
    };
    blobs
        .put_text_stream(&mut log)
        .map(|(reference, _)| reference)
        .map_err(|source| CommandError::Store { stream, source })
}

/// Stores `text` as a JSON string blob and returns its ref.
fn store_text(
    blobs: &dyn BlobStore,
    text: String,
    stream: &'static str,
) -> Result<BlobRef, CommandError> {
    blobs
        .put_value(&Value::String(text))
        .map(|(reference, _)| reference)
        .map_err(|source| CommandError::Store { stream, source })
}

/// Whole milliseconds, saturating.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use std::collections::BTreeMap;
    use std::ffi::OsString;

    use fabro_language::StageStatus;

    use super::*;
    use crate::event::EventEnvelope;
    use crate::handler::test_support::{workflow, TestRun};
    use crate::sandbox::SandboxEnv;

    /// A workflow whose node `run` is a command node with `attributes`.
    fn command_workflow(attributes: &str) -> fabro_language::Workflow {
        workflow(&format!(
            r#"digraph t {{
                start [shape=Mdiamond]
                run [shape=parallelogram, {attributes}]
                exit [shape=Msquare]
                start -> run -> exit
            }}"#
        ))
    }

    /// The JSON string a context ref points to.
    fn blob_text(run: &TestRun, outcome: &Outcome, key: &str) -> String {
        let reference = outcome.context_updates[key]
            .as_str()
            .expect("refs are strings");
        match run
            .services
            .blobs
            .read_value(&BlobRef::parse(reference).expect("a blob ref"))
            .expect("blob stored")
        {
            Value::String(text) => text,
            other => panic!("blob of {key} is not a string: {other}"),
        }
    }

    fn log(run: &TestRun, name: &str) -> String {
        fs_err::read_to_string(run.stage_dir.join(name)).expect("log written")
    }

    fn named<'a>(events: &'a [EventEnvelope], name: &str) -> Vec<&'a EventEnvelope> {
        events.iter().filter(|event| event.name() == name).collect()
    }

    fn completed(run: &TestRun) -> serde_json::Map<String, Value> {
        let events = run.events();
        let completed = named(&events, "CommandCompleted");
        assert_eq!(completed.len(), 1, "{events:?}");
        completed[0].properties()
    }

    #[tokio::test]
    async fn a_successful_script_streams_logs_and_stores_blobs() {
        let run = TestRun::new();
        let workflow = command_workflow(r#"script="echo hello; echo oops >&2""#);
        let outcome = execute(&run.input(&workflow, "run")).await;

        assert_eq!(outcome.status, StageStatus::Success, "{outcome:?}");
        assert_eq!(
            outcome.notes.as_deref(),
            Some("Script completed: echo hello; echo oops >&2")
        );
        assert_eq!(log(&run, "stdout.log"), "hello\n");
        assert_eq!(log(&run, "stderr.log"), "oops\n");
        assert_eq!(blob_text(&run, &outcome, OUTPUT_KEY), "hello\n");
        assert_eq!(blob_text(&run, &outcome, STDERR_KEY), "oops\n");

        let events = run.events();
        let started = named(&events, "CommandStarted");
        assert_eq!(started.len(), 1);
        assert_eq!(started[0].node_id.as_deref(), Some("run"));
        assert_eq!(
            Value::Object(started[0].properties()),
            json!({"script": "echo hello; echo oops >&2", "language": "shell", "timeout_ms": 600_000})
        );
        let completed = completed(&run);
        assert_eq!(completed["exit_code"], json!(0));
        assert_eq!(completed["timed_out"], json!(false));
        assert!(completed["duration_ms"].is_u64());
        assert_eq!(completed["stdout_ref"], outcome.context_updates[OUTPUT_KEY]);
        assert_eq!(completed["stderr_ref"], outcome.context_updates[STDERR_KEY]);
    }

    #[tokio::test]
    async fn a_non_zero_exit_fails_deterministically_with_the_last_lines() {
        let run = TestRun::new();
        let workflow = command_workflow(
            r#"script="for i in $(seq 1 25); do echo line$i; done; echo bad >&2; exit 3""#,
        );
        let outcome = execute(&run.input(&workflow, "run")).await;

        assert_eq!(outcome.failure_class(), Some(FailureClass::Deterministic));
        let stdout_tail: Vec<String> = (6..=25).map(|line| format!("line{line}")).collect();
        assert_eq!(
            outcome.failure_reason(),
            format!(
                "Script failed with exit code: 3\nstdout (last 20 lines):\n{}\nstderr (last 20 lines):\nbad",
                stdout_tail.join("\n")
            )
        );
        assert!(blob_text(&run, &outcome, OUTPUT_KEY).starts_with("line1\nline2\n"));
        assert_eq!(blob_text(&run, &outcome, STDERR_KEY), "bad\n");
        assert_eq!(completed(&run)["exit_code"], json!(3));
    }

    #[tokio::test]
    async fn a_log_that_cannot_be_created_stops_the_stage_as_an_engine_error_before_the_script_runs(
    ) {
        let run = TestRun::new();
        let workflow = command_workflow(r#"script="echo ran > ran.txt""#);
        let missing = run.stage_dir.join("missing");
        let input = StageInput {
            stage_dir: &missing,
            ..run.input(&workflow, "run")
        };
        let outcome = execute(&input).await;

        // fabro's own storage failed, not the script (issue 14 item 6).
        assert!(outcome.engine_error);
        assert_eq!(outcome.failure_class(), Some(FailureClass::Canceled));
        let reason = outcome.failure_reason();
        assert!(
            reason.starts_with(&format!(
                "engine error: cannot create {}",
                missing.join("stdout.log").display()
            )),
            "{reason}"
        );
        assert!(
            !run.work_dir.join("ran.txt").exists(),
            "the script never ran"
        );
    }

    #[tokio::test]
    async fn a_silent_failure_has_a_one_line_reason() {
        let run = TestRun::new();
        let workflow = command_workflow(r#"script="exit 3""#);
        let outcome = execute(&run.input(&workflow, "run")).await;

        assert_eq!(outcome.failure_reason(), "Script failed with exit code: 3");
        assert_eq!(blob_text(&run, &outcome, OUTPUT_KEY), "");
        assert_eq!(blob_text(&run, &outcome, STDERR_KEY), "");
    }

    #[tokio::test]
    async fn death_by_a_foreign_signal_reports_minus_one() {
        let run = TestRun::new();
        let workflow = command_workflow(r#"script="echo before; kill -9 $$""#);
        let outcome = execute(&run.input(&workflow, "run")).await;

        assert_eq!(outcome.failure_class(), Some(FailureClass::Deterministic));
        assert_eq!(
            outcome.failure_reason(),
            "Script failed with exit code: -1\nstdout (last 20 lines):\nbefore"
        );
        let completed = completed(&run);
        assert_eq!(completed["exit_code"], json!(-1));
        assert_eq!(completed["timed_out"], json!(false));
    }

    #[tokio::test]
    async fn a_timeout_stops_the_group_as_transient_infra() {
        let run = TestRun::new();
        let workflow = command_workflow(r#"script="echo started; sleep 5", timeout="200ms""#);
        let started = Instant::now();
        let outcome = execute(&run.input(&workflow, "run")).await;

        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(outcome.failure_class(), Some(FailureClass::TransientInfra));
        assert_eq!(
            outcome.failure_reason(),
            "Script timed out after 200ms: echo started; sleep 5"
        );
        assert_eq!(blob_text(&run, &outcome, OUTPUT_KEY), "started\n");
        assert_eq!(blob_text(&run, &outcome, STDERR_KEY), "");
        let events = run.events();
        assert_eq!(
            named(&events, "CommandStarted")[0].properties()["timeout_ms"],
            json!(200)
        );
        let completed = completed(&run);
        assert_eq!(completed["timed_out"], json!(true));
        assert_eq!(completed["exit_code"], json!(-1));
    }

    #[tokio::test]
    async fn a_group_ignoring_sigterm_is_killed_after_the_grace() {
        let run = TestRun::new();
        let workflow = command_workflow(r#"script="trap '' TERM; sleep 5", timeout="100ms""#);
        let started = Instant::now();
        let outcome = run_with_grace(&run, &workflow, Duration::from_millis(200)).await;

        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(outcome.failure_class(), Some(FailureClass::TransientInfra));
        assert_eq!(completed(&run)["exit_code"], json!(-1));
    }

    async fn run_with_grace(
        run: &TestRun,
        workflow: &fabro_language::Workflow,
        grace: Duration,
    ) -> Outcome {
        super::run(&run.input(workflow, "run"), grace).await
    }

    #[tokio::test]
    async fn cancellation_stops_the_group_and_fails_as_canceled() {
        let run = TestRun::new();
        let workflow = command_workflow(r#"script="echo ready; sleep 5""#);
        let stdout_log = run.stage_dir.join("stdout.log");
        let cancel_when_ready = async {
            // Synchronise on the script's own output rather than on a fixed delay.
            let deadline = Instant::now() + Duration::from_secs(10);
            while !fs_err::read_to_string(&stdout_log).is_ok_and(|text| text.contains("ready")) {
                assert!(
                    Instant::now() < deadline,
                    "the script never wrote its output"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            run.services.cancel.cancel();
            Instant::now()
        };
        let input = run.input(&workflow, "run");
        let (outcome, canceled_at) = tokio::join!(execute(&input), cancel_when_ready);

        assert!(canceled_at.elapsed() < Duration::from_secs(2));
        assert_eq!(outcome.failure_class(), Some(FailureClass::Canceled));
        assert_eq!(outcome.failure_reason(), "canceled");
        assert_eq!(blob_text(&run, &outcome, OUTPUT_KEY), "ready\n");
        let completed = completed(&run);
        assert_eq!(completed["timed_out"], json!(false));
        assert_eq!(completed["exit_code"], json!(-1));
    }

    #[tokio::test]
    async fn a_run_cancelled_before_the_stage_does_not_start_the_script() {
        let run = TestRun::new();
        run.services.cancel.cancel();
        let workflow = command_workflow(r#"script="touch marker""#);
        let outcome = execute(&run.input(&workflow, "run")).await;

        assert_eq!(outcome.failure_class(), Some(FailureClass::Canceled));
        assert!(!run.work_dir.join("marker").exists());
        assert_eq!(blob_text(&run, &outcome, OUTPUT_KEY), "");
    }

    #[tokio::test]
    async fn python_scripts_run_with_python3() {
        let run = TestRun::new();
        let workflow = command_workflow(r#"script="print(1)", language=python"#);
        let outcome = execute(&run.input(&workflow, "run")).await;

        assert_eq!(outcome.status, StageStatus::Success, "{outcome:?}");
        assert_eq!(blob_text(&run, &outcome, OUTPUT_KEY), "1\n");
        let events = run.events();
        assert_eq!(
            named(&events, "CommandStarted")[0].properties()["language"],
            json!("python")
        );
    }

    #[tokio::test]
    async fn scripts_run_in_the_work_dir_with_only_the_sandbox_environment() {
        let mut run = TestRun::new();
        let path = std::env::var_os("PATH").unwrap_or_default();
        run.services.sandbox_env = SandboxEnv::new(
            [(OsString::from("PATH"), path)],
            &[],
            &BTreeMap::from([("FABRO_TEST_VALUE".to_owned(), "sandboxed".to_owned())]),
        );
        let workflow = command_workflow(r#"script="pwd; echo \"[$HOME][$FABRO_TEST_VALUE]\"""#);
        let outcome = execute(&run.input(&workflow, "run")).await;

        assert_eq!(outcome.status, StageStatus::Success, "{outcome:?}");
        let work_dir = run.work_dir.canonicalize().expect("work dir exists");
        assert_eq!(
            blob_text(&run, &outcome, OUTPUT_KEY),
            format!("{}\n[][sandboxed]\n", work_dir.display())
        );
    }

    #[tokio::test]
    async fn run_variables_are_expanded_in_the_script() {
        let mut run = TestRun::new();
        run.services.variables = fabro_language::Variables::new(
            "the goal",
            BTreeMap::from([("name".to_owned(), "world".to_owned())]),
        );
        let workflow = command_workflow(r#"script="echo $name $goal ${name}""#);
        let outcome = execute(&run.input(&workflow, "run")).await;

        assert_eq!(
            outcome.notes.as_deref(),
            Some("Script completed: echo world the goal ${name}")
        );
        assert_eq!(blob_text(&run, &outcome, OUTPUT_KEY), "world the goal\n");
    }

    #[tokio::test]
    async fn an_empty_script_fails_without_running() {
        let run = TestRun::new();
        let workflow = command_workflow(r#"script="""#);
        let outcome = execute(&run.input(&workflow, "run")).await;

        assert_eq!(outcome.failure_class(), Some(FailureClass::Deterministic));
        assert_eq!(outcome.failure_reason(), "No script specified");
        assert_eq!(blob_text(&run, &outcome, OUTPUT_KEY), "");
        assert_eq!(blob_text(&run, &outcome, STDERR_KEY), "");
        assert!(run.events().is_empty());
    }

    #[tokio::test]
    async fn an_unknown_language_fails_without_running() {
        let run = TestRun::new();
        let workflow = command_workflow(r#"script="touch marker", language=ruby"#);
        let outcome = execute(&run.input(&workflow, "run")).await;

        assert_eq!(outcome.failure_class(), Some(FailureClass::Deterministic));
        assert_eq!(
            outcome.failure_reason(),
            r#"Invalid language: "ruby" (expected "shell" or "python")"#
        );
        assert!(!run.work_dir.join("marker").exists());
        assert!(run.events().is_empty());
    }

    #[tokio::test]
    async fn a_dry_run_simulates_the_script() {
        let mut run = TestRun::new();
        run.services.dry_run = true;
        let workflow = command_workflow(r#"script="touch marker""#);
        let outcome = execute(&run.input(&workflow, "run")).await;

        assert_eq!(outcome.status, StageStatus::Success);
        assert_eq!(
            outcome.notes.as_deref(),
            Some("[Simulated] Script not run: touch marker")
        );
        assert!(!run.work_dir.join("marker").exists());
        assert_eq!(blob_text(&run, &outcome, OUTPUT_KEY), "");
        assert_eq!(blob_text(&run, &outcome, STDERR_KEY), "");
        assert!(run.events().is_empty());
    }
}
