//! The routes of SPEC 14.3 under `/api/v1`: runs, their events, stages, files,
//! artifacts and questions, the workflows under the roots, the workers of a shared
//! store, health and the OpenAPI document; forking and rewinding runs (SPEC 20.2, 20.3) in `branching`.

pub mod branching;
pub mod events;
pub mod feed;
pub mod files;
pub mod questions;
pub mod steer;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use fabro_api::{
    Canceling, Health, HumanQuestion, InspectDocument, RunDocument, RunList, RunSummary, Started,
    WorkerDocument, WorkerList, WorkflowList,
};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::engine_bridge::{records, ResumeRequest, RunStatus, StartRequest};
use crate::error::{ApiError, ErrorBody, ErrorKind};
use crate::runs;
use crate::state::AppState;
use fabro_engine::RunRecord;

/// Liveness.
#[utoipa::path(get, path = "/api/v1/health", security(()), responses((status = 200, body = Health)))]
pub async fn health() -> Json<Health> {
    Json(Health {
        status: "ok".to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
    })
}

/// The workers of a shared store (SPEC 18.2); none on the local store.
#[utoipa::path(get, path = "/api/v1/workers", responses((status = 200, body = WorkerList), (status = 401, body = ErrorBody), (status = 500, body = ErrorBody)))]
pub async fn list_workers(State(state): State<AppState>) -> Result<Json<WorkerList>, ApiError> {
    let runs = Arc::clone(&state.stores().runs);
    let workers = tokio::task::spawn_blocking(move || match runs.queue() {
        Some(queue) => queue.workers(),
        None => Ok(Vec::new()),
    })
    .await
    .map_err(ApiError::internal)?
    .map_err(ApiError::internal)?;
    Ok(Json(WorkerList {
        workers: workers
            .into_iter()
            .map(|worker| WorkerDocument {
                name: worker.name,
                host: worker.host,
                concurrency: worker.concurrency,
                runs: worker.runs,
                last_renewal: worker.last_renewal,
            })
            .collect(),
    }))
}

/// Query of `GET /api/v1/runs`.
#[derive(Debug, Default, Deserialize, IntoParams)]
pub struct ListQuery {
    /// Statuses to keep (repeatable; `waiting` is running with a pending question).
    #[serde(default)]
    pub status: Vec<String>,
    /// Workflow name to keep.
    pub workflow: Option<String>,
    /// Page size, at most 200 (default 50).
    pub limit: Option<usize>,
    /// Runs strictly older than this run id (the `next` of the previous page).
    pub before: Option<String>,
}

/// The statuses `GET /api/v1/runs` filters by.
pub(crate) const STATUSES: [&str; 9] = [
    "queued",
    "running",
    "waiting",
    "success",
    "partial_success",
    "fail",
    "canceled",
    "interrupted",
    "unreadable",
];

