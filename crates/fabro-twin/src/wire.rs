//! The four wire formats: which paths select them, and how a [`Turn`] and an error are
//! written in each, streamed (SSE events) or whole (one JSON body).

use serde_json::{json, Value};

use crate::Turn;

/// A wire format, chosen by the request path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `POST /v1/messages`.
    Anthropic,
    /// `POST …/responses`.
    OpenAiResponses,
    /// `POST /v1beta/models/{model}:generateContent`.
    Gemini,
    /// `POST /v1beta/models/{model}:streamGenerateContent`.
    GeminiStream,
    /// `POST …/chat/completions`.
    ChatCompletions,
}

impl Format {
    /// The format served at `path`.
    pub fn of_path(path: &str) -> Option<Format> {
        if path.ends_with("/v1/messages") {
            Some(Format::Anthropic)
        } else if path.ends_with("/responses") {
            Some(Format::OpenAiResponses)
        } else if path.ends_with("/chat/completions") {
            Some(Format::ChatCompletions)
        } else if path.contains("/models/") && path.ends_with(":streamGenerateContent") {
            Some(Format::GeminiStream)
        } else if path.contains("/models/") && path.ends_with(":generateContent") {
            Some(Format::Gemini)
        } else {
            None
        }
    }
}

/// One SSE event.
pub(crate) struct Event {
    name: Option<&'static str>,
    data: String,
}

impl Event {
    pub(crate) fn new(name: Option<&'static str>, data: impl Into<String>) -> Event {
        Event {
            name,
            data: data.into(),
        }
    }

    fn json(name: Option<&'static str>, value: &Value) -> Event {
        Event::new(name, value.to_string())
    }

    pub(crate) fn encode(&self) -> String {
        match self.name {
            Some(name) => format!("event: {name}\ndata: {}\n\n", self.data),
            None => format!("data: {}\n\n", self.data),
        }
    }
}

/// The event name a format opens its stream with (for malformed-JSON faults).
pub(crate) fn first_event_name(format: Format) -> Option<&'static str> {
    match format {
        Format::Anthropic => Some("message_start"),
        Format::OpenAiResponses => Some("response.created"),
        Format::Gemini | Format::GeminiStream | Format::ChatCompletions => None,
    }
}

fn chunks(text: &str, size: usize) -> Vec<String> {
    let size = size.max(1);
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(size)
        .map(|chunk| chunk.iter().collect())
        .collect()
}

fn model_of(format: Format, request: &Value, path_model: &str) -> String {
    match format {
        Format::Gemini | Format::GeminiStream => path_model.to_owned(),
        _ => request["model"].as_str().unwrap_or("twin-model").to_owned(),
    }
}

