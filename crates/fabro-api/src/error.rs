//! The JSON error shape of SPEC 14.3: `{"error": {"code", "message"}}`, plus
//! `diagnostics` for an invalid workflow and `request_id` for an internal error.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::workflow::Diagnostic;

/// The body of every error response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// The `error` object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// `snake_case` code, e.g. `not_found`.
    pub code: String,
    /// Human-readable message.
    pub message: String,
    /// For an invalid workflow: the diagnostics of `fabro validate --json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<Vec<Diagnostic>>,
    /// For an internal error: the request id its log line names (also the response's
    /// `x-request-id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}
