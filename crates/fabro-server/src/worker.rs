//! Workers (SPEC 18.2): a process that claims the runs of a shared store's queue,
//! executes each under a lease that its store renews, and lets go of it at its end.
//!
//! [`work`] is the loop of `fabro worker` (an [`AppState`] without a listener, whose
//! `max_concurrent_runs` is the worker's concurrency): it claims while a slot is free,
//! prepares a claimed run as the server would (a new run from its queued request, a run
//! that started before from its newest checkpoint) and executes it through
//! [`runs::launch`]. The store fences every write of the run with the lease's epoch and
//! stops the run when the lease is lost; [`runs`] lets go of the lease at the run's
//! end, and queues the runs of a server without a worker (`--no-worker`).

use std::sync::Arc;
use std::time::Duration;

use fabro_engine::{Claim, Interviewer, Notice, PreparedRun, RunId, RunStatus, RunStore};
use tokio::sync::broadcast;
use tokio::sync::OwnedSemaphorePermit;

use crate::engine_bridge::{ResumeRequest, StartRequest};
use crate::error::ApiError;
use crate::runs;
use crate::state::AppState;

pub use crate::settings::WorkerOptions;

/// `lease_ttl` when nothing sets it (SPEC 18.2).
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

/// The longest a worker waits before it looks for a run whose lease ran out (nothing
/// announces those).
const MAX_POLL: Duration = Duration::from_secs(1);

/// Claims and executes runs until the state's shutdown token fires; nothing to do on a
/// store without a queue.
pub async fn work(state: AppState, options: WorkerOptions) {
    let runs = Arc::clone(&state.stores().runs);
    if runs.queue().is_none() {
        tracing::error!("the store has no queue; the worker claims nothing");
        return;
    }
    let concurrency = u32::try_from(state.settings().max_concurrent_runs).unwrap_or(u32::MAX);
    let mut notices = runs.notices();
    let poll = (options.lease_ttl / 4).clamp(Duration::from_millis(50), MAX_POLL);
    let stopping = state.shutdown_token().clone();
    // The worker's row says it is alive while its slots are busy too.
    let heartbeat = {
        let (runs, options, stopping) = (Arc::clone(&runs), options.clone(), stopping.clone());
        tokio::spawn(async move {
            loop {
                register(&runs, &options, concurrency).await;
                tokio::select! {
                    () = stopping.cancelled() => return,
                    () = tokio::time::sleep(options.lease_ttl / 3) => {}
                }
            }
        })
    };
    claim_while_slots_are_free(&state, &runs, &options, &mut notices, poll).await;
    heartbeat.abort();
}

/// The claim loop of [`work`], until the shutdown token fires.
async fn claim_while_slots_are_free(
    state: &AppState,
    runs: &Arc<dyn RunStore>,
    options: &WorkerOptions,
    notices: &mut Option<broadcast::Receiver<Notice>>,
    poll: Duration,
) {
    let stopping = state.shutdown_token().clone();
    loop {
        let slot = tokio::select! {
            biased;
            () = stopping.cancelled() => return,
            slot = state.slots().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => return,
            },
        };
        match claim(runs, options).await {
            Ok(Some(claim)) => {
                start_claimed(state, claim, slot, &options.name).await;
                continue;
            }
            Ok(None) => {}
            Err(error) => tracing::warn!(worker = %options.name, %error, "cannot claim a run"),
        }
        drop(slot);
        tokio::select! {
            () = stopping.cancelled() => return,
            () = announced(notices) => {}
            () = tokio::time::sleep(poll) => {}
        }
    }
}

/// Until the store announces a queued run, or says that announcements were missed;
/// forever on a store without notices.
async fn announced(notices: &mut Option<broadcast::Receiver<Notice>>) {
    let Some(receiver) = notices.as_mut() else {
        return std::future::pending().await;
    };
    loop {
        match receiver.recv().await {
            Ok(Notice::Queued(_) | Notice::Missed)
            | Err(broadcast::error::RecvError::Lagged(_)) => return,
            Ok(_) => {}
            Err(broadcast::error::RecvError::Closed) => {
                *notices = None;
                return std::future::pending().await;
            }
        }
    }
}

/// Records the worker in the store (its row's `last_renewal` is now).
async fn register(runs: &Arc<dyn RunStore>, options: &WorkerOptions, concurrency: u32) {
    let (runs, options) = (Arc::clone(runs), options.clone());
    let registered = tokio::task::spawn_blocking(move || {
        let queue = runs
            .queue()
            .ok_or_else(|| "the store has no queue".to_owned())?;
        queue
            .register_worker(&options.name, &options.host, concurrency)
            .map_err(|error| fabro_engine::error_chain(&error))
    })
    .await;
    if let Ok(Err(error)) = registered {
        tracing::warn!(%error, "cannot register the worker");
    }
}

