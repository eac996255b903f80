//! The web UI (SPEC 15): the runs board `/`, the run page `/runs/{id}`, the stage page
//! `/runs/{id}/stages/{rank}` and the new-run form `/new`, rendered on the server as
//! escaped HTML, plus one stylesheet and one script compiled into the binary
//! ([`assets`]) that keep the pages live from the event stream of SPEC 14.3.
//!
//! `/?token=…` sets the `fabro_session` cookie and redirects to `/`; a page request
//! without a valid cookie gets a page asking for the token. Every value a run, a model,
//! a command or a workflow produced goes through [`escape`] (or the Markdown renderer,
//! which drops raw HTML). Forms post to the page routes, which accept the cookie only
//! together with an `Origin` equal to `http://{Host}` (else 403), like the API.

pub mod assets;
pub mod board;
pub mod diff;
pub mod markdown;
pub mod new_run;
pub mod run_page;
pub mod stage_page;

use axum::extract::rejection::FormRejection;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use serde::Deserialize;
use serde_json::Value;

use crate::auth::{session_cookie, COOKIE};
use crate::state::AppState;

/// The page routes (everything outside `/api/v1`).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(index))
        .route("/ui/app.js", get(assets::script))
        .route("/ui/app.css", get(assets::stylesheet))
        .route("/favicon.ico", get(assets::icon))
        .route("/new", get(new_run::form).post(new_run::submit))
        .route("/runs/{id}", get(run_page::page))
        .route("/runs/{id}/live", get(run_page::live))
        .route("/runs/{id}/cancel", post(run_page::cancel))
        .route("/runs/{id}/resume", post(run_page::resume))
        .route("/runs/{id}/answer", post(run_page::answer))
        .route("/runs/{id}/steer", post(run_page::steer))
        .route("/runs/{id}/stages/{rank}", get(stage_page::page))
        .route("/runs/{id}/stages/{rank}/live", get(stage_page::live))
        .route("/runs/{id}/stages/{rank}/fork", post(stage_page::fork))
}

/// `?token=` and the board's filters.
#[derive(Debug, Default, Deserialize)]
pub struct IndexQuery {
    token: Option<String>,
    status: Option<String>,
    page: Option<usize>,
}

/// `GET /`: the login redirect, the token page, or the runs board.
pub async fn index(
    State(state): State<AppState>,
    Query(query): Query<IndexQuery>,
    headers: HeaderMap,
) -> Response {
    if let Some(token) = query.token {
        if !state.token().matches(&token) {
            return (
                StatusCode::UNAUTHORIZED,
                Html(login_page("That token is not valid.")),
            )
                .into_response();
        }
        let cookie = format!("{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/");
        return (
            StatusCode::SEE_OTHER,
            [
                (header::SET_COOKIE, cookie),
                (header::LOCATION, "/".to_owned()),
            ],
        )
            .into_response();
    }
    if !signed_in(&state, &headers) {
        return Html(login_page("")).into_response();
    }
    let page = query.page.unwrap_or(1);
    if let Some(fragment) =
        board::fragment_if_asked(&state, &headers, query.status.clone(), page).await
    {
        return fragment;
    }
    board::page(&state, query.status, page).await
}

/// Whether the request carries the session cookie (or the bearer token).
pub fn signed_in(state: &AppState, headers: &HeaderMap) -> bool {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    bearer.is_some_and(|token| state.token().matches(token))
        || session_cookie(headers).is_some_and(|cookie| state.token().matches(cookie))
}

/// The answer to a page request without a valid cookie.
pub fn sign_in_required() -> Response {
    (StatusCode::UNAUTHORIZED, Html(login_page(""))).into_response()
}

/// Whether a form post may change state: the bearer token, or the cookie with an
/// `Origin` equal to `http://{Host}` (SPEC 15). `Some` is the refusal to send.
pub fn check_post(state: &AppState, headers: &HeaderMap) -> Option<Response> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    if bearer.is_some_and(|token| state.token().matches(token)) {
        return None;
    }
    if !session_cookie(headers).is_some_and(|cookie| state.token().matches(cookie)) {
        return Some(sign_in_required());
    }
    let origin = headers
        .get(header::ORIGIN)
        .and_then(|value| value.to_str().ok());
    let host = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok());
    match (origin, host) {
        (Some(origin), Some(host)) if origin == format!("http://{host}") => None,
        _ => Some(message_page(
            StatusCode::FORBIDDEN,
            "Refused",
            "cross-origin request refused",
        )),
    }
}

/// The fields of a posted form that may change state: `Err` is the answer to send
/// instead (the refusal of [`check_post`], or 400 naming `what` when the form does not
/// parse).
pub fn posted_form<T>(
    state: &AppState,
    headers: &HeaderMap,
    form: Result<Form<T>, FormRejection>,
    what: &str,
) -> Result<T, Box<Response>> {
    if let Some(refused) = check_post(state, headers) {
        return Err(Box::new(refused));
    }
    form.map(|Form(fields)| fields).map_err(|_| {
        Box::new(message_page(
            StatusCode::BAD_REQUEST,
            "Bad request",
            &format!("the {what} is incomplete"),
        ))
    })
}

