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

    /// Whether a call failing with this kind moves on to the next provider of its
    /// `[llm.fallbacks]` chain (SPEC 9.4): the retryable kinds and quota.
    pub fn allows_failover(self) -> bool {
        self.is_retryable() || self == LlmErrorKind::Quota
    }

    /// The failure class of SPEC 9.1 / 10.3 this kind maps to.
    pub fn failure_class(self) -> &'static str {
        match self {
            LlmErrorKind::RateLimit
            | LlmErrorKind::Server
            | LlmErrorKind::Timeout
            | LlmErrorKind::Network
            | LlmErrorKind::Stream => "transient_infra",
            LlmErrorKind::Quota | LlmErrorKind::ContextLength => "budget_exhausted",
            LlmErrorKind::Auth
            | LlmErrorKind::InvalidRequest
            | LlmErrorKind::NotFound
            | LlmErrorKind::ContentFilter
            | LlmErrorKind::Configuration => "deterministic",
            LlmErrorKind::Aborted => "canceled",
        }
    }

    /// The kind of an HTTP error status with its (lowercased) body (SPEC 10.3).
    pub fn from_status(status: u16, body: &str) -> LlmErrorKind {
        let body = body.to_ascii_lowercase();
        let quota = body.contains("quota") || body.contains("insufficient_quota");
        let context = [
            "context length",
            "context_length",
            "context window",
            "too many tokens",
            "prompt is too long",
            "maximum context",
        ]
        .iter()
        .any(|phrase| body.contains(phrase));
        match status {
            429 | 403 if quota => LlmErrorKind::Quota,
            429 => LlmErrorKind::RateLimit,
            401 | 403 => LlmErrorKind::Auth,
            408 => LlmErrorKind::Timeout,
            413 => LlmErrorKind::ContextLength,
            404 => LlmErrorKind::NotFound,
            400 | 422 if context => LlmErrorKind::ContextLength,
            500..=599 => LlmErrorKind::Server,
            _ => LlmErrorKind::InvalidRequest,
        }
    }

    /// The kind of an error reported inside a 200 stream by its provider type or code
    /// (`overloaded_error`, `rate_limit_exceeded`, `insufficient_quota`, …).
    pub fn from_error_type(error_type: &str, message: &str) -> LlmErrorKind {
        let error_type = error_type.to_ascii_lowercase();
        let message_lower = message.to_ascii_lowercase();
        if error_type.contains("quota") || message_lower.contains("quota") {
            LlmErrorKind::Quota
        } else if error_type.contains("context_length") || message_lower.contains("context length")
        {
            LlmErrorKind::ContextLength
        } else if error_type.contains("rate_limit") || error_type == "resource_exhausted" {
            LlmErrorKind::RateLimit
        } else if error_type.contains("overloaded")
            || error_type.contains("server_error")
            || error_type == "api_error"
            || error_type == "internal"
            || error_type == "unavailable"
        {
            LlmErrorKind::Server
        } else if error_type.contains("authentication") || error_type.contains("permission") {
            LlmErrorKind::Auth
        } else if error_type.contains("content_filter") || error_type.contains("safety") {
            LlmErrorKind::ContentFilter
        } else if error_type.contains("not_found") {
            LlmErrorKind::NotFound
        } else {
            LlmErrorKind::InvalidRequest
        }
    }
}

impl LlmError {
    /// An error without HTTP status or Retry-After.
    pub fn new(kind: LlmErrorKind, provider: &str, message: impl Into<String>) -> LlmError {
        LlmError {
            kind,
            provider: provider.to_owned(),
            message: message.into(),
            status: None,
            retry_after: None,
        }
    }
}

/// A `Retry-After` value, in seconds or as an HTTP date relative to `now` (SPEC 9.2).
pub fn parse_retry_after(value: &str, now: std::time::SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_kinds_and_classes() {
        let check = |status, body: &str, kind: LlmErrorKind, class: &str| {
            let found = LlmErrorKind::from_status(status, body);
            assert_eq!(found, kind, "{status} {body}");
            assert_eq!(found.failure_class(), class, "{status}");
        };
        check(429, "slow down", LlmErrorKind::RateLimit, "transient_infra");
        check(
            429,
            "{\"code\":\"insufficient_quota\"}",
            LlmErrorKind::Quota,
            "budget_exhausted",
        );
        check(
            403,
            "Quota exceeded",
            LlmErrorKind::Quota,
            "budget_exhausted",
        );
        check(403, "forbidden", LlmErrorKind::Auth, "deterministic");
        check(401, "", LlmErrorKind::Auth, "deterministic");
        check(
            400,
            "bad field",
            LlmErrorKind::InvalidRequest,
            "deterministic",
        );
        check(
            400,
            "prompt is too long: context length",
            LlmErrorKind::ContextLength,
            "budget_exhausted",
        );
        check(413, "", LlmErrorKind::ContextLength, "budget_exhausted");
        check(404, "", LlmErrorKind::NotFound, "deterministic");
        check(408, "", LlmErrorKind::Timeout, "transient_infra");
        check(500, "", LlmErrorKind::Server, "transient_infra");
        check(529, "overloaded", LlmErrorKind::Server, "transient_infra");
        assert!(LlmErrorKind::Quota.allows_failover() && !LlmErrorKind::Quota.is_retryable());
        assert!(!LlmErrorKind::Auth.allows_failover());
        assert!(!LlmErrorKind::ContextLength.allows_failover());
        assert_eq!(
            LlmErrorKind::from_error_type("overloaded_error", ""),
            LlmErrorKind::Server
        );
        assert_eq!(
            LlmErrorKind::from_error_type("insufficient_quota", ""),
            LlmErrorKind::Quota
        );
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let now = httpdate::parse_http_date("Sun, 22 Nov 2026 03:00:00 GMT").expect("date");
        assert_eq!(parse_retry_after("7", now), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after("Sun, 22 Nov 2026 03:00:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Sun, 22 Nov 2026 02:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
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
