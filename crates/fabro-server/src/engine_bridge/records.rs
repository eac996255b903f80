//! The read side: run records as the API shows them (SPEC 14.3), read through the
//! engine's `RunStore` (the index, the `fabro inspect` document, stages and their files,
//! events), plus what lives beside the records in a run's directory (the run branch's
//! diffs, the artifacts directory). The documents have the fields of the CLI's `--json`
//! output.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use fabro_api::{
    Artifact, Diagnostic, DiagnosticEdge, DiagnosticSpan, InspectDocument, RunSummary, RunUsage,
    StageRow, StageUsage, WorkflowEntry,
};
use fabro_engine::local::{InspectView, Listing, RunIndexErrorKind};
use fabro_engine::{inspect_in, run_view_in, RunId, RunRecord, RunStatus, RunStore};
use fabro_engine::{StoreError, StoredStage};
use fabro_language::LineIndex;

use crate::error::{ApiError, ErrorKind};

pub use fabro_engine::{EventReader, StoredEvent, STAGE_FILES};

fn storage(error: impl std::error::Error + Send + Sync + 'static) -> ApiError {
    ApiError::internal(error)
}

/// Every run of the store, newest first.
pub fn list_runs(store: &dyn RunStore) -> Result<Vec<RunRecord>, ApiError> {
    store.list_runs().map_err(storage)
}

/// Every run of the store as a listing, newest first (may block on a rebuild).
pub fn listing(store: &dyn RunStore) -> Result<Listing, ApiError> {
    store.listing().map_err(storage)
}

/// The run `run` names (an id or a unique prefix of at least 4 characters); 404 when
/// none or several do.
pub fn resolve(store: &dyn RunStore, run: &str) -> Result<RunRecord, ApiError> {
    store
        .resolve(run)
        .map(Arc::unwrap_or_clone)
        .map_err(resolve_error)
}

/// The API error of a failed resolution: 404 when the argument names no single run.
pub fn resolve_error(error: StoreError) -> ApiError {
    match &error {
        StoreError::Index(index) if index.kind() == RunIndexErrorKind::NoSuchRun => {
            ApiError::explained(ErrorKind::NotFound, error)
        }
        _ => storage(error),
    }
}

/// Whether an execution holds the run's lock.
pub fn is_locked(store: &dyn RunStore, run_id: &str) -> bool {
    store.is_active(&RunId::from(run_id))
}

/// One element of `GET /api/v1/runs`: `fabro runs --json` plus `workflow_path` (which
/// the CLI's table shows for runs of workflows that share a name), `current_node`,
/// `usage`, `cost_usd` and `pending_question` (filled by the caller).
pub fn run_summary(store: &dyn RunStore, record: &RunRecord) -> RunSummary {
    summary_of(store, record, inspect_in(store, record).ok().as_ref())
}

/// [`run_summary`] from the run's inspected view (`None` when it cannot be read).
pub fn summary_of(
    store: &dyn RunStore,
    record: &RunRecord,
    inspected: Option<&InspectView>,
) -> RunSummary {
    let view = run_view_in(store, record);
    let totals = inspected.map(|view| &view.totals);
    RunSummary {
        run_id: view.run_id,
        workflow_name: view.workflow_name,
        workflow_path: Some(record.workflow_path.clone()),
        status: view.status,
        started_at: Some(view.started_at),
        finished_at: view.finished_at,
        run_dir: view.run_dir,
        goal: view.goal,
        simulated_llm: view.simulated_llm,
        reason: view.reason,
        current_node: inspected.and_then(|view| view.current_node.clone()),
        usage: RunUsage {
            input_tokens: totals.map_or(0, |totals| totals.input_tokens),
            output_tokens: totals.map_or(0, |totals| totals.output_tokens),
            tokens: totals.map_or(0, |totals| totals.tokens),
        },
        cost_usd: totals.and_then(|totals| totals.cost_usd),
        pending_question: None,
        worker: record.worker.clone(),
    }
}

/// The `fabro inspect --json` document of a run, plus `pending_question` (filled by the
/// caller).
pub fn inspect(store: &dyn RunStore, record: &RunRecord) -> Result<InspectDocument, ApiError> {
    let view = inspect_in(store, record).map_err(storage)?;
    Ok(InspectDocument {
        inspect: view,
        pending_question: None,
    })
}