fn arguments(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// The SSE events of `turn` in `format`.
pub(crate) fn stream_events(
    format: Format,
    request: &Value,
    path_model: &str,
    turn: &Turn,
) -> Vec<Event> {
    let model = model_of(format, request, path_model);
    match format {
        Format::Anthropic => anthropic_events(turn, &model),
        Format::OpenAiResponses => responses_events(turn, &model),
        Format::Gemini | Format::GeminiStream => gemini_events(turn, &model),
        Format::ChatCompletions => chat_events(turn, &model),
    }
}

/// Anthropic's `input_tokens`: the prompt tokens neither read from nor written to the
/// cache.
fn anthropic_uncached(turn: &Turn) -> u64 {
    turn.input_tokens
        .saturating_sub(turn.cache_read_tokens)
        .saturating_sub(turn.cache_write_tokens)
}

/// A Messages stream: `message_start`, one content block per thinking, text and tool
/// call, then `message_delta` with the stop reason and usage and `message_stop`.
fn anthropic_events(turn: &Turn, model: &str) -> Vec<Event> {
    let name = |name: &'static str| Some(name);
    let mut events = Vec::new();
    let usage = json!({"input_tokens": anthropic_uncached(turn),
                       "cache_read_input_tokens": turn.cache_read_tokens,
                       "cache_creation_input_tokens": turn.cache_write_tokens});
    let start_usage = if turn.usage_in_message_delta {
        json!({"input_tokens": 0, "output_tokens": 1})
    } else {
        let mut start = usage.clone();
        start["output_tokens"] = json!(1);
        start
    };
    let mut delta_usage = if turn.usage_in_message_delta {
        usage
    } else {
        json!({})
    };
    delta_usage["output_tokens"] = json!(turn.output_tokens);
    events.push(Event::json(
        name("message_start"),
        &json!({"type": "message_start", "message": {
        "id": "msg_twin", "type": "message", "role": "assistant", "model": model, "content": [],
        "usage": start_usage}}),
    ));
    events.push(Event::json(name("ping"), &json!({"type": "ping"})));
    let mut index = 0;
    if let Some((thinking, signature)) = &turn.thinking {
        let mut deltas: Vec<Value> = chunks(thinking, turn.chunk_size)
            .into_iter()
            .map(|piece| json!({"type": "thinking_delta", "thinking": piece}))
            .collect();
        deltas.push(json!({"type": "signature_delta", "signature": signature}));
        let block = json!({"type": "thinking", "thinking": ""});
        anthropic_block(&mut events, index, block, deltas);
        index += 1;
    }
    if !turn.text.is_empty() {
        let deltas = chunks(&turn.text, turn.chunk_size)
            .into_iter()
            .map(|piece| json!({"type": "text_delta", "text": piece}))
            .collect();
        anthropic_block(
            &mut events,
            index,
            json!({"type": "text", "text": ""}),
            deltas,
        );
        index += 1;
    }
    for (id, tool, args) in &turn.tool_calls {
        let deltas = chunks(args, turn.chunk_size)
            .into_iter()
            .map(|piece| json!({"type": "input_json_delta", "partial_json": piece}))
            .collect();
        let block = json!({"type": "tool_use", "id": id, "name": tool, "input": {}});
        anthropic_block(&mut events, index, block, deltas);
        index += 1;
    }
    let stop = if turn.content_filter {
        "refusal"
    } else if turn.tool_calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    events.push(Event::json(
        name("message_delta"),
        &json!({"type": "message_delta",
        "delta": {"stop_reason": stop}, "usage": delta_usage}),
    ));
    events.push(Event::json(
        name("message_stop"),
        &json!({"type": "message_stop"}),
    ));
    events
}

/// One Messages content block at `index`: its start, its deltas and its stop.
fn anthropic_block(
    events: &mut Vec<Event>,
    index: usize,
    content_block: Value,
    deltas: Vec<Value>,
) {
    events.push(Event::json(
        Some("content_block_start"),
        &json!({"type": "content_block_start", "index": index,
        "content_block": content_block}),
    ));
    for delta in deltas {
        events.push(Event::json(
            Some("content_block_delta"),
            &json!({"type": "content_block_delta", "index": index,
            "delta": delta}),
        ));
    }
    events.push(Event::json(
        Some("content_block_stop"),
        &json!({"type": "content_block_stop", "index": index}),
    ));
}

/// A Responses stream: `response.created`, one output item per message and function
/// call with their deltas and its `response.output_item.done` (from which codex takes
/// its items), then `response.completed` (or `response.incomplete`).
fn responses_events(turn: &Turn, model: &str) -> Vec<Event> {
    let mut events = Vec::new();
    let push = |events: &mut Vec<Event>, kind: &'static str, mut value: Value| {
        value["type"] = json!(kind);
        events.push(Event::json(Some(kind), &value));
    };
    push(
        &mut events,
        "response.created",
        json!({"response": {"id": "resp_twin", "status": "in_progress", "model": model}}),
    );
    let mut output_index = 0;
    if !turn.text.is_empty() {
        push(
            &mut events,
            "response.output_item.added",
            json!({"output_index": output_index,
            "item": {"type": "message", "id": "msg_twin", "role": "assistant", "content": []}}),
        );
        for piece in chunks(&turn.text, turn.chunk_size) {
            push(
                &mut events,
                "response.output_text.delta",
                json!({"item_id": "msg_twin",
                "output_index": output_index, "content_index": 0, "delta": piece}),
            );
        }
        push(
            &mut events,
            "response.output_text.done",
            json!({"item_id": "msg_twin", "output_index": output_index,
            "content_index": 0, "text": turn.text}),
        );
        push(
            &mut events,
            "response.output_item.done",
            json!({"output_index": output_index,
            "item": {"type": "message", "id": "msg_twin", "role": "assistant", "status": "completed",
                     "content": [{"type": "output_text", "text": turn.text, "annotations": []}]}}),
        );
        output_index += 1;
    }
    for (number, (id, tool, args)) in turn.tool_calls.iter().enumerate() {
        let item_id = format!("fc_twin_{number}");
        push(
            &mut events,
            "response.output_item.added",
            json!({"output_index": output_index,
            "item": {"type": "function_call", "id": item_id, "call_id": id, "name": tool, "arguments": ""}}),
        );
        for piece in chunks(args, turn.chunk_size) {
            push(
                &mut events,
                "response.function_call_arguments.delta",
                json!({"item_id": item_id,
                "output_index": output_index, "delta": piece}),
            );
        }
        push(
            &mut events,
            "response.function_call_arguments.done",
            json!({"item_id": item_id,
            "output_index": output_index, "arguments": args}),
        );
        push(
            &mut events,
            "response.output_item.done",
            json!({"output_index": output_index,
            "item": {"type": "function_call", "id": item_id, "call_id": id, "name": tool,
                     "arguments": args, "status": "completed"}}),
        );
        output_index += 1;
    }
    // `total_tokens` as the API sends it (codex refuses a completion without it).
    let usage = json!({"input_tokens": turn.input_tokens, "input_tokens_details": {"cached_tokens": turn.cache_read_tokens},
                       "output_tokens": turn.output_tokens, "output_tokens_details": {"reasoning_tokens": turn.reasoning_tokens},
                       "total_tokens": turn.input_tokens + turn.output_tokens});
    if turn.content_filter {
        push(
            &mut events,
            "response.incomplete",
            json!({"response": {"id": "resp_twin", "status": "incomplete", "model": model,
            "incomplete_details": {"reason": "content_filter"}, "usage": usage}}),
        );
    } else {
        push(
            &mut events,
            "response.completed",
            json!({"response": {"id": "resp_twin", "status": "completed",
            "model": model, "usage": usage}}),
        );
    }
    events
}

