//! Stream events and the assembler that turns them into a [`Response`].
//!
//! Every adapter decodes its provider's SSE stream into calls on an [`Assembler`], which
//! forwards provider-neutral [`StreamEvent`]s to the caller's sink as they arrive and
//! accumulates the final text, tool calls (arguments streamed in pieces and joined) and
//! usage.

use serde_json::Value;

use crate::catalog;
use crate::error::{LlmError, LlmErrorKind};
use crate::message::{Response, ToolCall, Usage};

/// Something that happened while a response streamed in.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// A piece of the reply text.
    TextDelta(String),
    /// A piece of reasoning text (thinking summaries), where the provider streams it.
    ReasoningDelta(String),
    /// The model started a tool call.
    ToolCallStarted {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
    },
    /// A piece of a tool call's JSON arguments.
    ToolCallDelta {
        /// Call id.
        id: String,
        /// The next characters of the arguments text.
        arguments: String,
    },
}

/// Receives stream events; `&mut dyn StreamSink` keeps [`crate::LlmClient`] object-safe.
pub type StreamSink<'a> = dyn FnMut(&StreamEvent) + Send + 'a;

/// Reports a turn that is already complete to `sink` as if it had streamed: the text as
/// one delta (when there is any), then each tool call's start and its whole arguments.
/// For clients that do not stream.
pub fn replay_response(response: &Response, sink: &mut StreamSink<'_>) {
    if !response.text.is_empty() {
        sink(&StreamEvent::TextDelta(response.text.clone()));
    }
    for call in &response.tool_calls {
        sink(&StreamEvent::ToolCallStarted {
            id: call.id.clone(),
            name: call.name.clone(),
        });
        sink(&StreamEvent::ToolCallDelta {
            id: call.id.clone(),
            arguments: call.arguments.to_string(),
        });
    }
}

/// Collects a streamed reply.
pub(crate) struct Assembler<'s, 'a> {
    provider: &'static str,
    model: String,
    sink: &'s mut StreamSink<'a>,
    text: String,
    calls: Vec<PartialCall>,
    pub(crate) usage: Usage,
    /// The call's cost in USD as the provider reported it (OpenRouter's `usage.cost`,
    /// SPEC 10.7); it wins over the catalog's prices.
    pub(crate) reported_cost: Option<f64>,
    finished: bool,
    thinking: Vec<Value>,
}

struct PartialCall {
    slot: String,
    id: String,
    name: String,
    arguments: String,
}

impl<'s, 'a> Assembler<'s, 'a> {
    pub(crate) fn new(provider: &'static str, model: &str, sink: &'s mut StreamSink<'a>) -> Self {
        Assembler {
            provider,
            model: model.to_owned(),
            sink,
            text: String::new(),
            calls: Vec::new(),
            usage: Usage::default(),
            reported_cost: None,
            finished: false,
            thinking: Vec::new(),
        }
    }

    pub(crate) fn set_model(&mut self, model: &str) {
        if !model.is_empty() {
            model.clone_into(&mut self.model);
        }
    }

    pub(crate) fn text(&mut self, delta: &str) {
        if delta.is_empty() {
            return;
        }
        self.text.push_str(delta);
        (self.sink)(&StreamEvent::TextDelta(delta.to_owned()));
    }

    pub(crate) fn reasoning(&mut self, delta: &str) {
        if !delta.is_empty() {
            (self.sink)(&StreamEvent::ReasoningDelta(delta.to_owned()));
        }
    }

    /// A complete thinking block to send back with the turn ([`Response::thinking`]).
    pub(crate) fn thinking_block(&mut self, block: Value) {
        self.thinking.push(block);
    }

    /// A tool call begins in `slot` (the provider's index or item id).
    pub(crate) fn tool_start(&mut self, slot: &str, id: &str, name: &str) {
        self.calls.push(PartialCall {
            slot: slot.to_owned(),
            id: id.to_owned(),
            name: name.to_owned(),
            arguments: String::new(),
        });
        (self.sink)(&StreamEvent::ToolCallStarted {
            id: id.to_owned(),
            name: name.to_owned(),
        });
    }

    /// Whether a tool call is open in `slot`.
    pub(crate) fn has_tool(&self, slot: &str) -> bool {
        self.calls.iter().any(|call| call.slot == slot)
    }

    pub(crate) fn tool_arguments(&mut self, slot: &str, delta: &str) {
        let Some(call) = self.calls.iter_mut().rev().find(|call| call.slot == slot) else {
            return;
        };
        call.arguments.push_str(delta);
        if !delta.is_empty() {
            (self.sink)(&StreamEvent::ToolCallDelta {
                id: call.id.clone(),
                arguments: delta.to_owned(),
            });
        }
    }