fn stage_row(stage: StoredStage, run_status: RunStatus) -> StageRow {
    let files = stage.files;
    let Some(status) = stage.status else {
        let state = if run_status == RunStatus::Running {
            "running"
        } else {
            "incomplete"
        };
        return StageRow {
            rank: stage.rank,
            node_id: stage.node_id,
            visit: stage.visit,
            handler: None,
            status: state.to_owned(),
            attempts: None,
            started_at: None,
            finished_at: None,
            duration_ms: None,
            model: None,
            usage: None,
            cost_usd: None,
            files_touched: Vec::new(),
            files,
        };
    };
    let usage = status.usage.as_ref();
    StageRow {
        rank: status.rank,
        node_id: status.node_id,
        visit: status.visit,
        handler: Some(status.handler),
        status: status.status.as_str().to_owned(),
        attempts: Some(status.attempt),
        started_at: Some(status.started_at),
        finished_at: Some(status.finished_at),
        duration_ms: Some(status.duration_ms),
        model: status.model,
        usage: usage.map(|usage| StageUsage {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            reasoning_tokens: usage.reasoning_tokens,
            cache_read_tokens: usage.cache_read_tokens,
            cache_write_tokens: usage.cache_write_tokens,
        }),
        cost_usd: usage.and_then(|usage| usage.cost_usd),
        files_touched: status.files_touched,
        files,
    }
}

/// `GET /api/v1/runs/{id}/stages`: stages in rank order.
pub fn stages(store: &dyn RunStore, record: &RunRecord) -> Vec<StageRow> {
    store
        .stages(&RunId::from(record.run_id.as_str()))
        .unwrap_or_default()
        .into_iter()
        .map(|stage| stage_row(stage, record.status))
        .collect()
}

/// The stage of `rank`.
fn stage_by_rank(store: &dyn RunStore, run_id: &str, rank: u32) -> Result<StoredStage, ApiError> {
    store
        .stages(&RunId::from(run_id))
        .map_err(storage)?
        .into_iter()
        .find(|stage| stage.rank == rank)
        .ok_or_else(|| ApiError::not_found(format!("no stage of rank {rank}")))
}

/// One stage file of SPEC 11.1 as text; 404 for any other name.
pub fn stage_file(
    store: &dyn RunStore,
    run_id: &str,
    rank: u32,
    name: &str,
) -> Result<Vec<u8>, ApiError> {
    if !STAGE_FILES.contains(&name) {
        return Err(ApiError::not_found(format!("no stage file named '{name}'")));
    }
    stage_by_rank(store, run_id, rank)?;
    store
        .stage_file(&RunId::from(run_id), rank, name)
        .ok()
        .flatten()
        .ok_or_else(|| ApiError::not_found(format!("stage {rank} has no {name}")))
}

/// The stage's run-branch commit against its parent, as a unified diff; 404 without git
/// checkpoints.
pub fn stage_diff(
    store: &dyn RunStore,
    record: &RunRecord,
    rank: u32,
    mirrors: &fabro_engine::repository::Mirrors,
) -> Result<Vec<u8>, ApiError> {
    let stage = stage_by_rank(store, &record.run_id, rank)?;
    let run_id = RunId::from(record.run_id.as_str());
    let lines = fabro_engine::local::stage_diff(store, &run_id, &stage.node_id, Some(mirrors))
        .map_err(|error| match error {
            fabro_engine::local::DiffError::Git { .. }
            | fabro_engine::local::DiffError::Fetch(_)
            | fabro_engine::local::DiffError::Store(_) => storage(error),
            error => ApiError::explained(ErrorKind::NotFound, error),
        })?;
    Ok(lines.into_iter().flat_map(|line| line.text).collect())
}

