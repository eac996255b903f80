//! The steering queue: refusals, delivery once with the records, other processes'
//! messages through the run directory, and messages that survive a crash.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::event::{read_events, Emitter};
use crate::run_index::RunLock;

struct Run {
    dir: tempfile::TempDir,
    emitter: Arc<Emitter>,
}

impl Run {
    fn new() -> Run {
        let dir = tempfile::tempdir().unwrap();
        let emitter =
            Arc::new(Emitter::open("r1", &dir.path().join("events.jsonl"), 1, Vec::new()).unwrap());
        Run { dir, emitter }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn queue(&self) -> SteeringQueue {
        let queue = SteeringQueue::new("r1", self.path());
        queue.attach(&self.emitter);
        queue
    }

    /// `(event, node_id, properties)` of every event.
    fn events(&self) -> Vec<(String, Option<String>, serde_json::Value)> {
        let text = fs_err::read_to_string(self.path().join("events.jsonl")).unwrap_or_default();
        read_events(&text)
            .into_iter()
            .map(|envelope| {
                (
                    envelope.kind.name().to_owned(),
                    envelope.node_id.as_ref().map(|id| id.as_str().to_owned()),
                    serde_json::Value::Object(envelope.properties()),
                )
            })
            .collect()
    }
}

#[test]
fn messages_need_a_steerable_stage_unless_they_wait_for_the_next() {
    let run = Run::new();
    let queue = run.queue();
    let refused = queue.send("hi", SteeringSource::Api, WhenNoAgent::Refuse);
    assert_eq!(
        refused.unwrap_err().to_string(),
        "no agent stage is running in run r1"
    );
    assert!(matches!(
        queue.send("  ", SteeringSource::Api, WhenNoAgent::WaitForNext),
        Err(SteerError::Empty)
    ));
    let stage = queue.begin("review", "cli", run.path());
    let refused = queue
        .send("hi", SteeringSource::Cli, WhenNoAgent::Refuse)
        .unwrap_err();
    assert!(refused.is_conflict());
    assert_eq!(
        refused.to_string(),
        "agent stage review of run r1 runs the cli backend, which cannot be steered"
    );
    let later = queue
        .send(
            "for the next one",
            SteeringSource::Cli,
            WhenNoAgent::WaitForNext,
        )
        .unwrap();
    assert_eq!(later.node_id, None);
    drop(stage);
    assert!(run
        .events()
        .iter()
        .all(|(name, node, _)| name == "SteeringQueued" && node.is_none()));
}

#[test]
fn queued_messages_are_delivered_once_together_and_recorded_in_the_prompt() {
    let run = Run::new();
    let queue = run.queue();
    let stage_dir = run.path().join("stages/002-implement@1");
    fs_err::create_dir_all(&stage_dir).unwrap();
    fs_err::write(stage_dir.join("prompt.md"), "Implement it").unwrap();
    let stage = queue.begin("implement", "api", &stage_dir);
    let active = fs_err::read_to_string(run.path().join("steering/active.json")).unwrap();
    assert!(
        active.contains("\"implement\"") && active.contains("\"api\""),
        "{active}"
    );
    let sent = queue
        .send("use the v2 API", SteeringSource::Cli, WhenNoAgent::Refuse)
        .unwrap();
    assert_eq!(sent.node_id.as_deref(), Some("implement"));
    queue
        .send("keep the tests", SteeringSource::Ui, WhenNoAgent::Refuse)
        .unwrap();
    let inbox = stage.inbox();
    let taken = inbox.take();
    assert_eq!(taken.len(), 2);
    assert_eq!(taken[0].render(), "[Steering from cli] use the v2 API");
    assert!(inbox.take().is_empty(), "delivered once");
    assert_eq!(
        fs_err::read_to_string(stage_dir.join("prompt.md")).unwrap(),
        "Implement it\n\n[Steering from cli] use the v2 API\n\n[Steering from ui] keep the tests\n"
    );
    let events = run.events();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].0, "SteeringQueued");
    assert_eq!(events[0].1.as_deref(), Some("implement"));
    assert_eq!(
        events[0].2,
        serde_json::json!({"source": "cli", "text": "use the v2 API"})
    );
    // The stage ended: its inbox (kept by a thread's session) takes nothing more.
    drop(stage);
    assert!(!run.path().join("steering/active.json").exists());
    queue
        .send("later", SteeringSource::Api, WhenNoAgent::WaitForNext)
        .unwrap();
    assert!(inbox.take().is_empty());
    let next = queue.begin("review", "acp", &stage_dir);
    assert_eq!(next.inbox().take().len(), 1);
}

