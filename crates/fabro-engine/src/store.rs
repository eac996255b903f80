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
//! Readers (the server, SPEC 14.3) reach a run's records through the store alone:
//! [`RunStore::listing`] and [`RunStore::resolve`] (the index), [`RunStore::record_parts`]
//! (what the `fabro inspect --json` document is built from), [`RunStore::stages`] and
//! [`RunStore::stage_file`] (a stage's rows and files, which the engine hands to the
//! store with [`RunStore::save_stage`]), [`RunStore::event_reader`] and
//! [`RunStore::event_tail`] (an [`EventReader`] from an id, following the log), and
//! [`RunStore::record_stamps`], which tells a cache when a run's records changed.
//! [`EventCursor`] is the one reader of a run directory's `events.jsonl` (it seeks an id
//! by binary search and follows the file as it grows); [`EventFollower`] follows a run's
//! events through any store.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::blob::{BlobStore, FsBlobStore, MemoryBlobStore};
use crate::checkpoint::{CheckpointError, CheckpointLog, LoadError};
use crate::config::RunConfig;
use crate::event::{EmitterError, EventEnvelope, EventLog};
use crate::id::RunId;
use crate::interviewer::Question;
use crate::record::{Checkpoint, Manifest, PendingRewind, StageStatusFile};
use crate::run_index::{Listing, RunIndexError, RunRecord, RunStatus};
use crate::run_stages::StageDir;

mod answer_files;
mod event_cursor;
mod fs;
mod git_checkpoint;
mod interviewer;
mod memory;
mod queue;
mod record_parts;
mod stamp;
mod steering;

pub use event_cursor::{last_event_id, EventCursor, StoredEvent};
pub use fs::FsRunStore;
pub(crate) use fs::CHILDREN_DIR;
pub(crate) use git_checkpoint::restore_records;
pub(crate) use git_checkpoint::RestoreError;
pub use interviewer::{answer_pending, AnswerFileError, FiledAnswer, StoreInterviewer};
pub use memory::{MemoryRunStore, StoredRun};
pub use queue::{Claim, QueuedStart, RunQueue, WorkerEntry};
pub use record_parts::{read_record_parts, stored_record_parts, RecordParts};
pub(crate) use stamp::FileStamp;
pub use stamp::RecordStamps;
pub use steering::{MessageId, RunningAgentStage, SteeringStore};

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
    /// The run's scratch directory, when known (a store that lists runs from rows
    /// shows it from the first listing; `register_start` records it in any case).
    pub run_dir: Option<&'a Path>,
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

/// The stage files of SPEC 11.1 a store keeps of each stage and readers may ask for
/// ([`RunStore::stage_file`]).
pub const STAGE_FILES: [&str; 6] = [
    "prompt.md",
    "response.md",
    "status.json",
    "stdout.log",
    "stderr.log",
    "diff.patch",
];

/// One stage of a run as its store keeps it (SPEC 7.5, 11.1).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredStage {
    /// The stage's rank (its order of start in the run).
    pub rank: u32,
    /// The node the stage executed.
    pub node_id: String,
    /// The run-wide visit number.
    pub visit: u32,
    /// Its `status.json`, once the stage has ended; `None` while it runs (or when the
    /// record cannot be read).
    pub status: Option<StageStatusFile>,
    /// Which of [`STAGE_FILES`] the stage has, in that order.
    pub files: Vec<String>,
}

/// A stage as a store other than files copies it from the stage's directory
/// ([`RunStore::save_stage`]): its row and the bytes of its files.
#[derive(Debug, Clone, PartialEq)]
pub struct StageCopy {
    /// The row; its `files` name the files copied.
    pub stage: StoredStage,
    /// `(name, bytes)` of each of [`STAGE_FILES`] the directory holds, in that order.
    pub contents: Vec<(String, Vec<u8>)>,
}

impl StageCopy {
    /// Reads the stage directory `stage` as it is now.
    pub fn read(stage: &StageDir) -> Result<StageCopy, StoreError> {
        let mut contents = Vec::new();
        for name in STAGE_FILES {
            let path = stage.path.join(name);
            match fs_err::read(&path) {
                Ok(bytes) => contents.push((name.to_owned(), bytes)),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(StoreError::Io {
                        action: "cannot read",
                        path,
                        source,
                    })
                }
            }
        }
        let status = contents
            .iter()
            .find(|(name, _)| name == "status.json")
            .and_then(|(_, bytes)| serde_json::from_slice(bytes).ok());
        Ok(StageCopy {
            stage: StoredStage {
                rank: stage.rank,
                node_id: stage.node_id.clone(),
                visit: stage.visit,
                status,
                files: contents.iter().map(|(name, _)| name.clone()).collect(),
            },
            contents,
        })
    }
}