/// The captured assets of a run (SPEC 7.8): `{path, size, node_id, attempt}`, `path`
/// relative to `artifacts/files/`.
pub fn artifacts(run_dir: &Path) -> Vec<Artifact> {
    let base = run_dir.join("artifacts").join("files");
    let mut found = Vec::new();
    let mut pending = vec![base.clone()];
    while let Some(directory) = pending.pop() {
        let Ok(entries) = fs_err::read_dir(&directory) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_dir() {
                pending.push(path);
            } else if kind.is_file() {
                let Ok(relative) = path.strip_prefix(&base) else {
                    continue;
                };
                let mut parts = relative
                    .components()
                    .filter_map(|part| part.as_os_str().to_str());
                let node = parts.next().unwrap_or_default().to_owned();
                let attempt = parts
                    .next()
                    .and_then(|part| part.strip_prefix("retry_"))
                    .and_then(|number| number.parse::<u32>().ok());
                found.push(Artifact {
                    path: relative.to_string_lossy().into_owned(),
                    size: entry.metadata().map(|metadata| metadata.len()).unwrap_or(0),
                    node_id: node,
                    attempt,
                });
            }
        }
    }
    found.sort_by(|left, right| left.path.cmp(&right.path));
    found
}

/// The file of artifact `path` (relative to `artifacts/files/`), or `None` for any path
/// that leaves that directory: `..`, absolute paths, and symlinks anywhere on the way.
pub fn artifact_file(run_dir: &Path, path: &str) -> Option<PathBuf> {
    let relative = Path::new(path);
    if path.is_empty()
        || !relative
            .components()
            .all(|component| matches!(component, Component::Normal(_)))
    {
        return None;
    }
    let base = run_dir.join("artifacts").join("files");
    let mut current = base.clone();
    for component in relative.components() {
        current.push(component);
        let metadata = fs_err::symlink_metadata(&current).ok()?;
        if metadata.file_type().is_symlink() {
            return None;
        }
    }
    let canonical_base = fs_err::canonicalize(&base).ok()?;
    let canonical = fs_err::canonicalize(&current).ok()?;
    (canonical.starts_with(&canonical_base) && canonical.is_file()).then_some(canonical)
}

/// A run's workflow laid out as `fabro graph` renders it, before any status: the layout
/// of a large graph is the costly part, and it never changes during a run.
#[derive(Debug)]
pub struct GraphLayout {
    /// The SVG, XML declaration included.
    svg: String,
    /// The node ids, in the order of their `<g class="node" id=…>` groups.
    nodes: Vec<String>,
}

/// Marks the start of each node's group in [`GraphLayout::svg`].
const NODE_MARKER: &str = "<g class=\"node\" id=";

/// Lays out the stored workflow `text` of the run in `run_dir` (checked as its
/// `graph.fabro`).
pub fn graph_layout(
    run_dir: &Path,
    text: &str,
    workflow_name: &str,
) -> Result<GraphLayout, ApiError> {
    let path = run_dir.join("graph.fabro");
    let options = fabro_language::CheckOptions {
        loader: &fabro_engine::FsLoader,
        variables: &fabro_language::Variables::default(),
        models: &fabro_engine::CatalogModels,
    };
    let checked = fabro_language::check(&path, text, &options);
    let workflow = checked
        .workflow
        .ok_or_else(|| ApiError::internal("the stored graph does not parse"))?;
    Ok(GraphLayout {
        svg: fabro_language::render::render_svg(&workflow, workflow_name),
        nodes: workflow
            .nodes()
            .iter()
            .map(|node| node.id.clone())
            .collect(),
    })
}

/// Each node's latest status and its number of visits, from the stage rows of
/// [`stages`]: a stage without a status is `running` in a running run and `pending`
/// otherwise; a stage being retried is `running`.
pub fn node_statuses(stages: &[StageRow]) -> BTreeMap<String, (String, u32)> {
    let mut latest: BTreeMap<String, (String, u32)> = BTreeMap::new();
    for stage in stages {
        let status = match stage.status.as_str() {
            "incomplete" | "" => "pending",
            "retry" => "running",
            other => other,
        };
        let entry = latest
            .entry(stage.node_id.clone())
            .or_insert((String::new(), 0));
        status.clone_into(&mut entry.0);
        entry.1 += 1;
    }
    latest
}

