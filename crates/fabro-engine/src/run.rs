//! The run lifecycle (SPEC 4.1): PARSE, TRANSFORM and VALIDATE in [`prepare`],
//! INITIALIZE, EXECUTE and FINALIZE in [`PreparedRun::execute`].
//!
//! The split lets the CLI print the run id and directory before the first stage.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabro_language::render::dot::render_dot;
use fabro_language::variable::resolve_goal;
use fabro_language::{
    check, decode_source, CheckOptions, Checked, ModelCatalog, SourceLoader, StageStatus, Variables,
};
use fabro_llm::simulated::{Script, SimulatedClient};
use rand::SeedableRng;
use tokio_util::sync::CancellationToken;

use crate::blob::BlobStore;
use crate::checkpoint::Checkpointer;
use crate::config::DirtyWorktree;
use crate::config::RunConfig;
use crate::event::kind::{
    BudgetExhausted, EventUsage, WatchdogTimeout, WorkflowRunCompleted, WorkflowRunFailed,
    WorkflowRunStarted,
};
use crate::event::{Emitter, Event, EventSink};
use crate::failure::FailureClass;
use crate::handler::RunServices;
use crate::id::RunId;
use crate::interviewer::{AnswerFlags, AutoApprove, FirstApplicable, Interviewer};
use crate::llm_target::{LlmDefaults, LlmSetup};
use crate::record::{Checkpoint, Manifest};
use crate::run_dir::{write_json_atomic, RunPaths};
use crate::run_index::RunStatus;
use crate::sandbox::SandboxEnv;
use crate::timestamp::now_rfc3339;
use crate::traversal::{CancelCause, RunEnd, RunState, Traversal};

mod children;
mod error;

use children::{StoredGraphs, CHILDREN_DIR};
pub use error::{ResumeError, RunError};

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
    /// The checkpoint a resumed run continues from.
    resume: Option<Checkpoint>,
    /// Git checkpointing for a new run (SPEC 8.1), decided while preparing.
    git_plan: GitPlan,
    /// `graph.fabro` and `children/` of a new run (SPEC 4.1); `None` when resuming.
    stored: Option<StoredGraphs>,
    /// The run lock a resume took before reading the run's state (SPEC 8.7 step 3).
    lock: Option<crate::run_index::RunLock>,
}

/// Whether and how a new run checkpoints into git (SPEC 8.1).
#[derive(Debug, Clone)]
enum GitPlan {
    /// No repository, a dry run, a child workflow or a resumed run.
    Off,
    /// Tracked files are modified: run in place, warn; the tree was saved under
    /// `before_ref` (SPEC 17.2).
    Dirty {
        /// Root of the repository's working tree (in the manifest, for `fabro gc`).
        repo_root: PathBuf,
        /// `refs/fabro-before/{run_id}`.
        before_ref: String,
    },
    /// A clean repository: a run branch and a worktree.
    Clean {
        repo_root: PathBuf,
        head_sha: String,
        work_dir_relative: PathBuf,
        untracked: Vec<String>,
    },
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

    /// Notes for stderr gathered while preparing (e.g. the simulated-provider note).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// This run could not be resumed because of `source`.
    fn resume_error(&self, source: ResumeError) -> RunError {
        RunError::Resume {
            run_id: self.run_id.clone(),
            source,
        }
    }
}

/// PARSE, TRANSFORM, VALIDATE and the first part of INITIALIZE: the run id and directory.
pub fn prepare(
    options: RunOptions,
    loader: &dyn SourceLoader,
    models: &dyn ModelCatalog,
) -> Result<PreparedRun, RunError> {
    let loaded = load_workflow(&options, loader, models)?;
    check_answers(&options, &loaded)?;
    let run_id = match &options.run_id {
        Some(run_id) => {
            if !valid_run_id(run_id) {
                return Err(RunError::InvalidRunId {
                    run_id: run_id.clone(),
                });
            }
            run_id.clone()
        }
        None => new_run_id(),
    };
    let paths = RunPaths::new(&options.fabro_home, &run_id);
    // A detached worker continues in the directory its parent allocated (SPEC 12.1).
    let allocated_by_parent = options.detached_worker && !paths.manifest().exists();
    if paths.run_dir().exists() && !allocated_by_parent {
        return Err(RunError::RunExists { run_id });
    }
    fs_err::create_dir_all(paths.run_dir()).map_err(|source| RunError::Io {
        action: "cannot create run directory",
        path: paths.run_dir().to_path_buf(),
        source,
    })?;
    let run_dir = paths.run_dir().to_path_buf();
    let prepared = store_children(loaded, &paths, models).and_then(|(loaded, stored)| {
        let mut prepared = finish_prepare(options, loaded, run_id, paths, None)?;
        prepared.stored = Some(stored);
        Ok(prepared)
    });
    if prepared.is_err() && !allocated_by_parent {
        // Nothing started: a run refused while preparing leaves no directory behind.
        let _ = fs_err::remove_dir_all(&run_dir);
    }
    prepared
}

