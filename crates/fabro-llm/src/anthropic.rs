//! The Anthropic Messages API adapter (SPEC 10.1): `POST {base}/v1/messages` with
//! `stream: true`, `x-api-key` and `anthropic-version: 2023-06-01`.

use serde_json::{json, Map, Value};

use crate::client::{BoxFuture, LlmClient};
use crate::error::{LlmError, LlmErrorKind};
use crate::http::{answer_error, json as parse_json, HttpSettings, Transport, WireDecoder};
use crate::message::{ReasoningEffort, Request, Response, Role};
use crate::sse::SseEvent;
use crate::stream::{Assembler, StreamSink};

/// A client for the Anthropic Messages API.
pub struct AnthropicClient {
    transport: Transport,
}

impl AnthropicClient {
    /// A client for `settings` (base URL without `/v1`).
    pub fn new(settings: HttpSettings) -> Result<AnthropicClient, LlmError> {
        Ok(AnthropicClient {
            transport: Transport::new("anthropic", settings)?,
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
                "missing key (set ANTHROPIC_API_KEY)",
            )
        })?;
        let auth = [
            ("x-api-key", key.expose().to_owned()),
            ("anthropic-version", "2023-06-01".to_owned()),
        ];
        let mut out = Assembler::new("anthropic", &request.model, sink);
        let mut decoder = Decoder {
            transport: &self.transport,
            usage: RawUsage::default(),
            thinking: None,
        };
        self.transport
            .stream(
                &self.transport.url("/v1/messages"),
                &auth,
                &body(request),
                &mut decoder,
                &mut out,
            )
            .await?;
        out.into_response()
    }
}

impl LlmClient for AnthropicClient {
    fn complete_streaming<'a>(
        &'a self,
        request: &'a Request,
        sink: &'a mut StreamSink<'_>,
    ) -> BoxFuture<'a, Result<Response, LlmError>> {
        Box::pin(self.run(request, sink))
    }
}

/// The request body: system slot, merged same-role turns, `tool_result` blocks in user
/// turns, native tool shapes and extended thinking for reasoning models.
pub(crate) fn body(request: &Request) -> Value {
    let effort = request.effective_reasoning_effort();
    let thinking = effort.is_some();
    let mut system = request.system.clone().unwrap_or_default();
    let mut messages: Vec<(String, Vec<Value>)> = Vec::new();
    for message in &request.messages {
        let (role, blocks) = match message.role {
            Role::System => {
                if !system.is_empty() {
                    system.push_str("\n\n");
                }
                system.push_str(&message.text);
                continue;
            }
            Role::User => ("user", vec![json!({"type": "text", "text": message.text})]),
            Role::Assistant => {
                // Thinking blocks lead the turn, unchanged; the API requires them in a
                // tool-use continuation while thinking is enabled.
                let mut blocks = if thinking {
                    message.thinking.clone()
                } else {
                    Vec::new()
                };
                if !message.text.is_empty() {
                    blocks.push(json!({"type": "text", "text": message.text}));
                }
                for call in &message.tool_calls {
                    blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}));
                }
                ("assistant", blocks)
            }
            Role::Tool => (
                "user",
                vec![
                    json!({"type": "tool_result", "tool_use_id": message.tool_call_id,
                            "content": message.text, "is_error": message.is_error}),
                ],
            ),
        };
        match messages.last_mut() {
            Some((last, existing)) if last == role => existing.extend(blocks),
            _ => messages.push((role.to_owned(), blocks)),
        }
    }
    let cached = request.prompt_cache.is_some();
    if cached {
        mark_newest_turns(&mut messages);
    }
    let mut max_tokens = request.effective_max_tokens();
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("stream".into(), json!(true));
    if !system.is_empty() {
        if cached {
            body.insert(
                "system".into(),
                json!([{"type": "text", "text": system, "cache_control": ephemeral()}]),
            );
        } else {
            body.insert("system".into(), json!(system));
        }
    }
    body.insert(
        "messages".into(),
        Value::Array(
            messages
                .into_iter()
                .map(|(role, content)| json!({"role": role, "content": content}))
                .collect(),
        ),
    );
    if !request.tools.is_empty() {
        let mut tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| json!({"name": tool.name, "description": tool.description, "input_schema": tool.parameters}))
            .collect();
        if let (true, Some(Value::Object(last))) = (cached, tools.last_mut()) {
            last.insert("cache_control".into(), ephemeral());
        }
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(effort) = effort {
        let budget: u32 = match effort {
            ReasoningEffort::Low => 2_048,
            ReasoningEffort::Medium => 8_192,
            ReasoningEffort::High => 16_384,
        };
        // The thinking budget counts against max_tokens, which must exceed it.
        if max_tokens <= budget {
            max_tokens += budget;
        }
        body.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": budget}),
        );
    }
    body.insert("max_tokens".into(), json!(max_tokens));
    Value::Object(body)
}

