//! Authentication (SPEC 14.1): the server token, `Authorization: Bearer` or the
//! `fabro_session` cookie on every `/api/v1` route but health and the OpenAPI document,
//! constant-time comparison, and the `Origin` check of cookie-authenticated state
//! changes (SPEC 15). Tokens are never logged: the [`Token`] type has no `Debug` output
//! of its value.

use axum::extract::{Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::{ApiError, ErrorKind};
use crate::state::AppState;
pub use crate::token::{load_or_create_token, token_file, Token};

/// The session cookie's name.
pub const COOKIE: &str = "fabro_session";

/// Routes that need no token.
fn is_public(path: &str) -> bool {
    matches!(path, "/api/v1/health" | "/api/v1/openapi.json") || !path.starts_with("/api/v1")
}

/// The bearer token of a request, if any.
pub fn bearer(request: &Request) -> Option<&str> {
    request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
}

/// The `fabro_session` cookie of a request, if any.
pub fn session_cookie(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

/// Whether the `Origin` of a cookie-authenticated state change is this server.
fn same_origin(request: &Request) -> bool {
    let headers = request.headers();
    let origin = headers
        .get(header::ORIGIN)
        .and_then(|value| value.to_str().ok());
    let host = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok());
    matches!((origin, host), (Some(origin), Some(host)) if origin == format!("http://{host}"))
}

/// The middleware: 401 without a valid token or cookie under `/api/v1` (health and the
/// OpenAPI document excepted); 403 for a cookie-authenticated state change from
/// another origin.
pub async fn require_token(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    if is_public(request.uri().path()) {
        return next.run(request).await;
    }
    let token = state.token();
    if bearer(&request).is_some_and(|candidate| token.matches(candidate)) {
        return next.run(request).await;
    }
    if session_cookie(request.headers()).is_some_and(|candidate| token.matches(candidate)) {
        let changes_state = !matches!(*request.method(), Method::GET | Method::HEAD);
        if changes_state && !same_origin(&request) {
            return ApiError::forbidden("cross-origin request refused").into_response();
        }
        return next.run(request).await;
    }
    ApiError::new(ErrorKind::Unauthorized, "missing or wrong token").into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_file_is_created_once_with_mode_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let first = load_or_create_token(dir.path(), None).unwrap();
        let second = load_or_create_token(dir.path(), None).unwrap();
        assert_eq!(first.expose(), second.expose());
        assert_eq!(first.expose().len(), 43);
        let mode = fs_err::metadata(token_file(dir.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let env = load_or_create_token(dir.path(), Some("from-env".into())).unwrap();
        assert!(env.matches("from-env"));
        assert!(!env.matches("from-en"));
        assert!(!env.matches(""));
        assert_eq!(format!("{env:?}"), "Token([REDACTED])");
    }
}
