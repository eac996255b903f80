//! [`fork`] (SPEC 20.2): a new run from a checkpoint of an existing one, whatever its
//! status: its newest complete checkpoint, or the one written after a named stage.
//!
//! The fork is a new run with its own id, records and events, prepared like one
//! ([`allocate`]) but starting from the checkpoint ([`Start::Fork`](super::Start)):
//! its context, visit and retry counts, rank counter and simulated-provider cursors are
//! the checkpoint's, and it continues at the checkpoint's next node. Its manifest names
//! the source (`parent_run_id`, `forked_from`); with git checkpointing its run branch
//! starts at the checkpoint's run-branch commit, in the source's repository. It runs the
//! source's stored workflow, or an edited one that still has every node the checkpoint
//! completed. The source is only read.
//!
//! A fork killed while it is set up is a new run killed while it is set up: resumable
//! from its initial checkpoint once its manifest exists, else nothing `fabro runs`
//! lists (the fork can be made again).

use std::path::PathBuf;

use fabro_language::SourceLoader;

use super::git_plan::GitPlan;
use super::lifecycle::{run_options, Overrides};
use super::options::catalog_for;
use super::point::{self, StagePoint};
use super::prepare::{allocate, ForkStart};
use super::{ForkSource, PreparedRun, RunError};
use crate::id::RunId;
use crate::record::{ForkedFrom, RunOrigin};
use crate::run_dir::RunPaths;
use crate::run_index::RunStatus;
use crate::source::FsLoader;
use crate::store::{place_workflow, Stores};

/// What a client asks of a fork.
pub struct ForkRequest<'a> {
    /// The storage root (`$FABRO_HOME`): the source's and the fork's records are under it.
    pub fabro_home: PathBuf,
    /// `--at NODE[@VISIT]` or `--at-rank N`; `None`: the newest complete checkpoint.
    pub at: Option<StagePoint>,
    /// `--run-id`.
    pub run_id: Option<String>,
    /// `--workflow FILE`: an edited workflow instead of the source's stored one.
    pub workflow: Option<PathBuf>,
    /// Reads the edited workflow's `@path` references and child workflows.
    pub loader: &'a dyn SourceLoader,
    /// This process is the background worker of `--detach` (SPEC 12.1).
    pub detached_worker: bool,
    /// Who starts the fork, recorded in its manifest (SPEC 14.2).
    pub origin: RunOrigin,
    /// The options of `fabro resume`: model, answers, limits and interviewer.
    pub overrides: Overrides,
}

/// Prepares a fork of run `source` (SPEC 20.2): validated, its id and scratch directory
/// allocated; executing it writes its records and runs it from the checkpoint's next
/// node. The source's configuration, goal and variables are the fork's, with
/// `request.overrides` on top.
pub fn fork(
    stores: Stores,
    source: &RunId,
    request: ForkRequest<'_>,
) -> Result<PreparedRun, RunError> {
    let ForkRequest {
        fabro_home,
        at,
        run_id,
        workflow,
        loader,
        detached_worker,
        origin,
        overrides,
    } = request;
    let source_paths = RunPaths::new(&fabro_home, source.as_str());
    let manifest = stores
        .runs
        .read_manifest(source)
        .map_err(|_| RunError::NoRunDir {
            run_id: source.as_str().to_owned(),
            root: fabro_home.clone(),
        })?;
    if stores.runs.pending_rewind(source)?.is_some() {
        return Err(RunError::RewindPending {
            run_id: source.as_str().to_owned(),
        });
    }
    let repo = match (&manifest.run_branch, &manifest.repo_root) {
        (Some(_), Some(repo_root)) => Some(PathBuf::from(repo_root)),
        _ => None,
    };
    let chosen = match &at {
        Some(point) => point::after_stage(
            &stores,
            source,
            source_paths.run_dir(),
            repo.is_some(),
            point,
        )?,
        None => point::newest(&stores, source, source_paths.run_dir())?,
    };
    let mut checkpoint = chosen.checkpoint;
    checkpoint.run_status = RunStatus::Running;
    checkpoint.timestamp = crate::timestamp::now_rfc3339();
    let git_plan = match (repo, &checkpoint.git_commit_sha) {
        (Some(repo_root), Some(sha)) => GitPlan::Clean {
            repo_root,
            head_sha: sha.clone(),
            work_dir_relative: PathBuf::from(
                manifest.work_dir_relative.clone().unwrap_or_default(),
            ),
            untracked: Vec::new(),
        },
        _ => GitPlan::Off,
    };
    let config = stores.runs.read_config(source)?;
    let edited = workflow.is_some();
    if !edited {
        // A store that keeps records elsewhere (SPEC 18.1) has the stored workflow put
        // in the source's scratch directory, where it is loaded from as for a resume.
        place_workflow(stores.runs.as_ref(), source, &source_paths)?;
    }
    let workflow_path = workflow.unwrap_or_else(|| source_paths.graph());
    let mut options = run_options(workflow_path, config, fabro_home, overrides)?;
    options.goal = Some(manifest.goal.clone());
    options.dry_run = manifest.dry_run;
    options.run_id = run_id;
    options.detached_worker = detached_worker;
    if matches!(git_plan, GitPlan::Off) {
        // Without a run branch the fork works where its source did.
        options.work_dir = checkpoint
            .context_values
            .get("internal.work_dir")
            .and_then(serde_json::Value::as_str)
            .map(PathBuf::from);
    }
    let fork = ForkStart {
        checkpoint,
        git_plan,
        source: ForkSource {
            forked_from: ForkedFrom {
                run_id: source.as_str().to_owned(),
                rank: chosen.rank,
            },
            workflow: (!edited).then_some((manifest.workflow_path, manifest.workflow_name)),
        },
    };
    let catalog = catalog_for(&options);
    // The stored workflow's children are stored beside it, in the source's directory.
    let loader: &dyn SourceLoader = if edited { loader } else { &FsLoader };
    let mut prepared = allocate(options, stores, loader, &catalog, Some(fork))?;
    prepared.set_origin(origin);
    Ok(prepared)
}