/// The cache marker of a breakpoint (SPEC 10.8).
fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

/// SPEC 10.8: breakpoints on the last content block of the newest message and, once the
/// conversation has earlier turns, of the newest message of the previous request (two
/// messages back: the user turn before the last assistant turn), whose prefix the
/// previous request wrote to the cache. With the tools and the system prompt that makes
/// at most four, Anthropic's limit.
fn mark_newest_turns(messages: &mut [(String, Vec<Value>)]) {
    let count = messages.len();
    let marked = [Some(count.wrapping_sub(1)), count.checked_sub(3)];
    for index in marked.into_iter().flatten() {
        if let Some(Value::Object(block)) = messages
            .get_mut(index)
            .and_then(|(_, blocks)| blocks.last_mut())
        {
            // The API refuses markers on thinking blocks and on empty text.
            let markable = match block.get("type").and_then(Value::as_str) {
                Some("text") => block
                    .get("text")
                    .and_then(Value::as_str)
                    .is_some_and(|text| !text.is_empty()),
                Some("tool_result" | "tool_use") => true,
                _ => false,
            };
            if markable {
                block.insert("cache_control".into(), ephemeral());
            }
        }
    }
}

struct Decoder<'t> {
    transport: &'t Transport,
    usage: RawUsage,
    /// The thinking block being streamed: its index and the block so far.
    thinking: Option<(Value, Value)>,
}

/// Anthropic's usage counts as sent: `input_tokens` excludes the cache reads and
/// writes, which fabro counts as input.
#[derive(Debug, Default, Clone, Copy)]
struct RawUsage {
    input: u64,
    cache_read: u64,
    cache_write: u64,
    output: u64,
}

impl RawUsage {
    /// Takes every count present in `usage`, keeping the others. The counts of
    /// `message_delta` are cumulative, so they replace those of `message_start`.
    fn update(&mut self, usage: &Value) {
        let fields = [
            ("input_tokens", &mut self.input),
            ("cache_read_input_tokens", &mut self.cache_read),
            ("cache_creation_input_tokens", &mut self.cache_write),
            ("output_tokens", &mut self.output),
        ];
        for (name, count) in fields {
            if let Some(value) = usage[name].as_u64() {
                *count = value;
            }
        }
    }

    fn apply(self, out: &mut Assembler<'_, '_>) {
        out.usage.input_tokens = self.input + self.cache_read + self.cache_write;
        out.usage.cache_read_tokens = self.cache_read;
        out.usage.cache_write_tokens = self.cache_write;
        out.usage.output_tokens = self.output;
    }
}