    /// Replaces the name or id learnt after the start (Chat Completions sends them in
    /// the first delta of an index).
    pub(crate) fn tool_rename(&mut self, slot: &str, id: Option<&str>, name: Option<&str>) {
        if let Some(call) = self.calls.iter_mut().rev().find(|call| call.slot == slot) {
            if let Some(id) = id.filter(|id| !id.is_empty()) {
                id.clone_into(&mut call.id);
            }
            if let Some(name) = name.filter(|name| !name.is_empty()) {
                call.name.push_str(name);
            }
        }
    }

    pub(crate) fn finish(&mut self) {
        self.finished = true;
    }

    pub(crate) fn is_finished(&self) -> bool {
        self.finished
    }

    /// The complete reply; fails when the stream ended before its completion event.
    pub(crate) fn into_response(self) -> Result<Response, LlmError> {
        if !self.finished {
            return Err(LlmError::new(
                LlmErrorKind::Stream,
                self.provider,
                "stream ended before completion",
            ));
        }
        let tool_calls = self
            .calls
            .into_iter()
            .map(|call| ToolCall {
                id: call.id,
                name: call.name,
                arguments: parse_arguments(&call.arguments),
            })
            .collect();
        let mut usage = self.usage;
        usage.cost_usd = self
            .reported_cost
            .or_else(|| catalog::cost_usd(&self.model, &usage));
        Ok(Response {
            text: self.text,
            tool_calls,
            usage,
            model: self.model,
            thinking: self.thinking,
        })
    }
}

/// Streamed argument text as JSON: empty means `{}`; text that is not JSON is kept as a
/// string so that the agent loop can report it to the model.
fn parse_arguments(text: &str) -> Value {
    if text.trim().is_empty() {
        return Value::Object(serde_json::Map::new());
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_complete_turn_replays_as_text_then_tool_calls() {
        let mut seen = Vec::new();
        let mut sink = |event: &StreamEvent| seen.push(event.clone());
        let response = Response {
            text: "on it".to_owned(),
            tool_calls: vec![ToolCall {
                id: "call_0".to_owned(),
                name: "shell".to_owned(),
                arguments: serde_json::json!({"command": "ls"}),
            }],
            usage: Usage::default(),
            model: "m".to_owned(),
            thinking: Vec::new(),
        };
        replay_response(&response, &mut sink);
        let silent = Response {
            text: String::new(),
            tool_calls: Vec::new(),
            ..response.clone()
        };
        replay_response(&silent, &mut sink);
        assert_eq!(
            seen,
            [
                StreamEvent::TextDelta("on it".to_owned()),
                StreamEvent::ToolCallStarted {
                    id: "call_0".to_owned(),
                    name: "shell".to_owned()
                },
                StreamEvent::ToolCallDelta {
                    id: "call_0".to_owned(),
                    arguments: r#"{"command":"ls"}"#.to_owned()
                },
            ]
        );
    }

    #[test]
    fn arguments_are_joined_and_events_forwarded() {
        let mut seen = Vec::new();
        let mut sink = |event: &StreamEvent| seen.push(event.clone());
        let mut assembler = Assembler::new("anthropic", "claude-sonnet-4-6", &mut sink);
        assembler.text("Hel");
        assembler.text("lo");
        assembler.tool_start("1", "toolu_1", "read_file");
        assembler.tool_arguments("1", "{\"path\":");
        assembler.tool_arguments("1", "\"a.txt\"}");
        assembler.usage.input_tokens = 1_000_000;
        assembler.finish();
        let response = assembler.into_response().expect("finished");
        assert_eq!(response.text, "Hello");
        assert_eq!(
            response.tool_calls[0].arguments,
            serde_json::json!({"path": "a.txt"})
        );
        assert_eq!(response.usage.cost_usd, Some(3.0));
        assert_eq!(seen.len(), 5);
        assert_eq!(seen[0], StreamEvent::TextDelta("Hel".to_owned()));
    }

    #[test]
    fn unfinished_streams_fail_as_stream_errors() {
        let mut sink = |_: &StreamEvent| {};
        let assembler = Assembler::new("openai", "gpt-5.4", &mut sink);
        let error = assembler.into_response().expect_err("not finished");
        assert_eq!(error.kind, LlmErrorKind::Stream);
        assert_eq!(parse_arguments("{bad"), Value::String("{bad".to_owned()));
        assert_eq!(parse_arguments(""), serde_json::json!({}));
    }
}
