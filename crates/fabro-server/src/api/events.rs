//! `GET /api/v1/runs/{id}/events` (SPEC 14.3): a page of stored events as JSON, or,
//! with `Accept: text/event-stream`, Server-Sent Events after `Last-Event-ID` (or
//! `?after=N`): the stored events, then live ones, until the terminal event.
//!
//! Every event comes from the run's store, read incrementally, for runs of this server
//! and runs a CLI process executes alike; ids are the stored ids, so a client that
//! reconnects with the last id it saw misses none and gets none twice (SPEC 14.4). The
//! streams of a run share one reader of the store ([`super::feed`]), woken after each
//! append when this server executes the run, else polling.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;
use fabro_api::EventPage;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::OwnedSemaphorePermit;
use utoipa::IntoParams;

use super::feed::{self, read_events, share, Handover, Live, Shared};
use fabro_engine::{EventKind, RunId, RunStore};

use crate::engine_bridge::records::{EventReader, StoredEvent};
use crate::error::{ApiError, ErrorBody, ErrorKind};
use crate::state::AppState;

/// Comment lines keep idle streams open (SPEC 14.3).
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// The comment.
const KEEP_ALIVE_COMMENT: &[u8] = b":\n\n";
/// A chunk of the stream grows by whole events up to about this many bytes.
const MAX_CHUNK: usize = 64 * 1024;
/// Largest page of the JSON form.
const MAX_LIMIT: usize = 1000;

/// Query of the events route.
#[derive(Debug, Default, Deserialize, IntoParams)]
pub struct EventsQuery {
    /// Events after this id (default 0: from the first event).
    pub after: Option<u64>,
    /// Page size of the JSON form, at most 1000.
    pub limit: Option<usize>,
}