/// A `streamGenerateContent` stream: one chunk per piece of text, one with every function
/// call, then the final chunk with the finish reason and usage.
fn gemini_events(turn: &Turn, model: &str) -> Vec<Event> {
    let mut events = Vec::new();
    for piece in chunks(&turn.text, turn.chunk_size) {
        events.push(Event::json(
            None,
            &json!({"candidates": [{"content": {"role": "model", "parts": [{"text": piece}]},
            "index": 0}], "modelVersion": model}),
        ));
    }
    if !turn.tool_calls.is_empty() {
        let parts: Vec<Value> = turn
            .tool_calls
            .iter()
            .map(|(_, tool, args)| json!({"functionCall": {"name": tool, "args": arguments(args)}}))
            .collect();
        events.push(Event::json(
            None,
            &json!({"candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}],
            "modelVersion": model}),
        ));
    }
    events.push(Event::json(None, &gemini_final(turn, model, Vec::new())));
    events
}

/// A Chat Completions stream: chunks of text and tool-call deltas, the finish reason,
/// a usage chunk and `[DONE]`.
fn chat_events(turn: &Turn, model: &str) -> Vec<Event> {
    let mut events = Vec::new();
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-twin", "object": "chat.completion.chunk", "model": model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    events.push(Event::json(
        None,
        &chunk(json!({"role": "assistant", "content": ""}), Value::Null),
    ));
    for piece in chunks(&turn.text, turn.chunk_size) {
        events.push(Event::json(
            None,
            &chunk(json!({"content": piece}), Value::Null),
        ));
    }
    for (index, (id, tool, args)) in turn.tool_calls.iter().enumerate() {
        events.push(Event::json(
            None,
            &chunk(
                json!({"tool_calls": [{"index": index, "id": id, "type": "function",
            "function": {"name": tool, "arguments": ""}}]}),
                Value::Null,
            ),
        ));
        for piece in chunks(args, turn.chunk_size) {
            events.push(Event::json(
                None,
                &chunk(
                    json!({"tool_calls": [{"index": index,
                "function": {"arguments": piece}}]}),
                    Value::Null,
                ),
            ));
        }
    }
    let finish = if turn.content_filter {
        "content_filter"
    } else if turn.tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    events.push(Event::json(None, &chunk(json!({}), json!(finish))));
    events.push(Event::json(
        None,
        &json!({"id": "chatcmpl-twin", "object": "chat.completion.chunk", "model": model,
        "choices": [], "usage": chat_usage(turn)}),
    ));
    events.push(Event::new(None, "[DONE]"));
    events
}

