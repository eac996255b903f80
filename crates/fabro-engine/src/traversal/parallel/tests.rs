//! Unit tests of parallel fan-out: the join policies, alone and through a traversal of a
//! small workflow without git (simulated LLM, temporary run directory).

use fabro_language::model::JoinPolicy;
use fabro_language::StageStatus;

use super::{join_outcome, satisfies_join};
use crate::event::kind::EventKind;
use crate::outcome::Signal;
use crate::traversal::tests::{reply, script, traverse};
use crate::traversal::RunEnd;

use StageStatus::{Fail, PartialSuccess, Skipped, Success};

#[test]
fn wait_all_succeeds_without_failures_and_is_partial_with_some() {
    assert_eq!(
        join_outcome(JoinPolicy::WaitAll, &[Success, Skipped]).status,
        Success
    );
    assert_eq!(
        join_outcome(JoinPolicy::WaitAll, &[Success, PartialSuccess]).status,
        Success
    );
    assert_eq!(
        join_outcome(JoinPolicy::WaitAll, &[Success, Fail]).status,
        PartialSuccess
    );
    assert_eq!(
        join_outcome(JoinPolicy::WaitAll, &[Fail, Fail]).status,
        PartialSuccess
    );
}

#[test]
fn first_success_needs_one_successful_branch() {
    assert_eq!(
        join_outcome(JoinPolicy::FirstSuccess, &[Fail, Success]).status,
        Success
    );
    let failed = join_outcome(JoinPolicy::FirstSuccess, &[Fail, PartialSuccess, Skipped]);
    assert_eq!(failed.status, Fail);
    assert_eq!(
        failed.failure_reason(),
        "join policy not satisfied: 0/3 branches succeeded"
    );
}

#[test]
fn only_a_successful_branch_satisfies_a_first_success_join_early() {
    assert!(satisfies_join(JoinPolicy::FirstSuccess, Success));
    assert!(!satisfies_join(JoinPolicy::FirstSuccess, PartialSuccess));
    assert!(!satisfies_join(JoinPolicy::FirstSuccess, Fail));
    assert!(!satisfies_join(JoinPolicy::WaitAll, Success));
}

#[test]
fn a_join_satisfied_outcome_is_skipped_with_its_signal_and_notes() {
    let outcome = super::join_satisfied_outcome();
    assert_eq!(outcome.status, Skipped);
    assert_eq!(outcome.signal, Some(Signal::JoinSatisfied));
    assert_eq!(
        outcome.notes.as_deref(),
        Some("canceled: join policy first_success satisfied")
    );
}

/// A parallel node with `policy` over branches `bad` (fails) and `good` (succeeds), run one
/// at a time in that order and joined by a fan-in node.
fn fan_out(policy: &str) -> String {
    format!(
        r#"digraph t {{
            start [shape=Mdiamond]
            exit [shape=Msquare]
            fan [shape=component, join_policy={policy}, max_parallel=1]
            good [prompt="good"]
            bad [prompt="bad"]
            merge [shape=tripleoctagon]
            start -> fan
            fan -> bad -> merge
            fan -> good -> merge
            merge -> exit
        }}"#
    )
}

#[tokio::test(start_paused = true)]
async fn join_policies_decide_the_parallel_stage_through_the_traversal() {
    let replies = script(&[("bad", vec![reply(r#""outcome": "fail""#)])]);

    let finished = traverse(&fan_out("wait_all"), &replies).await;
    assert_eq!(finished.status("fan"), PartialSuccess);
    assert_eq!(finished.status("good"), Success);
    assert_eq!(finished.status("bad"), Fail);
    let completed: Vec<(usize, usize)> = finished
        .named("ParallelCompleted")
        .into_iter()
        .filter_map(|kind| match kind {
            EventKind::ParallelCompleted(done) => Some((done.success_count, done.failure_count)),
            _ => None,
        })
        .collect();
    assert_eq!(completed, [(1, 1)]);
    let path = finished.path();
    assert_eq!(path[..2], ["start", "fan"]);
    assert_eq!(path[path.len() - 2..], ["merge", "exit"]);
    assert_eq!(
        finished.end,
        RunEnd::Completed {
            status: PartialSuccess
        }
    );

    // With first_success, one successful branch is enough.
    let finished = traverse(&fan_out("first_success"), &replies).await;
    assert_eq!(finished.status("fan"), Success);
    assert_eq!(finished.named("ParallelBranchStarted").len(), 2);
    let results = finished.state.context.get("parallel.results").cloned();
    let statuses: Vec<String> = results
        .and_then(|results| results.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .map(|result| result["status"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(statuses, ["fail", "success"]);
}
