//! Run events (SPEC 11.3): the typed, persisted record of everything a run does.
//!
//! Each event is a struct in [`kind`], wrapped in [`EventKind`]; an [`Event`] adds the
//! node it concerns. The [`Emitter`] numbers events, stamps them, appends them to
//! `events.jsonl` (flushed per event) and fans them out to [`EventSink`]s such as the
//! CLI's progress view, as [`EventEnvelope`]s: the persisted form,
//! `{"id","ts","run_id","event","node_id","properties"}`.

pub(crate) mod kind;

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

pub use self::kind::EventKind;
use crate::id::{NodeId, RunId};
use crate::timestamp::now_rfc3339;

/// One event before numbering.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The node concerned; `None` for run-level events.
    pub node_id: Option<NodeId>,
    /// What happened.
    pub kind: EventKind,
}

/// The persisted form: one line of `events.jsonl`,
/// `{"id","ts","run_id","event","node_id","properties"}` with `node_id` omitted for
/// run-level events.
#[derive(Debug, Clone, PartialEq)]
pub struct EventEnvelope {
    /// 1-based, increasing by one per event for the whole run.
    pub id: u64,
    /// RFC 3339 UTC with milliseconds.
    pub ts: String,
    /// The run.
    pub run_id: RunId,
    /// Node, omitted for run-level events.
    pub node_id: Option<NodeId>,
    /// The event: its name is the `event` field, its struct the `properties`.
    pub kind: EventKind,
}

impl EventEnvelope {
    /// The event name, e.g. `StageCompleted`.
    pub fn name(&self) -> &str {
        self.kind.name()
    }

    /// The properties as a JSON object, keys sorted as in the file.
    pub fn properties(&self) -> Map<String, Value> {
        match serde_json::to_value(Properties(&self.kind)) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        }
    }
}

/// Serialises an event's properties alone.
struct Properties<'a>(&'a EventKind);

impl Serialize for Properties<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize_properties(serializer)
    }
}

impl Serialize for EventEnvelope {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let fields = if self.node_id.is_some() { 6 } else { 5 };
        let mut state = serializer.serialize_struct("EventEnvelope", fields)?;
        state.serialize_field("id", &self.id)?;
        state.serialize_field("ts", &self.ts)?;
        state.serialize_field("run_id", &self.run_id)?;
        state.serialize_field("event", self.kind.name())?;
        match &self.node_id {
            Some(node_id) => state.serialize_field("node_id", node_id)?,
            None => state.skip_field("node_id")?,
        }
        state.serialize_field("properties", &Properties(&self.kind))?;
        state.end()
    }
}

/// The envelope as it is read, before its properties are typed.
#[derive(Deserialize)]
struct StoredEnvelope {
    id: u64,
    ts: String,
    run_id: RunId,
    event: String,
    #[serde(default)]
    node_id: Option<NodeId>,
    properties: Map<String, Value>,
}

impl<'de> Deserialize<'de> for EventEnvelope {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<EventEnvelope, D::Error> {
        let stored = StoredEnvelope::deserialize(deserializer)?;
        Ok(EventEnvelope {
            id: stored.id,
            ts: stored.ts,
            run_id: stored.run_id,
            node_id: stored.node_id,
            kind: EventKind::from_parts(stored.event, stored.properties),
        })
    }
}

/// Receives every event as it is emitted.
pub trait EventSink: Send + Sync {
    /// Called once per event, in order.
    fn emit(&self, envelope: &EventEnvelope);
}

/// Where a run's events are persisted, one JSON line each: the event half of the
/// [`RunStore`](crate::store::RunStore) seam. `FsEventLog` appends to `events.jsonl`.
pub trait EventLog: Send {
    /// Appends one serialised event, `\n` included.
    fn append(&mut self, line: &[u8]) -> std::io::Result<()>;
}

/// `events.jsonl` of a run directory, opened for appending.
#[derive(Debug)]
pub(crate) struct FsEventLog {
    file: std::fs::File,
}

impl FsEventLog {
    /// Opens `path` for appending (created if missing).
    pub(crate) fn open(path: &Path) -> Result<FsEventLog, EmitterError> {
        let file = fs_err::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| EmitterError {
                path: path.display().to_string(),
                source,
            })?;
        Ok(FsEventLog {
            file: file.into_parts().0,
        })
    }

    /// Continues `path` after a crash or a cancellation (SPEC 8.7 step 5): a truncated
    /// last line is removed. Returns the log and the id of the last event in it (0 when
    /// there is none).
    pub(crate) fn reopen(path: &Path) -> Result<(FsEventLog, u64), EmitterError> {
        let error = |source| EmitterError {
            path: path.display().to_string(),
            source,
        };
        let bytes = match fs_err::read(path) {
            Ok(bytes) => bytes,
            Err(source) if source.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => return Err(error(source)),
        };
        let mut keep = bytes
            .iter()
            .rposition(|&byte| byte == b'\n')
            .map_or(0, |end| end + 1);
        let mut last_id = 0;
        // The last complete line may itself be torn (a short write followed by nothing).
        for line in bytes[..keep].split(|&byte| byte == b'\n').rev() {
            if line.is_empty() {
                continue;
            }
            match serde_json::from_slice::<EventEnvelope>(line) {
                Ok(envelope) => {
                    last_id = envelope.id;
                    break;
                }
                Err(_) => keep -= line.len() + 1,
            }
        }
        if keep < bytes.len() {
            let file = fs_err::OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(error)?;
            file.set_len(keep as u64).map_err(error)?;
        }
        Ok((FsEventLog::open(path)?, last_id))
    }
}

