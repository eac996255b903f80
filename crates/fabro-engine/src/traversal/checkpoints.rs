//! Checkpoints of a root traversal (SPEC 8.6, 8.7): after every stage, the initial and the
//! final one, and the one of a cancelled run. Branch traversals write none: the parallel
//! stage that forked them records their stages.

use fabro_language::NodeIndex;

use super::{Role, RunEnd, StopCause, Traversal};
use crate::checkpoint::{CheckpointError, Cycle, CycleShas};
use crate::event::kind::CheckpointCompleted;
use crate::event::Event;
use crate::journal::ChangeHint;
use crate::outcome::Outcome;
use crate::record::CheckpointView;
use crate::run_index::RunStatus;
use crate::timestamp::now_rfc3339;

impl Traversal {
    /// Writes the state as a checkpoint (nothing in parallel branches).
    fn write_checkpoint(
        &mut self,
        current: Option<&str>,
        next: Option<&str>,
        run_status: RunStatus,
        cycle: Cycle<'_>,
    ) -> Result<CycleShas, CheckpointError> {
        let Role::Root(root) = &mut self.role else {
            return Ok(CycleShas::default());
        };
        let checkpointer = &mut root.checkpointer;
        let timestamp = now_rfc3339();
        let simulated_cursors = self.run.services.llm.simulated().cursors();
        let totals = self.run.services.budget.totals();
        let state = &self.state;
        let hint = ChangeHint {
            nodes: &state.touched_nodes,
            context_keys: state.context.changed(),
            everything: state.touched_everything,
        };
        let shas = checkpointer.write(
            &CheckpointView {
                version: 1,
                run_id: &self.run.services.run_id,
                timestamp: &timestamp,
                current_node: current,
                next_node_id: next,
                completed_nodes: &state.completed_nodes,
                node_retries: &state.node_retries,
                node_visits: &state.node_visits,
                epoch_node_visits: &state.epoch_node_visits,
                node_outcomes: &state.node_outcomes,
                context_values: state.context.values(),
                logs: &state.logs,
                git_commit_sha: None,
                loop_failure_signatures: &state.loop_failure_signatures,
                restart_failure_signatures: &state.restart_failure_signatures,
                restart_count: state.restart_count,
                stage_rank: state.stage_rank,
                simulated_cursors: &simulated_cursors,
                llm_tokens: totals.tokens,
                llm_cost_usd: totals.cost_usd,
                run_status,
            },
            &hint,
            cycle,
        )?;
        self.state.touched_nodes.clear();
        self.state.touched_everything = false;
        self.state.context.take_changed();
        Ok(shas)
    }

    /// The checkpoint cycle after a stage (SPEC 8.6), then `CheckpointCompleted`. A
    /// checkpoint that cannot be made durable ends the run: going on would do work that
    /// a resume could not account for.
    pub(super) fn checkpoint(
        &mut self,
        node: NodeIndex,
        next: Option<NodeIndex>,
        outcome: &Outcome,
    ) -> Result<(), RunEnd> {
        let current = self.run.workflow.node(node).id.clone();
        let next_id = next.map(|next| self.run.workflow.node(next).id.clone());
        let stage_dir = self.last_stage_dir.clone().unwrap_or_default();
        let cycle = Cycle::Stage {
            node_id: &current,
            status: outcome.status.as_str(),
            stage_dir: &stage_dir,
        };
        let shas = match self.write_checkpoint(
            Some(&current),
            next_id.as_deref(),
            RunStatus::Running,
            cycle,
        ) {
            Ok(shas) => shas,
            Err(error) => {
                return Err(RunEnd::Canceled {
                    reason: format!("engine error: {}", crate::error_chain(&error)),
                    node_id: Some(current),
                    cause: StopCause::EngineError,
                })
            }
        };
        if let Some(reason) = &shas.full_scan {
            self.emit(Event::warning(None, "full_scan", reason));
        }
        self.emit(Event::node(
            &current,
            CheckpointCompleted {
                git_commit_sha: shas.git_commit_sha,
                metadata_sha: shas.metadata_sha,
                next_node_id: next_id,
            },
        ));
        Ok(())
    }

    /// Writes the final checkpoint of a run (or the initial one): steps 1 and 2 of the
    /// cycle. Failures are logged; the run's outcome is already decided.
    /// `current_node` is the last completed stage (none in the initial checkpoint).
    pub(crate) fn final_checkpoint(&mut self, next: Option<&str>, run_status: RunStatus) {
        self.checkpoint_between_stages(next, run_status, Cycle::Final);
    }

    /// The initial checkpoint of a new run (SPEC 4.1), before its first stage.
    pub(crate) fn initial_checkpoint(&mut self, next: Option<&str>) {
        self.checkpoint_between_stages(next, RunStatus::Running, Cycle::Initial);
    }

    fn checkpoint_between_stages(
        &mut self,
        next: Option<&str>,
        run_status: RunStatus,
        cycle: Cycle<'_>,
    ) {
        let current = self.state.completed_nodes.last().cloned();
        if let Err(error) = self.write_checkpoint(current.as_deref(), next, run_status, cycle) {
            tracing::error!(error = %crate::error_chain(&error), "cannot write checkpoint");
        }
    }

    /// The final checkpoint of a cancelled run: the last complete checkpoint, marked
    /// `canceled`, so that a resume executes the interrupted stage again as the same
    /// visit with the same rank (SPEC 8.7).
    pub(crate) fn canceled_checkpoint(&mut self, next: Option<&str>) {
        let totals = self.run.services.budget.totals();
        let written = match &mut self.role {
            Role::Root(root) => root
                .checkpointer
                .write_last_with_status(RunStatus::Canceled, totals),
            Role::Branch(_) => Ok(false),
        };
        match written {
            Ok(true) => {}
            Ok(false) => self.final_checkpoint(next, RunStatus::Canceled),
            Err(error) => {
                tracing::error!(error = %crate::error_chain(&error), "cannot write checkpoint");
            }
        }
    }
}
