//! Unit tests of the traversal: small workflows driven through the run loop with a temporary
//! run directory, the handlers' test services and the simulated LLM (scripted per node).
//! Tokio's clock is paused, so retry delays and backoffs take no real time.

use std::sync::atomic::{AtomicU32, AtomicUsize};
use std::sync::Arc;

use fabro_language::{StageStatus, Workflow};
use fabro_llm::simulated::{Script, SimulatedClient};
use rand::SeedableRng;

use super::{CancelCause, RunEnd, RunState, Shared, StopCause, Traversal};
use crate::checkpoint::Checkpointer;
use crate::event::kind::EventKind;
use crate::event::{read_events, EventEnvelope};
use crate::failure::FailureClass;
use crate::handler::test_support::{workflow, TestRun};
use crate::llm_target::{LlmDefaults, LlmSetup};
use crate::run_dir::RunPaths;

/// A finished traversal of a test workflow.
pub(super) struct Finished {
    /// How it ended.
    pub(super) end: RunEnd,
    /// Its final state.
    pub(super) state: RunState,
    /// Every event it emitted.
    pub(super) events: Vec<EventEnvelope>,
    /// Kept until the test ends.
    _dir: tempfile::TempDir,
}

impl Finished {
    /// The events named `name`.
    pub(super) fn named(&self, name: &str) -> Vec<&EventKind> {
        self.events
            .iter()
            .filter(|event| event.name() == name)
            .map(|event| &event.kind)
            .collect()
    }

    /// The completed nodes in order.
    pub(super) fn path(&self) -> Vec<&str> {
        self.state
            .completed_nodes
            .iter()
            .map(String::as_str)
            .collect()
    }

    /// The final status of node `id`.
    pub(super) fn status(&self, id: &str) -> StageStatus {
        self.state.node_outcomes[id].status
    }
}

/// A root traversal of `dot` whose LLM nodes reply from the simulated responses `script`
/// (JSON, SPEC 17.3), cancelled before its first stage when `cancel` is set.
pub(super) async fn traverse_with(dot: &str, script: &str, cancel: bool) -> Finished {
    traverse_on(dot, script, cancel, None).await
}

/// [`traverse_with`] with `blobs` as the run's blob store when given.
async fn traverse_on(
    dot: &str,
    script: &str,
    cancel: bool,
    blobs: Option<Arc<dyn crate::blob::BlobStore>>,
) -> Finished {
    let workflow: Arc<Workflow> = Arc::new(workflow(dot));
    let TestRun {
        dir, mut services, ..
    } = TestRun::new();
    if let Some(blobs) = blobs {
        services.blobs = blobs;
    }
    let script = Script::parse(script).expect("simulated responses");
    let defaults = LlmDefaults {
        cli_provider: Some("simulated".to_owned()),
        ..LlmDefaults::default()
    };
    services.llm = LlmSetup::resolve(
        &workflow,
        &defaults,
        Arc::new(SimulatedClient::new(script)),
        false,
    )
    .expect("the simulated provider needs no credentials");
    if cancel {
        services.cancel.cancel();
    }
    let paths = RunPaths::new(&dir.path().join("home"), "test-run");
    fs_err::create_dir_all(paths.run_dir()).expect("run directory");
    let work_dir = dir.path().join("work");
    let shared = Arc::new(Shared {
        workflow: Arc::clone(&workflow),
        services: Arc::new(services),
        paths: paths.clone(),
        dry_run_visit_limit: None,
        cause: Arc::new(CancelCause::default()),
        watchdog_paused: Arc::new(AtomicUsize::new(0)),
        ranks: AtomicU32::new(0),
    });
    let mut traversal = Traversal::root(
        shared,
        RunState::default(),
        rand::rngs::StdRng::seed_from_u64(7),
        work_dir,
        Checkpointer::new(paths.run_dir()),
        false,
    );
    let start = workflow.start().expect("a start node");
    let end = traversal.run_from(start, None, None).await;
    let text = fs_err::read_to_string(dir.path().join("events.jsonl")).expect("events file");
    Finished {
        end,
        state: traversal.state,
        events: read_events(&text),
        _dir: dir,
    }
}

/// [`traverse_with`], not cancelled.
pub(super) async fn traverse(dot: &str, script: &str) -> Finished {
    traverse_with(dot, script, false).await
}

