//! A run's stages, stage files, stage diffs, artifacts and live graph (SPEC 14.3). Only
//! files inside the run's records and its `artifacts/` directory are ever served.

use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use fabro_api::{ArtifactList, StageList};

use crate::engine_bridge::records;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(ApiError::internal)?
}

/// Stages in rank order.
#[utoipa::path(get, path = "/api/v1/runs/{id}/stages", params(("id" = String, Path, description = "run id or unique prefix")),
    responses((status = 200, body = StageList), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn stages(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<StageList>, ApiError> {
    let record = super::require_run(&state, &id).await?;
    let stages = blocking(move || Ok(records::stages(state.run_store(), &record))).await?;
    Ok(Json(StageList { stages }))
}

/// One stage file as text.
#[utoipa::path(get, path = "/api/v1/runs/{id}/stages/{rank}/files/{name}",
    params(("id" = String, Path, description = "run id or unique prefix"), ("rank" = u32, Path, description = "stage rank"),
    ("name" = String, Path, description = "prompt.md, response.md, status.json, stdout.log, stderr.log or diff.patch")),
    responses((status = 200, body = String, content_type = "text/plain"), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn stage_file(
    State(state): State<AppState>,
    Path((id, rank, name)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let rank = parse_rank(&rank)?;
    let record = super::require_run(&state, &id).await?;
    let bytes =
        blocking(move || records::stage_file(state.run_store(), &record.run_id, rank, &name))
            .await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], bytes).into_response())
}

/// The stage's run-branch commit against its parent.
#[utoipa::path(get, path = "/api/v1/runs/{id}/stages/{rank}/diff",
    params(("id" = String, Path, description = "run id or unique prefix"), ("rank" = u32, Path, description = "stage rank")),
    responses((status = 200, body = String, content_type = "text/x-diff"), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn stage_diff(
    State(state): State<AppState>,
    Path((id, rank)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let rank = parse_rank(&rank)?;
    let record = super::require_run(&state, &id).await?;
    let bytes = blocking(move || {
        records::stage_diff(state.run_store(), &record, rank, &state.bridge().mirrors())
    })
    .await?;
    Ok((
        [(header::CONTENT_TYPE, "text/x-diff; charset=utf-8")],
        bytes,
    )
        .into_response())
}

/// A rank path parameter; anything else names no stage.
fn parse_rank(rank: &str) -> Result<u32, ApiError> {
    rank.parse()
        .map_err(|_| ApiError::not_found(format!("no stage of rank '{rank}'")))
}

/// Captured assets.
#[utoipa::path(get, path = "/api/v1/runs/{id}/artifacts", params(("id" = String, Path, description = "run id or unique prefix")),
    responses((status = 200, body = ArtifactList), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn artifacts(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<ArtifactList>, ApiError> {
    let record = super::require_run(&state, &id).await?;
    let artifacts = blocking(move || Ok(records::artifacts(&record.run_dir))).await?;
    Ok(Json(ArtifactList { artifacts }))
}

/// One captured asset as a download; 404 for any path leaving `artifacts/`.
#[utoipa::path(get, path = "/api/v1/runs/{id}/artifacts/{path}",
    params(("id" = String, Path, description = "run id or unique prefix"), ("path" = String, Path, description = "path relative to artifacts/files")),
    responses((status = 200, body = String, content_type = "application/octet-stream"), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn artifact(
    State(state): State<AppState>,
    Path((id, path)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let record = super::require_run(&state, &id).await?;
    let bytes = blocking(move || {
        let file = records::artifact_file(&record.run_dir, &path)
            .ok_or_else(|| ApiError::not_found("no such artifact"))?;
        fs_err::read(file).map_err(|_| ApiError::not_found("no such artifact"))
    })
    .await?;
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream"),
            (header::CONTENT_DISPOSITION, "attachment"),
        ],
        bytes,
    )
        .into_response())
}

/// The workflow with each node's status.
#[utoipa::path(get, path = "/api/v1/runs/{id}/graph.svg", params(("id" = String, Path, description = "run id or unique prefix")),
    responses((status = 200, body = String, content_type = "image/svg+xml"), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn graph_svg(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let record = super::require_run(&state, &id).await?;
    let svg = blocking(move || {
        let layout = state.graphs().layout(state.run_store(), &record)?;
        Ok(layout.annotate(&records::node_statuses(&records::stages(
            state.run_store(),
            &record,
        ))))
    })
    .await?;
    Ok(([(header::CONTENT_TYPE, "image/svg+xml")], svg).into_response())
}

/// Decodes `%XX` escapes; `None` for a malformed escape or invalid UTF-8.
pub fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let hex = text.get(index + 1..index + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            index += 3;
        } else {
            out.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8(out).ok()
}
