//! The server's one error type, [`ApiError`], and the JSON error shape of SPEC 14.3:
//! `{"error": {"code", "message"}}`, plus `diagnostics` for an invalid workflow and
//! `request_id` for an internal error.
//!
//! Every request gets a request id ([`assign_request_id`]), sent back as
//! `x-request-id`. A client's error says what is wrong with the request, without a
//! file system path or an OS error's text ([`ApiError::explained`]); an internal error
//! carries its cause for the log only: the client reads `internal server error
//! (request id …)`, and the log has one `error` line with the same id and the whole
//! cause ([`ApiError::into_public`]).

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

pub use fabro_api::{Diagnostic, ErrorBody, ErrorDetail};

/// The header that carries a response's request id.
pub const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");

tokio::task_local! {
    static REQUEST_ID: String;
}

/// What went wrong, which fixes the status and the `code` of the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// 400 `bad_request`.
    BadRequest,
    /// 401 `unauthorized`.
    Unauthorized,
    /// 403 `forbidden`.
    Forbidden,
    /// 404 `not_found`.
    NotFound,
    /// 405 `method_not_allowed`.
    MethodNotAllowed,
    /// 409 `conflict`.
    Conflict,
    /// 413 `payload_too_large`.
    PayloadTooLarge,
    /// 415 `unsupported_media_type`.
    UnsupportedMediaType,
    /// 422 `invalid_workflow`.
    InvalidWorkflow,
    /// 422 `no_such_option`: an answer names no option of the question.
    NoSuchOption,
    /// 422 `unprocessable`.
    Unprocessable,
    /// 503 `too_many_streams`.
    TooManyStreams,
    /// 503 `shutting_down`.
    ShuttingDown,
    /// 500 `internal`: the server failed, not the request.
    Internal,
}

impl ErrorKind {
    /// The HTTP status.
    pub fn status(self) -> StatusCode {
        match self {
            ErrorKind::BadRequest => StatusCode::BAD_REQUEST,
            ErrorKind::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorKind::Forbidden => StatusCode::FORBIDDEN,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorKind::Conflict => StatusCode::CONFLICT,
            ErrorKind::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorKind::InvalidWorkflow | ErrorKind::NoSuchOption | ErrorKind::Unprocessable => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            ErrorKind::TooManyStreams | ErrorKind::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The `snake_case` code.
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::Forbidden => "forbidden",
            ErrorKind::NotFound => "not_found",
            ErrorKind::MethodNotAllowed => "method_not_allowed",
            ErrorKind::Conflict => "conflict",
            ErrorKind::PayloadTooLarge => "payload_too_large",
            ErrorKind::UnsupportedMediaType => "unsupported_media_type",
            ErrorKind::InvalidWorkflow => "invalid_workflow",
            ErrorKind::NoSuchOption => "no_such_option",
            ErrorKind::Unprocessable => "unprocessable",
            ErrorKind::TooManyStreams => "too_many_streams",
            ErrorKind::ShuttingDown => "shutting_down",
            ErrorKind::Internal => "internal",
        }
    }
}

/// The one mapping of the engine's error kinds to statuses (SPEC 14.3).
impl From<fabro_engine::ErrorKind> for ErrorKind {
    fn from(kind: fabro_engine::ErrorKind) -> ErrorKind {
        use fabro_engine::ErrorKind as Engine;
        match kind {
            Engine::InvalidWorkflow | Engine::Unfit => ErrorKind::InvalidWorkflow,
            Engine::Usage => ErrorKind::BadRequest,
            Engine::NotFound => ErrorKind::NotFound,
            Engine::Conflict => ErrorKind::Conflict,
            Engine::Storage | Engine::Internal => ErrorKind::Internal,
        }
    }
}

/// A run the engine could not start or resume: a 500 (the cause logged, never told)
/// when the engine or its storage failed, else the engine's message without paths or
/// OS error texts. An invalid workflow's diagnostics are the caller's to add.
impl From<fabro_engine::RunError> for ApiError {
    fn from(error: fabro_engine::RunError) -> ApiError {
        use fabro_engine::ResumeError;
        match (ErrorKind::from(error.kind()), &error) {
            (ErrorKind::Internal, _) => ApiError::internal(error),
            // Which record of the run is unreadable, not why: that names its files.
            (
                kind,
                fabro_engine::RunError::Resume {
                    source: source @ ResumeError::Records { .. },
                    ..
                },
            ) => ApiError::new(kind, format!("{error}: {source}")).caused_by(error),
            (kind, _) => ApiError::explained(kind, error),
        }
    }
}

/// A cause kept for the log.
type Cause = Arc<dyn std::error::Error + Send + Sync>;

/// An error answer of the server. Its message never holds a token or a credential, a
/// file system path or an OS error's text; the cause behind it goes to the log only.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    kind: ErrorKind,
    message: String,
    diagnostics: Option<Vec<Diagnostic>>,
    #[source]
    cause: Option<Cause>,
}