/// How many events end a text-only stream of `format` (its completion): the events to
/// drop to keep the text and never the completion.
pub(crate) fn completion_events(format: Format) -> usize {
    match format {
        // message_delta, message_stop.
        Format::Anthropic => 2,
        // response.output_item.done of the message, response.completed.
        Format::OpenAiResponses => 2,
        // The chunk with the finish reason and usage.
        Format::Gemini | Format::GeminiStream => 1,
        // The finish chunk, the usage chunk, `[DONE]`.
        Format::ChatCompletions => 3,
    }
}

/// An error reported inside a 200 stream, in `format`'s shape.
pub(crate) fn stream_error_event(
    format: Format,
    error_type: &str,
    code: &Value,
    message: &str,
) -> Event {
    match format {
        Format::Anthropic => Event::json(
            Some("error"),
            &json!({"type": "error", "error": {"type": error_type, "message": message}}),
        ),
        Format::OpenAiResponses => {
            let code = if code.is_null() {
                json!(error_type)
            } else {
                code.clone()
            };
            Event::json(
                Some("response.failed"),
                &json!({"type": "response.failed", "response": {"id": "resp_twin", "status": "failed",
                        "error": {"code": code, "message": message}}}),
            )
        }
        Format::Gemini | Format::GeminiStream => Event::json(
            None,
            &json!({"error": {"code": code, "message": message, "status": error_type}}),
        ),
        Format::ChatCompletions => Event::json(
            None,
            &json!({"error": {"message": message, "type": error_type, "code": code}}),
        ),
    }
}

fn gemini_final(turn: &Turn, model: &str, parts: Vec<Value>) -> Value {
    let finish = if turn.content_filter {
        "SAFETY"
    } else {
        "STOP"
    };
    json!({"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}],
           "usageMetadata": {"promptTokenCount": turn.input_tokens, "cachedContentTokenCount": turn.cache_read_tokens,
                             "candidatesTokenCount": turn.output_tokens - turn.reasoning_tokens.min(turn.output_tokens),
                             "thoughtsTokenCount": turn.reasoning_tokens,
                             "totalTokenCount": turn.input_tokens + turn.output_tokens},
           "modelVersion": model})
}

fn chat_usage(turn: &Turn) -> Value {
    let mut usage = json!({"prompt_tokens": turn.input_tokens, "completion_tokens": turn.output_tokens,
           "total_tokens": turn.input_tokens + turn.output_tokens,
           "prompt_tokens_details": {"cached_tokens": turn.cache_read_tokens},
           "completion_tokens_details": {"reasoning_tokens": turn.reasoning_tokens}});
    if let Some(cost) = turn.cost {
        usage["cost"] = json!(cost);
    }
    usage
}