/// Lists runs, newest first.
#[utoipa::path(get, path = "/api/v1/runs", params(ListQuery), responses(
    (status = 200, body = RunList), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub async fn list_runs(
    State(state): State<AppState>,
    axum_extra_query::MultiQuery(query): axum_extra_query::MultiQuery<ListQuery>,
) -> Result<Response, ApiError> {
    if let Some(unknown) = query
        .status
        .iter()
        .find(|status| !STATUSES.contains(&status.as_str()))
    {
        return Err(ApiError::bad_request(format!("unknown status '{unknown}'")));
    }
    let limit = query.limit.unwrap_or(50).clamp(1, 200);
    let records = match state.run_store().cached_listing() {
        Some(records) => records,
        None => {
            let store = state.clone();
            tokio::task::spawn_blocking(move || records::listing(store.run_store()))
                .await
                .map_err(ApiError::internal)??
        }
    };
    // Filtered and paged on the index rows; only the page is summarised, since a summary
    // reads the run's manifest, checkpoint and stage directories (once: the summaries of
    // runs no process executes are cached).
    let unindexed: Vec<Listed> = state
        .all_active()
        .into_iter()
        .filter(|active| !records.contains(&active.run_id))
        .map(|active| Listed::Active(Box::new(active.queued_summary())))
        .collect();
    let stored = records.iter().map(|record| {
        // Started a moment ago: its manifest is not written yet.
        let record = if record.status == RunStatus::Queued
            && state
                .active(&record.run_id)
                .is_some_and(|active| !active.is_queued())
        {
            let mut started = RunRecord::clone(&record);
            started.status = RunStatus::Running;
            Arc::new(started)
        } else {
            record
        };
        let pending = pending_question(&state, &record.run_id, record.status);
        Listed::Stored(record, pending)
    });
    let wanted = |listed: &Listed| {
        let status = listed.status();
        (query.status.is_empty()
            || query
                .status
                .iter()
                .any(|wanted| wanted == status || (wanted == "waiting" && listed.waiting())))
            && query
                .workflow
                .as_ref()
                .is_none_or(|workflow| listed.workflow_name() == workflow.as_str())
    };
    let mut listed = unindexed.into_iter().chain(stored).filter(wanted);
    if let Some(before) = &query.before {
        if !listed
            .by_ref()
            .any(|listed| listed.run_id() == before.as_str())
        {
            return Err(ApiError::bad_request(format!(
                "unknown run '{before}' for before"
            )));
        }
    }
    let mut runs: Vec<Listed> = listed.take(limit + 1).collect();
    let next = (runs.len() > limit).then(|| runs[limit - 1].run_id().to_owned());
    runs.truncate(limit);
    let cached: Option<Vec<Bytes>> = runs.iter().map(|listed| listed.cached(&state)).collect();
    let summaries = match cached {
        Some(summaries) => summaries,
        None => {
            let cache = state.clone();
            tokio::task::spawn_blocking(move || {
                runs.into_iter()
                    .map(|listed| listed.summary(&cache))
                    .collect()
            })
            .await
            .map_err(ApiError::internal)?
        }
    };
    Ok(run_list_body(&summaries, next.as_deref()))
}

/// The [`RunList`] of serialized [`RunSummary`]s, put together without parsing them
/// again.
fn run_list_body(summaries: &[Bytes], next: Option<&str>) -> Response {
    let length: usize = summaries.iter().map(Bytes::len).sum();
    let mut body = Vec::with_capacity(length + summaries.len() + 64);
    body.extend_from_slice(b"{\"runs\":[");
    for (position, summary) in summaries.iter().enumerate() {
        if position > 0 {
            body.push(b',');
        }
        body.extend_from_slice(summary);
    }
    body.extend_from_slice(b"],\"next\":");
    body.extend_from_slice(&serde_json::to_vec(&next).unwrap_or_else(|_| b"null".to_vec()));
    body.push(b'}');
    (
        [(header::CONTENT_TYPE, "application/json")],
        Bytes::from(body),
    )
        .into_response()
}

/// One run of the list before it is summarised.
enum Listed {
    /// A run of this server not in the index yet: its summary.
    Active(Box<RunSummary>),
    /// A run of the index and its pending question.
    Stored(Arc<RunRecord>, Option<HumanQuestion>),
}

impl Listed {
    fn run_id(&self) -> &str {
        match self {
            Listed::Active(summary) => &summary.run_id,
            Listed::Stored(record, _) => &record.run_id,
        }
    }

    fn status(&self) -> &str {
        match self {
            Listed::Active(summary) => &summary.status,
            Listed::Stored(record, _) => record.status.as_str(),
        }
    }

    fn workflow_name(&self) -> &str {
        match self {
            Listed::Active(summary) => &summary.workflow_name,
            Listed::Stored(record, _) => &record.workflow_name,
        }
    }

    /// Running with a pending question.
    fn waiting(&self) -> bool {
        match self {
            Listed::Active(_) => false,
            Listed::Stored(record, pending) => {
                record.status == RunStatus::Running && pending.is_some()
            }
        }
    }

    /// The serialized summary, when it needs no file beyond a `stat`.
    fn cached(&self, state: &AppState) -> Option<Bytes> {
        match self {
            Listed::Active(summary) => serde_json::to_vec(summary).ok().map(Bytes::from),
            Listed::Stored(record, None) => {
                state.documents().cached_summary(state.run_store(), record)
            }
            Listed::Stored(..) => None,
        }
    }

