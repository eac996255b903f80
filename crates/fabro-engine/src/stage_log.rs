//! The output of one stage, as `fabro logs` shows it (SPEC 17.4): `stdout.log` then
//! `stderr.log` for commands, `response.md` for LLM stages, the answer for human gates;
//! and following a running stage while its command writes.
//!
//! Following polls the files: the command handler appends to `stdout.log` and
//! `stderr.log` as the command writes (SPEC 7.5). Only whole lines are passed on while
//! the stage runs, so the two streams never interleave inside a line. A retry moves the
//! files of the failed attempt to `attempts/{n}/` and starts new ones; the follower
//! finishes the moved file and continues with the new one. The stage has ended when
//! `events.jsonl` holds its `StageCompleted` (matched by node and rank) or no process
//! holds the run lock any more (the run ended or died).

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fabro_language::HandlerKind;
use serde_json::Value;

use crate::run_index::RunLock;
use crate::run_stages::{latest_stage, StageDir, StageLookupError};
use crate::store::EventCursor;

/// The command streams of a stage, in the order they are shown.
const COMMAND_LOGS: [&str; 2] = ["stdout.log", "stderr.log"];

/// Why a stage's output could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StageLogError {
    /// The stage does not exist.
    #[error(transparent)]
    Lookup(#[from] StageLookupError),
    /// A file of the stage could not be read.
    #[error("cannot read {}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> StageLogError {
    let path = path.to_path_buf();
    move |source| StageLogError::Io { path, source }
}

/// What kind of output a stage has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OutputKind {
    /// `stdout.log` then `stderr.log`.
    Command,
    /// `response.md`.
    Response,
    /// The answer recorded in `status.json`.
    Answer,
    /// Nothing (start, exit, conditional, parallel, wait, sub-workflow stages).
    Nothing,
}

/// The handler of a finished stage decides; a running stage is recognised by its files.
fn output_kind(stage: &StageDir) -> OutputKind {
    if let Some(status) = stage.status() {
        return match HandlerKind::parse(&status.handler) {
            Some(HandlerKind::Command) => OutputKind::Command,
            Some(HandlerKind::Agent | HandlerKind::Prompt | HandlerKind::FanIn) => {
                OutputKind::Response
            }
            Some(HandlerKind::Human) => OutputKind::Answer,
            _ => OutputKind::Nothing,
        };
    }
    if COMMAND_LOGS
        .iter()
        .any(|name| stage.path.join(name).exists())
    {
        OutputKind::Command
    } else if stage.path.join("response.md").exists() {
        OutputKind::Response
    } else {
        OutputKind::Nothing
    }
}

/// The whole output of `stage` as it is now.
pub fn read_output(stage: &StageDir) -> Result<Vec<u8>, StageLogError> {
    match output_kind(stage) {
        OutputKind::Command => {
            let mut bytes = Vec::new();
            for name in COMMAND_LOGS {
                bytes.extend(read_if_present(&stage.path.join(name))?);
            }
            Ok(bytes)
        }
        OutputKind::Response => {
            // A response is text for a terminal: it ends with a newline, so a shell
            // prompt printed after it starts on a line of its own.
            let mut bytes = read_if_present(&stage.path.join("response.md"))?;
            if bytes.last().is_some_and(|last| *last != b'\n') {
                bytes.push(b'\n');
            }
            Ok(bytes)
        }
        OutputKind::Answer => Ok(answer(stage).into_bytes()),
        OutputKind::Nothing => Ok(Vec::new()),
    }
}

fn read_if_present(path: &Path) -> Result<Vec<u8>, StageLogError> {
    match fs_err::read(path) {
        Ok(bytes) => Ok(bytes),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(error) => Err(io_error(path)(error)),
    }
}

/// The answer of a human gate as one line: the free-form text, else the chosen option's
/// label (SPEC 5.5); empty when the gate was not answered.
fn answer(stage: &StageDir) -> String {
    let Some(status) = stage.status() else {
        return String::new();
    };
    let text = status
        .context_updates
        .get("human.gate.text")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let chosen = if text.is_empty() {
        status.preferred_next_label.unwrap_or_default()
    } else {
        text.to_owned()
    };
    if chosen.is_empty() {
        String::new()
    } else {
        format!("{chosen}\n")
    }
}

/// Prints the output of the latest stage of `node_id` (or of the run) as it is written,
/// through `sink`, until the stage ends; `poll` is the time between looks. When the node
/// has not run yet, waits for it while the run is running.
pub fn follow_stage(
    run_id: &str,
    run_dir: &Path,
    node_id: Option<&str>,
    poll: Duration,
    sink: &mut dyn FnMut(&[u8]),
) -> Result<(), StageLogError> {
    let stage = loop {
        match latest_stage(run_id, run_dir, node_id) {
            Ok(stage) => break stage,
            Err(StageLookupError::NotRun { .. } | StageLookupError::NoStages { .. })
                if RunLock::is_held(run_dir) =>
            {
                std::thread::sleep(poll);
            }
            Err(error) => return Err(error.into()),
        }
    };
    let mut follower = StageFollower::new(run_dir, stage);
    loop {
        sink(&follower.poll()?);
        if follower.stage_ended() {
            // Whatever the stage wrote before it ended.
            sink(&follower.poll()?);
            sink(&follower.finish()?);
            return Ok(());
        }
        std::thread::sleep(poll);
    }
}

