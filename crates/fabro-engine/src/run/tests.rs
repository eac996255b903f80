//! The run lifecycle through its seams: in-memory stores, a scripted interviewer and the
//! simulated LLM. A new run to success, a cancellation at a human gate, the resume of
//! that run from its mid-run checkpoint, and the refusal to resume a finished run.

use std::sync::Arc;

use fabro_language::AnyModel;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::event::{EventEnvelope, EventKind};
use crate::interviewer::{BoxFuture, Question, Reply};
use crate::source::FsLoader;
use crate::store::{MemoryRunStore, RunStore};

mod lifecycle;
mod tmpdir;

/// start → plan (LLM) → review (human gate) → build (LLM) → exit.
const GATED: &str = r#"digraph Gated {
    graph [goal="Ship it"]
    start  [shape=Mdiamond]
    exit   [shape=Msquare]
    plan   [prompt="Plan the work"]
    review [shape=hexagon, label="Approve the plan?"]
    build  [prompt="Build it"]
    start -> plan -> review
    review -> build [label="[A] Approve"]
    build -> exit
}"#;

/// start → plan → build → exit, all LLM stages but the ends.
const THREE: &str = r#"digraph Three {
    graph [goal="Ship it"]
    start [shape=Mdiamond]
    exit  [shape=Msquare]
    plan  [prompt="Plan the work"]
    build [prompt="Build it"]
    start -> plan -> build -> exit
}"#;

/// A human who never answers: asked, it cancels the run (as SIGINT would) and waits.
struct CancelWhenAsked(CancellationToken);

impl Interviewer for CancelWhenAsked {
    fn ask<'a>(&'a self, _question: &'a Question) -> BoxFuture<'a, Reply> {
        Box::pin(async move {
            self.0.cancel();
            std::future::pending().await
        })
    }
}

/// A run's scratch root and in-memory stores.
struct Fixture {
    root: tempfile::TempDir,
    runs: MemoryRunStore,
    stores: Stores,
}

impl Fixture {
    fn new() -> Fixture {
        let runs = MemoryRunStore::new();
        let stores = Stores {
            runs: Arc::new(runs.clone()),
            blobs: Arc::new(crate::blob::MemoryBlobStore::new()),
        };
        Fixture {
            root: tempfile::tempdir().expect("temp dir"),
            runs,
            stores,
        }
    }

    fn options(&self, source: &str) -> RunOptions {
        let path = self.root.path().join("workflow.fabro");
        fs_err::write(&path, source).expect("workflow written");
        RunOptions {
            workflow_path: path,
            run_id: Some("run-1".to_owned()),
            work_dir: Some(self.root.path().to_path_buf()),
            random_seed: Some(7),
            ..RunOptions::new(
                self.root.path().join("workflow.fabro"),
                self.root.path().join("home"),
            )
        }
    }

    async fn run(&self, options: RunOptions, cancel: CancellationToken) -> RunReport {
        let prepared =
            prepare_with(options, self.stores.clone(), &FsLoader, &AnyModel).expect("prepares");
        prepared
            .execute(cancel, Vec::new())
            .await
            .expect("executes")
    }

    fn events(&self) -> Vec<EventEnvelope> {
        self.runs
            .read_events(&RunId::from("run-1"), 1)
            .expect("events")
    }

    fn checkpoint(&self) -> Checkpoint {
        self.runs
            .load_checkpoint(&RunId::from("run-1"))
            .expect("loads")
            .expect("a checkpoint")
    }
}

/// The nodes whose stages started, in order, from event `from_id` on.
fn started_stages(events: &[EventEnvelope], from_id: u64) -> Vec<String> {
    events
        .iter()
        .filter(|event| event.id >= from_id && event.name() == "StageStarted")
        .filter_map(|event| event.node_id.as_ref().map(|node| node.as_str().to_owned()))
        .collect()
}

