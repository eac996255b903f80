//! The queue and the leases of a shared store (SPEC 18.2): the seam a worker claims
//! runs through. A store that has one answers [`RunStore::queue`](super::RunStore::queue);
//! the local store has none (a server executes the runs it accepts).

use std::time::Duration;

use super::StoreError;
use crate::id::RunId;

/// A run that a worker claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The run.
    pub run_id: RunId,
    /// The fencing token: the run's lease epoch after this claim. Every write of the
    /// claimer carries it and is refused once another claim moved it on.
    pub epoch: u64,
    /// Whether the run started before (its lease ran out, it was handed back or a
    /// resume was queued): it resumes from its newest complete checkpoint.
    pub started: bool,
    /// What a server queued: the start request of a run that never started, the
    /// resume request of a resume; `None` when the run was taken over.
    pub request: Option<String>,
}

/// A run to queue: what lists it while it waits, and the request a worker starts it
/// with.
#[derive(Debug, Clone)]
pub struct QueuedStart {
    /// The run's id, chosen by the server that accepted it.
    pub run_id: RunId,
    /// The workflow's name and path as the listing shows them.
    pub workflow_name: String,
    /// The workflow's path as the listing shows it.
    pub workflow_path: String,
    /// The run's goal.
    pub goal: String,
    /// Higher first (SPEC 18.2).
    pub priority: i32,
    /// The start request, serialised.
    pub request: String,
}

/// A worker as the store knows it (`GET /api/v1/workers`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerEntry {
    /// Its name.
    pub name: String,
    /// The machine it runs on.
    pub host: String,
    /// How many runs it executes at once.
    pub concurrency: u32,
    /// The runs it holds a live lease of.
    pub runs: Vec<String>,
    /// When it last renewed, RFC 3339.
    pub last_renewal: String,
}

/// The queue and the leases of a shared store.
pub trait RunQueue: Send + Sync {
    /// Queues `run` (status `queued`) and wakes the workers; `false` when the store
    /// has a run of that id already.
    fn enqueue(&self, run: &QueuedStart) -> Result<bool, StoreError>;

    /// Claims for `worker` the queued run that comes first (priority, then age), or a
    /// run whose lease ran out, with a lease of `ttl` that this store renews every
    /// `ttl / 3` until the run is released or handed back. `None` when nothing waits.
    fn claim(&self, worker: &str, ttl: Duration) -> Result<Option<Claim>, StoreError>;

    /// Ends the lease of a run that ended: it stays with its worker's name, and no
    /// worker claims it.
    fn release(&self, run_id: &RunId) -> Result<(), StoreError>;

    /// Hands a run back to the queue (a worker that stops): another worker claims and
    /// resumes it at once.
    fn hand_back(&self, run_id: &RunId) -> Result<(), StoreError>;

    /// Queues the resume of a run that stopped (neither queued nor running), with its
    /// serialised resume `request`, cancel requests forgotten; `false` when the run is
    /// not stopped or not in the store.
    fn requeue(&self, run_id: &RunId, request: &str) -> Result<bool, StoreError>;

    /// Queues `run` already claimed by `worker` with a lease of `ttl` (a server's
    /// embedded worker starting the run it accepted, SPEC 18.2): no other worker claims
    /// it while the lease lives. `None` when the store has a run of that id already.
    fn enqueue_claimed(
        &self,
        run: &QueuedStart,
        worker: &str,
        ttl: Duration,
    ) -> Result<Option<Claim>, StoreError>;

    /// Claims for `worker` the resume of a run that no lease holds (it stopped, or its
    /// lease ran out), with its serialised resume `request` and cancel requests
    /// forgotten, as [`RunQueue::enqueue_claimed`] claims a new run; its status is the
    /// run's until the resume starts. `None` when the run is queued, leased or not in the
    /// store. A run an executor holds by its lock is the caller's to refuse.
    fn resume_claimed(
        &self,
        run_id: &RunId,
        request: &str,
        worker: &str,
        ttl: Duration,
    ) -> Result<Option<Claim>, StoreError>;

    /// Records that `worker` on `host` runs with `concurrency` slots, now.
    fn register_worker(&self, worker: &str, host: &str, concurrency: u32)
        -> Result<(), StoreError>;

    /// The workers known to the store, by name.
    fn workers(&self) -> Result<Vec<WorkerEntry>, StoreError>;
}
