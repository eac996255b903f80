//! The main loop of a run (SPEC 4.2): execute a stage with retries, record it, choose
//! the next node, checkpoint, repeat until the exit node or a terminating condition.
//!
//! The loop owns all run state ([`RunState`]); handlers get a read-only snapshot and
//! return an [`Outcome`]. A [`Traversal`] has a [`Role`]: the run's own (root) traversal
//! checkpoints and ends the run; a parallel stage forks one branch traversal per branch
//! ([`parallel`]), which runs the same loop until it would enter the join node.
//!
//! Submodules: [`stage`] runs one stage (attempts, retries, the handler call, `status.json`),
//! [`routing`] decides what follows it (goal gates, visit limits, circuit breakers, edges,
//! loop restarts), [`checkpoints`] writes checkpoints, [`parallel`] fans out.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicUsize};
use std::sync::{Arc, Mutex};

use fabro_language::{EdgeIndex, NodeIndex, StageStatus, Workflow};
use rand::rngs::StdRng;
use tokio_util::sync::CancellationToken;

use crate::checkpoint::Checkpointer;
use crate::event::kind::{EdgeSelected, GoalGateUnsatisfied};
use crate::event::Event;
use crate::failure::FailureClass;
use crate::git::BranchWorktree;
use crate::handler::RunServices;
use crate::outcome::{Outcome, Signal};
use crate::run_dir::RunPaths;
use crate::transition::SelectionReason;

mod checkpoints;
mod parallel;
mod routing;
mod stage;
mod state;
#[cfg(test)]
mod tests;

use routing::Next;
pub(crate) use state::RunState;

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

impl StopCause {
    /// What stopped a run that ended `canceled`, read back from its `WorkflowRunFailed`
    /// (a client of a server sees only the events): `failure_class`
    /// `budget_exhausted` is a budget stop (SPEC 17.1); with `canceled`, the reason
    /// `canceled` is the user (4.8), `stall timeout: …` the watchdog (9.11) and
    /// `engine error: …` fabro's own storage (9.12). `None` for anything else.
    pub fn from_run_failed(failure_class: &str, reason: &str) -> Option<StopCause> {
        match failure_class {
            "budget_exhausted" => Some(StopCause::Budget),
            "canceled" if reason == "canceled" => Some(StopCause::User),
            "canceled" if reason.starts_with("stall timeout") => Some(StopCause::Stall),
            "canceled" if reason.starts_with("engine error") => Some(StopCause::EngineError),
            _ => None,
        }
    }
}

/// Why the watchdog or the user cancelled, set before the token fires.
#[derive(Debug, Default)]
pub(crate) struct CancelCause {
    stall_message: std::sync::Mutex<Option<String>>,
}

