//! The OpenAI-compatible Chat Completions adapter (SPEC 10.1): `POST {base}/chat/completions`
//! at any base URL (Ollama, vLLM, llama.cpp server, LM Studio, gateways), SSE ending with
//! `data: [DONE]`, a bearer key when one is set and configurable extra headers.

use serde_json::{json, Map, Value};

use crate::anthropic::number;
use crate::client::{BoxFuture, LlmClient};
use crate::error::{LlmError, LlmErrorKind};
use crate::http::{answer_error, json as parse_json, HttpSettings, Transport, WireDecoder};
use crate::message::{Request, Response, Role};
use crate::sse::SseEvent;
use crate::stream::{Assembler, StreamSink};

/// A client for an OpenAI-compatible Chat Completions server.
pub struct ChatCompletionsClient {
    transport: Transport,
}

impl ChatCompletionsClient {
    /// A client for `settings` (base URL including `/v1`).
    pub fn new(settings: HttpSettings) -> Result<ChatCompletionsClient, LlmError> {
        Ok(ChatCompletionsClient {
            transport: Transport::new("openai_compatible", settings)?,
        })
    }

    async fn run(
        &self,
        request: &Request,
        sink: &mut StreamSink<'_>,
    ) -> Result<Response, LlmError> {
        let auth: Vec<(&'static str, String)> = self
            .transport
            .key()
            .map(|key| ("authorization", format!("Bearer {}", key.expose())))
            .into_iter()
            .collect();
        let mut out = Assembler::new("openai_compatible", &request.model, sink);
        let mut decoder = Decoder {
            transport: &self.transport,
            finish_seen: false,
        };
        self.transport
            .stream(
                &self.transport.url("/chat/completions"),
                &auth,
                &body(request),
                &mut decoder,
                &mut out,
            )
            .await?;
        out.into_response()
    }
}

impl LlmClient for ChatCompletionsClient {
    fn complete_streaming<'a>(
        &'a self,
        request: &'a Request,
        sink: &'a mut StreamSink<'_>,
    ) -> BoxFuture<'a, Result<Response, LlmError>> {
        Box::pin(self.run(request, sink))
    }
}

