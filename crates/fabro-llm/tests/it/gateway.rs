//! Answers that gateways (LiteLLM's proxy and the like) give and that the providers'
//! own servers rarely do: an error event after some streamed chunks, usage counts in
//! Anthropic's `message_delta`, and a whole JSON message answering a streaming request.

use std::time::Duration;

use fabro_llm::{LlmClient, LlmErrorKind, Provider, StreamEvent};
use fabro_twin::{Reply, Turn, Twin};
use serde_json::{json, Value};

use super::provider::request;
use super::{client, resilient, KEY};

/// Runs `replies` through the retrying client: the result, the requests the twin saw and
/// the delays slept.
async fn through_retries(
    provider: Provider,
    model: &str,
    replies: Vec<Reply>,
) -> (
    Result<fabro_llm::Response, fabro_llm::LlmError>,
    usize,
    Vec<Duration>,
) {
    let twin = Twin::start().await.expect("twin starts");
    twin.enqueue(replies);
    let (client, sleeper) = resilient(provider, model, &twin);
    let result = client.complete(&request(model)).await;
    if let Err(error) = &result {
        assert!(!error.to_string().contains(KEY), "key leaked: {error}");
    }
    (result, twin.request_count(), sleeper.delays())
}

/// An error event after two chunks of text is classified by its code and type; unknown
/// errors are `server` (SPEC 9.2: a stream that breaks is re-sent; 10.3: 5xx is
/// `server`).
pub(crate) async fn error_event_mid_stream_is_classified(provider: Provider, model: &str) {
    let text = "two chunks of text";
    let cases: Vec<(&str, Value, &str, LlmErrorKind)> = vec![
        (
            "internal_server_error",
            json!("500"),
            "litellm.InternalServerError: upstream failed",
            LlmErrorKind::Server,
        ),
        (
            "server_error",
            Value::Null,
            "try again",
            LlmErrorKind::Server,
        ),
        (
            "overloaded_error",
            Value::Null,
            "Overloaded",
            LlmErrorKind::Server,
        ),
        (
            "rate_limit_exceeded",
            json!(429),
            "slow down",
            LlmErrorKind::RateLimit,
        ),
        ("UNAVAILABLE", json!(503), "busy", LlmErrorKind::Server),
        (
            "a_gateway_error_nobody_documented",
            Value::Null,
            "something broke",
            LlmErrorKind::Server,
        ),
        (
            "insufficient_quota",
            json!("insufficient_quota"),
            "You exceeded your current quota",
            LlmErrorKind::Quota,
        ),
        (
            "invalid_request_error",
            json!("context_length_exceeded"),
            "This model's maximum context length is 8192 tokens",
            LlmErrorKind::ContextLength,
        ),
        (
            "invalid_request_error",
            Value::Null,
            "messages: field required",
            LlmErrorKind::InvalidRequest,
        ),
        (
            "authentication_error",
            json!("401"),
            "bad key",
            LlmErrorKind::Auth,
        ),
    ];
    for (error_type, code, message, kind) in cases {
        let label = format!("{provider:?} {error_type} {code}");
        let fault = Reply::stream_error(text, error_type, code, message);
        let (result, requests, delays) =
            through_retries(provider, model, vec![fault, Reply::text("recovered")]).await;
        if kind.is_retryable() {
            let response = result.unwrap_or_else(|error| panic!("{label}: {error}"));
            assert_eq!(response.text, "recovered", "{label}");
            assert_eq!((requests, delays.len()), (2, 1), "{label}: retried once");
        } else {
            let error = result.expect_err("fails");
            assert_eq!(error.kind, kind, "{label}: {error}");
            assert!(error.message.contains(message), "{label}: {error}");
            assert_eq!(requests, 1, "{label}: not retried");
        }
    }
    // The LiteLLM case from issue 13, exhausted: class transient_infra, three retries.
    let fault = Reply::stream_error(
        text,
        "internal_server_error",
        json!("500"),
        "InternalServerError",
    );
    let (result, requests, delays) = through_retries(provider, model, vec![fault; 4]).await;
    let error = result.expect_err("fails");
    assert_eq!(error.kind, LlmErrorKind::Server, "{error}");
    assert_eq!(error.kind.failure_class().as_str(), "transient_infra");
    assert_eq!((requests, delays.len()), (4, 3));
}