#[tokio::test]
async fn a_new_run_succeeds_with_its_records_in_the_store() {
    let fixture = Fixture::new();
    let report = fixture
        .run(fixture.options(THREE), CancellationToken::new())
        .await;
    assert_eq!(report.status, RunStatus::Success);
    assert_eq!(report.run_id.as_str(), "run-1");

    let events = fixture.events();
    assert_eq!(
        events.first().map(EventEnvelope::name),
        Some("WorkflowRunStarted")
    );
    assert_eq!(
        events.last().map(EventEnvelope::name),
        Some("WorkflowRunCompleted")
    );
    assert_eq!(
        started_stages(&events, 1),
        ["start", "plan", "build", "exit"]
    );
    let ids: Vec<u64> = events.iter().map(|event| event.id).collect();
    assert_eq!(ids, (1..=events.len() as u64).collect::<Vec<_>>());

    let checkpoint = fixture.checkpoint();
    assert_eq!(checkpoint.run_status, RunStatus::Success);
    assert_eq!(
        checkpoint.completed_nodes,
        ["start", "plan", "build", "exit"]
    );
    let stored = fixture.runs.run(&RunId::from("run-1")).expect("stored run");
    let manifest = stored.manifest.expect("manifest");
    assert_eq!(
        (manifest.workflow_name.as_str(), manifest.node_count),
        ("Three", 4)
    );
    assert!(stored.graph.is_some_and(|graph| graph.contains("plan")));
    let listed = fixture.stores.runs.list_runs().expect("lists");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].status, RunStatus::Success);
    assert!(
        !fixture.runs.is_active(&RunId::from("run-1")),
        "lock released"
    );
    // The records went to the store, not to the scratch directory.
    assert!(!report.run_dir.join("events.jsonl").exists());
    assert!(!report.run_dir.join("checkpoint.json").exists());
    assert!(!report.run_dir.join("manifest.json").exists());
}

#[tokio::test]
async fn a_cancellation_at_a_gate_ends_the_run_with_a_resumable_checkpoint() {
    let fixture = Fixture::new();
    let cancel = CancellationToken::new();
    let mut options = fixture.options(GATED);
    options.interviewer = Some(Arc::new(CancelWhenAsked(cancel.clone())));
    let report = fixture.run(options, cancel).await;

    assert_eq!(report.status, RunStatus::Canceled);
    assert!(
        matches!(report.end, RunEnd::Canceled { .. }),
        "{:?}",
        report.end
    );
    let events = fixture.events();
    assert_eq!(
        events.last().map(EventEnvelope::name),
        Some("WorkflowRunFailed")
    );
    assert_eq!(started_stages(&events, 1), ["start", "plan", "review"]);
    let checkpoint = fixture.checkpoint();
    assert_eq!(checkpoint.run_status, RunStatus::Canceled);
    assert_eq!(checkpoint.current_node.as_deref(), Some("plan"));
    assert_eq!(checkpoint.next_node_id.as_deref(), Some("review"));
    assert_eq!(checkpoint.completed_nodes, ["start", "plan"]);
    assert!(
        !fixture.runs.is_active(&RunId::from("run-1")),
        "lock released"
    );
}

#[tokio::test]
async fn a_resumed_run_starts_at_the_checkpoints_next_node_with_its_context() {
    let fixture = Fixture::new();
    let cancel = CancellationToken::new();
    let mut options = fixture.options(GATED);
    options.interviewer = Some(Arc::new(CancelWhenAsked(cancel.clone())));
    fixture.run(options, cancel).await;
    let first_run_events = fixture.events().len() as u64;

    // The checkpoint's context is the resumed run's: a value only it holds survives.
    let mut checkpoint = fixture.checkpoint();
    checkpoint.context_values.insert(
        "marker".to_owned(),
        serde_json::json!("from the checkpoint"),
    );
    let run_id = RunId::from("run-1");
    let lease = fixture.stores.runs.lock(&run_id).expect("locks");
    let mut options = fixture.options(GATED);
    options.auto_approve = true;
    let prepared = prepare_resume_with(
        options,
        fixture.stores.clone(),
        checkpoint,
        lease,
        &FsLoader,
        &AnyModel,
    )
    .expect("prepares the resume");
    assert!(matches!(prepared.start(), Start::Resume(_)));
    let report = prepared
        .execute(CancellationToken::new(), Vec::new())
        .await
        .expect("executes");

    assert_eq!(report.status, RunStatus::Success);
    let events = fixture.events();
    let resumed_from = first_run_events + 1;
    let started = events
        .iter()
        .find(|event| event.id == resumed_from)
        .map(|event| &event.kind);
    match started {
        Some(EventKind::WorkflowRunStarted(started)) => {
            assert!(started.resumed);
            assert_eq!(started.next_node_id, "review");
        }
        other => panic!("the resumed run starts with WorkflowRunStarted, not {other:?}"),
    }
    assert_eq!(
        started_stages(&events, resumed_from),
        ["review", "build", "exit"],
        "the resumed run continues at the gate and runs nothing twice"
    );
    let checkpoint = fixture.checkpoint();
    assert_eq!(checkpoint.run_status, RunStatus::Success);
    assert_eq!(
        checkpoint.completed_nodes,
        ["start", "plan", "review", "build", "exit"]
    );
    assert_eq!(checkpoint.node_visits.get("plan"), Some(&1));
    assert_eq!(
        checkpoint.context_values.get("marker"),
        Some(&serde_json::json!("from the checkpoint"))
    );
}

