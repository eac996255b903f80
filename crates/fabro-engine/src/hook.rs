//! Hooks (SPEC 20.4): the `[[hooks]]` of a run's configuration, run on its run and stage
//! events with the event's envelope (as written to `events.jsonl`, redacted) as JSON.
//!
//! A command hook runs `sh -c {command}` in the stage's (or run's) working directory with
//! the envelope on standard input, through the command handler's own path
//! ([`crate::script::supervise`]): the sandbox environment of SPEC 13.5, the
//! `command_isolation` of SPEC 16, a process group of its own that its timeout kills. An
//! HTTP hook POSTs the envelope ([`http`]). Each hook is recorded by `HookStarted` and
//! `HookCompleted` and appends its output, redacted, to `hooks.log` in the stage
//! directory (the run directory for run events).
//!
//! Hooks run in the background, so a slow one never holds a stage up, except blocking
//! `stage_start` hooks: the stage waits for them, and the first that fails fails the
//! stage (`deterministic`, with its last stderr line) before its handler runs
//! ([`Hooks::stage_start`]). A background hook that fails or times out emits
//! `Warning {code: "hook_failed", event, reason}` and the run goes on; the run's end does
//! not stop them (their timeout bounds them). At the end of a run ([`Hooks::finish`]) fabro waits for the hooks still
//! running, then runs the `run_complete` or `run_failed` hooks to their end, just before
//! the run's last event (so that it stays last, SPEC 11.3). Dry runs run no hooks. A run
//! without hooks pays one branch per event.

mod http;

use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::{Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{HookConfig, HookEvent, HookKind};
use crate::event::kind::{HookCompleted, HookStarted, Warning};
use crate::event::{Emitter, Event, EventEnvelope};
use crate::sandbox::{PrivateTmpDir, ProcessKind, SandboxEnv};
use crate::script::{supervise, Capture, Ending, Script, KILL_GRACE};

/// The hooks of one run; without any, every call returns at once.
#[derive(Default)]
pub(crate) struct Hooks {
    runner: Option<Arc<Runner>>,
}

/// Where the hooks of one event run and log.
#[derive(Clone, Copy)]
pub(crate) struct HookPlace<'a> {
    /// The working directory of the stage or run.
    pub(crate) work_dir: &'a Path,
    /// The private `TMPDIR` of the stage's run or parallel branch (decision 63).
    pub(crate) tmpdir: &'a PrivateTmpDir,
    /// Where `hooks.log` goes: the stage directory, or the run directory.
    pub(crate) log_dir: &'a Path,
}

/// What the blocking `stage_start` hooks decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Every one succeeded (or there is none): the handler runs.
    Open,
    /// One failed: the stage fails `deterministic` with this reason.
    Failed(String),
    /// The run was cancelled while one ran.
    Canceled,
}

/// What every hook task shares.
struct Runner {
    /// `[[hooks]]`, in configuration order; a hook's number is its index + 1.
    hooks: Vec<HookConfig>,
    emitter: Arc<Emitter>,
    sandbox_env: SandboxEnv,
    /// The run's token: stops hooks when the run is cancelled.
    cancel: CancellationToken,
    /// The background hooks, waited for at the end of the run.
    tasks: TaskTracker,
    /// The HTTP client, made for the first HTTP hook.
    http: std::sync::OnceLock<Result<reqwest::Client, String>>,
    /// Orders appends to `hooks.log` files.
    log: tokio::sync::Mutex<()>,
}

/// [`HookPlace`], owned by a background task.
struct Place {
    work_dir: PathBuf,
    tmpdir: PrivateTmpDir,
    log_dir: PathBuf,
}

impl Place {
    fn of(place: HookPlace<'_>) -> Place {
        Place {
            work_dir: place.work_dir.to_path_buf(),
            tmpdir: place.tmpdir.clone(),
            log_dir: place.log_dir.to_path_buf(),
        }
    }
}

/// One event's hook call: which event, about which node, with which envelope.
#[derive(Clone)]
struct Call {
    event: HookEvent,
    node_id: Option<String>,
    /// The envelope as compact JSON.
    input: Arc<[u8]>,
}

