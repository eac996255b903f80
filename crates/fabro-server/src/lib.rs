//! `fabro server` (SPEC section 14): the engine behind an HTTP API under `/api/v1`,
//! with live events, human answers, cancellation and resume.
//!
//! [`router`] builds the whole application over an [`AppState`], so tests drive it in
//! process or on port 0; [`serve`] runs it until a shutdown signal, then cancels the
//! runs as a first Ctrl-C would and waits for them (SPEC 14.1). Engine access lives in
//! [`engine_bridge`].

pub mod api;
pub mod auth;
pub mod doc_cache;
pub mod engine_bridge;
pub mod error;
pub mod feeds;
pub mod graph_cache;
pub mod openapi;
pub mod runs;
pub mod settings;
pub mod state;
pub mod token;
pub mod ui;
pub mod worker;

use std::future::Future;

use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::set_header::SetResponseHeaderLayer;

pub use crate::engine_bridge::EngineBridge;
pub use crate::error::ApiError;
pub use crate::settings::{ServerSettings, SettingsFlags};
pub use crate::state::AppState;
pub use crate::token::{load_or_create_token, Token};

/// Request bodies of `POST /api/v1/runs` (SPEC 14.3).
pub const MAX_START_BODY: usize = 5 * 1024 * 1024;
/// Request bodies of every other route.
pub const MAX_BODY: usize = 1024 * 1024;

/// The whole application.
pub fn router(state: AppState) -> Router {
    let start = Router::new()
        .route("/api/v1/runs", get(api::list_runs).post(api::create_run))
        .layer(RequestBodyLimitLayer::new(MAX_START_BODY));
    let rest = Router::new()
        .merge(ui::routes())
        .route("/api/v1/health", get(api::health))
        .route("/api/v1/openapi.json", get(openapi::document))
        .route("/api/v1/workflows", get(api::list_workflows))
        .route("/api/v1/workers", get(api::list_workers))
        .route("/api/v1/runs/{id}", get(api::get_run))
        .route("/api/v1/runs/{id}/cancel", post(api::cancel_run))
        .route("/api/v1/runs/{id}/resume", post(api::resume_run))
        .route("/api/v1/runs/{id}/fork", post(api::branching::fork_run))
        .route("/api/v1/runs/{id}/rewind", post(api::branching::rewind_run))
        .route("/api/v1/runs/{id}/events", get(api::events::events))
        .route("/api/v1/runs/{id}/graph.svg", get(api::files::graph_svg))
        .route("/api/v1/runs/{id}/stages", get(api::files::stages))
        .route(
            "/api/v1/runs/{id}/stages/{rank}/files/{name}",
            get(api::files::stage_file),
        )
        .route(
            "/api/v1/runs/{id}/stages/{rank}/diff",
            get(api::files::stage_diff),
        )
        .route("/api/v1/runs/{id}/artifacts", get(api::files::artifacts))
        .route(
            "/api/v1/runs/{id}/artifacts/{*path}",
            get(api::files::artifact),
        )
        .route(
            "/api/v1/runs/{id}/questions",
            get(api::questions::questions),
        )
        .route("/api/v1/runs/{id}/steer", post(api::steer::steer))
        .route(
            "/api/v1/runs/{id}/questions/{question_id}/answer",
            post(api::questions::answer),
        )
        .layer(RequestBodyLimitLayer::new(MAX_BODY));
    start
        .merge(rest)
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::for_status(StatusCode::METHOD_NOT_ALLOWED)
        })
        .layer(DefaultBodyLimit::disable())
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_token,
        ))
        .layer(middleware::from_fn(json_errors))
        .layer(middleware::from_fn(log_request))
        .layer(middleware::from_fn(error::assign_request_id))
        .layer(SetResponseHeaderLayer::overriding(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static("default-src 'self'"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ))
        // Decision 64: `same-origin`, not `no-referrer`, under which browsers send
        // `Origin: null` on the UI's own form posts and the Origin check refuses them.
        .layer(SetResponseHeaderLayer::overriding(
            header::REFERRER_POLICY,
            HeaderValue::from_static("same-origin"),
        ))
        .with_state(state)
}

/// One `info` line per request: method, path (never the query, which may hold the
/// token), status, duration and request id. Headers are never logged.
async fn log_request(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let started = std::time::Instant::now();
    let response = next.run(request).await;
    tracing::info!(
        target: "fabro_server::request",
        request_id = %error::current_request_id().unwrap_or_default(),
        "{method} {path} {} {}ms",
        response.status().as_u16(),
        started.elapsed().as_millis()
    );
    response
}

/// Error responses that a layer produced as plain text (body limits, extractors) get
/// the JSON error body of SPEC 14.3.
async fn json_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    if content_type.starts_with("application/json") || content_type.starts_with("text/html") {
        return response;
    }
    ApiError::for_status(status).into_response()
}

/// Serves `state` on `listener` until `signal` completes, then shuts down gracefully:
/// no new requests or runs, event streams closed, executing runs cancelled (status
/// `canceled`, resumable), their final records awaited (SPEC 14.1).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    signal: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router(state.clone());
    let stopping = state.shutdown_token().clone();
    // Without TCP_NODELAY, Nagle's algorithm holds a small write (an event of a stream,
    // the tail of a response) while an earlier one waits for the client's delayed ACK:
    // up to 40 ms on Linux, the p99 of event delivery and of the run document.
    let listener = axum::serve::ListenerExt::tap_io(listener, |connection| {
        if let Err(error) = connection.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY on a connection");
        }
    });
    let server = axum::serve(listener, app)
        .with_graceful_shutdown(async move { stopping.cancelled().await });
    let server = tokio::spawn(async move { server.await });
    signal.await;
    runs::shut_down(&state).await;
    match tokio::time::timeout(std::time::Duration::from_secs(1), server).await {
        Ok(Ok(result)) => result,
        Ok(Err(error)) => Err(std::io::Error::other(error)),
        // Connections still open after the runs stopped are dropped.
        Err(_) => Ok(()),
    }
}
