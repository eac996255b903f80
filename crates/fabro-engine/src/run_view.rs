//! The documents `fabro runs --json` and `fabro inspect --json` print (SPEC 12.1),
//! built from a run's records. The CLI prints them and the server (SPEC 14.3) serves
//! them, so both show the same run the same way; the client side of `--server` reads
//! them back.

use std::collections::{BTreeSet, HashMap};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::id::RunId;
use crate::record::{ForkedFrom, StageStatusFile};
use crate::run_index::{read_manifest, RunIndexError, RunRecord, RunStatus};
use crate::store::{read_record_parts, RecordParts, RunStore, StoreError, StoredStage};

/// One element of `fabro runs --json` (SPEC 12.1), newest run first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct RunView {
    /// The run id.
    pub run_id: String,
    /// The workflow's name.
    pub workflow_name: String,
    /// `running`, `success`, `partial_success`, `fail`, `canceled`, `interrupted` or
    /// `unreadable`.
    pub status: String,
    /// When the run started (RFC 3339 UTC).
    pub started_at: String,
    /// When the run finished, if it has.
    pub finished_at: Option<String>,
    /// The run directory.
    pub run_dir: String,
    /// The run's goal.
    pub goal: String,
    /// The simulated provider was chosen because no credentials were found (SPEC 10.2).
    pub simulated_llm: bool,
    /// Why the run is `unreadable` (its manifest cannot be read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `fabro inspect --json` (SPEC 12.1): the run's summary, its stages by rank, and totals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct InspectView {
    /// The run id.
    pub run_id: String,
    /// The workflow's name.
    pub workflow_name: String,
    /// The workflow file the run started from.
    pub workflow_path: String,
    /// The run's goal.
    pub goal: String,
    /// The run status (`running`, `success`, … as in the index).
    pub status: String,
    /// When the run started (RFC 3339 UTC).
    pub started_at: String,
    /// When the run finished, if it has.
    pub finished_at: Option<String>,
    /// Wall-clock time; up to now while the run is running.
    pub duration_ms: Option<u64>,
    /// The run directory.
    pub run_dir: String,
    /// The commit the run branched from (git checkpointing).
    pub base_sha: Option<String>,
    /// The run branch (git checkpointing).
    pub run_branch: Option<String>,
    /// The simulated provider was chosen because no credentials were found (SPEC 10.2).
    pub simulated_llm: bool,
    /// Whether the run is a dry run.
    pub dry_run: bool,
    /// The run this one is a child of, or the source of a fork.
    pub parent_run_id: Option<String>,
    /// A fork's source run and the rank of the stage it continues after (SPEC 20.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkedFrom>,
    /// The node whose stage is running; otherwise, from `checkpoint.json`, the node
    /// that completed last (SPEC 17.7).
    pub current_node: Option<String>,
    /// From `checkpoint.json`: the node a resume would run next.
    pub next_node_id: Option<String>,
    /// One row per stage, by rank.
    pub stages: Vec<StageView>,
    /// Sums over the stages.
    pub totals: TotalsView,
    /// The stages each rewind moved away (SPEC 20.3), oldest rewind first; absent when
    /// the run was never rewound.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rewound: Vec<RewoundView>,
}

/// The stages rewind `k` of a run moved to `rewound/{k}/stages/` (SPEC 20.3): no longer
/// the run's current stages, kept for inspection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct RewoundView {
    /// The rewind's number in the run, from 1.
    pub k: u32,
    /// Its stages, by rank.
    pub stages: Vec<StageView>,
}

