//! The same suite for each provider, instantiated by `provider_suite!`.

use std::time::Duration;

use fabro_llm::{
    catalog, LlmClient, LlmErrorKind, Message, Provider, Request, StreamEvent, ToolDefinition,
};
use fabro_twin::{Reply, Turn, Twin};
use serde_json::json;

use super::{client, resilient, KEY};

pub(crate) fn request(model: &str) -> Request {
    Request {
        model: model.to_owned(),
        system: Some("You are terse.".to_owned()),
        messages: vec![Message::user("Say hello")],
        node_id: "plan".to_owned(),
        ..Request::default()
    }
}

fn secs(values: &[u64]) -> Vec<Duration> {
    values.iter().map(|&s| Duration::from_secs(s)).collect()
}

/// What the twin must have received from `provider`: path and auth header.
fn check_request_shape(provider: Provider, twin: &Twin, model: &str) {
    let recorded = twin.requests();
    let last = recorded.last().expect("a request");
    match provider {
        Provider::Anthropic => {
            assert_eq!(last.path, "/v1/messages");
            assert_eq!(last.header("x-api-key"), Some(KEY));
            assert_eq!(last.header("anthropic-version"), Some("2023-06-01"));
            assert_eq!(last.body["system"], "You are terse.");
        }
        Provider::OpenAi => {
            assert_eq!(last.path, "/v1/responses");
            assert_eq!(
                last.header("authorization"),
                Some(format!("Bearer {KEY}").as_str())
            );
            assert_eq!(last.body["instructions"], "You are terse.");
        }
        Provider::Gemini => {
            assert_eq!(
                last.path,
                format!("/v1beta/models/{model}:streamGenerateContent?alt=sse")
            );
            assert!(
                !last.path.contains(KEY),
                "the Gemini key stays out of the URL"
            );
            assert_eq!(last.header("x-goog-api-key"), Some(KEY));
            assert_eq!(
                last.body["systemInstruction"]["parts"][0]["text"],
                "You are terse."
            );
        }
        Provider::OpenAiCompatible => {
            assert_eq!(last.path, "/v1/chat/completions");
            assert_eq!(
                last.header("authorization"),
                Some(format!("Bearer {KEY}").as_str())
            );
            assert_eq!(last.body["messages"][0]["role"], "system");
        }
        Provider::Simulated => unreachable!("no HTTP"),
    }
    if provider != Provider::Gemini {
        assert_eq!(last.body["stream"], true);
        assert_eq!(last.body["model"], model);
    }
}

pub(crate) async fn plain_text(provider: Provider, model: &str) {
    let twin = Twin::start().await.expect("twin starts");
    twin.enqueue([Reply::text("Hello there, general.")]);
    let response = client(provider, &twin)
        .complete(&request(model))
        .await
        .expect("succeeds");
    assert_eq!(response.text, "Hello there, general.");
    assert!(response.tool_calls.is_empty());
    assert_eq!(response.usage.input_tokens, 10);
    assert_eq!(response.usage.output_tokens, 5);
    check_request_shape(provider, &twin, model);
}

pub(crate) async fn streamed_text(provider: Provider, model: &str) {
    let twin = Twin::start().await.expect("twin starts");
    let mut turn = Turn::text("The quick brown fox jumps over the lazy dog.");
    turn.chunk_size = 5;
    turn.chunk_delay = Duration::from_millis(2);
    twin.enqueue([Reply::Turn(turn)]);
    let mut deltas = Vec::new();
    let mut sink = |event: &StreamEvent| {
        if let StreamEvent::TextDelta(text) = event {
            deltas.push(text.clone());
        }
    };
    let response = client(provider, &twin)
        .complete_streaming(&request(model), &mut sink)
        .await
        .expect("succeeds");
    assert_eq!(deltas.len(), 9, "{deltas:?}");
    assert_eq!(deltas[0], "The q");
    assert_eq!(deltas.concat(), response.text);
    assert_eq!(
        response.text,
        "The quick brown fox jumps over the lazy dog."
    );
}

