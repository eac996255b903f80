//! PARSE, TRANSFORM and VALIDATE (SPEC 4.1) and the run id and directory: [`prepare`]
//! for a new run, [`prepare_resume`] for a stored one.

use std::sync::Arc;

use fabro_language::variable::resolve_goal;
use fabro_language::{
    check, decode_source, CheckOptions, Checked, ModelCatalog, SourceLoader, Variables,
};
use fabro_llm::simulated::{Script, SimulatedClient};

use super::children::StoredGraphs;
use super::git_plan::{plan_git, GitPlan};
use super::{ForkSource, PreparedRun, RunError, RunOptions, Start};
use crate::llm_target::LlmSetup;
use crate::record::Checkpoint;
use crate::run_dir::RunPaths;
use crate::run_index::RunStatus;
use crate::store::{RunLease, Stores};

/// PARSE, TRANSFORM, VALIDATE and the first part of INITIALIZE: the run id and directory,
/// with the file-system stores of `options.fabro_home`.
pub fn prepare(
    options: RunOptions,
    loader: &dyn SourceLoader,
    models: &dyn ModelCatalog,
) -> Result<PreparedRun, RunError> {
    let stores = Stores::local(&options.fabro_home);
    prepare_with(options, stores, loader, models)
}

/// [`prepare`] with the run's records and blobs in `stores`. The run's scratch
/// directory (stage files, worktree) is `{fabro_home}/scratch/{run_id}` either way.
pub fn prepare_with(
    options: RunOptions,
    stores: Stores,
    loader: &dyn SourceLoader,
    models: &dyn ModelCatalog,
) -> Result<PreparedRun, RunError> {
    allocate(options, stores, loader, models, None)
}

/// Where a fork starts (SPEC 20.2): the source's checkpoint, the git plan that puts the
/// fork's run branch at that checkpoint's commit, and what its manifest records.
pub(super) struct ForkStart {
    /// The checkpoint, with status `running`.
    pub(super) checkpoint: Checkpoint,
    /// Git checkpointing of the fork.
    pub(super) git_plan: GitPlan,
    /// The manifest's `parent_run_id`, `forked_from` and workflow.
    pub(super) source: ForkSource,
}

/// PARSE to the allocation of a new run's id and directory: a new run, or a fork of
/// `fork`'s checkpoint, whose completed nodes and next node the workflow must have.
pub(super) fn allocate(
    options: RunOptions,
    stores: Stores,
    loader: &dyn SourceLoader,
    models: &dyn ModelCatalog,
    fork: Option<ForkStart>,
) -> Result<PreparedRun, RunError> {
    let loaded = load_workflow(&options, loader, models)?;
    // A fork's answers are the flags of a resume (SPEC 20.2): a bad one is a usage error.
    check_answers(&options, &loaded, fork.is_some())?;
    if let Some(fork) = &fork {
        check_fork_nodes(&loaded.workflow, &fork.checkpoint)?;
    }
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
        let (start, planned, source) = match fork {
            Some(fork) => (
                Start::Fork(Box::new(fork.checkpoint)),
                Some(fork.git_plan),
                Some(fork.source),
            ),
            None => (Start::New, None, None),
        };
        let mut prepared =
            finish_prepare(options, stores, loaded, (run_id, paths), start, planned)?;
        prepared.stored = Some(stored);
        prepared.fork = source;
        Ok(prepared)
    });
    if prepared.is_err() && !allocated_by_parent {
        // Nothing started: a run refused while preparing leaves no directory behind.
        let _ = fs_err::remove_dir_all(&run_dir);
    }
    prepared
}