/// One stage visit, from `stages/{rank:03}-{node_id}@{visit}/status.json` (SPEC 7.5). A
/// stage without a readable `status.json` has not finished: its status is `running`
/// while the run runs, `incomplete` otherwise, and the fields only `status.json` knows
/// are null.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct StageView {
    /// The stage's rank (its order in the run).
    pub rank: u32,
    /// The stage's node.
    pub node_id: String,
    /// Which visit of the node this stage is.
    pub visit: u32,
    /// The node's handler; null until the stage finished.
    pub handler: Option<String>,
    /// The stage's status from `status.json`, else `running` or `incomplete`.
    pub status: String,
    /// The final attempt number.
    pub attempts: Option<u32>,
    /// Wall time; for a running stage, the time since it started.
    pub duration_ms: Option<u64>,
    /// Input plus output tokens; null for stages that made no LLM call.
    pub tokens: Option<u64>,
    /// Input tokens.
    pub input_tokens: Option<u64>,
    /// Output tokens.
    pub output_tokens: Option<u64>,
    /// Input tokens read from the provider's prompt cache (SPEC 10.8).
    pub cache_read_tokens: Option<u64>,
    /// Cost in US dollars, when known.
    pub cost_usd: Option<f64>,
    /// Files the stage changed.
    pub files_touched: Vec<String>,
}

/// Sums over the stages of `fabro inspect`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct TotalsView {
    /// How many stages ran.
    pub stages: usize,
    /// Attempts over all stages.
    pub attempts: u64,
    /// Wall-clock time in milliseconds.
    pub duration_ms: u64,
    /// Input plus output tokens.
    pub tokens: u64,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Input tokens read from the providers' prompt caches (SPEC 10.8).
    pub cache_read_tokens: u64,
    /// Null when no stage reported a cost.
    pub cost_usd: Option<f64>,
    /// Distinct paths, sorted.
    pub files_touched: Vec<String>,
}

/// The `fabro runs --json` element of a run. `simulated_llm` is not a column of the
/// index (SPEC 11.4); the manifest has it, and an unreadable manifest only loses it.
pub fn run_view(record: &RunRecord) -> RunView {
    RunView {
        simulated_llm: read_manifest(&record.run_dir)
            .map(|manifest| manifest.simulated_llm)
            .unwrap_or(false),
        ..run_view_of(record)
    }
}

/// The `fabro runs --json` element of a run whose manifest `store` keeps.
pub fn run_view_in(store: &dyn RunStore, record: &RunRecord) -> RunView {
    RunView {
        simulated_llm: store
            .read_manifest(&RunId::from(record.run_id.as_str()))
            .map(|manifest| manifest.simulated_llm)
            .unwrap_or(false),
        ..run_view_of(record)
    }
}

/// The fields of a [`RunView`] the index row has (`simulated_llm` false).
fn run_view_of(record: &RunRecord) -> RunView {
    RunView {
        run_id: record.run_id.clone(),
        workflow_name: record.workflow_name.clone(),
        status: record.status.as_str().to_owned(),
        started_at: record.started_at.clone(),
        finished_at: record.finished_at.clone(),
        run_dir: record.run_dir.display().to_string(),
        goal: record.goal.clone(),
        simulated_llm: false,
        reason: record.reason.clone(),
    }
}

/// The `fabro inspect --json` document of the run `record` lists, from the records
/// `store` keeps ([`RunStore::record_parts`]).
pub fn inspect_in(store: &dyn RunStore, record: &RunRecord) -> Result<InspectView, StoreError> {
    let parts = store.record_parts(record)?;
    Ok(inspect_view(record.clone(), parts))
}

/// The `fabro inspect --json` document of a run: its summary from the index, its
/// manifest and checkpoint, one row per stage by rank, and totals, from its run
/// directory.
pub fn inspect(record: RunRecord) -> Result<InspectView, RunIndexError> {
    let parts = read_record_parts(&record)?;
    Ok(inspect_view(record, parts))
}

/// The document of `record` from its parts.
fn inspect_view(record: RunRecord, parts: RecordParts) -> InspectView {
    let stages = stage_views(parts.stages, record.status, &parts.started);
    // Stages moved away never run again: one without `status.json` is incomplete.
    let rewound = parts
        .rewound
        .into_iter()
        .map(|(k, stages)| RewoundView {
            k,
            stages: stage_views(stages, RunStatus::Canceled, &HashMap::new()),
        })
        .collect();
    let manifest = parts.manifest;
    // SPEC 17.7: while a stage runs, its node is the current one.
    let running_node = stages
        .iter()
        .rfind(|stage| stage.status == "running")
        .map(|stage| stage.node_id.clone());
    let totals = totals(&stages);
    let duration_ms = record
        .duration(SystemTime::now())
        .map(|duration| u64::try_from(duration.as_millis()).unwrap_or(u64::MAX));
    InspectView {
        current_node: running_node.or(parts.current_node),
        next_node_id: parts.next_node_id,
        run_dir: record.run_dir.display().to_string(),
        status: record.status.as_str().to_owned(),
        run_id: record.run_id,
        workflow_name: record.workflow_name,
        workflow_path: record.workflow_path,
        goal: record.goal,
        started_at: record.started_at,
        finished_at: record.finished_at,
        duration_ms,
        base_sha: manifest.base_sha,
        run_branch: manifest.run_branch,
        simulated_llm: manifest.simulated_llm,
        dry_run: manifest.dry_run,
        parent_run_id: record.parent_run_id,
        forked_from: manifest.forked_from,
        stages,
        totals,
        rewound,
    }
}