/// The request body of Chat Completions.
pub(crate) fn body(request: &Request) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = &request.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    for message in &request.messages {
        messages.push(match message.role {
            Role::System => json!({"role": "system", "content": message.text}),
            Role::User => json!({"role": "user", "content": message.text}),
            Role::Assistant if message.tool_calls.is_empty() => {
                json!({"role": "assistant", "content": message.text})
            }
            Role::Assistant => {
                let calls: Vec<Value> = message
                    .tool_calls
                    .iter()
                    .map(|call| json!({"id": call.id, "type": "function",
                                       "function": {"name": call.name, "arguments": call.arguments.to_string()}}))
                    .collect();
                let content = if message.text.is_empty() { Value::Null } else { json!(message.text) };
                json!({"role": "assistant", "content": content, "tool_calls": calls})
            }
            Role::Tool => json!({"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text}),
        });
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| json!({"type": "function", "function": {"name": tool.name, "description": tool.description,
                                                                 "parameters": tool.parameters}}))
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(max) = request.max_tokens {
        body.insert("max_tokens".into(), json!(max));
    }
    if let Some(effort) = request.effective_reasoning_effort() {
        body.insert("reasoning_effort".into(), json!(effort.as_str()));
    }
    if let Some(schema) = &request.output_schema {
        body.insert(
            "response_format".into(),
            json!({"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}),
        );
    }
    Value::Object(body)
}

struct Decoder<'t> {
    transport: &'t Transport,
    finish_seen: bool,
}

impl WireDecoder for Decoder<'_> {
    fn event(&mut self, event: &SseEvent, out: &mut Assembler<'_, '_>) -> Result<(), LlmError> {
        if event.data.trim() == "[DONE]" {
            out.finish();
            return Ok(());
        }
        let data = parse_json("openai_compatible", &event.data)?;
        if let Some(error) = data.get("error") {
            return Err(answer_error(self.transport, error));
        }
        if let Some(model) = data["model"].as_str() {
            out.set_model(model);
        }
        let choice = &data["choices"][0];
        let delta = &choice["delta"];
        if let Some(text) = delta["content"].as_str() {
            out.text(text);
        }
        if let Some(text) = delta["reasoning_content"].as_str() {
            out.reasoning(text);
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let slot = call["index"].to_string();
            let function = &call["function"];
            if out.has_tool(&slot) {
                out.tool_rename(&slot, call["id"].as_str(), None);
            } else {
                out.tool_start(
                    &slot,
                    call["id"].as_str().unwrap_or_default(),
                    function["name"].as_str().unwrap_or_default(),
                );
            }
            out.tool_arguments(&slot, function["arguments"].as_str().unwrap_or_default());
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            if reason == "content_filter" {
                return Err(self.transport.error(
                    LlmErrorKind::ContentFilter,
                    "response stopped by the content filter",
                ));
            }
            self.finish_seen = true;
        }
        usage(&data["usage"], out);
        Ok(())
    }

    fn whole(&mut self, body: &Value, out: &mut Assembler<'_, '_>) -> Result<bool, LlmError> {
        let Some(choice) = body["choices"]
            .as_array()
            .and_then(|choices| choices.first())
        else {
            return Ok(false);
        };
        if choice["finish_reason"] == "content_filter" {
            return Err(self.transport.error(
                LlmErrorKind::ContentFilter,
                "response stopped by the content filter",
            ));
        }
        if let Some(model) = body["model"].as_str() {
            out.set_model(model);
        }
        let message = &choice["message"];
        if let Some(text) = message["reasoning_content"].as_str() {
            out.reasoning(text);
        }
        if let Some(text) = message["content"].as_str() {
            out.text(text);
        }
        for (index, call) in message["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let slot = index.to_string();
            let function = &call["function"];
            out.tool_start(
                &slot,
                call["id"].as_str().unwrap_or_default(),
                function["name"].as_str().unwrap_or_default(),
            );
            let arguments = match &function["arguments"] {
                Value::String(text) => text.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            out.tool_arguments(&slot, &arguments);
        }
        usage(&body["usage"], out);
        out.finish();
        Ok(true)
    }

    fn end(&mut self, out: &mut Assembler<'_, '_>) {
        // Some servers close after the finish reason without `[DONE]`.
        if self.finish_seen {
            out.finish();
        }
    }
}

/// Records a Chat Completions `usage` block, when there is one. A `cost` in it is the
/// call's cost in USD as OpenRouter reports it (SPEC 10.7), used instead of catalog
/// prices.
fn usage(usage: &Value, out: &mut Assembler<'_, '_>) {
    if usage.is_object() {
        if let Some(cost) = usage["cost"]
            .as_f64()
            .filter(|cost| cost.is_finite() && *cost >= 0.0)
        {
            out.reported_cost = Some(cost);
        }
        out.usage.input_tokens = number(&usage["prompt_tokens"]);
        out.usage.cache_read_tokens = number(&usage["prompt_tokens_details"]["cached_tokens"]);
        out.usage.output_tokens = number(&usage["completion_tokens"]);
        out.usage.reasoning_tokens =
            number(&usage["completion_tokens_details"]["reasoning_tokens"]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Message, ToolCall};

    #[test]
    fn bodies_follow_chat_completions() {
        let mut assistant = Message::assistant("");
        assistant.tool_calls.push(ToolCall {
            id: "c1".to_owned(),
            name: "ls".to_owned(),
            arguments: json!({}),
        });
        let body = body(&Request {
            model: "llama3".to_owned(),
            system: Some("sys".to_owned()),
            messages: vec![
                Message::user("hi"),
                assistant,
                Message::tool_result("c1", "a b", false),
            ],
            output_schema: Some(json!({"type": "object"})),
            ..Request::default()
        });
        assert_eq!(body["messages"][0]["role"], "system");
        assert_eq!(
            body["messages"][2]["tool_calls"][0]["function"]["arguments"],
            "{}"
        );
        assert_eq!(body["messages"][3]["role"], "tool");
        assert_eq!(body["response_format"]["type"], "json_schema");
        assert_eq!(body["stream_options"]["include_usage"], true);
    }
}
