//! `POST /api/v1/runs/{id}/fork` and `POST /api/v1/runs/{id}/rewind` (SPEC 20.2, 20.3):
//! a new run from a checkpoint of the run, and the run moved back to an earlier
//! checkpoint.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use fabro_api::{Rewound, Started};

use super::{require_run, started};
use crate::engine_bridge::{ForkRequest, RewindRequest};
use crate::error::{ApiError, ErrorBody};
use crate::runs;
use crate::state::AppState;

/// Forks a run (SPEC 20.2): a new run from the checkpoint after `at` (or `at_rank`), else
/// from the run's newest complete checkpoint. An edited `workflow` with errors is 422,
/// with its diagnostics.
#[utoipa::path(post, path = "/api/v1/runs/{id}/fork", params(("id" = String, Path, description = "run id or unique prefix")),
    request_body = ForkRequest,
    responses((status = 201, body = Started), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
    (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
    (status = 422, body = ErrorBody)))]
pub async fn fork_run(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Result<Option<Json<ForkRequest>>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    let request = body?.map(|Json(request)| request).unwrap_or_default();
    let record = require_run(&state, &id).await?;
    let accepted = runs::fork(&state, &record.run_id, request).await?;
    Ok((StatusCode::CREATED, Json(started(accepted))).into_response())
}

/// Rewinds a run that is not running (SPEC 20.3) to the checkpoint after `to` (or
/// `to_rank`); `fabro resume` (or the resume route) continues from there.
#[utoipa::path(post, path = "/api/v1/runs/{id}/rewind", params(("id" = String, Path, description = "run id or unique prefix")),
    request_body = RewindRequest,
    responses((status = 200, body = Rewound), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
    (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn rewind_run(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Result<Json<RewindRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Rewound>, ApiError> {
    let Json(request) = body?;
    // A run this server has just started may not be in the store yet: it is refused
    // as running, not unknown.
    let run_id = match state.active_by_prefix(&id) {
        Some(active) => active.run_id.clone(),
        None => require_run(&state, &id).await?.run_id,
    };
    Ok(Json(runs::rewind(&state, &run_id, request).await?))
}
