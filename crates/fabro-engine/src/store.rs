//! The storage seams of a run: [`RunStore`] for a run's records, checkpoints, events,
//! index entry and lock, and [`BlobStore`](crate::blob::BlobStore) for the blobs its
//! stages produce. Both are passed as `Arc<dyn …>` ([`Stores`]).
//!
//! [`FsRunStore`] is today's layout under `$FABRO_HOME` (SPEC 11): `scratch/{run_id}/`
//! with `manifest.json`, `graph.fabro`, `children/`, `config.json`, `journal.jsonl`,
//! `checkpoint.json`, `events.jsonl` and `run.lock`, and the index `runs.db`.
//! [`MemoryRunStore`] keeps the same records in memory: the test double, and a model for
//! a database-backed store. The traversal never sees either: it writes checkpoints
//! through a [`CheckpointLog`] and events through an [`EventLog`] that the store opens.
//!
//! A stage's own files (prompt, response, `status.json`, logs) and the run's worktree
//! stay in the run's scratch directory ([`RunPaths`](crate::run_dir::RunPaths)), which
//! commands and agents work in; the store holds what describes the run.
//!
//! Forks and rewinds (SPEC 20.2, 20.3) read every checkpoint of a run through
//! [`RunStore::replay_checkpoints`]; a rewind records itself first
//! ([`RunStore::set_pending_rewind`]) so that an interrupted one can be finished.
//!
//! Readers (a server listing runs, streaming a run's events) use [`RunStore::list_runs`],
//! [`RunStore::read_events`] and [`EventFollower`]; [`EventCursor`] is the one reader of
//! a run directory's `events.jsonl` (it seeks an id by binary search and follows the
//! file as it grows), and [`RecordStamps`] tells a cache when a run's records changed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::blob::{BlobStore, FsBlobStore, MemoryBlobStore};
use crate::checkpoint::{CheckpointError, CheckpointLog, LoadError};
use crate::config::RunConfig;
use crate::event::{EmitterError, EventEnvelope, EventLog};
use crate::id::RunId;
use crate::record::{Checkpoint, Manifest, PendingRewind};
use crate::run_index::{RunIndexError, RunRecord, RunStatus};

mod event_cursor;
mod fs;
mod git_checkpoint;
mod memory;
mod stamp;

pub use event_cursor::{last_event_id, EventCursor, StoredEvent};
pub use fs::FsRunStore;
pub(crate) use fs::CHILDREN_DIR;
pub(crate) use git_checkpoint::restore_records;
pub(crate) use git_checkpoint::RestoreError;
pub use memory::{MemoryRunStore, StoredRun};
pub use stamp::RecordStamps;

/// Whether a run starts from nothing or continues from its last checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// A new run: its logs start empty.
    New,
    /// A resumed run: its logs continue where they end, a torn last record cut off.
    Resume,
}

/// The records that describe a new run (SPEC 4.1, 11.1), written once at its start.
#[derive(Debug, Clone, Copy)]
pub struct RunRecords<'a> {
    /// `graph.fabro`: the workflow as it runs.
    pub graph: &'a str,
    /// The stored child workflows, `(name under children/, text)`.
    pub children: &'a [(String, String)],
    /// `config.json`: the merged configuration, secrets redacted.
    pub config: &'a RunConfig,
    /// `manifest.json`, written last: a run with a manifest is a complete one.
    pub manifest: &'a Manifest,
}

/// The workflow a run executes, as stored at its start (SPEC 4.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredWorkflow {
    /// `graph.fabro`.
    pub graph: String,
    /// The stored child workflows, `(name under children/, text)`, in name order.
    pub children: Vec<(String, String)>,
}

/// Writes run `run_id`'s stored workflow into its scratch directory `paths` when the
/// directory lacks it, so that a resume on a store that keeps records elsewhere (a
/// database, SPEC 18.1) loads the graph and its children from files as every run does.
pub(crate) fn place_workflow(
    store: &dyn RunStore,
    run_id: &RunId,
    paths: &crate::run_dir::RunPaths,
) -> Result<(), StoreError> {
    let graph = paths.graph();
    if graph.is_file() {
        return Ok(());
    }
    let stored = store.read_workflow(run_id)?;
    fs::write_workflow(paths, &stored.graph, &stored.children)
}

