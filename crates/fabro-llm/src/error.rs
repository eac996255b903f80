//! LLM errors and their kinds (SPEC 10.3).

use std::time::Duration;

/// What went wrong with an LLM call; decides retries and the failure class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LlmErrorKind {
    /// 429 without quota wording.
    RateLimit,
    /// 500–599.
    Server,
    /// 408, connect or stream timeout.
    Timeout,
    /// Connection failure.
    Network,
    /// The stream broke before completion.
    Stream,
    /// Quota or credits exhausted.
    Quota,
    /// 401 / 403.
    Auth,
    /// 400 / 422.
    InvalidRequest,
    /// 404 (unknown model).
    NotFound,
    /// The request exceeds the context window.
    ContextLength,
    /// The provider's safety system stopped the response.
    ContentFilter,
    /// Missing key or base URL, bad settings.
    Configuration,
    /// Cancelled by fabro.
    Aborted,
}

impl LlmErrorKind {
    /// The kind as written in events and simulated scripts.
    pub fn as_str(self) -> &'static str {
        match self {
            LlmErrorKind::RateLimit => "rate_limit",
            LlmErrorKind::Server => "server",
            LlmErrorKind::Timeout => "timeout",
            LlmErrorKind::Network => "network",
            LlmErrorKind::Stream => "stream",
            LlmErrorKind::Quota => "quota",
            LlmErrorKind::Auth => "auth",
            LlmErrorKind::InvalidRequest => "invalid_request",
            LlmErrorKind::NotFound => "not_found",
            LlmErrorKind::ContextLength => "context_length",
            LlmErrorKind::ContentFilter => "content_filter",
            LlmErrorKind::Configuration => "configuration",
            LlmErrorKind::Aborted => "aborted",
        }
    }

    /// Parses a kind name.
    pub fn parse(text: &str) -> Option<LlmErrorKind> {
        [
            LlmErrorKind::RateLimit,
            LlmErrorKind::Server,
            LlmErrorKind::Timeout,
            LlmErrorKind::Network,
            LlmErrorKind::Stream,
            LlmErrorKind::Quota,
            LlmErrorKind::Auth,
            LlmErrorKind::InvalidRequest,
            LlmErrorKind::NotFound,
            LlmErrorKind::ContextLength,
            LlmErrorKind::ContentFilter,
            LlmErrorKind::Configuration,
            LlmErrorKind::Aborted,
        ]
        .into_iter()
        .find(|kind| kind.as_str() == text)
    }

    /// Whether the call is retried (SPEC 9.2).
    pub fn is_retryable(self) -> bool {
        match self {
            LlmErrorKind::RateLimit
            | LlmErrorKind::Server
            | LlmErrorKind::Timeout
            | LlmErrorKind::Network
            | LlmErrorKind::Stream => true,
            LlmErrorKind::Quota
            | LlmErrorKind::Auth
            | LlmErrorKind::InvalidRequest
            | LlmErrorKind::NotFound
            | LlmErrorKind::ContextLength
            | LlmErrorKind::ContentFilter
            | LlmErrorKind::Configuration
            | LlmErrorKind::Aborted => false,
        }
    }
}

/// A failed LLM call. Messages never contain credentials (SPEC 13.1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{provider} {kind}: {message}", kind = .kind.as_str())]
pub struct LlmError {
    /// What went wrong.
    pub kind: LlmErrorKind,
    /// Provider name.
    pub provider: String,
    /// Human-readable detail, already scrubbed.
    pub message: String,
    /// HTTP status, when there was one.
    pub status: Option<u16>,
    /// Server-requested delay before retrying.
    pub retry_after: Option<Duration>,
}
