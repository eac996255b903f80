//! A script as a child process (SPEC 5.4, 20.4): started with the stage's sandbox
//! environment and isolation (SPEC 13.5, 16) in a process group of its own, its two
//! output streams redacted (SPEC 13.1) into [`Capture`]s while it runs, and stopped at
//! its timeout or the run's cancellation (SIGTERM to the group, SIGKILL after a grace).
//! Command nodes and command hooks both run their scripts through [`supervise`].

use std::ffi::OsString;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::{pin, Pin};
use std::process::ExitStatus;
use std::time::Duration;

use fabro_agent::{ProcessGroup, SpawnError, Spawned};
use nix::sys::signal::Signal;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::event::Emitter;
use crate::sandbox::SandboxEnv;

/// Time between SIGTERM and SIGKILL (SPEC 4.8, 5.4).
pub(crate) const KILL_GRACE: Duration = Duration::from_secs(2);
/// How long to wait for the pipes to close after SIGKILL: a grandchild that moved to
/// another process group could keep them open for ever.
const DRAIN_AFTER_KILL: Duration = Duration::from_millis(500);
/// Lines of a stream [`Tail::text`] keeps (SPEC 5.4's failure reason).
pub(crate) const TAIL_LINES: usize = 20;
/// Upper bound of a tail buffer, so one endless line cannot exhaust memory.
pub(crate) const TAIL_MAX_BYTES: usize = 64 * 1024;
/// Size of one read from a pipe.
const CHUNK_BYTES: usize = 64 * 1024;

/// One script to run.
pub(crate) struct Script<'a> {
    /// The stage's environment, with its isolation ([`crate::sandbox::stage_env`]).
    pub(crate) env: &'a SandboxEnv,
    /// The interpreter, given `arguments`.
    pub(crate) program: &'static str,
    /// `-c {script}`.
    pub(crate) arguments: &'a [OsString],
    /// Where it runs.
    pub(crate) work_dir: &'a Path,
    /// Standard input; `/dev/null` when `None`.
    pub(crate) stdin: Option<&'a std::fs::File>,
    /// When fabro stops it.
    pub(crate) timeout: Duration,
    /// Between SIGTERM and SIGKILL ([`KILL_GRACE`]; shorter in tests).
    pub(crate) kill_grace: Duration,
    /// Stops it when cancelled.
    pub(crate) cancel: &'a CancellationToken,
    /// Its output counts as activity for the stall watchdog (SPEC 9.11).
    pub(crate) emitter: &'a Emitter,
}

/// How a script's run ended.
pub(crate) enum Ending {
    /// It exited on its own.
    Exited(ExitStatus),
    /// Its timeout expired and fabro stopped it; the status is unknown when it could not
    /// be reaped.
    TimedOut(Option<ExitStatus>),
    /// The run was cancelled and fabro stopped it.
    Canceled(Option<ExitStatus>),
}

impl Ending {
    /// The exit code for events: `-1` for death by a signal, `None` when unknown.
    pub(crate) fn exit_code(&self) -> Option<i32> {
        let status = match self {
            Ending::Exited(status) => Some(status),
            Ending::TimedOut(status) | Ending::Canceled(status) => status.as_ref(),
        };
        status.map(|status| status.code().unwrap_or(-1))
    }
}

