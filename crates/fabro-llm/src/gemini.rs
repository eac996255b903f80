//! The Gemini adapter (SPEC 10.1): `POST {base}/v1beta/models/{model}:streamGenerateContent?alt=sse`
//! with the key in the `x-goog-api-key` header, never in the URL.

use serde_json::{json, Map, Value};

use crate::anthropic::number;
use crate::client::{BoxFuture, LlmClient};
use crate::error::{LlmError, LlmErrorKind};
use crate::http::{answer_error, json as parse_json, HttpSettings, Transport, WireDecoder};
use crate::message::{ReasoningEffort, Request, Response, Role};
use crate::sse::SseEvent;
use crate::stream::{Assembler, StreamSink};

/// A client for the Gemini API.
pub struct GeminiClient {
    transport: Transport,
}

impl GeminiClient {
    /// A client for `settings` (base URL without `/v1beta`).
    pub fn new(settings: HttpSettings) -> Result<GeminiClient, LlmError> {
        Ok(GeminiClient {
            transport: Transport::new("gemini", settings)?,
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
                "missing key (set GEMINI_API_KEY)",
            )
        })?;
        let auth = [("x-goog-api-key", key.expose().to_owned())];
        let model: String = request
            .model
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
            .collect();
        let url = self.transport.url(&format!(
            "/v1beta/models/{model}:streamGenerateContent?alt=sse"
        ));
        let mut out = Assembler::new("gemini", &request.model, sink);
        let mut decoder = Decoder {
            transport: &self.transport,
            finish_seen: false,
            calls: 0,
        };
        self.transport
            .stream(&url, &auth, &body(request), &mut decoder, &mut out)
            .await?;
        out.into_response()
    }
}

impl LlmClient for GeminiClient {
    fn complete_streaming<'a>(
        &'a self,
        request: &'a Request,
        sink: &'a mut StreamSink<'_>,
    ) -> BoxFuture<'a, Result<Response, LlmError>> {
        Box::pin(self.run(request, sink))
    }
}

/// The request body: `systemInstruction`, `contents` with `functionCall` and
/// `functionResponse` parts (keyed by function name, results wrapped as `{"result": …}`),
/// `functionDeclarations`, thinking budget and JSON response schema.
pub(crate) fn body(request: &Request) -> Value {
    let mut system = request.system.clone().unwrap_or_default();
    let mut contents: Vec<(String, Vec<Value>)> = Vec::new();
    for message in &request.messages {
        let (role, parts) = match message.role {
            Role::System => {
                if !system.is_empty() {
                    system.push_str("\n\n");
                }
                system.push_str(&message.text);
                continue;
            }
            Role::User => ("user", vec![json!({"text": message.text})]),
            Role::Assistant => {
                let mut parts = Vec::new();
                if !message.text.is_empty() {
                    parts.push(json!({"text": message.text}));
                }
                for call in &message.tool_calls {
                    parts
                        .push(json!({"functionCall": {"name": call.name, "args": call.arguments}}));
                }
                ("model", parts)
            }
            Role::Tool => {
                let name = request
                    .messages
                    .iter()
                    .flat_map(|earlier| &earlier.tool_calls)
                    .find(|call| Some(&call.id) == message.tool_call_id.as_ref())
                    .map_or("unknown", |call| call.name.as_str());
                let key = if message.is_error { "error" } else { "result" };
                (
                    "user",
                    vec![
                        json!({"functionResponse": {"name": name, "response": {key: message.text}}}),
                    ],
                )
            }
        };
        match contents.last_mut() {
            Some((last, existing)) if last == role => existing.extend(parts),
            _ => contents.push((role.to_owned(), parts)),
        }
    }
    let mut body = Map::new();
    body.insert(
        "contents".into(),
        Value::Array(
            contents
                .into_iter()
                .map(|(role, parts)| json!({"role": role, "parts": parts}))
                .collect(),
        ),
    );
    if !system.is_empty() {
        body.insert(
            "systemInstruction".into(),
            json!({"parts": [{"text": system}]}),
        );
    }
    if !request.tools.is_empty() {
        let declarations: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| json!({"name": tool.name, "description": tool.description, "parameters": tool.parameters}))
            .collect();
        body.insert(
            "tools".into(),
            json!([{"functionDeclarations": declarations}]),
        );
    }
    let mut generation = Map::new();
    generation.insert(
        "maxOutputTokens".into(),
        json!(request.effective_max_tokens()),
    );
    if let Some(effort) = request.effective_reasoning_effort() {
        let budget = match effort {
            ReasoningEffort::Low => 1_024,
            ReasoningEffort::Medium => 8_192,
            ReasoningEffort::High => 24_576,
        };
        generation.insert("thinkingConfig".into(), json!({"thinkingBudget": budget}));
    }
    if let Some(schema) = &request.output_schema {
        generation.insert("responseMimeType".into(), json!("application/json"));
        generation.insert("responseJsonSchema".into(), schema.clone());
    }
    if !generation.is_empty() {
        body.insert("generationConfig".into(), Value::Object(generation));
    }
    Value::Object(body)
}

