//! The HTTP transport shared by the provider adapters: one `reqwest` client per
//! endpoint, the POST of a JSON body, status classification (SPEC 10.3), and the SSE
//! read loop with the idle timeout of SPEC 10.1.3.
//!
//! Errors never contain the key: URLs are shown through [`redact_url`], reqwest errors
//! are printed without their URL, and provider bodies are scrubbed of the key and cut.

use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};

use crate::error::{parse_retry_after, LlmError, LlmErrorKind};
use crate::secret::{redact_url, scrub, ApiKey};
use crate::sse::{SseDecoder, SseEvent};
use crate::stream::Assembler;

/// Where and how to reach one provider. `Debug` shows header names only, since gateways
/// carry credentials in extra headers.
#[derive(Clone)]
pub struct HttpSettings {
    /// Base URL, e.g. `https://api.anthropic.com` (SPEC 10.1 says which include `/v1`).
    pub base_url: String,
    /// The key, if the provider needs one.
    pub api_key: Option<ApiKey>,
    /// Extra headers sent with every request (OpenAI-compatible gateways).
    pub headers: Vec<(String, String)>,
    /// Connect timeout (SPEC: 10 s).
    pub connect_timeout: Duration,
    /// Longest wait for the response head or the next bytes of a stream (SPEC: 120 s).
    pub idle_timeout: Duration,
}

impl std::fmt::Debug for HttpSettings {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("HttpSettings")
            .field("base_url", &redact_url(&self.base_url))
            .field("api_key", &self.api_key)
            .field(
                "headers",
                &self
                    .headers
                    .iter()
                    .map(|(name, _)| name)
                    .collect::<Vec<_>>(),
            )
            .field("connect_timeout", &self.connect_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .finish()
    }
}

impl HttpSettings {
    /// Settings with the SPEC timeouts and no key or extra headers.
    pub fn new(base_url: impl Into<String>) -> HttpSettings {
        HttpSettings {
            base_url: base_url.into(),
            api_key: None,
            headers: Vec::new(),
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
        }
    }

    /// The same settings with `key`.
    pub fn with_key(mut self, key: ApiKey) -> HttpSettings {
        self.api_key = Some(key);
        self
    }
}

/// Decodes one provider's stream events into an [`Assembler`].
pub(crate) trait WireDecoder: Send {
    /// Handles one SSE event.
    fn event(&mut self, event: &SseEvent, out: &mut Assembler<'_, '_>) -> Result<(), LlmError>;

    /// Called when the body ends (Gemini has no explicit completion event).
    fn end(&mut self, _out: &mut Assembler<'_, '_>) {}

    /// Decodes a whole JSON answer to the streaming request, in the provider's
    /// non-streaming response shape, into `out` as if it had streamed, and finishes it.
    /// `Ok(false)` when `body` does not have that shape.
    fn whole(
        &mut self,
        body: &serde_json::Value,
        out: &mut Assembler<'_, '_>,
    ) -> Result<bool, LlmError>;
}

/// A provider endpoint over HTTP.
pub(crate) struct Transport {
    client: reqwest::Client,
    settings: HttpSettings,
    provider: &'static str,
}

const ERROR_BODY_LIMIT: usize = 500;

