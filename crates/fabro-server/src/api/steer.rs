//! Steering a run's agent (SPEC 20.1): `POST /api/v1/runs/{id}/steer`. A run this
//! server executes takes the message in process; a run another process executes
//! through the store (a worker on any machine, SPEC 18.2) or its run directory (a
//! detached local run). The run page's steering form sends the same, with source `ui`.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use fabro_api::{SteerAccepted, SteerRequest};

use crate::engine_bridge::{steer_elsewhere, SteerError, SteeringSource, WhenNoAgent};
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

/// How long a run another process executes may take to accept a message.
const PATIENCE: Duration = Duration::from_secs(10);

/// Sends guidance to the running agent stage.
#[utoipa::path(post, path = "/api/v1/runs/{id}/steer",
    params(("id" = String, Path, description = "run id or unique prefix")),
    request_body = SteerRequest,
    responses((status = 202, body = SteerAccepted), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
    (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody)))]
pub async fn steer(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Result<Json<SteerRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<(StatusCode, Json<SteerAccepted>), ApiError> {
    let Json(request) = body?;
    let when = if request.next {
        WhenNoAgent::WaitForNext
    } else {
        WhenNoAgent::Refuse
    };
    let accepted = send(&state, &id, &request.text, SteeringSource::Api, when).await?;
    Ok((StatusCode::ACCEPTED, Json(accepted)))
}

/// Steers run `id` (an id or a unique prefix) with `text` from `source`.
pub async fn send(
    state: &AppState,
    id: &str,
    text: &str,
    source: SteeringSource,
    when: WhenNoAgent,
) -> Result<SteerAccepted, ApiError> {
    if let Some(active) = state.active_by_prefix(id) {
        let steered = active.steering.send(text, source, when).map_err(refused)?;
        return Ok(SteerAccepted {
            run_id: active.run_id.clone(),
            node_id: steered.node_id,
        });
    }
    let record = super::require_run(state, id).await?;
    let run_id = fabro_engine::RunId::from(record.run_id.as_str());
    let run_dir = record.run_dir.clone();
    let text = text.to_owned();
    let runs = std::sync::Arc::clone(&state.stores().runs);
    let steered = tokio::task::spawn_blocking(move || {
        steer_elsewhere(&runs, &run_id, &run_dir, &text, source, when, PATIENCE)
    })
    .await
    .map_err(ApiError::internal)?
    .map_err(refused)?;
    Ok(SteerAccepted {
        run_id: record.run_id,
        node_id: steered.node_id,
    })
}

/// 400 for an empty text, 409 when the run's state refuses the message.
fn refused(error: SteerError) -> ApiError {
    if error.is_conflict() {
        ApiError::conflict(error.to_string())
    } else if matches!(error, SteerError::Empty) {
        ApiError::bad_request(error.to_string())
    } else {
        ApiError::internal(error)
    }
}
