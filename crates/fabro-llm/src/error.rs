//! LLM errors and their kinds (SPEC 10.3).

use std::time::Duration;

use crate::failure::FailureClass;

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

    /// The failure class of SPEC 9.1 / 10.3 this kind maps to: the one mapping the
    /// agent and the engine use.
    pub fn failure_class(self) -> FailureClass {
        match self {
            LlmErrorKind::RateLimit
            | LlmErrorKind::Server
            | LlmErrorKind::Timeout
            | LlmErrorKind::Network
            | LlmErrorKind::Stream => FailureClass::TransientInfra,
            LlmErrorKind::Quota | LlmErrorKind::ContextLength => FailureClass::BudgetExhausted,
            LlmErrorKind::Auth
            | LlmErrorKind::InvalidRequest
            | LlmErrorKind::NotFound
            | LlmErrorKind::ContentFilter
            | LlmErrorKind::Configuration => FailureClass::Deterministic,
            LlmErrorKind::Aborted => FailureClass::Canceled,
        }
    }

    /// The kind of an HTTP error status with its (lowercased) body (SPEC 10.3).
    pub fn from_status(status: u16, body: &str) -> LlmErrorKind {
        let body = body.to_ascii_lowercase();
        let quota = body.contains("quota") || body.contains("insufficient_quota");
        let context = mentions_context_length(&body);
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

    /// The kind of an error reported with a 200 answer (an error event inside a stream,
    /// or an error body), from its identifiers, most specific first (`code`, then `type`,
    /// then Gemini's `status`) and its message.
    ///
    /// An identifier that is an HTTP-like number (`"500"`, `429`) is classified like that
    /// status; a name (`rate_limit_exceeded`, `overloaded_error`, `server_error`,
    /// `insufficient_quota`, `context_length_exceeded`, `invalid_request_error`, Gemini's
    /// `RESOURCE_EXHAUSTED`, …) by its wording. The first identifier that is recognised
    /// decides. When none is, the message wording decides between quota and context
    /// length, and anything else is `Server`: the stream broke before completion, which
    /// SPEC 9.2 retries.
    pub fn from_error_codes(identifiers: &[&str], message: &str) -> LlmErrorKind {
        let message_lower = message.to_ascii_lowercase();
        let quota = message_lower.contains("quota");
        let context = mentions_context_length(&message_lower);
        for identifier in identifiers {
            let identifier = identifier.trim().to_ascii_lowercase();
            let kind = match identifier.parse::<u16>() {
                Ok(status @ 400..=599) => Some(LlmErrorKind::from_status(status, message)),
                Ok(_) => None,
                Err(_) => kind_of_error_name(&identifier),
            };
            match kind {
                Some(LlmErrorKind::RateLimit) if quota => return LlmErrorKind::Quota,
                Some(LlmErrorKind::InvalidRequest) if context => {
                    return LlmErrorKind::ContextLength
                }
                Some(kind) => return kind,
                None => {}
            }
        }
        if quota {
            LlmErrorKind::Quota
        } else if context {
            LlmErrorKind::ContextLength
        } else {
            LlmErrorKind::Server
        }
    }
}

/// Whether a lowercased error text speaks of the context window being exceeded.
fn mentions_context_length(text: &str) -> bool {
    [
        "context length",
        "context_length",
        "context window",
        "too many tokens",
        "prompt is too long",
        "maximum context",
    ]
    .iter()
    .any(|phrase| text.contains(phrase))
}

