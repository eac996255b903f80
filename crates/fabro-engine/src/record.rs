//! Run records written as JSON: `manifest.json` (SPEC 11.1), the per-stage
//! `status.json` (SPEC 7.5) and `checkpoint.json` (SPEC 8.5).

use std::collections::BTreeMap;

use fabro_language::StageStatus;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::id::RunId;
use crate::outcome::Outcome;
use crate::run_status::RunStatus;

/// `manifest.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Run id.
    pub run_id: String,
    /// Graph id or file stem.
    pub workflow_name: String,
    /// Path of the workflow file.
    pub workflow_path: String,
    /// Resolved goal.
    pub goal: String,
    /// Number of nodes.
    pub node_count: usize,
    /// Number of edges.
    pub edge_count: usize,
    /// Git base commit, when checkpointing is active.
    pub base_sha: Option<String>,
    /// Git run branch, when checkpointing is active.
    pub run_branch: Option<String>,
    /// RFC 3339 start time.
    pub started_at: String,
    /// fabro version.
    pub fabro_version: String,
    /// Whether this is a dry run.
    pub dry_run: bool,
    /// Parent run of a child workflow.
    pub parent_run_id: Option<String>,
    /// Run variables (secret-looking values redacted).
    pub vars: BTreeMap<String, String>,
    /// Whether the simulated provider was chosen because nothing else was configured.
    pub simulated_llm: bool,
    /// The repository holding the run branch, when checkpointing is active (for resume).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo_root: Option<String>,
    /// The working directory relative to the repository root, when checkpointing is active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_dir_relative: Option<String>,
    /// Who started the run (SPEC 14.2); absent in manifests older than the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<RunOrigin>,
    /// The run and stage a fork started from (SPEC 20.2); absent for other runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkedFrom>,
    /// The URL of the repository the run works on (SPEC 18.3), which its refs are pushed
    /// to; absent for runs in a local checkout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository_url: Option<String>,
}

/// `manifest.json` `forked_from` (SPEC 20.2): the checkpoint a fork started from, named
/// by its run and the rank of the stage after which it was written (0: the initial
/// checkpoint).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct ForkedFrom {
    /// The source run.
    pub run_id: String,
    /// The rank of the stage whose checkpoint the fork continues from.
    pub rank: u32,
}

/// A rewind that has begun and not finished (SPEC 20.3), recorded before its first step
/// so that an interrupted rewind is finished by the next `fabro rewind` or `fabro resume`
/// of the run: every step is done again or found done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingRewind {
    /// The rewind's number in the run (from 1): `refs/fabro-rewound/{id}/{k}` and
    /// `rewound/{k}/`.
    pub k: u32,
    /// The rank of the stage the run moves back to.
    pub to_rank: u32,
    /// That stage's node.
    pub node_id: String,
    /// That stage's visit.
    pub visit: u32,
    /// The run branch's head before the rewind, with git checkpointing.
    pub old_head: Option<String>,
    /// The checkpoint written after that stage, as the run continues from it: status
    /// `running`, its run-branch commit set with git.
    pub checkpoint: Checkpoint,
}

/// `manifest.json` `origin` (SPEC 14.2): the process that started the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunOrigin {
    /// `fabro run`.
    Cli,
    /// `fabro server`.
    Server,
}

/// Token usage as written in records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageRecord {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Reasoning tokens.
    pub reasoning_tokens: u64,
    /// Cache reads.
    pub cache_read_tokens: u64,
    /// Cache writes.
    pub cache_write_tokens: u64,
    /// Cost in USD.
    pub cost_usd: Option<f64>,
}

impl From<fabro_llm::Usage> for UsageRecord {
    fn from(usage: fabro_llm::Usage) -> UsageRecord {
        UsageRecord {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            reasoning_tokens: usage.reasoning_tokens,
            cache_read_tokens: usage.cache_read_tokens,
            cache_write_tokens: usage.cache_write_tokens,
            cost_usd: usage.cost_usd,
        }
    }
}