impl CancelCause {
    /// Records that the stall watchdog fired with `message`.
    pub(crate) fn set_stall(&self, message: String) {
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

/// What every traversal of one run shares, the root and its branches alike.
pub(crate) struct Shared {
    /// The workflow.
    pub(crate) workflow: Arc<Workflow>,
    /// Run-wide services, handed to handlers.
    pub(crate) services: Arc<RunServices>,
    /// The run directory's layout.
    pub(crate) paths: RunPaths,
    /// The graph visit limit of a dry run when the workflow sets none (SPEC 4.9).
    pub(crate) dry_run_visit_limit: Option<u32>,
    /// Why the run was cancelled.
    pub(crate) cause: Arc<CancelCause>,
    /// Human and wait stages running: the stall watchdog is paused while any does.
    pub(crate) watchdog_paused: Arc<AtomicUsize>,
    /// The last stage rank allocated in the whole run.
    pub(crate) ranks: AtomicU32,
}

/// Whether a traversal runs the run itself or one parallel branch of it.
pub(crate) enum Role {
    /// The run's own traversal: it writes checkpoints and ends the run.
    Root(Box<Root>),
    /// A parallel branch (SPEC 5.7): the parallel stage that forked it records its stages.
    Branch(Box<Branch>),
}

impl Role {
    /// The id of a branch's first node; `None` for the root.
    fn branch_target(&self) -> Option<&str> {
        match self {
            Role::Root(_) => None,
            Role::Branch(branch) => Some(&branch.target),
        }
    }
}

/// What only the root traversal has.
pub(crate) struct Root {
    /// Writes the run's checkpoints.
    checkpointer: Checkpointer,
    /// The next stage is the first of a resumed run: its stage directory is replaced
    /// and `full` fidelity degrades to `summary:high` (SPEC 6.7, 8.7).
    resumed_stage: bool,
}

/// What only a branch traversal has.
pub(crate) struct Branch {
    /// The id of the branch's first node.
    target: String,
    /// The join node of the parallel stage: the branch ends before entering it.
    join: NodeIndex,
    /// Cancelled when the parallel stage running this branch has its `first_success` join
    /// satisfied: the current stage ends `skipped` (SPEC 5.7).
    join_cancel: CancellationToken,
    /// The branch's own branch and worktree, when git checkpointing is active (SPEC 5.7);
    /// its stages are committed there.
    git: Option<BranchWorktree>,
    /// The names of the stage directories its stages (nested branches' included) write,
    /// for the branch's record.
    stage_log: Arc<Mutex<Vec<String>>>,
}

/// One run's traversal, or one parallel branch's.
pub(crate) struct Traversal {
    /// What the root and its branches share.
    run: Arc<Shared>,
    /// Root or branch.
    role: Role,
    /// The run state.
    pub(crate) state: RunState,
    /// Edge selection's and retry jitter's randomness.
    rng: StdRng,
    /// The working directory of its stages.
    work_dir: PathBuf,
    /// The private `TMPDIR` of its confined processes: the run's, or the branch's own
    /// (decision 63).
    tmpdir: crate::sandbox::PrivateTmpDir,
    /// Join node chosen by the last parallel stage, consumed by edge selection.
    pending_join: Option<NodeIndex>,
    /// Branch stages to record after the parallel node, in finish order (SPEC 5.7).
    pending_records: Vec<(String, Outcome)>,
    /// The stage directory of the last stage run, for the checkpoint's metadata files.
    last_stage_dir: Option<PathBuf>,
}

/// Where the run loop stopped.
enum Stop {
    /// A root traversal ended the run.
    Run(RunEnd),
    /// A branch traversal ended: the outcome of its last stage, or of what stopped it
    /// before one (SPEC 5.7).
    Branch(Box<Outcome>),
}

/// What happens before a stage is run.
enum Before {
    /// Run it.
    Run,
    /// A goal gate is unsatisfied at the exit: go to its retry target instead (SPEC 9.10).
    Jump(NodeIndex),
    /// Stop here.
    Stop(Stop),
}

impl Traversal {
    /// The root traversal of a run, with its `state` (fresh or restored) and
    /// `checkpointer`; `resumed` says that its first stage is a resumed run's.
    pub(crate) fn root(
        run: Arc<Shared>,
        state: RunState,
        rng: StdRng,
        work_dir: PathBuf,
        checkpointer: Checkpointer,
        resumed: bool,
    ) -> Traversal {
        let tmpdir = crate::sandbox::run_tmpdir(run.paths.run_dir());
        Traversal::new(
            run,
            Role::Root(Box::new(Root {
                checkpointer,
                resumed_stage: resumed,
            })),
            state,
            rng,
            work_dir,
            tmpdir,
        )
    }

    fn new(
        run: Arc<Shared>,
        role: Role,
        state: RunState,
        rng: StdRng,
        work_dir: PathBuf,
        tmpdir: crate::sandbox::PrivateTmpDir,
    ) -> Traversal {
        Traversal {
            run,
            role,
            state,
            rng,
            work_dir,
            tmpdir,
            pending_join: None,
            pending_records: Vec::new(),
            last_stage_dir: None,
        }
    }

    /// The checkpointer of a root traversal.
    pub(crate) fn checkpointer_mut(&mut self) -> Option<&mut Checkpointer> {
        match &mut self.role {
            Role::Root(root) => Some(&mut root.checkpointer),
            Role::Branch(_) => None,
        }
    }

    /// The join token of a branch traversal.
    fn join_cancel(&self) -> Option<&CancellationToken> {
        match &self.role {
            Role::Root(_) => None,
            Role::Branch(branch) => Some(&branch.join_cancel),
        }
    }

    /// Whether this is a branch whose join has been satisfied.
    fn join_satisfied(&self) -> bool {
        self.join_cancel()
            .is_some_and(CancellationToken::is_cancelled)
    }

    /// Runs from `start` until the run ends.
    /// `previous` and `entered_by` describe the stage before `start` (a resumed run's
    /// last completed stage and the edge taken from it).
    pub(crate) async fn run_from(
        &mut self,
        start: NodeIndex,
        previous: Option<Outcome>,
        entered_by: Option<EdgeIndex>,
    ) -> RunEnd {
        match self.run_loop(start, previous, entered_by).await {
            Stop::Run(end) => end,
            // Only branch traversals stop with an outcome; as a run's end it is a failure.
            Stop::Branch(outcome) => RunEnd::Failed {
                reason: outcome.failure_reason().to_owned(),
                class: outcome
                    .failure_class()
                    .unwrap_or(FailureClass::Deterministic),
                node_id: None,
            },
        }
    }

    /// Runs a branch traversal from its first node until the next node would be its join
    /// node or the exit node, or no edge is selectable; returns the outcome of its last
    /// stage.
    async fn run_branch(&mut self, start: NodeIndex) -> Outcome {
        match self.run_loop(start, None, None).await {
            Stop::Branch(outcome) => *outcome,
            // Only the root ends the run; a branch reports such an end as its failure.
            Stop::Run(end) => match end {
                RunEnd::Completed { status } => Outcome::new(status),
                RunEnd::Failed { reason, class, .. } => Outcome::fail(reason, class),
                RunEnd::Canceled { reason, .. } => Outcome::fail(reason, FailureClass::Canceled),
            },
        }
    }

    /// The run loop of root and branch traversals alike (SPEC 4.2, 5.7).
    async fn run_loop(
        &mut self,
        start: NodeIndex,
        mut previous: Option<Outcome>,
        mut entered_by: Option<EdgeIndex>,
    ) -> Stop {
        let workflow = Arc::clone(&self.run.workflow);
        let mut node = start;
        loop {
            match self.before_stage(node) {
                Before::Run => {}
                Before::Jump(target) => {
                    node = target;
                    entered_by = None;
                    continue;
                }
                Before::Stop(stop) => return stop,
            }
            let outcome = self.run_stage(node, previous.as_ref(), entered_by).await;
            if let Some(stop) = self.stop_after_stage(node, &outcome) {
                return stop;
            }
            self.record(node, &outcome);
            if let Some(stop) = self.after_record(node, &outcome) {
                return stop;
            }
            let next = match self.next(node, &outcome) {
                Next::Node(next) => next,
                Next::End(end) => return self.stop_with(end, outcome),
            };
            match &self.role {
                Role::Root(_) => {
                    if let Err(end) = self.checkpoint(node, Some(next), &outcome) {
                        return Stop::Run(end);
                    }
                }
                Role::Branch(branch) => {
                    if next == branch.join || Some(next) == workflow.exit() {
                        return Stop::Branch(Box::new(outcome));
                    }
                }
            }
            entered_by = workflow
                .outgoing(node)
                .find(|(_, edge)| edge.to == next)
                .map(|(index, _)| index);
            node = next;
            previous = Some(outcome);
        }
    }

    /// `end` as the stop of this traversal: the run's end for the root, the outcome of
    /// the last stage (`last`) for a branch.
    fn stop_with(&self, end: RunEnd, last: Outcome) -> Stop {
        match self.role {
            Role::Root(_) => Stop::Run(end),
            Role::Branch(_) => Stop::Branch(Box::new(last)),
        }
    }

    /// Cancellation, the budget, a satisfied join, goal gates and visit limits before the
    /// stage of `node`.
    fn before_stage(&mut self, node: NodeIndex) -> Before {
        let is_root = matches!(self.role, Role::Root(_));
        // SPEC 17.1: branch stages count against the run's stage limit too.
        if self.run.services.cancel.is_cancelled() || self.budget_reached() {
            return Before::Stop(if is_root {
                Stop::Run(self.canceled(Some(node)))
            } else {
                Stop::Branch(Box::new(Outcome::fail("canceled", FailureClass::Canceled)))
            });
        }
        if self.join_satisfied() {
            return Before::Stop(Stop::Branch(Box::new(parallel::join_satisfied_outcome())));
        }
        if is_root && Some(node) == self.run.workflow.exit() {
            match self.unsatisfied_goal_gate() {
                Some(Ok((gate, target))) => {
                    self.goal_gate_retry(node, gate, target);
                    return Before::Jump(target);
                }
                Some(Err(end)) => return Before::Stop(Stop::Run(end)),
                None => {}
            }
        }
        match self.visit_limit(node) {
            None => Before::Run,
            Some(end) if is_root => Before::Stop(Stop::Run(end)),
            Some(RunEnd::Failed { reason, class, .. }) => {
                Before::Stop(Stop::Branch(Box::new(Outcome::fail(reason, class))))
            }
            Some(_) => Before::Run,
        }
    }

    /// The events of a jump from the exit node to the retry target of an unsatisfied goal
    /// gate (SPEC 9.10).
    fn goal_gate_retry(&self, exit: NodeIndex, gate: NodeIndex, target: NodeIndex) {
        let workflow = &self.run.workflow;
        let exit_id = workflow.node(exit).id.clone();
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
    }

    /// A stage that stops its traversal before it is recorded: a storage failure, or for
    /// the root a stage interrupted by the run's cancellation.
    fn stop_after_stage(&self, node: NodeIndex, outcome: &Outcome) -> Option<Stop> {
        let is_root = matches!(self.role, Role::Root(_));
        if outcome.engine_error {
            return Some(if is_root {
                Stop::Run(RunEnd::Canceled {
                    reason: outcome.failure_reason().to_owned(),
                    node_id: Some(self.run.workflow.node(node).id.clone()),
                    cause: StopCause::EngineError,
                })
            } else {
                Stop::Branch(Box::new(outcome.clone()))
            });
        }
        // Events that stopped being persisted interrupt the stage whatever its outcome:
        // it runs again on resume (SPEC 13.2).
        let events_lost = self.run.services.emitter.storage_failure().is_some();
        (is_root
            && (events_lost
                || (self.run.services.cancel.is_cancelled()
                    && outcome.failure_class() == Some(FailureClass::Canceled))))
        .then(|| Stop::Run(self.canceled(Some(node))))
    }

    /// After a stage is recorded: the root completes the run at the exit node; a branch
    /// commits the stage to its own branch (SPEC 5.7) and stops when its join was
    /// satisfied during the stage.
    fn after_record(&mut self, node: NodeIndex, outcome: &Outcome) -> Option<Stop> {
        let workflow = Arc::clone(&self.run.workflow);
        match &mut self.role {
            Role::Root(_) => {
                if Some(node) != workflow.exit() {
                    return None;
                }
                if let Err(end) = self.checkpoint(node, None, outcome) {
                    return Some(Stop::Run(end));
                }
                let status = self.completion_status();
                Some(Stop::Run(RunEnd::Completed { status }))
            }
            Role::Branch(branch) => {
                if let Some(git) = branch.git.as_mut() {
                    let node_id = &workflow.node(node).id;
                    if let Err(error) = git.commit_stage(node_id, outcome.status.as_str()) {
                        return Some(Stop::Branch(Box::new(Outcome::engine_error(
                            crate::error_chain(&error),
                        ))));
                    }
                }
                (outcome.signal == Some(Signal::JoinSatisfied) && self.join_satisfied())
                    .then(|| Stop::Branch(Box::new(outcome.clone())))
            }
        }
    }

    /// Whether a budget limit stops the run before the next stage (SPEC 17.1); the
    /// stages started so far are the ranks allocated in the whole run.
    pub(crate) fn budget_reached(&self) -> bool {
        let started = self.run.ranks.load(std::sync::atomic::Ordering::SeqCst);
        self.run
            .services
            .budget
            .check_before_stage(u64::from(started))
    }

    fn canceled(&self, node: Option<NodeIndex>) -> RunEnd {
        let node_id = node.map(|node| self.run.workflow.node(node).id.clone());
        if let Some(failure) = self.run.services.emitter.storage_failure() {
            return RunEnd::Canceled {
                reason: format!("engine error: {failure}"),
                node_id,
                cause: StopCause::EngineError,
            };
        }
        if let Some(exhausted) = self.run.services.budget.exhausted() {
            return RunEnd::Canceled {
                reason: exhausted.reason(),
                node_id,
                cause: StopCause::Budget,
            };
        }
        match self.run.cause.stall() {
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

    fn emit(&self, event: Event) -> crate::event::EventEnvelope {
        self.run.services.emitter.emit(event)
    }

    /// Where hooks of this traversal's stages run: its working directory and `TMPDIR`,
    /// logging to `hooks.log` in `log_dir` (SPEC 20.4).
    pub(crate) fn hook_place<'a>(
        &'a self,
        log_dir: &'a std::path::Path,
    ) -> crate::hook::HookPlace<'a> {
        crate::hook::HookPlace {
            work_dir: &self.work_dir,
            tmpdir: &self.tmpdir,
            log_dir,
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
}
