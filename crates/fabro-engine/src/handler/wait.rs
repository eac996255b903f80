//! The wait handler (SPEC 5.9): sleeps for the node's `duration`, cancellably, then
//! succeeds. The stall watchdog's suspension during the sleep is the traversal's job.

use super::StageInput;
use crate::failure::FailureClass;
use crate::outcome::Outcome;

pub(super) async fn execute(input: &StageInput<'_>) -> Outcome {
    // Lowering turns an invalid duration into `None` (with a diagnostic), so both cases
    // of SPEC 5.9 land here.
    let Some(duration) = input.node.duration() else {
        return Outcome::fail("wait node requires a duration", FailureClass::Deterministic);
    };
    if input.services.dry_run {
        // SPEC 4.9: wait nodes do not sleep in a dry run.
        return Outcome::success();
    }
    tokio::select! {
        biased;
        () = input.services.cancel.cancelled() => {
            return Outcome::fail("canceled", FailureClass::Canceled);
        }
        () = tokio::time::sleep(duration) => {}
    }
    // The watchdog was suspended; restart its clock so the sleep does not count as a
    // stall.
    input.services.emitter.touch();
    Outcome::success()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use fabro_language::{StageStatus, Workflow};
    use tokio::time::Instant;

    use super::*;
    use crate::handler::test_support::{workflow, TestRun};

    /// A workflow whose node `pause` is a wait node with `attributes`.
    fn wait_workflow(attributes: &str) -> Workflow {
        workflow(&format!(
            r#"digraph t {{
                start [shape=Mdiamond]
                pause [shape=insulator{attributes}]
                exit [shape=Msquare]
                start -> pause -> exit
            }}"#
        ))
    }

    #[tokio::test(start_paused = true)]
    async fn sleeps_for_the_duration_then_succeeds() {
        let run = TestRun::new();
        let workflow = wait_workflow(r#", duration="10m""#);
        let activity_before = run.services.emitter.last_activity();
        let started = Instant::now();
        let outcome = execute(&run.input(&workflow, "pause")).await;

        assert_eq!(outcome, Outcome::success());
        assert!(started.elapsed() >= Duration::from_secs(600));
        assert!(run.services.emitter.last_activity() > activity_before);
    }

    #[tokio::test(start_paused = true)]
    async fn cancellation_ends_the_sleep() {
        let run = TestRun::new();
        let workflow = wait_workflow(r#", duration="10m""#);
        let started = Instant::now();
        let cancel_later = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            run.services.cancel.cancel();
        };
        let input = run.input(&workflow, "pause");
        let (outcome, ()) = tokio::join!(execute(&input), cancel_later);

        assert_eq!(outcome.status, StageStatus::Fail);
        assert_eq!(outcome.failure_class(), Some(FailureClass::Canceled));
        assert_eq!(outcome.failure_reason(), "canceled");
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_dry_run_does_not_sleep() {
        let mut run = TestRun::new();
        run.services.dry_run = true;
        let workflow = wait_workflow(r#", duration="10m""#);
        let started = Instant::now();
        let outcome = execute(&run.input(&workflow, "pause")).await;

        assert_eq!(outcome, Outcome::success());
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[tokio::test]
    async fn a_missing_or_invalid_duration_fails_deterministically() {
        let run = TestRun::new();
        for attributes in ["", r#", duration="soon""#] {
            let workflow = wait_workflow(attributes);
            let outcome = execute(&run.input(&workflow, "pause")).await;

            assert_eq!(outcome.failure_class(), Some(FailureClass::Deterministic));
            assert_eq!(outcome.failure_reason(), "wait node requires a duration");
        }
    }
}