/// Follows one stage.
struct StageFollower {
    run_dir: PathBuf,
    stage: StageDir,
    streams: Vec<LogStream>,
    events: StageEvents,
}

impl StageFollower {
    fn new(run_dir: &Path, stage: StageDir) -> StageFollower {
        let streams = COMMAND_LOGS
            .iter()
            .map(|name| LogStream::new(stage.path.join(name)))
            .collect();
        StageFollower {
            events: StageEvents::new(run_dir),
            run_dir: run_dir.to_path_buf(),
            stage,
            streams,
        }
    }

    /// The whole lines the command wrote since the last poll: stdout's, then stderr's.
    fn poll(&mut self) -> Result<Vec<u8>, StageLogError> {
        let mut out = Vec::new();
        for stream in &mut self.streams {
            stream.read_lines(&mut out)?;
        }
        Ok(out)
    }

    /// Whether the stage has ended: its `StageCompleted` is in `events.jsonl`, or no
    /// process runs the run any more.
    fn stage_ended(&mut self) -> bool {
        self.events.saw_completion(&self.stage) || !RunLock::is_held(&self.run_dir)
    }

    /// The rest, once the stage has ended: unterminated last lines of the command
    /// streams, or the response or answer of other stages (written when they end).
    fn finish(mut self) -> Result<Vec<u8>, StageLogError> {
        match output_kind(&self.stage) {
            OutputKind::Command => {
                let mut out = Vec::new();
                for stream in &mut self.streams {
                    out.append(&mut stream.pending);
                }
                Ok(out)
            }
            OutputKind::Response | OutputKind::Answer | OutputKind::Nothing => {
                read_output(&self.stage)
            }
        }
    }
}

/// One log file read incrementally; survives the file being moved away by a retry.
struct LogStream {
    path: PathBuf,
    file: Option<(fs_err::File, u64)>,
    /// Bytes after the last newline read so far.
    pending: Vec<u8>,
}

impl LogStream {
    fn new(path: PathBuf) -> LogStream {
        LogStream {
            path,
            file: None,
            pending: Vec::new(),
        }
    }

    /// Appends the newly completed lines to `out`.
    fn read_lines(&mut self, out: &mut Vec<u8>) -> Result<(), StageLogError> {
        loop {
            if self.file.is_none() {
                match fs_err::File::open(&self.path) {
                    Ok(file) => {
                        let inode = file.metadata().map_err(io_error(&self.path))?.ino();
                        self.file = Some((file, inode));
                    }
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => break,
                    Err(error) => return Err(io_error(&self.path)(error)),
                }
            }
            let Some((file, inode)) = &mut self.file else {
                break;
            };
            file.read_to_end(&mut self.pending)
                .map_err(io_error(&self.path))?;
            // A retry moved this file away and the next attempt writes a new one: the
            // old one is complete, so its last line counts and the new one follows.
            let replaced = fs_err::metadata(&self.path).map_or(true, |now| now.ino() != *inode);
            if !replaced {
                break;
            }
            self.file = None;
            if !self.pending.is_empty() && !self.pending.ends_with(b"\n") {
                self.pending.push(b'\n');
            }
        }
        if let Some(end) = self.pending.iter().rposition(|&byte| byte == b'\n') {
            out.extend(self.pending.drain(..=end));
        }
        Ok(())
    }
}

/// The run's events read incrementally through the store's cursor, looking for one
/// stage's `StageCompleted`.
struct StageEvents {
    cursor: EventCursor,
    completed: bool,
}

impl StageEvents {
    fn new(run_dir: &Path) -> StageEvents {
        StageEvents {
            cursor: EventCursor::new(run_dir),
            completed: false,
        }
    }

    fn saw_completion(&mut self, stage: &StageDir) -> bool {
        if self.completed {
            return true;
        }
        self.completed = self
            .cursor
            .read_new()
            .iter()
            .any(|event| completes(event.line.as_bytes(), stage));
        self.completed
    }
}