impl ApiError {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> ApiError {
        ApiError {
            kind,
            message: message.into(),
            diagnostics: None,
            cause: None,
        }
    }

    /// 400 `bad_request`.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::BadRequest, message)
    }

    /// 404 `not_found`.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::NotFound, message)
    }

    /// 409 `conflict`.
    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::Conflict, message)
    }

    /// 403 `forbidden`.
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::Forbidden, message)
    }

    /// 413 `payload_too_large`.
    pub fn too_large(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::PayloadTooLarge, message)
    }

    /// 422 `invalid_workflow` with `fabro validate --json` diagnostics.
    pub fn invalid_workflow(message: impl Into<String>, diagnostics: Vec<Diagnostic>) -> ApiError {
        ApiError {
            diagnostics: Some(diagnostics),
            ..ApiError::new(ErrorKind::InvalidWorkflow, message)
        }
    }

    /// 500 `internal`: the server itself failed (its storage, a task). `cause` goes to
    /// the log, never to the client.
    pub fn internal(cause: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> ApiError {
        ApiError::new(ErrorKind::Internal, "internal server error").caused_by(cause)
    }

    /// An error of `kind` that the request caused, told with `error`'s own words (and
    /// those of its causes) less file system paths (reduced to their last component)
    /// and OS error texts; the whole of `error` goes to the log when that hid anything.
    pub fn explained(
        kind: ErrorKind,
        error: impl std::error::Error + Send + Sync + 'static,
    ) -> ApiError {
        let told = client_text(&error);
        let api_error = ApiError::new(kind, told.clone());
        if told == fabro_engine::error_chain(&error) {
            api_error
        } else {
            api_error.caused_by(error)
        }
    }

    /// This error with `cause` kept for the log.
    pub fn caused_by(
        mut self,
        cause: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> ApiError {
        self.cause = Some(Arc::from(cause.into()));
        self
    }

    /// The code a bare status gets when a layer (routing, body limits) answered it.
    pub fn for_status(status: StatusCode) -> ApiError {
        let (kind, message) = match status {
            StatusCode::NOT_FOUND => (ErrorKind::NotFound, "no such route"),
            StatusCode::METHOD_NOT_ALLOWED => (ErrorKind::MethodNotAllowed, "method not allowed"),
            StatusCode::PAYLOAD_TOO_LARGE => (ErrorKind::PayloadTooLarge, "request body too large"),
            StatusCode::UNAUTHORIZED => (ErrorKind::Unauthorized, "missing or wrong token"),
            StatusCode::UNSUPPORTED_MEDIA_TYPE => {
                (ErrorKind::UnsupportedMediaType, "expected application/json")
            }
            StatusCode::UNPROCESSABLE_ENTITY => (ErrorKind::Unprocessable, "invalid request"),
            status if status.is_server_error() => {
                return ApiError::internal(format!("a layer answered {status} without a body"))
            }
            _ => (ErrorKind::BadRequest, "bad request"),
        };
        ApiError::new(kind, message)
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.kind.status()
    }

    /// The message for the client (for an internal error, without its request id: see
    /// [`ApiError::into_public`]).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The error as the client is told it. An internal error is logged here, at `error`
    /// with the request id and its whole cause; a client's error whose cause was hidden
    /// from the message at `warn`. This consumes the error, so it is logged once.
    pub fn into_public(self) -> ErrorDetail {
        let chain = fabro_engine::error_chain(&self);
        let (message, request_id) = if self.kind == ErrorKind::Internal {
            let request_id = current_request_id().unwrap_or_else(new_request_id);
            tracing::error!(request_id = %request_id, error = %chain, "internal server error");
            (
                format!("{} (request id {request_id})", self.message),
                Some(request_id),
            )
        } else {
            if self.cause.is_some() {
                let request_id = current_request_id().unwrap_or_default();
                tracing::warn!(request_id = %request_id, status = self.status().as_u16(), error = %chain, "request refused");
            }
            (self.message, None)
        };
        ErrorDetail {
            code: self.kind.code().to_owned(),
            message,
            diagnostics: self.diagnostics,
            request_id,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = ErrorBody {
            error: self.into_public(),
        };
        (status, axum::Json(body)).into_response()
    }
}

impl From<axum::extract::rejection::JsonRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::JsonRejection) -> ApiError {
        let status = rejection.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            return ApiError::too_large("request body too large");
        }
        ApiError::bad_request(rejection.body_text())
    }
}

impl From<axum::extract::rejection::QueryRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::QueryRejection) -> ApiError {
        ApiError::bad_request(rejection.body_text())
    }
}

/// A fresh request id (a ULID).
pub fn new_request_id() -> String {
    ulid::Ulid::new().to_string()
}

/// The id of the request being answered, when called inside [`assign_request_id`].
pub fn current_request_id() -> Option<String> {
    REQUEST_ID.try_with(Clone::clone).ok()
}

