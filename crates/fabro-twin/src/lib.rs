//! A twin of the LLM providers for tests: one loopback HTTP server that speaks the
//! Anthropic Messages, OpenAI Responses, Gemini `generateContent` /
//! `streamGenerateContent` and OpenAI-compatible Chat Completions wire formats.
//!
//! Tests start a [`Twin`] on `127.0.0.1:0`, point a provider's base URL at
//! [`Twin::base_url`], queue [`Reply`]s (consumed in order by whichever endpoint is hit;
//! [`Twin::set_fallback`] answers once the queue is empty) and read back every
//! [`Recorded`] request to check headers and bodies. A [`Turn`] is provider-neutral
//! (text, tool calls, usage) and is rendered in the wire format of the endpoint that
//! received the request, streamed in chunks with a per-chunk delay. Faults: any HTTP
//! status with a provider-shaped error body and optional `Retry-After`, a hang, a
//! connection dropped mid-stream, malformed JSON and malformed SSE, an error event after
//! some streamed text, a whole JSON answer to a streaming request and any raw body. Like the real
//! Anthropic API, the twin answers 400 to a Messages request with extended thinking
//! whose budget is out of range (below 1,024 or not below `max_tokens`) or whose last
//! assistant turn made tool calls without starting with its thinking block; when
//! thinking is enabled, its Anthropic turns start with a thinking block (a default one
//! unless the [`Turn`] gives its own).
//!
//! The twin never reads the environment and never touches the network beyond loopback.

mod cache;
mod wire;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Request, Response, StatusCode};

pub use wire::Format;

/// What the twin answers to one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A successful assistant turn.
    Turn(Turn),
    /// An HTTP error with a body shaped like the provider's errors.
    Status {
        /// HTTP status.
        status: u16,
        /// Provider error type or code, e.g. `rate_limit_error`, `insufficient_quota`.
        error_type: String,
        /// Error message. `{api_key}` is replaced by the key the request carried, to
        /// test that clients scrub echoed keys.
        message: String,
        /// `Retry-After` header value.
        retry_after: Option<String>,
    },
    /// Accept the request and never answer.
    Hang,
    /// Stream `text_before` and then drop the connection.
    DropMidStream {
        /// Text streamed before the drop.
        text_before: String,
    },
    /// A 200 stream whose event data is not JSON.
    MalformedJson,
    /// A 200 stream that is not valid SSE (bytes that are not UTF-8).
    MalformedSse,
    /// Stream `text_before`, then an error event in the provider's in-stream shape:
    /// Anthropic `event: error`, Responses `response.failed`, Gemini and Chat
    /// Completions `data: {"error": {…}}`.
    StreamError {
        /// Text streamed before the error.
        text_before: String,
        /// Error type (`type`, Gemini `status`), e.g. `internal_server_error`.
        error_type: String,
        /// Error `code` as sent (a string such as `"500"`, a number, or `Null` for none).
        code: serde_json::Value,
        /// Error message.
        message: String,
    },
    /// The whole turn as one `200 application/json` body in the provider's
    /// non-streaming shape, whether or not the request asked for a stream.
    WholeJson(Turn),
    /// Any status, content type and body, sent as they are.
    Raw {
        /// HTTP status.
        status: u16,
        /// `Content-Type` header value.
        content_type: String,
        /// Body text.
        body: String,
    },
}

impl Reply {
    /// A plain text turn.
    pub fn text(text: &str) -> Reply {
        Reply::Turn(Turn::text(text))
    }

    /// 429 rate limit, with an optional `Retry-After` value.
    pub fn rate_limited(retry_after: Option<&str>) -> Reply {
        Reply::status(
            429,
            "rate_limit_error",
            "rate limited, slow down",
            retry_after,
        )
    }

    /// 500 internal server error.
    pub fn server_error() -> Reply {
        Reply::status(500, "api_error", "internal server error", None)
    }

    /// 529 overloaded (Anthropic).
    pub fn overloaded() -> Reply {
        Reply::status(529, "overloaded_error", "Overloaded", None)
    }

