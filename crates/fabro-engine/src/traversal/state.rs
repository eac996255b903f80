//! The state a traversal tracks (SPEC 4.2), mirrored by `checkpoint.json` and restored
//! from it on resume (SPEC 8.7).

use std::collections::{BTreeMap, BTreeSet};

use fabro_language::{HandlerKind, Workflow};

use crate::context::Context;
use crate::outcome::Outcome;
use crate::record::Checkpoint;

/// Everything the loop tracks; mirrored by `checkpoint.json`.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunState {
    /// The run context.
    pub context: Context,
    /// Completed stages' node ids, one per visit.
    pub completed_nodes: Vec<String>,
    /// Visits per node over the whole run.
    pub node_visits: BTreeMap<String, u32>,
    /// Visits per node in the current restart epoch.
    pub epoch_node_visits: BTreeMap<String, u32>,
    /// Retries per node in its latest visit.
    pub node_retries: BTreeMap<String, u32>,
    /// Latest outcome per node.
    pub node_outcomes: BTreeMap<String, Outcome>,
    /// Loop failure signatures.
    pub loop_failure_signatures: BTreeMap<String, u32>,
    /// Restart failure signatures.
    pub restart_failure_signatures: BTreeMap<String, u32>,
    /// Loop restarts so far.
    pub restart_count: u32,
    /// Last rank allocated.
    pub stage_rank: u32,
    /// Engine log lines.
    pub logs: Vec<String>,
    /// Stages of the current epoch, for preambles.
    pub epoch_stages: Vec<(String, Outcome)>,
    /// Node ids whose per-node entries changed since the last checkpoint.
    pub touched_nodes: BTreeSet<String>,
    /// Something changed in bulk since the last checkpoint: compare everything.
    pub touched_everything: bool,
}

impl RunState {
    /// Notes that the per-node entries of `node_id` may change.
    pub(crate) fn touch(&mut self, node_id: &str) {
        if !self.touched_nodes.contains(node_id) {
            self.touched_nodes.insert(node_id.to_owned());
        }
    }
}

impl RunState {
    /// The state a checkpoint describes (SPEC 8.7 step 5).
    pub(crate) fn restore(checkpoint: &Checkpoint, workflow: &Workflow) -> RunState {
        // The current epoch's stages are the newest completed stages, as many as the
        // epoch's visits.
        let epoch_length: usize = checkpoint
            .epoch_node_visits
            .values()
            .map(|&visits| visits as usize)
            .sum();
        let skip = checkpoint
            .completed_nodes
            .len()
            .saturating_sub(epoch_length);
        let epoch_stages = checkpoint.completed_nodes[skip..]
            .iter()
            .filter(|id| {
                workflow.find(id).is_some_and(|index| {
                    !matches!(
                        workflow.node(index).handler,
                        HandlerKind::Start | HandlerKind::Exit
                    )
                })
            })
            .filter_map(|id| {
                checkpoint
                    .node_outcomes
                    .get(id)
                    .map(|outcome| (id.clone(), outcome.clone()))
            })
            .collect();
        RunState {
            context: Context::from_values(checkpoint.context_values.clone()),
            completed_nodes: checkpoint.completed_nodes.clone(),
            node_visits: checkpoint.node_visits.clone(),
            epoch_node_visits: checkpoint.epoch_node_visits.clone(),
            node_retries: checkpoint.node_retries.clone(),
            node_outcomes: checkpoint.node_outcomes.clone(),
            loop_failure_signatures: checkpoint.loop_failure_signatures.clone(),
            restart_failure_signatures: checkpoint.restart_failure_signatures.clone(),
            restart_count: checkpoint.restart_count,
            stage_rank: checkpoint.stage_rank,
            logs: checkpoint.logs.clone(),
            epoch_stages,
            touched_nodes: BTreeSet::new(),
            touched_everything: true,
        }
    }
}
