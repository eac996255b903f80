//! Run events (SPEC 11.3): the typed, persisted record of everything a run does.
//!
//! [`Event`] values are built by the constructors in this module, so every event name and
//! property set lives in one place. The [`Emitter`] numbers them, stamps them, appends
//! them to `events.jsonl` (flushed per event) and fans them out to [`EventSink`]s such as
//! the CLI's progress view.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::timestamp::now_rfc3339;

/// One event before numbering.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Event name, e.g. `StageCompleted`.
    pub name: &'static str,
    /// The node concerned; `None` for run-level events.
    pub node_id: Option<String>,
    /// Event properties.
    pub properties: Map<String, Value>,
}

/// The persisted form: one line of `events.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventEnvelope {
    /// 1-based, increasing by one per event for the whole run.
    pub id: u64,
    /// RFC 3339 UTC with milliseconds.
    pub ts: String,
    /// The run.
    pub run_id: String,
    /// Event name.
    pub event: String,
    /// Node, omitted for run-level events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// Properties.
    pub properties: Map<String, Value>,
}

/// Receives every event as it is emitted.
pub trait EventSink: Send + Sync {
    /// Called once per event, in order.
    fn emit(&self, envelope: &EventEnvelope);
}

/// Numbers, persists and distributes events for one run.
pub struct Emitter {
    run_id: String,
    next_id: AtomicU64,
    file: Mutex<Option<std::fs::File>>,
    sinks: Vec<Arc<dyn EventSink>>,
    last_activity: Mutex<Instant>,
    last_event_id: AtomicU64,
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
        let file = fs_err::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| EmitterError {
                path: path.display().to_string(),
                source,
            })?;
        Ok(Emitter {
            run_id: run_id.to_owned(),
            next_id: AtomicU64::new(first_id),
            file: Mutex::new(Some(file.into_parts().0)),
            sinks,
            last_activity: Mutex::new(Instant::now()),
            last_event_id: AtomicU64::new(first_id.saturating_sub(1)),
        })
    }

    /// An emitter continuing `path` after a crash or a cancellation (SPEC 8.7 step 5):
    /// a truncated last line is removed and numbering continues after the last event.
    pub fn reopen(
        run_id: &str,
        path: &Path,
        sinks: Vec<Arc<dyn EventSink>>,
    ) -> Result<Emitter, EmitterError> {
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
        Emitter::open(run_id, path, last_id + 1, sinks)
    }

    /// Emits `event`: numbers it, appends it to the file and passes it to every sink.
    /// Secret values in its properties are redacted first (SPEC 13.1), for the file and
    /// the sinks alike.
    pub fn emit(&self, mut event: Event) -> EventEnvelope {
        fabro_llm::redact::redactor().redact_json_map(&mut event.properties);
        // The file lock also orders ids, so lines in the file are in id order even when
        // parallel branches emit at once.
        let mut file = self
            .file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let envelope = EventEnvelope {
            id,
            ts: now_rfc3339(),
            run_id: self.run_id.clone(),
            event: event.name.to_owned(),
            node_id: event.node_id,
            properties: event.properties,
        };
        if let Some(handle) = file.as_mut() {
            if let Ok(mut line) = serde_json::to_vec(&envelope) {
                line.push(b'\n');
                if handle.write_all(&line).is_err() {
                    tracing::error!(run_id = %self.run_id, "cannot append to events.jsonl; further events are not persisted");
                    *file = None;
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

fn properties(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn run_event(name: &'static str, value: Value) -> Event {
    Event {
        name,
        node_id: None,
        properties: properties(value),
    }
}

fn node_event(name: &'static str, node_id: &str, value: Value) -> Event {
    Event {
        name,
        node_id: Some(node_id.to_owned()),
        properties: properties(value),
    }
}

/// Constructors, one per event of SPEC 11.3.
impl Event {
    /// `WorkflowRunStarted`.
    #[expect(
        clippy::too_many_arguments,
        reason = "one parameter per property of the event"
    )]
    pub fn workflow_run_started(
        workflow_name: &str,
        goal: &str,
        run_dir: &str,
        base_sha: Option<&str>,
        run_branch: Option<&str>,
        dry_run: bool,
        resumed: bool,
        next_node_id: &str,
    ) -> Event {
        run_event(
            "WorkflowRunStarted",
            json!({"workflow_name": workflow_name, "goal": goal, "run_dir": run_dir, "base_sha": base_sha,
                   "run_branch": run_branch, "dry_run": dry_run, "resumed": resumed, "next_node_id": next_node_id}),
        )
    }

    /// `WorkflowRunCompleted`.
    pub fn workflow_run_completed(
        status: &str,
        duration_ms: u64,
        completed_count: usize,
        artifact_count: usize,
        asset_count: usize,
        usage: &Value,
        cost_usd: Option<f64>,
    ) -> Event {
        run_event(
            "WorkflowRunCompleted",
            json!({"status": status, "duration_ms": duration_ms, "completed_count": completed_count,
                   "artifact_count": artifact_count, "asset_count": asset_count, "usage": usage, "cost_usd": cost_usd}),
        )
    }

    /// `WorkflowRunFailed`.
    pub fn workflow_run_failed(
        reason: &str,
        failure_class: &str,
        node_id: Option<&str>,
        duration_ms: u64,
    ) -> Event {
        run_event(
            "WorkflowRunFailed",
            json!({"reason": reason, "failure_class": failure_class, "node_id": node_id, "duration_ms": duration_ms}),
        )
    }

    /// `StageStarted`.
    pub fn stage_started(
        node_id: &str,
        handler: &str,
        visit: u32,
        attempt: u32,
        rank: u32,
        branch: Option<&str>,
    ) -> Event {
        let mut value =
            json!({"handler": handler, "visit": visit, "attempt": attempt, "rank": rank});
        if let (Some(branch), Value::Object(map)) = (branch, &mut value) {
            map.insert("branch".to_owned(), json!(branch));
        }
        node_event("StageStarted", node_id, value)
    }

    /// `StageCompleted`.
    pub fn stage_completed(node_id: &str, properties_value: Value) -> Event {
        node_event("StageCompleted", node_id, properties_value)
    }

    /// `StageRetrying`.
    pub fn stage_retrying(
        node_id: &str,
        attempt: u32,
        next_attempt: u32,
        delay_ms: u64,
        failure_reason: &str,
        failure_class: &str,
    ) -> Event {
        node_event(
            "StageRetrying",
            node_id,
            json!({"attempt": attempt, "next_attempt": next_attempt, "delay_ms": delay_ms,
                   "failure_reason": failure_reason, "failure_class": failure_class}),
        )
    }

    /// `EdgeSelected`.
    pub fn edge_selected(
        from: &str,
        to: &str,
        label: &str,
        reason: &str,
        loop_restart: bool,
    ) -> Event {
        node_event(
            "EdgeSelected",
            from,
            json!({"from": from, "to": to, "label": label, "reason": reason, "loop_restart": loop_restart}),
        )
    }

    /// `CheckpointCompleted`.
    pub fn checkpoint_completed(
        node_id: &str,
        next_node_id: Option<&str>,
        git_commit_sha: Option<&str>,
        metadata_sha: Option<&str>,
    ) -> Event {
        node_event(
            "CheckpointCompleted",
            node_id,
            json!({"next_node_id": next_node_id, "git_commit_sha": git_commit_sha, "metadata_sha": metadata_sha}),
        )
    }

    /// `Agent.LlmRetry {attempt, delay_ms, error_kind, status_code}` (SPEC 9.2).
    pub fn llm_retry(
        node_id: &str,
        attempt: u32,
        delay_ms: u64,
        error_kind: &str,
        status_code: Option<u16>,
    ) -> Event {
        node_event(
            "Agent.LlmRetry",
            node_id,
            json!({"attempt": attempt, "delay_ms": delay_ms, "error_kind": error_kind, "status_code": status_code}),
        )
    }

    /// `Agent.Failover {from_provider, from_model, to_provider, to_model, error_kind}`
    /// (SPEC 9.4).
    pub fn failover(
        node_id: &str,
        from_provider: &str,
        from_model: &str,
        to_provider: &str,
        to_model: &str,
        error_kind: &str,
    ) -> Event {
        node_event(
            "Agent.Failover",
            node_id,
            json!({"from_provider": from_provider, "from_model": from_model, "to_provider": to_provider,
                   "to_model": to_model, "error_kind": error_kind}),
        )
    }

    /// A handler or control event with free-form properties (`CommandStarted`,
    /// `HumanQuestion`, `ParallelStarted`, `LoopRestart`, …).
    pub fn node(name: &'static str, node_id: &str, properties_value: Value) -> Event {
        node_event(name, node_id, properties_value)
    }

    /// A run-level control event with free-form properties.
    pub fn run(name: &'static str, properties_value: Value) -> Event {
        run_event(name, properties_value)
    }

    /// The `Agent.*` event of an agent session event at `node_id` (SPEC 11.3); a
    /// sub-agent's event carries its `agent_id`.
    pub fn agent(node_id: &str, event: &fabro_agent::AgentEvent) -> Event {
        node_event(event.name(), node_id, agent_properties(event))
    }

    /// `Agent.SessionStarted {thread_id, provider, model, backend}`.
    pub fn agent_session_started(
        node_id: &str,
        thread_id: Option<&str>,
        provider: &str,
        model: &str,
        backend: &str,
    ) -> Event {
        node_event(
            "Agent.SessionStarted",
            node_id,
            json!({"thread_id": thread_id, "provider": provider, "model": model, "backend": backend}),
        )
    }

    /// `StageOutputRepair {attempt, max, errors}` (SPEC 7.4).
    pub fn stage_output_repair(node_id: &str, attempt: u32, max: u32, errors: &[String]) -> Event {
        node_event(
            "StageOutputRepair",
            node_id,
            json!({"attempt": attempt, "max": max, "errors": errors}),
        )
    }

    /// `Warning {code, message}`.
    pub fn warning(node_id: Option<&str>, code: &str, message: &str) -> Event {
        Event {
            name: "Warning",
            node_id: node_id.map(str::to_owned),
            properties: properties(json!({"code": code, "message": message})),
        }
    }
}

/// The properties of an agent event, field names as SPEC 10.4 and 6.8 give them.
fn agent_properties(event: &fabro_agent::AgentEvent) -> Value {
    use fabro_agent::AgentEvent;
    match event {
        AgentEvent::AssistantMessage {
            text,
            tool_call_count,
            usage,
        } => json!({"text": text, "tool_call_count": tool_call_count, "usage": usage}),
        AgentEvent::ToolCallStarted {
            tool,
            call_id,
            arguments,
        } => json!({"tool": tool, "call_id": call_id, "arguments": arguments}),
        AgentEvent::ToolCallCompleted {
            tool,
            call_id,
            is_error,
            output,
            duration_ms,
        } => {
            json!({"tool": tool, "call_id": call_id, "is_error": is_error, "output": output, "duration_ms": duration_ms})
        }
        AgentEvent::LoopDetected { pattern_length } => json!({"pattern_length": pattern_length}),
        AgentEvent::ContextWindowWarning {
            estimated_tokens,
            context_window_size,
            usage_percent,
        } => {
            json!({"estimated_tokens": estimated_tokens, "context_window_size": context_window_size, "usage_percent": usage_percent})
        }
        AgentEvent::CompactionStarted {
            estimated_tokens,
            context_window_size,
        } => {
            json!({"estimated_tokens": estimated_tokens, "context_window_size": context_window_size})
        }
        AgentEvent::CompactionCompleted {
            original_turn_count,
            preserved_turn_count,
            summary_token_estimate,
            tracked_file_count,
        } => {
            json!({"original_turn_count": original_turn_count, "preserved_turn_count": preserved_turn_count, "summary_token_estimate": summary_token_estimate, "tracked_file_count": tracked_file_count})
        }
        AgentEvent::Error { message } => json!({"message": message}),
        AgentEvent::SubAgent { agent_id, event } => {
            let mut inner = agent_properties(event);
            if let Value::Object(map) = &mut inner {
                map.insert("agent_id".to_owned(), json!(agent_id));
            }
            inner
        }
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
        emitter.emit(Event::workflow_run_started(
            "w", "g", "/d", None, None, false, false, "start",
        ));
        emitter.emit(Event::stage_started("start", "start", 1, 1, 1, None));
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
