//! The `Agent.*` events of SPEC 11.3 (and `Agent.SteeringDelivered`, SPEC 20.1), fields
//! in alphabetical order like every event struct.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::EventUsage;

/// `Agent.SessionStarted {thread_id, provider, model, backend}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSessionStarted {
    /// `api`, `cli` or `acp`.
    pub backend: String,
    /// Model.
    pub model: String,
    /// Provider.
    pub provider: String,
    /// Thread continued, if any.
    pub thread_id: Option<String>,
}

/// `Agent.AssistantMessage {text, tool_call_count, usage}`; `agent_id` for sub-agents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentAssistantMessage {
    /// The sub-agent, absent for the node's own session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Text of the turn.
    pub text: String,
    /// Tool calls it made.
    pub tool_call_count: usize,
    /// Usage of the call.
    pub usage: EventUsage,
}

/// `Agent.ToolCallStarted {tool, call_id, arguments}`; `agent_id` for sub-agents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentToolCallStarted {
    /// The sub-agent, absent for the node's own session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Arguments as the model sent them.
    pub arguments: Value,
    /// Call id.
    pub call_id: String,
    /// The MCP server of an MCP tool (SPEC 19.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Tool name.
    pub tool: String,
}

/// `Agent.ToolCallCompleted {tool, call_id, is_error, output, duration_ms}`; `agent_id`
/// for sub-agents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentToolCallCompleted {
    /// The sub-agent, absent for the node's own session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Call id.
    pub call_id: String,
    /// Execution time.
    pub duration_ms: u64,
    /// Whether the call failed.
    pub is_error: bool,
    /// Full output or error text.
    pub output: String,
    /// The MCP server of an MCP tool (SPEC 19.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Tool name.
    pub tool: String,
}

/// `Agent.LlmRetry {attempt, delay_ms, error_kind, status_code}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentLlmRetry {
    /// The attempt that failed.
    pub attempt: u32,
    /// Backoff before the next one.
    pub delay_ms: u64,
    /// Error kind (SPEC 10.3).
    pub error_kind: String,
    /// HTTP status, if any.
    pub status_code: Option<u16>,
}

/// `Agent.Failover {from_provider, from_model, to_provider, to_model, error_kind}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentFailover {
    /// Error kind that caused it.
    pub error_kind: String,
    /// Model given up.
    pub from_model: String,
    /// Provider given up.
    pub from_provider: String,
    /// Model used next.
    pub to_model: String,
    /// Provider used next.
    pub to_provider: String,
}

/// `Agent.LoopDetected {pattern_length}`; `agent_id` for sub-agents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentLoopDetected {
    /// The sub-agent, absent for the node's own session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Length of the repeating cycle.
    pub pattern_length: usize,
}

/// `Agent.ContextWindowWarning {estimated_tokens, context_window_size, usage_percent}`;
/// `agent_id` for sub-agents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentContextWindowWarning {
    /// The sub-agent, absent for the node's own session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The model's context window.
    pub context_window_size: u64,
    /// Estimated tokens.
    pub estimated_tokens: u64,
    /// `estimated_tokens` as a percentage of the window.
    pub usage_percent: f64,
}

/// `Agent.CompactionStarted {estimated_tokens, context_window_size}`; `agent_id` for
/// sub-agents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentCompactionStarted {
    /// The sub-agent, absent for the node's own session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The model's context window.
    pub context_window_size: u64,
    /// Estimated tokens before compaction.
    pub estimated_tokens: u64,
}

/// `Agent.CompactionCompleted {original_turn_count, preserved_turn_count,
/// summary_token_estimate, tracked_file_count}`; `agent_id` for sub-agents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentCompactionCompleted {
    /// The sub-agent, absent for the node's own session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// History entries before compaction.
    pub original_turn_count: usize,
    /// Entries kept verbatim.
    pub preserved_turn_count: usize,
    /// Estimated tokens of the summary.
    pub summary_token_estimate: u64,
    /// Files in the tracker's section.
    pub tracked_file_count: usize,
}

/// `Agent.Error {message}`; `agent_id` for sub-agents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentError {
    /// The sub-agent, absent for the node's own session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// What went wrong.
    pub message: String,
}

/// `Agent.SteeringDelivered {count}` (SPEC 20.1): queued steering messages reached the
/// agent as one user message (a new prompt turn of an acp agent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSteeringDelivered {
    /// The sub-agent, absent for the node's own session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// How many messages were delivered together.
    pub count: usize,
}