/// SPEC 20.2: the workflow a fork runs must have every node its checkpoint completed,
/// and the node it continues at.
fn check_fork_nodes(
    workflow: &fabro_language::Workflow,
    checkpoint: &Checkpoint,
) -> Result<(), RunError> {
    let missing: std::collections::BTreeSet<&String> = checkpoint
        .completed_nodes
        .iter()
        .chain(&checkpoint.next_node_id)
        .filter(|node| workflow.find(node).is_none())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(RunError::MissingNodes {
        nodes: missing.into_iter().cloned().collect(),
    })
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
/// `checkpoint` (SPEC 8.7), with the file-system stores of `options.fabro_home`.
/// `options.run_id` names the run, whose directory must exist; `options.workflow_path`
/// is its `graph.fabro`. `lock` is the run's lock, taken by the caller before it read
/// `checkpoint` (SPEC 8.7 step 3), and held until the run ends.
pub fn prepare_resume(
    options: RunOptions,
    checkpoint: Checkpoint,
    lock: impl RunLease + 'static,
    loader: &dyn SourceLoader,
    models: &dyn ModelCatalog,
) -> Result<PreparedRun, RunError> {
    let stores = Stores::local(&options.fabro_home);
    prepare_resume_with(options, stores, checkpoint, Box::new(lock), loader, models)
}

/// [`prepare_resume`] with the run's records and blobs in `stores`; `lease` comes from
/// [`RunStore::lock`](crate::store::RunStore::lock) and `checkpoint` from
/// [`RunStore::load_checkpoint`](crate::store::RunStore::load_checkpoint), which reads
/// a git-checkpointed run's from its metadata history. A finished run is refused
/// ([`RunError::AlreadyFinished`]). Clients use [`resume`](super::resume), which does
/// both.
pub fn prepare_resume_with(
    options: RunOptions,
    stores: Stores,
    checkpoint: Checkpoint,
    lease: Box<dyn RunLease>,
    loader: &dyn SourceLoader,
    models: &dyn ModelCatalog,
) -> Result<PreparedRun, RunError> {
    let loaded = load_workflow(&options, loader, models)?;
    check_answers(&options, &loaded, true)?;
    let run_id = checkpoint.run_id.clone();
    let paths = RunPaths::new(&options.fabro_home, run_id.as_str());
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
        // inspect, scripts) must see the run finished too. Failures are logged, since
        // the resume is refused either way.
        if let Err(error) = stores.runs.publish_checkpoint(&run_id, &checkpoint) {
            tracing::warn!(error = %crate::error_chain(&error), "cannot repair checkpoint.json");
        }
        return Err(RunError::AlreadyFinished {
            run_id: run_id.into_string(),
            status: checkpoint.run_status,
        });
    }
    let mut prepared = finish_prepare(
        options,
        stores,
        loaded,
        (run_id.into_string(), paths),
        Start::Resume(Box::new(checkpoint)),
        Some(GitPlan::Off),
    )?;
    prepared.lease = Some(lease);
    Ok(prepared)
}

/// `--answer NODE=LABEL` must name a human gate of the workflow or of one of its child
/// workflows (SPEC 12.1); child runs inherit their parent's answers unchecked.
fn check_answers(
    options: &RunOptions,
    loaded: &LoadedWorkflow,
    stored: bool,
) -> Result<(), RunError> {
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
        stored,
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

/// The LLM setup and the rest of [`PreparedRun`]; git checkpointing as `planned`, else
/// as the working directory's repository says (SPEC 8.1).
fn finish_prepare(
    options: RunOptions,
    stores: Stores,
    loaded: LoadedWorkflow,
    (run_id, paths): (String, RunPaths),
    start: Start,
    planned: Option<GitPlan>,
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
    let git_plan = match planned {
        Some(plan) => plan,
        None if options.dry_run || options.parent_run_id.is_some() => GitPlan::Off,
        None => plan_git(&options, &run_id, &mut warnings)?,
    };
    let steering = crate::steering::SteeringQueue::of(
        &stores.runs,
        &crate::id::RunId::from(run_id.as_str()),
        paths.run_dir(),
    );
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
        start,
        git_plan,
        stored: None,
        lease: None,
        stores,
        origin: crate::record::RunOrigin::Cli,
        fork: None,
        steering,
        worker: None,
    })
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