/// The kind named by a lowercased provider error type or code, if it is one we know.
fn kind_of_error_name(name: &str) -> Option<LlmErrorKind> {
    let has = |words: &[&str]| words.iter().any(|word| name.contains(word));
    let kind = if has(&["quota", "billing", "credit"]) {
        LlmErrorKind::Quota
    } else if has(&[
        "context_length",
        "context_window",
        "too_many_tokens",
        "request_too_large",
    ]) {
        LlmErrorKind::ContextLength
    } else if has(&[
        "rate_limit",
        "ratelimit",
        "too_many_requests",
        "resource_exhausted",
    ]) {
        LlmErrorKind::RateLimit
    } else if has(&["timeout", "timed_out", "deadline_exceeded"]) {
        LlmErrorKind::Timeout
    } else if has(&[
        "overloaded",
        "server_error",
        "servererror",
        "internal",
        "unavailable",
        "bad_gateway",
        "api_error",
    ]) {
        LlmErrorKind::Server
    } else if has(&["connection", "network"]) {
        LlmErrorKind::Network
    } else if has(&[
        "authentication",
        "unauthenticated",
        "unauthorized",
        "permission",
        "forbidden",
        "invalid_api_key",
    ]) {
        LlmErrorKind::Auth
    } else if has(&["content_filter", "content_policy", "safety"]) {
        LlmErrorKind::ContentFilter
    } else if has(&["not_found", "notfound"]) {
        LlmErrorKind::NotFound
    } else if has(&[
        "invalid_request",
        "invalid_argument",
        "bad_request",
        "badrequest",
        "failed_precondition",
        "unprocessable",
        "invalid_",
    ]) {
        LlmErrorKind::InvalidRequest
    } else {
        return None;
    };
    Some(kind)
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
    fn kinds_map_to_spec_classes() {
        assert_eq!(
            LlmErrorKind::RateLimit.failure_class(),
            FailureClass::TransientInfra
        );
        assert_eq!(
            LlmErrorKind::ContextLength.failure_class(),
            FailureClass::BudgetExhausted
        );
        assert_eq!(
            LlmErrorKind::Aborted.failure_class(),
            FailureClass::Canceled
        );
        assert_eq!(
            LlmErrorKind::Auth.failure_class(),
            FailureClass::Deterministic
        );
    }

    #[test]
    fn statuses_map_to_kinds_and_classes() {
        let check = |status, body: &str, kind: LlmErrorKind, class: &str| {
            let found = LlmErrorKind::from_status(status, body);
            assert_eq!(found, kind, "{status} {body}");
            assert_eq!(found.failure_class().as_str(), class, "{status}");
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
    }

    #[test]
    fn errors_in_answers_are_classified_by_code_then_type() {
        let check = |identifiers: &[&str], message: &str, kind: LlmErrorKind| {
            assert_eq!(
                LlmErrorKind::from_error_codes(identifiers, message),
                kind,
                "{identifiers:?} {message}"
            );
        };
        // Numbers are statuses, whatever the type says.
        check(
            &["500", "internal_server_error"],
            "boom",
            LlmErrorKind::Server,
        );
        check(&["429", ""], "slow down", LlmErrorKind::RateLimit);
        check(&["429"], "insufficient quota", LlmErrorKind::Quota);
        check(&["503", "UNAVAILABLE"], "", LlmErrorKind::Server);
        check(&["401"], "", LlmErrorKind::Auth);
        check(
            &["400"],
            "maximum context length",
            LlmErrorKind::ContextLength,
        );
        // Names, the code before the type.
        check(
            &["context_length_exceeded", "invalid_request_error"],
            "",
            LlmErrorKind::ContextLength,
        );
        check(&["rate_limit_exceeded"], "", LlmErrorKind::RateLimit);
        check(
            &["RESOURCE_EXHAUSTED"],
            "Quota exceeded",
            LlmErrorKind::Quota,
        );
        check(&["overloaded_error"], "", LlmErrorKind::Server);
        check(&["server_error"], "", LlmErrorKind::Server);
        check(&["api_error"], "", LlmErrorKind::Server);
        check(&["insufficient_quota"], "", LlmErrorKind::Quota);
        check(
            &["invalid_request_error"],
            "bad field",
            LlmErrorKind::InvalidRequest,
        );
        check(
            &["invalid_request_error"],
            "prompt is too long",
            LlmErrorKind::ContextLength,
        );
        check(&["authentication_error"], "", LlmErrorKind::Auth);
        check(&["not_found_error"], "", LlmErrorKind::NotFound);
        check(&["DEADLINE_EXCEEDED"], "", LlmErrorKind::Timeout);
        // Unknown identifiers fall through to the next, then to the default.
        check(&["error", "server_error"], "", LlmErrorKind::Server);
        check(&["1234", "something_new"], "broke", LlmErrorKind::Server);
        check(&[], "", LlmErrorKind::Server);
        check(&["something_new"], "over quota", LlmErrorKind::Quota);
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
