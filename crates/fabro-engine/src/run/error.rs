//! Why a run could not be prepared, started or resumed.
//!
//! Each variant says what happened and carries the run id, path or node that names it;
//! an underlying error is its `#[source]`. One-line renderings (the CLI's `error:` line,
//! a sub_workflow's failure reason) join the chain with `: ` ([`crate::error_chain`]).

use std::path::PathBuf;

use fabro_language::Checked;
use fabro_llm::simulated::ScriptError;

use crate::asset_capture::IncludeGlobError;
use crate::git::GitError;
use crate::llm_target::LlmSetupError;
use crate::run_env::RunEnvError;
use crate::run_index::RunStatus;
use crate::store::{RestoreError, StoreError};

/// What kind of failure a [`RunError`] is: what a client answers with. The CLI maps a
/// kind to an exit code, the server to an HTTP status, each in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The workflow has errors, with diagnostics (CLI exit 1, HTTP 422).
    InvalidWorkflow,
    /// The workflow cannot run as asked: it produced nothing, or answers name no gate of
    /// it (HTTP 422 `invalid_workflow`).
    Unfit,
    /// A bad argument, configuration or environment (HTTP 400).
    Usage,
    /// No such run (HTTP 404).
    NotFound,
    /// The run's state refuses the request: it exists, is locked, finished, or cannot
    /// be continued (HTTP 409).
    Conflict,
    /// fabro's own storage or repository failed (HTTP 500).
    Storage,
    /// A bug of the engine (HTTP 500).
    Internal,
}