/// The stored texts of a new run's workflow and child workflows (SPEC 4.1). With child
/// workflows, the workflow that runs is the stored one, checked again as if read from
/// the run directory, so that sub_workflow nodes start the stored children.
fn store_children(
    loaded: LoadedWorkflow,
    paths: &RunPaths,
    models: &dyn ModelCatalog,
) -> Result<(LoadedWorkflow, StoredGraphs), RunError> {
    let stored = StoredGraphs::of(&loaded.workflow, &loaded.children);
    if loaded.children.is_empty() {
        return Ok((loaded, stored));
    }
    let loader = stored.loader(paths.run_dir());
    let check_options = CheckOptions {
        loader: &loader,
        variables: &loaded.variables,
        models,
    };
    let checked = check(&paths.graph(), &stored.graph, &check_options);
    let first_error = checked
        .diagnostics
        .iter()
        .find(|diagnostic| diagnostic.severity() == fabro_language::Severity::Error)
        .map(|diagnostic| diagnostic.message.clone());
    match (checked.workflow, first_error) {
        (Some(workflow), None) => Ok((
            LoadedWorkflow {
                workflow,
                children: checked.children,
                ..loaded
            },
            stored,
        )),
        (_, first_error) => Err(RunError::StoredWorkflowInvalid {
            path: paths.graph(),
            first_error,
        }),
    }
}

/// PARSE, TRANSFORM and VALIDATE of a stored run's workflow, to continue it from
/// `checkpoint` (SPEC 8.7). `options.run_id` names the run, whose directory must exist;
/// `options.workflow_path` is its `graph.fabro`. `lock` is the run's lock, taken by the
/// caller before it read `checkpoint` (SPEC 8.7 step 3), and held until the run ends.
pub fn prepare_resume(
    options: RunOptions,
    checkpoint: Checkpoint,
    lock: crate::run_index::RunLock,
    loader: &dyn SourceLoader,
    models: &dyn ModelCatalog,
) -> Result<PreparedRun, RunError> {
    let loaded = load_workflow(&options, loader, models)?;
    check_answers(&options, &loaded)?;
    let run_id = checkpoint.run_id.clone();
    let paths = RunPaths::new(&options.fabro_home, &run_id);
    if !paths.run_dir().is_dir() {
        return Err(RunError::MissingRunDir {
            path: paths.run_dir().to_path_buf(),
        });
    }
    if matches!(
        checkpoint.run_status,
        RunStatus::Success | RunStatus::PartialSuccess | RunStatus::Fail
    ) {
        // A process killed between the journal's final record and the replacement of
        // `checkpoint.json` leaves the file behind the journal: readers of the file (runs,
        // inspect, scripts) must see the run finished too.
        repair_checkpoint_file(&paths, &checkpoint);
        return Err(RunError::AlreadyFinished {
            run_id: run_id.into_string(),
            status: checkpoint.run_status.to_string(),
        });
    }
    let mut prepared = finish_prepare(
        options,
        loaded,
        run_id.into_string(),
        paths,
        Some(checkpoint),
    )?;
    prepared.lock = Some(lock);
    Ok(prepared)
}

/// Replaces `checkpoint.json` with `checkpoint` when it says something else; failures are
/// logged, since the caller refuses the resume either way.
fn repair_checkpoint_file(paths: &RunPaths, checkpoint: &Checkpoint) {
    let path = paths.checkpoint();
    let Ok(mut bytes) = serde_json::to_vec(checkpoint) else {
        return;
    };
    bytes.push(b'\n');
    if fs_err::read(&path).ok().as_deref() == Some(bytes.as_slice()) {
        return;
    }
    if let Err(error) = crate::run_dir::write_atomic(&path, &bytes) {
        tracing::warn!(%error, "cannot repair checkpoint.json");
    }
}

/// `--answer NODE=LABEL` must name a human gate of the workflow or of one of its child
/// workflows (SPEC 12.1); child runs inherit their parent's answers unchecked.
fn check_answers(options: &RunOptions, loaded: &LoadedWorkflow) -> Result<(), RunError> {
    if options.parent_run_id.is_some() || options.answers.is_empty() {
        return Ok(());
    }
    fn gates_of(
        workflow: &fabro_language::Workflow,
        children: &[fabro_language::ChildWorkflow],
        gates: &mut std::collections::BTreeSet<String>,
    ) {
        for node in workflow.nodes() {
            if node.handler == fabro_language::HandlerKind::Human {
                gates.insert(node.id.clone());
            }
        }
        for child in children {
            if let Some(workflow) = &child.checked.workflow {
                gates_of(workflow, &child.checked.children, gates);
            }
        }
    }
    let mut gates = std::collections::BTreeSet::new();
    gates_of(&loaded.workflow, &loaded.children, &mut gates);
    let unknown: std::collections::BTreeSet<&str> = options
        .answers
        .iter()
        .map(|(node, _)| node.as_str())
        .filter(|node| !gates.contains(*node))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    Err(RunError::UnknownAnswerNodes {
        unknown: unknown.into_iter().map(str::to_owned).collect(),
        gates: gates.into_iter().collect(),
    })
}

/// A checked workflow with its goal and variables.
struct LoadedWorkflow {
    workflow: fabro_language::Workflow,
    /// Its child workflows, as loaded.
    children: Vec<fabro_language::ChildWorkflow>,
    goal: String,
    variables: Variables,
}