impl GraphLayout {
    /// The SVG with each node carrying `status-{…}` and `data-visits="{n}"`.
    pub fn annotate(&self, statuses: &BTreeMap<String, (String, u32)>) -> String {
        let mut parts = self.svg.split(NODE_MARKER);
        let mut annotated = String::with_capacity(self.svg.len() + self.nodes.len() * 40);
        annotated.push_str(parts.next().unwrap_or_default());
        for (node, part) in self.nodes.iter().zip(parts) {
            let (status, visits) = statuses
                .get(node)
                .map_or(("pending", 0), |(status, visits)| {
                    (status.as_str(), *visits)
                });
            annotated.push_str(&format!(
                "<g class=\"node status-{status}\" data-visits=\"{visits}\" id="
            ));
            annotated.push_str(part);
        }
        annotated
    }
}

/// `fabro validate --json` diagnostics of a workflow text.
pub fn diagnostics_of(
    path: &Path,
    text: &str,
    diagnostics: &[fabro_language::Diagnostic],
) -> Vec<Diagnostic> {
    let index = LineIndex::new(text);
    let file = path.display().to_string();
    diagnostics
        .iter()
        .map(|diagnostic| Diagnostic {
            file: file.clone(),
            rule: diagnostic.rule.id().to_owned(),
            severity: diagnostic.severity().as_str().to_owned(),
            message: diagnostic.message.clone(),
            node_id: diagnostic.node_id.clone(),
            edge: diagnostic.edge.as_ref().map(|edge| DiagnosticEdge {
                from: edge.from.clone(),
                to: edge.to.clone(),
            }),
            span: diagnostic.span.map(|span| {
                let position = index.line_column(text, span);
                DiagnosticSpan {
                    line: position.line,
                    column: position.column,
                    end_line: position.end_line,
                    end_column: position.end_column,
                }
            }),
            fix: diagnostic.fix.clone(),
        })
        .collect()
}

/// `GET /api/v1/workflows`: `.fabro/workflows/*/workflow.fabro` and `*.fabro` files
/// directly in each root.
pub fn workflows(roots: &[PathBuf]) -> Vec<WorkflowEntry> {
    let mut found = Vec::new();
    for root in roots {
        let mut candidates: Vec<(String, PathBuf)> = Vec::new();
        if let Ok(entries) = fs_err::read_dir(root.join(".fabro").join("workflows")) {
            for entry in entries.flatten() {
                let path = entry.path().join("workflow.fabro");
                if path.is_file() {
                    candidates.push((entry.file_name().to_string_lossy().into_owned(), path));
                }
            }
        }
        if let Ok(entries) = fs_err::read_dir(root) {
            for entry in entries.flatten() {
                let path = entry.path();
                if path
                    .extension()
                    .is_some_and(|extension| extension == "fabro")
                    && path.is_file()
                {
                    let name = path
                        .file_stem()
                        .map(|stem| stem.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    candidates.push((name, path));
                }
            }
        }
        candidates.sort();
        for (name, path) in candidates {
            found.push(workflow_entry(&name, &path));
        }
    }
    found
}

fn workflow_entry(name: &str, path: &Path) -> WorkflowEntry {
    let text = fabro_engine::read_regular_file(path, fabro_language::syntax::MAX_SOURCE_BYTES)
        .ok()
        .and_then(|read| String::from_utf8(read.bytes).ok())
        .unwrap_or_default();
    let options = fabro_language::CheckOptions {
        loader: &fabro_engine::FsLoader,
        variables: &fabro_language::Variables::default(),
        models: &fabro_engine::CatalogModels,
    };
    let checked = fabro_language::check(path, &text, &options);
    let (goal, node_count) = checked.workflow.as_ref().map_or((None, 0), |workflow| {
        (Some(workflow.settings.goal.clone()), workflow.nodes().len())
    });
    WorkflowEntry {
        name: name.to_owned(),
        path: path.display().to_string(),
        goal,
        node_count,
        diagnostics_count: checked.diagnostics.len(),
    }
}

/// Whether the run's manifest says a server started it (`"origin": "server"`).
pub fn started_by_server(store: &dyn RunStore, run_id: &str) -> bool {
    store
        .read_manifest(&RunId::from(run_id))
        .is_ok_and(|manifest| manifest.origin == Some(fabro_engine::RunOrigin::Server))
}

/// A run of the index, as the API's handlers pass it around.
pub type RunRecordRef = RunRecord;