/// Why a run could not start. [`RunError::InvalidWorkflow`] exits 1 in the CLI; every
/// other variant exits 2.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The workflow has errors; the diagnostics are in the check result.
    #[error("workflow {} has errors", .path.display())]
    InvalidWorkflow {
        /// The workflow file.
        path: PathBuf,
        /// Its text.
        text: String,
        /// The diagnostics.
        checked: Box<Checked>,
    },
    /// The workflow checked without errors but produced no workflow.
    #[error("workflow did not parse")]
    Unparsed {
        /// The workflow file.
        path: PathBuf,
    },
    /// `--run-id` is not a valid run id (SPEC 11.1).
    #[error(
        "invalid run id '{run_id}': use 1–64 characters from [A-Za-z0-9._-], starting with a letter or digit"
    )]
    InvalidRunId {
        /// The id given.
        run_id: String,
    },
    /// The working tree has uncommitted changes and `dirty_worktree = "refuse"`
    /// (SPEC 17.2).
    #[error("working tree has uncommitted changes; commit or stash them, or allow in-place runs")]
    DirtyWorktree,
    /// The working tree of an in-place run could not be saved (SPEC 17.2).
    #[error("cannot save the working tree of run {run_id} before running in place")]
    SaveBefore {
        /// The run.
        run_id: String,
        /// The git failure.
        #[source]
        source: crate::git::GitError,
    },
    /// A new run's directory exists already.
    #[error("run {run_id} already exists")]
    RunExists {
        /// The run id.
        run_id: String,
    },
    /// `--answer` names nodes that are no human gate of the workflow or its children.
    #[error(
        "--answer names no human gate of the workflow: {} ({})",
        quoted_list(.unknown),
        gates_note(.gates)
    )]
    UnknownAnswerNodes {
        /// The node ids named by `--answer` that are no human gate, sorted.
        unknown: Vec<String>,
        /// The human gates there are, sorted.
        gates: Vec<String>,
        /// Whether the workflow is a stored run's (a resume), not one the caller gave.
        stored: bool,
    },
    /// The stored copy of a workflow with child workflows does not check again (an
    /// engine bug: it checked before it was stored).
    #[error(
        "engine error: the stored workflow does not check: {}",
        .first_error.as_deref().unwrap_or("it does not parse")
    )]
    StoredWorkflowInvalid {
        /// The stored `graph.fabro`.
        path: PathBuf,
        /// The first error diagnostic, if it parsed.
        first_error: Option<String>,
    },
    /// The simulated provider's responses file is invalid; the path is the message, the
    /// cause says what is wrong with it.
    #[error("{}", .path.display())]
    SimulatedResponses {
        /// The responses file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: ScriptError,
    },
    /// The LLM clients could not be set up, even for the dry run of a failing setup.
    #[error(transparent)]
    LlmSetup(LlmSetupError),
    /// `[artifacts] include` holds an invalid glob.
    #[error(transparent)]
    ArtifactsInclude(IncludeGlobError),
    /// The run store failed (events, records, checkpoints).
    #[error(transparent)]
    Store(StoreError),
    /// [`crate::run::PreparedRun::execute`] was called a second time.
    #[error("run executed twice")]
    ExecutedTwice {
        /// The run id.
        run_id: String,
    },
    /// The workflow has no start node (validation rejects this first).
    #[error("workflow has no start node")]
    NoStartNode {
        /// The run id.
        run_id: String,
    },
    /// The run directory of a resumed run is missing.
    #[error("run directory {} does not exist", .path.display())]
    MissingRunDir {
        /// The run directory.
        path: PathBuf,
    },
    /// The run to resume has finished already.
    #[error("run {run_id} already finished with status {status}")]
    AlreadyFinished {
        /// The run id.
        run_id: String,
        /// Its final status.
        status: RunStatus,
    },
    /// The run's state could not be restored for resuming (SPEC 8.7).
    #[error("cannot resume run {run_id}")]
    Resume {
        /// The run id.
        run_id: String,
        /// What is missing or failed.
        #[source]
        source: ResumeError,
    },
    /// The environment cannot start a run (`FABRO_RANDOM_SEED`, isolation, …).
    #[error(transparent)]
    Environment(RunEnvError),
    /// The run to resume has no run directory, and no repository at hand has its
    /// metadata.
    #[error("run {run_id} has no run directory under {}", .root.display())]
    NoRunDir {
        /// The run id.
        run_id: String,
        /// The storage root.
        root: PathBuf,
    },
    /// Another process holds the run's lock.
    #[error(
        "run {run_id} is being resumed by another process{}",
        .pid.map(|pid| format!(" (pid {pid})")).unwrap_or_default()
    )]
    Locked {
        /// The run id.
        run_id: String,
        /// The holder's pid, when known.
        pid: Option<u32>,
    },
    /// The run to resume has no checkpoint.
    #[error("run {run_id} has no checkpoint to resume from")]
    NoCheckpoint {
        /// The run id.
        run_id: String,
    },
    /// A fork or a rewind names a stage the run does not have (SPEC 20.2, 20.3).
    #[error("run {run_id} has no stage {stage}")]
    NoSuchStage {
        /// The run.
        run_id: String,
        /// The stage as named: `NODE`, `NODE@VISIT` or `of rank N`.
        stage: String,
    },
    /// No complete checkpoint of the run's current history follows the stage (a stage
    /// that is running, that a rewind removed, or of a parallel branch).
    #[error("run {run_id} has no complete checkpoint written after stage {stage}")]
    NoCheckpointAfter {
        /// The run.
        run_id: String,
        /// The stage, `NODE@VISIT`.
        stage: String,
    },
    /// `fabro fork --workflow` names a workflow without nodes the fork's checkpoint
    /// completed or continues at (SPEC 20.2).
    #[error("the workflow lacks nodes the fork's checkpoint has completed: {}", quoted_list(.nodes))]
    MissingNodes {
        /// The missing node ids, sorted.
        nodes: Vec<String>,
    },
    /// A rewind of a run that an execution holds (SPEC 20.3).
    #[error("run {run_id} is running; cancel it before rewinding it")]
    Running {
        /// The run.
        run_id: String,
    },
    /// The run has a rewind that has not finished; `fabro rewind` or `fabro resume`
    /// finishes it.
    #[error("run {run_id} has an unfinished rewind; finish it with fabro rewind or fabro resume")]
    RewindPending {
        /// The run.
        run_id: String,
    },
    /// A step of a rewind failed (SPEC 20.3); running the rewind again finishes it.
    #[error("cannot rewind run {run_id}")]
    Rewind {
        /// The run.
        run_id: String,
        /// The step that failed.
        #[source]
        source: GitError,
    },
    /// A file could not be read or written.
    #[error("{action} {}", .path.display())]
    Io {
        /// What was attempted.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Why a run's state could not be restored for resuming (SPEC 8.7), the cause of
/// [`RunError::Resume`].
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    /// `manifest.json` cannot be read.
    #[error(transparent)]
    Manifest(StoreError),
    /// A run with git checkpointing has a checkpoint without a run-branch commit.
    #[error("its checkpoint names no run-branch commit")]
    NoRunBranchCommit,
    /// The worktree on the run branch cannot be made again.
    #[error(transparent)]
    Worktree(GitError),
    /// The run's checkpoint log cannot be continued.
    #[error(transparent)]
    Checkpoints(StoreError),
    /// A record of the run cannot be read: what a client is told is the record; the
    /// cause says why.
    #[error("its {record} cannot be read")]
    Records {
        /// `manifest`, `configuration`, `checkpoint`.
        record: &'static str,
        /// What failed (boxed: it is the largest cause, and errors travel by value).
        #[source]
        source: Box<StoreError>,
    },
    /// The run's records could not be restored from its metadata history.
    #[error(transparent)]
    Restore(Box<RestoreError>),
    /// The checkpoint's next node is missing or not a node of the workflow.
    #[error("its checkpoint names no next node of the workflow")]
    NoNextNode {
        /// The node id the checkpoint names, if any.
        next_node_id: Option<String>,
    },
}