struct Decoder<'t> {
    transport: &'t Transport,
    finish_seen: bool,
    calls: usize,
}

impl WireDecoder for Decoder<'_> {
    fn event(&mut self, event: &SseEvent, out: &mut Assembler<'_, '_>) -> Result<(), LlmError> {
        let data = parse_json("gemini", &event.data)?;
        self.chunk(&data, out)
    }

    fn end(&mut self, out: &mut Assembler<'_, '_>) {
        if self.finish_seen {
            out.finish();
        }
    }

    /// A `generateContent` response, or the JSON array of chunks that
    /// `streamGenerateContent` returns without `alt=sse`.
    fn whole(&mut self, body: &Value, out: &mut Assembler<'_, '_>) -> Result<bool, LlmError> {
        let chunks: Vec<&Value> = match body {
            Value::Array(items) => items.iter().collect(),
            other => vec![other],
        };
        let is_chunk = |chunk: &&Value| {
            ["candidates", "promptFeedback", "usageMetadata", "error"]
                .iter()
                .any(|field| chunk.get(field).is_some())
        };
        if chunks.is_empty() || !chunks.iter().all(is_chunk) {
            return Ok(false);
        }
        for chunk in chunks {
            self.chunk(chunk, out)?;
        }
        out.finish();
        Ok(true)
    }
}

impl Decoder<'_> {
    /// One response chunk: an SSE event's data, or an item of a whole answer.
    fn chunk(&mut self, data: &Value, out: &mut Assembler<'_, '_>) -> Result<(), LlmError> {
        if let Some(error) = data.get("error") {
            return Err(answer_error(self.transport, error));
        }
        if let Some(reason) = data["promptFeedback"]["blockReason"].as_str() {
            return Err(self.transport.error(
                LlmErrorKind::ContentFilter,
                format!("prompt blocked: {reason}"),
            ));
        }
        if let Some(version) = data["modelVersion"].as_str() {
            out.set_model(version);
        }
        let candidate = &data["candidates"][0];
        for part in candidate["content"]["parts"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(call) = part.get("functionCall") {
                // Gemini sends whole calls and no ids: synthetic `call_{uuid}` ids.
                let slot = format!("gemini-{}", self.calls);
                self.calls += 1;
                let id = format!("call_{:032x}", rand::random::<u128>());
                out.tool_start(&slot, &id, call["name"].as_str().unwrap_or_default());
                let arguments = call
                    .get("args")
                    .map_or_else(|| "{}".to_owned(), Value::to_string);
                out.tool_arguments(&slot, &arguments);
            } else if let Some(text) = part["text"].as_str() {
                if part["thought"] == true {
                    out.reasoning(text);
                } else {
                    out.text(text);
                }
            }
        }
        if let Some(reason) = candidate["finishReason"].as_str() {
            if matches!(
                reason,
                "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII"
            ) {
                return Err(self.transport.error(
                    LlmErrorKind::ContentFilter,
                    format!("response stopped: {reason}"),
                ));
            }
            self.finish_seen = true;
        }
        let usage = &data["usageMetadata"];
        if usage.is_object() {
            let thoughts = number(&usage["thoughtsTokenCount"]);
            out.usage.input_tokens = number(&usage["promptTokenCount"]);
            out.usage.cache_read_tokens = number(&usage["cachedContentTokenCount"]);
            out.usage.output_tokens = number(&usage["candidatesTokenCount"]) + thoughts;
            out.usage.reasoning_tokens = thoughts;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Message, ToolCall};

    #[test]
    fn tool_results_are_keyed_by_function_name() {
        let mut assistant = Message::assistant("");
        assistant.tool_calls.push(ToolCall {
            id: "call_9".to_owned(),
            name: "grep".to_owned(),
            arguments: json!({"q": "x"}),
        });
        let body = body(&Request {
            model: "gemini-pro".to_owned(),
            system: Some("sys".to_owned()),
            messages: vec![
                Message::user("hi"),
                assistant,
                Message::tool_result("call_9", "found", false),
            ],
            reasoning_effort: Some(ReasoningEffort::High),
            ..Request::default()
        });
        assert_eq!(body["systemInstruction"]["parts"][0]["text"], "sys");
        assert_eq!(body["contents"][1]["role"], "model");
        assert_eq!(
            body["contents"][2]["parts"][0]["functionResponse"]["name"],
            "grep"
        );
        assert_eq!(
            body["contents"][2]["parts"][0]["functionResponse"]["response"]["result"],
            "found"
        );
        assert_eq!(
            body["generationConfig"]["thinkingConfig"]["thinkingBudget"],
            24_576
        );
    }
}