    /// The serialized summary, built when the cache has none (blocks).
    fn summary(self, state: &AppState) -> Bytes {
        let summary = match self {
            Listed::Active(summary) => *summary,
            Listed::Stored(record, pending) => {
                if pending.is_none() {
                    if let Some(bytes) =
                        state.documents().cached_summary(state.run_store(), &record)
                    {
                        return bytes;
                    }
                }
                RunSummary {
                    pending_question: pending,
                    ..state.documents().summary(state.run_store(), &record)
                }
            }
        };
        Bytes::from(serde_json::to_vec(&summary).unwrap_or_default())
    }
}

/// The pending question of a run, as `GET /questions` lists it.
fn pending_question(state: &AppState, run_id: &str, status: RunStatus) -> Option<HumanQuestion> {
    if status != RunStatus::Running {
        return None;
    }
    questions::pending(state, run_id).into_iter().next()
}

/// The answer to an accepted start, resume or fork.
pub(crate) fn started(accepted: runs::Accepted) -> Started {
    Started {
        url: format!("/api/v1/runs/{}", accepted.run_id),
        run_id: accepted.run_id,
        status: accepted.status.to_owned(),
    }
}

/// Starts a run.
#[utoipa::path(post, path = "/api/v1/runs", request_body = StartRequest, responses(
    (status = 201, body = Started), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
    (status = 403, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody),
    (status = 422, body = ErrorBody)))]
pub async fn create_run(
    State(state): State<AppState>,
    body: Result<Json<StartRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(request) = body?;
    let accepted = runs::start(&state, request).await?;
    Ok((StatusCode::CREATED, Json(started(accepted))).into_response())
}

/// The run of a path parameter: a run of the index (an id or a unique prefix), from the
/// server's catalog.
pub(crate) async fn find_run(
    state: &AppState,
    run: &str,
) -> Result<Option<crate::engine_bridge::records::RunRecordRef>, ApiError> {
    Ok(find_shared_run(state, run).await?.map(Arc::unwrap_or_clone))
}

/// [`find_run`] without copying the record out of the catalog.
async fn find_shared_run(state: &AppState, run: &str) -> Result<Option<Arc<RunRecord>>, ApiError> {
    let found = match state.run_store().resolve_cached(run) {
        Some(found) => found.map_err(records::resolve_error),
        None => {
            let store = state.clone();
            let run = run.to_owned();
            tokio::task::spawn_blocking(move || {
                store
                    .run_store()
                    .resolve(&run)
                    .map_err(records::resolve_error)
            })
            .await
            .map_err(ApiError::internal)?
        }
    };
    match found {
        Ok(record) => Ok(Some(record)),
        Err(error) if error.kind() == ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// The run `run` names, or 404.
pub(crate) async fn require_run(
    state: &AppState,
    run: &str,
) -> Result<crate::engine_bridge::records::RunRecordRef, ApiError> {
    find_run(state, run)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("unknown run '{run}'")))
}