impl RunError {
    /// What kind of failure this is, for exit codes and HTTP statuses.
    pub fn kind(&self) -> ErrorKind {
        match self {
            RunError::InvalidWorkflow { .. } => ErrorKind::InvalidWorkflow,
            RunError::Unparsed { .. } => ErrorKind::Unfit,
            // An answer that fits no gate of the stored workflow of a resumed run is a
            // bad argument; of a new run, a mismatch with the workflow given.
            RunError::UnknownAnswerNodes { stored: true, .. } => ErrorKind::Usage,
            RunError::UnknownAnswerNodes { stored: false, .. } => ErrorKind::Unfit,
            RunError::InvalidRunId { .. }
            | RunError::DirtyWorktree
            | RunError::SaveBefore { .. }
            | RunError::SimulatedResponses { .. }
            | RunError::LlmSetup(_)
            | RunError::ArtifactsInclude(_)
            | RunError::NoSuchStage { .. }
            | RunError::MissingNodes { .. }
            | RunError::Environment(_) => ErrorKind::Usage,
            RunError::NoRunDir { .. } | RunError::MissingRunDir { .. } => ErrorKind::NotFound,
            RunError::RunExists { .. }
            | RunError::Locked { .. }
            | RunError::AlreadyFinished { .. }
            | RunError::NoCheckpoint { .. }
            | RunError::NoCheckpointAfter { .. }
            | RunError::Running { .. }
            | RunError::RewindPending { .. }
            | RunError::Resume { .. } => ErrorKind::Conflict,
            RunError::Store(_) | RunError::Io { .. } | RunError::Rewind { .. } => {
                ErrorKind::Storage
            }
            RunError::StoredWorkflowInvalid { .. }
            | RunError::ExecutedTwice { .. }
            | RunError::NoStartNode { .. } => ErrorKind::Internal,
        }
    }
}