/// A whole JSON message answering a streaming request is used: text, tool calls and
/// usage, delivered through the stream sink as if streamed.
pub(crate) async fn whole_json_answer_is_used(provider: Provider, model: &str) {
    let twin = Twin::start().await.expect("twin starts");
    let mut turn = Turn::text("Reading it now.").with_tool_call(
        "call_whole",
        "read_file",
        r#"{"path": "a.txt"}"#,
    );
    turn.input_tokens = 40;
    turn.output_tokens = 12;
    twin.enqueue([Reply::WholeJson(turn)]);
    let mut events = Vec::new();
    let mut sink = |event: &StreamEvent| events.push(event.clone());
    let response = client(provider, &twin)
        .complete_streaming(&request(model), &mut sink)
        .await
        .expect("the JSON answer is used");
    assert_eq!(
        twin.requests()[0].body["stream"] == true,
        provider != Provider::Gemini
    );
    assert_eq!(response.text, "Reading it now.");
    assert_eq!(response.tool_calls.len(), 1);
    assert_eq!(response.tool_calls[0].name, "read_file");
    assert_eq!(response.tool_calls[0].arguments, json!({"path": "a.txt"}));
    if provider != Provider::Gemini {
        assert_eq!(response.tool_calls[0].id, "call_whole");
    }
    assert_eq!(response.usage.input_tokens, 40);
    assert_eq!(response.usage.output_tokens, 12);
    assert_eq!(
        events.first(),
        Some(&StreamEvent::TextDelta("Reading it now.".to_owned()))
    );
    assert!(
        events
            .iter()
            .any(|event| matches!(event, StreamEvent::ToolCallStarted { name, .. } if name == "read_file")),
        "{events:?}"
    );
}

/// A JSON answer that is not the provider's response fails at once, naming the content
/// type; one that carries an error is classified like an error event.
pub(crate) async fn unusable_json_answer_fails_naming_the_content_type(
    provider: Provider,
    model: &str,
) {
    let content_type = "application/json; charset=utf-8";
    for body in [
        "<html>Bad gateway</html>",
        r#"{"unexpected": true}"#,
        "[1, 2]",
    ] {
        let (result, requests, delays) = through_retries(
            provider,
            model,
            vec![Reply::raw(content_type, body), Reply::text("no")],
        )
        .await;
        let error = result.expect_err("fails");
        assert!(
            error.message.contains("application/json"),
            "{body}: {error}"
        );
        assert!(!error.kind.is_retryable(), "{body}: {error}");
        assert_eq!(
            error.kind.failure_class().as_str(),
            "deterministic",
            "{body}"
        );
        assert_eq!((requests, delays.len()), (1, 0), "{body}: not retried");
    }
    let overloaded = r#"{"error": {"type": "overloaded_error", "code": "503", "message": "busy"}}"#;
    let (result, requests, _) = through_retries(
        provider,
        model,
        vec![
            Reply::raw("application/json", overloaded),
            Reply::text("later"),
        ],
    )
    .await;
    assert_eq!(result.expect("retried").text, "later");
    assert_eq!(requests, 2);
}

macro_rules! gateway_suite {
    ($module:ident, $provider:expr, $model:literal) => {
        mod $module {
            #[tokio::test]
            async fn error_event_mid_stream_is_classified() {
                super::error_event_mid_stream_is_classified($provider, $model).await;
            }
            #[tokio::test]
            async fn whole_json_answer_is_used() {
                super::whole_json_answer_is_used($provider, $model).await;
            }
            #[tokio::test]
            async fn unusable_json_answer_fails_naming_the_content_type() {
                super::unusable_json_answer_fails_naming_the_content_type($provider, $model).await;
            }
        }
    };
}