/// Why a script could not be run or its output not be kept.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ScriptError {
    /// A log file could not be written.
    #[error("cannot write {}", .path.display())]
    WriteLog {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A pipe could not be read.
    #[error("cannot read the {stream} of the script")]
    ReadPipe {
        stream: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// The interpreter could not be started.
    #[error("cannot start {program}")]
    Spawn {
        program: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// Its exit status could not be read.
    #[error("cannot wait for the script to exit")]
    Wait(#[source] std::io::Error),
    /// Its isolation could not be prepared.
    #[error("cannot isolate the script (SPEC 16)")]
    Isolation(#[from] crate::sandbox::IsolationError),
}

impl ScriptError {
    /// Whether fabro's own storage failed (a log file), rather than the script or its
    /// process.
    pub(crate) fn is_storage(&self) -> bool {
        match self {
            ScriptError::WriteLog { .. } => true,
            ScriptError::ReadPipe { .. }
            | ScriptError::Spawn { .. }
            | ScriptError::Wait(_)
            | ScriptError::Isolation(_) => false,
        }
    }
}

/// Spawns the script and waits until it has exited and both pipes are drained, its
/// timeout expires or the run is cancelled; in the last two cases the process group gets
/// SIGTERM, then SIGKILL after `kill_grace`.
pub(crate) async fn supervise(
    script: &Script<'_>,
    stdout: &mut Capture,
    stderr: &mut Capture,
) -> Result<Ending, ScriptError> {
    let spawned = match script.stdin {
        Some(input) => script.env.spawn_piped_with_input(
            script.program,
            script.arguments,
            script.work_dir,
            input,
        ),
        None => script
            .env
            .spawn_piped(script.program, script.arguments, script.work_dir),
    };
    let mut child = spawned.map_err(|error| match error {
        SpawnError::Isolation(error) => ScriptError::Isolation(error),
        SpawnError::Io(source) => ScriptError::Spawn {
            program: script.program,
            source,
        },
    })?;
    let group = ProcessGroup::of_spawned(&child);
    let child_stdout = child.take_stdout_pipe();
    let child_stderr = child.take_stderr_pipe();
    let (emitter, kill_grace) = (script.emitter, script.kill_grace);

    let ending = {
        let mut finished = pin!(async {
            let (status, (), ()) = tokio::join!(
                child.wait(),
                stdout.pump(child_stdout, emitter),
                stderr.pump(child_stderr, emitter),
            );
            status
        });
        tokio::select! {
            biased;
            status = &mut finished => Ending::Exited(status.map_err(ScriptError::Wait)?),
            () = script.cancel.cancelled() => {
                Ending::Canceled(terminate(&group, finished, kill_grace).await)
            }
            () = tokio::time::sleep(script.timeout) => {
                Ending::TimedOut(terminate(&group, finished, kill_grace).await)
            }
        }
    };
    let ending = match ending {
        Ending::TimedOut(None) => Ending::TimedOut(reap(&mut child).await),
        Ending::Canceled(None) => Ending::Canceled(reap(&mut child).await),
        known => known,
    };
    // Processes the script left running with their output redirected stay alive, so a
    // script may start a server for later stages.
    group.disarm();
    Ok(ending)
}

/// SIGTERM to the group, SIGKILL after `kill_grace`; the exit status once the script has
/// exited and its pipes are drained, `None` if that does not happen soon after SIGKILL.
async fn terminate(
    group: &ProcessGroup,
    mut finished: Pin<&mut impl Future<Output = std::io::Result<ExitStatus>>>,
    kill_grace: Duration,
) -> Option<ExitStatus> {
    group.signal(Signal::SIGTERM);
    if let Ok(status) = tokio::time::timeout(kill_grace, finished.as_mut()).await {
        return status.ok();
    }
    group.signal(Signal::SIGKILL);
    tokio::time::timeout(DRAIN_AFTER_KILL, finished)
        .await
        .ok()
        .and_then(Result::ok)
}

/// The status of a killed child whose pipes stayed open.
async fn reap(child: &mut Spawned) -> Option<ExitStatus> {
    tokio::time::timeout(DRAIN_AFTER_KILL, child.wait())
        .await
        .ok()
        .and_then(Result::ok)
}

/// One captured stream: its log file, the tail kept for the failure reason, and the
/// first error met while capturing it.
pub(crate) struct Capture {
    /// `stdout` or `stderr`.
    pub(crate) stream: &'static str,
    /// The log file's path (for errors); unused without a file.
    pub(crate) path: PathBuf,
    /// The log file, when the output is logged as it arrives.
    pub(crate) file: Option<tokio::fs::File>,
    /// The newest output.
    pub(crate) tail: Tail,
    /// The first error met while capturing.
    pub(crate) error: Option<ScriptError>,
}

impl Capture {
    /// A capture of `stream` logging to `path` once [`Capture::file`] is set.
    pub(crate) fn new(path: PathBuf, stream: &'static str) -> Capture {
        Capture {
            stream,
            path,
            file: None,
            tail: Tail::default(),
            error: None,
        }
    }

    /// Copies `pipe` to the log file chunk by chunk until end of file, noting each chunk
    /// as activity for the stall watchdog (SPEC 9.11). After a write error it keeps
    /// draining the pipe, so the script never blocks on a full pipe.
    ///
    /// SPEC 13.1: the output is redacted here, before it reaches the log file, the
    /// failure reason and (through the log) the blobs; a secret split between two reads
    /// is caught because the stream redactor holds back a possible beginning.
    async fn pump(&mut self, pipe: Option<impl AsyncRead + Unpin>, emitter: &Emitter) {
        let Some(mut pipe) = pipe else {
            return;
        };
        let mut redactor = fabro_llm::redact::redactor().stream();
        // Read into spare capacity, which is never zeroed: a script that prints little
        // (most do) costs no 64 KiB `memset` per stream (docs/benchmarks.md, W2 and W3).
        let mut buffer = Vec::with_capacity(CHUNK_BYTES);
        let mut redacted = Vec::with_capacity(CHUNK_BYTES);
        loop {
            buffer.clear();
            let read = match pipe.read_buf(&mut buffer).await {
                Ok(0) => break,
                Ok(read) => read,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    self.note(ScriptError::ReadPipe {
                        stream: self.stream,
                        source,
                    });
                    break;
                }
            };
            emitter.touch();
            redacted.clear();
            redactor.push(&buffer[..read], &mut redacted);
            self.record(&redacted).await;
        }
        redacted.clear();
        redactor.finish(&mut redacted);
        self.record(&redacted).await;
    }

    /// Appends redacted output to the tail and the log file.
    async fn record(&mut self, chunk: &[u8]) {
        if chunk.is_empty() {
            return;
        }
        self.tail.push(chunk);
        if let Some(file) = self.file.as_mut() {
            if let Err(source) = file.write_all(chunk).await {
                self.file = None;
                self.note(ScriptError::WriteLog {
                    path: self.path.clone(),
                    source,
                });
            }
        }
    }

    /// Waits for writes still in flight (also after an interrupted pump) and closes the
    /// log file.
    pub(crate) async fn finish(&mut self) {
        if let Some(mut file) = self.file.take() {
            if let Err(source) = file.flush().await {
                self.note(ScriptError::WriteLog {
                    path: self.path.clone(),
                    source,
                });
            }
        }
    }

    fn note(&mut self, error: ScriptError) {
        self.error.get_or_insert(error);
    }
}

/// The last [`TAIL_LINES`] lines of a stream, at most [`TAIL_MAX_BYTES`] bytes.
#[derive(Debug, Default)]
pub(crate) struct Tail {
    bytes: Vec<u8>,
    /// Bytes pushed in all.
    seen: u64,
}

impl Tail {
    /// Keeps the newest bytes; trimming to lines waits for [`Tail::text`], so a chunk
    /// costs its own length whatever the command prints.
    fn push(&mut self, chunk: &[u8]) {
        self.seen += chunk.len() as u64;
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() > 2 * TAIL_MAX_BYTES {
            let cut = self.bytes.len() - TAIL_MAX_BYTES;
            self.bytes.drain(..cut);
        }
    }

    /// The last [`TAIL_LINES`] lines within the last [`TAIL_MAX_BYTES`] bytes, decoded
    /// lossily, without the final newline.
    pub(crate) fn text(&self) -> String {
        let mut kept = &self.bytes[self.bytes.len().saturating_sub(TAIL_MAX_BYTES)..];
        // Do not start inside a UTF-8 sequence.
        while kept
            .first()
            .is_some_and(|byte| byte & 0b1100_0000 == 0b1000_0000)
        {
            kept = &kept[1..];
        }
        let body = kept.strip_suffix(b"\n").unwrap_or(kept);
        let mut start = 0;
        let mut end = body.len();
        for _ in 0..TAIL_LINES {
            match body[..end].iter().rposition(|&byte| byte == b'\n') {
                Some(newline) => {
                    start = newline + 1;
                    end = newline;
                }
                None => {
                    start = 0;
                    break;
                }
            }
        }
        String::from_utf8_lossy(&body[start..]).into_owned()
    }

    /// The last line with text in it (a blocking hook's failure reason, SPEC 20.4).
    pub(crate) fn last_line(&self) -> Option<String> {
        self.text()
            .lines()
            .rev()
            .map(str::trim)
            .find(|line| !line.is_empty())
            .map(str::to_owned)
    }

    /// Everything kept (the last [`TAIL_MAX_BYTES`] bytes or more), decoded lossily, and
    /// whether older output was dropped.
    pub(crate) fn kept(&self) -> (String, bool) {
        let mut kept = &self.bytes[..];
        while kept
            .first()
            .is_some_and(|byte| byte & 0b1100_0000 == 0b1000_0000)
        {
            kept = &kept[1..];
        }
        (
            String::from_utf8_lossy(kept).into_owned(),
            self.seen > self.bytes.len() as u64,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails_keep_the_last_lines_within_a_byte_bound() {
        let mut tail = Tail::default();
        for line in 1..=30 {
            tail.push(format!("l{line}\n").as_bytes());
        }
        let expected: Vec<String> = (11..=30).map(|line| format!("l{line}")).collect();
        assert_eq!(tail.text(), expected.join("\n"));

        let mut partial = Tail::default();
        partial.push(b"a\nb");
        partial.push(b"c");
        assert_eq!(partial.text(), "a\nbc");

        let mut long = Tail::default();
        long.push("é".repeat(TAIL_MAX_BYTES).as_bytes());
        long.push("é".repeat(TAIL_MAX_BYTES).as_bytes());
        assert!(long.bytes.len() <= 2 * TAIL_MAX_BYTES);
        assert!(long.text().len() <= TAIL_MAX_BYTES);
        assert!(!long.text().contains('\u{FFFD}'));
    }

    #[test]
    fn tails_give_their_last_line_and_what_they_kept() {
        let mut tail = Tail::default();
        assert_eq!(tail.last_line(), None);
        tail.push(b"first\nlast one  \n\n");
        assert_eq!(tail.last_line().as_deref(), Some("last one"));
        assert_eq!(tail.kept(), ("first\nlast one  \n\n".to_owned(), false));
        let mut long = Tail::default();
        long.push(&vec![b'x'; 3 * TAIL_MAX_BYTES]);
        let (kept, dropped) = long.kept();
        assert!(dropped);
        assert!(kept.len() <= 3 * TAIL_MAX_BYTES && kept.len() >= TAIL_MAX_BYTES);
    }
}