/// PARSE, TRANSFORM and VALIDATE with the run's goal and variables.
fn load_workflow(
    options: &RunOptions,
    loader: &dyn SourceLoader,
    models: &dyn ModelCatalog,
) -> Result<LoadedWorkflow, RunError> {
    let path = options.workflow_path.clone();
    // A regular file only, read no further than one byte past the limit (issue 14.7).
    let read = crate::source::read_regular_file(&path, fabro_language::syntax::MAX_SOURCE_BYTES)
        .map_err(|source| RunError::Io {
            action: "cannot read workflow",
            path: path.clone(),
            source,
        })?;
    if let Some(size) = read.oversized {
        return Err(RunError::InvalidWorkflow {
            path,
            text: String::new(),
            checked: Box::new(Checked {
                workflow: None,
                diagnostics: vec![fabro_language::oversized_source(size)],
                children: Vec::new(),
            }),
        });
    }
    let bytes = read.bytes;
    let text = match decode_source(&bytes) {
        Ok(text) => text.to_owned(),
        Err(diagnostic) => {
            return Err(RunError::InvalidWorkflow {
                path,
                text: String::from_utf8_lossy(&bytes).into_owned(),
                checked: Box::new(Checked {
                    workflow: None,
                    diagnostics: vec![diagnostic],
                    children: Vec::new(),
                }),
            })
        }
    };
    // The goal needs the graph attribute, so parse once without variables first.
    let graph_goal = fabro_language::syntax::parse(&text)
        .ok()
        .and_then(|graph| graph.attributes.value("goal").map(str::to_owned));
    let mut sources: Vec<&str> = Vec::new();
    if let Some(goal) = options.goal.as_deref() {
        sources.push(goal);
    }
    if let Some(goal) = options.config.run.goal.as_deref() {
        sources.push(goal);
    }
    if let Some(goal) = graph_goal.as_deref().filter(|goal| !goal.is_empty()) {
        sources.push(goal);
    }
    if let Some(goal) = options.fallback_goal.as_deref() {
        sources.push(goal);
    }
    let goal = resolve_goal(&sources, &options.vars);
    let variables = Variables::new(goal.clone(), options.vars.clone());
    let check_options = CheckOptions {
        loader,
        variables: &variables,
        models,
    };
    let checked = check(&path, &text, &check_options);
    if checked.has_errors() {
        return Err(RunError::InvalidWorkflow {
            path,
            text,
            checked: Box::new(checked),
        });
    }
    let Some(workflow) = checked.workflow else {
        return Err(RunError::Unparsed { path });
    };
    Ok(LoadedWorkflow {
        workflow,
        children: checked.children,
        goal,
        variables,
    })
}

/// The LLM setup and the rest of [`PreparedRun`].
fn finish_prepare(
    options: RunOptions,
    loaded: LoadedWorkflow,
    run_id: String,
    paths: RunPaths,
    resume: Option<Checkpoint>,
) -> Result<PreparedRun, RunError> {
    let LoadedWorkflow {
        workflow,
        goal,
        variables,
        ..
    } = loaded;
    let path = &options.workflow_path;
    let workflow_name = workflow
        .name(
            path.file_stem()
                .and_then(|stem| stem.to_str())
                .unwrap_or("workflow"),
        )
        .to_owned();
    let script = match &options.simulated_responses {
        Some(script_path) => {
            let text = fs_err::read_to_string(script_path).map_err(|source| RunError::Io {
                action: "cannot read simulated responses",
                path: script_path.clone(),
                source,
            })?;
            Script::parse(&text).map_err(|source| RunError::SimulatedResponses {
                path: script_path.clone(),
                source,
            })?
        }
        None => Script::default(),
    };
    let simulated = Arc::new(SimulatedClient::new(script));
    let llm = LlmSetup::resolve(&workflow, &options.llm, simulated, options.dry_run)
        .map_err(|error| error.to_string());
    let simulated_llm =
        matches!(&llm, Ok(setup) if setup.simulated_by_default()) && !options.dry_run;
    let mut warnings = Vec::new();
    if simulated_llm {
        warnings.push("note: no LLM credentials found; using the simulated provider".to_owned());
    }
    let git_plan = if resume.is_some() || options.dry_run || options.parent_run_id.is_some() {
        GitPlan::Off
    } else {
        plan_git(&options, &run_id, &mut warnings)?
    };
    Ok(PreparedRun {
        options,
        workflow: Arc::new(workflow),
        workflow_name,
        goal,
        variables,
        paths,
        run_id,
        warnings,
        llm: Some(llm),
        simulated_llm,
        resume,
        git_plan,
        stored: None,
        lock: None,
    })
}

/// Author, exclusions and working directory of a run's git checkpointing (SPEC 8.3).
fn git_settings(config: &RunConfig, work_dir_relative: PathBuf) -> crate::git::RunGitSettings {
    crate::git::RunGitSettings {
        author: crate::git::Author::new(
            config
                .git
                .author_name
                .clone()
                .unwrap_or_else(|| "fabro".to_owned()),
            config
                .git
                .author_email
                .clone()
                .unwrap_or_else(|| "fabro@local".to_owned()),
        ),
        exclude_globs: config.checkpoint.exclude_globs.clone().unwrap_or_default(),
        work_dir_relative,
    }
}