/// A store's file error is the run's file error (the CLI reports both alike); every
/// other store error is [`RunError::Store`].
impl From<StoreError> for RunError {
    fn from(error: StoreError) -> RunError {
        match error {
            StoreError::Io {
                action,
                path,
                source,
            } => RunError::Io {
                action,
                path,
                source,
            },
            error => RunError::Store(error),
        }
    }
}

/// `'a', 'b'`.
fn quoted_list(nodes: &[String]) -> String {
    nodes
        .iter()
        .map(|node| format!("'{node}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the human gates of the workflow are, for [`RunError::UnknownAnswerNodes`].
fn gates_note(gates: &[String]) -> String {
    if gates.is_empty() {
        "the workflow has no human gates".to_owned()
    } else {
        format!("human gates: {}", gates.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error_chain;

    #[test]
    fn one_line_renderings_name_the_run_and_the_cause() {
        let error = RunError::Resume {
            run_id: "r1".to_owned(),
            source: ResumeError::NoNextNode {
                next_node_id: Some("gone".to_owned()),
            },
        };
        assert_eq!(error.to_string(), "cannot resume run r1");
        assert_eq!(
            error_chain(&error),
            "cannot resume run r1: its checkpoint names no next node of the workflow"
        );
        let error = RunError::SimulatedResponses {
            path: PathBuf::from("responses.json"),
            source: ScriptError::UnknownErrorKind("boom".to_owned()),
        };
        assert_eq!(
            error_chain(&error),
            "responses.json: invalid simulated responses file: unknown error kind 'boom'"
        );
        let error = RunError::StoredWorkflowInvalid {
            path: PathBuf::from("graph.fabro"),
            first_error: None,
        };
        assert_eq!(
            error.to_string(),
            "engine error: the stored workflow does not check: it does not parse"
        );
        let error = RunError::UnknownAnswerNodes {
            unknown: vec!["a".to_owned(), "b".to_owned()],
            gates: vec!["review".to_owned()],
            stored: false,
        };
        assert_eq!(
            error.to_string(),
            "--answer names no human gate of the workflow: 'a', 'b' (human gates: review)"
        );
    }

    #[test]
    fn kinds_follow_whose_fault_a_failure_is() {
        let unknown = |stored| RunError::UnknownAnswerNodes {
            unknown: vec!["a".to_owned()],
            gates: Vec::new(),
            stored,
        };
        let io = || RunError::Io {
            action: "cannot read",
            path: PathBuf::from("f"),
            source: std::io::Error::other("disk"),
        };
        for (error, kind) in [
            (
                RunError::Unparsed {
                    path: PathBuf::from("w.fabro"),
                },
                ErrorKind::Unfit,
            ),
            (unknown(false), ErrorKind::Unfit),
            (unknown(true), ErrorKind::Usage),
            (
                RunError::InvalidRunId {
                    run_id: "/".to_owned(),
                },
                ErrorKind::Usage,
            ),
            (
                RunError::NoRunDir {
                    run_id: "r".to_owned(),
                    root: PathBuf::from("/home"),
                },
                ErrorKind::NotFound,
            ),
            (
                RunError::Locked {
                    run_id: "r".to_owned(),
                    pid: Some(7),
                },
                ErrorKind::Conflict,
            ),
            (
                RunError::AlreadyFinished {
                    run_id: "r".to_owned(),
                    status: RunStatus::Success,
                },
                ErrorKind::Conflict,
            ),
            (
                RunError::NoCheckpoint {
                    run_id: "r".to_owned(),
                },
                ErrorKind::Conflict,
            ),
            (io(), ErrorKind::Storage),
            (
                RunError::ExecutedTwice {
                    run_id: "r".to_owned(),
                },
                ErrorKind::Internal,
            ),
        ] {
            assert_eq!(error.kind(), kind, "{error}");
        }
        assert_eq!(
            RunError::Locked {
                run_id: "r".to_owned(),
                pid: Some(7),
            }
            .to_string(),
            "run r is being resumed by another process (pid 7)"
        );
    }
}