impl EventLog for FsEventLog {
    fn append(&mut self, line: &[u8]) -> std::io::Result<()> {
        self.file.write_all(line)
    }
}

/// Numbers, persists and distributes events for one run.
pub struct Emitter {
    run_id: RunId,
    next_id: AtomicU64,
    log: Mutex<Option<Box<dyn EventLog>>>,
    sinks: Vec<Arc<dyn EventSink>>,
    last_activity: Mutex<Instant>,
    last_event_id: AtomicU64,
    /// The first failed append: events are no longer persisted, and the run stops as an
    /// engine error (SPEC 13.2).
    storage_failure: std::sync::OnceLock<String>,
    /// Fired at the first failed append, so the run stops at once.
    on_storage_failure: std::sync::OnceLock<tokio_util::sync::CancellationToken>,
}

/// Why events could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write events to {path}")]
pub struct EmitterError {
    path: String,
    #[source]
    source: std::io::Error,
}

impl Emitter {
    /// An emitter appending to `path` (created if missing), numbering from `first_id`.
    pub fn open(
        run_id: &str,
        path: &Path,
        first_id: u64,
        sinks: Vec<Arc<dyn EventSink>>,
    ) -> Result<Emitter, EmitterError> {
        let log = FsEventLog::open(path)?;
        Ok(Emitter::with_log(run_id, Box::new(log), first_id, sinks))
    }

    /// An emitter continuing `path` after a crash or a cancellation (SPEC 8.7 step 5):
    /// a truncated last line is removed and numbering continues after the last event.
    pub fn reopen(
        run_id: &str,
        path: &Path,
        sinks: Vec<Arc<dyn EventSink>>,
    ) -> Result<Emitter, EmitterError> {
        let (log, last_id) = FsEventLog::reopen(path)?;
        Ok(Emitter::with_log(run_id, Box::new(log), last_id + 1, sinks))
    }

    /// An emitter appending to `log`, numbering from `first_id`.
    pub fn with_log(
        run_id: &str,
        log: Box<dyn EventLog>,
        first_id: u64,
        sinks: Vec<Arc<dyn EventSink>>,
    ) -> Emitter {
        Emitter {
            run_id: RunId::from(run_id),
            next_id: AtomicU64::new(first_id),
            log: Mutex::new(Some(log)),
            sinks,
            last_activity: Mutex::new(Instant::now()),
            last_event_id: AtomicU64::new(first_id.saturating_sub(1)),
            storage_failure: std::sync::OnceLock::new(),
            on_storage_failure: std::sync::OnceLock::new(),
        }
    }

    /// Cancels `token` when an event cannot be appended (the run's token, so the run
    /// stops at once, as for any failure of its own storage).
    pub fn cancel_on_storage_failure(&self, token: tokio_util::sync::CancellationToken) {
        let _ = self.on_storage_failure.set(token);
    }

    /// Why events stopped being persisted, if they did: the run must stop as an engine
    /// error (run `canceled`, resumable).
    pub fn storage_failure(&self) -> Option<&str> {
        self.storage_failure.get().map(String::as_str)
    }

    /// Emits `event`: numbers it, appends it to the file and passes it to every sink.
    /// Secret values are redacted first (SPEC 13.1), for the file and the sinks alike:
    /// the serialised line is redacted (the redactor also finds JSON-escaped secrets), and
    /// only when that changed it do the sinks get the event parsed back from the line.
    pub fn emit(&self, event: Event) -> EventEnvelope {
        // The file lock also orders ids, so lines in the file are in id order even when
        // parallel branches emit at once.
        let mut file = self
            .log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (envelope, line) = self.stamp(id, event);
        if let Some(mut line) = line {
            line.push(b'\n');
            if let Some(handle) = file.as_mut() {
                if let Err(error) = handle.append(&line) {
                    // A torn line may have been written: nothing more is appended after
                    // it (resume cuts it off), and the run stops as an engine error.
                    tracing::error!(run_id = %self.run_id, %error, "cannot append to the event log; the run stops");
                    *file = None;
                    let _ = self
                        .storage_failure
                        .set(format!("cannot append to the event log: {error}"));
                    if let Some(token) = self.on_storage_failure.get() {
                        token.cancel();
                    }
                }
            }
        }
        self.last_event_id.store(id, Ordering::SeqCst);
        self.touch();
        for sink in &self.sinks {
            sink.emit(&envelope);
        }
        drop(file);
        envelope
    }