/// The rows of `stages` in a run of `run_status`.
fn stage_views(
    stages: Vec<StoredStage>,
    run_status: RunStatus,
    started: &HashMap<u32, SystemTime>,
) -> Vec<StageView> {
    stages
        .into_iter()
        .map(|stage| {
            stage_view(
                stage.rank,
                &stage.node_id,
                stage.visit,
                stage.status,
                run_status,
                started,
            )
        })
        .collect()
}

/// The row of one stage: from its `status.json` once it ended, else `running` (with its
/// elapsed time from `started`) in a running run and `incomplete` otherwise.
fn stage_view(
    rank: u32,
    node_id: &str,
    visit: u32,
    status: Option<StageStatusFile>,
    run_status: RunStatus,
    started: &HashMap<u32, SystemTime>,
) -> StageView {
    match status {
        Some(status) => finished_stage(status),
        None => StageView {
            rank,
            node_id: node_id.to_owned(),
            visit,
            handler: None,
            status: if run_status == RunStatus::Running {
                "running"
            } else {
                "incomplete"
            }
            .to_owned(),
            attempts: None,
            // SPEC 17.7: a running stage's elapsed time.
            duration_ms: started
                .get(&rank)
                .filter(|_| run_status == RunStatus::Running)
                .and_then(|started| SystemTime::now().duration_since(*started).ok())
                .map(|elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)),
            tokens: None,
            input_tokens: None,
            output_tokens: None,
            cache_read_tokens: None,
            cost_usd: None,
            files_touched: Vec::new(),
        },
    }
}

fn finished_stage(status: StageStatusFile) -> StageView {
    let usage = status.usage;
    StageView {
        rank: status.rank,
        node_id: status.node_id,
        visit: status.visit,
        handler: Some(status.handler),
        status: status.status.as_str().to_owned(),
        attempts: Some(status.attempt),
        duration_ms: Some(status.duration_ms),
        tokens: usage.map(|usage| usage.input_tokens.saturating_add(usage.output_tokens)),
        input_tokens: usage.map(|usage| usage.input_tokens),
        output_tokens: usage.map(|usage| usage.output_tokens),
        cache_read_tokens: usage.map(|usage| usage.cache_read_tokens),
        cost_usd: usage.and_then(|usage| usage.cost_usd),
        files_touched: status.files_touched,
    }
}

fn totals(stages: &[StageView]) -> TotalsView {
    let sum = |field: fn(&StageView) -> Option<u64>| {
        stages
            .iter()
            .filter_map(field)
            .fold(0_u64, u64::saturating_add)
    };
    let costs: Vec<f64> = stages.iter().filter_map(|stage| stage.cost_usd).collect();
    let files: BTreeSet<&String> = stages
        .iter()
        .flat_map(|stage| &stage.files_touched)
        .collect();
    TotalsView {
        stages: stages.len(),
        attempts: sum(|stage| stage.attempts.map(u64::from)),
        duration_ms: sum(|stage| stage.duration_ms),
        tokens: sum(|stage| stage.tokens),
        input_tokens: sum(|stage| stage.input_tokens),
        output_tokens: sum(|stage| stage.output_tokens),
        cache_read_tokens: sum(|stage| stage.cache_read_tokens),
        cost_usd: (!costs.is_empty()).then(|| costs.iter().sum()),
        files_touched: files.into_iter().cloned().collect(),
    }
}