/// `status.json` of a stage visit: every key always present (SPEC 7.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageStatusFile {
    /// Node id.
    pub node_id: String,
    /// Run-wide visit number.
    pub visit: u32,
    /// Stage rank.
    pub rank: u32,
    /// Final attempt number.
    pub attempt: u32,
    /// Handler type.
    pub handler: String,
    /// Canonical status.
    pub status: StageStatus,
    /// Condition-visible outcome.
    pub outcome: String,
    /// Failure reason.
    pub failure_reason: Option<String>,
    /// Failure class.
    pub failure_class: Option<String>,
    /// Failure signature.
    pub failure_signature: Option<String>,
    /// Preferred label.
    pub preferred_next_label: Option<String>,
    /// Suggested next ids.
    pub suggested_next_ids: Vec<String>,
    /// Context updates.
    pub context_updates: BTreeMap<String, Value>,
    /// Notes.
    pub notes: Option<String>,
    /// Files touched.
    pub files_touched: Vec<String>,
    /// Model used.
    pub model: Option<String>,
    /// Provider used.
    pub provider: Option<String>,
    /// Usage.
    pub usage: Option<UsageRecord>,
    /// Start time.
    pub started_at: String,
    /// End time.
    pub finished_at: String,
    /// Duration.
    pub duration_ms: u64,
}

/// `checkpoint.json` (SPEC 8.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Format version, 1.
    pub version: u32,
    /// Run id.
    pub run_id: RunId,
    /// Time of writing.
    pub timestamp: String,
    /// Node that just completed.
    pub current_node: Option<String>,
    /// Node to execute next.
    pub next_node_id: Option<String>,
    /// Completed stages' node ids, one per visit.
    pub completed_nodes: Vec<String>,
    /// Retries used per node in its latest visit.
    pub node_retries: BTreeMap<String, u32>,
    /// Visits per node over the whole run.
    pub node_visits: BTreeMap<String, u32>,
    /// Visits per node in the current restart epoch.
    pub epoch_node_visits: BTreeMap<String, u32>,
    /// Latest outcome per node.
    pub node_outcomes: BTreeMap<String, Outcome>,
    /// Context snapshot.
    #[serde(alias = "context")]
    pub context_values: BTreeMap<String, Value>,
    /// Engine log lines.
    pub logs: Vec<String>,
    /// Run-branch commit of this checkpoint, or null.
    pub git_commit_sha: Option<String>,
    /// Loop failure signature counts.
    pub loop_failure_signatures: BTreeMap<String, u32>,
    /// Restart failure signature counts.
    pub restart_failure_signatures: BTreeMap<String, u32>,
    /// Loop restarts so far.
    pub restart_count: u32,
    /// Last rank allocated.
    pub stage_rank: u32,
    /// Simulated provider cursors.
    pub simulated_cursors: BTreeMap<String, u64>,
    /// Input + output tokens of every LLM call of the run so far (SPEC 17.1); omitted
    /// while 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub llm_tokens: u64,
    /// `cost_usd` of every LLM call of the run so far (SPEC 17.1); omitted while 0.
    #[serde(default, skip_serializing_if = "is_zero_usd")]
    pub llm_cost_usd: f64,
    /// `running`, `success`, `partial_success`, `fail` or `canceled`.
    pub run_status: RunStatus,
}

/// A [`Checkpoint`] borrowed from the live run state: serialises to the same JSON
/// without copying the state, which grows with the run.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CheckpointView<'a> {
    /// Format version, 1.
    pub version: u32,
    /// Run id.
    pub run_id: &'a str,
    /// Time of writing.
    pub timestamp: &'a str,
    /// Node that just completed.
    pub current_node: Option<&'a str>,
    /// Node to execute next.
    pub next_node_id: Option<&'a str>,
    /// Completed stages' node ids, one per visit.
    pub completed_nodes: &'a [String],
    /// Retries used per node in its latest visit.
    pub node_retries: &'a BTreeMap<String, u32>,
    /// Visits per node over the whole run.
    pub node_visits: &'a BTreeMap<String, u32>,
    /// Visits per node in the current restart epoch.
    pub epoch_node_visits: &'a BTreeMap<String, u32>,
    /// Latest outcome per node.
    pub node_outcomes: &'a BTreeMap<String, Outcome>,
    /// Context snapshot.
    pub context_values: &'a BTreeMap<String, Value>,
    /// Engine log lines.
    pub logs: &'a [String],
    /// Run-branch commit of this checkpoint, or null.
    pub git_commit_sha: Option<&'a str>,
    /// Loop failure signature counts.
    pub loop_failure_signatures: &'a BTreeMap<String, u32>,
    /// Restart failure signature counts.
    pub restart_failure_signatures: &'a BTreeMap<String, u32>,
    /// Loop restarts so far.
    pub restart_count: u32,
    /// Last rank allocated.
    pub stage_rank: u32,
    /// Simulated provider cursors.
    pub simulated_cursors: &'a BTreeMap<String, u64>,
    /// Input + output tokens of every LLM call of the run so far.
    #[serde(skip_serializing_if = "is_zero")]
    pub llm_tokens: u64,
    /// `cost_usd` of every LLM call of the run so far.
    #[serde(skip_serializing_if = "is_zero_usd")]
    pub llm_cost_usd: f64,
    /// `running`, `success`, `partial_success`, `fail` or `canceled`.
    pub run_status: RunStatus,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // the signature serde requires