    /// The envelope `event` would get if it were emitted now (the next id, the current
    /// time, redacted as [`Emitter::emit`] redacts), without numbering, writing or
    /// distributing it: `run_complete` and `run_failed` hooks get the run's last event
    /// before it is written, so that it stays last (SPEC 11.3, 20.4).
    pub fn preview(&self, event: &Event) -> EventEnvelope {
        self.stamp(self.next_id.load(Ordering::SeqCst), event.clone())
            .0
    }

    /// `event` as event `id`, redacted (SPEC 13.1), with its serialised line: the line
    /// is redacted (the redactor also finds JSON-escaped secrets), and only when that
    /// changed it is the envelope parsed back from the line.
    fn stamp(&self, id: u64, event: Event) -> (EventEnvelope, Option<Vec<u8>>) {
        let mut envelope = EventEnvelope {
            id,
            ts: now_rfc3339(),
            run_id: self.run_id.clone(),
            node_id: event.node_id,
            kind: event.kind,
        };
        let Ok(mut line) = serde_json::to_vec(&envelope) else {
            return (envelope, None);
        };
        if let std::borrow::Cow::Owned(redacted) = fabro_llm::redact::redactor().redact_bytes(&line)
        {
            if let Ok(parsed) = serde_json::from_slice::<EventEnvelope>(&redacted) {
                envelope = parsed;
            }
            line = redacted;
        }
        (envelope, Some(line))
    }

    /// Records activity that is not an event (LLM stream chunks, command output), for
    /// the stall watchdog.
    pub fn touch(&self) {
        *self
            .last_activity
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Instant::now();
    }

    /// Time of the last activity.
    pub fn last_activity(&self) -> Instant {
        *self
            .last_activity
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Id of the last event emitted.
    pub fn last_event_id(&self) -> u64 {
        self.last_event_id.load(Ordering::SeqCst)
    }

    /// The id the next event will get.
    pub fn next_id(&self) -> u64 {
        self.next_id.load(Ordering::SeqCst)
    }
}

/// Reads `events.jsonl`, ignoring a truncated final line (SPEC 11.3).
pub fn read_events(text: &str) -> Vec<EventEnvelope> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// Constructors.
impl Event {
    /// A run-level event.
    pub fn run(kind: impl Into<EventKind>) -> Event {
        Event {
            node_id: None,
            kind: kind.into(),
        }
    }

    /// An event about `node_id`.
    pub fn node(node_id: &str, kind: impl Into<EventKind>) -> Event {
        Event {
            node_id: Some(NodeId::from(node_id)),
            kind: kind.into(),
        }
    }

    /// `Warning {code, message}`, about a node or the run.
    pub fn warning(node_id: Option<&str>, code: &str, message: &str) -> Event {
        Event {
            node_id: node_id.map(NodeId::from),
            kind: kind::Warning::new(code, message).into(),
        }
    }

    /// The `Agent.*` event of an agent session event at `node_id` (SPEC 11.3); a
    /// sub-agent's event carries its `agent_id`.
    pub fn agent(node_id: &str, event: &fabro_agent::AgentEvent) -> Event {
        Event::node(node_id, EventKind::from(event))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Collect(Mutex<Vec<EventEnvelope>>);

    impl EventSink for Collect {
        fn emit(&self, envelope: &EventEnvelope) {
            self.0.lock().expect("test lock").push(envelope.clone());
        }
    }

    #[test]
    fn events_are_numbered_persisted_and_distributed() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("events.jsonl");
        let sink = Arc::new(Collect(Mutex::new(Vec::new())));
        let emitter = Emitter::open("run1", &path, 1, vec![sink.clone()]).expect("opens");
        emitter.emit(Event::run(kind::WorkflowRunStarted {
            base_sha: None,
            dry_run: false,
            goal: "g".to_owned(),
            next_node_id: "start".to_owned(),
            resumed: false,
            run_branch: None,
            run_dir: "/d".to_owned(),
            worker: None,
            workflow_name: "w".to_owned(),
        }));
        emitter.emit(Event::node(
            "start",
            kind::StageStarted {
                attempt: 1,
                branch: None,
                handler: "start".to_owned(),
                isolation: None,
                rank: 1,
                visit: 1,
            },
        ));
        let text = fs_err::read_to_string(&path).expect("written");
        let events = read_events(&format!("{text}{{\"truncated"));
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].id, 1);
        assert_eq!(events[1].id, 2);
        assert_eq!(events[1].node_id.as_deref(), Some("start"));
        assert!(!text
            .lines()
            .next()
            .unwrap_or_default()
            .contains("\"node_id\""));
        assert_eq!(sink.0.lock().expect("test lock").len(), 2);
        assert_eq!(emitter.last_event_id(), 2);
    }
}