/// A simulated reply that reports status `fields` as a JSON object.
pub(super) fn reply(fields: &str) -> String {
    format!(r#"{{"text": "{{{}}}"}}"#, fields.replace('"', "\\\""))
}

/// Simulated responses: each node replies with its entries in turn.
pub(super) fn script(node_replies: &[(&str, Vec<String>)]) -> String {
    let nodes: Vec<String> = node_replies
        .iter()
        .map(|(node, replies)| format!(r#""{node}": [{}]"#, replies.join(", ")))
        .collect();
    format!(r#"{{"nodes": {{{}}}}}"#, nodes.join(", "))
}

#[tokio::test(start_paused = true)]
async fn a_condition_beats_the_preferred_label_and_the_label_beats_plain_edges() {
    let dot = r#"digraph t {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        a [prompt="choose"]
        left [prompt="left"]
        right [prompt="right"]
        cond [prompt="cond"]
        start -> a
        a -> left [label="left"]
        a -> right [label="right"]
        left -> exit
        right -> exit
        cond -> exit
    }"#;
    let finished = traverse(
        dot,
        &script(&[("a", vec![reply(r#""preferred_next_label": "right""#)])]),
    )
    .await;
    assert_eq!(
        finished.end,
        RunEnd::Completed {
            status: StageStatus::Success
        }
    );
    assert_eq!(finished.path(), ["start", "a", "right", "exit"]);
    let reasons: Vec<(String, String, String)> = finished
        .named("EdgeSelected")
        .into_iter()
        .filter_map(|kind| match kind {
            EventKind::EdgeSelected(edge) => {
                Some((edge.from.clone(), edge.to.clone(), edge.reason.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(reasons[1].1, "right");
    assert_eq!(reasons[1].2, "preferred_label");

    // A matching condition wins over the preferred label.
    let dot = dot.replace(
        r#"a -> left [label="left"]"#,
        r#"a -> left [label="left"]
        a -> cond [condition="outcome=success"]"#,
    );
    let finished = traverse(
        &dot,
        &script(&[("a", vec![reply(r#""preferred_next_label": "right""#)])]),
    )
    .await;
    assert_eq!(finished.path(), ["start", "a", "cond", "exit"]);
}

#[tokio::test(start_paused = true)]
async fn retries_count_attempts_up_to_max_retries_then_the_stage_fails() {
    let dot = r#"digraph t {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        work [prompt="work", max_retries=2]
        start -> work -> exit
    }"#;
    let retry = reply(r#""outcome": "retry""#);
    // Two retries allowed: three attempts, all asking for another one.
    let finished = traverse(
        dot,
        &script(&[("work", vec![retry.clone(), retry.clone(), retry.clone()])]),
    )
    .await;
    assert_eq!(finished.named("StageRetrying").len(), 2);
    let attempts: Vec<u32> = finished
        .named("StageCompleted")
        .into_iter()
        .filter_map(|kind| match kind {
            EventKind::StageCompleted(stage) => Some(stage.attempts),
            _ => None,
        })
        .collect();
    assert_eq!(attempts, [1, 3, 1], "start, work three times, exit");
    assert_eq!(finished.state.node_retries["work"], 2);
    assert_eq!(finished.status("work"), StageStatus::Fail);
    assert_eq!(
        finished.state.node_outcomes["work"].failure_reason(),
        "max retries exceeded"
    );
    // The failure follows the unconditional edge to the exit (SPEC 4.7).
    assert_eq!(
        finished.end,
        RunEnd::Completed {
            status: StageStatus::PartialSuccess
        }
    );

    // A retry that then succeeds: two attempts, one retry recorded.
    let finished = traverse(
        dot,
        &script(&[("work", vec![retry, reply(r#""outcome": "success""#)])]),
    )
    .await;
    assert_eq!(
        finished.end,
        RunEnd::Completed {
            status: StageStatus::Success
        }
    );
    assert_eq!(finished.named("StageRetrying").len(), 1);
    assert_eq!(finished.state.node_retries["work"], 1);
}

#[tokio::test(start_paused = true)]
async fn an_unsatisfied_goal_gate_sends_the_run_to_its_retry_target() {
    let dot = r#"digraph t {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        fix [prompt="fix"]
        verify [prompt="verify", goal_gate=true, retry_target=fix]
        start -> verify -> exit
        fix -> verify
    }"#;
    let finished = traverse(
        dot,
        &script(&[(
            "verify",
            vec![
                reply(r#""outcome": "fail""#),
                reply(r#""outcome": "success""#),
            ],
        )]),
    )
    .await;
    assert_eq!(
        finished.path(),
        ["start", "verify", "fix", "verify", "exit"]
    );
    assert_eq!(finished.named("GoalGateUnsatisfied").len(), 1);
    // The latest outcome of every node counts (SPEC 4.7): verify succeeded in the end.
    assert_eq!(
        finished.end,
        RunEnd::Completed {
            status: StageStatus::Success
        }
    );

    // Without a retry target the run fails at the exit.
    let finished = traverse(
        &dot.replace(", retry_target=fix", ""),
        &script(&[("verify", vec![reply(r#""outcome": "fail""#)])]),
    )
    .await;
    match &finished.end {
        RunEnd::Failed { reason, .. } => assert_eq!(
            reason,
            "goal gate unsatisfied for node verify and no retry target"
        ),
        other => panic!("expected a failure, got {other:?}"),
    }
    assert_eq!(finished.path(), ["start", "verify"]);
}

#[tokio::test(start_paused = true)]
async fn loop_restarts_start_a_new_epoch_and_stop_at_the_condition() {
    let dot = r#"digraph t {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        a [prompt="a"]
        start -> a
        a -> exit [condition="context.internal.restart_count=2"]
        a -> a [loop_restart=true]
    }"#;
    let finished = traverse(dot, r#"{}"#).await;
    assert_eq!(
        finished.end,
        RunEnd::Completed {
            status: StageStatus::Success
        }
    );
    assert_eq!(finished.named("LoopRestart").len(), 2);
    assert_eq!(finished.state.restart_count, 2);
    assert_eq!(finished.state.node_visits["a"], 3);
    assert_eq!(
        finished.state.epoch_node_visits["a"], 1,
        "visits of the epoch"
    );
    assert_eq!(finished.path(), ["start", "a", "a", "a", "exit"]);
}

#[tokio::test(start_paused = true)]
async fn a_loop_restart_after_a_deterministic_failure_fails_the_run() {
    let dot = r#"digraph t {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        work [prompt="work"]
        start -> work
        work -> work [loop_restart=true]
        work -> exit [condition="outcome=success"]
    }"#;
    let finished = traverse(
        dot,
        &script(&[("work", vec![reply(r#""outcome": "fail""#)])]),
    )
    .await;
    assert_eq!(
        finished.end,
        RunEnd::Failed {
            reason: "loop_restart blocked: failure_class=deterministic (requires transient_infra)"
                .to_owned(),
            class: FailureClass::Deterministic,
            node_id: Some("work".to_owned()),
        }
    );
    assert!(finished.named("LoopRestart").is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_run_stops_before_its_next_stage() {
    let dot = r#"digraph t {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        start -> exit
    }"#;
    let finished = traverse_with(dot, r#"{}"#, true).await;
    assert_eq!(
        finished.end,
        RunEnd::Canceled {
            reason: "canceled".to_owned(),
            node_id: Some("start".to_owned()),
            cause: StopCause::User,
        }
    );
    assert!(finished.named("StageStarted").is_empty());
    assert!(finished.state.completed_nodes.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_node_visited_more_often_than_its_limit_fails_the_run() {
    let dot = r#"digraph t {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        a [prompt="a", max_visits=2]
        start -> a
        a -> a
    }"#;
    let finished = traverse(dot, r#"{}"#).await;
    match &finished.end {
        RunEnd::Failed { reason, class, .. } => {
            assert_eq!(*class, FailureClass::CompilationLoop);
            assert!(reason.starts_with("node \"a\" visited 2 times"), "{reason}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    assert_eq!(finished.state.node_visits["a"], 2);
}

#[test]
fn the_stop_cause_reads_back_from_the_terminal_event() {
    for (class, reason, expected) in [
        ("canceled", "canceled", Some(StopCause::User)),
        (
            "canceled",
            "stall timeout: no events for 30s",
            Some(StopCause::Stall),
        ),
        (
            "canceled",
            "engine error: cannot write events.jsonl: No space left on device",
            Some(StopCause::EngineError),
        ),
        (
            "budget_exhausted",
            "budget exhausted: stages 5 of 5",
            Some(StopCause::Budget),
        ),
        ("deterministic", "canceled", None),
        ("canceled", "something else", None),
    ] {
        assert_eq!(
            StopCause::from_run_failed(class, reason),
            expected,
            "{class} {reason}"
        );
    }
}

/// A blob store that refuses every write, as an object store that went away (SPEC 18.4.4).
#[derive(Debug)]
struct RefusingBlobs;

impl crate::blob::BlobStore for RefusingBlobs {
    fn put(&self, _bytes: &[u8]) -> Result<(crate::BlobRef, bool), crate::blob::BlobError> {
        Err(crate::blob::BlobError::Remote {
            location: "s3://gone/team".into(),
            source: "connection refused".into(),
        })
    }

    fn read(&self, reference: &crate::BlobRef) -> Result<Vec<u8>, crate::blob::BlobError> {
        Err(crate::blob::BlobError::Missing(reference.to_string()))
    }

    fn produced_count(&self) -> usize {
        0
    }
}

#[tokio::test(start_paused = true)]
async fn a_large_value_the_blob_store_refuses_stops_the_run_as_an_engine_error() {
    let dot = r#"digraph t {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        a [prompt="a"]
        b [prompt="b"]
        start -> a -> b -> exit
    }"#;
    // Over the offload threshold of SPEC 7.7 (100 KB), so it must become a blob.
    let large = "x".repeat(110 * 1024);
    let script = script(&[("a", vec![format!(r#"{{"text": "{large}"}}"#)])]);
    let finished = traverse_on(dot, &script, false, Some(Arc::new(RefusingBlobs))).await;
    match &finished.end {
        RunEnd::Canceled { reason, cause, .. } => {
            assert_eq!(*cause, StopCause::EngineError, "{reason}");
            assert!(
                reason.contains("cannot store a large context value"),
                "{reason}"
            );
        }
        other => panic!("expected an engine error, got {other:?}"),
    }
    assert!(!finished
        .state
        .completed_nodes
        .iter()
        .any(|node| node == "b"));
}