/// How one hook ended.
#[derive(Debug, Default)]
struct HookResult {
    status: Status,
    exit_code: Option<i32>,
    status_code: Option<u16>,
    timed_out: bool,
    /// Why it failed.
    reason: Option<String>,
    /// Its output for `hooks.log`, before redaction.
    log: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Status {
    #[default]
    Success,
    Fail,
    Canceled,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Success => "success",
            Status::Fail => "fail",
            Status::Canceled => "canceled",
        }
    }
}

impl HookResult {
    fn failed(reason: String) -> HookResult {
        HookResult {
            status: Status::Fail,
            log: format!("failed: {reason}\n"),
            reason: Some(reason),
            ..HookResult::default()
        }
    }

    fn canceled() -> HookResult {
        HookResult {
            status: Status::Canceled,
            reason: Some("canceled".to_owned()),
            log: "canceled\n".to_owned(),
            ..HookResult::default()
        }
    }

    fn timed_out(timeout: Duration) -> HookResult {
        let reason = format!("timed out after {}s", timeout.as_secs());
        HookResult {
            status: Status::Fail,
            timed_out: true,
            log: format!("{reason}\n"),
            reason: Some(reason),
            ..HookResult::default()
        }
    }
}

impl Hooks {
    /// The run's hooks (a dry run passes none: SPEC 4.9, nothing outside the run
    /// happens).
    pub(crate) fn new(
        hooks: &[HookConfig],
        emitter: &Arc<Emitter>,
        sandbox_env: &SandboxEnv,
        cancel: &CancellationToken,
    ) -> Hooks {
        if hooks.is_empty() {
            return Hooks::default();
        }
        Hooks {
            runner: Some(Arc::new(Runner {
                hooks: hooks.to_vec(),
                emitter: Arc::clone(emitter),
                sandbox_env: sandbox_env.clone(),
                cancel: cancel.clone(),
                tasks: TaskTracker::new(),
                http: std::sync::OnceLock::new(),
                log: tokio::sync::Mutex::new(()),
            })),
        }
    }

    /// Whether the run has no hooks.
    pub(crate) fn is_empty(&self) -> bool {
        self.runner.is_none()
    }

    /// Starts the non-blocking hooks of `event` for `envelope` in the background.
    pub(crate) fn fire(&self, event: HookEvent, envelope: &EventEnvelope, place: HookPlace<'_>) {
        if let Some(runner) = &self.runner {
            runner.spawn(event, envelope, place);
        }
    }

    /// `stage_start`: starts its non-blocking hooks in the background, then runs its
    /// blocking ones in order until one fails.
    pub(crate) async fn stage_start(&self, envelope: &EventEnvelope, place: HookPlace<'_>) -> Gate {
        let Some(runner) = &self.runner else {
            return Gate::Open;
        };
        runner.spawn(HookEvent::StageStart, envelope, place);
        let node_id = envelope.node_id.as_deref();
        let blocking = |hook: &HookConfig| {
            hook.event == HookEvent::StageStart && hook.is_blocking() && hook.applies_to(node_id)
        };
        if !runner.hooks.iter().any(blocking) {
            return Gate::Open;
        }
        let call = Call::of(HookEvent::StageStart, envelope);
        let place = Place::of(place);
        for (number, hook) in runner.matching(&call) {
            if !hook.is_blocking() {
                continue;
            }
            let result = runner
                .run(number, hook, &call, &place, &runner.cancel)
                .await;
            match result.status {
                Status::Success => {}
                Status::Fail => {
                    return Gate::Failed(
                        result
                            .reason
                            .unwrap_or_else(|| format!("stage_start hook {number} failed")),
                    )
                }
                Status::Canceled => return Gate::Canceled,
            }
        }
        Gate::Open
    }

    /// The end of the run: waits for the hooks still running, then runs the hooks of
    /// `event` (`run_complete` or `run_failed`) for the run's last event, `envelope`, to
    /// their end. They are not stopped by the run's cancellation, which may be why the
    /// run ends.
    pub(crate) async fn finish(
        &self,
        event: HookEvent,
        envelope: &EventEnvelope,
        place: HookPlace<'_>,
    ) {
        let Some(runner) = &self.runner else {
            return;
        };
        runner.tasks.close();
        runner.tasks.wait().await;
        let call = Call::of(event, envelope);
        let place = Place::of(place);
        let cancel = CancellationToken::new();
        for (number, hook) in runner.matching(&call) {
            runner.run(number, hook, &call, &place, &cancel).await;
        }
    }
}

