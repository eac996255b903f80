//! One way into a run for every client (SPEC 4.1, 8.7, 12.1, 14.3): [`start`] prepares
//! a new run, [`resume`] a stored one, both building their [`RunOptions`] with
//! [`run_options`]. The CLI and the server differ only in their policy: where the
//! workflow and the configuration layers come from, who answers gates, how the run is
//! shown; the lock, the records, the checkpoint (from git or from the store) and the
//! working directory of a resumed run are decided here.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use fabro_language::SourceLoader;

use super::options::{catalog_for, environment_options};
use super::{prepare_resume_with, prepare_with, PreparedRun, ResumeError, RunError, RunOptions};
use crate::config::RunConfig;
use crate::git::{RemoteRepository, RunHistory};
use crate::id::RunId;
use crate::interviewer::Interviewer;
use crate::record::RunOrigin;
use crate::run_dir::RunPaths;
use crate::run_env::ConfigOverrides;
use crate::run_index::RunIndexError;
use crate::source::FsLoader;
use crate::store::{place_workflow, restore_records, StoreError, Stores};

/// What a client may set for a run it starts or resumes: the flags `fabro run` and
/// `fabro resume` share, and the fields of the server's start and resume requests.
#[derive(Clone, Default)]
pub struct Overrides {
    /// `--model`.
    pub model: Option<String>,
    /// `--provider`.
    pub provider: Option<String>,
    /// `--auto-approve`.
    pub auto_approve: bool,
    /// `--answer NODE=LABEL`, in order.
    pub answers: Vec<(String, String)>,
    /// The budget flags and `--no-in-place` (SPEC 17.1), over the configuration.
    pub limits: ConfigOverrides,
    /// The interactive source of answers (the console, a detached run's answer files,
    /// a server's channel); `None`: a gate without another answer fails closed.
    pub interviewer: Option<Arc<dyn Interviewer>>,
}

/// What a client asks of a new run.
pub struct StartRequest<'a> {
    /// The storage root (`$FABRO_HOME`): the run's scratch directory is under it.
    pub fabro_home: PathBuf,
    /// The workflow file.
    pub workflow_path: PathBuf,
    /// Reads the workflow's `@path` references and child workflows.
    pub loader: &'a dyn SourceLoader,
    /// The merged configuration layers (SPEC 12.3), before [`Overrides::limits`].
    pub config: RunConfig,
    /// `--goal`.
    pub goal: Option<String>,
    /// `--var K=V`, over the configuration's variables.
    pub vars: BTreeMap<String, String>,
    /// `--dry-run`.
    pub dry_run: bool,
    /// `--run-id`.
    pub run_id: Option<String>,
    /// The run's working directory; `None`: the current directory.
    pub work_dir: Option<PathBuf>,
    /// This process is the background worker of `--detach` (SPEC 12.1).
    pub detached_worker: bool,
    /// Who starts the run, recorded in the manifest (SPEC 14.2).
    pub origin: RunOrigin,
    /// Model, answers, limits and interviewer.
    pub overrides: Overrides,
    /// The repository named by URL the run works on (SPEC 18.3), fetched into a mirror;
    /// `None`: the repository of `work_dir`, if any.
    pub repository: Option<RemoteRepository>,
}

/// What a client asks of a resumed run; the rest comes from the run's records.
pub struct ResumeRequest<'a> {
    /// The storage root (`$FABRO_HOME`).
    pub fabro_home: PathBuf,
    /// A repository whose metadata history can give a run without records its records
    /// back (SPEC 8.7 step 2; the CLI's current repository).
    pub history: Option<&'a RunHistory>,
    /// Model, answers, limits and interviewer.
    pub overrides: Overrides,
    /// For a run whose manifest names a repository URL (SPEC 18.3): this machine's
    /// mirror with the run's refs fetched, whose metadata gives the newest checkpoint
    /// and whose run branch the worktree is made from.
    pub repository: Option<RemoteRepository>,
}

