//! The `Agent.*` events of agent session events (SPEC 11.3, 10.4).

use super::{
    AgentAssistantMessage, AgentCompactionCompleted, AgentCompactionStarted,
    AgentContextWindowWarning, AgentError, AgentLoopDetected, AgentSteeringDelivered,
    AgentToolCallCompleted, AgentToolCallStarted, EventKind, EventUsage,
};

/// The `Agent.*` event of an agent session event (SPEC 11.3); a sub-agent's event
/// carries the `agent_id` of the outermost sub-agent.
impl From<&fabro_agent::AgentEvent> for EventKind {
    fn from(event: &fabro_agent::AgentEvent) -> EventKind {
        agent_kind(event, None)
    }
}

fn agent_kind(event: &fabro_agent::AgentEvent, agent_id: Option<&str>) -> EventKind {
    use fabro_agent::AgentEvent;
    let agent_id = agent_id.map(str::to_owned);
    match event {
        AgentEvent::AssistantMessage {
            text,
            tool_call_count,
            usage,
        } => AgentAssistantMessage {
            agent_id,
            text: text.clone(),
            tool_call_count: *tool_call_count,
            usage: EventUsage::from(*usage),
        }
        .into(),
        AgentEvent::ToolCallStarted {
            tool,
            call_id,
            arguments,
            server,
        } => AgentToolCallStarted {
            agent_id,
            arguments: arguments.clone(),
            call_id: call_id.clone(),
            server: server.clone(),
            tool: tool.clone(),
        }
        .into(),
        AgentEvent::ToolCallCompleted {
            tool,
            call_id,
            is_error,
            output,
            duration_ms,
            server,
        } => AgentToolCallCompleted {
            server: server.clone(),
            agent_id,
            call_id: call_id.clone(),
            duration_ms: *duration_ms,
            is_error: *is_error,
            output: output.clone(),
            tool: tool.clone(),
        }
        .into(),
        AgentEvent::LoopDetected { pattern_length } => AgentLoopDetected {
            agent_id,
            pattern_length: *pattern_length,
        }
        .into(),
        AgentEvent::ContextWindowWarning {
            estimated_tokens,
            context_window_size,
            usage_percent,
        } => AgentContextWindowWarning {
            agent_id,
            context_window_size: *context_window_size,
            estimated_tokens: *estimated_tokens,
            usage_percent: *usage_percent,
        }
        .into(),
        AgentEvent::CompactionStarted {
            estimated_tokens,
            context_window_size,
        } => AgentCompactionStarted {
            agent_id,
            context_window_size: *context_window_size,
            estimated_tokens: *estimated_tokens,
        }
        .into(),
        AgentEvent::CompactionCompleted {
            original_turn_count,
            preserved_turn_count,
            summary_token_estimate,
            tracked_file_count,
        } => AgentCompactionCompleted {
            agent_id,
            original_turn_count: *original_turn_count,
            preserved_turn_count: *preserved_turn_count,
            summary_token_estimate: *summary_token_estimate,
            tracked_file_count: *tracked_file_count,
        }
        .into(),
        AgentEvent::SteeringDelivered { count } => AgentSteeringDelivered {
            agent_id,
            count: *count,
        }
        .into(),
        AgentEvent::Error { message } => AgentError {
            agent_id,
            message: message.clone(),
        }
        .into(),
        AgentEvent::SubAgent {
            agent_id: inner_id,
            event,
        } => agent_kind(event, Some(agent_id.as_deref().unwrap_or(inner_id))),
    }
}
