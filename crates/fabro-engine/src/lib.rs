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
//! use fabro_engine::{prepare_with, RunId, RunOptions, RunStatus, RunStore, Stores};
//! use fabro_engine::source::FsLoader;
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
//! The modules below the facade stay public where the CLI reads run directories
//! directly (`run_index`, `checkpoint`, `stage_log`, …).

pub mod asset_capture;
pub mod blob;
mod budget;
mod catch_panic;
pub mod checkpoint;
pub mod config;
mod context;
pub mod dump;
pub mod event;
pub mod failure;
pub mod gc;
pub mod git;
mod handler;
mod hook;
mod id;
pub mod interviewer;
pub mod journal;
pub mod llm_target;
mod outcome;
mod output_schema;
mod preamble;
pub mod record;
mod retry;
mod routing;
pub mod run;
pub mod run_diff;
pub mod run_dir;
pub mod run_env;
pub mod run_index;
pub mod run_stages;
mod run_status;
pub mod run_view;
pub mod sandbox;
mod script;
pub mod source;
pub mod stage_log;
pub mod steering;
pub mod store;
mod thread;
mod timestamp;
mod transition;
pub mod traversal;

pub use blob::{BlobStore, FsBlobStore, MemoryBlobStore};
pub use context::Context;
pub use event::{Event, EventEnvelope, EventKind, EventSink};
pub use failure::FailureClass;
pub use id::{BlobRef, NodeId, RunId};
pub use interviewer::Interviewer;
pub use outcome::{Failure, Outcome, Signal};
pub use run::{
    prepare, prepare_resume, prepare_resume_with, prepare_with, resume, start, ErrorKind,
    Overrides, PreparedRun, ResumeRequest, RunError, RunOptions, RunReport, Start, StartRequest,
};
pub use run_status::RunStatus;
pub use store::{
    answer_pending, AnswerFileError, EventFollower, EventReader, FiledAnswer, FsRunStore,
    MemoryRunStore, RunStore, StoreError, StoreInterviewer, StoredEvent, StoredStage, Stores,
    STAGE_FILES,
};
pub use timestamp::parse_rfc3339;
pub use traversal::{RunEnd, StopCause};

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
