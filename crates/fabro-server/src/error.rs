//! The JSON error shape of SPEC 14.3: `{"error": {"code", "message"}}`, plus
//! `diagnostics` for an invalid workflow, with the status each error maps to.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// An error answer of the API.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// `snake_case` code.
    pub code: &'static str,
    /// Human-readable text; never holds a token or a credential.
    pub message: String,
    /// `fabro validate --json` diagnostics for an invalid workflow.
    pub diagnostics: Option<Value>,
}

/// The body of every error response.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// The `error` object.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// `snake_case` code, e.g. `not_found`.
    pub code: String,
    /// Human-readable message.
    pub message: String,
    /// For an invalid workflow: the diagnostics of `fabro validate --json`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub diagnostics: Option<Value>,
}

impl ApiError {
    /// An error with `status`, `code` and `message`.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            diagnostics: None,
        }
    }

    /// 400 `bad_request`.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// 404 `not_found`.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 409 `conflict`.
    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, "conflict", message)
    }

    /// 403 `forbidden`.
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 413 `payload_too_large`.
    pub fn too_large(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", message)
    }

    /// 500 `internal`: fabro's own storage failed.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    /// The code a bare status gets when a layer (routing, body limits) answered it.
    pub fn for_status(status: StatusCode) -> ApiError {
        let (code, message) = match status {
            StatusCode::NOT_FOUND => ("not_found", "no such route"),
            StatusCode::METHOD_NOT_ALLOWED => ("method_not_allowed", "method not allowed"),
            StatusCode::PAYLOAD_TOO_LARGE => ("payload_too_large", "request body too large"),
            StatusCode::UNAUTHORIZED => ("unauthorized", "missing or wrong token"),
            StatusCode::UNSUPPORTED_MEDIA_TYPE => {
                ("unsupported_media_type", "expected application/json")
            }
            StatusCode::UNPROCESSABLE_ENTITY => ("unprocessable", "invalid request"),
            status if status.is_server_error() => ("internal", "internal error"),
            _ => ("bad_request", "bad request"),
        };
        ApiError::new(status, code, message)
    }

    fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: self.code.to_owned(),
                message: self.message.clone(),
                diagnostics: self.diagnostics.clone(),
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
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