/// `turn` as one JSON body (non-streaming requests).
pub(crate) fn whole(format: Format, request: &Value, path_model: &str, turn: &Turn) -> Value {
    let model = model_of(format, request, path_model);
    match format {
        Format::Anthropic => {
            let mut content = Vec::new();
            if let Some((thinking, signature)) = &turn.thinking {
                content.push(
                    json!({"type": "thinking", "thinking": thinking, "signature": signature}),
                );
            }
            if !turn.text.is_empty() {
                content.push(json!({"type": "text", "text": turn.text}));
            }
            for (id, tool, args) in &turn.tool_calls {
                content.push(
                    json!({"type": "tool_use", "id": id, "name": tool, "input": arguments(args)}),
                );
            }
            let stop = if turn.tool_calls.is_empty() {
                "end_turn"
            } else {
                "tool_use"
            };
            json!({"id": "msg_twin", "type": "message", "role": "assistant", "model": model, "content": content,
                   "stop_reason": stop, "usage": {"input_tokens": anthropic_uncached(turn),
                   "cache_read_input_tokens": turn.cache_read_tokens,
                   "cache_creation_input_tokens": turn.cache_write_tokens, "output_tokens": turn.output_tokens}})
        }
        Format::OpenAiResponses => {
            let mut output = Vec::new();
            if !turn.text.is_empty() {
                output.push(
                    json!({"type": "message", "id": "msg_twin", "role": "assistant",
                                   "content": [{"type": "output_text", "text": turn.text}]}),
                );
            }
            for (id, tool, args) in &turn.tool_calls {
                output.push(json!({"type": "function_call", "call_id": id, "name": tool, "arguments": args}));
            }
            json!({"id": "resp_twin", "object": "response", "status": "completed", "model": model, "output": output,
                   "usage": {"input_tokens": turn.input_tokens, "input_tokens_details": {"cached_tokens": turn.cache_read_tokens},
                             "output_tokens": turn.output_tokens, "output_tokens_details": {"reasoning_tokens": turn.reasoning_tokens},
                             "total_tokens": turn.input_tokens + turn.output_tokens}})
        }
        Format::Gemini | Format::GeminiStream => {
            let mut parts = Vec::new();
            if !turn.text.is_empty() {
                parts.push(json!({"text": turn.text}));
            }
            for (_, tool, args) in &turn.tool_calls {
                parts.push(json!({"functionCall": {"name": tool, "args": arguments(args)}}));
            }
            gemini_final(turn, &model, parts)
        }
        Format::ChatCompletions => {
            let calls: Vec<Value> = turn
                .tool_calls
                .iter()
                .map(|(id, tool, args)| json!({"id": id, "type": "function", "function": {"name": tool, "arguments": args}}))
                .collect();
            let mut message = json!({"role": "assistant", "content": turn.text});
            if !calls.is_empty() {
                message["tool_calls"] = Value::Array(calls);
            }
            let finish = if turn.tool_calls.is_empty() {
                "stop"
            } else {
                "tool_calls"
            };
            json!({"id": "chatcmpl-twin", "object": "chat.completion", "model": model,
                   "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": chat_usage(turn)})
        }
    }
}

/// Why the Anthropic API would reject `request` for its extended-thinking use, if it
/// would: a budget below 1,024 or not below `max_tokens`, or a last assistant turn with
/// tool calls that does not start with a signed thinking (or redacted thinking) block.
pub(crate) fn anthropic_thinking_error(request: &Value) -> Option<String> {
    let thinking = &request["thinking"];
    if thinking["type"] != "enabled" {
        return None;
    }
    let budget = thinking["budget_tokens"].as_u64().unwrap_or(0);
    let max_tokens = request["max_tokens"].as_u64().unwrap_or(0);
    if budget < 1_024 {
        return Some(
            "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
                .to_owned(),
        );
    }
    if max_tokens <= budget {
        return Some("`max_tokens` must be greater than `thinking.budget_tokens`".to_owned());
    }
    let messages = request["messages"].as_array()?;
    let last = messages
        .iter()
        .rev()
        .find(|message| message["role"] == "assistant")?;
    let content = last["content"].as_array()?;
    let calls_tools = content.iter().any(|block| block["type"] == "tool_use");
    let first = content.first();
    let starts_with_thinking = first.is_some_and(|block| {
        (block["type"] == "thinking" && block["signature"].is_string())
            || block["type"] == "redacted_thinking"
    });
    (calls_tools && !starts_with_thinking).then(|| {
        "Expected `thinking` or `redacted_thinking`, but found `tool_use`. When `thinking` is enabled, a final `assistant` message must start with a thinking block.".to_owned()
    })
}

