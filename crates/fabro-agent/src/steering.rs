//! Steering (SPEC 20.1): guidance a person sends to a running agent. The engine queues
//! the messages; an agent takes them through a [`Steering`] handle at the points where a
//! new user turn fits: the api loop before each LLM call (before the first, after a
//! round of tool calls, never while a tool runs, and when the model would end the loop),
//! an acp agent as a new prompt turn after the current one. Every message queued by
//! then is delivered at once, as one user message, and reported as
//! [`AgentEvent::SteeringDelivered`].

use std::sync::Arc;

use crate::event::{AgentEvent, AgentEventSink, NullSink};

/// Who sent a steering message (the `{source}` of `[Steering from {source}]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SteeringSource {
    /// `fabro steer`.
    Cli,
    /// `POST /api/v1/runs/{id}/steer`.
    Api,
    /// The run page of the web UI.
    Ui,
}

impl SteeringSource {
    /// `cli`, `api` or `ui`.
    pub fn as_str(self) -> &'static str {
        match self {
            SteeringSource::Cli => "cli",
            SteeringSource::Api => "api",
            SteeringSource::Ui => "ui",
        }
    }

    /// The source named `name` (`cli`, `api`, `ui`).
    pub fn parse(name: &str) -> Option<SteeringSource> {
        match name {
            "cli" => Some(SteeringSource::Cli),
            "api" => Some(SteeringSource::Api),
            "ui" => Some(SteeringSource::Ui),
            _ => None,
        }
    }
}

impl std::fmt::Display for SteeringSource {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// One queued message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SteeringMessage {
    /// Who sent it.
    pub source: SteeringSource,
    /// What they wrote (redacted by whoever queued it).
    pub text: String,
}

impl SteeringMessage {
    /// `[Steering from {source}] {text}`, as the agent reads it.
    pub fn render(&self) -> String {
        format!("[Steering from {}] {}", self.source, self.text)
    }
}

/// The text of one delivery: each message rendered, separated by blank lines.
pub fn delivery_text(messages: &[SteeringMessage]) -> String {
    messages
        .iter()
        .map(SteeringMessage::render)
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Where an agent takes its steering messages from (the engine's queue for one stage).
pub trait SteeringInbox: Send + Sync {
    /// Removes and returns every message queued so far, oldest first: each message is
    /// returned once, so an agent delivers what it takes.
    fn take(&self) -> Vec<SteeringMessage>;
}

/// An agent's handle on its inbox and on where deliveries are reported; the default
/// has no inbox and delivers nothing.
#[derive(Clone)]
pub struct Steering {
    inbox: Option<Arc<dyn SteeringInbox>>,
    events: Arc<dyn AgentEventSink>,
}

impl Default for Steering {
    fn default() -> Steering {
        Steering {
            inbox: None,
            events: Arc::new(NullSink),
        }
    }
}

impl std::fmt::Debug for Steering {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Steering")
            .field("inbox", &self.inbox.is_some())
            .finish_non_exhaustive()
    }
}

impl Steering {
    /// Messages from `inbox`; each delivery is reported to `events`.
    pub fn new(inbox: Arc<dyn SteeringInbox>, events: Arc<dyn AgentEventSink>) -> Steering {
        Steering {
            inbox: Some(inbox),
            events,
        }
    }

    /// Takes the queued messages as the text of one user message, and reports the
    /// delivery; `None` when nothing is queued.
    pub fn deliver(&self) -> Option<String> {
        let messages = self.inbox.as_ref()?.take();
        if messages.is_empty() {
            return None;
        }
        self.events.emit(AgentEvent::SteeringDelivered {
            count: messages.len(),
        });
        Some(delivery_text(&messages))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Queue(Mutex<Vec<SteeringMessage>>);

    impl SteeringInbox for Queue {
        fn take(&self) -> Vec<SteeringMessage> {
            std::mem::take(&mut *self.0.lock().unwrap())
        }
    }

    #[test]
    fn queued_messages_are_delivered_together_once() {
        let queue = Arc::new(Queue(Mutex::new(vec![
            SteeringMessage {
                source: SteeringSource::Cli,
                text: "use the v2 API".to_owned(),
            },
            SteeringMessage {
                source: SteeringSource::Ui,
                text: "and keep the tests".to_owned(),
            },
        ])));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let events = Arc::clone(&seen);
        let sink = move |event: AgentEvent| events.lock().unwrap().push(event);
        let steering = Steering::new(queue, Arc::new(sink));
        assert_eq!(
            steering.deliver().as_deref(),
            Some("[Steering from cli] use the v2 API\n\n[Steering from ui] and keep the tests")
        );
        assert_eq!(steering.deliver(), None);
        assert_eq!(
            *seen.lock().unwrap(),
            [AgentEvent::SteeringDelivered { count: 2 }]
        );
        assert_eq!(Steering::default().deliver(), None);
        for source in [SteeringSource::Cli, SteeringSource::Api, SteeringSource::Ui] {
            assert_eq!(SteeringSource::parse(source.as_str()), Some(source));
        }
        assert_eq!(SteeringSource::parse("CLI"), None);
    }
}