fn is_zero(value: &u64) -> bool {
    *value == 0
}

#[allow(clippy::trivially_copy_pass_by_ref)] // the signature serde requires
fn is_zero_usd(value: &f64) -> bool {
    *value == 0.0
}

impl Checkpoint {
    /// The checkpoint as a view.
    pub fn view(&self) -> CheckpointView<'_> {
        CheckpointView {
            version: self.version,
            run_id: &self.run_id,
            timestamp: &self.timestamp,
            current_node: self.current_node.as_deref(),
            next_node_id: self.next_node_id.as_deref(),
            completed_nodes: &self.completed_nodes,
            node_retries: &self.node_retries,
            node_visits: &self.node_visits,
            epoch_node_visits: &self.epoch_node_visits,
            node_outcomes: &self.node_outcomes,
            context_values: &self.context_values,
            logs: &self.logs,
            git_commit_sha: self.git_commit_sha.as_deref(),
            loop_failure_signatures: &self.loop_failure_signatures,
            restart_failure_signatures: &self.restart_failure_signatures,
            restart_count: self.restart_count,
            stage_rank: self.stage_rank,
            simulated_cursors: &self.simulated_cursors,
            llm_tokens: self.llm_tokens,
            llm_cost_usd: self.llm_cost_usd,
            run_status: self.run_status,
        }
    }
}

impl CheckpointView<'_> {
    /// An owned copy.
    pub fn to_owned(&self) -> Checkpoint {
        Checkpoint {
            version: self.version,
            run_id: RunId::from(self.run_id),
            timestamp: self.timestamp.to_owned(),
            current_node: self.current_node.map(str::to_owned),
            next_node_id: self.next_node_id.map(str::to_owned),
            completed_nodes: self.completed_nodes.to_vec(),
            node_retries: self.node_retries.clone(),
            node_visits: self.node_visits.clone(),
            epoch_node_visits: self.epoch_node_visits.clone(),
            node_outcomes: self.node_outcomes.clone(),
            context_values: self.context_values.clone(),
            logs: self.logs.to_vec(),
            git_commit_sha: self.git_commit_sha.map(str::to_owned),
            loop_failure_signatures: self.loop_failure_signatures.clone(),
            restart_failure_signatures: self.restart_failure_signatures.clone(),
            restart_count: self.restart_count,
            stage_rank: self.stage_rank,
            simulated_cursors: self.simulated_cursors.clone(),
            llm_tokens: self.llm_tokens,
            llm_cost_usd: self.llm_cost_usd,
            run_status: self.run_status,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_round_trip_and_accept_the_context_alias() {
        let checkpoint = Checkpoint {
            version: 1,
            run_id: RunId::from("r"),
            timestamp: "t".to_owned(),
            current_node: Some("a".to_owned()),
            next_node_id: None,
            completed_nodes: vec!["start".to_owned(), "a".to_owned()],
            node_retries: BTreeMap::new(),
            node_visits: BTreeMap::from([("a".to_owned(), 1)]),
            epoch_node_visits: BTreeMap::new(),
            node_outcomes: BTreeMap::from([("a".to_owned(), Outcome::success())]),
            context_values: BTreeMap::from([("k".to_owned(), serde_json::json!("v"))]),
            logs: Vec::new(),
            git_commit_sha: None,
            loop_failure_signatures: BTreeMap::new(),
            restart_failure_signatures: BTreeMap::new(),
            restart_count: 0,
            stage_rank: 2,
            simulated_cursors: BTreeMap::new(),
            llm_tokens: 0,
            llm_cost_usd: 0.0,
            run_status: RunStatus::Success,
        };
        let json = serde_json::to_string(&checkpoint).expect("serialises");
        let back: Checkpoint = serde_json::from_str(&json).expect("parses");
        assert_eq!(back, checkpoint);
        assert_eq!(
            serde_json::to_string(&checkpoint.view()).expect("serialises"),
            json
        );
        assert_eq!(checkpoint.view().to_owned(), checkpoint);
        let aliased = json.replace("\"context_values\"", "\"context\"");
        let back: Checkpoint = serde_json::from_str(&aliased).expect("alias parses");
        assert_eq!(back.context_values, checkpoint.context_values);
    }
}
