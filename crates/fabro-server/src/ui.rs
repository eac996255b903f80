//! The page at `/` (SPEC 14.1, 15): `/?token=…` sets the `fabro_session` cookie and
//! redirects to `/`; without a valid cookie the page asks for the token; with one it
//! lists the runs. Everything shown is escaped text; the page has no script.

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;

use crate::auth::{session_cookie, COOKIE};
use crate::engine_bridge::records;
use crate::state::AppState;

/// `?token=`.
#[derive(Debug, Deserialize)]
pub struct TokenQuery {
    token: Option<String>,
}

/// `GET /`.
pub async fn index(
    State(state): State<AppState>,
    Query(query): Query<TokenQuery>,
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
    if !session_cookie(&headers).is_some_and(|cookie| state.token().matches(cookie)) {
        return Html(login_page("")).into_response();
    }
    let root = state.bridge().root().to_path_buf();
    let runs = tokio::task::spawn_blocking(move || records::list_runs(&root))
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    let mut rows = String::new();
    for record in runs.iter().take(50) {
        rows.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
            escape(&record.run_id),
            escape(&record.workflow_name),
            escape(record.status.as_str()),
            escape(&record.started_at)
        ));
    }
    Html(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>fabro runs</title></head><body>\
         <h1>Runs</h1><table><thead><tr><th>Run</th><th>Workflow</th><th>Status</th><th>Started</th></tr></thead>\
         <tbody>\n{rows}</tbody></table></body></html>"
    ))
    .into_response()
}

fn login_page(note: &str) -> String {
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>fabro</title></head><body>\
         <h1>fabro server</h1><p>{}</p><form method=\"get\" action=\"/\">\
         <label for=\"token\">Token (printed by <code>fabro server</code>, or in server.token)</label> \
         <input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"off\"> \
         <button type=\"submit\">Open</button></form></body></html>",
        escape(note)
    )
}

/// Escapes text for HTML.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}