/// Whether `line` is the `StageCompleted` event of `stage`.
fn completes(line: &[u8], stage: &StageDir) -> bool {
    // Cheap test first: most events are not completions.
    if !line
        .windows(b"StageCompleted".len())
        .any(|window| window == b"StageCompleted")
    {
        return false;
    }
    let Ok(event) = serde_json::from_slice::<Value>(line) else {
        return false;
    };
    event["event"] == "StageCompleted"
        && event["node_id"] == stage.node_id.as_str()
        && event["properties"]["rank"].as_u64() == Some(u64::from(stage.rank))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(root: &Path, name: &str) -> StageDir {
        let path = root.join("stages").join(name);
        fs_err::create_dir_all(&path).expect("mkdir");
        let (rank, node_id, visit) =
            crate::run_stages::parse_stage_dir_name(name).expect("stage name");
        StageDir {
            rank,
            node_id: node_id.to_owned(),
            visit,
            path,
        }
    }

    fn write_status(stage: &StageDir, handler: &str, updates: Value, label: Option<&str>) {
        let status = serde_json::json!({
            "node_id": stage.node_id, "visit": stage.visit, "rank": stage.rank, "attempt": 1,
            "handler": handler, "status": "success", "outcome": "success",
            "failure_reason": null, "failure_class": null, "failure_signature": null,
            "preferred_next_label": label, "suggested_next_ids": [],
            "context_updates": updates, "notes": null, "files_touched": [],
            "model": null, "provider": null, "usage": null,
            "started_at": "2026-01-01T00:00:00.000Z", "finished_at": "2026-01-01T00:00:00.000Z",
            "duration_ms": 0
        });
        fs_err::write(stage.path.join("status.json"), status.to_string()).expect("write");
    }

    #[test]
    fn outputs_by_handler() {
        let root = tempfile::tempdir().expect("tempdir");
        let command = stage(root.path(), "002-test@1");
        fs_err::write(command.path.join("stdout.log"), "out\n").expect("write");
        fs_err::write(command.path.join("stderr.log"), "err\n").expect("write");
        assert_eq!(read_output(&command).expect("reads"), b"out\nerr\n");
        write_status(&command, "command", serde_json::json!({}), None);
        assert_eq!(read_output(&command).expect("reads"), b"out\nerr\n");

        let llm = stage(root.path(), "003-plan@1");
        fs_err::write(llm.path.join("prompt.md"), "the prompt").expect("write");
        fs_err::write(llm.path.join("response.md"), "the plan").expect("write");
        write_status(&llm, "agent", serde_json::json!({}), None);
        assert_eq!(read_output(&llm).expect("reads"), b"the plan\n");
        fs_err::write(llm.path.join("response.md"), "the plan\n").expect("write");
        assert_eq!(read_output(&llm).expect("reads"), b"the plan\n");

        let gate = stage(root.path(), "004-review@1");
        write_status(
            &gate,
            "human",
            serde_json::json!({"human.gate.selected": "A", "human.gate.text": ""}),
            Some("[A] Approve"),
        );
        assert_eq!(read_output(&gate).expect("reads"), b"[A] Approve\n");
        write_status(
            &gate,
            "human",
            serde_json::json!({"human.gate.selected": "freeform", "human.gate.text": "do X"}),
            None,
        );
        assert_eq!(read_output(&gate).expect("reads"), b"do X\n");

        let exit = stage(root.path(), "005-exit@1");
        write_status(&exit, "exit", serde_json::json!({}), None);
        assert_eq!(read_output(&exit).expect("reads"), b"");
    }

    #[test]
    fn streams_pass_whole_lines_and_survive_a_retry() {
        let root = tempfile::tempdir().expect("tempdir");
        let path = root.path().join("stdout.log");
        let mut stream = LogStream::new(path.clone());
        let mut out = Vec::new();
        stream.read_lines(&mut out).expect("absent is fine");
        assert!(out.is_empty());
        fs_err::write(&path, "one\ntw").expect("write");
        stream.read_lines(&mut out).expect("reads");
        assert_eq!(out, b"one\n");
        // The attempt is archived, unterminated, and a new attempt writes.
        let archived = root.path().join("attempt-1.log");
        fs_err::rename(&path, &archived).expect("rename");
        fs_err::write(&path, "again\n").expect("write");
        stream.read_lines(&mut out).expect("reads");
        assert_eq!(out, b"one\ntw\nagain\n");
    }

    #[test]
    fn a_stage_ends_with_its_own_completion_event() {
        let root = tempfile::tempdir().expect("tempdir");
        let target = stage(root.path(), "003-b@2");
        let events = root.path().join("events.jsonl");
        let line = |node: &str, rank: u32| {
            format!(
                "{{\"id\":1,\"ts\":\"t\",\"run_id\":\"R\",\"event\":\"StageCompleted\",\"node_id\":\"{node}\",\"properties\":{{\"rank\":{rank}}}}}\n"
            )
        };
        fs_err::write(&events, line("b", 1) + &line("a", 3)).expect("write");
        let mut tail = StageEvents::new(root.path());
        assert!(!tail.saw_completion(&target));
        let mut file = fs_err::OpenOptions::new()
            .append(true)
            .open(&events)
            .expect("open");
        std::io::Write::write_all(&mut file, line("b", 3).as_bytes()).expect("append");
        assert!(tail.saw_completion(&target));
    }
}
