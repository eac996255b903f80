//! The OpenAI Responses API adapter (SPEC 10.1): `POST {base}/responses` with
//! `stream: true` and a bearer key; the base URL includes `/v1`.

use serde_json::{json, Map, Value};

use crate::anthropic::number;
use crate::client::{BoxFuture, LlmClient};
use crate::error::{LlmError, LlmErrorKind};
use crate::http::{answer_error, json as parse_json, HttpSettings, Transport, WireDecoder};
use crate::message::{Request, Response, Role};
use crate::sse::SseEvent;
use crate::stream::{Assembler, StreamSink};

/// A client for the OpenAI Responses API.
pub struct OpenAiClient {
    transport: Transport,
}

impl OpenAiClient {
    /// A client for `settings` (base URL including `/v1`).
    pub fn new(settings: HttpSettings) -> Result<OpenAiClient, LlmError> {
        Ok(OpenAiClient {
            transport: Transport::new("openai", settings)?,
        })
    }

    async fn run(
        &self,
        request: &Request,
        sink: &mut StreamSink<'_>,
    ) -> Result<Response, LlmError> {
        let key = self.transport.key().ok_or_else(|| {
            self.transport.error(
                LlmErrorKind::Configuration,
                "missing key (set OPENAI_API_KEY)",
            )
        })?;
        let auth = [("authorization", format!("Bearer {}", key.expose()))];
        let mut out = Assembler::new("openai", &request.model, sink);
        let mut decoder = Decoder {
            transport: &self.transport,
        };
        self.transport
            .stream(
                &self.transport.url("/responses"),
                &auth,
                &body(request),
                &mut decoder,
                &mut out,
            )
            .await?;
        out.into_response()
    }
}

impl LlmClient for OpenAiClient {
    fn complete_streaming<'a>(
        &'a self,
        request: &'a Request,
        sink: &'a mut StreamSink<'_>,
    ) -> BoxFuture<'a, Result<Response, LlmError>> {
        Box::pin(self.run(request, sink))
    }
}

/// The request body: `instructions`, input items (`function_call` and
/// `function_call_output` for tool turns), `function` tools, reasoning effort and
/// JSON-schema text format.
pub(crate) fn body(request: &Request) -> Value {
    let mut input = Vec::new();
    for message in &request.messages {
        match message.role {
            Role::System => input.push(json!({"role": "developer", "content": message.text})),
            Role::User => input.push(json!({"role": "user", "content": message.text})),
            Role::Assistant => {
                if !message.text.is_empty() {
                    input.push(json!({"role": "assistant", "content": message.text}));
                }
                for call in &message.tool_calls {
                    input.push(json!({"type": "function_call", "call_id": call.id, "name": call.name,
                                      "arguments": call.arguments.to_string()}));
                }
            }
            Role::Tool => input.push(json!({"type": "function_call_output",
                                            "call_id": message.tool_call_id, "output": message.text})),
        }
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("stream".into(), json!(true));
    body.insert("store".into(), json!(false));
    if let Some(key) = &request.prompt_cache {
        // SPEC 10.8: every turn of a stage reaches the same cache.
        body.insert("prompt_cache_key".into(), json!(key));
    }
    if let Some(system) = &request.system {
        body.insert("instructions".into(), json!(system));
    }
    body.insert("input".into(), Value::Array(input));
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                json!({"type": "function", "name": tool.name, "description": tool.description,
                               "parameters": tool.parameters})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        body.insert("tool_choice".into(), json!("auto"));
    }
    body.insert(
        "max_output_tokens".into(),
        json!(request.effective_max_tokens()),
    );
    if let Some(effort) = request.effective_reasoning_effort() {
        body.insert("reasoning".into(), json!({"effort": effort.as_str()}));
    }
    if let Some(schema) = &request.output_schema {
        body.insert(
            "text".into(),
            json!({"format": {"type": "json_schema", "name": "output", "schema": schema, "strict": false}}),
        );
    }
    Value::Object(body)
}

struct Decoder<'t> {
    transport: &'t Transport,
}