impl Transport {
    pub(crate) fn new(
        provider: &'static str,
        settings: HttpSettings,
    ) -> Result<Transport, LlmError> {
        let client = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout)
            .build()
            .map_err(|error| {
                LlmError::new(
                    LlmErrorKind::Configuration,
                    provider,
                    format!("cannot build the HTTP client: {}", chain(&error)),
                )
            })?;
        Ok(Transport {
            client,
            settings,
            provider,
        })
    }

    pub(crate) fn key(&self) -> Option<&ApiKey> {
        self.settings.api_key.as_ref()
    }

    /// `base_url` joined with `path`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.settings.base_url.trim_end_matches('/'))
    }

    /// POSTs `body` to `url` with `auth` headers, and feeds the SSE reply to `decoder`.
    pub(crate) async fn stream(
        &self,
        url: &str,
        auth: &[(&'static str, String)],
        body: &serde_json::Value,
        decoder: &mut (dyn WireDecoder + Send),
        out: &mut Assembler<'_, '_>,
    ) -> Result<(), LlmError> {
        let headers = self.headers(auth)?;
        let bytes = serde_json::to_vec(body).map_err(|error| {
            self.error(
                LlmErrorKind::InvalidRequest,
                format!("cannot encode request: {error}"),
            )
        })?;
        let idle = self.settings.idle_timeout;
        let send = self.client.post(url).headers(headers).body(bytes).send();
        let mut response = match tokio::time::timeout(idle, send).await {
            Err(_) => {
                return Err(self.error(
                    LlmErrorKind::Timeout,
                    format!(
                        "no response from {} within {} s",
                        redact_url(url),
                        idle.as_secs_f64()
                    ),
                ))
            }
            Ok(Err(error)) => {
                let kind = if error.is_timeout() {
                    LlmErrorKind::Timeout
                } else {
                    LlmErrorKind::Network
                };
                return Err(self.error(
                    kind,
                    format!("cannot reach {}: {}", redact_url(url), chain(&error)),
                ));
            }
            Ok(Ok(response)) => response,
        };
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            let retry_after = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| parse_retry_after(value, SystemTime::now()));
            let text = match tokio::time::timeout(idle, response.text()).await {
                Ok(Ok(text)) => text,
                Ok(Err(_)) | Err(_) => String::new(),
            };
            let kind = LlmErrorKind::from_status(status, &text);
            let mut error = self.error(
                kind,
                format!(
                    "HTTP {status}: {}",
                    scrub(text.trim(), self.key(), ERROR_BODY_LIMIT)
                ),
            );
            error.status = Some(status);
            error.retry_after = retry_after;
            return Err(error);
        }
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        if is_json(&content_type) {
            // Some gateways answer a streaming request with the whole message.
            return self.whole(response, &content_type, decoder, out).await;
        }
        let mut sse = SseDecoder::default();
        loop {
            let chunk = match tokio::time::timeout(idle, response.chunk()).await {
                Err(_) => {
                    return Err(self.error(
                        LlmErrorKind::Timeout,
                        format!("no bytes for {} s on an open stream", idle.as_secs_f64()),
                    ))
                }
                Ok(Err(error)) => {
                    return Err(self.error(
                        LlmErrorKind::Stream,
                        format!("stream interrupted: {}", chain(&error)),
                    ))
                }
                Ok(Ok(None)) => break,
                Ok(Ok(Some(chunk))) => chunk,
            };
            let events = sse.feed(&chunk).map_err(|_| {
                self.error(LlmErrorKind::Stream, "malformed SSE: a line is not UTF-8")
            })?;
            for event in &events {
                decoder.event(event, out)?;
                if out.is_finished() {
                    return Ok(());
                }
            }
        }
        decoder.end(out);
        Ok(())
    }

    /// Reads a JSON answer to a streaming request and decodes it whole. A body that is
    /// not JSON or not the provider's response shape fails at once (`configuration`:
    /// the endpoint does not answer as this provider does, and sending the request
    /// again would not change that), naming the content type; an error object in it
    /// is classified like an error event.
    async fn whole(
        &self,
        response: reqwest::Response,
        content_type: &str,
        decoder: &mut (dyn WireDecoder + Send),
        out: &mut Assembler<'_, '_>,
    ) -> Result<(), LlmError> {
        let idle = self.settings.idle_timeout;
        let bytes = match tokio::time::timeout(idle, response.bytes()).await {
            Err(_) => {
                return Err(self.error(
                    LlmErrorKind::Timeout,
                    format!(
                        "no complete {content_type} body within {} s",
                        idle.as_secs_f64()
                    ),
                ))
            }
            Ok(Err(error)) => {
                return Err(self.error(
                    LlmErrorKind::Stream,
                    format!("{content_type} body interrupted: {}", chain(&error)),
                ))
            }
            Ok(Ok(bytes)) => bytes,
        };
        let text = String::from_utf8_lossy(&bytes);
        let unusable = |reason: String| {
            self.error(
                LlmErrorKind::Configuration,
                format!(
                    "the streaming request was answered with content type '{content_type}' \
                     and {reason}: {}",
                    scrub(text.trim(), self.key(), ERROR_BODY_LIMIT)
                ),
            )
        };
        let body: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|error| unusable(format!("a body that is not JSON ({error})")))?;
        if let Some(error) = body.get("error").filter(|error| error.is_object()) {
            return Err(answer_error(self, error));
        }
        if decoder.whole(&body, out)? {
            Ok(())
        } else {
            Err(unusable(format!(
                "a body that is not a {} response",
                self.provider
            )))
        }
    }

    fn headers(&self, auth: &[(&'static str, String)]) -> Result<HeaderMap, LlmError> {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        headers.insert("accept", HeaderValue::from_static("text/event-stream"));
        for (name, value) in &self.settings.headers {
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                self.error(
                    LlmErrorKind::Configuration,
                    format!("invalid header name '{name}'"),
                )
            })?;
            let value = HeaderValue::from_str(value).map_err(|_| {
                self.error(
                    LlmErrorKind::Configuration,
                    format!("invalid value for header '{name}'"),
                )
            })?;
            headers.insert(name, value);
        }
        for (name, value) in auth {
            let mut value = HeaderValue::from_str(value).map_err(|_| {
                self.error(
                    LlmErrorKind::Configuration,
                    format!("the {} key is not a valid header value", self.provider),
                )
            })?;
            value.set_sensitive(true);
            headers.insert(*name, value);
        }
        Ok(headers)
    }

    pub(crate) fn error(&self, kind: LlmErrorKind, message: impl Into<String>) -> LlmError {
        let message: String = message.into();
        LlmError::new(kind, self.provider, scrub(&message, self.key(), 2_000))
    }
}

