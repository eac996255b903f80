//! Events an agent session reports (SPEC 10.4, 6.8) and the sink they go to.

use fabro_llm::Usage;
use serde_json::Value;

/// Something that happened inside an agent session. The engine maps these to its
/// `Agent.*` run events; field names follow SPEC.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentEvent {
    /// `Agent.AssistantMessage`: one assistant turn arrived.
    AssistantMessage {
        /// Text of the turn.
        text: String,
        /// How many tool calls it made.
        tool_call_count: usize,
        /// Usage of the call.
        usage: Usage,
    },
    /// `Agent.ToolCallStarted`.
    ToolCallStarted {
        /// Tool name.
        tool: String,
        /// Call id.
        call_id: String,
        /// Arguments as the model sent them.
        arguments: Value,
        /// The MCP server of an MCP tool (SPEC 19.1).
        server: Option<String>,
    },
    /// `Agent.ToolCallCompleted`, with the full (untruncated) output.
    ToolCallCompleted {
        /// Tool name.
        tool: String,
        /// Call id.
        call_id: String,
        /// Whether the call failed.
        is_error: bool,
        /// Full output or error text.
        output: String,
        /// Execution time.
        duration_ms: u64,
        /// The MCP server of an MCP tool (SPEC 19.1).
        server: Option<String>,
    },
    /// `Agent.LoopDetected`: the steering message was appended.
    LoopDetected {
        /// Length of the repeating cycle (1, 2 or 3 turns).
        pattern_length: usize,
    },
    /// `Agent.ContextWindowWarning`: the history passed 80 % of the window.
    ContextWindowWarning {
        /// Estimated tokens (characters ÷ 4).
        estimated_tokens: u64,
        /// The model's context window.
        context_window_size: u64,
        /// `estimated_tokens` as a percentage of the window.
        usage_percent: f64,
    },
    /// `Agent.CompactionStarted`.
    CompactionStarted {
        /// Estimated tokens before compaction.
        estimated_tokens: u64,
        /// The model's context window.
        context_window_size: u64,
    },
    /// `Agent.CompactionCompleted`.
    CompactionCompleted {
        /// History entries before compaction.
        original_turn_count: usize,
        /// Entries kept verbatim.
        preserved_turn_count: usize,
        /// Estimated tokens of the summary message.
        summary_token_estimate: u64,
        /// Files in the tracker's File Operations section.
        tracked_file_count: usize,
    },
    /// `Agent.SteeringDelivered`: queued steering messages became one user message
    /// (SPEC 20.1).
    SteeringDelivered {
        /// How many messages were delivered together.
        count: usize,
    },
    /// `Agent.Error`: a non-fatal problem (a failed compaction summary).
    Error {
        /// What went wrong.
        message: String,
    },
    /// An event of a sub-agent (SPEC 10.4.6), carrying its `agent_id`.
    SubAgent {
        /// The child's id as returned by `spawn_agent`.
        agent_id: String,
        /// The child's event.
        event: Box<AgentEvent>,
    },
}

impl AgentEvent {
    /// The event name SPEC uses, e.g. `Agent.ToolCallStarted` (a sub-agent's event
    /// has its own name).
    pub fn name(&self) -> &'static str {
        match self {
            AgentEvent::AssistantMessage { .. } => "Agent.AssistantMessage",
            AgentEvent::ToolCallStarted { .. } => "Agent.ToolCallStarted",
            AgentEvent::ToolCallCompleted { .. } => "Agent.ToolCallCompleted",
            AgentEvent::LoopDetected { .. } => "Agent.LoopDetected",
            AgentEvent::ContextWindowWarning { .. } => "Agent.ContextWindowWarning",
            AgentEvent::CompactionStarted { .. } => "Agent.CompactionStarted",
            AgentEvent::CompactionCompleted { .. } => "Agent.CompactionCompleted",
            AgentEvent::SteeringDelivered { .. } => "Agent.SteeringDelivered",
            AgentEvent::Error { .. } => "Agent.Error",
            AgentEvent::SubAgent { event, .. } => event.name(),
        }
    }
}

/// Where a session sends its events. Implemented for closures, so
/// `Arc::new(|event| ...)` is a sink.
pub trait AgentEventSink: Send + Sync {
    /// Receives one event; must not block for long.
    fn emit(&self, event: AgentEvent);
}

impl<F> AgentEventSink for F
where
    F: Fn(AgentEvent) + Send + Sync,
{
    fn emit(&self, event: AgentEvent) {
        self(event);
    }
}

/// A sink that drops every event.
#[derive(Debug, Clone, Copy, Default)]
pub struct NullSink;

impl AgentEventSink for NullSink {
    fn emit(&self, _event: AgentEvent) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn closures_are_sinks() {
        let seen = Mutex::new(Vec::new());
        let sink = |event: AgentEvent| seen.lock().unwrap().push(event.name());
        sink.emit(AgentEvent::LoopDetected { pattern_length: 2 });
        NullSink.emit(AgentEvent::Error {
            message: "x".to_owned(),
        });
        assert_eq!(*seen.lock().unwrap(), vec!["Agent.LoopDetected"]);
    }
}