pub(crate) async fn tool_call_round_trip(provider: Provider, model: &str) {
    let twin = Twin::start().await.expect("twin starts");
    let mut turn = Turn::text("Let me look.").with_tool_call(
        "call_abc",
        "read_file",
        r#"{"path": "src/main.rs", "limit": 20}"#,
    );
    turn.chunk_size = 4;
    twin.enqueue([Reply::Turn(turn), Reply::text("The file is fine.")]);
    let client = client(provider, &twin);
    let mut request = request(model);
    request.tools = vec![ToolDefinition {
        name: "read_file".to_owned(),
        description: "Reads a file".to_owned(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    }];
    let mut argument_pieces = 0;
    let mut started = Vec::new();
    let mut sink = |event: &StreamEvent| match event {
        StreamEvent::ToolCallStarted { name, .. } => started.push(name.clone()),
        StreamEvent::ToolCallDelta { .. } => argument_pieces += 1,
        _ => {}
    };
    let response = client
        .complete_streaming(&request, &mut sink)
        .await
        .expect("succeeds");
    assert_eq!(started, ["read_file"]);
    if provider == Provider::Gemini {
        // Gemini sends whole calls; ids are synthetic.
        assert_eq!(argument_pieces, 1);
        assert!(response.tool_calls[0].id.starts_with("call_"));
    } else {
        assert!(
            argument_pieces > 5,
            "arguments arrive in pieces: {argument_pieces}"
        );
        assert_eq!(response.tool_calls[0].id, "call_abc");
    }
    assert_eq!(response.text, "Let me look.");
    assert_eq!(response.tool_calls.len(), 1);
    assert_eq!(response.tool_calls[0].name, "read_file");
    assert_eq!(
        response.tool_calls[0].arguments,
        json!({"path": "src/main.rs", "limit": 20})
    );
    let call_id = response.tool_calls[0].id.clone();
    let mut assistant = Message::assistant(response.text.clone());
    assistant.tool_calls = response.tool_calls.clone();
    request.messages.push(assistant);
    request
        .messages
        .push(Message::tool_result(&call_id, "fn main() {}", false));
    let second = client.complete(&request).await.expect("succeeds");
    assert_eq!(second.text, "The file is fine.");
    let body = &twin.requests()[1].body;
    match provider {
        Provider::Anthropic => {
            assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
            assert_eq!(body["messages"][1]["content"][1]["type"], "tool_use");
            assert_eq!(body["messages"][1]["content"][1]["input"]["limit"], 20);
            assert_eq!(body["messages"][2]["content"][0]["type"], "tool_result");
            assert_eq!(body["messages"][2]["content"][0]["tool_use_id"], "call_abc");
            assert_eq!(body["messages"][2]["content"][0]["content"], "fn main() {}");
        }
        Provider::OpenAi => {
            assert_eq!(body["tools"][0]["type"], "function");
            assert_eq!(body["input"][2]["type"], "function_call");
            assert_eq!(body["input"][3]["type"], "function_call_output");
            assert_eq!(body["input"][3]["call_id"], "call_abc");
            assert_eq!(body["input"][3]["output"], "fn main() {}");
        }
        Provider::Gemini => {
            assert_eq!(
                body["tools"][0]["functionDeclarations"][0]["name"],
                "read_file"
            );
            assert_eq!(
                body["contents"][1]["parts"][1]["functionCall"]["args"]["limit"],
                20
            );
            let result = &body["contents"][2]["parts"][0]["functionResponse"];
            assert_eq!(result["name"], "read_file");
            assert_eq!(result["response"]["result"], "fn main() {}");
        }
        Provider::OpenAiCompatible => {
            assert_eq!(body["tools"][0]["function"]["name"], "read_file");
            assert_eq!(body["messages"][2]["tool_calls"][0]["id"], "call_abc");
            assert_eq!(body["messages"][3]["role"], "tool");
            assert_eq!(body["messages"][3]["tool_call_id"], "call_abc");
        }
        Provider::Simulated => unreachable!("no HTTP"),
    }
}

pub(crate) async fn usage_and_cost(provider: Provider, model: &str) {
    let twin = Twin::start().await.expect("twin starts");
    let mut turn = Turn::text("ok");
    turn.input_tokens = 120_000;
    turn.cache_read_tokens = 20_000;
    turn.output_tokens = 3_000;
    turn.reasoning_tokens = 1_000;
    twin.enqueue([Reply::Turn(turn)]);
    let response = client(provider, &twin)
        .complete(&request(model))
        .await
        .expect("succeeds");
    let usage = response.usage;
    assert_eq!(usage.input_tokens, 120_000);
    assert_eq!(usage.cache_read_tokens, 20_000);
    assert_eq!(usage.output_tokens, 3_000);
    if provider != Provider::Anthropic {
        // Anthropic reports thinking inside output_tokens without a breakdown.
        assert_eq!(usage.reasoning_tokens, 1_000);
    }
    let info = catalog::find(model);
    match info {
        Some(info) => {
            let expected = (100_000.0 * info.input_price
                + 20_000.0 * info.cache_read_price
                + 3_000.0 * info.output_price)
                / 1_000_000.0;
            let cost = usage.cost_usd.expect("priced model");
            assert!((cost - expected).abs() < 1e-12, "{cost} vs {expected}");
            assert!(cost > 0.0);
        }
        None => assert_eq!(usage.cost_usd, None, "unpriced model"),
    }
}

/// Runs `replies` through the retrying client; returns the result, the number of
/// requests the twin saw and the delays slept.
async fn faulted(
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
        assert!(!format!("{error:?}").contains(KEY), "key leaked: {error:?}");
    }
    (result, twin.request_count(), sleeper.delays())
}