/// The one builder of run options from a client's configuration and overrides: the
/// limits over `config`, the environment and the model flags
/// ([`environment_options`]), the answers and the interviewer. [`start`] and
/// [`resume`] fill in the rest.
pub(crate) fn run_options(
    workflow_path: PathBuf,
    mut config: RunConfig,
    fabro_home: PathBuf,
    overrides: Overrides,
) -> Result<RunOptions, RunError> {
    let Overrides {
        model,
        provider,
        auto_approve,
        answers,
        limits,
        interviewer,
    } = overrides;
    limits.apply(&mut config);
    let mut options = environment_options(workflow_path, config, fabro_home, model, provider)
        .map_err(RunError::Environment)?;
    options.auto_approve = auto_approve;
    options.answers = answers;
    options.interviewer = interviewer;
    Ok(options)
}

/// PARSE to the first part of INITIALIZE of a new run (SPEC 4.1) with its records and
/// blobs in `stores`: validated, its id and scratch directory allocated.
pub fn start(stores: Stores, request: StartRequest<'_>) -> Result<PreparedRun, RunError> {
    let StartRequest {
        fabro_home,
        workflow_path,
        loader,
        config,
        goal,
        vars,
        dry_run,
        run_id,
        work_dir,
        detached_worker,
        origin,
        overrides,
        repository,
    } = request;
    let mut options = run_options(workflow_path, config, fabro_home, overrides)?;
    options.goal = goal;
    options.dry_run = dry_run;
    options.vars.extend(vars);
    options.run_id = run_id;
    options.work_dir = work_dir;
    options.detached_worker = detached_worker;
    options.repository = repository;
    let catalog = catalog_for(&options);
    let mut prepared = prepare_with(options, stores, loader, &catalog)?;
    prepared.set_origin(origin);
    Ok(prepared)
}

/// Prepares run `run_id` to continue from its newest complete checkpoint (SPEC 8.7),
/// with the workflow, goal, variables and configuration of its records and `request`'s
/// overrides. The run's lock is taken before anything of the run is read (step 3), so
/// that of two resumes one runs and the other is refused at once
/// ([`RunError::Locked`]); it is held until the run ends. A run without records is
/// restored from `request.history` when that has its metadata (step 2). An
/// interrupted rewind of the run (SPEC 20.3) is finished first.
pub fn resume(
    stores: Stores,
    run_id: &RunId,
    request: ResumeRequest<'_>,
) -> Result<PreparedRun, RunError> {
    let ResumeRequest {
        fabro_home,
        history,
        overrides,
        repository,
    } = request;
    let id = run_id.as_str().to_owned();
    let refused = |source: ResumeError| RunError::Resume {
        run_id: id.clone(),
        source,
    };
    let paths = RunPaths::new(&fabro_home, &id);
    let created = !paths.run_dir().is_dir();
    if created {
        // A shared store keeps the records of a run another machine executed (SPEC
        // 18.2: a worker takes it over); its directory here is made anew.
        let has_metadata = stores.runs.read_manifest(run_id).is_ok()
            || match history {
                Some(history) => history
                    .metadata_tip(&id)
                    .map_err(|error| refused(ResumeError::Restore(Box::new(error.into()))))?
                    .is_some(),
                None => false,
            };
        if !has_metadata {
            return Err(RunError::NoRunDir {
                run_id: id,
                root: fabro_home,
            });
        }
        fs_err::create_dir_all(paths.run_dir()).map_err(|source| RunError::Io {
            action: "cannot create",
            path: paths.run_dir().to_path_buf(),
            source,
        })?;
    }
    let lease = stores
        .runs
        .lock(run_id)
        .map_err(|error| lock_error(error, &id))?;
    let manifest = match stores.runs.read_manifest(run_id) {
        Ok(manifest) => manifest,
        Err(error) => {
            let restored = match history {
                Some(history) => restore_records(stores.runs.as_ref(), history, run_id)
                    .map_err(|error| refused(ResumeError::Restore(Box::new(error)))),
                None => Ok(false),
            };
            match restored {
                Ok(true) => stores
                    .runs
                    .read_manifest(run_id)
                    .map_err(|error| refused(unreadable("manifest", error)))?,
                Ok(false) if !created => return Err(refused(unreadable("manifest", error))),
                restored => {
                    // Leave no directory behind that looks like a run's set-up leftovers.
                    drop(lease);
                    let _ = fs_err::remove_dir_all(paths.run_dir());
                    return Err(restored.err().unwrap_or(RunError::NoRunDir {
                        run_id: id,
                        root: fabro_home,
                    }));
                }
            }
        }
    };
    // SPEC 20.3: a rewind that was interrupted is finished before the state is read.
    super::rewind::finish_pending(&stores, run_id, &fabro_home)?;
    let stored = stores
        .runs
        .load_checkpoint(run_id)
        .map_err(|error| refused(unreadable("checkpoint", error)))?;
    let checkpoint = match &repository {
        Some(repository) if manifest.run_branch.is_some() => {
            pushed_checkpoint(repository, &manifest, stored, &paths, &id)
                .map_err(|error| refused(unreadable("checkpoint", error)))?
        }
        _ => stored,
    }
    .ok_or_else(|| RunError::NoCheckpoint { run_id: id.clone() })?;
    let config = stores
        .runs
        .read_config(run_id)
        .map_err(|error| refused(unreadable("configuration", error)))?;
    place_workflow(stores.runs.as_ref(), run_id, &paths)
        .map_err(|error| refused(unreadable("workflow", error)))?;
    let work_dir = checkpoint
        .context_values
        .get("internal.work_dir")
        .and_then(serde_json::Value::as_str)
        .map(PathBuf::from);
    let mut options = run_options(paths.graph(), config, fabro_home, overrides)?;
    options.goal = Some(manifest.goal);
    options.dry_run = manifest.dry_run;
    options.run_id = Some(id);
    // A fork's parent is its source, not the run of a sub_workflow node.
    options.parent_run_id = manifest
        .parent_run_id
        .filter(|_| manifest.forked_from.is_none());
    options.work_dir = work_dir;
    options.repository = repository;
    let catalog = catalog_for(&options);
    prepare_resume_with(options, stores, checkpoint, lease, &FsLoader, &catalog)
}