/// The next run this worker claims, if any.
async fn claim(runs: &Arc<dyn RunStore>, options: &WorkerOptions) -> Result<Option<Claim>, String> {
    let (runs, name, ttl) = (Arc::clone(runs), options.name.clone(), options.lease_ttl);
    tokio::task::spawn_blocking(move || {
        let queue = runs
            .queue()
            .ok_or_else(|| "the store has no queue".to_owned())?;
        queue
            .claim(&name, ttl)
            .map_err(|error| fabro_engine::error_chain(&error))
    })
    .await
    .map_err(|error| error.to_string())?
}

/// What became of a claimed run while it was prepared.
enum Prepared {
    /// It is ready to execute: the run, its workflow's name, whether a cancel waited
    /// for it.
    Run(Box<PreparedRun>, String, bool),
    /// Its newest checkpoint is final: its worker died after finishing it and before
    /// recording its end, which is recorded now.
    Finished(RunStatus),
}

/// Prepares the claimed run and launches it in `slot`; a run that cannot be prepared
/// ends `fail` (its cause logged), so that no worker claims it again.
async fn start_claimed(state: &AppState, claim: Claim, slot: OwnedSemaphorePermit, worker: &str) {
    let interviewer = runs::interviewer_of(state);
    let asking: Arc<dyn Interviewer> = Arc::clone(&interviewer) as Arc<dyn Interviewer>;
    let bridge = state.bridge().clone();
    let run_id = claim.run_id.as_str().to_owned();
    let id = run_id.clone();
    let prepared =
        tokio::task::spawn_blocking(move || prepare_claimed(&bridge, claim, &id, asking))
            .await
            .map_err(ApiError::internal)
            .and_then(|prepared| prepared);
    let end = match prepared {
        Ok(Prepared::Run(mut prepared, name, cancelled)) => {
            prepared.set_worker(worker);
            runs::launch_with(
                state,
                *prepared,
                &interviewer,
                name,
                Some(runs::Claimed { slot, cancelled }),
            );
            return;
        }
        Ok(Prepared::Finished(status)) => {
            tracing::info!(%run_id, %status, "a claimed run had finished; its end is recorded");
            status
        }
        Err(error) => {
            tracing::error!(%run_id, error = %fabro_engine::error_chain(&error), "cannot start a claimed run; it fails");
            RunStatus::Fail
        }
    };
    let runs = Arc::clone(&state.stores().runs);
    let _ = tokio::task::spawn_blocking(move || {
        let id = RunId::from(run_id.as_str());
        let _ = runs.register_end(&id, end);
        runs.queue().map(|queue| queue.release(&id))
    })
    .await;
}

/// [`start_claimed`]'s preparation, on a blocking thread.
fn prepare_claimed(
    bridge: &crate::engine_bridge::EngineBridge,
    claim: Claim,
    id: &str,
    asking: Arc<dyn Interviewer>,
) -> Result<Prepared, ApiError> {
    let invalid = |error: serde_json::Error| {
        ApiError::bad_request(format!(
            "the queued request of run {id} is not valid: {error}"
        ))
    };
    let (prepared, name) = match (claim.started, claim.request) {
        (false, Some(text)) => {
            let request: StartRequest = serde_json::from_str(&text).map_err(invalid)?;
            // Nothing of the run is stored: what an attempt that stopped before its
            // records left here is made anew.
            let left = fabro_engine::local::RunPaths::new(bridge.root(), id);
            if left.run_dir().is_dir() {
                let _ = fs_err::remove_dir_all(left.run_dir());
            }
            let name = runs::workflow_name_of(&request);
            (bridge.prepare_new(&request, asking)?, name)
        }
        (_, text) => {
            let request: ResumeRequest = match text {
                Some(text) => serde_json::from_str(&text).map_err(invalid)?,
                None => ResumeRequest::default(),
            };
            match bridge.resume_with(id, &request, asking)? {
                Ok(prepared) => (prepared, String::new()),
                Err(fabro_engine::RunError::AlreadyFinished { status, .. }) => {
                    return Ok(Prepared::Finished(status))
                }
                Err(error) => return Err(ApiError::from(error)),
            }
        }
    };
    // A cancel that waited in the store for the run (SPEC 18.2).
    let cancelled = bridge
        .stores()
        .runs
        .cancel_requested(&RunId::from(id))
        .unwrap_or(false);
    Ok(Prepared::Run(Box::new(prepared), name, cancelled))
}

/// `[worker] lease_ttl` of `{root}/worker.toml` (a duration such as `"30s"`), if set.
pub fn lease_ttl_setting(root: &std::path::Path) -> Result<Option<Duration>, String> {
    let path = root.join("worker.toml");
    let text = match fs_err::read_to_string(&path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(format!("cannot read {}: {error}", path.display())),
    };
    let document: toml::Table = text
        .parse()
        .map_err(|error| format!("{} is not valid TOML: {error}", path.display()))?;
    let Some(value) = document
        .get("worker")
        .and_then(|worker| worker.get("lease_ttl"))
    else {
        return Ok(None);
    };
    value
        .as_str()
        .and_then(fabro_language::value::parse_duration)
        .filter(|ttl| *ttl >= Duration::from_secs(1))
        .map(Some)
        .ok_or_else(|| {
            format!(
                "{}: worker.lease_ttl must be a duration of at least 1s, such as \"30s\"",
                path.display()
            )
        })
}