/// SPEC 8.1: inspect the working directory's repository; warnings go to `warnings`.
/// A dirty tree is saved under `refs/fabro-before/{run_id}` first (SPEC 17.2), or refused.
fn plan_git(
    options: &RunOptions,
    run_id: &str,
    warnings: &mut Vec<String>,
) -> Result<GitPlan, RunError> {
    let work_dir = match &options.work_dir {
        Some(work_dir) => work_dir.clone(),
        None => match std::env::current_dir() {
            Ok(directory) => directory,
            Err(_) => return Ok(GitPlan::Off),
        },
    };
    Ok(match crate::git::inspect(&work_dir) {
        Ok(crate::git::RepoState::Clean {
            repo_root,
            head_sha,
            work_dir_relative,
            untracked,
        }) => {
            if !untracked.is_empty() {
                warnings.push(format!(
                    "warning: untracked files are not in the run worktree: {}",
                    list_paths(&untracked)
                ));
            }
            GitPlan::Clean {
                repo_root,
                head_sha,
                work_dir_relative,
                untracked,
            }
        }
        Ok(crate::git::RepoState::Dirty { repo_root, .. }) => {
            if options.config.run.dirty_worktree == Some(DirtyWorktree::Refuse) {
                return Err(RunError::DirtyWorktree);
            }
            // SPEC 17.2: the user's work is saved before anything runs in it.
            let author = git_settings(&options.config, PathBuf::new()).author;
            crate::git::save_before(&repo_root, run_id, &author).map_err(|source| {
                RunError::SaveBefore {
                    run_id: run_id.to_owned(),
                    source,
                }
            })?;
            GitPlan::Dirty {
                before_ref: crate::git::before_ref_name(run_id),
                repo_root,
            }
        }
        Ok(_) => GitPlan::Off,
        Err(error) => {
            warnings.push(format!(
                "warning: cannot inspect the git repository; running without git checkpoints: {}",
                crate::error_chain(&error)
            ));
            GitPlan::Off
        }
    })
}

/// The `dirty_worktree` warning of SPEC 17.2, without its `warning: ` prefix.
fn dirty_warning(before_ref: &str) -> String {
    format!(
        "working tree has uncommitted changes; running in place without git checkpoints \
         (saved as {before_ref}; restore with: git restore --source={before_ref} --worktree -- .)"
    )
}

/// The first 20 paths, comma-separated, then `and {n} more` (SPEC 8.1).
fn list_paths(paths: &[String]) -> String {
    let mut text = paths
        .iter()
        .take(20)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if paths.len() > 20 {
        text.push_str(&format!(" and {} more", paths.len() - 20));
    }
    text
}

/// A fresh run id: a ULID, so ids sort by start time.
pub fn new_run_id() -> String {
    ulid::Ulid::new().to_string()
}

/// `[A-Za-z0-9][A-Za-z0-9._-]{0,63}` (SPEC 12.1).
fn valid_run_id(run_id: &str) -> bool {
    let mut chars = run_id.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric())
        && run_id.len() <= 64
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

impl PreparedRun {
    /// The manifest of a new run (SPEC 11.1); with git checkpointing it names the run
    /// branch and base commit that the set-up is about to make.
    /// The run's answer sources, first applicable wins (SPEC 5.5): this run's own
    /// `--answer` values (a child run starts with its parent's again), `--auto-approve`,
    /// then the interactive source.
    fn interviewer(&self) -> Arc<dyn Interviewer> {
        let mut sources: Vec<Arc<dyn Interviewer>> =
            vec![Arc::new(AnswerFlags::new(&self.options.answers))];
        if self.options.auto_approve {
            sources.push(Arc::new(AutoApprove));
        }
        sources.extend(self.options.interviewer.clone());
        Arc::new(FirstApplicable::new(sources))
    }

    fn manifest(&self, simulated_llm: bool) -> Manifest {
        let (base_sha, run_branch, repo_root, work_dir_relative) = match &self.git_plan {
            GitPlan::Clean {
                repo_root,
                head_sha,
                work_dir_relative,
                ..
            } => (
                Some(head_sha.clone()),
                Some(crate::git::run_branch_name(&self.run_id)),
                Some(repo_root.display().to_string()),
                Some(work_dir_relative.display().to_string()),
            ),
            GitPlan::Dirty { repo_root, .. } => {
                (None, None, Some(repo_root.display().to_string()), None)
            }
            GitPlan::Off => (None, None, None, None),
        };
        Manifest {
            run_id: self.run_id.clone(),
            workflow_name: self.workflow_name.clone(),
            workflow_path: self.options.workflow_path.display().to_string(),
            goal: self.goal.clone(),
            node_count: self.workflow.nodes().len(),
            edge_count: self.workflow.edges().len(),
            base_sha,
            run_branch,
            started_at: now_rfc3339(),
            fabro_version: env!("CARGO_PKG_VERSION").to_owned(),
            dry_run: self.options.dry_run,
            parent_run_id: self.options.parent_run_id.clone(),
            vars: redact_vars(&self.options.vars),
            simulated_llm,
            repo_root,
            work_dir_relative,
        }
    }