/// The `fabro inspect --json` document plus `pending_question`.
#[utoipa::path(get, path = "/api/v1/runs/{id}", params(("id" = String, Path, description = "run id or unique prefix")),
    responses((status = 200, body = RunDocument), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn get_run(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    match find_shared_run(&state, &id).await? {
        // Not started: no manifest to inspect yet.
        Some(record) if record.status == RunStatus::Queued => {
            let summary = state.active(&record.run_id).map_or_else(
                || records::run_summary(state.run_store(), &record),
                |active| active.queued_summary(),
            );
            Ok(Json(RunDocument::Queued(Box::new(summary))).into_response())
        }
        Some(record) => {
            if let Some(bytes) = state
                .documents()
                .cached_document(state.run_store(), &record)
            {
                return Ok(([(header::CONTENT_TYPE, "application/json")], bytes).into_response());
            }
            let status = record.status;
            let run_id = record.run_id.clone();
            let cache = state.clone();
            let built = tokio::task::spawn_blocking(move || {
                let store = cache.run_store();
                match cache.documents().document(store, &record) {
                    Some(cached) => cached.map(Built::Cached),
                    None => records::inspect(store, &record)
                        .map(|document| Built::Fresh(Box::new(document))),
                }
            })
            .await
            .map_err(ApiError::internal)??;
            Ok(match built {
                Built::Cached(bytes) => {
                    ([(header::CONTENT_TYPE, "application/json")], bytes).into_response()
                }
                Built::Fresh(mut document) => {
                    document.pending_question = pending_question(&state, &run_id, status);
                    Json(RunDocument::Inspected(document)).into_response()
                }
            })
        }
        None => state
            .active_by_prefix(&id)
            .map(|active| {
                Json(RunDocument::Queued(Box::new(active.queued_summary()))).into_response()
            })
            .ok_or_else(|| ApiError::not_found(format!("unknown run '{id}'"))),
    }
}

/// A run document: serialized from the cache, or built for this request.
enum Built {
    Cached(axum::body::Bytes),
    Fresh(Box<InspectDocument>),
}

/// Cancels a running or queued run.
#[utoipa::path(post, path = "/api/v1/runs/{id}/cancel", params(("id" = String, Path, description = "run id or unique prefix")),
    responses((status = 202, body = Canceling), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn cancel_run(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let run_id = runs::cancel(&state, &id)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(Canceling {
            run_id,
            status: "canceling".to_owned(),
        }),
    )
        .into_response())
}

/// Resumes a run (SPEC 8.7).
#[utoipa::path(post, path = "/api/v1/runs/{id}/resume", params(("id" = String, Path, description = "run id or unique prefix")),
    request_body = ResumeRequest,
    responses((status = 202, body = Started), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
    (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn resume_run(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Result<Option<Json<ResumeRequest>>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    let request = body?.map(|Json(request)| request).unwrap_or_default();
    let record = require_run(&state, &id).await?;
    let accepted = runs::resume(&state, &record.run_id, request).await?;
    Ok((StatusCode::ACCEPTED, Json(started(accepted))).into_response())
}

/// Workflows under the roots.
#[utoipa::path(get, path = "/api/v1/workflows", responses((status = 200, body = WorkflowList), (status = 401, body = ErrorBody)))]
pub async fn list_workflows(State(state): State<AppState>) -> Result<Json<WorkflowList>, ApiError> {
    let roots = state.bridge().roots().to_vec();
    let workflows = tokio::task::spawn_blocking(move || records::workflows(&roots))
        .await
        .map_err(ApiError::internal)?;
    Ok(Json(WorkflowList { workflows }))
}

/// The query extractor for repeated keys (`status=a&status=b`).
pub mod axum_extra_query {
    use axum::extract::FromRequestParts;
    use axum::http::request::Parts;
    use serde::de::DeserializeOwned;

    use crate::error::ApiError;

    /// Deserialises the query string, repeated keys becoming sequences.
    #[derive(Debug)]
    pub struct MultiQuery<T>(pub T);

    impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for MultiQuery<T> {
        type Rejection = ApiError;

        async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
            let query = parts.uri.query().unwrap_or_default();
            let mut map: serde_json::Map<String, serde_json::Value> = serde_json::Map::new();
            for pair in query.split('&').filter(|pair| !pair.is_empty()) {
                let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                let key = super::files::percent_decode(key)
                    .ok_or_else(|| ApiError::bad_request("bad query encoding"))?;
                let value = super::files::percent_decode(&value.replace('+', " "))
                    .ok_or_else(|| ApiError::bad_request("bad query encoding"))?;
                let value = match key.as_str() {
                    "limit" => value
                        .parse::<u64>()
                        .map(serde_json::Value::from)
                        .map_err(|_| {
                            ApiError::bad_request(format!(
                                "limit must be a number, found '{value}'"
                            ))
                        })?,
                    _ => serde_json::Value::String(value),
                };
                match map.get_mut(&key) {
                    Some(serde_json::Value::Array(items)) => items.push(value),
                    _ if key == "status" => {
                        map.insert(key, serde_json::Value::Array(vec![value]));
                    }
                    _ => {
                        map.insert(key, value);
                    }
                }
            }
            serde_json::from_value(serde_json::Value::Object(map))
                .map(MultiQuery)
                .map_err(|error| ApiError::bad_request(error.to_string()))
        }
    }
}