#[tokio::test]
async fn a_finished_run_is_not_resumed() {
    let fixture = Fixture::new();
    fixture
        .run(fixture.options(THREE), CancellationToken::new())
        .await;
    let events_before = fixture.events().len();
    let run_id = RunId::from("run-1");
    let lease = fixture.stores.runs.lock(&run_id).expect("locks");
    let refused = prepare_resume_with(
        fixture.options(THREE),
        fixture.stores.clone(),
        fixture.checkpoint(),
        lease,
        &FsLoader,
        &AnyModel,
    );
    match refused {
        Err(RunError::AlreadyFinished { run_id, status }) => {
            assert_eq!((run_id.as_str(), status), ("run-1", RunStatus::Success));
        }
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("a finished run was prepared for resuming"),
    }
    assert_eq!(fixture.events().len(), events_before, "nothing was written");
}

/// Issue 28 item 4: an event that cannot be appended (a full disk) stops the run as an
/// engine error, `canceled` and resumable, at the stage that was running; resumed once
/// the disk has room, the run runs that stage again and finishes.
#[tokio::test]
async fn an_event_append_that_fails_stops_the_run_as_an_engine_error() {
    let fixture = Fixture::new();
    let run_id = RunId::from("run-1");
    // WorkflowRunStarted, then start's stage events; the disk fills up during `plan`.
    fixture.runs.fail_event_appends_after(&run_id, Some(7));
    let report = fixture
        .run(fixture.options(THREE), CancellationToken::new())
        .await;
    assert_eq!(report.status, RunStatus::Canceled, "{:?}", report.end);
    match &report.end {
        RunEnd::Canceled {
            reason,
            cause,
            node_id,
        } => {
            assert_eq!(*cause, crate::traversal::StopCause::EngineError);
            assert!(
                reason.starts_with("engine error: cannot append to the event log: ")
                    && reason.contains("No space left on device"),
                "{reason}"
            );
            assert_eq!(node_id.as_deref(), Some("plan"));
        }
        other => panic!("the run stops canceled, not {other:?}"),
    }
    let stored = fixture.events();
    assert_eq!(stored.len(), 7, "nothing after the failure is appended");
    assert_eq!(started_stages(&stored, 1), ["start", "plan"]);
    let checkpoint = fixture.checkpoint();
    assert_eq!(checkpoint.run_status, RunStatus::Canceled);
    assert_eq!(checkpoint.next_node_id.as_deref(), Some("plan"));
    assert_eq!(checkpoint.completed_nodes, ["start"]);

    fixture.runs.fail_event_appends_after(&run_id, None);
    let lease = fixture.stores.runs.lock(&run_id).expect("locks");
    let prepared = prepare_resume_with(
        fixture.options(THREE),
        fixture.stores.clone(),
        checkpoint,
        lease,
        &FsLoader,
        &AnyModel,
    )
    .expect("prepares the resume");
    let report = prepared
        .execute(CancellationToken::new(), Vec::new())
        .await
        .expect("executes");
    assert_eq!(report.status, RunStatus::Success);
    let events = fixture.events();
    assert_eq!(started_stages(&events, 8), ["plan", "build", "exit"]);
    let ids: Vec<u64> = events.iter().map(|event| event.id).collect();
    assert_eq!(ids, (1..=events.len() as u64).collect::<Vec<_>>());
}
