//! The main loop of a run (SPEC 4.2): execute a stage with retries, record it, choose
//! the next node, checkpoint, repeat until the exit node or a terminating condition.
//!
//! The loop owns all run state ([`RunState`]); handlers get a read-only snapshot and
//! return an [`Outcome`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabro_language::value::format_duration;
use fabro_language::{HandlerKind, NodeIndex, StageStatus, Workflow};
use rand::rngs::StdRng;
use serde_json::Value;

use crate::catch_panic::CatchPanic;
use crate::checkpoint::{CheckpointError, Checkpointer, Cycle, CycleShas};
use crate::context::Context;
use crate::event::kind::{
    CheckpointCompleted, CircuitBreakerTripped, EdgeSelected, EventUsage, GoalGateUnsatisfied,
    LoopRestart, StageCompleted, StageRetrying, StageStarted,
};
use crate::event::Event;
use crate::failure::{failure_signature, FailureClass};
use crate::handler::{self, RunServices, StageInput};
use crate::journal::ChangeHint;
use crate::outcome::Outcome;
use crate::record::{Checkpoint, CheckpointView, StageStatusFile, UsageRecord};
use crate::retry::RetryPlan;
use crate::run_dir::{write_json_atomic, RunPaths};
use crate::run_index::RunStatus;
use crate::timestamp::now_rfc3339;
use crate::transition::{select_edge, ConditionView, SelectionReason};

/// How a traversal ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEnd {
    /// The exit node completed: `success` or `partial_success` (SPEC 4.7).
    Completed {
        /// Final status.
        status: StageStatus,
    },
    /// A terminating condition (SPEC 9.12).
    Failed {
        /// Why.
        reason: String,
        /// Class reported in `WorkflowRunFailed`.
        class: FailureClass,
        /// Node concerned.
        node_id: Option<String>,
    },
    /// Cancelled by the user or the stall watchdog (SPEC 4.8, 9.11), or stopped because
    /// fabro's own storage failed; resumable in every case.
    Canceled {
        /// `canceled`, the stall timeout message or `engine error: …`.
        reason: String,
        /// The interrupted node.
        node_id: Option<String>,
        /// What stopped the run.
        cause: StopCause,
    },
}

/// What stopped a canceled run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopCause {
    /// The user: a signal or a cancel request (exit 130).
    User,
    /// The stall watchdog (SPEC 9.11; exit 1).
    Stall,
    /// An I/O error of fabro's own storage: run directory, blob store, journal, git
    /// objects or refs (exit 1). The interrupted stage runs again on resume.
    EngineError,
    /// A budget limit was reached (SPEC 17.1; exit 1).
    Budget,
}

/// Everything the loop tracks; mirrored by `checkpoint.json`.
#[derive(Debug, Clone, Default)]
pub struct RunState {
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
    pub fn touch(&mut self, node_id: &str) {
        if !self.touched_nodes.contains(node_id) {
            self.touched_nodes.insert(node_id.to_owned());
        }
    }
}