    /// 429 with quota wording.
    pub fn quota() -> Reply {
        Reply::status(
            429,
            "insufficient_quota",
            "You exceeded your current quota, please check your plan and billing details",
            None,
        )
    }

    /// 401 that echoes the key back, as some gateways do.
    pub fn unauthorized() -> Reply {
        Reply::status(
            401,
            "authentication_error",
            "invalid x-api-key {api_key}",
            None,
        )
    }

    /// 400 invalid request.
    pub fn bad_request() -> Reply {
        Reply::status(
            400,
            "invalid_request_error",
            "messages: field required",
            None,
        )
    }

    /// 400 context length exceeded.
    pub fn context_length() -> Reply {
        Reply::status(
            400,
            "invalid_request_error",
            "prompt is too long: 250000 tokens > 200000 maximum context length",
            None,
        )
    }

    /// An error event after `text_before` has streamed.
    pub fn stream_error(
        text_before: &str,
        error_type: &str,
        code: serde_json::Value,
        message: &str,
    ) -> Reply {
        Reply::StreamError {
            text_before: text_before.to_owned(),
            error_type: error_type.to_owned(),
            code,
            message: message.to_owned(),
        }
    }

    /// A `200` answer with `content_type` and `body`.
    pub fn raw(content_type: &str, body: &str) -> Reply {
        Reply::Raw {
            status: 200,
            content_type: content_type.to_owned(),
            body: body.to_owned(),
        }
    }

    /// Any status.
    pub fn status(
        status: u16,
        error_type: &str,
        message: &str,
        retry_after: Option<&str>,
    ) -> Reply {
        Reply::Status {
            status,
            error_type: error_type.to_owned(),
            message: message.to_owned(),
            retry_after: retry_after.map(str::to_owned),
        }
    }
}

/// A provider-neutral assistant turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// Reply text.
    pub text: String,
    /// Tool calls: (id, name, JSON arguments text).
    pub tool_calls: Vec<(String, String, String)>,
    /// Input tokens reported, cache reads included.
    pub input_tokens: u64,
    /// Output tokens reported, reasoning included.
    pub output_tokens: u64,
    /// Cache-read tokens reported.
    pub cache_read_tokens: u64,
    /// Cache-write tokens reported (Anthropic's `cache_creation_input_tokens`).
    pub cache_write_tokens: u64,
    /// Reasoning tokens reported (where the format has them).
    pub reasoning_tokens: u64,
    /// Characters of text or arguments per streamed delta.
    pub chunk_size: usize,
    /// Pause before each streamed event.
    pub chunk_delay: Duration,
    /// End with the provider's content-filter stop instead of a normal one.
    pub content_filter: bool,
    /// Anthropic streams: report the input and cache counts in `message_delta` (whose
    /// counts are cumulative, as gateways send them) and zero input in `message_start`.
    pub usage_in_message_delta: bool,
    /// An Anthropic extended-thinking block (thinking text, signature) streamed before
    /// the text; the other formats leave it out.
    pub thinking: Option<(String, String)>,
    /// Chat Completions: the call's cost in USD reported as `usage.cost`, as OpenRouter
    /// does.
    pub cost: Option<f64>,
}

impl Turn {
    /// A text turn streamed in 8-character deltas without delay.
    pub fn text(text: &str) -> Turn {
        Turn {
            text: text.to_owned(),
            tool_calls: Vec::new(),
            input_tokens: 10,
            output_tokens: 5,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
            reasoning_tokens: 0,
            chunk_size: 8,
            chunk_delay: Duration::ZERO,
            content_filter: false,
            usage_in_message_delta: false,
            thinking: None,
            cost: None,
        }
    }

    /// Reports `cost` USD as the Chat Completions `usage.cost` (OpenRouter).
    pub fn with_cost(mut self, cost: f64) -> Turn {
        self.cost = Some(cost);
        self
    }