/// An error body shaped like the provider's.
pub(crate) fn error_body(format: Format, status: u16, error_type: &str, message: &str) -> Value {
    match format {
        Format::Anthropic => {
            json!({"type": "error", "error": {"type": error_type, "message": message}})
        }
        Format::OpenAiResponses | Format::ChatCompletions => {
            json!({"error": {"message": message, "type": error_type, "code": error_type}})
        }
        Format::Gemini | Format::GeminiStream => {
            json!({"error": {"code": status, "message": message, "status": error_type}})
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_select_formats() {
        assert_eq!(Format::of_path("/v1/messages"), Some(Format::Anthropic));
        assert_eq!(
            Format::of_path("/v1/responses"),
            Some(Format::OpenAiResponses)
        );
        assert_eq!(
            Format::of_path("/api/v1/chat/completions"),
            Some(Format::ChatCompletions)
        );
        assert_eq!(
            Format::of_path("/v1beta/models/gemini-3-flash-preview:streamGenerateContent"),
            Some(Format::GeminiStream)
        );
        assert_eq!(
            Format::of_path("/v1beta/models/m:generateContent"),
            Some(Format::Gemini)
        );
        assert_eq!(Format::of_path("/other"), None);
    }

    #[test]
    fn completion_events_are_the_tail_after_the_text() {
        let turn = Turn::text("abcdefghij");
        let request = json!({"model": "m"});
        for (format, last_kept, first_dropped) in [
            (Format::Anthropic, "content_block_stop", "message_delta"),
            (
                Format::OpenAiResponses,
                "response.output_text.done",
                "response.output_item.done",
            ),
            (Format::GeminiStream, "\"text\":\"ij\"", "finishReason"),
            (
                Format::ChatCompletions,
                "\"content\":\"ij\"",
                "finish_reason\":\"stop",
            ),
        ] {
            let events = stream_events(format, &request, "m", &turn);
            let kept = events.len() - completion_events(format);
            assert!(events[kept - 1].encode().contains(last_kept), "{format:?}");
            assert!(events[kept].encode().contains(first_dropped), "{format:?}");
        }
        let error = stream_error_event(Format::ChatCompletions, "server_error", &json!("500"), "m");
        assert_eq!(error.name, None);
        let data: Value = serde_json::from_str(&error.data).unwrap_or_default();
        assert_eq!(
            data,
            json!({"error": {"code": "500", "message": "m", "type": "server_error"}})
        );
    }

    #[test]
    fn text_is_cut_into_chunks_of_characters() {
        assert_eq!(chunks("héllo", 2), ["hé", "ll", "o"]);
        let turn = Turn::text("abcdefghij");
        let events = stream_events(Format::ChatCompletions, &json!({"model": "m"}), "", &turn);
        // role chunk, two text chunks, finish, usage, [DONE].
        assert_eq!(events.len(), 6);
        assert_eq!(events[5].encode(), "data: [DONE]\n\n");
    }

    #[test]
    fn anthropic_thinking_rules_are_checked_like_the_api() {
        let tool_turn = |first: Value| {
            json!({"max_tokens": 64_000, "thinking": {"type": "enabled", "budget_tokens": 16_384},
                   "messages": [{"role": "user", "content": [{"type": "text", "text": "go"}]},
                                {"role": "assistant", "content": [first,
                                    {"type": "tool_use", "id": "t", "name": "x", "input": {}}]},
                                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}]})
        };
        let signed = json!({"type": "thinking", "thinking": "hm", "signature": "s"});
        assert_eq!(anthropic_thinking_error(&tool_turn(signed)), None);
        let unsigned = json!({"type": "thinking", "thinking": "hm"});
        assert!(anthropic_thinking_error(&tool_turn(unsigned))
            .is_some_and(|message| message.contains("must start with a thinking block")));
        let text = json!({"type": "text", "text": "hi"});
        assert!(anthropic_thinking_error(&tool_turn(text.clone())).is_some());
        let mut without_thinking = tool_turn(text);
        without_thinking
            .as_object_mut()
            .map(|body| body.remove("thinking"));
        assert_eq!(anthropic_thinking_error(&without_thinking), None);
        let budget = |max_tokens: u64, budget: u64| {
            anthropic_thinking_error(&json!({"max_tokens": max_tokens, "messages": [],
                "thinking": {"type": "enabled", "budget_tokens": budget}}))
        };
        assert_eq!(budget(4_097, 4_096), None);
        assert!(budget(4_096, 4_096).is_some_and(|message| message.contains("max_tokens")));
        assert!(budget(8_000, 512).is_some_and(|message| message.contains("1024")));
    }
}