impl Call {
    fn of(event: HookEvent, envelope: &EventEnvelope) -> Call {
        Call {
            event,
            node_id: envelope.node_id.as_deref().map(str::to_owned),
            input: serde_json::to_vec(envelope)
                .unwrap_or_default()
                .into_boxed_slice()
                .into(),
        }
    }
}

impl Runner {
    /// The hooks of the call's event for its node, with their numbers.
    fn matching<'a>(&'a self, call: &'a Call) -> impl Iterator<Item = (u32, &'a HookConfig)> {
        self.hooks
            .iter()
            .zip(1u32..)
            .filter(|(hook, _)| {
                hook.event == call.event && hook.applies_to(call.node_id.as_deref())
            })
            .map(|(hook, number)| (number, hook))
    }

    /// Starts the non-blocking hooks of `event` in the background.
    fn spawn(self: &Arc<Self>, event: HookEvent, envelope: &EventEnvelope, place: HookPlace<'_>) {
        let node_id = envelope.node_id.as_deref();
        let wanted = |hook: &HookConfig| {
            hook.event == event && !hook.is_blocking() && hook.applies_to(node_id)
        };
        if !self.hooks.iter().any(wanted) {
            return;
        }
        let call = Call::of(event, envelope);
        let place = Arc::new(Place::of(place));
        for (number, hook) in self.matching(&call).filter(|(_, hook)| !hook.is_blocking()) {
            let (runner, call, place) = (Arc::clone(self), call.clone(), Arc::clone(&place));
            let hook = hook.clone();
            self.tasks.spawn(async move {
                // Not stopped by the run's end (a budget, a failure, a cancel): a
                // notification already started is delivered, bounded by its timeout,
                // and `finish` waits for it.
                let cancel = CancellationToken::new();
                runner.run(number, &hook, &call, &place, &cancel).await;
            });
        }
    }

    /// Runs one hook to its end: `HookStarted`, the hook, its `hooks.log` entry,
    /// `HookCompleted`, and `hook_failed` when a non-blocking one failed.
    async fn run(
        &self,
        number: u32,
        hook: &HookConfig,
        call: &Call,
        place: &Place,
        cancel: &CancellationToken,
    ) -> HookResult {
        let node_id = call.node_id.as_deref();
        let started = Instant::now();
        let target = match hook.kind {
            HookKind::Command => hook.command.clone().unwrap_or_default(),
            HookKind::Http => fabro_llm::redact_url(hook.url.as_deref().unwrap_or_default()),
        };
        self.emitter.emit(event_at(
            node_id,
            HookStarted {
                blocking: hook.is_blocking(),
                event: call.event.as_str().to_owned(),
                hook: number,
                target: target.clone(),
                timeout_ms: millis(hook.timeout()),
                kind: hook.kind.as_str().to_owned(),
            },
        ));
        let result = match hook.kind {
            HookKind::Command => self.run_command(hook, call, place, cancel).await,
            HookKind::Http => match self.client() {
                Ok(client) => http::post(client, hook, &call.input, cancel).await,
                Err(reason) => HookResult::failed(reason),
            },
        };
        let duration_ms = millis(started.elapsed());
        let heading = format!(
            "[{}] {} hook {number} ({}): {target}\n",
            crate::timestamp::now_rfc3339(),
            call.event.as_str(),
            hook.kind.as_str(),
        );
        self.append_log(&place.log_dir, heading + &result.log).await;
        self.emitter.emit(event_at(
            node_id,
            HookCompleted {
                duration_ms,
                event: call.event.as_str().to_owned(),
                exit_code: result.exit_code,
                hook: number,
                reason: result.reason.clone(),
                status: result.status.as_str().to_owned(),
                status_code: result.status_code,
                timed_out: result.timed_out,
            },
        ));
        if result.status == Status::Fail && !hook.is_blocking() {
            let reason = result.reason.clone().unwrap_or_default();
            self.emitter.emit(event_at(
                node_id,
                Warning {
                    event: Some(call.event.as_str().to_owned()),
                    reason: Some(reason.clone()),
                    ..Warning::new(
                        "hook_failed",
                        format!("{} hook {number} failed: {reason}", call.event.as_str()),
                    )
                },
            ));
        }
        result
    }

    /// `sh -c {command}` with the envelope on standard input, as a command node runs
    /// its script.
    async fn run_command(
        &self,
        hook: &HookConfig,
        call: &Call,
        place: &Place,
        cancel: &CancellationToken,
    ) -> HookResult {
        let input = match envelope_file(&call.input) {
            Ok(file) => file,
            Err(error) => {
                return HookResult::failed(format!("cannot write the event envelope: {error}"))
            }
        };
        let env = crate::sandbox::stage_env(&self.sandbox_env, &place.tmpdir, ProcessKind::Command);
        let command = hook.command.as_deref().unwrap_or_default();
        let arguments = [OsString::from("-c"), OsString::from(command)];
        let mut stdout = Capture::new(PathBuf::new(), "stdout");
        let mut stderr = Capture::new(PathBuf::new(), "stderr");
        let script = Script {
            env: &env,
            program: "/bin/sh",
            arguments: &arguments,
            work_dir: &place.work_dir,
            stdin: Some(&input),
            timeout: hook.timeout(),
            kill_grace: KILL_GRACE,
            cancel,
            emitter: &self.emitter,
        };
        let ending = supervise(&script, &mut stdout, &mut stderr).await;
        let mut result = match ending {
            Err(error) => HookResult::failed(crate::error_chain(&error)),
            Ok(Ending::Canceled(_)) => HookResult::canceled(),
            Ok(Ending::TimedOut(_)) => HookResult::timed_out(hook.timeout()),
            Ok(ending @ Ending::Exited(_)) => {
                let code = ending.exit_code().unwrap_or(-1);
                let mut result = if code == 0 {
                    HookResult::default()
                } else {
                    let reason = stderr
                        .tail
                        .last_line()
                        .unwrap_or_else(|| format!("exited with code {code}"));
                    HookResult {
                        status: Status::Fail,
                        reason: Some(reason),
                        ..HookResult::default()
                    }
                };
                result.exit_code = Some(code);
                result.log = format!("exit code {code}\n");
                result
            }
        };
        for capture in [&stdout, &stderr] {
            let (kept, dropped) = capture.tail.kept();
            if kept.is_empty() {
                continue;
            }
            let _ = writeln!(result.log, "--- {} ---", capture.stream);
            if dropped {
                result.log.push_str("(earlier output dropped)\n");
            }
            result.log.push_str(&kept);
            if !kept.ends_with('\n') {
                result.log.push('\n');
            }
        }
        result
    }

    /// The run's HTTP client, made once.
    fn client(&self) -> Result<&reqwest::Client, String> {
        self.http
            .get_or_init(|| {
                reqwest::Client::builder().build().map_err(|error| {
                    format!(
                        "cannot build the HTTP client: {}",
                        crate::error_chain(&error)
                    )
                })
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Appends `text`, redacted (SPEC 13.1), to `hooks.log` in `dir`; a failure is
    /// logged, since the hook's events record it anyway.
    async fn append_log(&self, dir: &Path, text: String) {
        let text = fabro_llm::redact::redactor().redact_str(&text).into_owned();
        let path = dir.join("hooks.log");
        let _order = self.log.lock().await;
        let written = async {
            let mut file = tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .await?;
            file.write_all(text.as_bytes()).await?;
            file.flush().await
        }
        .await;
        if let Err(error) = written {
            tracing::warn!(path = %path.display(), %error, "cannot write hooks.log");
        }
    }
}

/// The envelope in an unnamed temporary file, read from its start: a hook's standard
/// input, which it may read or not without blocking anything.
fn envelope_file(input: &[u8]) -> std::io::Result<std::fs::File> {
    let mut file = tempfile::tempfile()?;
    file.write_all(input)?;
    file.write_all(b"\n")?;
    file.rewind()?;
    Ok(file)
}

/// An event about `node_id`, or about the run.
fn event_at(node_id: Option<&str>, kind: impl Into<crate::event::EventKind>) -> Event {
    match node_id {
        Some(node_id) => Event::node(node_id, kind),
        None => Event::run(kind),
    }
}

/// Whole milliseconds, saturating.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