impl WireDecoder for Decoder<'_> {
    fn event(&mut self, event: &SseEvent, out: &mut Assembler<'_, '_>) -> Result<(), LlmError> {
        let data = parse_json("openai", &event.data)?;
        let kind = data["type"].as_str().unwrap_or(event.event.as_str());
        match kind {
            "response.output_text.delta" => out.text(data["delta"].as_str().unwrap_or_default()),
            "response.reasoning_summary_text.delta" => {
                out.reasoning(data["delta"].as_str().unwrap_or_default());
            }
            "response.output_item.added" => {
                let item = &data["item"];
                if item["type"] == "function_call" {
                    let slot = item["id"].as_str().unwrap_or_default().to_owned();
                    out.tool_start(
                        &slot,
                        item["call_id"].as_str().unwrap_or_default(),
                        item["name"].as_str().unwrap_or_default(),
                    );
                    out.tool_arguments(&slot, item["arguments"].as_str().unwrap_or_default());
                }
            }
            "response.function_call_arguments.delta" => {
                out.tool_arguments(
                    data["item_id"].as_str().unwrap_or_default(),
                    data["delta"].as_str().unwrap_or_default(),
                );
            }
            "response.completed" | "response.incomplete" => {
                self.completed(&data["response"], out)?;
            }
            "response.failed" => {
                return Err(answer_error(self.transport, &data["response"]["error"]));
            }
            "error" => {
                // `{"type": "error", "code", "message"}`, or the error nested in `error`.
                let error = data.get("error").filter(|error| error.is_object());
                return Err(answer_error(self.transport, error.unwrap_or(&data)));
            }
            _ => {}
        }
        Ok(())
    }

    fn whole(&mut self, body: &Value, out: &mut Assembler<'_, '_>) -> Result<bool, LlmError> {
        let Some(output) = body["output"].as_array() else {
            return Ok(false);
        };
        if body["status"] == "failed" {
            return Err(answer_error(self.transport, &body["error"]));
        }
        for (index, item) in output.iter().enumerate() {
            match item["type"].as_str().unwrap_or_default() {
                "message" => {
                    for part in item["content"].as_array().into_iter().flatten() {
                        if part["type"] == "output_text" {
                            out.text(part["text"].as_str().unwrap_or_default());
                        }
                    }
                }
                "reasoning" => {
                    for part in item["summary"].as_array().into_iter().flatten() {
                        out.reasoning(part["text"].as_str().unwrap_or_default());
                    }
                }
                "function_call" => {
                    let slot = index.to_string();
                    out.tool_start(
                        &slot,
                        item["call_id"].as_str().unwrap_or_default(),
                        item["name"].as_str().unwrap_or_default(),
                    );
                    out.tool_arguments(&slot, item["arguments"].as_str().unwrap_or_default());
                }
                _ => {}
            }
        }
        self.completed(body, out)?;
        Ok(true)
    }
}

impl Decoder<'_> {
    /// A finished response object (`response.completed` / `response.incomplete`, or a
    /// whole answer): model, usage, the content-filter stop, completion.
    fn completed(&self, response: &Value, out: &mut Assembler<'_, '_>) -> Result<(), LlmError> {
        let usage = &response["usage"];
        out.set_model(response["model"].as_str().unwrap_or_default());
        out.usage.input_tokens = number(&usage["input_tokens"]);
        out.usage.cache_read_tokens = number(&usage["input_tokens_details"]["cached_tokens"]);
        out.usage.output_tokens = number(&usage["output_tokens"]);
        out.usage.reasoning_tokens = number(&usage["output_tokens_details"]["reasoning_tokens"]);
        if response["incomplete_details"]["reason"] == "content_filter" {
            return Err(self.transport.error(
                LlmErrorKind::ContentFilter,
                "response stopped by the content filter",
            ));
        }
        out.finish();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Message, ReasoningEffort, ToolCall};

    #[test]
    fn bodies_use_items_and_formats() {
        let mut assistant = Message::assistant("calling");
        assistant.tool_calls.push(ToolCall {
            id: "call_1".to_owned(),
            name: "read".to_owned(),
            arguments: json!({"p": 1}),
        });
        let body = body(&Request {
            model: "gpt-5.4".to_owned(),
            system: Some("sys".to_owned()),
            messages: vec![
                Message::user("hi"),
                assistant,
                Message::tool_result("call_1", "out", false),
            ],
            reasoning_effort: Some(ReasoningEffort::Medium),
            output_schema: Some(json!({"type": "object"})),
            ..Request::default()
        });
        assert_eq!(body["instructions"], "sys");
        assert_eq!(body["input"][2]["type"], "function_call");
        assert_eq!(body["input"][2]["arguments"], "{\"p\":1}");
        assert_eq!(body["input"][3]["type"], "function_call_output");
        assert_eq!(body["reasoning"]["effort"], "medium");
        assert_eq!(body["text"]["format"]["type"], "json_schema");
        assert!(body.get("prompt_cache_key").is_none());
    }

    /// SPEC 10.8: every turn of a stage names the same cache.
    #[test]
    fn cached_requests_name_their_cache() {
        let body = body(&Request {
            model: "gpt-5.4".to_owned(),
            messages: vec![Message::user("hi")],
            prompt_cache: Some("01RUN:plan".to_owned()),
            ..Request::default()
        });
        assert_eq!(body["prompt_cache_key"], "01RUN:plan");
    }
}
