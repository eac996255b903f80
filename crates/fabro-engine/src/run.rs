//! The run lifecycle (SPEC 4.1): PARSE, TRANSFORM and VALIDATE in [`prepare`],
//! INITIALIZE, EXECUTE and FINALIZE in [`PreparedRun::execute`].
//!
//! The split lets the CLI print the run id and directory before the first stage. A
//! prepared run either starts anew or resumes from a checkpoint ([`Start`]); its
//! records, checkpoints and events go to the [`RunStore`](crate::store::RunStore) and
//! its blobs to the [`BlobStore`](crate::blob::BlobStore) it was prepared with.
//!
//! Clients come in through [`start`] and [`resume`] (`lifecycle`), which build the
//! options with [`run_options`] and take the lock and the records a resume needs, and
//! through [`fork`] (a new run from another run's checkpoint, SPEC 20.2) and [`rewind`]
//! (a stopped run moved back to an earlier checkpoint, SPEC 20.3).
//!
//! The submodules are the steps: [`prepare`](self::prepare) (parse, check, allocate),
//! `git_plan` (SPEC 8.1), `records` (manifest, records, initial context), `execute`
//! (set-up, initialize, traverse), `finish` (FINALIZE) and `watchdog` (SPEC 9.11);
//! `point` finds the checkpoint written after a stage for `fork` and `rewind`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fabro_language::Variables;

use crate::config::RunConfig;
use crate::git::RemoteRepository;
use crate::id::RunId;
use crate::interviewer::Interviewer;
use crate::llm_target::{LlmDefaults, LlmSetup};
use crate::record::{Checkpoint, ForkedFrom};
use crate::run_dir::RunPaths;
use crate::run_index::RunStatus;
use crate::sandbox::SandboxEnv;
use crate::store::{Opening, RunLease, Stores};
use crate::traversal::RunEnd;

mod child_runner;
mod children;
mod error;
mod execute;
mod finish;
mod fork;
mod git_plan;
mod lifecycle;
mod options;
mod point;
mod prepare;
mod records;
mod rewind;
mod watchdog;

use children::StoredGraphs;
pub use error::{ErrorKind, ResumeError, RunError};
pub use fork::{fork, ForkRequest};
use git_plan::GitPlan;
pub use lifecycle::{resume, start, Overrides, ResumeRequest, StartRequest};
pub use point::StagePoint;
pub use prepare::{new_run_id, prepare, prepare_resume, prepare_resume_with, prepare_with};
pub use rewind::{rewind, RewindRequest, Rewound};

/// What `fabro run` asks for.
#[derive(Clone)]
pub struct RunOptions {
    /// The workflow file.
    pub workflow_path: PathBuf,
    /// `--goal`.
    pub goal: Option<String>,
    /// `--dry-run`.
    pub dry_run: bool,
    /// `--auto-approve`.
    pub auto_approve: bool,
    /// `--answer NODE=LABEL`, in order.
    pub answers: Vec<(String, String)>,
    /// `--var K=V` and config variables.
    pub vars: BTreeMap<String, String>,
    /// `--run-id`.
    pub run_id: Option<String>,
    /// `$FABRO_HOME`.
    pub fabro_home: PathBuf,
    /// The interactive source of human answers, asked after `--answer` and
    /// `--auto-approve` (SPEC 5.5 sources 3 and 4): the CLI's console, the answer files
    /// of a detached run, a server's channel. Child runs share it. `None`: a gate
    /// without another answer fails closed.
    pub interviewer: Option<Arc<dyn Interviewer>>,
    /// Model and provider layers.
    pub llm: LlmDefaults,
    /// The simulated provider's responses file.
    pub simulated_responses: Option<PathBuf>,
    /// `FABRO_RANDOM_SEED`.
    pub random_seed: Option<u64>,
    /// Extra environment for commands.
    pub sandbox_env: SandboxEnv,
    /// The merged configuration files (SPEC 12.3), recorded as `config.json`.
    pub config: RunConfig,
    /// The parent run, for child workflows of sub_workflow nodes (SPEC 5.10).
    pub parent_run_id: Option<String>,
    /// Goal used when no other source gives one (a child inherits its parent's goal).
    pub fallback_goal: Option<String>,
    /// Working directory of the run; `None` means the current directory.
    pub work_dir: Option<PathBuf>,
    /// This process is the background worker of `--detach`: the run directory exists
    /// already, created by the parent that printed the run id.
    pub detached_worker: bool,
    /// The repository named by URL the run works on (SPEC 18.3): its run branch and
    /// worktree are made in the mirror, its refs pushed after each checkpoint.
    pub repository: Option<RemoteRepository>,
}

/// The final state of a run, as `fabro run` reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunReport {
    /// Run id.
    pub run_id: RunId,
    /// Run directory.
    pub run_dir: PathBuf,
    /// `success`, `partial_success`, `fail` or `canceled`.
    pub status: RunStatus,
    /// Why, for `fail` and `canceled`.
    pub reason: Option<String>,
    /// How the traversal ended.
    pub end: RunEnd,
}