    /// INITIALIZE for a new run: `graph.fabro`, `children/`, `config.json`, and
    /// `manifest.json` last (a run directory with a manifest is a complete one).
    fn write_records(&self, manifest: &Manifest) -> Result<(), RunError> {
        let io = |action: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| RunError::Io {
                action,
                path,
                source,
            }
        };
        let graph = match &self.stored {
            Some(stored) => std::borrow::Cow::Borrowed(stored.graph.as_str()),
            None => std::borrow::Cow::Owned(render_dot(&self.workflow)),
        };
        fs_err::write(self.paths.graph(), graph.as_bytes())
            .map_err(io("cannot write", &self.paths.graph()))?;
        // SPEC 4.1: the child workflows, recursively, as the stored graphs name them.
        for (name, text) in self.stored.iter().flat_map(|stored| &stored.children) {
            let path = self.paths.run_dir().join(CHILDREN_DIR).join(name);
            if let Some(parent) = path.parent() {
                fs_err::create_dir_all(parent).map_err(io("cannot create", parent))?;
            }
            fs_err::write(&path, text.as_bytes()).map_err(io("cannot write", &path))?;
        }
        // SPEC 12.3: the merged configuration, with the run's variables (CLI included)
        // and secret-looking values redacted.
        let mut config = self.options.config.clone();
        config.run.vars = redact_vars(&self.options.vars);
        write_json_atomic(&self.paths.config(), &config)
            .map_err(io("cannot write", &self.paths.config()))?;
        write_json_atomic(&self.paths.manifest(), manifest)
            .map_err(io("cannot write", &self.paths.manifest()))
    }

    /// INITIALIZE, EXECUTE and FINALIZE. `cancel` is fired by the caller on SIGINT or
    /// SIGTERM; `sinks` receive every event.
    pub async fn execute(
        mut self,
        cancel: CancellationToken,
        sinks: Vec<Arc<dyn EventSink>>,
    ) -> Result<RunReport, RunError> {
        let started = Instant::now();
        let io = |action: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| RunError::Io {
                action,
                path,
                source,
            }
        };
        let resume = self.resume.take();
        // SPEC 11.4: the run lock comes first, before anything of the run is read or
        // written: a resumed run got it from `prepare_resume`; a new run (whose directory
        // `prepare` just made) takes it here. Failures to lock never fail a new run.
        let run_lock = match self.lock.take() {
            Some(lock) => Some(lock),
            None => crate::run_index::RunLock::acquire(self.paths.run_dir())
                .inspect_err(|error| tracing::warn!(%error, "cannot take the run lock"))
                .ok(),
        };
        let emitter = match &resume {
            None => Emitter::open(&self.run_id, &self.paths.events(), 1, sinks),
            Some(_) => Emitter::reopen(&self.run_id, &self.paths.events(), sinks),
        }
        .map_err(RunError::Events)?;
        let emitter = Arc::new(emitter);
        let (llm, mut setup_failure) = match self.llm.take() {
            Some(Ok(llm)) => (llm, None),
            Some(Err(message)) => (
                LlmSetup::resolve(
                    &self.workflow,
                    &LlmDefaults::default(),
                    Arc::default(),
                    true,
                )
                .map_err(RunError::LlmSetup)?,
                Some(message),
            ),
            None => {
                return Err(RunError::ExecutedTwice {
                    run_id: self.run_id.clone(),
                })
            }
        };
        let simulated_llm = self.simulated_llm;
        let manifest = match &resume {
            None => self.manifest(simulated_llm),
            Some(_) => crate::run_index::read_manifest(self.paths.run_dir())
                .map_err(|error| self.resume_error(ResumeError::Manifest(error)))?,
        };
        // SPEC 8.7 step 4: a resumed run with git checkpointing gets a fresh worktree on
        // its run branch, reset to the checkpoint's commit. A run resumed from its initial
        // checkpoint may have been killed before its set-up made the branch.
        let run_git = match (&resume, &manifest.repo_root) {
            (Some(checkpoint), Some(repo_root)) if manifest.run_branch.is_some() => {
                let sha = checkpoint
                    .git_commit_sha
                    .as_deref()
                    .ok_or_else(|| self.resume_error(ResumeError::NoRunBranchCommit))?;
                let relative =
                    PathBuf::from(manifest.work_dir_relative.clone().unwrap_or_default());
                let attach = if checkpoint.completed_nodes.is_empty() {
                    crate::git::RunGit::restart
                } else {
                    crate::git::RunGit::reattach
                };
                Some(
                    attach(
                        Path::new(repo_root),
                        &self.run_id,
                        &self.paths.run_dir().join("worktree"),
                        sha,
                        git_settings(&self.options.config, relative),
                    )
                    .map_err(|error| self.resume_error(ResumeError::Worktree(error)))?,
                )
            }
            _ => None,
        };

        // A new run with git checkpointing works in the worktree its set-up makes below.
        let work_dir = match (&run_git, &self.git_plan, &self.options.work_dir) {
            (Some(git), _, _) => git.work_dir(),
            (
                None,
                GitPlan::Clean {
                    work_dir_relative, ..
                },
                _,
            ) if resume.is_none() => self
                .paths
                .run_dir()
                .join("worktree")
                .join(work_dir_relative),
            (None, _, Some(work_dir)) => work_dir.clone(),
            (None, _, None) => std::env::current_dir()
                .map_err(io("cannot read current directory", Path::new(".")))?,
        };
        let scanner = crate::asset_capture::AssetScanner::new(
            self.options
                .config
                .artifacts
                .include
                .as_deref()
                .unwrap_or_default(),
            crate::asset_capture::CaptureLimits::default(),
        )
        .map_err(RunError::ArtifactsInclude)?
        .skipping(&self.options.fabro_home);
        // SPEC 17.1: token and cost totals carry across resumes; the clock restarts.
        let budget = Arc::new(crate::budget::Budget::new(
            crate::budget::BudgetLimits::from_config(&self.options.config.run),
            resume
                .as_ref()
                .map_or_else(Default::default, |checkpoint| crate::budget::Totals {
                    tokens: checkpoint.llm_tokens,
                    cost_usd: checkpoint.llm_cost_usd,
                }),
            cancel.clone(),
        ));
        let services = Arc::new(RunServices {
            budget: Arc::clone(&budget),
            run_id: self.run_id.clone(),
            emitter: Arc::clone(&emitter),
            blobs: BlobStore::new(&self.options.fabro_home),
            cancel: cancel.clone(),
            dry_run: self.options.dry_run,
            sandbox_env: self.options.sandbox_env.clone(),
            interviewer: self.interviewer(),
            variables: self.variables.clone(),
            llm,
            run_options: self.options.clone(),
            threads: crate::thread::ThreadStore::default(),
            assets: crate::handler::AssetCapture::new(scanner, self.paths.run_dir()),
        });
        let mut state = RunState::default();
        let checkpointer = match &resume {
            None => {
                seed_context(
                    &mut state,
                    &self.workflow,
                    &self.goal,
                    &self.run_id,
                    &work_dir,
                );
                let mut checkpointer = Checkpointer::new(self.paths.run_dir());
                if let Some(git) = run_git {
                    services.assets.follow_git(&git);
                    checkpointer.attach_git(git);
                }
                checkpointer
            }
            Some(checkpoint) => {
                state = RunState::restore(checkpoint, &self.workflow);
                services
                    .llm
                    .simulated()
                    .restore_cursors(checkpoint.simulated_cursors.clone());
                let mut checkpointer = Checkpointer::resume(self.paths.run_dir())
                    .map_err(|error| self.resume_error(ResumeError::Checkpoints(error)))?;
                if let Some(git) = run_git {
                    services.assets.follow_git(&git);
                    checkpointer.attach_git(git);
                }
                checkpointer
            }
        };
        let first_rank = resume
            .as_ref()
            .map_or(0, |checkpoint| checkpoint.stage_rank);
        let rng = match self.options.random_seed {
            Some(seed) => rand::rngs::StdRng::seed_from_u64(seed),
            None => rand::rngs::StdRng::from_os_rng(),
        };
        let cause = Arc::new(CancelCause::default());
        let watchdog_paused = Arc::new(AtomicUsize::new(0));
        let mut traversal = Traversal {
            workflow: Arc::clone(&self.workflow),
            services: Arc::clone(&services),
            paths: self.paths.clone(),
            state,
            rng,
            work_dir: work_dir.clone(),
            dry_run_visit_limit: self.options.dry_run.then_some(10),
            cause: Arc::clone(&cause),
            watchdog_paused: Arc::clone(&watchdog_paused),
            branch: None,
            ranks: Arc::new(std::sync::atomic::AtomicU32::new(first_rank)),
            pending_join: None,
            pending_records: Vec::new(),
            checkpointer: Some(checkpointer),
            branch_git: None,
            join_cancel: None,
            resumed_stage: resume.is_some(),
            last_stage_dir: None,
            stage_log: None,
        };
        // A run killed after its exit stage's checkpoint but before the final one has
        // nothing left to execute: resuming it only finishes it.
        let exit_completed = resume.as_ref().is_some_and(|checkpoint| {
            checkpoint.next_node_id.is_none()
                && checkpoint
                    .current_node
                    .as_deref()
                    .and_then(|id| self.workflow.find(id))
                    == self.workflow.exit()
                && self.workflow.exit().is_some()
        });
        let start = match &resume {
            None => self.workflow.start(),
            Some(_) if exit_completed => self.workflow.exit(),
            Some(checkpoint) => checkpoint
                .next_node_id
                .as_deref()
                .and_then(|next| self.workflow.find(next)),
        }
        .ok_or_else(|| match &resume {
            None => RunError::NoStartNode {
                run_id: self.run_id.clone(),
            },
            Some(checkpoint) => self.resume_error(ResumeError::NoNextNode {
                next_node_id: checkpoint.next_node_id.clone(),
            }),
        })?;
        let start_id = self.workflow.node(start).id.clone();
        match &resume {
            None => {
                // SPEC 8.7, 11.1: the initial checkpoint, then the records with the
                // manifest last, so that every run `fabro runs` lists can be resumed from
                // its start; a directory without a manifest is a set-up that never
                // finished, which nothing lists.
                traversal.initial_checkpoint(Some(&start_id));
                pause_for_tests("before_manifest", &self.options.fabro_home);
                self.write_records(&manifest)?;
                pause_for_tests("after_manifest", &self.options.fabro_home);
                crate::run_index::register_start(&self.paths, &manifest);
                // SPEC 8.4: the run branch and its worktree. A failure here fails the
                // run, which stays listed with the reason.
                if let GitPlan::Clean {
                    repo_root,
                    head_sha,
                    work_dir_relative,
                    ..
                } = &self.git_plan
                {
                    let settings = git_settings(&self.options.config, work_dir_relative.clone());
                    match crate::git::RunGit::create(
                        repo_root,
                        &self.run_id,
                        head_sha,
                        &self.paths.run_dir().join("worktree"),
                        settings,
                    ) {
                        Ok(git) => {
                            traversal.services.assets.follow_git(&git);
                            if let Some(checkpointer) = traversal.checkpointer.as_mut() {
                                checkpointer.attach_git(git);
                            }
                            pause_for_tests("after_git_setup", &self.options.fabro_home);
                        }
                        Err(error) => {
                            setup_failure.get_or_insert_with(|| {
                                format!(
                                    "cannot set up git checkpointing: {}",
                                    crate::error_chain(&error)
                                )
                            });
                        }
                    }
                }
            }
            Some(_) => crate::run_index::register_start(&self.paths, &manifest),
        }
        emitter.emit(Event::run(WorkflowRunStarted {
            base_sha: manifest.base_sha.clone(),
            dry_run: self.options.dry_run,
            goal: self.goal.clone(),
            next_node_id: start_id.clone(),
            resumed: resume.is_some(),
            run_branch: manifest.run_branch.clone(),
            run_dir: self.paths.run_dir().display().to_string(),
            workflow_name: self.workflow_name.clone(),
        }));
        match &self.git_plan {
            GitPlan::Dirty { before_ref, .. } => {
                emitter.emit(Event::warning(
                    None,
                    "dirty_worktree",
                    &dirty_warning(before_ref),
                ));
            }
            GitPlan::Clean { untracked, .. } if !untracked.is_empty() => {
                emitter.emit(Event::warning(
                    None,
                    "untracked_not_in_worktree",
                    &format!(
                        "untracked files are not in the run worktree: {}",
                        untracked.join(", ")
                    ),
                ));
            }
            _ => {}
        }
        // With git, the first metadata commit holds the run's records (SPEC 8.3): a new
        // run's initial checkpoint is written again through git, as is a resumed run's
        // first one when the run never got that far.
        let git_metadata = traversal
            .checkpointer
            .as_mut()
            .and_then(Checkpointer::git_mut)
            .map(|git| git.metadata_sha().is_some());
        match (&resume, git_metadata) {
            (_, Some(false)) => traversal.initial_checkpoint(Some(&start_id)),
            (Some(_), _) => traversal.final_checkpoint(Some(&start_id), RunStatus::Running),
            (None, _) => {}
        }
        let (previous, entered_by) = match &resume {
            None => (None, None),
            Some(checkpoint) => {
                let current = checkpoint.current_node.as_deref();
                let previous = current.and_then(|id| checkpoint.node_outcomes.get(id).cloned());
                let entered_by = current
                    .and_then(|id| self.workflow.find(id))
                    .and_then(|from| {
                        self.workflow
                            .outgoing(from)
                            .find(|(_, edge)| edge.to == start)
                            .map(|(index, _)| index)
                    });
                (previous, entered_by)
            }
        };

        let end = match setup_failure {
            Some(reason) => RunEnd::Failed {
                reason,
                class: FailureClass::Deterministic,
                node_id: None,
            },
            None if exit_completed => RunEnd::Completed {
                status: traversal.completion_status(),
            },
            None => {
                let watchdog = spawn_watchdog(
                    self.workflow.settings.stall_timeout,
                    Arc::clone(&emitter),
                    cancel.clone(),
                    Arc::clone(&cause),
                    Arc::clone(&watchdog_paused),
                );
                let timer = budget.time_left().map(|left| {
                    let budget = Arc::clone(&budget);
                    tokio::spawn(async move {
                        tokio::time::sleep(left).await;
                        budget.check_duration();
                    })
                });
                let end = traversal.run_from(start, previous, entered_by).await;
                watchdog.abort();
                if let Some(timer) = timer {
                    timer.abort();
                }
                end
            }
        };
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let report = match &end {
            RunEnd::Completed { status } => {
                let run_status = RunStatus::completed(*status);
                traversal.final_checkpoint(None, run_status);
                let mut usage = fabro_llm::Usage::default();
                for outcome in traversal.state.node_outcomes.values() {
                    if let Some(stage_usage) = &outcome.usage {
                        usage.add(stage_usage);
                    }
                }
                emitter.emit(Event::run(WorkflowRunCompleted {
                    artifact_count: services.blobs.produced_count(),
                    asset_count: services.assets.captured.load(Ordering::SeqCst),
                    completed_count: traversal.state.completed_nodes.len(),
                    cost_usd: usage.cost_usd,
                    duration_ms,
                    status: run_status,
                    usage: EventUsage::from(usage),
                }));
                (run_status, None)
            }
            RunEnd::Failed {
                reason,
                class,
                node_id,
            } => {
                traversal.final_checkpoint(None, RunStatus::Fail);
                emitter.emit(Event::run(WorkflowRunFailed {
                    duration_ms,
                    failure_class: class.as_str().to_owned(),
                    node_id: node_id.clone(),
                    reason: reason.clone(),
                }));
                (RunStatus::Fail, Some(reason.clone()))
            }
            RunEnd::Canceled {
                reason,
                node_id,
                cause,
            } => {
                traversal.canceled_checkpoint(node_id.as_deref());
                let exhausted = budget
                    .exhausted()
                    .filter(|_| *cause == crate::traversal::StopCause::Budget);
                if let Some(exhausted) = &exhausted {
                    emitter.emit(Event::run(BudgetExhausted {
                        kind: exhausted.kind.as_str().to_owned(),
                        limit: exhausted.limit.clone(),
                        used: exhausted.used.clone(),
                    }));
                }
                if *cause == crate::traversal::StopCause::Stall {
                    emitter.emit(Event::run(WatchdogTimeout {
                        last_event_id: emitter.last_event_id(),
                        stall_timeout_s: self.workflow.settings.stall_timeout.as_secs(),
                    }));
                }
                emitter.emit(Event::run(WorkflowRunFailed {
                    duration_ms,
                    failure_class: if exhausted.is_some() {
                        FailureClass::BudgetExhausted
                    } else {
                        FailureClass::Canceled
                    }
                    .as_str()
                    .to_owned(),
                    node_id: node_id.clone(),
                    reason: reason.clone(),
                }));
                (RunStatus::Canceled, Some(reason.clone()))
            }
        };
        // SPEC 8.4: a finished run's worktree is removed (the branch stays); after a
        // failure or a cancellation it is kept for inspection and resume.
        if matches!(end, RunEnd::Completed { .. }) {
            if let Some(git) = traversal
                .checkpointer
                .as_mut()
                .and_then(Checkpointer::take_git)
            {
                if let Err(error) = git.remove_worktree() {
                    tracing::warn!(error = %crate::error_chain(&error), "cannot remove the run worktree");
                }
            }
        }
        // SPEC 11.4: the final status goes to the index before the lock is released.
        crate::run_index::register_end(&self.paths, &self.run_id, report.0, run_lock);
        Ok(RunReport {
            run_id: RunId::from(self.run_id.clone()),
            run_dir: self.paths.run_dir().to_path_buf(),
            status: report.0,
            reason: report.1,
            end,
        })
    }
}