impl RunState {
    /// The state a checkpoint describes (SPEC 8.7 step 5).
    pub fn restore(checkpoint: &Checkpoint, workflow: &Workflow) -> RunState {
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

/// Why the watchdog or the user cancelled, set before the token fires.
#[derive(Debug, Default)]
pub struct CancelCause {
    stall_message: std::sync::Mutex<Option<String>>,
}

impl CancelCause {
    /// Records that the stall watchdog fired with `message`.
    pub fn set_stall(&self, message: String) {
        *self
            .stall_message
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(message);
    }

    fn stall(&self) -> Option<String> {
        self.stall_message
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// One run's traversal.
pub(crate) struct Traversal {
    pub(crate) workflow: Arc<Workflow>,
    pub(crate) services: Arc<RunServices>,
    pub(crate) paths: RunPaths,
    pub(crate) state: RunState,
    pub(crate) rng: StdRng,
    pub(crate) work_dir: PathBuf,
    pub(crate) dry_run_visit_limit: Option<u32>,
    pub(crate) cause: Arc<CancelCause>,
    pub(crate) watchdog_paused: Arc<std::sync::atomic::AtomicUsize>,
    /// The branch target id when this traversal runs a parallel branch.
    pub(crate) branch: Option<String>,
    /// Run-wide rank counter, shared with parallel branches.
    pub(crate) ranks: Arc<std::sync::atomic::AtomicU32>,
    /// Join node chosen by the last parallel stage, consumed by edge selection.
    pub(crate) pending_join: Option<NodeIndex>,
    /// Branch stages to record after the parallel node, in finish order (SPEC 5.7).
    pub(crate) pending_records: Vec<(String, Outcome)>,
    /// Writes checkpoints; `None` in parallel branches, whose stages the parent records.
    pub(crate) checkpointer: Option<Checkpointer>,
    /// The stage directory of the last stage run, for the checkpoint's metadata files.
    pub(crate) last_stage_dir: Option<PathBuf>,
    /// The next stage is the first of a resumed run: its stage directory is replaced
    /// and `full` fidelity degrades to `summary:high` (SPEC 6.7, 8.7).
    pub(crate) resumed_stage: bool,
    /// A parallel branch's own branch and worktree, when git checkpointing is active
    /// (SPEC 5.7); its stages are committed there.
    pub(crate) branch_git: Option<crate::git::BranchWorktree>,
    /// Cancelled when the parallel stage running this branch has its `first_success` join
    /// satisfied: the current stage ends `skipped` (SPEC 5.7).
    pub(crate) join_cancel: Option<tokio_util::sync::CancellationToken>,
    /// In a parallel branch: the names of the stage directories its stages (nested branches'
    /// included) write, for the branch's record (`crate::parallel`).
    pub(crate) stage_log: Option<Arc<std::sync::Mutex<Vec<String>>>>,
}

/// Context values whose compact JSON is larger than this many bytes are offloaded to
/// the blob store (SPEC 7.7).
const OFFLOAD_THRESHOLD: usize = 102_400;

/// Which signature table a failure is counted in.
#[derive(Debug, Clone, Copy)]
enum BreakerScope {
    /// Failed stages (SPEC 9.8).
    Loop,
    /// Transient failures crossing loop-restart edges (SPEC 9.9).
    Restart,
}

/// What a finished stage leads to.
enum Next {
    Node(NodeIndex),
    End(RunEnd),
}

impl Traversal {
    /// Runs from `start` until the run ends.
    /// `previous` and `entered_by` describe the stage before `start` (a resumed run's
    /// last completed stage and the edge taken from it).
    pub(crate) async fn run_from(
        &mut self,
        start: NodeIndex,
        previous: Option<Outcome>,
        entered_by: Option<fabro_language::EdgeIndex>,
    ) -> RunEnd {
        let workflow = Arc::clone(&self.workflow);
        let mut node = start;
        let mut previous = previous;
        let mut entered_by = entered_by;
        loop {
            if self.services.cancel.is_cancelled() || self.budget_reached() {
                return self.canceled(Some(node));
            }
            if Some(node) == workflow.exit() {
                if let Some(jump) = self.unsatisfied_goal_gate() {
                    match jump {
                        Ok((gate, target)) => {
                            let exit_id = workflow.node(node).id.clone();
                            self.emit(Event::run(GoalGateUnsatisfied {
                                gate_node: workflow.node(gate).id.clone(),
                                retry_target: workflow.node(target).id.clone(),
                            }));
                            self.emit(Event::node(
                                &exit_id,
                                EdgeSelected {
                                    from: exit_id.clone(),
                                    label: String::new(),
                                    loop_restart: false,
                                    reason: SelectionReason::GoalGateRetry.as_str().to_owned(),
                                    to: workflow.node(target).id.clone(),
                                },
                            ));
                            node = target;
                            entered_by = None;
                            continue;
                        }
                        Err(end) => return self.finish_between_stages(end, None),
                    }
                }
            }
            if let Some(end) = self.visit_limit(node) {
                return self.finish_between_stages(end, Some(node));
            }
            let outcome = self.run_stage(node, previous.as_ref(), entered_by).await;
            if outcome.engine_error {
                return RunEnd::Canceled {
                    reason: outcome.failure_reason().to_owned(),
                    node_id: Some(workflow.node(node).id.clone()),
                    cause: StopCause::EngineError,
                };
            }
            if self.services.cancel.is_cancelled()
                && outcome.failure_class() == Some(FailureClass::Canceled)
            {
                return self.canceled(Some(node));
            }
            self.record(node, &outcome);
            if Some(node) == workflow.exit() {
                if let Err(end) = self.checkpoint(node, None, &outcome) {
                    return end;
                }
                let status = self.completion_status();
                return RunEnd::Completed { status };
            }
            match self.next(node, &outcome) {
                Next::Node(next) => {
                    if let Err(end) = self.checkpoint(node, Some(next), &outcome) {
                        return end;
                    }
                    entered_by = workflow
                        .outgoing(node)
                        .find(|(_, edge)| edge.to == next)
                        .map(|(index, _)| index);
                    node = next;
                    previous = Some(outcome);
                }
                Next::End(end) => return self.finish_between_stages(end, Some(node)),
            }
        }
    }

    /// Writes the state as a checkpoint (nothing in parallel branches).
    fn write_checkpoint(
        &mut self,
        current: Option<&str>,
        next: Option<&str>,
        run_status: RunStatus,
        cycle: Cycle<'_>,
    ) -> Result<CycleShas, CheckpointError> {
        let Some(checkpointer) = self.checkpointer.as_mut() else {
            return Ok(CycleShas::default());
        };
        let timestamp = now_rfc3339();
        let simulated_cursors = self.services.llm.simulated().cursors();
        let totals = self.services.budget.totals();
        let state = &self.state;
        let hint = ChangeHint {
            nodes: &state.touched_nodes,
            context_keys: state.context.changed(),
            everything: state.touched_everything,
        };
        let shas = checkpointer.write(
            &CheckpointView {
                version: 1,
                run_id: &self.services.run_id,
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
    fn checkpoint(
        &mut self,
        node: NodeIndex,
        next: Option<NodeIndex>,
        outcome: &Outcome,
    ) -> Result<(), RunEnd> {
        let current = self.workflow.node(node).id.clone();
        let next_id = next.map(|next| self.workflow.node(next).id.clone());
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
        let totals = self.services.budget.totals();
        let written = match &mut self.checkpointer {
            Some(checkpointer) => checkpointer.write_last_with_status(RunStatus::Canceled, totals),
            None => Ok(false),
        };
        match written {
            Ok(true) => {}
            Ok(false) => self.final_checkpoint(next, RunStatus::Canceled),
            Err(error) => {
                tracing::error!(error = %crate::error_chain(&error), "cannot write checkpoint");
            }
        }
    }

    /// A termination between stages; the final checkpoint is written by the caller.
    fn finish_between_stages(&self, end: RunEnd, _node: Option<NodeIndex>) -> RunEnd {
        end
    }

    /// Whether a budget limit stops the run before the next stage (SPEC 17.1); the
    /// stages started so far are the ranks allocated in the whole run.
    pub(crate) fn budget_reached(&self) -> bool {
        let started = self.ranks.load(std::sync::atomic::Ordering::SeqCst);
        self.services.budget.check_before_stage(u64::from(started))
    }

    fn canceled(&self, node: Option<NodeIndex>) -> RunEnd {
        let node_id = node.map(|node| self.workflow.node(node).id.clone());
        if let Some(exhausted) = self.services.budget.exhausted() {
            return RunEnd::Canceled {
                reason: exhausted.reason(),
                node_id,
                cause: StopCause::Budget,
            };
        }
        match self.cause.stall() {
            Some(reason) => RunEnd::Canceled {
                reason,
                node_id,
                cause: StopCause::Stall,
            },
            None => RunEnd::Canceled {
                reason: "canceled".to_owned(),
                node_id,
                cause: StopCause::User,
            },
        }
    }

    fn emit(&self, event: Event) {
        self.services.emitter.emit(event);
    }

    /// The first unsatisfied goal gate and its retry target (SPEC 9.10), or the failure
    /// when it has none.
    fn unsatisfied_goal_gate(&self) -> Option<Result<(NodeIndex, NodeIndex), RunEnd>> {
        let workflow = &self.workflow;
        let gates: Vec<NodeIndex> = workflow
            .node_indices()
            .filter(|&index| workflow.node(index).goal_gate)
            .collect();
        if gates.is_empty() {
            return None;
        }
        let mut ordered: Vec<NodeIndex> = Vec::new();
        for completed in &self.state.completed_nodes {
            if let Some(index) = workflow.find(completed) {
                if gates.contains(&index) && !ordered.contains(&index) {
                    ordered.push(index);
                }
            }
        }
        for &gate in &gates {
            if !ordered.contains(&gate) {
                ordered.push(gate);
            }
        }
        let satisfied = |gate: NodeIndex| {
            self.state
                .node_outcomes
                .get(&workflow.node(gate).id)
                .is_some_and(|outcome| {
                    matches!(
                        outcome.status,
                        StageStatus::Success | StageStatus::PartialSuccess
                    )
                })
        };
        let gate = ordered.into_iter().find(|&gate| !satisfied(gate))?;
        let spec = workflow.node(gate);
        let target = retry_target(workflow, gate);
        Some(
            target
                .map(|target| (gate, target))
                .ok_or_else(|| RunEnd::Failed {
                    reason: format!(
                        "goal gate unsatisfied for node {} and no retry target",
                        spec.id
                    ),
                    class: FailureClass::Deterministic,
                    node_id: Some(spec.id.clone()),
                }),
        )
    }

    /// The visit-limit termination for `node`, if it would exceed its limit (SPEC 9.7).
    fn visit_limit(&self, node: NodeIndex) -> Option<RunEnd> {
        let spec = self.workflow.node(node);
        let (limit, source) = match spec.max_visits() {
            Some(limit) => (limit, "node"),
            None if self.workflow.settings.max_node_visits > 0 => {
                (self.workflow.settings.max_node_visits, "graph")
            }
            None => (self.dry_run_visit_limit?, "graph"),
        };
        let visits = self.state.node_visits.get(&spec.id).copied().unwrap_or(0);
        (visits >= limit).then(|| RunEnd::Failed {
            reason: format!(
                "node \"{}\" visited {limit} times ({source} limit {limit}); run is stuck in a cycle",
                spec.id
            ),
            class: FailureClass::CompilationLoop,
            node_id: Some(spec.id.clone()),
        })
    }

    /// Executes one stage of `node` with node retries (SPEC 9.3) and `auto_status`.
    async fn run_stage(
        &mut self,
        node: NodeIndex,
        previous: Option<&Outcome>,
        entered_by: Option<fabro_language::EdgeIndex>,
    ) -> Outcome {
        let workflow = Arc::clone(&self.workflow);
        let spec = workflow.node(node);
        self.state.touch(&spec.id);
        let services = Arc::clone(&self.services);
        let _running = services.assets.stage_running();
        let visit = {
            let visits = self.state.node_visits.entry(spec.id.clone()).or_insert(0);
            *visits += 1;
            *visits
        };
        let epoch_visit = {
            let visits = self
                .state
                .epoch_node_visits
                .entry(spec.id.clone())
                .or_insert(0);
            *visits += 1;
            *visits
        };
        let rank = self.ranks.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        self.state.stage_rank = rank;
        let context = &mut self.state.context;
        context.set("current_node", spec.id.clone());
        context.set("internal.node_visit_count", epoch_visit);
        context.set(format!("internal.retry_count.{}", spec.id), 0);
        let mut fidelity = entered_by
            .and_then(|edge| workflow.edge(edge).fidelity)
            .or(spec.llm.fidelity)
            .or(workflow.settings.default_fidelity)
            .unwrap_or(fabro_language::model::Fidelity::Compact);
        let resumed = std::mem::take(&mut self.resumed_stage);
        if resumed && fidelity == fabro_language::model::Fidelity::Full {
            fidelity = fabro_language::model::Fidelity::SummaryHigh;
        }
        let fidelity = crate::handler::stage_fidelity(spec, fidelity, &self.services);
        context.set("internal.fidelity", fidelity.as_str());
        let thread = crate::thread::thread_key(
            &workflow,
            node,
            entered_by,
            fidelity,
            &self.services.threads,
        );
        context.set(
            "internal.thread_id",
            thread.map_or(Value::Null, Value::from),
        );
        let stage_dir = self.paths.stage_dir(rank, &spec.id, visit);
        self.last_stage_dir = Some(stage_dir.clone());
        if let (Some(log), Some(name)) = (&self.stage_log, stage_dir.file_name()) {
            log.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(name.to_string_lossy().into_owned());
        }
        if resumed {
            // A stage executed again after a crash reuses its rank; nothing of the
            // interrupted attempt may survive (SPEC 8.7).
            let _ = fs_err::remove_dir_all(&stage_dir);
        }
        if let Err(error) = fs_err::create_dir_all(&stage_dir) {
            return Outcome::engine_error(error);
        }
        let isolation = crate::sandbox::stage_isolation(
            &self.services.sandbox_env,
            &self.services.emitter,
            &spec.id,
            spec.handler,
        );
        self.emit(Event::node(
            &spec.id,
            StageStarted {
                attempt: 1,
                branch: self.branch.clone(),
                handler: spec.handler.as_str().to_owned(),
                isolation,
                rank,
                visit,
            },
        ));
        let started = Instant::now();
        let started_at = now_rfc3339();
        let plan = if spec.handler == HandlerKind::Conditional {
            RetryPlan::preset(fabro_language::model::RetryPolicy::None)
        } else {
            RetryPlan::for_node(spec, workflow.settings.default_max_retries)
        };
        let preamble = if spec.handler.is_llm() {
            crate::preamble::build(
                fidelity,
                &crate::preamble::PreambleInput {
                    workflow: &workflow,
                    context: &self.state.context,
                    stages: &self.state.epoch_stages,
                    run_dir: self.paths.run_dir(),
                    blobs: &self.services.blobs,
                },
            )
        } else {
            String::new()
        };
        let mut attempt = 1;
        let mut outcome = loop {
            let resumed_attempt = resumed && attempt == 1;
            let outcome = self
                .attempt(
                    node,
                    &stage_dir,
                    attempt,
                    previous,
                    &preamble,
                    resumed_attempt,
                )
                .await;
            let retryable = outcome.status == StageStatus::Retry
                || (outcome.is_fail()
                    && outcome.failure_class() == Some(FailureClass::TransientInfra));
            if !retryable || outcome.engine_error || self.services.cancel.is_cancelled() {
                break outcome;
            }
            if attempt >= plan.max_attempts {
                let mut exhausted = if outcome.status == StageStatus::Retry {
                    let mut failed = outcome.clone();
                    failed.status = StageStatus::Fail;
                    failed.failure = Some(crate::outcome::Failure {
                        reason: "max retries exceeded".to_owned(),
                        class: FailureClass::TransientInfra,
                    });
                    failed
                } else {
                    outcome
                };
                if spec.allow_partial {
                    exhausted.status = StageStatus::PartialSuccess;
                    exhausted.notes = Some("retries exhausted, partial accepted".to_owned());
                }
                break exhausted;
            }
            let delay = plan.delay(attempt + 1, &mut self.rng);
            let retries = self.state.node_retries.entry(spec.id.clone()).or_insert(0);
            *retries = attempt;
            self.state
                .context
                .set(format!("internal.retry_count.{}", spec.id), attempt);
            if let Err(error) = self.write_status(
                &stage_dir,
                node,
                visit,
                rank,
                attempt,
                &outcome,
                &started_at,
                started.elapsed(),
            ) {
                break Outcome::engine_error(format!(
                    "cannot write {}: {error}",
                    stage_dir.join("status.json").display()
                ));
            }
            archive_attempt(&stage_dir, attempt);
            self.emit(Event::node(
                &spec.id,
                StageRetrying {
                    attempt,
                    delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    failure_class: outcome
                        .failure_class()
                        .map_or("", FailureClass::as_str)
                        .to_owned(),
                    failure_reason: outcome.failure_reason().to_owned(),
                    next_attempt: attempt + 1,
                },
            ));
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.services.cancel.cancelled() => break Outcome::fail("canceled", FailureClass::Canceled),
                () = crate::parallel::join_satisfied(self.join_cancel.as_ref()) => break crate::parallel::join_satisfied_outcome(),
            }
            attempt += 1;
        };
        if attempt == 1 {
            self.state.node_retries.insert(spec.id.clone(), 0);
        }
        self.offload_large_values(&mut outcome);
        let canceled = outcome.failure_class() == Some(FailureClass::Canceled);
        if spec.auto_status
            && !matches!(outcome.status, StageStatus::Success | StageStatus::Skipped)
            && !canceled
        {
            outcome = Outcome::success()
                .with_notes("auto-status: handler completed without writing status");
        }
        if outcome.is_fail() && spec.handler != HandlerKind::Conditional {
            if let Some(class) = outcome.failure_class() {
                let signature = failure_signature(&spec.id, class, outcome.failure_reason());
                self.state.context.set("failure_signature", signature);
            }
        }
        if let Err(error) = self.write_status(
            &stage_dir,
            node,
            visit,
            rank,
            attempt,
            &outcome,
            &started_at,
            started.elapsed(),
        ) {
            if !outcome.engine_error {
                outcome = Outcome::engine_error(format!(
                    "cannot write {}: {error}",
                    stage_dir.join("status.json").display()
                ));
            }
        }
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.emit(Event::node(
            &spec.id,
            StageCompleted {
                attempts: attempt,
                duration_ms,
                failure_class: outcome
                    .failure_class()
                    .map(|class| class.as_str().to_owned()),
                failure_reason: outcome
                    .failure
                    .as_ref()
                    .map(|failure| failure.reason.clone()),
                files_touched: outcome.files_touched.clone(),
                model: outcome.model.clone(),
                outcome: outcome.condition_value().to_owned(),
                provider: outcome.provider.clone(),
                rank,
                status: outcome.status,
                usage: outcome.usage.map(EventUsage::from),
                visit,
            },
        ));
        outcome
    }

    /// SPEC 7.7: context values the stage wrote whose compact JSON exceeds 100 KB go to
    /// the blob store and are replaced by their refs, so checkpoints, events and
    /// `status.json` stay small.
    fn offload_large_values(&self, outcome: &mut Outcome) {
        for value in outcome.context_updates.values_mut() {
            if matches!(value, Value::Null | Value::Bool(_) | Value::Number(_)) {
                continue;
            }
            let Ok(bytes) = serde_json::to_vec(value) else {
                continue;
            };
            if bytes.len() <= OFFLOAD_THRESHOLD {
                continue;
            }
            match self.services.blobs.put(&bytes) {
                Ok((reference, _)) => *value = Value::String(reference.into_string()),
                Err(error) => {
                    tracing::warn!(error = %crate::error_chain(&error), "cannot offload a large context value; keeping it inline");
                }
            }
        }
    }

    /// One attempt of the handler, with the node timeout and panic containment.
    async fn attempt(
        &mut self,
        node: NodeIndex,
        stage_dir: &Path,
        attempt: u32,
        previous: Option<&Outcome>,
        preamble: &str,
        resumed: bool,
    ) -> Outcome {
        let workflow = Arc::clone(&self.workflow);
        let spec = workflow.node(node);
        if spec.handler == HandlerKind::Parallel {
            // Parallel nodes start sub-traversals, so the traversal runs them itself.
            let outcome = self.run_parallel(node, resumed).await;
            return self.unless_join_satisfied(outcome);
        }
        let input = StageInput {
            workflow: &workflow,
            node: spec,
            node_index: node,
            context: &self.state.context,
            stage_dir,
            work_dir: &self.work_dir,
            attempt,
            previous,
            preamble,
            services: &self.services,
        };
        // The watchdog must not fire while a person is asked or a wait node sleeps.
        let pauses_watchdog = matches!(spec.handler, HandlerKind::Human | HandlerKind::Wait);
        if pauses_watchdog {
            self.watchdog_paused
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        let handles_own_timeout = handler::handles_own_timeout(spec);
        let execution = CatchPanic::new(handler::execute(&input));
        // A branch whose join is satisfied drops its handler (killing its processes) and
        // ends the stage `skipped` (SPEC 5.7).
        let join_cancel = self.join_cancel.clone();
        let execution = async {
            tokio::select! {
                biased;
                result = execution => result,
                () = crate::parallel::join_satisfied(join_cancel.as_ref()) => Ok(crate::parallel::join_satisfied_outcome()),
            }
        };
        let result = match spec.timeout().filter(|_| !handles_own_timeout) {
            Some(limit) => match tokio::time::timeout(limit, execution).await {
                Ok(result) => result,
                Err(_) => Ok(Outcome::fail(
                    format!("stage timed out after {}", format_duration(limit)),
                    FailureClass::TransientInfra,
                )),
            },
            None => execution.await,
        };
        if pauses_watchdog {
            self.watchdog_paused
                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            self.services.emitter.touch();
        }
        let outcome = result.unwrap_or_else(|message| {
            Outcome::fail(
                format!("handler panicked: {message}"),
                FailureClass::Deterministic,
            )
        });
        if spec.handler == HandlerKind::FanIn {
            return self.move_to_fan_in_head(outcome);
        }
        outcome
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "one parameter per status.json field group"
    )]
    fn write_status(
        &self,
        stage_dir: &Path,
        node: NodeIndex,
        visit: u32,
        rank: u32,
        attempt: u32,
        outcome: &Outcome,
        started_at: &str,
        elapsed: Duration,
    ) -> std::io::Result<()> {
        let spec = self.workflow.node(node);
        let signature = match (outcome.is_fail(), outcome.failure_class()) {
            (true, Some(class)) => {
                Some(failure_signature(&spec.id, class, outcome.failure_reason()))
            }
            _ => None,
        };
        let record = StageStatusFile {
            node_id: spec.id.clone(),
            visit,
            rank,
            attempt,
            handler: spec.handler.as_str().to_owned(),
            status: outcome.status,
            outcome: outcome.condition_value().to_owned(),
            failure_reason: outcome
                .failure
                .as_ref()
                .map(|failure| failure.reason.clone()),
            failure_class: outcome
                .failure_class()
                .map(|class| class.as_str().to_owned()),
            failure_signature: signature,
            preferred_next_label: outcome.preferred_label.clone(),
            suggested_next_ids: outcome.suggested_next_ids.clone(),
            context_updates: outcome.context_updates.clone(),
            notes: outcome.notes.clone(),
            files_touched: outcome.files_touched.clone(),
            model: outcome.model.clone(),
            provider: outcome.provider.clone(),
            usage: outcome.usage.map(UsageRecord::from),
            started_at: started_at.to_owned(),
            finished_at: now_rfc3339(),
            duration_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        };
        write_json_atomic(&stage_dir.join("status.json"), &record)
    }

    /// Applies a completed stage to the run state (SPEC 4.2).
    fn record(&mut self, node: NodeIndex, outcome: &Outcome) {
        let spec = self.workflow.node(node);
        let context = &mut self.state.context;
        for (key, value) in &outcome.context_updates {
            context.set(key.clone(), value.clone());
        }
        context.set("outcome", outcome.condition_value());
        context.set(
            "preferred_label",
            outcome.preferred_label.clone().unwrap_or_default(),
        );
        if outcome.is_fail() {
            context.set(
                "failure_class",
                outcome.failure_class().map_or("", FailureClass::as_str),
            );
        } else {
            context.set("failure_class", "");
            context.set("failure_signature", "");
        }
        self.state.completed_nodes.push(spec.id.clone());
        self.state
            .node_outcomes
            .insert(spec.id.clone(), outcome.clone());
        if !matches!(spec.handler, HandlerKind::Start | HandlerKind::Exit) {
            self.state
                .epoch_stages
                .push((spec.id.clone(), outcome.clone()));
        }
        self.state.touch(&spec.id);
        for (node_id, branch_outcome) in std::mem::take(&mut self.pending_records) {
            self.state.touch(&node_id);
            self.state.completed_nodes.push(node_id.clone());
            self.state
                .node_outcomes
                .insert(node_id.clone(), branch_outcome.clone());
            self.state.epoch_stages.push((node_id, branch_outcome));
        }
    }

    /// The visit-limit termination for `node`, for branch traversals.
    pub(crate) fn visit_limit_end(&self, node: NodeIndex) -> Option<RunEnd> {
        self.visit_limit(node)
    }

    /// Runs one stage, for branch traversals.
    pub(crate) async fn run_stage_public(
        &mut self,
        node: NodeIndex,
        previous: Option<&Outcome>,
        entered_by: Option<fabro_language::EdgeIndex>,
    ) -> Outcome {
        self.run_stage(node, previous, entered_by).await
    }

    /// Records a stage, for branch traversals.
    pub(crate) fn record_public(&mut self, node: NodeIndex, outcome: &Outcome) {
        self.record(node, outcome);
    }

    /// The next node after `node`, or `None` when the branch ends there.
    pub(crate) fn next_node(&mut self, node: NodeIndex, outcome: &Outcome) -> Option<NodeIndex> {
        match self.next(node, outcome) {
            Next::Node(next) => Some(next),
            Next::End(_) => None,
        }
    }

    /// The run status when the exit stage completes (SPEC 4.7).
    pub(crate) fn completion_status(&self) -> StageStatus {
        let clean =
            self.state.node_outcomes.values().all(|outcome| {
                matches!(outcome.status, StageStatus::Success | StageStatus::Skipped)
            });
        if clean {
            StageStatus::Success
        } else {
            StageStatus::PartialSuccess
        }
    }

    /// Counts a failure signature in the table of `scope` and trips the circuit breaker
    /// at the graph's `loop_restart_signature_limit` (SPEC 9.8, 9.9).
    fn count_signature(
        &mut self,
        node_id: &str,
        signature: String,
        scope: BreakerScope,
    ) -> Option<RunEnd> {
        let table = match scope {
            BreakerScope::Loop => &mut self.state.loop_failure_signatures,
            BreakerScope::Restart => &mut self.state.restart_failure_signatures,
        };
        let count = {
            let count = table.entry(signature.clone()).or_insert(0);
            *count += 1;
            *count
        };
        let limit = self.workflow.settings.loop_restart_signature_limit;
        if count < limit {
            return None;
        }
        let (scope_name, kind) = match scope {
            BreakerScope::Loop => ("loop", "deterministic failure cycle"),
            BreakerScope::Restart => ("restart", "loop_restart failure cycle"),
        };
        self.emit(Event::node(
            node_id,
            CircuitBreakerTripped {
                count,
                limit,
                scope: scope_name.to_owned(),
                signature: signature.clone(),
            },
        ));
        Some(RunEnd::Failed {
            reason: format!(
                "{kind} detected: signature {signature} repeated {count} times (limit {limit})"
            ),
            class: FailureClass::CompilationLoop,
            node_id: Some(node_id.to_owned()),
        })
    }

    /// Circuit breaker, edge selection, failure routing and loop restarts after `node`.
    fn next(&mut self, node: NodeIndex, outcome: &Outcome) -> Next {
        let workflow = Arc::clone(&self.workflow);
        let spec = workflow.node(node);
        if outcome.is_fail() && spec.handler != HandlerKind::Conditional {
            if let Some(class) = outcome
                .failure_class()
                .filter(|class| class.counts_for_breaker())
            {
                let signature = failure_signature(&spec.id, class, outcome.failure_reason());
                if let Some(end) = self.count_signature(&spec.id, signature, BreakerScope::Loop) {
                    return Next::End(end);
                }
            }
        }
        let blobs = self.services.blobs.clone();
        let view = ConditionView {
            outcome: outcome.condition_value(),
            preferred_label: outcome.preferred_label.as_deref().unwrap_or(""),
            context: &self.state.context,
            blobs: &blobs,
        };
        let selected = select_edge(&workflow, node, outcome, &view, &mut self.rng);
        let parallel_join = if spec.handler == HandlerKind::Parallel && !outcome.is_fail() {
            self.pending_join.take()
        } else {
            None
        };
        let (target, edge, reason) = match (selected, parallel_join) {
            (Some((edge, reason)), _) => (workflow.edge(edge).to, Some(edge), reason),
            (None, Some(join)) => (join, None, SelectionReason::ParallelJoin),
            (None, None) if outcome.is_fail() => match retry_target(&workflow, node) {
                Some(target) => (target, None, SelectionReason::RetryTarget),
                None => {
                    return Next::End(RunEnd::Failed {
                        reason: outcome.failure_reason().to_owned(),
                        class: outcome
                            .failure_class()
                            .unwrap_or(FailureClass::Deterministic),
                        node_id: Some(spec.id.clone()),
                    })
                }
            },
            (None, None) => {
                return Next::End(RunEnd::Failed {
                    reason: format!(
                        "no outgoing edge matched from node {} (outcome={})",
                        spec.id,
                        outcome.condition_value()
                    ),
                    class: FailureClass::Deterministic,
                    node_id: Some(spec.id.clone()),
                })
            }
        };
        let loop_restart = edge.is_some_and(|edge| workflow.edge(edge).loop_restart);
        let label = edge.map_or("", |edge| workflow.edge(edge).label());
        if loop_restart {
            if let Some(end) = self.loop_restart(node, target, outcome) {
                return Next::End(end);
            }
        }
        self.emit(Event::node(
            &spec.id,
            EdgeSelected {
                from: spec.id.clone(),
                label: label.to_owned(),
                loop_restart,
                reason: reason.as_str().to_owned(),
                to: workflow.node(target).id.clone(),
            },
        ));
        Next::Node(target)
    }

    /// Applies the rules of SPEC 9.9 to a loop-restart edge; `Some` ends the run.
    fn loop_restart(
        &mut self,
        node: NodeIndex,
        target: NodeIndex,
        outcome: &Outcome,
    ) -> Option<RunEnd> {
        let workflow = Arc::clone(&self.workflow);
        let spec = workflow.node(node);
        if let Some(class) = outcome.failure_class().filter(|_| outcome.is_fail()) {
            if class != FailureClass::TransientInfra {
                return Some(RunEnd::Failed {
                    reason: format!(
                        "loop_restart blocked: failure_class={class} (requires transient_infra)"
                    ),
                    class,
                    node_id: Some(spec.id.clone()),
                });
            }
            let signature = failure_signature(&spec.id, class, outcome.failure_reason());
            if let Some(end) = self.count_signature(&spec.id, signature, BreakerScope::Restart) {
                return Some(end);
            }
        }
        let limit = workflow.settings.max_restarts;
        if self.state.restart_count >= limit {
            return Some(RunEnd::Failed {
                reason: format!(
                    "loop_restart limit reached (max_restarts {limit}); run is stuck in a cycle"
                ),
                class: FailureClass::CompilationLoop,
                node_id: Some(spec.id.clone()),
            });
        }
        self.state.restart_count += 1;
        self.state.touched_everything = true;
        self.state.epoch_node_visits.clear();
        self.state.node_retries.clear();
        self.state.epoch_stages.clear();
        self.services.threads.clear();
        let keys: Vec<String> = self
            .state
            .context
            .iter()
            .map(|(key, _)| key.clone())
            .filter(|key| key.starts_with("internal.retry_count."))
            .collect();
        for key in keys {
            self.state.context.remove(&key);
        }
        self.state
            .context
            .set("internal.restart_count", self.state.restart_count);
        self.emit(Event::node(
            &spec.id,
            LoopRestart {
                from: spec.id.clone(),
                restart_count: self.state.restart_count,
                to: workflow.node(target).id.clone(),
            },
        ));
        None
    }
}

/// The first existing node among the node's `retry_target` and
/// `fallback_retry_target`, then the graph's (SPEC 9.5, 9.10).
fn retry_target(workflow: &Workflow, node: NodeIndex) -> Option<NodeIndex> {
    let spec = workflow.node(node);
    [
        spec.retry_target(),
        spec.fallback_retry_target(),
        workflow.settings.retry_target.as_deref(),
        workflow.settings.fallback_retry_target.as_deref(),
    ]
    .into_iter()
    .flatten()
    .find_map(|id| workflow.find(id))
}

/// Moves the files of attempt `attempt` into `attempts/{attempt}/` (SPEC 7.5).
fn archive_attempt(stage_dir: &Path, attempt: u32) {
    let target = stage_dir.join("attempts").join(attempt.to_string());
    if fs_err::create_dir_all(&target).is_err() {
        return;
    }
    for name in [
        "prompt.md",
        "response.md",
        "status.json",
        "stdout.log",
        "stderr.log",
    ] {
        let source = stage_dir.join(name);
        if source.exists() {
            let _ = fs_err::rename(&source, target.join(name));
        }
    }
}
