//! Starting, queueing, cancelling and resuming runs in the server process (SPEC 14.2),
//! and what happens to them when the server stops (SPEC 14.1).

use std::sync::Arc;
use std::time::Duration;

use fabro_engine::local::{queued_runs, remove_queued, write_queued, QueuedRun, RunPaths};
use fabro_engine::{Interviewer, PreparedRun, QueuedStart, RunId};
use tokio::sync::OwnedSemaphorePermit;

use crate::engine_bridge::{
    records, ForkRequest, ResumeRequest, RewindRequest, RunStatus, StartRequest, StoreInterviewer,
};
use crate::error::{ApiError, ErrorKind};
use crate::settings::WorkerOptions;
use crate::state::{ActiveRun, ActiveSink, AppState};

/// How long shutdown waits for cancelled runs to write their final records.
pub const SHUTDOWN_PATIENCE: Duration = Duration::from_secs(8);

/// How long a resume waits for a cancelled run of this server to stop.
const STOP_PATIENCE: Duration = Duration::from_secs(10);

/// A run accepted by [`start`] or [`resume`].
#[derive(Debug, Clone)]
pub struct Accepted {
    /// The run id.
    pub run_id: String,
    /// `queued` or `running`.
    pub status: &'static str,
}

fn refuse_when_stopping(state: &AppState) -> Result<(), ApiError> {
    if state.shutdown_token().is_cancelled() {
        return Err(ApiError::new(
            ErrorKind::ShuttingDown,
            "the server is shutting down",
        ));
    }
    Ok(())
}

/// Validates and prepares a new run, then queues it.
pub async fn start(state: &AppState, mut request: StartRequest) -> Result<Accepted, ApiError> {
    refuse_when_stopping(state)?;
    if let Some(run_id) = &request.run_id {
        if state.active(run_id).is_some() {
            return Err(ApiError::conflict(format!("run {run_id} already exists")));
        }
    }
    if let Some(worker) = embedded(state) {
        return match state.slots().try_acquire_owned() {
            Ok(slot) => start_here(state, request, &worker, slot).await,
            // Every slot is busy: the run waits in the queue for any worker.
            Err(_) => enqueue(state, request).await,
        };
    }
    if state.settings().no_worker && state.run_store().queue().is_some() {
        return enqueue(state, request).await;
    }
    let interviewer = interviewer_of(state);
    let asking: Arc<dyn Interviewer> = Arc::clone(&interviewer) as Arc<dyn Interviewer>;
    let bridge = state.bridge().clone();
    let workflow_name = workflow_name_of(&request);
    let name = workflow_name.clone();
    let prepared = tokio::task::spawn_blocking(move || {
        bridge.pin_repository(&mut request)?;
        let prepared = bridge.prepare_new(&request, asking)?;
        mark_queued(&bridge, &prepared, request, name)?;
        Ok::<_, ApiError>(prepared)
    })
    .await
    .map_err(ApiError::internal)??;
    Ok(launch(state, prepared, &interviewer, workflow_name))
}

/// The name a run of `request` is listed with before its manifest exists: the
/// workflow file's stem, or empty for DOT text.
pub(crate) fn workflow_name_of(request: &StartRequest) -> String {
    request
        .workflow
        .as_deref()
        .map(|workflow| {
            std::path::Path::new(workflow)
                .file_stem()
                .map_or_else(String::new, |stem| stem.to_string_lossy().into_owned())
        })
        .unwrap_or_default()
}

/// Writes the run's `queued.json` (SPEC 14.2 status `queued`): the index lists the run
/// as queued until its manifest exists, and a server that stops before starting it
/// leaves the request for the next one.
fn mark_queued(
    bridge: &crate::engine_bridge::EngineBridge,
    prepared: &PreparedRun,
    mut request: StartRequest,
    workflow_name: String,
) -> Result<(), ApiError> {
    request.run_id = Some(prepared.run_id().to_owned());
    if request.work_dir.is_none() && request.repository.is_none() {
        request.work_dir = bridge
            .roots()
            .first()
            .map(|root| root.display().to_string());
    }
    let workflow_path = request.workflow.clone().unwrap_or_default();
    let goal = request.goal.clone().unwrap_or_default();
    let stored = serde_json::to_value(&request).map_err(ApiError::internal)?;
    let queued = QueuedRun::now(
        prepared.run_id().to_owned(),
        workflow_name,
        workflow_path,
        goal,
        stored,
    );
    write_queued(prepared.run_dir(), &queued).map_err(|error| {
        ApiError::internal(format!(
            "cannot write {}: {error}",
            prepared.run_dir().display()
        ))
    })
}

