//! The fabro run engine: runs a checked workflow graph stage by stage (SPEC 4), with
//! checkpoints, resume, events, human gates, budgets and git checkpointing.
//!
//! # How the main types cooperate
//!
//! - [`RunOptions`] says what to run: the workflow file, goal, variables, answers, LLM
//!   settings, the storage root (`fabro_home`) and an optional interactive
//!   [`Interviewer`].
//! - [`prepare`] (or [`prepare_with`], to choose the [`Stores`]) parses, transforms and
//!   validates the workflow and allocates the run: a [`PreparedRun`], whose
//!   [`Start`] is [`Start::New`]. [`prepare_resume`] makes one that continues a stored
//!   run from a checkpoint ([`Start::Resume`]).
//! - Clients (the CLI, the server) use [`start`] and [`resume`] instead: the same with
//!   the options built from a [`StartRequest`] or a [`ResumeRequest`], the lock and the
//!   stored records (git-checkpointed runs included) handled here. Their errors have a
//!   [`RunError::kind`] ([`ErrorKind`]) each client maps once.
//! - [`PreparedRun::execute`] initializes, executes and finalizes the run, and returns a
//!   [`RunReport`] with the final [`RunStatus`] and how the traversal ended
//!   ([`RunEnd`]). Cancelling its token stops the run cleanly.
//! - Everything the run does is an [`Event`] ([`EventKind`] names it), numbered by the
//!   run's emitter, appended to the run's event log and passed to every [`EventSink`]
//!   as an [`EventEnvelope`].
//! - Storage is behind two seams passed as `Arc<dyn …>` in [`Stores`]: [`RunStore`]
//!   (records, checkpoints, events, index, lock; [`FsRunStore`] under `$FABRO_HOME`,
//!   [`MemoryRunStore`] in memory) and [`BlobStore`] ([`FsBlobStore`],
//!   [`MemoryBlobStore`]). Readers list runs and follow events through the same
//!   trait ([`RunStore::list_runs`], [`EventFollower`]).
//! - Human gates ask the run's [`Interviewer`]s in order: `--answer` values,
//!   `--auto-approve`, then the embedder's interactive source.
//!
//! # Example
//!
//! A three-node workflow run in memory: the simulated LLM answers the two prompts, the
//! records and blobs stay in memory, and only stage files go to the scratch directory.
//!
//! ```
//! use std::sync::Arc;
//!
//! use fabro_engine::{prepare_with, FsLoader, RunId, RunOptions, RunStatus, RunStore, Stores};
//! use fabro_language::AnyModel;
//! use tokio_util::sync::CancellationToken;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let scratch = tempfile::tempdir()?;
//! let workflow = scratch.path().join("ship.fabro");
//! std::fs::write(
//!     &workflow,
//!     r#"digraph Ship {
//!         graph [goal="Ship the feature"]
//!         start [shape=Mdiamond]
//!         exit  [shape=Msquare]
//!         plan  [prompt="Plan: $goal"]
//!         start -> plan -> exit
//!     }"#,
//! )?;
//! let options = RunOptions {
//!     run_id: Some("ship-1".to_owned()),
//!     work_dir: Some(scratch.path().to_path_buf()),
//!     ..RunOptions::new(workflow, scratch.path().join("home"))
//! };
//! let stores = Stores::in_memory();
//! let prepared = prepare_with(options, stores.clone(), &FsLoader, &AnyModel)?;
//! let report = tokio::runtime::Runtime::new()?
//!     .block_on(prepared.execute(CancellationToken::new(), Vec::new()))?;
//! assert_eq!(report.status, RunStatus::Success);
//!
//! let events = stores.runs.read_events(&RunId::from("ship-1"), 1)?;
//! let names: Vec<&str> = events.iter().map(|event| event.name()).collect();
//! assert_eq!(names.first(), Some(&"WorkflowRunStarted"));
//! assert_eq!(names.last(), Some(&"WorkflowRunCompleted"));
//! assert_eq!(stores.runs.list_runs()?[0].status, RunStatus::Success);
//! # Ok(())
//! # }
//! ```
//!
//! # The public surface
//!
//! Every module is private; what clients (the CLI, the server, `fabro-store`,
//! `fabro-api`) use is re-exported here, so a module can be split or renamed without
//! touching them. The crate root holds the run lifecycle ([`start`], [`resume`],
//! [`fork`], [`rewind`] and their requests and errors), the identifiers and statuses,
//! the events, the store seams with their file-system and in-memory implementations,
//! steering, and the workflow sources the language crate's seams read. Five small
//! modules group the rest by concern, each a curated list of re-exports:
//!
//! - [`configuration`]: the layered run configuration (SPEC 12.3) and what flags
//!   override in it.
//! - [`event_kind`]: one struct per event of SPEC 11.3, the payloads of [`EventKind`].
//! - [`gate`]: human gates (SPEC 5.5): the questions and answers of the
//!   [`Interviewer`] seam, and the interviewers an embedder plugs in.
//! - [`backend`]: what a storage backend implements and exchanges with the engine
//!   behind [`RunStore`] and [`BlobStore`] (records, checkpoint and event logs).
//! - [`local`]: run directories under a storage root on this machine, read and changed
//!   in place: the run index and locks, stages and their logs, diffs, documents,
//!   queued runs, pending questions, dumps and garbage collection.
//!
//! A type that appears in a signature or a document of the surface is re-exported with
//! it, except the sections of [`RunConfig`](configuration::RunConfig), the LLM defaults
//! of [`RunOptions`] and the errors under [`RunError`] and [`StoreError`]: clients reach
//! those through fields and `source()`, and tell errors apart by [`RunError::kind`]
//! (printed with [`error_chain`]).