/// The middleware that gives each request a fresh id: errors and log lines name it
/// while the request is answered, and the response carries it as `x-request-id`.
pub async fn assign_request_id(request: Request, next: Next) -> Response {
    let request_id = new_request_id();
    let mut response = REQUEST_ID
        .scope(request_id.clone(), next.run(request))
        .await;
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    response
}

/// `error` and its causes as a client may read them: joined with `: ` like
/// [`fabro_engine::error_chain`], ending before the first OS error (whose text names
/// the OS's view of a file), with absolute paths reduced to their last component.
pub fn client_text(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(error);
    while let Some(cause) = next {
        let text = cause.to_string();
        if cause.is::<std::io::Error>() || text.contains("(os error") {
            break;
        }
        parts.push(without_paths(&text));
        next = cause.source();
    }
    if parts.is_empty() {
        "the request cannot be carried out (the server's log has the details)".to_owned()
    } else {
        parts.join(": ")
    }
}

/// `text` with every absolute path (a `/` that starts a word) reduced to its last
/// component: `unknown key 'x' in /srv/w/run.toml:3` becomes `… in run.toml:3`.
pub fn without_paths(text: &str) -> String {
    const OPENERS: &str = "'\"`([{<=";
    const ENDS: &str = "'\"`)]}>:,;";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut previous: Option<char> = None;
    while let Some(character) = rest.chars().next() {
        let starts_word =
            previous.is_none_or(|before| before.is_whitespace() || OPENERS.contains(before));
        if character == '/' && starts_word {
            let end = rest
                .find(|after: char| after.is_whitespace() || ENDS.contains(after))
                .unwrap_or(rest.len());
            let path = &rest[..end];
            let last = path.trim_end_matches('/').rsplit('/').next().unwrap_or("");
            out.push_str(if last.is_empty() { path } else { last });
            previous = path.chars().next_back();
            rest = &rest[end..];
        } else {
            out.push(character);
            previous = Some(character);
            rest = &rest[character.len_utf8()..];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_paths_keep_their_last_component_only() {
        assert_eq!(
            without_paths("unknown key 'x' in /srv/work/run.toml:3"),
            "unknown key 'x' in run.toml:3"
        );
        assert_eq!(
            without_paths("cannot read '/a/b/' (or /c)"),
            "cannot read 'b' (or c)"
        );
        assert_eq!(
            without_paths("a/b and 1/2 stay; / too"),
            "a/b and 1/2 stay; / too"
        );
        assert_eq!(without_paths("see http://host/x"), "see http://host/x");
    }

    #[test]
    fn client_text_ends_before_an_os_error() {
        #[derive(Debug, thiserror::Error)]
        #[error("cannot read {}", .0.display())]
        struct Read(std::path::PathBuf, #[source] std::io::Error);
        let error = Read(
            "/srv/root/scratch/run/manifest.json".into(),
            std::io::Error::from_raw_os_error(21),
        );
        assert_eq!(client_text(&error), "cannot read manifest.json");
        let api_error = ApiError::explained(ErrorKind::Conflict, error);
        assert_eq!(api_error.message(), "cannot read manifest.json");
        assert!(fabro_engine::error_chain(&api_error).contains("os error 21"));
    }

    #[test]
    fn an_internal_error_tells_only_its_request_id() {
        let detail = ApiError::internal("cannot read /srv/secret/place").into_public();
        let request_id = detail.request_id.expect("a request id");
        assert_eq!(detail.code, "internal");
        assert_eq!(
            detail.message,
            format!("internal server error (request id {request_id})")
        );
    }

    #[test]
    fn run_errors_answer_by_their_kind_and_storage_failures_hide_their_cause() {
        use fabro_engine::ErrorKind as Engine;
        for (kind, status) in [
            (Engine::InvalidWorkflow, 422),
            (Engine::Unfit, 422),
            (Engine::Usage, 400),
            (Engine::NotFound, 404),
            (Engine::Conflict, 409),
            (Engine::Storage, 500),
            (Engine::Internal, 500),
        ] {
            assert_eq!(ErrorKind::from(kind).status().as_u16(), status, "{kind:?}");
        }
        let storage = ApiError::from(fabro_engine::RunError::Io {
            action: "cannot write",
            path: std::path::PathBuf::from("/srv/fabro/scratch/r/manifest.json"),
            source: std::io::Error::other("No space left on device"),
        });
        assert_eq!(storage.kind(), ErrorKind::Internal);
        assert_eq!(storage.message(), "internal server error");
        let refused = ApiError::from(fabro_engine::RunError::NoRunDir {
            run_id: "r".to_owned(),
            root: std::path::PathBuf::from("/srv/fabro"),
        });
        assert_eq!(refused.kind(), ErrorKind::NotFound);
        assert!(!refused.message().contains("/srv"), "{}", refused.message());
    }
}