/// Test hook for kills at chosen moments of a run's set-up, inert unless the
/// environment variable `FABRO_TEST_PAUSE_AT` names `point` (`before_manifest`,
/// `after_manifest` or `after_git_setup`): the process then creates
/// `{root}/test-paused-{point}` and sleeps until it is killed.
fn pause_for_tests(point: &str, root: &Path) {
    if std::env::var_os("FABRO_TEST_PAUSE_AT").is_some_and(|value| value == point) {
        let _ = fs_err::write(root.join(format!("test-paused-{point}")), b"");
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
}

/// The context at the start of a run (SPEC 4.1 step 4).
fn seed_context(
    state: &mut RunState,
    workflow: &fabro_language::Workflow,
    goal: &str,
    run_id: &str,
    work_dir: &Path,
) {
    let context = &mut state.context;
    for attribute in &workflow.attributes {
        context.set(format!("graph.{}", attribute.key), attribute.value.as_ref());
    }
    context.set("graph.goal", goal);
    context.set("internal.run_id", run_id);
    context.set("internal.work_dir", work_dir.display().to_string());
    context.set("internal.restart_count", 0);
    for key in [
        "outcome",
        "preferred_label",
        "failure_class",
        "failure_signature",
        "last_stage",
        "last_response",
    ] {
        context.set(key, "");
    }
}

/// Variables with secret-looking names redacted (SPEC 11.1, 13.1).
fn redact_vars(vars: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    vars.iter()
        .map(|(key, value)| {
            let value = if crate::sandbox::is_secret_name(key) {
                "[REDACTED]".to_owned()
            } else {
                value.clone()
            };
            (key.clone(), value)
        })
        .collect()
}

/// The stall watchdog (SPEC 9.11): cancels the run when nothing happened for
/// `stall_timeout`, unless a human question is open or a wait node sleeps.
fn spawn_watchdog(
    stall_timeout: Duration,
    emitter: Arc<Emitter>,
    cancel: CancellationToken,
    cause: Arc<CancelCause>,
    paused: Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if stall_timeout.is_zero() {
            return;
        }
        let tick = (stall_timeout / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
        loop {
            tokio::time::sleep(tick).await;
            if paused.load(Ordering::SeqCst) > 0 {
                emitter.touch();
                continue;
            }
            if emitter.last_activity().elapsed() >= stall_timeout {
                cause.set_stall(format!(
                    "stall timeout: no events for {}s",
                    stall_timeout.as_secs()
                ));
                cancel.cancel();
                return;
            }
        }
    })
}

/// Whether the final status of a run counts as success for exit codes.
pub fn exit_status(report: &RunReport) -> StageStatus {
    StageStatus::parse(report.status.as_str()).unwrap_or(StageStatus::Fail)
}

#[cfg(test)]
impl RunOptions {
    /// Options for handler tests: a workflow path under `root`, nothing else set.
    pub(crate) fn for_tests(root: &Path) -> RunOptions {
        RunOptions {
            workflow_path: root.join("workflow.fabro"),
            goal: None,
            dry_run: false,
            auto_approve: false,
            answers: Vec::new(),
            vars: BTreeMap::new(),
            run_id: None,
            fabro_home: root.join("home"),
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
        }
    }
}
