//! The sub-workflow handler (SPEC 5.10): starts the child workflow as a separate run
//! (own run id and directory, `parent_run_id` in its manifest) and runs the manager loop
//! over it: observe, wait, stop condition, cycle cap. The child is the one stored in the
//! parent's run directory under `children/` (SPEC 4.1); the run side prepares it through
//! the [`super::ChildRunner`] of the run's services.

use std::time::Duration;

use fabro_language::model::{ManagerAction, SubWorkflowSettings};
use fabro_language::StageStatus;
use serde_json::Value;

use super::{BoxFuture, ChildReport, ChildRequest, ChildRunFailed, StageInput};
use crate::context::Context;
use crate::event::kind::{SubWorkflowCompleted, SubWorkflowStarted};
use crate::event::Event;
use crate::failure::FailureClass;
use crate::outcome::Outcome;
use crate::record::Checkpoint;
use crate::run_index::RunStatus;
use crate::transition::ConditionView;

/// Boxed as a `Send` trait object: a child run executes handlers again, and the
/// recursive future type could not otherwise be proven `Send`.
pub(super) fn execute<'a>(input: &'a StageInput<'a>) -> BoxFuture<'a, Outcome> {
    Box::pin(run(input))
}

async fn run(input: &StageInput<'_>) -> Outcome {
    let node = input.node;
    let Some(settings) = node.sub_workflow.as_deref() else {
        return Outcome::fail(
            "engine error: sub_workflow node without settings",
            FailureClass::Deterministic,
        );
    };
    let mut observed = Context::new();
    let child = match (settings.autostart, settings.child_workflow.as_deref()) {
        (true, Some(reference)) => {
            let cancel = input.services.cancel.child_token();
            let request = ChildRequest {
                reference: reference.to_owned(),
                fallback_goal: input.context.get_str("graph.goal").map(str::to_owned),
                parent_run_id: input.services.run_id.clone(),
                work_dir: match settings.child_workdir.as_deref() {
                    Some(workdir) => input.work_dir.join(workdir),
                    None => input.work_dir.to_path_buf(),
                },
                cancel: cancel.clone(),
            };
            let child = match input.services.child_runner.start(request) {
                Ok(child) => child,
                Err(error) => return Outcome::fail(error.reason, FailureClass::Deterministic),
            };
            input.services.emitter.emit(Event::node(
                &node.id,
                SubWorkflowStarted {
                    child_run_id: child.run_id.clone(),
                },
            ));
            observed.set("stack.child.run_id", child.run_id.clone());
            observed.set("stack.child.status", "running");
            Some((
                tokio::spawn(child.execution),
                cancel,
                child.run_id,
                child.run_dir,
            ))
        }
        _ => None,
    };
    let Some((mut handle, cancel, child_run_id, child_dir)) = child else {
        return manage_without_child(
            input,
            settings.max_cycles,
            settings.poll_interval,
            settings.stop_condition.as_ref(),
        )
        .await;
    };
    let result = match supervise_child(
        input,
        settings,
        &mut handle,
        &cancel,
        &child_dir,
        &mut observed,
    )
    .await
    {
        Supervised::Ended(joined) => Some(joined),
        Supervised::Stopped => None,
        Supervised::CycleCap => {
            return finish(
                input,
                &child_run_id,
                RunStatus::Canceled,
                observed,
                Outcome::fail("Max cycles exceeded", FailureClass::Deterministic),
            );
        }
        Supervised::Canceled => return Outcome::fail("canceled", FailureClass::Canceled),
    };
    observe_child(&child_dir, &mut observed);
    let (status, outcome) = match result {
        None => (
            RunStatus::Canceled,
            Outcome::success().with_notes("manager.stop_condition met; child canceled"),
        ),
        Some(Ok(Ok(report))) => {
            let outcome = match report.status {
                RunStatus::Success => Outcome::success(),
                RunStatus::PartialSuccess => Outcome::new(StageStatus::PartialSuccess),
                _ => Outcome::fail(
                    report.reason.clone().unwrap_or_else(|| {
                        format!(
                            "child run {child_run_id} ended with status {}",
                            report.status
                        )
                    }),
                    FailureClass::Deterministic,
                ),
            };
            (report.status, outcome)
        }
        Some(Ok(Err(error))) => (
            RunStatus::Fail,
            Outcome::fail(error.reason, FailureClass::Deterministic),
        ),
        Some(Err(error)) => (
            RunStatus::Fail,
            Outcome::fail(
                format!("handler panicked: {error}"),
                FailureClass::Deterministic,
            ),
        ),
    };
    observed.set("stack.child.status", status.as_str());
    finish(input, &child_run_id, status, observed, outcome)
}