    /// Adds an Anthropic thinking block with its signature.
    pub fn with_thinking(mut self, thinking: &str, signature: &str) -> Turn {
        self.thinking = Some((thinking.to_owned(), signature.to_owned()));
        self
    }

    /// Adds a tool call.
    pub fn with_tool_call(mut self, id: &str, name: &str, arguments: &str) -> Turn {
        self.tool_calls
            .push((id.to_owned(), name.to_owned(), arguments.to_owned()));
        self
    }
}

/// One request the twin received.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// Path and query.
    pub path: String,
    /// The format the path selected.
    pub format: Option<Format>,
    /// Headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON (`Null` when it was not JSON).
    pub body: serde_json::Value,
}

impl Recorded {
    /// The first value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

#[derive(Default)]
struct State {
    queue: VecDeque<Reply>,
    fallback: Option<Reply>,
    requests: Vec<Recorded>,
    /// Replies to every request for a model ([`Twin::answer_model`]).
    by_model: Vec<(String, Reply)>,
    /// Replies to every request whose body holds a text ([`Twin::answer_containing`]).
    by_text: Vec<(String, Reply)>,
    /// Anthropic's prompt caching, once [`Twin::apply_prompt_caching`] turned it on.
    prompt_cache: Option<cache::PromptCache>,
}

/// The running twin; dropping it stops the server.
pub struct Twin {
    address: SocketAddr,
    state: Arc<Mutex<State>>,
    server: tokio::task::JoinHandle<()>,
}

impl Twin {
    /// Starts a twin on `127.0.0.1:0`. Needs a tokio runtime.
    pub async fn start() -> std::io::Result<Twin> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State {
            fallback: Some(Reply::text("twin reply")),
            ..State::default()
        }));
        let shared = state.clone();
        let app = axum::Router::new().fallback(move |request: Request<Body>| {
            let state = shared.clone();
            async move { handle(state, request).await }
        });
        let server = tokio::spawn(async move {
            // The server ends only when the task is aborted (on drop) or the listener fails.
            let _ = axum::serve(listener, app).await;
        });
        Ok(Twin {
            address,
            state,
            server,
        })
    }

    /// `http://127.0.0.1:{port}`, without a trailing slash.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Queues replies, answered in order.
    pub fn enqueue(&self, replies: impl IntoIterator<Item = Reply>) {
        self.lock().queue.extend(replies);
    }

    /// Answers every request for `model` (the body's `model`, or the model of a Gemini
    /// path) with `reply`, outside the queue: for the side requests agent programs make
    /// with a small model (titles, summaries) between their scripted turns.
    pub fn answer_model(&self, model: &str, reply: Reply) {
        self.lock().by_model.push((model.to_owned(), reply));
    }

    /// Answers every request whose JSON body contains `needle` with `reply`, outside
    /// the queue (before [`Twin::answer_model`]'s replies): for side calls a stage makes
    /// at a point the test does not fix, such as an agent's compaction summary.
    pub fn answer_containing(&self, needle: &str, reply: Reply) {
        self.lock().by_text.push((needle.to_owned(), reply));
    }

    /// The reply given once the queue is empty (initially the text `twin reply`).
    pub fn set_fallback(&self, reply: Reply) {
        self.lock().fallback = Some(reply);
    }

    /// From now on, Messages requests are billed by Anthropic's prompt caching rules
    /// (module `cache`): their turns report the tokens the request really has, read from
    /// and written to the cache, instead of the scripted counts; a request with more than
    /// four breakpoints is answered 400.
    pub fn apply_prompt_caching(&self) {
        self.lock().prompt_cache = Some(cache::PromptCache::default());
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.lock().requests.clone()
    }

    /// How many requests arrived.
    pub fn request_count(&self) -> usize {
        self.lock().requests.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Twin {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn handle(state: Arc<Mutex<State>>, request: Request<Body>) -> Response<Body> {
    let (recorded, call) = read_request(request).await;
    let (reply, bill) = {
        let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
        state.requests.push(recorded);
        let model = call.body["model"]
            .as_str()
            .unwrap_or(call.path_model.as_str());
        let body = (!state.by_text.is_empty()).then(|| call.body.to_string());
        let for_text = body.and_then(|body| {
            state
                .by_text
                .iter()
                .find(|(needle, _)| body.contains(needle.as_str()))
                .map(|(_, reply)| reply.clone())
        });
        let for_model = for_text.or_else(|| {
            state
                .by_model
                .iter()
                .find(|(name, _)| name == model)
                .map(|(_, reply)| reply.clone())
        });
        let fallback = state.fallback.clone();
        let reply = for_model.or_else(|| state.queue.pop_front()).or(fallback);
        let bill = match &mut state.prompt_cache {
            Some(cache) if call.format == Some(Format::Anthropic) => Some(cache.bill(&call.body)),
            _ => None,
        };
        (reply, bill)
    };
    let Some(format) = call.format else {
        return plain(StatusCode::NOT_FOUND, "the twin does not serve this path");
    };
    let mut reply = reply.unwrap_or(Reply::server_error());
    if format == Format::Anthropic {
        if let Some(message) = wire::anthropic_thinking_error(&call.body) {
            return json_response(
                StatusCode::BAD_REQUEST,
                &wire::error_body(format, 400, "invalid_request_error", &message),
            );
        }
        match bill {
            Some(Err(message)) => {
                return json_response(
                    StatusCode::BAD_REQUEST,
                    &wire::error_body(format, 400, "invalid_request_error", &message),
                );
            }
            Some(Ok(bill)) => {
                if let Reply::Turn(turn) | Reply::WholeJson(turn) = &mut reply {
                    turn.input_tokens = bill.total;
                    turn.cache_read_tokens = bill.read;
                    turn.cache_write_tokens = bill.written;
                }
            }
            None => {}
        }
        // With thinking enabled the API's turns always start with a thinking block.
        if let Reply::Turn(turn) = &mut reply {
            if call.body["thinking"]["type"] == "enabled" && turn.thinking.is_none() {
                turn.thinking = Some(("Thinking.".to_owned(), "twin-signature".to_owned()));
            }
        }
    }
    if let Reply::Hang = reply {
        std::future::pending::<()>().await;
        return plain(StatusCode::INTERNAL_SERVER_ERROR, "unreachable");
    }
    respond(&call, format, reply)
}

/// What the replies need of one request.
struct Call {
    /// The format the path selected.
    format: Option<Format>,
    /// The body parsed as JSON (`Null` when it was not JSON).
    body: serde_json::Value,
    /// The model named in a Gemini path (`…/models/{model}:…`), empty for other paths.
    path_model: String,
    /// The API key the request carried.
    key: String,
}

/// Reads a request: its record for [`Twin::requests`] and what the replies need of it.
async fn read_request(request: Request<Body>) -> (Recorded, Call) {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path_and_query().map_or_else(
        || parts.uri.path().to_owned(),
        |value| value.as_str().to_owned(),
    );
    let bytes = axum::body::to_bytes(body, 64 * 1024 * 1024)
        .await
        .unwrap_or_default();
    let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
    let format = Format::of_path(parts.uri.path());
    let path_model = parts
        .uri
        .path()
        .rsplit_once("/models/")
        .map(|(_, rest)| rest.split(':').next().unwrap_or_default().to_owned())
        .unwrap_or_default();
    let recorded = Recorded {
        path,
        format,
        headers: header_list(&parts.headers),
        body: body.clone(),
    };
    let call = Call {
        format,
        body,
        path_model,
        key: key_of(&parts.headers),
    };
    (recorded, call)
}

/// The response that plays `reply` (anything but [`Reply::Hang`]) in `format`.
fn respond(call: &Call, format: Format, reply: Reply) -> Response<Body> {
    let (body, path_model) = (&call.body, call.path_model.as_str());
    let streaming = match format {
        Format::GeminiStream => true,
        Format::Gemini => false,
        _ => body["stream"] == true,
    };
    match reply {
        Reply::Turn(turn) if streaming => sse(
            wire::stream_events(format, body, path_model, &turn),
            turn.chunk_delay,
            None,
        ),
        Reply::Turn(turn) | Reply::WholeJson(turn) => json_response(
            StatusCode::OK,
            &wire::whole(format, body, path_model, &turn),
        ),
        Reply::Status {
            status,
            error_type,
            message,
            retry_after,
        } => {
            let message = message.replace("{api_key}", &call.key);
            let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut response = json_response(
                code,
                &wire::error_body(format, status, &error_type, &message),
            );
            if let Some(value) = retry_after.and_then(|value| value.parse().ok()) {
                response.headers_mut().insert("retry-after", value);
            }
            response
        }
        Reply::Hang => plain(StatusCode::INTERNAL_SERVER_ERROR, "unreachable"),
        Reply::DropMidStream { text_before } => {
            let mut turn = Turn::text(&text_before);
            turn.chunk_size = text_before.len().max(1);
            let mut events = wire::stream_events(format, body, path_model, &turn);
            // Keep the first half of the stream: some text, never the completion.
            events.truncate((events.len() / 2).max(1));
            sse(events, Duration::ZERO, Some(()))
        }
        Reply::MalformedJson => {
            let event =
                wire::Event::new(wire::first_event_name(format), "{\"type\": oops, not json");
            sse(vec![event], Duration::ZERO, None)
        }
        Reply::MalformedSse => {
            let body = Body::from(Bytes::from_static(b"data: \xff\xfe\xfd broken\n\n"));
            sse_response(body)
        }
        Reply::StreamError {
            text_before,
            error_type,
            code,
            message,
        } => {
            let mut turn = Turn::text(&text_before);
            turn.chunk_size = text_before.chars().count().max(1);
            let mut events = wire::stream_events(format, body, path_model, &turn);
            // Keep the text, never the completion, then the error.
            let kept = events.len().saturating_sub(wire::completion_events(format));
            events.truncate(kept);
            events.push(wire::stream_error_event(
                format,
                &error_type,
                &code,
                &message,
            ));
            sse(events, Duration::ZERO, None)
        }
        Reply::Raw {
            status,
            content_type,
            body,
        } => {
            let mut response = Response::new(Body::from(body));
            *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            if let Ok(value) = axum::http::HeaderValue::from_str(&content_type) {
                response.headers_mut().insert("content-type", value);
            }
            response
        }
    }
}

fn sse(events: Vec<wire::Event>, delay: Duration, drop_at_end: Option<()>) -> Response<Body> {
    let stream = futures_util::stream::unfold(
        (events.into_iter(), drop_at_end),
        move |(mut events, drop_at_end)| async move {
            match events.next() {
                Some(event) => {
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    Some((Ok(Bytes::from(event.encode())), (events, drop_at_end)))
                }
                None if drop_at_end.is_some() => {
                    // Give hyper time to flush the head and the events sent so far, so the
                    // client sees a stream that breaks, not a refused request.
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    Some((
                        Err(std::io::Error::new(
                            std::io::ErrorKind::ConnectionReset,
                            "twin dropped the connection",
                        )),
                        (events, None),
                    ))
                }
                None => None,
            }
        },
    );
    sse_response(Body::from_stream(stream))
}

fn sse_response(body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    response.headers_mut().insert(
        "content-type",
        axum::http::HeaderValue::from_static("text/event-stream"),
    );
    response
}

fn json_response(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    let mut response = Response::new(Body::from(value.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        "content-type",
        axum::http::HeaderValue::from_static("application/json"),
    );
    response
}

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(Body::from(text));
    *response.status_mut() = status;
    response
}

fn header_list(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_owned(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// The key a request carried, whatever the provider's header.
fn key_of(headers: &HeaderMap) -> String {
    let value = |name: &str| {
        headers
            .get(name)
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
    };
    value("x-api-key")
        .or_else(|| value("x-goog-api-key"))
        .or_else(|| {
            value("authorization").map(|auth| auth.trim_start_matches("Bearer ").to_owned())
        })
        .unwrap_or_default()
}
