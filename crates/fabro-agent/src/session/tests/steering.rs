//! Steering (SPEC 20.1) in the api loop: delivered before the first call and between
//! rounds of tool calls, never while a tool runs; several messages in one delivery.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::steering::{Steering, SteeringInbox, SteeringMessage, SteeringSource};

use super::*;

/// An inbox that notes, at every take, whether a tool was running.
#[derive(Default)]
struct Inbox {
    queued: Mutex<Vec<SteeringMessage>>,
    tool_running: AtomicBool,
    late_message_sent: AtomicBool,
    takes_during_tools: Mutex<usize>,
    takes: Mutex<usize>,
}

impl Inbox {
    fn push(&self, source: SteeringSource, text: &str) {
        self.queued.lock().unwrap().push(SteeringMessage {
            source,
            text: text.to_owned(),
        });
    }
}

impl SteeringInbox for Inbox {
    fn take(&self) -> Vec<SteeringMessage> {
        *self.takes.lock().unwrap() += 1;
        if self.tool_running.load(Ordering::SeqCst) {
            *self.takes_during_tools.lock().unwrap() += 1;
        }
        std::mem::take(&mut *self.queued.lock().unwrap())
    }
}

/// A session whose events go to the fixture, after `react` saw them (with the inbox).
fn steered_session(
    fixture: &Fixture,
    config: AgentConfig,
    client: Arc<FakeClient>,
    inbox: &Arc<Inbox>,
    react: impl Fn(&AgentEvent, &Inbox) + Send + Sync + 'static,
) -> AgentSession {
    let events = Arc::clone(&fixture.events);
    let watched = Arc::clone(inbox);
    let sink = Arc::new(move |event: AgentEvent| {
        react(&event, &watched);
        events.lock().unwrap().push(event);
    });
    let tools = ToolRegistry::for_profile(ToolProfile::for_provider(config.provider));
    let mut session =
        AgentSession::new(config, client, tools, Arc::clone(&sink) as Arc<_>).unwrap();
    session.set_steering(Steering::new(
        Arc::clone(inbox) as Arc<dyn SteeringInbox>,
        sink,
    ));
    session
}

/// Two messages arrive as soon as a tool call starts (as `fabro steer` during a slow
/// tool would); the inbox notes whether a tool runs.
fn during_tools(event: &AgentEvent, inbox: &Inbox) {
    match event {
        AgentEvent::ToolCallStarted { .. } => {
            inbox.tool_running.store(true, Ordering::SeqCst);
            inbox.push(SteeringSource::Cli, "use the v2 API");
            inbox.push(SteeringSource::Api, "keep the tests green");
        }
        AgentEvent::ToolCallCompleted { .. } => {
            inbox.tool_running.store(false, Ordering::SeqCst);
        }
        _ => {}
    }
}

/// A message arrives while the model writes its first answer.
fn after_first_answer(event: &AgentEvent, inbox: &Inbox) {
    if matches!(event, AgentEvent::AssistantMessage { .. })
        && !inbox.late_message_sent.swap(true, Ordering::SeqCst)
    {
        inbox.push(SteeringSource::Cli, "one more thing");
    }
}

#[tokio::test]
async fn steering_is_delivered_after_the_round_of_tool_calls_never_during_one() {
    let fixture = Fixture::new();
    let client = FakeClient::new(vec![
        calls(&[("c1", "shell", json!({"command": "sleep 0.3; echo slept"}))]),
        text("Switched to the v2 API."),
    ]);
    let inbox = Arc::new(Inbox::default());
    let mut session = steered_session(
        &fixture,
        fixture.config(),
        Arc::clone(&client),
        &inbox,
        during_tools,
    );
    let outcome = session.run("go", &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome.failure, None);
    assert_eq!(outcome.text, "Switched to the v2 API.");
    assert_eq!(
        fixture.event_names(),
        [
            "Agent.AssistantMessage",
            "Agent.ToolCallStarted",
            "Agent.ToolCallCompleted",
            "Agent.SteeringDelivered",
            "Agent.AssistantMessage",
        ]
    );
    assert!(fixture
        .events
        .lock()
        .unwrap()
        .contains(&AgentEvent::SteeringDelivered { count: 2 }));
    assert_eq!(*inbox.takes_during_tools.lock().unwrap(), 0);
    assert!(
        *inbox.takes.lock().unwrap() >= 3,
        "before each call and at the end"
    );
    let requests = client.requests();
    assert_eq!(requests.len(), 2);
    // The first call had nothing to deliver; the second has the tool's result, then
    // both messages as one user message, once.
    assert_eq!(requests[0].messages.len(), 1);
    let second = &requests[1].messages;
    assert_eq!(second.len(), 4);
    assert_eq!(second[2].role, Role::Tool);
    assert!(second[2].text.contains("slept"), "{}", second[2].text);
    assert_eq!(second[3].role, Role::User);
    assert_eq!(
        second[3].text,
        "[Steering from cli] use the v2 API\n\n[Steering from api] keep the tests green"
    );
    let steering_messages = second
        .iter()
        .filter(|message| message.text.contains("[Steering from"))
        .count();
    assert_eq!(steering_messages, 1);
}

#[tokio::test]
async fn steering_comes_before_the_first_call_and_reopens_a_finished_loop() {
    let fixture = Fixture::new();
    let client = FakeClient::new(vec![text("first"), text("second")]);
    let inbox = Arc::new(Inbox::default());
    inbox.push(SteeringSource::Ui, "be brief");
    let mut session = steered_session(
        &fixture,
        fixture.config(),
        Arc::clone(&client),
        &inbox,
        after_first_answer,
    );
    let outcome = session.run("go", &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome.failure, None);
    assert_eq!(outcome.text, "second");
    assert_eq!(outcome.turns, 2);
    let requests = client.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].messages[0].text, "go");
    assert_eq!(requests[0].messages[1].text, "[Steering from ui] be brief");
    assert_eq!(
        requests[1].messages.last().unwrap().text,
        "[Steering from cli] one more thing"
    );

    // With the turn limit reached, a late message waits in the queue.
    let fixture = Fixture::new();
    let client = FakeClient::new(vec![text("only")]);
    let mut config = fixture.config();
    config.max_turns = 1;
    let inbox = Arc::new(Inbox::default());
    let mut session = steered_session(
        &fixture,
        config,
        Arc::clone(&client),
        &inbox,
        after_first_answer,
    );
    let outcome = session.run("go", &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome.failure, None);
    assert_eq!(outcome.text, "only");
    assert_eq!(client.requests().len(), 1);
    assert_eq!(
        inbox.queued.lock().unwrap().len(),
        1,
        "left for the next call"
    );
}