gateway_suite!(anthropic, super::Provider::Anthropic, "claude-sonnet-4-6");
gateway_suite!(openai, super::Provider::OpenAi, "gpt-5.4");
gateway_suite!(gemini, super::Provider::Gemini, "gemini-3-flash-preview");
gateway_suite!(
    openai_compatible,
    super::Provider::OpenAiCompatible,
    "llama3.1:8b"
);

/// Anthropic's `message_delta` usage is cumulative: its counts replace `message_start`'s.
#[tokio::test]
async fn anthropic_usage_in_message_delta_replaces_message_start() {
    let twin = Twin::start().await.expect("twin starts");
    let mut turn = Turn::text("ok");
    turn.input_tokens = 11;
    turn.cache_read_tokens = 4;
    turn.output_tokens = 7;
    turn.usage_in_message_delta = true;
    twin.enqueue([Reply::Turn(turn)]);
    let model = "claude-sonnet-4-6";
    let response = client(Provider::Anthropic, &twin)
        .complete(&request(model))
        .await
        .expect("succeeds");
    assert_eq!(response.usage.input_tokens, 11, "{:?}", response.usage);
    assert_eq!(response.usage.cache_read_tokens, 4);
    assert_eq!(response.usage.output_tokens, 7);
    let info = fabro_llm::catalog::find(model).expect("in the catalog");
    let expected = (7.0 * info.input_price + 4.0 * info.cache_read_price + 7.0 * info.output_price)
        / 1_000_000.0;
    let cost = response.usage.cost_usd.expect("priced");
    assert!((cost - expected).abs() < 1e-12, "{cost} vs {expected}");
}

/// Counts absent from `message_delta` keep `message_start`'s, cache counts included.
#[tokio::test]
async fn anthropic_counts_missing_from_message_delta_keep_message_start() {
    let twin = Twin::start().await.expect("twin starts");
    let events = [
        json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-6", "content": [],
            "usage": {"input_tokens": 20, "cache_read_input_tokens": 5, "cache_creation_input_tokens": 3, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 9, "cache_creation_input_tokens": 4}}),
        json!({"type": "message_stop"}),
    ];
    let body: String = events
        .iter()
        .map(|event| {
            format!(
                "event: {}\ndata: {event}\n\n",
                event["type"].as_str().unwrap_or_default()
            )
        })
        .collect();
    twin.enqueue([Reply::raw("text/event-stream", &body)]);
    let response = client(Provider::Anthropic, &twin)
        .complete(&request("claude-sonnet-4-6"))
        .await
        .expect("succeeds");
    let usage = response.usage;
    // message_delta wins for what it carries; message_start fills the rest.
    assert_eq!(usage.output_tokens, 9);
    assert_eq!(usage.cache_write_tokens, 4);
    assert_eq!(usage.cache_read_tokens, 5);
    assert_eq!(usage.input_tokens, 20 + 5 + 4);
}

/// Gemini's `streamGenerateContent` without `alt=sse` answers with a JSON array of
/// chunks; a gateway forwarding that is understood too.
#[tokio::test]
async fn gemini_json_array_of_chunks_is_used() {
    let twin = Twin::start().await.expect("twin starts");
    let body = json!([
        {"candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}, "index": 0}]},
        {"candidates": [{"content": {"role": "model", "parts": [{"text": "lo"}]}, "finishReason": "STOP", "index": 0}],
         "usageMetadata": {"promptTokenCount": 8, "candidatesTokenCount": 2, "totalTokenCount": 10},
         "modelVersion": "gemini-3-flash-preview"}
    ]);
    twin.enqueue([Reply::raw("application/json", &body.to_string())]);
    let mut deltas = Vec::new();
    let mut sink = |event: &StreamEvent| {
        if let StreamEvent::TextDelta(text) = event {
            deltas.push(text.clone());
        }
    };
    let response = client(Provider::Gemini, &twin)
        .complete_streaming(&request("gemini-3-flash-preview"), &mut sink)
        .await
        .expect("succeeds");
    assert_eq!(response.text, "Hello");
    assert_eq!(deltas, ["Hel", "lo"]);
    assert_eq!(response.usage.input_tokens, 8);
    assert_eq!(response.usage.output_tokens, 2);
}
