//! The provider-neutral request and response model (SPEC 10.1).

use serde::{Deserialize, Serialize};

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// System instructions.
    System,
    /// The user (fabro).
    User,
    /// The model.
    Assistant,
    /// Tool results.
    Tool,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Speaker.
    pub role: Role,
    /// Text content.
    pub text: String,
    /// Tool calls made by an assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For tool messages: the call answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For tool messages: the tool failed and `text` is its error.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// For assistant messages: the provider's thinking blocks (Anthropic `thinking`
    /// with its signature, `redacted_thinking`), sent back unchanged to the provider
    /// that made them and left out by the others (SPEC 10.1 item 1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thinking: Vec<serde_json::Value>,
}

impl Message {
    /// A user message.
    pub fn user(text: impl Into<String>) -> Message {
        Message {
            role: Role::User,
            text: text.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            is_error: false,
            thinking: Vec::new(),
        }
    }

    /// An assistant message.
    pub fn assistant(text: impl Into<String>) -> Message {
        Message {
            role: Role::Assistant,
            text: text.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            is_error: false,
            thinking: Vec::new(),
        }
    }
}

/// A tool result answering the call `tool_call_id`.
impl Message {
    /// A tool message carrying the result (or, with `is_error`, the error) of one call.
    pub fn tool_result(
        tool_call_id: impl Into<String>,
        text: impl Into<String>,
        is_error: bool,
    ) -> Message {
        Message {
            role: Role::Tool,
            text: text.into(),
            tool_calls: Vec::new(),
            tool_call_id: Some(tool_call_id.into()),
            is_error,
            thinking: Vec::new(),
        }
    }
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// Tool name.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// A tool call requested by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Call id, unique within the conversation.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments as JSON.
    pub arguments: serde_json::Value,
}

/// How hard a reasoning model thinks (SPEC 10.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReasoningEffort {
    /// Little thinking.
    Low,
    /// The middle setting.
    Medium,
    /// Much thinking.
    High,
}

impl ReasoningEffort {
    /// The name used by OpenAI's APIs and in workflows.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
        }
    }

    /// Parses `low`, `medium` or `high`.
    pub fn parse(text: &str) -> Option<ReasoningEffort> {
        match text {
            "low" => Some(ReasoningEffort::Low),
            "medium" => Some(ReasoningEffort::Medium),
            "high" => Some(ReasoningEffort::High),
            _ => None,
        }
    }
}

/// One LLM call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Request {
    /// Model id.
    pub model: String,
    /// System prompt.
    pub system: Option<String>,
    /// Conversation so far.
    pub messages: Vec<Message>,
    /// Output cap.
    pub max_tokens: Option<u32>,
    /// Tools the model may call; empty for a plain completion.
    pub tools: Vec<ToolDefinition>,
    /// The workflow node making the call (the simulated provider scripts per node).
    pub node_id: String,
    /// Reasoning effort; ignored by models without reasoning.
    pub reasoning_effort: Option<ReasoningEffort>,
    /// JSON Schema the reply must follow, sent as structured output where the provider
    /// supports it (OpenAI, Gemini, Chat Completions); Anthropic ignores it.
    pub output_schema: Option<serde_json::Value>,
    /// Prompt caching (SPEC 10.8): `Some(key)` marks the request's stable prefix for the
    /// provider's cache (Anthropic breakpoints; OpenAI `prompt_cache_key` = `key`, by
    /// convention `{run_id}:{node_id}`); `None` sends no markers.
    pub prompt_cache: Option<String>,
}

impl Request {
    /// Characters of system prompt and messages, for size estimates.
    pub fn characters(&self) -> usize {
        self.system
            .as_ref()
            .map_or(0, |system| system.chars().count())
            + self
                .messages
                .iter()
                .map(|message| message.text.chars().count())
                .sum::<usize>()
    }
}

/// Token usage of one call (SPEC 10.1.4).
///
/// `input_tokens` counts every prompt token, cache reads and writes included;
/// `output_tokens` counts every generated token, reasoning included. The cache and
/// reasoning fields break those totals down.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Reasoning tokens (billed as output).
    pub reasoning_tokens: u64,
    /// Tokens read from the prompt cache.
    pub cache_read_tokens: u64,
    /// Tokens written to the prompt cache.
    pub cache_write_tokens: u64,
    /// Cost in USD; `None` when the model has no price.
    pub cost_usd: Option<f64>,
}

impl Usage {
    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
        self.cost_usd = match (self.cost_usd, other.cost_usd) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
    }
}

/// The complete assistant turn of one call.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// Text of the turn.
    pub text: String,
    /// Tool calls of the turn.
    pub tool_calls: Vec<ToolCall>,
    /// Usage of the call.
    pub usage: Usage,
    /// Model that answered.
    pub model: String,
    /// Thinking blocks to send back with this turn ([`Message::thinking`]).
    pub thinking: Vec<serde_json::Value>,
}