/// How the manager loop over a running child ended.
enum Supervised {
    /// The child's task ended: its report, its error, or a panic.
    Ended(Result<Result<ChildReport, ChildRunFailed>, tokio::task::JoinError>),
    /// The stop condition held; the child was canceled.
    Stopped,
    /// `manager.max_cycles` was reached; the child was canceled.
    CycleCap,
    /// The parent run was cancelled, and the child with it.
    Canceled,
}

/// The manager loop (SPEC 5.10): each poll interval observes the child (with the
/// `observe` action) and evaluates the stop condition, until the child ends, the stop
/// condition holds, the cycle cap is reached or the run is cancelled.
async fn supervise_child(
    input: &StageInput<'_>,
    settings: &SubWorkflowSettings,
    handle: &mut tokio::task::JoinHandle<Result<ChildReport, ChildRunFailed>>,
    cancel: &tokio_util::sync::CancellationToken,
    child_dir: &std::path::Path,
    observed: &mut Context,
) -> Supervised {
    let observe = settings.actions.contains(&ManagerAction::Observe);
    let mut cycles = 0u32;
    loop {
        tokio::select! {
            joined = &mut *handle => return Supervised::Ended(joined),
            () = tokio::time::sleep(settings.poll_interval) => {}
            () = input.services.cancel.cancelled() => {
                cancel.cancel();
                let _ = (&mut *handle).await;
                return Supervised::Canceled;
            }
        }
        cycles += 1;
        if observe {
            observe_child(child_dir, observed);
            input.services.emitter.touch();
        }
        if let Some(condition) = &settings.stop_condition {
            let mut view_context = input.context.clone();
            for (key, value) in observed.iter() {
                view_context.set(key.clone(), value.clone());
            }
            let view = ConditionView {
                outcome: "",
                preferred_label: "",
                context: &view_context,
                blobs: &input.services.blobs,
            };
            if condition.evaluate(&view) {
                cancel.cancel();
                let _ = (&mut *handle).await;
                return Supervised::Stopped;
            }
        }
        if cycles >= settings.max_cycles {
            cancel.cancel();
            let _ = (&mut *handle).await;
            return Supervised::CycleCap;
        }
    }
}

/// Emits `SubWorkflowCompleted` and returns `outcome` with the observed keys.
fn finish(
    input: &StageInput<'_>,
    child_run_id: &str,
    status: RunStatus,
    observed: Context,
    mut outcome: Outcome,
) -> Outcome {
    input.services.emitter.emit(Event::node(
        &input.node.id,
        SubWorkflowCompleted {
            child_run_id: child_run_id.to_owned(),
            status,
        },
    ));
    for (key, value) in observed.iter() {
        outcome.context_updates.insert(key.clone(), value.clone());
    }
    outcome
}

/// Copies the child's state from its checkpoint into `stack.child.*` keys.
fn observe_child(child_dir: &std::path::Path, observed: &mut Context) {
    let Ok(text) = fs_err::read_to_string(child_dir.join(crate::run_dir::CHECKPOINT_FILE)) else {
        return;
    };
    let Ok(checkpoint) = serde_json::from_str::<Checkpoint>(&text) else {
        return;
    };
    observed.set("stack.child.status", checkpoint.run_status.as_str());
    observed.set(
        "stack.child.current_node",
        checkpoint
            .current_node
            .clone()
            .map_or(Value::Null, Value::from),
    );
    observed.set(
        "stack.child.completed_count",
        checkpoint.completed_nodes.len(),
    );
    let outcome = checkpoint
        .context_values
        .get("outcome")
        .cloned()
        .unwrap_or(Value::String(String::new()));
    observed.set("stack.child.outcome", outcome);
}

/// Without autostart the manager only watches the context (set by other means) until
/// the stop condition holds or the cycles run out.
async fn manage_without_child(
    input: &StageInput<'_>,
    max_cycles: u32,
    poll_interval: Duration,
    stop: Option<&fabro_language::Condition>,
) -> Outcome {
    let Some(stop) = stop else {
        return Outcome::fail(
            format!(
                "sub_workflow node {} has no child workflow to start and no manager.stop_condition",
                input.node.id
            ),
            FailureClass::Deterministic,
        );
    };
    for _ in 0..max_cycles {
        let view = ConditionView {
            outcome: "",
            preferred_label: "",
            context: input.context,
            blobs: &input.services.blobs,
        };
        if stop.evaluate(&view) {
            return Outcome::success();
        }
        tokio::select! {
            () = tokio::time::sleep(poll_interval) => {}
            () = input.services.cancel.cancelled() => return Outcome::fail("canceled", FailureClass::Canceled),
        }
    }
    Outcome::fail("Max cycles exceeded", FailureClass::Deterministic)
}
