//! FINALIZE (SPEC 4.1): the final checkpoint and event of a run, its worktree removed
//! after a success, its status in the index, then the lock released.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::execute::Launch;
use super::{PreparedRun, RunReport};
use crate::checkpoint::Checkpointer;
use crate::config::HookEvent;
use crate::event::kind::{
    BudgetExhausted, EventUsage, WatchdogTimeout, WorkflowRunCompleted, WorkflowRunFailed,
};
use crate::event::Event;
use crate::failure::FailureClass;
use crate::id::RunId;
use crate::run_index::RunStatus;
use crate::store::RunLease;
use crate::traversal::{RunEnd, StopCause};

impl PreparedRun {
    /// FINALIZE: the final checkpoint and event for `end`; after a success the worktree
    /// is removed (SPEC 8.4: the branch stays; after a failure or a cancellation it is
    /// kept for inspection and resume); the status goes to the index before `lease` is
    /// released (SPEC 11.4).
    pub(super) async fn finish(
        &self,
        mut launch: Launch,
        end: RunEnd,
        started: Instant,
        lease: Option<Box<dyn RunLease>>,
    ) -> RunReport {
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let (status, reason) = match &end {
            RunEnd::Completed { status } => {
                let run_status = RunStatus::completed(*status);
                self.finish_completed(&mut launch, run_status, duration_ms)
                    .await;
                (run_status, None)
            }
            RunEnd::Failed {
                reason,
                class,
                node_id,
            } => {
                launch.traversal.final_checkpoint(None, RunStatus::Fail);
                let failed = Event::run(WorkflowRunFailed {
                    duration_ms,
                    failure_class: class.as_str().to_owned(),
                    node_id: node_id.clone(),
                    reason: reason.clone(),
                });
                emit_last(
                    launch.end(self.paths.run_dir()),
                    failed,
                    HookEvent::RunFailed,
                )
                .await;
                (RunStatus::Fail, Some(reason.clone()))
            }
            RunEnd::Canceled {
                reason,
                node_id,
                cause,
            } => {
                self.finish_canceled(&mut launch, reason, node_id.as_deref(), *cause, duration_ms)
                    .await;
                (RunStatus::Canceled, Some(reason.clone()))
            }
        };
        if matches!(end, RunEnd::Completed { .. }) {
            if let Some(git) = launch
                .traversal
                .checkpointer_mut()
                .and_then(Checkpointer::take_git)
            {
                if let Err(error) = git.remove_worktree() {
                    tracing::warn!(error = %crate::error_chain(&error), "cannot remove the run worktree");
                }
            }
        }
        // Decision 63: the private TMPDIRs go when the run finishes, however it ended.
        crate::sandbox::remove_tmpdirs(self.paths.run_dir());
        if let Err(error) = self.stores.runs.register_end(&self.id(), status) {
            tracing::warn!(error = %crate::error_chain(&error), "cannot record the run status in the run index");
        }
        drop(lease);
        RunReport {
            run_id: RunId::from(self.run_id.clone()),
            run_dir: self.paths.run_dir().to_path_buf(),
            status,
            reason,
            end,
        }
    }

    /// The final checkpoint and `WorkflowRunCompleted`, with the run's usage totals.
    async fn finish_completed(&self, launch: &mut Launch, run_status: RunStatus, duration_ms: u64) {
        let traversal = &mut launch.traversal;
        traversal.final_checkpoint(None, run_status);
        let mut usage = fabro_llm::Usage::default();
        for outcome in traversal.state.node_outcomes.values() {
            if let Some(stage_usage) = &outcome.usage {
                usage.add(stage_usage);
            }
        }
        let services = &launch.services;
        let completed = Event::run(WorkflowRunCompleted {
            artifact_count: services.blobs.produced_count(),
            asset_count: services.assets.captured.load(Ordering::SeqCst),
            completed_count: traversal.state.completed_nodes.len(),
            cost_usd: usage.cost_usd,
            duration_ms,
            status: run_status,
            usage: EventUsage::from(usage),
        });
        emit_last(
            launch.end(self.paths.run_dir()),
            completed,
            HookEvent::RunComplete,
        )
        .await;
    }

    /// The cancelled checkpoint, `BudgetExhausted` or `WatchdogTimeout` when one of them
    /// stopped the run, and `WorkflowRunFailed`.
    async fn finish_canceled(
        &self,
        launch: &mut Launch,
        reason: &str,
        node_id: Option<&str>,
        cause: StopCause,
        duration_ms: u64,
    ) {
        launch.traversal.canceled_checkpoint(node_id);
        let emitter = &launch.emitter;
        let exhausted = launch
            .budget
            .exhausted()
            .filter(|_| cause == StopCause::Budget);
        if let Some(exhausted) = &exhausted {
            emitter.emit(Event::run(BudgetExhausted {
                kind: exhausted.kind.as_str().to_owned(),
                limit: exhausted.limit.clone(),
                used: exhausted.used.clone(),
            }));
        }
        if cause == StopCause::Stall {
            emitter.emit(Event::run(WatchdogTimeout {
                last_event_id: emitter.last_event_id(),
                stall_timeout_s: self.workflow.settings.stall_timeout.as_secs(),
            }));
        }
        let failed = Event::run(WorkflowRunFailed {
            duration_ms,
            failure_class: if exhausted.is_some() {
                FailureClass::BudgetExhausted
            } else {
                FailureClass::Canceled
            }
            .as_str()
            .to_owned(),
            node_id: node_id.map(str::to_owned),
            reason: reason.to_owned(),
        });
        emit_last(
            launch.end(self.paths.run_dir()),
            failed,
            HookEvent::RunFailed,
        )
        .await;
    }
}

/// What the run's last event needs of a [`Launch`]: its emitter, its hooks and where
/// run hooks run (borrowed apart, since a `Launch` is not `Sync`).
struct End<'a> {
    emitter: &'a crate::event::Emitter,
    hooks: &'a crate::hook::Hooks,
    place: crate::hook::HookPlace<'a>,
}

impl Launch {
    /// Its parts for [`emit_last`]; run hooks log to `run_dir`.
    fn end<'a>(&'a self, run_dir: &'a std::path::Path) -> End<'a> {
        End {
            emitter: &self.emitter,
            hooks: &self.services.hooks,
            place: self.traversal.hook_place(run_dir),
        }
    }
}

/// The run's last event, after the hooks still running and the `run_complete` or
/// `run_failed` hooks, which get it before it is written (SPEC 11.3, 20.4).
async fn emit_last(end: End<'_>, event: Event, hook: HookEvent) {
    if !end.hooks.is_empty() {
        let envelope = end.emitter.preview(&event);
        end.hooks.finish(hook, &envelope, end.place).await;
    }
    end.emitter.emit(event);
}