fn failed(
    result: &Result<fabro_llm::Response, fabro_llm::LlmError>,
    kind: LlmErrorKind,
    class: &str,
) {
    let error = result.as_ref().expect_err("fails");
    assert_eq!(error.kind, kind, "{error}");
    assert_eq!(error.kind.failure_class().as_str(), class);
}

pub(crate) async fn rate_limit_honours_retry_after(provider: Provider, model: &str) {
    let replies = vec![Reply::rate_limited(Some("7")); 4];
    let (result, requests, delays) = faulted(provider, model, replies).await;
    failed(&result, LlmErrorKind::RateLimit, "transient_infra");
    assert_eq!(result.as_ref().err().and_then(|e| e.status), Some(429));
    assert_eq!(requests, 4, "three retries");
    assert_eq!(
        delays,
        secs(&[7, 7, 7]),
        "Retry-After replaces backoff and jitter"
    );
}

pub(crate) async fn retry_after_over_sixty_seconds_fails_at_once(provider: Provider, model: &str) {
    let replies = vec![Reply::rate_limited(Some("61")), Reply::text("never")];
    let (result, requests, delays) = faulted(provider, model, replies).await;
    failed(&result, LlmErrorKind::RateLimit, "transient_infra");
    assert_eq!(requests, 1);
    assert!(delays.is_empty());
}

pub(crate) async fn server_errors_back_off_then_succeed(provider: Provider, model: &str) {
    let replies = vec![
        Reply::server_error(),
        Reply::server_error(),
        Reply::text("third time"),
    ];
    let (result, requests, delays) = faulted(provider, model, replies).await;
    assert_eq!(result.expect("recovers").text, "third time");
    assert_eq!(requests, 3);
    assert_eq!(delays, secs(&[1, 2]));
}

pub(crate) async fn overloaded_exhausts_three_retries(provider: Provider, model: &str) {
    let replies = vec![Reply::overloaded(); 5];
    let (result, requests, delays) = faulted(provider, model, replies).await;
    failed(&result, LlmErrorKind::Server, "transient_infra");
    assert_eq!(result.as_ref().err().and_then(|e| e.status), Some(529));
    assert_eq!(requests, 4);
    assert_eq!(delays, secs(&[1, 2, 4]));
}

pub(crate) async fn hang_times_out_and_retries(provider: Provider, model: &str) {
    let replies = vec![Reply::Hang, Reply::text("after the hang")];
    let (result, requests, delays) = faulted(provider, model, replies).await;
    assert_eq!(result.expect("recovers").text, "after the hang");
    assert_eq!(requests, 2);
    assert_eq!(delays, secs(&[1]));
    let replies = vec![Reply::Hang; 4];
    let (result, requests, _) = faulted(provider, model, replies).await;
    failed(&result, LlmErrorKind::Timeout, "transient_infra");
    assert_eq!(requests, 4);
}

pub(crate) async fn dropped_stream_is_resent(provider: Provider, model: &str) {
    let drop = Reply::DropMidStream {
        text_before: "partial answer".to_owned(),
    };
    let (result, requests, delays) = faulted(
        provider,
        model,
        vec![drop.clone(), Reply::text("whole answer")],
    )
    .await;
    assert_eq!(
        result.expect("recovers").text,
        "whole answer",
        "the whole request is re-sent"
    );
    assert_eq!((requests, delays), (2, secs(&[1])));
    let (result, requests, _) = faulted(provider, model, vec![drop; 4]).await;
    failed(&result, LlmErrorKind::Stream, "transient_infra");
    assert_eq!(requests, 4);
}