/// [`steer_elsewhere`] to run `r1` of a store that keeps no steering, whose directory
/// is `run_dir`.
fn steer_dir(
    run_dir: &Path,
    text: &str,
    source: SteeringSource,
    when: WhenNoAgent,
    patience: Duration,
) -> Result<Steered, SteerError> {
    let runs: Arc<dyn RunStore> = Arc::new(crate::store::MemoryRunStore::new());
    steer_elsewhere(
        &runs,
        &RunId::from("r1"),
        run_dir,
        text,
        source,
        when,
        patience,
    )
}

#[test]
fn other_processes_post_through_the_run_directory() {
    let run = Run::new();
    let queue = run.queue();
    // Without the run's lock the run does not run.
    let refused = steer_dir(
        run.path(),
        "hi",
        SteeringSource::Cli,
        WhenNoAgent::WaitForNext,
        Duration::from_millis(100),
    );
    assert_eq!(refused.unwrap_err().to_string(), "run r1 is not running");
    let _lock = RunLock::acquire(run.path()).unwrap();
    let refused = steer_dir(
        run.path(),
        "hi",
        SteeringSource::Cli,
        WhenNoAgent::Refuse,
        Duration::from_millis(100),
    );
    assert!(matches!(refused, Err(SteerError::NoAgentStage { .. })));
    let stage = queue.begin("implement", "api", run.path());
    // Nobody accepts within the patience: the message is withdrawn.
    let refused = steer_dir(
        run.path(),
        "too late",
        SteeringSource::Cli,
        WhenNoAgent::Refuse,
        Duration::from_millis(50),
    );
    assert!(
        matches!(refused, Err(SteerError::NotTaken { .. })),
        "{refused:?}"
    );
    // The run's watcher accepts it.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let stop = CancellationToken::new();
    let watcher = runtime.spawn(queue.watch(stop.clone()));
    let steered = steer_dir(
        run.path(),
        "use the v2 API",
        SteeringSource::Cli,
        WhenNoAgent::Refuse,
        Duration::from_secs(10),
    )
    .unwrap();
    assert_eq!(steered.node_id.as_deref(), Some("implement"));
    stop.cancel();
    runtime.block_on(watcher).unwrap();
    let taken = stage.inbox().take();
    assert_eq!(taken.len(), 1, "the withdrawn message never arrives");
    assert_eq!(taken[0].text, "use the v2 API");
    let events = run.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].1.as_deref(), Some("implement"));
}

#[test]
fn accepted_messages_survive_a_crash_and_are_never_delivered_twice() {
    let run = Run::new();
    let queue = run.queue();
    queue
        .send("first", SteeringSource::Api, WhenNoAgent::WaitForNext)
        .unwrap();
    let stage = queue.begin("implement", "api", run.path());
    assert_eq!(stage.inbox().take().len(), 1);
    queue
        .send("second", SteeringSource::Api, WhenNoAgent::WaitForNext)
        .unwrap();
    // The process dies with `second` accepted but not delivered; a resumed run's queue
    // delivers it, and `first` not again.
    std::mem::forget(stage);
    drop(queue);
    let resumed = Run {
        dir: run.dir,
        emitter: Arc::clone(&run.emitter),
    };
    let queue = resumed.queue();
    assert!(
        !resumed.path().join("steering/active.json").exists(),
        "a crashed run's stages are not running"
    );
    let stage = queue.begin("implement", "api", resumed.path());
    let taken = stage.inbox().take();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].text, "second");
    assert!(stage.inbox().take().is_empty());
}

#[test]
fn a_run_not_yet_executing_takes_messages_for_its_next_agent_stage_when_it_starts() {
    let run = Run::new();
    let queue = SteeringQueue::new("r1", run.path());
    assert!(matches!(
        queue.send("now", SteeringSource::Api, WhenNoAgent::Refuse),
        Err(SteerError::NoAgentStage { .. })
    ));
    queue
        .send(
            "when you start",
            SteeringSource::Api,
            WhenNoAgent::WaitForNext,
        )
        .unwrap();
    assert!(run.events().is_empty());
    queue.attach(&run.emitter);
    let events = run.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].2["text"], "when you start");
    let stage = queue.begin("implement", "api", run.path());
    assert_eq!(stage.inbox().take()[0].text, "when you start");
}