/// The newest checkpoint of a run on a repository named by URL (SPEC 18.3): the newest
/// complete one of the metadata its workers pushed, fetched into `repository`'s mirror
/// (a checkpoint is pushed before the store names its commit). A run whose worker
/// pushed nothing starts over from the stored initial checkpoint at its base commit.
fn pushed_checkpoint(
    repository: &RemoteRepository,
    manifest: &crate::record::Manifest,
    stored: Option<crate::record::Checkpoint>,
    paths: &RunPaths,
    run_id: &str,
) -> Result<Option<crate::record::Checkpoint>, StoreError> {
    let pushed =
        crate::checkpoint::load_newest_from_git(&repository.mirror, paths.run_dir(), run_id)?;
    if pushed.is_some() {
        return Ok(pushed);
    }
    let fork = manifest.forked_from.is_some();
    Ok(stored
        .filter(|checkpoint| checkpoint.completed_nodes.is_empty() || fork)
        .map(|mut checkpoint| {
            checkpoint.git_commit_sha.clone_from(&manifest.base_sha);
            checkpoint
        }))
}

/// The run's `record` cannot be read.
fn unreadable(record: &'static str, source: StoreError) -> ResumeError {
    ResumeError::Records {
        record,
        source: Box::new(source),
    }
}

/// A lock held by another process is [`RunError::Locked`]; any other failure to take
/// it is the store's.
fn lock_error(error: StoreError, run_id: &str) -> RunError {
    match error {
        StoreError::Index(RunIndexError::Locked { pid, .. }) => RunError::Locked {
            run_id: run_id.to_owned(),
            pid,
        },
        StoreError::Locked { .. } => RunError::Locked {
            run_id: run_id.to_owned(),
            pid: None,
        },
        error => RunError::from(error),
    }
}