/// Reads a run's stored events in order, from where it was opened, and follows the log
/// as the run appends to it ([`RunStore::event_reader`], [`RunStore::event_tail`]).
pub trait EventReader: Send {
    /// The complete events stored since the last call, oldest first; an event being
    /// written is returned once it is complete.
    fn read_new(&mut self) -> Result<Vec<StoredEvent>, StoreError>;
}

/// A run's event log, opened, with the id its next event gets.
pub struct OpenedEvents {
    /// Where events go.
    pub log: Box<dyn EventLog>,
    /// The id of the next event: 1 for a new run, one past the last for a resumed one.
    pub next_id: u64,
}

/// The exclusive right to execute a run (SPEC 11.4), released when dropped.
pub trait RunLease: Send + Sync + std::fmt::Debug {
    /// Fired when the right is lost while the run executes: a worker's lease that
    /// could not be renewed in time or was taken by another claim (SPEC 18.2). The run
    /// then stops at once, its processes killed; its store refuses its writes. `None`
    /// for a right that cannot be lost (a lock held by a live process).
    fn lost(&self) -> Option<tokio_util::sync::CancellationToken> {
        None
    }
}

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
    /// This process's lease of the run ran out or was taken by another claim (SPEC
    /// 18.2): it writes nothing more for the run.
    #[error("lost the lease of run {run_id}")]
    LostLease {
        /// The run.
        run_id: RunId,
    },
    /// An answer to the question was filed already and waits to be taken.
    #[error("an answer to question {question_id} of run {run_id} was filed already")]
    AnswerFiled {
        /// The run.
        run_id: RunId,
        /// The question.
        question_id: String,
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

    /// Every run, newest first, as a listing a reader pages through (a server answering
    /// `GET /api/v1/runs` many times a second). By default [`RunStore::list_runs`].
    fn listing(&self) -> Result<Listing, StoreError> {
        Ok(Listing::of(self.list_runs()?))
    }

    /// [`RunStore::listing`] when the store answers it without blocking (a snapshot it
    /// keeps is current); `None` when answering needs I/O. By default `None`.
    fn cached_listing(&self) -> Option<Listing> {
        None
    }

    /// The run a `RUN` argument names: a full id, or a unique prefix of at least 4
    /// characters; [`StoreError::Index`] of kind `NoSuchRun` when none or several do.
    fn resolve(&self, run: &str) -> Result<Arc<RunRecord>, StoreError> {
        Ok(self.listing()?.find(run)?)
    }

    /// [`RunStore::resolve`] when the store answers it without blocking; `None` when
    /// answering needs I/O.
    fn resolve_cached(&self, run: &str) -> Option<Result<Arc<RunRecord>, StoreError>> {
        self.cached_listing()
            .map(|listing| listing.find(run).map_err(StoreError::from))
    }

    /// What the `fabro inspect --json` document of the run `record` lists is built from
    /// (SPEC 12.1): its manifest, checkpoint, stages and rewound stages
    /// (`run_view::inspect_in` builds the document).
    fn record_parts(&self, record: &RunRecord) -> Result<RecordParts, StoreError>;

    /// The run's stages by rank (then node and visit); none for a run without any.
    fn stages(&self, run_id: &RunId) -> Result<Vec<StoredStage>, StoreError>;

    /// The stage file `name` (one of [`STAGE_FILES`]) of the stage of rank `rank`;
    /// `None` when the run has no such stage or the stage no such file.
    fn stage_file(
        &self,
        run_id: &RunId,
        rank: u32,
        name: &str,
    ) -> Result<Option<Vec<u8>>, StoreError>;

    /// Records the stage whose files are in `stage`'s directory, as they are now: called
    /// by the engine when the stage starts and after it wrote its `status.json`. A store
    /// that keeps records elsewhere (a database) copies its row and its
    /// [`STAGE_FILES`]; the file store, whose records are these files, does nothing.
    fn save_stage(&self, run_id: &RunId, stage: &StageDir) -> Result<(), StoreError>;

    /// A reader of the run's events with ids above `after` (0: from the first), which
    /// follows the log as the run appends to it. A run without events reads as empty.
    fn event_reader(&self, run_id: &RunId, after: u64) -> Box<dyn EventReader>;

    /// A reader positioned after the run's last complete event, for the one reader per
    /// run that reads after every append (a server's live feed): it holds what makes
    /// those reads cheap (an open file).
    fn event_tail(&self, run_id: &RunId) -> Box<dyn EventReader>;

    /// The id of the run's last complete event; 0 when it has none (or they cannot be
    /// read).
    fn last_event_id(&self, run_id: &RunId) -> u64;

    /// A cheap version of the run's records (the ones its `fabro inspect` document is
    /// built from), for readers that cache documents: equal stamps, equal records.
    /// `None` when the store cannot tell cheaply, so that nothing is cached.
    fn record_stamps(&self, _run_id: &RunId) -> Option<RecordStamps> {
        None
    }

    /// The part of [`RunStore::record_stamps`] that changes with every stage (the
    /// checkpoint); `None` when the store cannot tell cheaply.
    fn checkpoint_stamp(&self, _run_id: &RunId) -> Option<FileStamp> {
        None
    }

    /// Publishes `question` as the run's open human question (SPEC 5.5, 17.4), replacing
    /// any other, or (`None`) closes the open one. Written by the run's
    /// [`StoreInterviewer`].
    fn set_pending_question(
        &self,
        run_id: &RunId,
        question: Option<&Question>,
    ) -> Result<(), StoreError>;

    /// The run's open question, while an execution holds the run and one is open.
    fn pending_question(&self, run_id: &RunId) -> Result<Option<Question>, StoreError>;

    /// Files `answer` for its question, for the run to take;
    /// [`StoreError::AnswerFiled`] when an answer to it waits already.
    fn file_answer(&self, run_id: &RunId, answer: &FiledAnswer) -> Result<(), StoreError>;

    /// Takes the answer filed for `question_id`, once; `None` when none waits.
    fn take_answer(
        &self,
        run_id: &RunId,
        question_id: &str,
    ) -> Result<Option<FiledAnswer>, StoreError>;

    /// Withdraws the answer filed for `question_id` unless the run took it: `true` when
    /// it was withdrawn, `false` when none waited (taken, or never filed).
    fn withdraw_answer(&self, run_id: &RunId, question_id: &str) -> Result<bool, StoreError>;

    /// Whether an answer filed for `question_id` waits to be taken.
    fn answer_waiting(&self, run_id: &RunId, question_id: &str) -> Result<bool, StoreError>;

    /// Moves the run's stages ranked after `after` to rewind `k`'s (SPEC 20.3: kept,
    /// no longer the run's), after the rewind moved their directories; done again, it
    /// changes nothing. The local store has nothing more to do: its stages are those
    /// directories.
    fn rewind_stages(&self, _run_id: &RunId, _k: u32, _after: u32) -> Result<(), StoreError> {
        Ok(())
    }

    /// The stages each rewind of the run moved away, `(k, stages)` by `k`, for a store
    /// whose [`RunStore::record_parts`] are [`stored_record_parts`].
    fn rewound_stages(&self, _run_id: &RunId) -> Result<Vec<(u32, Vec<StoredStage>)>, StoreError> {
        Ok(Vec::new())
    }

    /// What other processes on the store did, as it happens: a receiver of
    /// [`Notice`]s, or `None` when the store has none to give (the local store, whose
    /// readers poll). A notice only wakes a reader, which then asks the store itself:
    /// notices can be missed (a receiver that lags, a connection lost a moment).
    fn notices(&self) -> Option<tokio::sync::broadcast::Receiver<Notice>> {
        None
    }

    /// Asks the process that executes `run_id` to cancel it (SPEC 18.2: "cancel is
    /// written to the store"): `false` when the store keeps no such requests (a run of
    /// the local store is signalled instead). The request lasts until the run next
    /// [starts](RunStore::register_start).
    fn request_cancel(&self, _run_id: &RunId) -> Result<bool, StoreError> {
        Ok(false)
    }

    /// Whether a cancel of `run_id` was [requested](RunStore::request_cancel) since it
    /// last started.
    fn cancel_requested(&self, _run_id: &RunId) -> Result<bool, StoreError> {
        Ok(false)
    }

    /// The queue and the leases workers claim runs through (SPEC 18.2); `None` for a
    /// store without workers (the local store).
    fn queue(&self) -> Option<&dyn RunQueue> {
        None
    }

    /// Where the runs' steering messages wait (SPEC 18.2); `None` for a store whose
    /// runs keep them in their run directories (the local store).
    fn steering(&self) -> Option<&dyn SteeringStore> {
        None
    }
}

/// What a process did on a shared store, as another process learns it (see
/// [`RunStore::notices`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// The run appended events.
    Appended(RunId),
    /// A cancel of the run was requested.
    CancelRequested(RunId),
    /// The run was queued or handed back: a worker may claim it (SPEC 18.2).
    Queued(RunId),
    /// A steering message was posted for the run (SPEC 18.2).
    Steered(RunId),
    /// Notices may have been missed (the store's connection was lost and is back): a
    /// reader asks the store about whatever it waits for.
    Missed,
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