/// Whether the run `run_id`, whose `queued.json` is still under `root`, started before:
/// its records are in the store (a server that died while it ran left the file; the
/// local store's manifest beside it hides it from `queued_runs`, a shared store's
/// does not). Its stale `queued.json` is removed: the run is interrupted, not queued.
fn started_before(
    store: &dyn fabro_engine::RunStore,
    root: &std::path::Path,
    run_id: &str,
) -> bool {
    if store
        .read_manifest(&fabro_engine::RunId::from(run_id))
        .is_err()
    {
        return false;
    }
    if let Err(error) = remove_queued(RunPaths::new(root, run_id).run_dir()) {
        tracing::warn!(%run_id, %error, "cannot remove a started run's queued.json");
    }
    true
}

/// Starts the runs a previous server left `queued` under this root (SPEC 14.1), oldest
/// first. Returns the ids started.
pub async fn start_queued(state: &AppState) -> Vec<String> {
    let root = state.bridge().root().to_path_buf();
    let reader = state.clone();
    let queued = tokio::task::spawn_blocking(move || {
        queued_runs(&root)
            .into_iter()
            .filter(|waiting| !started_before(reader.run_store(), &root, &waiting.run_id))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    let mut started = Vec::new();
    for waiting in queued {
        let run_dir = RunPaths::new(state.bridge().root(), &waiting.run_id)
            .run_dir()
            .to_path_buf();
        let request: StartRequest = match serde_json::from_value(waiting.request) {
            Ok(request) => request,
            Err(error) => {
                tracing::warn!(run_id = %waiting.run_id, %error, "cannot read a queued run's request");
                continue;
            }
        };
        // Nothing ran yet: the directory holds only what preparing left; preparing
        // again allocates it anew.
        if let Err(error) = fs_err::remove_dir_all(&run_dir) {
            tracing::warn!(run_id = %waiting.run_id, %error, "cannot restart a queued run");
            continue;
        }
        match start(state, request).await {
            Ok(accepted) => started.push(accepted.run_id),
            Err(error) => {
                tracing::warn!(run_id = %waiting.run_id, error = %fabro_engine::error_chain(&error), "cannot start a queued run")
            }
        }
    }
    started
}

/// Whether this server no longer executes run `run_id`: one cancelled a moment ago may
/// still be writing its final records, and one that ended is let go a moment after its
/// end is stored; either is waited for (up to [`STOP_PATIENCE`]).
async fn let_go(state: &AppState, run_id: &str) -> bool {
    let deadline = tokio::time::Instant::now() + STOP_PATIENCE;
    while state
        .active(run_id)
        .is_some_and(|active| active.cancel.is_cancelled() || active.has_ended())
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    state.active(run_id).is_none()
}

/// Resumes run `run_id` (SPEC 8.7) in this process.
pub async fn resume(
    state: &AppState,
    run_id: &str,
    request: ResumeRequest,
) -> Result<Accepted, ApiError> {
    refuse_when_stopping(state)?;
    if !let_go(state, run_id).await {
        return Err(ApiError::conflict(format!("run {run_id} is running")));
    }
    if let Some(worker) = embedded(state) {
        return match state.slots().try_acquire_owned() {
            Ok(slot) => resume_here(state, run_id, request, &worker, slot).await,
            Err(_) => requeue(state, run_id, request).await,
        };
    }
    if state.settings().no_worker && state.run_store().queue().is_some() {
        return requeue(state, run_id, request).await;
    }
    let interviewer = interviewer_of(state);
    let asking: Arc<dyn Interviewer> = Arc::clone(&interviewer) as Arc<dyn Interviewer>;
    let bridge = state.bridge().clone();
    let id = run_id.to_owned();
    let prepared =
        tokio::task::spawn_blocking(move || bridge.prepare_resume(&id, &request, asking))
            .await
            .map_err(ApiError::internal)??;
    Ok(launch(state, prepared, &interviewer, String::new()))
}

/// Forks run `run_id` (SPEC 20.2): the fork is a new run of this process, queued like
/// one.
pub async fn fork(
    state: &AppState,
    run_id: &str,
    request: ForkRequest,
) -> Result<Accepted, ApiError> {
    refuse_when_stopping(state)?;
    if let Some(new_id) = &request.run_id {
        if state.active(new_id).is_some() {
            return Err(ApiError::conflict(format!("run {new_id} already exists")));
        }
    }
    let interviewer = interviewer_of(state);
    let asking: Arc<dyn Interviewer> = Arc::clone(&interviewer) as Arc<dyn Interviewer>;
    let bridge = state.bridge().clone();
    let id = run_id.to_owned();
    let prepared = tokio::task::spawn_blocking(move || bridge.prepare_fork(&id, &request, asking))
        .await
        .map_err(ApiError::internal)??;
    Ok(launch(state, prepared, &interviewer, String::new()))
}

/// Rewinds run `run_id` (SPEC 20.3); a run of this server that runs or waits is
/// refused (409), as the engine refuses one that another process holds.
pub async fn rewind(
    state: &AppState,
    run_id: &str,
    request: RewindRequest,
) -> Result<fabro_api::Rewound, ApiError> {
    if !let_go(state, run_id).await {
        return Err(ApiError::conflict(format!(
            "run {run_id} is running; cancel it before rewinding it"
        )));
    }
    let bridge = state.bridge().clone();
    let id = run_id.to_owned();
    let rewound = tokio::task::spawn_blocking(move || bridge.rewind(&id, &request))
        .await
        .map_err(ApiError::internal)??;
    Ok(fabro_api::Rewound {
        run_id: rewound.run_id,
        k: rewound.k,
        to_rank: rewound.to_rank,
        node_id: rewound.node_id,
        visit: rewound.visit,
    })
}

/// The interviewer of a run this server starts: its questions are published in the run
/// store (once [`launch`] names the run) and answered through the store or in process.
pub(crate) fn interviewer_of(state: &AppState) -> Arc<StoreInterviewer> {
    Arc::new(StoreInterviewer::unbound(Arc::clone(&state.stores().runs)))
}

/// Registers `prepared` and spawns its task: it waits for a slot (`queued`; a worker's
/// claimed run comes with its `slot`), then executes. A run cancelled while queued
/// (here, or in the store before a worker claimed it: `cancelled`) executes with its
/// token already fired, so it ends `canceled` before its first stage.
pub(crate) fn launch(
    state: &AppState,
    prepared: PreparedRun,
    interviewer: &StoreInterviewer,
    workflow_name: String,
) -> Accepted {
    launch_with(state, prepared, interviewer, workflow_name, None)
}

/// A run a worker claimed (SPEC 18.2): its slot, and whether a cancel waited for it in
/// the store.
pub(crate) struct Claimed {
    pub(crate) slot: OwnedSemaphorePermit,
    pub(crate) cancelled: bool,
}

/// [`launch`], or the launch of a run a worker `claimed`.
pub(crate) fn launch_with(
    state: &AppState,
    prepared: PreparedRun,
    interviewer: &StoreInterviewer,
    workflow_name: String,
    claimed: Option<Claimed>,
) -> Accepted {
    let (slot, cancelled) = match claimed {
        Some(Claimed { slot, cancelled }) => (Some(slot), cancelled),
        None => (None, false),
    };
    let has_slot = slot.is_some();
    let run_id = prepared.run_id().to_owned();
    interviewer.bind(&fabro_engine::RunId::from(run_id.as_str()));
    let active = Arc::new(ActiveRun::new(
        run_id.clone(),
        prepared.run_dir().to_path_buf(),
        interviewer.handle(),
        prepared.steering(),
        workflow_name,
    ));
    if cancelled {
        // Cancelled before it started: it ends `canceled` before its first stage.
        active.cancel.cancel();
    }
    state.insert(Arc::clone(&active));
    let slots = state.slots();
    let task_state = state.clone();
    let task_run = Arc::clone(&active);
    let stopping = state.shutdown_token().clone();
    state.tasks().spawn(async move {
        // Shutdown first: a run still waiting when the server stops stays queued in
        // the store for the next server (SPEC 14.1), even if its token fired since.
        let permit = match slot {
            Some(slot) => Some(slot),
            None => tokio::select! {
                biased;
                () = stopping.cancelled() => None,
                () = task_run.cancel.cancelled() => None,
                permit = slots.acquire_owned() => permit.ok(),
            },
        };
        if stopping.is_cancelled() {
            task_state.remove(&task_run.run_id);
            task_run.notify.notify_waiters();
            return;
        }
        task_run.mark_started();
        let sink = Arc::new(ActiveSink(Arc::clone(&task_run)));
        let run_dir = prepared.run_dir().to_path_buf();
        let result = prepared.execute(task_run.cancel.clone(), vec![sink]).await;
        if let Err(error) = &result {
            tracing::error!(run_id = %task_run.run_id, error = %fabro_engine::error_chain(error), "run stopped with an engine error");
        }
        if let Err(error) = remove_queued(&run_dir) {
            tracing::warn!(run_id = %task_run.run_id, %error, "cannot remove queued.json");
        }
        task_state.bridge().remove_checkout(&task_run.run_id);
        let_go_of(&task_state, &task_run.run_id).await;
        task_state.remove(&task_run.run_id);
        task_run.notify.notify_waiters();
        drop(permit);
    });
    Accepted {
        run_id,
        status: if !has_slot && active.is_queued() && state.slots().available_permits() == 0 {
            "queued"
        } else {
            "running"
        },
    }
}

/// Cancels a run (SPEC 14.2): a run of this server through its token; a run another
/// process executes through a request written to a shared store (SPEC 18.2), else
/// through SIGINT to the holder of its lock. 409 when it is neither running nor queued.
pub fn cancel(state: &AppState, run: &str) -> Result<String, ApiError> {
    if let Some(active) = state.active_by_prefix(run) {
        if active.cancel.is_cancelled() {
            return Err(ApiError::conflict(format!(
                "run {} is being canceled already",
                active.run_id
            )));
        }
        if active.has_ended() {
            return Err(ApiError::conflict(format!(
                "run {} has ended",
                active.run_id
            )));
        }
        active.cancel.cancel();
        return Ok(active.run_id.clone());
    }
    let record = records::resolve(state.run_store(), run)?;
    // A run queued for the workers: its cancel waits for it in the store, and the
    // worker that claims it ends it `canceled`.
    let queued_for_workers =
        record.status == RunStatus::Queued && state.run_store().queue().is_some();
    if record.status != RunStatus::Running && !queued_for_workers {
        return Err(ApiError::conflict(format!(
            "run {} is not running (status {})",
            record.run_id,
            record.status.as_str()
        )));
    }
    let run_id = fabro_engine::RunId::from(record.run_id.as_str());
    if state
        .run_store()
        .request_cancel(&run_id)
        .map_err(ApiError::internal)?
    {
        return Ok(record.run_id);
    }
    let pid = fabro_engine::local::lock_pid(&record.run_dir)
        .and_then(|pid| i32::try_from(pid).ok())
        .filter(|_| records::is_locked(state.run_store(), &record.run_id))
        .ok_or_else(|| ApiError::conflict(format!("run {} is not running", record.run_id)))?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGINT,
    )
    .map_err(|error| ApiError::conflict(format!("cannot signal run {}: {error}", record.run_id)))?;
    Ok(record.run_id)
}

/// Graceful shutdown (SPEC 14.1): refuse new runs, cancel every executing run as a
/// first Ctrl-C would (queued ones stay queued: the shutdown token fires first), and
/// wait (bounded) until they have written their final records.
pub async fn shut_down(state: &AppState) {
    state.shutdown_token().cancel();
    for active in state.all_active() {
        active.cancel.cancel();
    }
    state.tasks().close();
    if tokio::time::timeout(SHUTDOWN_PATIENCE, state.tasks().wait())
        .await
        .is_err()
    {
        tracing::warn!("runs did not stop within {}s", SHUTDOWN_PATIENCE.as_secs());
    }
}

/// `[server] resume_interrupted` (SPEC 14.1): resumes every interrupted run that a
/// server started under this root. Returns the ids resumed.
pub async fn resume_interrupted(state: &AppState) -> Vec<String> {
    let reader = state.clone();
    let candidates = tokio::task::spawn_blocking(move || {
        let store = reader.run_store();
        records::list_runs(store)
            .unwrap_or_default()
            .into_iter()
            .filter(|record| record.status == RunStatus::Interrupted)
            .filter(|record| records::started_by_server(store, &record.run_id))
            .map(|record| record.run_id)
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    let mut resumed = Vec::new();
    for run_id in candidates {
        match resume(state, &run_id, ResumeRequest::default()).await {
            Ok(accepted) => resumed.push(accepted.run_id),
            Err(error) => {
                tracing::warn!(%run_id, error = %fabro_engine::error_chain(&error), "cannot resume interrupted run")
            }
        }
    }
    resumed
}

/// At the end of a run this process executed: its lease, if it held one, ends; when a
/// standalone worker stops, the run goes back to the queue instead, for another worker
/// to resume at once.
async fn let_go_of(state: &AppState, run_id: &str) {
    let runs = Arc::clone(&state.stores().runs);
    if runs.queue().is_none() {
        return;
    }
    let back = state.hands_back() && state.shutdown_token().is_cancelled();
    let id = RunId::from(run_id);
    let ended = tokio::task::spawn_blocking(move || match runs.queue() {
        Some(queue) if back => queue.hand_back(&id),
        Some(queue) => queue.release(&id),
        None => Ok(()),
    })
    .await;
    match ended {
        // Said when it was lost.
        Ok(Ok(())) | Ok(Err(fabro_engine::StoreError::LostLease { .. })) => {}
        Ok(Err(error)) => {
            tracing::warn!(%run_id, error = %fabro_engine::error_chain(&error), "cannot end the lease of a run")
        }
        Err(error) => tracing::warn!(%run_id, %error, "cannot end the lease of a run"),
    }
}

/// Accepts a run for the workers (a server with `--no-worker` on a shared store): it is
/// prepared as this server would prepare it, so that a bad request is refused now, then
/// let go and queued with its id; the worker that claims it prepares it anew.
async fn enqueue(state: &AppState, mut request: StartRequest) -> Result<Accepted, ApiError> {
    let bridge = state.bridge().clone();
    let runs = Arc::clone(&state.stores().runs);
    let asking: Arc<dyn Interviewer> = interviewer_of(state);
    tokio::task::spawn_blocking(move || {
        bridge.pin_repository(&mut request)?;
        let prepared = bridge.prepare_new(&request, asking)?;
        let run_id = prepared.run_id().to_owned();
        let run_dir = prepared.run_dir().to_path_buf();
        drop(prepared);
        bridge.remove_checkout(&run_id);
        if let Err(error) = fs_err::remove_dir_all(&run_dir) {
            tracing::warn!(%run_id, %error, "cannot remove a queued run's directory");
        }
        let queued = queued_start(&bridge, request, &run_id)?;
        let queue = queue_of(runs.as_ref())?;
        if !queue.enqueue(&queued).map_err(ApiError::internal)? {
            return Err(ApiError::conflict(format!("run {run_id} already exists")));
        }
        Ok(Accepted {
            run_id,
            status: "queued",
        })
    })
    .await
    .map_err(ApiError::internal)?
}

/// What the store keeps of run `run_id`'s start `request`, for whichever worker starts
/// it (again, when it dies before its first checkpoint): with its id, and with the
/// server's first root as its directory when it names none.
pub(crate) fn queued_start(
    bridge: &crate::engine_bridge::EngineBridge,
    mut request: StartRequest,
    run_id: &str,
) -> Result<QueuedStart, ApiError> {
    request.run_id = Some(run_id.to_owned());
    if request.work_dir.is_none() && request.repository.is_none() {
        request.work_dir = bridge
            .roots()
            .first()
            .map(|root| root.display().to_string());
    }
    Ok(QueuedStart {
        run_id: RunId::from(run_id),
        workflow_name: workflow_name_of(&request),
        workflow_path: request.workflow.clone().unwrap_or_default(),
        goal: request.goal.clone().unwrap_or_default(),
        priority: request.priority.unwrap_or(0),
        request: serde_json::to_string(&request).map_err(ApiError::internal)?,
    })
}

/// Queues the resume of run `run_id` for the workers (a server with `--no-worker` on a
/// shared store): 409 when it is queued or running.
async fn requeue(
    state: &AppState,
    run_id: &str,
    request: ResumeRequest,
) -> Result<Accepted, ApiError> {
    let runs = Arc::clone(&state.stores().runs);
    let id = run_id.to_owned();
    tokio::task::spawn_blocking(move || {
        let record = records::resolve(runs.as_ref(), &id)?;
        let text = serde_json::to_string(&request).map_err(ApiError::internal)?;
        let queue = queue_of(runs.as_ref())?;
        if !queue
            .requeue(&RunId::from(record.run_id.as_str()), &text)
            .map_err(ApiError::internal)?
        {
            return Err(ApiError::conflict(format!(
                "run {} is queued or running",
                record.run_id
            )));
        }
        Ok(Accepted {
            run_id: record.run_id,
            status: "queued",
        })
    })
    .await
    .map_err(ApiError::internal)?
}

/// The embedded worker of a server on a shared store, if it has one (SPEC 18.2).
pub(crate) fn embedded(state: &AppState) -> Option<WorkerOptions> {
    let worker = state.settings().embedded_worker.clone()?;
    state.run_store().queue().is_some().then_some(worker)
}

/// Starts a run this server accepted, in `slot`, under a lease of its embedded
/// `worker`: queued already claimed, so that no other worker takes it while the lease
/// lives and any takes it over when it lapses.
pub(crate) async fn start_here(
    state: &AppState,
    mut request: StartRequest,
    worker: &WorkerOptions,
    slot: OwnedSemaphorePermit,
) -> Result<Accepted, ApiError> {
    let bridge = state.bridge().clone();
    let runs = Arc::clone(&state.stores().runs);
    let name = workflow_name_of(&request);
    let (owner, ttl) = (worker.name.clone(), worker.lease_ttl);
    launch_held(state, worker, slot, name, move |asking| {
        bridge.pin_repository(&mut request)?;
        let prepared = bridge.prepare_new(&request, asking)?;
        let run_id = prepared.run_id().to_owned();
        let queued = queued_start(&bridge, request, &run_id)?;
        match queue_of(runs.as_ref())?
            .enqueue_claimed(&queued, &owner, ttl)
            .map_err(ApiError::internal)?
        {
            Some(_) => Ok(prepared),
            None => Err(ApiError::conflict(format!("run {run_id} already exists"))),
        }
    })
    .await
}

/// Resumes run `run_id` in `slot` under a lease of the embedded `worker`, claimed
/// before the resume is prepared; a resume that cannot be prepared lets go of it.
pub(crate) async fn resume_here(
    state: &AppState,
    run_id: &str,
    request: ResumeRequest,
    worker: &WorkerOptions,
    slot: OwnedSemaphorePermit,
) -> Result<Accepted, ApiError> {
    let bridge = state.bridge().clone();
    let runs = Arc::clone(&state.stores().runs);
    let (id, owner, ttl) = (run_id.to_owned(), worker.name.clone(), worker.lease_ttl);
    launch_held(state, worker, slot, String::new(), move |asking| {
        let queue = queue_of(runs.as_ref())?;
        let text = serde_json::to_string(&request).map_err(ApiError::internal)?;
        let run = RunId::from(id.as_str());
        if queue
            .resume_claimed(&run, &text, &owner, ttl)
            .map_err(ApiError::internal)?
            .is_none()
        {
            return Err(ApiError::conflict(format!("run {id} is running")));
        }
        bridge.prepare_resume(&id, &request, asking).inspect_err(|_| {
            if let Err(error) = queue.release(&run) {
                tracing::warn!(run_id = %id, error = %fabro_engine::error_chain(&error), "cannot let go of a resume that failed");
            }
        })
    })
    .await
}

/// The store's queue, or 500.
fn queue_of(runs: &dyn fabro_engine::RunStore) -> Result<&dyn fabro_engine::RunQueue, ApiError> {
    runs.queue()
        .ok_or_else(|| ApiError::internal("the store has no queue"))
}

/// Prepares a run with `prepare` (off the async threads, given the run's interviewer)
/// that claims it for the embedded `worker`, and launches it in `slot`.
async fn launch_held(
    state: &AppState,
    worker: &WorkerOptions,
    slot: OwnedSemaphorePermit,
    name: String,
    prepare: impl FnOnce(Arc<dyn Interviewer>) -> Result<PreparedRun, ApiError> + Send + 'static,
) -> Result<Accepted, ApiError> {
    let interviewer = interviewer_of(state);
    let asking: Arc<dyn Interviewer> = Arc::clone(&interviewer) as Arc<dyn Interviewer>;
    let mut prepared = tokio::task::spawn_blocking(move || prepare(asking))
        .await
        .map_err(ApiError::internal)??;
    prepared.set_worker(&worker.name);
    Ok(launch_with(
        state,
        prepared,
        &interviewer,
        name,
        Some(Claimed {
            slot,
            cancelled: false,
        }),
    ))
}
