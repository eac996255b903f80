//! Authentication (SPEC 14.1): the server token, `Authorization: Bearer` or the
//! `fabro_session` cookie on every `/api/v1` route but health and the OpenAPI document,
//! constant-time comparison, and the `Origin` check of cookie-authenticated state
//! changes (SPEC 15). Tokens are never logged: the [`Token`] type has no `Debug` output
//! of its value.

use std::io::Write;
use std::path::{Path, PathBuf};

use axum::extract::{Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use rand::RngCore;
use subtle::ConstantTimeEq;

use crate::error::{ApiError, ErrorKind};
use crate::state::AppState;

/// The session cookie's name.
pub const COOKIE: &str = "fabro_session";

/// The server token.
#[derive(Clone)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("Token([REDACTED])")
    }
}

impl Token {
    /// A token with this value.
    pub fn new(value: String) -> Token {
        Token(value)
    }

    /// The value, for the start-up line and clients.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `candidate` is this token, compared in constant time.
    pub fn matches(&self, candidate: &str) -> bool {
        !candidate.is_empty() && bool::from(self.0.as_bytes().ct_eq(candidate.as_bytes()))
    }
}

/// The path of the token file under `root`.
pub fn token_file(root: &Path) -> PathBuf {
    root.join("server.token")
}

/// `FABRO_SERVER_TOKEN` when set (`env_token`), else the content of
/// `{root}/server.token`, created with 32 random bytes in base64url and mode 0600.
pub fn load_or_create_token(root: &Path, env_token: Option<String>) -> std::io::Result<Token> {
    if let Some(token) = env_token.filter(|token| !token.is_empty()) {
        return Ok(Token(token));
    }
    let path = token_file(root);
    match fs_err::read_to_string(&path) {
        Ok(text) if !text.trim().is_empty() => return Ok(Token(text.trim().to_owned())),
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    fs_err::create_dir_all(root)?;
    let mut bytes = [0_u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let temporary = root.join(format!("server.token.{}.tmp", std::process::id()));
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temporary)?;
        file.write_all(token.as_bytes())?;
        file.sync_all()?;
    }
    fs_err::rename(&temporary, &path)?;
    Ok(Token(token))
}

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