pub(crate) async fn malformed_json_and_sse_are_stream_errors(provider: Provider, model: &str) {
    for reply in [Reply::MalformedJson, Reply::MalformedSse] {
        let (result, requests, delays) = faulted(provider, model, vec![reply.clone(); 4]).await;
        failed(&result, LlmErrorKind::Stream, "transient_infra");
        let message = result.err().map(|e| e.message).unwrap_or_default();
        assert!(message.contains("malformed"), "{message}");
        assert_eq!((requests, delays), (4, secs(&[1, 2, 4])), "{reply:?}");
    }
}

pub(crate) async fn deterministic_errors_are_not_retried(provider: Provider, model: &str) {
    let cases = [
        (Reply::unauthorized(), LlmErrorKind::Auth, "deterministic"),
        (
            Reply::bad_request(),
            LlmErrorKind::InvalidRequest,
            "deterministic",
        ),
        (Reply::quota(), LlmErrorKind::Quota, "budget_exhausted"),
        (
            Reply::context_length(),
            LlmErrorKind::ContextLength,
            "budget_exhausted",
        ),
    ];
    for (reply, kind, class) in cases {
        let (result, requests, delays) =
            faulted(provider, model, vec![reply, Reply::text("no")]).await;
        failed(&result, kind, class);
        assert_eq!((requests, delays.len()), (1, 0), "{kind:?}");
    }
    // The 401 body echoed the key: the message shows it redacted.
    let (result, _, _) = faulted(provider, model, vec![Reply::unauthorized()]).await;
    let message = result.err().map(|e| e.message).unwrap_or_default();
    assert!(message.contains("[REDACTED]"), "{message}");
}

pub(crate) async fn content_filter_is_deterministic(provider: Provider, model: &str) {
    let mut turn = Turn::text("I cannot");
    turn.content_filter = true;
    let (result, requests, _) =
        faulted(provider, model, vec![Reply::Turn(turn), Reply::text("no")]).await;
    failed(&result, LlmErrorKind::ContentFilter, "deterministic");
    assert_eq!(requests, 1);
}

macro_rules! provider_suite {
    ($module:ident, $provider:expr, $model:literal) => {
        mod $module {
            use super::*;

            #[tokio::test]
            async fn plain_text() {
                super::plain_text($provider, $model).await;
            }
            #[tokio::test]
            async fn streamed_text() {
                super::streamed_text($provider, $model).await;
            }
            #[tokio::test]
            async fn tool_call_round_trip() {
                super::tool_call_round_trip($provider, $model).await;
            }
            #[tokio::test]
            async fn usage_and_cost() {
                super::usage_and_cost($provider, $model).await;
            }
            #[tokio::test]
            async fn rate_limit_honours_retry_after() {
                super::rate_limit_honours_retry_after($provider, $model).await;
            }
            #[tokio::test]
            async fn retry_after_over_sixty_seconds_fails_at_once() {
                super::retry_after_over_sixty_seconds_fails_at_once($provider, $model).await;
            }
            #[tokio::test]
            async fn server_errors_back_off_then_succeed() {
                super::server_errors_back_off_then_succeed($provider, $model).await;
            }
            #[tokio::test]
            async fn overloaded_exhausts_three_retries() {
                super::overloaded_exhausts_three_retries($provider, $model).await;
            }
            #[tokio::test]
            async fn hang_times_out_and_retries() {
                super::hang_times_out_and_retries($provider, $model).await;
            }
            #[tokio::test]
            async fn dropped_stream_is_resent() {
                super::dropped_stream_is_resent($provider, $model).await;
            }
            #[tokio::test]
            async fn malformed_json_and_sse_are_stream_errors() {
                super::malformed_json_and_sse_are_stream_errors($provider, $model).await;
            }
            #[tokio::test]
            async fn deterministic_errors_are_not_retried() {
                super::deterministic_errors_are_not_retried($provider, $model).await;
            }
            #[tokio::test]
            async fn content_filter_is_deterministic() {
                super::content_filter_is_deterministic($provider, $model).await;
            }
        }
    };
}

provider_suite!(anthropic, Provider::Anthropic, "claude-sonnet-4-6");
provider_suite!(openai, Provider::OpenAi, "gpt-5.4");
provider_suite!(gemini, Provider::Gemini, "gemini-3-flash-preview");
provider_suite!(openai_compatible, Provider::OpenAiCompatible, "llama3.1:8b");