/// A validated workflow with its run directory allocated.
pub struct PreparedRun {
    options: RunOptions,
    workflow: Arc<fabro_language::Workflow>,
    workflow_name: String,
    goal: String,
    variables: Variables,
    paths: RunPaths,
    run_id: String,
    warnings: Vec<String>,
    /// The resolved LLM setup, or why it failed (the run then fails before any stage).
    llm: Option<Result<LlmSetup, String>>,
    simulated_llm: bool,
    /// A new run, or the checkpoint a resumed run continues from.
    start: Start,
    /// Git checkpointing for a new run (SPEC 8.1), decided while preparing.
    git_plan: GitPlan,
    /// `graph.fabro` and `children/` of a new run (SPEC 4.1); `None` when resuming.
    stored: Option<StoredGraphs>,
    /// The run lock a resume took before reading the run's state (SPEC 8.7 step 3).
    lease: Option<Box<dyn RunLease>>,
    /// Where the run's records and blobs go.
    stores: Stores,
    /// Recorded as the manifest's `origin` (SPEC 14.2).
    origin: crate::record::RunOrigin,
    /// Steering messages for the run's agent stages (SPEC 20.1).
    steering: crate::steering::SteeringQueue,
    /// The source of a fork (SPEC 20.2), recorded in its manifest.
    fork: Option<ForkSource>,
    /// The worker that executes the run (SPEC 18.2), named in `WorkflowRunStarted`.
    worker: Option<String>,
}

/// What a fork's manifest says of its source (SPEC 20.2).
#[derive(Debug, Clone)]
struct ForkSource {
    /// The source run and the rank of the stage the fork continues after.
    forked_from: ForkedFrom,
    /// The source's workflow path and name, when the fork runs the source's stored
    /// workflow (not an edited one).
    workflow: Option<(String, String)>,
}

/// Where a prepared run starts (SPEC 8.7).
#[derive(Debug)]
pub enum Start {
    /// At the workflow's start node, with a fresh context.
    New,
    /// At the next node of this checkpoint, with its context and counters.
    Resume(Box<Checkpoint>),
    /// A fork (SPEC 20.2): a new run with its own records, at the next node of another
    /// run's checkpoint, with that checkpoint's context and counters.
    Fork(Box<Checkpoint>),
}

impl Start {
    /// The checkpoint a resumed run or a fork continues from.
    pub fn checkpoint(&self) -> Option<&Checkpoint> {
        match self {
            Start::New => None,
            Start::Resume(checkpoint) | Start::Fork(checkpoint) => Some(checkpoint),
        }
    }

    /// How the run's logs are opened: a fork's are its own, new ones.
    fn opening(&self) -> Opening {
        match self {
            Start::New | Start::Fork(_) => Opening::New,
            Start::Resume(_) => Opening::Resume,
        }
    }

    /// Whether the run's records are written now (a new run or a fork).
    fn is_new(&self) -> bool {
        !matches!(self, Start::Resume(_))
    }
}

impl PreparedRun {
    /// The run id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The run directory.
    pub fn run_dir(&self) -> &Path {
        self.paths.run_dir()
    }

    /// Records `origin` as the starter of a new run (default: the CLI).
    pub fn set_origin(&mut self, origin: crate::record::RunOrigin) {
        self.origin = origin;
    }

    /// Names the worker that executes the run (SPEC 18.2) in its `WorkflowRunStarted`.
    pub fn set_worker(&mut self, worker: &str) {
        self.worker = Some(worker.to_owned());
    }

    /// The run's steering queue (SPEC 20.1): a handle a server keeps to steer the run.
    pub fn steering(&self) -> crate::steering::SteeringQueue {
        self.steering.clone()
    }

    /// Notes for stderr gathered while preparing (e.g. the simulated-provider note).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Where the run starts.
    pub fn start(&self) -> &Start {
        &self.start
    }

    /// The stores the run writes to.
    pub fn stores(&self) -> &Stores {
        &self.stores
    }

    /// The run id, typed.
    fn id(&self) -> RunId {
        RunId::from(self.run_id.as_str())
    }

    /// This run could not be resumed because of `source`.
    fn resume_error(&self, source: ResumeError) -> RunError {
        RunError::Resume {
            run_id: self.run_id.clone(),
            source,
        }
    }
}

impl RunOptions {
    /// Options to run `workflow_path` with `fabro_home` as the storage root, and nothing
    /// else set: no goal or variables, no answers, default LLM settings (the simulated
    /// provider when no credentials are configured), the merged configuration empty.
    pub fn new(workflow_path: PathBuf, fabro_home: PathBuf) -> RunOptions {
        RunOptions {
            workflow_path,
            goal: None,
            dry_run: false,
            auto_approve: false,
            answers: Vec::new(),
            vars: BTreeMap::new(),
            run_id: None,
            fabro_home,
            interviewer: None,
            llm: LlmDefaults::default(),
            simulated_responses: None,
            random_seed: None,
            sandbox_env: SandboxEnv::default(),
            config: RunConfig::default(),
            parent_run_id: None,
            fallback_goal: None,
            work_dir: None,
            detached_worker: false,
            repository: None,
        }
    }
}

#[cfg(test)]
mod tests;