/// A run's event log, opened, with the id its next event gets.
pub struct OpenedEvents {
    /// Where events go.
    pub log: Box<dyn EventLog>,
    /// The id of the next event: 1 for a new run, one past the last for a resumed one.
    pub next_id: u64,
}

/// The exclusive right to execute a run (SPEC 11.4), released when dropped.
pub trait RunLease: Send + Sync + std::fmt::Debug {}

impl RunLease for crate::run_index::RunLock {}

/// Why the run store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The run index or a run's manifest or lock failed.
    #[error(transparent)]
    Index(#[from] RunIndexError),
    /// The run's events cannot be opened.
    #[error(transparent)]
    Events(#[from] EmitterError),
    /// The run's checkpoints cannot be opened or written.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The run's newest checkpoint cannot be read.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// A record could not be read or written.
    #[error("{action} {}", .path.display())]
    Io {
        /// What was attempted.
        action: &'static str,
        /// The record.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A store other than files (a database, SPEC 18.1) failed.
    #[error(transparent)]
    Backend(Box<BackendFailure>),
    /// The store has no such run, or not the record asked for.
    #[error("run {run_id} has no {record}")]
    Missing {
        /// The run.
        run_id: RunId,
        /// The record: `manifest`, `lock`, …
        record: &'static str,
    },
    /// A record is not valid.
    #[error("{} is not valid", .path.display())]
    Invalid {
        /// The record.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: serde_json::Error,
    },
    /// Another execution holds the run.
    #[error("run {run_id} is locked by another execution")]
    Locked {
        /// The run.
        run_id: RunId,
    },
}

/// What a store other than files (a database, SPEC 18.1) failed to do, and why.
#[derive(Debug, thiserror::Error)]
#[error("{action}: {source}")]
pub struct BackendFailure {
    /// What was attempted, naming the run.
    pub action: String,
    /// The cause, credentials redacted.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

impl StoreError {
    /// `action` failed in a store other than files, because of `source`.
    pub fn backend(
        action: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> StoreError {
        StoreError::Backend(Box::new(BackendFailure {
            action: action.into(),
            source: source.into(),
        }))
    }
}

/// Where runs keep what describes them (SPEC 11): records, checkpoints, events, the
/// index entry and the lock. Passed as `Arc<dyn RunStore>`; every method is keyed by
/// run id, so one store serves every run of a storage root.
pub trait RunStore: Send + Sync {
    /// Takes the run's lock, without waiting for another live holder
    /// ([`StoreError::Locked`]). The run is [active](RunStore::is_active) while it is
    /// held.
    fn lock(&self, run_id: &RunId) -> Result<Box<dyn RunLease>, StoreError>;

    /// Whether an execution holds the run's lock.
    fn is_active(&self, run_id: &RunId) -> bool;

    /// Writes the records of a new run, the manifest last.
    fn write_records(&self, run_id: &RunId, records: &RunRecords<'_>) -> Result<(), StoreError>;

    /// The run's manifest.
    fn read_manifest(&self, run_id: &RunId) -> Result<Manifest, StoreError>;

    /// Opens the run's checkpoint log, empty for [`Opening::New`].
    fn open_checkpoints(
        &self,
        run_id: &RunId,
        opening: Opening,
    ) -> Result<Box<dyn CheckpointLog>, StoreError>;

    /// The run's configuration (`config.json`).
    fn read_config(&self, run_id: &RunId) -> Result<RunConfig, StoreError>;

    /// The workflow the run executes: `graph.fabro` and its stored children.
    fn read_workflow(&self, run_id: &RunId) -> Result<StoredWorkflow, StoreError>;

    /// The run's newest complete checkpoint, if it has one; for a run with git
    /// checkpointing, the newest its metadata history completes (SPEC 8.7 step 2).
    fn load_checkpoint(&self, run_id: &RunId) -> Result<Option<Checkpoint>, StoreError>;

    /// Makes `checkpoint` the one readers see when the log is ahead of it (a process
    /// killed between its final record and the reader's copy).
    fn publish_checkpoint(&self, run_id: &RunId, checkpoint: &Checkpoint)
        -> Result<(), StoreError>;

    /// Gives `visit` every checkpoint the run's log holds, oldest first, as written
    /// (SPEC 20.2, 20.3: a fork or a rewind starts from the one written after a stage).
    /// Nothing for a run without checkpoints.
    fn replay_checkpoints(
        &self,
        run_id: &RunId,
        visit: &mut dyn FnMut(&Checkpoint),
    ) -> Result<(), StoreError>;

    /// The run's rewind that has begun and not finished, if any (SPEC 20.3).
    fn pending_rewind(&self, run_id: &RunId) -> Result<Option<PendingRewind>, StoreError>;

    /// Records `rewind` as begun, durably before returning, or (`None`) clears the
    /// record once the rewind is done.
    fn set_pending_rewind(
        &self,
        run_id: &RunId,
        rewind: Option<&PendingRewind>,
    ) -> Result<(), StoreError>;

    /// Opens the run's event log, empty for [`Opening::New`].
    fn open_events(&self, run_id: &RunId, opening: Opening) -> Result<OpenedEvents, StoreError>;

    /// The run's events with ids from `from_id` on, in order; a torn last event is
    /// left out.
    fn read_events(&self, run_id: &RunId, from_id: u64) -> Result<Vec<EventEnvelope>, StoreError>;

    /// Lists a starting run in the index as `running`; `run_dir` is its scratch
    /// directory. The caller holds the lock.
    fn register_start(&self, manifest: &Manifest, run_dir: &Path) -> Result<(), StoreError>;

    /// Records the final status of a run; the caller releases the lock afterwards, so
    /// that readers never see a running status without a holder.
    fn register_end(&self, run_id: &RunId, status: RunStatus) -> Result<(), StoreError>;

    /// Every run, newest first, with statuses checked against the locks.
    fn list_runs(&self) -> Result<Vec<RunRecord>, StoreError>;
}

/// The two stores a run uses.
#[derive(Clone)]
pub struct Stores {
    /// Records, checkpoints, events, index and lock.
    pub runs: Arc<dyn RunStore>,
    /// Blobs.
    pub blobs: Arc<dyn BlobStore>,
}

impl Stores {
    /// The file-system stores of the storage root `fabro_home` (SPEC 11).
    pub fn local(fabro_home: &Path) -> Stores {
        Stores {
            runs: Arc::new(FsRunStore::new(fabro_home)),
            blobs: Arc::new(FsBlobStore::new(fabro_home)),
        }
    }

    /// Fresh in-memory stores.
    pub fn in_memory() -> Stores {
        Stores {
            runs: Arc::new(MemoryRunStore::new()),
            blobs: Arc::new(MemoryBlobStore::new()),
        }
    }
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Stores")
            .field("blobs", &self.blobs)
            .finish_non_exhaustive()
    }
}

/// Follows a run's events from an id on, as a server streams them: each
/// [`next_batch`](EventFollower::next_batch) returns the events that arrived since the
/// last one, waiting while the run is active and nothing is new, and `None` once the run
/// is no longer active and every event has been returned.
pub struct EventFollower {
    store: Arc<dyn RunStore>,
    run_id: RunId,
    next_id: u64,
    poll: Duration,
}

impl EventFollower {
    /// Follows `run_id` from event `from_id` on, looking for new events every `poll`.
    pub fn new(
        store: Arc<dyn RunStore>,
        run_id: RunId,
        from_id: u64,
        poll: Duration,
    ) -> EventFollower {
        EventFollower {
            store,
            run_id,
            next_id: from_id,
            poll,
        }
    }

    /// The id of the next event this follower returns.
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// The next events, or `None` when the run ended and everything was returned.
    pub async fn next_batch(&mut self) -> Result<Option<Vec<EventEnvelope>>, StoreError> {
        loop {
            // Checked before reading, so that events written just before the run ended
            // are read after it was seen ending.
            let active = self.store.is_active(&self.run_id);
            let events = self.store.read_events(&self.run_id, self.next_id)?;
            if let Some(last) = events.last() {
                self.next_id = last.id + 1;
                return Ok(Some(events));
            }
            if !active {
                return Ok(None);
            }
            tokio::time::sleep(self.poll).await;
        }
    }
}

#[cfg(test)]
mod tests;