mod asset_capture;
mod blob;
mod budget;
mod catch_panic;
mod checkpoint;
mod config;
mod context;
mod dump;
mod event;
mod failure;
mod gc;
mod git;
mod handler;
mod hook;
mod id;
mod interviewer;
mod journal;
mod llm_target;
mod outcome;
mod output_schema;
mod preamble;
mod record;
mod retry;
mod routing;
mod run;
mod run_diff;
mod run_dir;
mod run_env;
mod run_index;
mod run_stages;
mod run_status;
mod run_view;
mod sandbox;
mod script;
mod source;
mod stage_log;
mod steering;
mod store;
mod thread;
mod timestamp;
mod transition;
mod traversal;

pub use blob::{BlobStore, FsBlobStore, MemoryBlobStore};
pub use event::{Event, EventEnvelope, EventKind, EventSink};
pub use failure::FailureClass;
pub use id::{BlobRef, MalformedBlobRef, NodeId, RunId};
pub use interviewer::Interviewer;
pub use outcome::{Failure, Outcome, Signal};
pub use record::RunOrigin;
pub use run::{
    fork, new_run_id, prepare, prepare_resume, prepare_resume_with, prepare_with, resume, rewind,
    start, ErrorKind, ForkRequest, Overrides, PreparedRun, ResumeError, ResumeRequest,
    RewindRequest, Rewound, RunError, RunOptions, RunReport, StagePoint, Start, StartRequest,
};
pub use run_index::RunRecord;
pub use run_status::RunStatus;
pub use run_view::{inspect_in, run_view_in};
pub use sandbox::{is_secret_name, KernelSupport, Mechanism};
pub use source::{read_regular_file, BoundedRead, CatalogModels, ConfiguredModels, FsLoader};
pub use steering::{
    agent_stages_elsewhere, running_agent_stages, steer_elsewhere, RunningAgentStage, SteerError,
    Steered, SteeringMessage, SteeringQueue, SteeringSource, WhenNoAgent,
};
pub use store::{
    answer_pending, last_event_id, AnswerFileError, Claim, EventCursor, EventFollower, EventReader,
    FiledAnswer, FsRunStore, MemoryRunStore, MessageId, Notice, QueuedStart, RecordStamps,
    RunQueue, RunStore, SteeringStore, StoreError, StoreInterviewer, StoredEvent, StoredStage,
    Stores, WorkerEntry, STAGE_FILES,
};
pub use timestamp::parse_rfc3339;
pub use traversal::{RunEnd, StopCause};

pub mod configuration {
    //! The run configuration (SPEC 12.3): one TOML schema shared by every layer, parsed
    //! into a [`RunConfig`] ([`parse`]) and loaded layer by layer from
    //! [`ConfigSources`] through a [`ConfigReader`] ([`load`]). [`ConfigOverrides`] is
    //! what the command line (or a server request) changes in it: the budget flags and
    //! `--no-in-place`.

    pub use crate::config::{
        load, parse, workflow_graph, ConfigError, ConfigReader, ConfigSources, CostLimit,
        FsConfigReader, LlmConfig, RunConfig,
    };
    pub use crate::run_env::{known_provider_names, ConfigOverrides};

    pub mod reference {
        //! The configuration reference of the user guide, generated from the keys the
        //! parser accepts so that it cannot drift from them.

        pub use crate::config::reference::{markdown, undocumented_keys, unknown_descriptions};
    }
}

/// Repositories named by URL (SPEC 18.3): a worker's mirrors, the refs pushed after each
/// checkpoint, and what a checkout offers `fabro run --server`.
pub mod repository {
    pub use crate::git::{
        checkout_origin, has_credentials, without_credentials, CheckoutOrigin, GitError, Mirrors,
        PushedRefs, RemoteRepository,
    };
}

pub mod event_kind {
    //! The events of SPEC 11.3 as types: one struct per event, each the payload of the
    //! [`EventKind`](crate::EventKind) variant of the same name, and the types their
    //! fields use.