/// A run's events.
#[utoipa::path(get, path = "/api/v1/runs/{id}/events",
    params(("id" = String, Path, description = "run id or unique prefix"), EventsQuery),
    responses((status = 200, description = "a page of stored events, or with `Accept: text/event-stream` the events as Server-Sent Events",
        content((EventPage = "application/json"), (String = "text/event-stream"))),
    (status = 401, body = ErrorBody), (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn events(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(query): Query<EventsQuery>,
) -> Result<Response, ApiError> {
    let run_id = match super::find_run(&state, &id).await? {
        Some(record) => record.run_id,
        None => state
            .active_by_prefix(&id)
            .map(|active| active.run_id.clone())
            .ok_or_else(|| ApiError::not_found(format!("unknown run '{id}'")))?,
    };
    let last_event_id = headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    let after = last_event_id.or(query.after).unwrap_or(0);
    let wants_stream = headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|accept| accept.contains("text/event-stream"));
    if !wants_stream {
        let limit = query.limit.unwrap_or(MAX_LIMIT).clamp(1, MAX_LIMIT);
        let store = Arc::clone(&state.stores().runs);
        let id = RunId::from(run_id.as_str());
        let page = tokio::task::spawn_blocking(move || page(store.as_ref(), &id, after, limit))
            .await
            .map_err(ApiError::internal)??;
        return Ok(Json(page).into_response());
    }
    let permit = state
        .streams()
        .try_acquire_owned()
        .map_err(|_| ApiError::new(ErrorKind::TooManyStreams, "too many open event streams"))?;
    let live = feed::subscribe(&state, &run_id).await;
    let store = Arc::clone(&state.stores().runs);
    let id = RunId::from(run_id.as_str());
    let handover = tokio::task::spawn_blocking(move || Handover::new(store, id, after, live))
        .await
        .map_err(ApiError::internal)?;
    let follow = Follow {
        source: Source::Live(handover),
        state,
        run_id,
        finished: false,
        _permit: permit,
    };
    let stream = futures_util::stream::unfold(follow, Follow::next);
    Ok((
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(stream),
    )
        .into_response())
}

fn page(
    store: &dyn RunStore,
    run_id: &RunId,
    after: u64,
    limit: usize,
) -> Result<EventPage, ApiError> {
    let events: Vec<StoredEvent> = store
        .event_reader(run_id, after)
        .read_new()
        .map_err(ApiError::internal)?
        .into_iter()
        .filter(|event| event.id > after)
        .take(limit)
        .collect();
    let next_after = events.last().map_or(after, |event| event.id);
    Ok(EventPage {
        events: events
            .into_iter()
            .filter_map(|event| RawValue::from_string(event.line).ok())
            .collect(),
        next_after,
    })
}

/// Where a stream's events come from.
enum Source {
    /// The run's feed, after the replay of the file.
    Live(Handover),
    /// The store alone, once the feed ended.
    File {
        tail: Box<dyn EventReader>,
        buffer: VecDeque<Shared>,
        after: u64,
    },
}

/// Whether run `run_id` waits in a shared store's queue (SPEC 18.2): its stream waits
/// for the worker that will claim it.
fn waits_for_a_worker(state: &AppState, run_id: &RunId) -> bool {
    let store = state.run_store();
    store.queue().is_some()
        && store
            .resolve(run_id.as_str())
            .is_ok_and(|record| record.status == fabro_engine::RunStatus::Queued)
}

/// The reader of no events: a placeholder while a stream switches its source.
struct NoEvents;

impl EventReader for NoEvents {
    fn read_new(&mut self) -> Result<Vec<StoredEvent>, fabro_engine::StoreError> {
        Ok(Vec::new())
    }
}

/// One event stream.
struct Follow {
    source: Source,
    state: AppState,
    run_id: String,
    finished: bool,
    _permit: OwnedSemaphorePermit,
}

impl Follow {
    /// The next chunk of the body: every event ready now (up to [`MAX_CHUNK`] bytes), so
    /// a stream that wakes after several appends writes them at once, or a keep-alive
    /// comment after [`KEEP_ALIVE`] without one; `None` at the end of the stream.
    async fn next(mut self) -> Option<(Result<Bytes, Infallible>, Follow)> {
        loop {
            if let Some(chunk) = self.ready_chunk() {
                return Some((Ok(chunk), self));
            }
            if self.finished || self.state.shutdown_token().is_cancelled() {
                return None;
            }
            match tokio::time::timeout(KEEP_ALIVE, self.wait()).await {
                Ok(true) => {}
                Ok(false) => return None,
                Err(_) => return Some((Ok(Bytes::from_static(KEEP_ALIVE_COMMENT)), self)),
            }
        }
    }

    /// The frames of the events buffered now, in one chunk; a single event's shared
    /// frame is sent as it is.
    fn ready_chunk(&mut self) -> Option<Bytes> {
        let first = self.next_buffered()?;
        self.finished |= EventKind::is_terminal_name(&first.name);
        if self.finished || !self.has_buffered() {
            return Some(first.frame.clone());
        }
        let mut chunk = Vec::with_capacity(first.frame.len() * 4);
        chunk.extend_from_slice(&first.frame);
        while chunk.len() < MAX_CHUNK {
            let Some(event) = self.next_buffered() else {
                break;
            };
            chunk.extend_from_slice(&event.frame);
            if EventKind::is_terminal_name(&event.name) {
                self.finished = true;
                break;
            }
        }
        Some(Bytes::from(chunk))
    }

    /// Waits until events may be buffered: `true`, or `false` at the end of the stream.
    async fn wait(&mut self) -> bool {
        let closed = match &mut self.source {
            Source::Live(handover) => match handover.poll_live() {
                Live::Ready => false,
                Live::Closed => true,
                Live::Empty => tokio::select! {
                    live = handover.wait_live() => live == Live::Closed,
                    () = self.state.shutdown_token().cancelled() => return false,
                },
            },
            Source::File { .. } => return self.follow_file().await,
        };
        if closed {
            self.switch_to_file();
        }
        true
    }

    /// Whether events wait in the buffer (possibly ones already sent, skipped later).
    fn has_buffered(&mut self) -> bool {
        match &mut self.source {
            Source::Live(handover) => {
                handover.has_buffered() || handover.poll_live() == Live::Ready
            }
            Source::File { buffer, .. } => !buffer.is_empty(),
        }
    }

    /// The next event above the last one sent.
    fn next_buffered(&mut self) -> Option<Shared> {
        match &mut self.source {
            Source::Live(handover) => handover.next_buffered(),
            Source::File { buffer, after, .. } => {
                while let Some(event) = buffer.pop_front() {
                    if event.id > *after {
                        *after = event.id;
                        return Some(event);
                    }
                }
                None
            }
        }
    }

    /// The feed ended (the run finished, or is executed nowhere): the store has the
    /// rest.
    fn switch_to_file(&mut self) {
        let placeholder = Source::File {
            tail: Box::new(NoEvents),
            buffer: VecDeque::new(),
            after: 0,
        };
        if let Source::Live(handover) = std::mem::replace(&mut self.source, placeholder) {
            let after = handover.after();
            let (tail, buffer) = handover.into_tail();
            self.source = Source::File {
                tail,
                buffer,
                after,
            };
        }
    }

    /// Reads the store until it has new events (`true`), or the run is executed
    /// nowhere, does not wait in a queue and has none left (`false`).
    async fn follow_file(&mut self) -> bool {
        let Source::File { tail, buffer, .. } = &mut self.source else {
            return false;
        };
        let (state, finished) = (&self.state, &mut self.finished);
        let run_id = RunId::from(self.run_id.as_str());
        feed::on_appends(&self.state, &self.run_id, |executed_here| {
            buffer.extend(share(read_events(tail.as_mut())));
            if !buffer.is_empty() {
                return ControlFlow::Break(true);
            }
            if !executed_here
                && !state.run_store().is_active(&run_id)
                && !waits_for_a_worker(state, &run_id)
            {
                // Whatever was appended before the lock was let go, then the end.
                buffer.extend(share(read_events(tail.as_mut())));
                *finished = true;
                return ControlFlow::Break(!buffer.is_empty());
            }
            ControlFlow::Continue(())
        })
        .await
        .unwrap_or(false)
    }
}