/// Whether a `Content-Type` value is JSON (`application/json`, `…+json`), parameters
/// such as `charset` aside.
fn is_json(content_type: &str) -> bool {
    let media = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    media == "application/json" || (media.starts_with("application/") && media.ends_with("+json"))
}

/// Parses the JSON of one stream event; invalid JSON is a stream error (the whole request
/// is re-sent, SPEC 9.2).
pub(crate) fn json(provider: &str, data: &str) -> Result<serde_json::Value, LlmError> {
    serde_json::from_str(data).map_err(|error| {
        LlmError::new(
            LlmErrorKind::Stream,
            provider,
            format!("malformed JSON in stream: {error}"),
        )
    })
}

/// An error reported with a 200 answer (an error event in a stream, or an error body):
/// `error` is the provider's error object. Every provider classifies it the same way,
/// by its `code`, `type` and `status` ([`LlmErrorKind::from_error_codes`]).
pub(crate) fn answer_error(transport: &Transport, error: &serde_json::Value) -> LlmError {
    let identifier = |field: &str| match &error[field] {
        serde_json::Value::String(text) => text.trim().to_owned(),
        serde_json::Value::Number(number) => number.to_string(),
        _ => String::new(),
    };
    let identifiers: Vec<String> = ["code", "type", "status"]
        .into_iter()
        .map(identifier)
        .filter(|value| !value.is_empty())
        .collect();
    let message = match &error["message"] {
        serde_json::Value::String(text) => text.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    };
    let names: Vec<&str> = identifiers.iter().map(String::as_str).collect();
    let kind = LlmErrorKind::from_error_codes(&names, &message);
    let label = if names.is_empty() {
        "error".to_owned()
    } else {
        names.join("/")
    };
    transport.error(
        kind,
        format!(
            "{label}: {}",
            scrub(&message, transport.key(), ERROR_BODY_LIMIT)
        ),
    )
}

/// A reqwest error and its causes, without the URL.
fn chain(error: &reqwest::Error) -> String {
    let mut text = String::new();
    let mut source: Option<&dyn std::error::Error> = Some(error);
    let mut first = true;
    while let Some(current) = source {
        let part = if first {
            reqwest_without_url(error)
        } else {
            redact_url(&current.to_string())
        };
        if !text.contains(&part) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&part);
        }
        first = false;
        source = current.source();
    }
    text
}

fn reqwest_without_url(error: &reqwest::Error) -> String {
    let mut copy = String::new();
    if error.is_connect() {
        copy.push_str("connection failed");
    } else if error.is_timeout() {
        copy.push_str("timed out");
    } else if error.is_body() || error.is_decode() {
        copy.push_str("error reading the response body");
    } else if error.is_request() {
        copy.push_str("error sending the request");
    } else {
        copy.push_str("HTTP error");
    }
    copy
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types_are_recognised() {
        assert!(is_json("application/json"));
        assert!(is_json("Application/JSON; charset=utf-8"));
        assert!(is_json("application/problem+json"));
        assert!(!is_json("text/event-stream"));
        assert!(!is_json("text/event-stream; charset=utf-8"));
        assert!(!is_json(""));
        assert!(!is_json("application/x-ndjson"));
    }
}