/// A whole page: `title`, the navigation, `body`; the stylesheet and the script come
/// from `/ui/` (no inline script or style: CSP `default-src 'self'`). The responses'
/// `Referrer-Policy: same-origin` (decision 64) lets the browser send the real `Origin`
/// of the page's form posts, and nothing to any other site.
pub fn layout(title: &str, body_attributes: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title} · fabro</title><link rel=\"icon\" href=\"/favicon.ico\" type=\"image/svg+xml\"><link rel=\"stylesheet\" href=\"/ui/app.css\">\
         <script src=\"/ui/app.js\" defer></script></head><body{body_attributes}>\
         <header class=\"top\"><nav aria-label=\"main\"><a href=\"/\" class=\"brand\">fabro</a> \
         <a href=\"/\">Runs</a> <a href=\"/new\">New run</a></nav></header>\
         <main id=\"main\">{body}</main></body></html>",
        title = escape(title),
    )
}

/// A page with a heading and one message, with `status`.
pub fn message_page(status: StatusCode, heading: &str, message: &str) -> Response {
    let body = format!(
        "<h1>{}</h1><p class=\"message\">{}</p>",
        escape(heading),
        escape(message)
    );
    (status, Html(layout(heading, "", &body))).into_response()
}

fn login_page(note: &str) -> String {
    let body = format!(
        "<h1>fabro server</h1><p>{}</p><form method=\"get\" action=\"/\">\
         <label for=\"token\">Token (printed by <code>fabro server</code>, or in server.token)</label> \
         <input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"off\"> \
         <button type=\"submit\">Open</button></form>",
        escape(note)
    );
    layout("Sign in", "", &body)
}

/// Escapes text for HTML (element content and quoted attribute values).
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            other => out.push(other),
        }
    }
    out
}

/// Escapes a path segment for a URL (run ids and ranks are plain, but node ids and
/// artifact paths may hold anything).
pub fn url_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A status as text with an icon, coloured by class (status is never colour alone).
pub fn status_badge(status: &str) -> String {
    let icon = match status {
        "success" => "✓",
        "partial_success" => "◐",
        "fail" => "✗",
        "running" => "▶",
        "waiting" => "?",
        "queued" => "…",
        "canceled" => "■",
        "interrupted" => "!",
        "skipped" => "↷",
        _ => "·",
    };
    format!(
        "<span class=\"badge status-{}\" data-status=\"{}\">{icon} {}</span>",
        css_word(status),
        escape(status),
        escape(status)
    )
}

/// `text` reduced to letters, digits and `_` (for class names).
pub fn css_word(text: &str) -> String {
    text.chars()
        .filter(|character| character.is_ascii_alphanumeric() || *character == '_')
        .collect()
}

/// Milliseconds as `1.2s`, `3m04s` or `1h02m`.
pub fn duration(ms: Option<u64>) -> String {
    let Some(ms) = ms else {
        return String::new();
    };
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let seconds = ms / 1000;
    if seconds < 60 {
        return format!("{}.{}s", seconds, (ms % 1000) / 100);
    }
    if seconds < 3600 {
        return format!("{}m{:02}s", seconds / 60, seconds % 60);
    }
    format!("{}h{:02}m", seconds / 3600, (seconds % 3600) / 60)
}

/// An API document (a `fabro_api` type) as the pages read it: its JSON value.
pub fn json_value<T: serde::Serialize>(document: &T) -> Value {
    serde_json::to_value(document).unwrap_or(Value::Null)
}

/// A JSON value as display text: strings bare, null empty, others as JSON.
pub fn text(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// A cost in US dollars, or empty.
pub fn cost(value: &Value) -> String {
    value
        .as_f64()
        .map(|cost| format!("${cost:.4}"))
        .unwrap_or_default()
}

/// Runs blocking work off the async threads.
pub async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(work).await.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_markup_and_quotes() {
        assert_eq!(
            escape("<img src=x onerror=\"alert('1')\">&"),
            "&lt;img src=x onerror=&quot;alert(&#39;1&#39;)&quot;&gt;&amp;"
        );
        assert_eq!(url_segment("a b/<c>"), "a%20b%2F%3Cc%3E");
        assert_eq!(css_word("fail\" onclick=x"), "failonclickx");
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration(Some(250)), "250ms");
        assert_eq!(duration(Some(1250)), "1.2s");
        assert_eq!(duration(Some(184_000)), "3m04s");
        assert_eq!(duration(Some(3_720_000)), "1h02m");
        assert_eq!(duration(None), "");
    }
}