impl WireDecoder for Decoder<'_> {
    fn event(&mut self, event: &SseEvent, out: &mut Assembler<'_, '_>) -> Result<(), LlmError> {
        let data = parse_json("anthropic", &event.data)?;
        let kind = data["type"].as_str().unwrap_or(event.event.as_str());
        match kind {
            "message_start" => {
                let message = &data["message"];
                out.set_model(message["model"].as_str().unwrap_or_default());
                self.usage.update(&message["usage"]);
                self.usage.apply(out);
            }
            "content_block_start" => {
                let block = &data["content_block"];
                if block["type"] == "thinking" {
                    self.thinking = Some((
                        data["index"].clone(),
                        json!({"type": "thinking",
                               "thinking": block["thinking"].as_str().unwrap_or_default(),
                               "signature": block["signature"].as_str().unwrap_or_default()}),
                    ));
                } else if block["type"] == "redacted_thinking" {
                    out.thinking_block(block.clone());
                } else if block["type"] == "tool_use" {
                    let slot = data["index"].to_string();
                    out.tool_start(
                        &slot,
                        block["id"].as_str().unwrap_or_default(),
                        block["name"].as_str().unwrap_or_default(),
                    );
                } else if let Some(text) = block["text"].as_str() {
                    out.text(text);
                }
            }
            "content_block_delta" => {
                let delta = &data["delta"];
                match delta["type"].as_str().unwrap_or_default() {
                    "text_delta" => out.text(delta["text"].as_str().unwrap_or_default()),
                    "input_json_delta" => out.tool_arguments(
                        &data["index"].to_string(),
                        delta["partial_json"].as_str().unwrap_or_default(),
                    ),
                    "thinking_delta" => {
                        let piece = delta["thinking"].as_str().unwrap_or_default();
                        if let Some((_, block)) = &mut self.thinking {
                            let text = format!(
                                "{}{piece}",
                                block["thinking"].as_str().unwrap_or_default()
                            );
                            block["thinking"] = json!(text);
                        }
                        out.reasoning(piece);
                    }
                    "signature_delta" => {
                        if let Some((_, block)) = &mut self.thinking {
                            let signature = format!(
                                "{}{}",
                                block["signature"].as_str().unwrap_or_default(),
                                delta["signature"].as_str().unwrap_or_default()
                            );
                            block["signature"] = json!(signature);
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                self.usage.update(&data["usage"]);
                self.usage.apply(out);
                if data["delta"]["stop_reason"] == "refusal" {
                    return Err(self.transport.error(
                        LlmErrorKind::ContentFilter,
                        "the model refused (stop_reason refusal)",
                    ));
                }
            }
            "content_block_stop"
                if self
                    .thinking
                    .as_ref()
                    .is_some_and(|(index, _)| *index == data["index"]) =>
            {
                if let Some((_, block)) = self.thinking.take() {
                    out.thinking_block(block);
                }
            }
            "message_stop" => out.finish(),
            "error" => return Err(answer_error(self.transport, &data["error"])),
            _ => {}
        }
        Ok(())
    }

    fn whole(&mut self, body: &Value, out: &mut Assembler<'_, '_>) -> Result<bool, LlmError> {
        let Some(content) = body["content"].as_array() else {
            return Ok(false);
        };
        if body["stop_reason"] == "refusal" {
            return Err(self.transport.error(
                LlmErrorKind::ContentFilter,
                "the model refused (stop_reason refusal)",
            ));
        }
        out.set_model(body["model"].as_str().unwrap_or_default());
        self.usage.update(&body["usage"]);
        self.usage.apply(out);
        for (index, block) in content.iter().enumerate() {
            match block["type"].as_str().unwrap_or_default() {
                "text" => out.text(block["text"].as_str().unwrap_or_default()),
                "thinking" => out.reasoning(block["thinking"].as_str().unwrap_or_default()),
                "tool_use" => {
                    let slot = index.to_string();
                    out.tool_start(
                        &slot,
                        block["id"].as_str().unwrap_or_default(),
                        block["name"].as_str().unwrap_or_default(),
                    );
                    let input = block
                        .get("input")
                        .map_or_else(|| "{}".to_owned(), Value::to_string);
                    out.tool_arguments(&slot, &input);
                }
                _ => {}
            }
        }
        out.finish();
        Ok(true)
    }
}

pub(crate) fn number(value: &Value) -> u64 {
    value.as_u64().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Message, ToolCall, ToolDefinition};

    #[test]
    fn bodies_use_the_native_shapes() {
        let mut assistant = Message::assistant("");
        assistant.tool_calls.push(ToolCall {
            id: "toolu_1".to_owned(),
            name: "read".to_owned(),
            arguments: json!({"p": 1}),
        });
        let request = Request {
            model: "claude-sonnet-4-6".to_owned(),
            system: Some("be brief".to_owned()),
            messages: vec![
                Message::user("hi"),
                assistant,
                Message::tool_result("toolu_1", "data", false),
                Message::user("more"),
            ],
            tools: vec![ToolDefinition {
                name: "read".to_owned(),
                description: "reads".to_owned(),
                parameters: json!({"type": "object"}),
            }],
            reasoning_effort: Some(ReasoningEffort::High),
            max_tokens: Some(1000),
            ..Request::default()
        };
        let body = body(&request);
        assert_eq!(body["system"], "be brief");
        assert_eq!(body["messages"].as_array().map(Vec::len), Some(3));
        assert_eq!(body["messages"][2]["content"][0]["type"], "tool_result");
        assert_eq!(body["messages"][2]["content"][1]["text"], "more");
        assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
        assert_eq!(body["thinking"]["budget_tokens"], 16_384);
        assert_eq!(body["max_tokens"], 17_384);
        let haiku = body_for("haiku");
        assert!(haiku.get("thinking").is_none());
    }

    /// Where `cache_control` markers are in a body, as JSON pointers.
    fn breakpoints(body: &Value) -> Vec<String> {
        fn walk(value: &Value, path: String, found: &mut Vec<String>) {
            match value {
                Value::Object(map) => {
                    if map.contains_key("cache_control") {
                        found.push(path.clone());
                    }
                    for (key, child) in map {
                        walk(child, format!("{path}/{key}"), found);
                    }
                }
                Value::Array(items) => {
                    for (index, child) in items.iter().enumerate() {
                        walk(child, format!("{path}/{index}"), found);
                    }
                }
                _ => {}
            }
        }
        let mut found = Vec::new();
        walk(body, String::new(), &mut found);
        found
    }

    /// SPEC 10.8: the last tool, the system prompt, the newest message and the previous
    /// request's newest message carry breakpoints, never more than four; none without
    /// `prompt_cache`.
    #[test]
    fn cached_requests_carry_at_most_four_breakpoints_in_prefix_order() {
        let call = |id: &str| {
            let mut assistant = Message::assistant("");
            assistant.tool_calls.push(ToolCall {
                id: id.to_owned(),
                name: "read".to_owned(),
                arguments: json!({}),
            });
            assistant
        };
        let tool = |name: &str| ToolDefinition {
            name: name.to_owned(),
            description: "d".to_owned(),
            parameters: json!({"type": "object"}),
        };
        let mut request = Request {
            model: "claude-sonnet-4-6".to_owned(),
            system: Some("be brief".to_owned()),
            messages: vec![Message::user("go")],
            tools: vec![tool("read"), tool("write")],
            prompt_cache: Some("run:node".to_owned()),
            ..Request::default()
        };
        let first = body(&request);
        assert_eq!(
            breakpoints(&first),
            ["/messages/0/content/0", "/system/0", "/tools/1"]
        );
        assert_eq!(first["system"][0]["text"], "be brief");
        for turn in 1..=30 {
            let id = format!("toolu_{turn}");
            request.messages.push(call(&id));
            request
                .messages
                .push(Message::tool_result(&id, "data", false));
            let marked = breakpoints(&body(&request));
            assert!(marked.len() <= 4, "{marked:?}");
            let newest = request.messages.len() - 1;
            let previous = newest - 2;
            assert_eq!(
                marked,
                [
                    format!("/messages/{previous}/content/0"),
                    format!("/messages/{newest}/content/0"),
                    "/system/0".to_owned(),
                    "/tools/1".to_owned(),
                ]
            );
        }
        request.prompt_cache = None;
        let plain = body(&request);
        assert!(breakpoints(&plain).is_empty());
        assert_eq!(plain["system"], "be brief");
    }

    proptest::proptest! {
        /// SPEC 10.8, issue 33 acceptance 2: whatever the conversation (after compaction,
        /// failover to another model, or a `full` thread resent across stages: any mix
        /// of roles, empty texts, tool calls and thinking), a cached request carries at
        /// most four breakpoints, never on a thinking block or an empty text.
        #[test]
        fn no_request_carries_more_than_four_breakpoints(
            turns in proptest::collection::vec((0_u8..4, 0_u8..3, proptest::bool::ANY), 0..40),
            tools in 0_usize..4,
            system in proptest::bool::ANY,
            thinking in proptest::bool::ANY,
        ) {
            let messages = turns
                .iter()
                .enumerate()
                .map(|(index, (role, text, call))| {
                    let text = ["", "x", "a longer text"][usize::from(*text)];
                    match role {
                        0 => Message::user(text),
                        1 => {
                            let mut assistant = Message::assistant(text);
                            assistant.thinking =
                                vec![json!({"type": "thinking", "thinking": "t", "signature": "s"})];
                            if *call {
                                assistant.tool_calls.push(ToolCall {
                                    id: format!("toolu_{index}"),
                                    name: "read".to_owned(),
                                    arguments: json!({}),
                                });
                            }
                            assistant
                        }
                        2 => Message::tool_result(format!("toolu_{index}"), text, *call),
                        _ => Message {
                            role: crate::message::Role::System,
                            ..Message::user(text)
                        },
                    }
                })
                .collect();
            let request = Request {
                model: "claude-sonnet-4-6".to_owned(),
                system: system.then(|| "be brief".to_owned()),
                messages,
                tools: (0..tools)
                    .map(|index| ToolDefinition {
                        name: format!("tool{index}"),
                        description: "d".to_owned(),
                        parameters: json!({"type": "object"}),
                    })
                    .collect(),
                reasoning_effort: thinking.then_some(ReasoningEffort::Low),
                prompt_cache: Some("run:node".to_owned()),
                ..Request::default()
            };
            let body = body(&request);
            let marked = breakpoints(&body);
            proptest::prop_assert!(marked.len() <= 4, "{marked:?}");
            for pointer in &marked {
                let block = body.pointer(pointer).expect("a marked block");
                proptest::prop_assert!(block["type"] != "thinking", "{block}");
                proptest::prop_assert!(block["type"] != "text" || block["text"] != "", "{block}");
            }
        }
    }

    #[test]
    fn thinking_blocks_lead_assistant_turns_only_while_thinking_is_on() {
        let signed = json!({"type": "thinking", "thinking": "plan", "signature": "sig"});
        let redacted = json!({"type": "redacted_thinking", "data": "opaque"});
        let mut assistant = Message::assistant("Reading.");
        assistant.thinking = vec![signed.clone(), redacted.clone()];
        assistant.tool_calls.push(ToolCall {
            id: "toolu_1".to_owned(),
            name: "read".to_owned(),
            arguments: json!({}),
        });
        let mut request = Request {
            model: "claude-sonnet-4-6".to_owned(),
            messages: vec![
                Message::user("go"),
                assistant,
                Message::tool_result("toolu_1", "data", false),
            ],
            reasoning_effort: Some(ReasoningEffort::Medium),
            ..Request::default()
        };
        let content = &body(&request)["messages"][1]["content"];
        assert_eq!(content[0], signed);
        assert_eq!(content[1], redacted);
        assert_eq!(content[2]["type"], "text");
        assert_eq!(content[3]["type"], "tool_use");
        request.reasoning_effort = None;
        let content = &body(&request)["messages"][1]["content"];
        assert_eq!(content[0]["type"], "text");
        assert_eq!(content.as_array().map(Vec::len), Some(2));
        // The other adapters never send Anthropic's blocks.
        request.reasoning_effort = Some(ReasoningEffort::Medium);
        request.model = "gpt-5.4".to_owned();
        assert!(!crate::openai::body(&request).to_string().contains("sig"));
        request.model = "gemini-3.1-pro-preview".to_owned();
        assert!(!crate::gemini::body(&request).to_string().contains("sig"));
    }

    fn body_for(model: &str) -> Value {
        body(&Request {
            model: model.to_owned(),
            reasoning_effort: Some(ReasoningEffort::Low),
            ..Request::default()
        })
    }
}
