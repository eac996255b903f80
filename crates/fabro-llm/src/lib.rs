//! The LLM layer of fabro: the models fabro knows and the providers that serve them.
//!
//! Everything that talks to a model goes through [`LlmClient`], one object-safe trait
//! with one request/response model ([`Request`], [`Response`], [`Usage`]), one stream
//! event type ([`StreamEvent`], delivered through [`LlmClient::complete_streaming`]) and
//! one error type whose [`LlmErrorKind`] drives retries, failover and failure classes.
//!
//! The providers of SPEC 10.1 are thin clients of our own over `reqwest`:
//! [`AnthropicClient`] (Messages API), [`OpenAiClient`] (Responses API), [`GeminiClient`]
//! (`streamGenerateContent`) and [`ChatCompletionsClient`] (any OpenAI-compatible
//! server). All of them stream SSE and assemble text, tool calls and usage (a gateway's
//! whole JSON answer to a streaming request is decoded as if streamed); cost comes
//! from the [`catalog`]. [`Resilient`] wraps a chain of [`Route`]s with the retries of
//! SPEC 9.2 and the failover of SPEC 9.4. The [`simulated`] provider (SPEC 10.1.5) is
//! the deterministic offline provider. Keys live in [`ApiKey`], which never prints.
//!
//! This crate depends on no other fabro crate and is the only one that talks to
//! providers. It does not read the environment: the engine passes keys and endpoints in
//! [`HttpSettings`].

mod anthropic;
pub mod catalog;
mod chat;
mod client;
mod error;
mod failure;
mod gemini;
mod http;
mod message;
mod openai;
pub mod provider;
pub mod redact;
mod resilient;
mod secret;
pub mod simulated;
pub mod sse;
mod stream;

pub use anthropic::AnthropicClient;
pub use catalog::{ModelInfo, CATALOG};
pub use chat::ChatCompletionsClient;
pub use client::{BoxFuture, LlmClient};
pub use error::{parse_retry_after, LlmError, LlmErrorKind};
pub use failure::{classify_message, FailureClass};
pub use gemini::GeminiClient;
pub use http::HttpSettings;
pub use message::{
    Message, ReasoningEffort, Request, Response, Role, ToolCall, ToolDefinition, Usage,
};
pub use openai::OpenAiClient;
pub use provider::Provider;
pub use redact::{Redactor, SecretStore, StreamRedactor};
pub use resilient::{
    CallObserver, FailoverNotice, FixedJitter, IgnoreCalls, Jitter, RandomJitter, RecordingSleeper,
    Resilient, RetryNotice, RetryPolicy, Route, Sleeper, TokioSleeper,
};
pub use secret::{redact_url, scrub, ApiKey, REDACTED};
pub use stream::{replay_response, StreamEvent, StreamSink};

/// A client for `provider` with `settings`; `None` for the simulated provider, which
/// needs no HTTP.
pub fn http_client(
    provider: Provider,
    settings: HttpSettings,
) -> Option<Result<std::sync::Arc<dyn LlmClient>, LlmError>> {
    fn shared<C: LlmClient + 'static>(
        client: Result<C, LlmError>,
    ) -> Result<std::sync::Arc<dyn LlmClient>, LlmError> {
        client.map(|client| std::sync::Arc::new(client) as std::sync::Arc<dyn LlmClient>)
    }
    Some(match provider {
        Provider::Anthropic => shared(AnthropicClient::new(settings)),
        Provider::OpenAi => shared(OpenAiClient::new(settings)),
        Provider::Gemini => shared(GeminiClient::new(settings)),
        Provider::OpenAiCompatible => shared(ChatCompletionsClient::new(settings)),
        Provider::Simulated => return None,
    })
}