    pub use crate::event::kind::{
        AgentAssistantMessage, AgentCompactionCompleted, AgentCompactionStarted,
        AgentContextWindowWarning, AgentError, AgentFailover, AgentLlmRetry, AgentLoopDetected,
        AgentSessionStarted, AgentSteeringDelivered, AgentToolCallCompleted, AgentToolCallStarted,
        BudgetExhausted, CheckpointCompleted, CircuitBreakerTripped, CommandCompleted,
        CommandStarted, EdgeSelected, EventUsage, FanInSelected, GoalGateUnsatisfied,
        HookCompleted, HookStarted, HumanAnswer, HumanOption, HumanQuestion, LoopRestart,
        ParallelBranchCompleted, ParallelBranchStarted, ParallelCompleted, ParallelStarted,
        RawEvent, RunRewound, StageCompleted, StageIsolation, StageOutputRepair, StageRetrying,
        StageStarted, SteeringQueued, SubWorkflowCompleted, SubWorkflowStarted, Warning,
        WatchdogTimeout, WorkflowRunCompleted, WorkflowRunFailed, WorkflowRunStarted,
    };
}

pub mod gate {
    //! Human gates (SPEC 5.5): a gate asks the run's [`Interviewer`](crate::Interviewer)s
    //! a [`Question`] in order until one [replies](Reply) with an [`Answer`]. An embedder
    //! supplies the interactive one: a console (implementing the trait with
    //! [`AnswerSource`] and [`Matching`]), a [`StoreInterviewer`](crate::StoreInterviewer)
    //! for a detached or server run (answered through the run store with
    //! [`answer_pending`](crate::answer_pending)) or a [`ChannelInterviewer`] answered
    //! through its [`AnswerHandle`].

    pub use crate::interviewer::{
        Answer, AnswerError, AnswerHandle, AnswerSource, BoxFuture, ChannelInterviewer, GateOption,
        Matching, Question, QuestionType, Reply, Unanswered,
    };
}

pub mod backend {
    //! What a storage backend implements and exchanges with the engine: the records a
    //! [`RunStore`](crate::RunStore) keeps ([`Manifest`], [`Checkpoint`],
    //! [`PendingRewind`], [`StoredWorkflow`]), the logs it opens for a run
    //! ([`CheckpointLog`], [`EventLog`]) and the errors and helpers of both seams.
    //! `fabro-store` implements them over PostgreSQL and an object store.

    pub use crate::blob::{hex_digest, BlobError};
    pub use crate::checkpoint::{CheckpointError, CheckpointLog};
    pub use crate::event::{read_events, Emitter, EventLog};
    pub use crate::journal::{replay_records, replay_records_onto, ChangeHint, JournalRecords};
    pub use crate::record::{
        Checkpoint, CheckpointView, ForkedFrom, Manifest, PendingRewind, UsageRecord,
    };
    pub use crate::store::{
        read_record_parts, stored_record_parts, BackendFailure, OpenedEvents, Opening, RecordParts,
        RunLease, RunRecords, StageCopy, StoredRun, StoredWorkflow,
    };
}

pub mod local {
    //! Run directories under a storage root on this machine (SPEC 11.1), read and
    //! changed in place by the CLI and the server: the run index and locks
    //! ([`RunIndex`], [`RunCatalog`], [`RunLock`]), the documents of `runs` and
    //! `inspect` ([`RunView`], [`InspectView`]), stages and their logs, diffs, queued
    //! runs, pending questions, dumps, garbage collection, and runs recorded in a git
    //! repository ([`RunHistory`]).

    pub use crate::dump::{dump_run, DumpError, DumpSummary};
    pub use crate::gc::{
        collect_garbage, CollectedLeftover, CollectedRun, GcError, GcOptions, GcReport,
    };
    pub use crate::git::{MetadataEntry, RunHistory};
    pub use crate::record::StageStatusFile;
    pub use crate::run_diff::{run_diff, stage_diff, DiffError, DiffLine, DiffLineKind};
    pub use crate::run_dir::{RunPaths, MANIFEST_FILE};
    pub use crate::run_index::{
        lock_pid, queued_runs, read_manifest, remove_queued, write_queued, Listing, QueuedRun,
        RunCatalog, RunIndex, RunIndexError, RunIndexErrorKind, RunLock, LOCK_PATIENCE,
        MIN_PREFIX_LEN,
    };
    pub use crate::run_stages::{latest_stage, list_stages, StageDir, StageLookupError};
    pub use crate::run_view::{
        inspect, run_view, InspectView, RewoundView, RunView, StageView, TotalsView,
    };
    pub use crate::stage_log::{follow_stage, read_output, StageLogError};
}

/// `error` and its sources, joined with `: `, for one-line messages.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
