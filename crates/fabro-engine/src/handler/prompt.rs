//! Prompt nodes (SPEC 5.3): one LLM call without tools per turn. Under `full`
//! fidelity the turns append to the thread's message list, which is stored back in the
//! run's [`ThreadStore`](crate::thread::ThreadStore) when the stage ends; otherwise
//! every stage starts a fresh list. Repair turns append to the same list (SPEC 7.4).

use std::sync::Arc;

use fabro_llm::{LlmClient, Message, Request};

use super::reply::{reasoning_effort, Reply};
use super::StageInput;
use crate::failure::FailureClass;
use crate::llm_target::LlmTarget;

/// The message list of one prompt stage.
pub(super) struct PromptConversation {
    target: LlmTarget,
    messages: Vec<Message>,
    thread: Option<String>,
}

impl PromptConversation {
    /// Continues thread `thread` (its stored messages) or starts a fresh list.
    pub(super) fn new(
        input: &StageInput<'_>,
        target: &LlmTarget,
        thread: Option<String>,
    ) -> PromptConversation {
        let messages = thread
            .as_deref()
            .map(|key| input.services.threads.messages(key))
            .unwrap_or_default();
        PromptConversation {
            target: target.clone(),
            messages,
            thread,
        }
    }

    /// Appends `text` as a user message and makes one call; the answer is appended.
    /// A failed call removes the unanswered user message again.
    pub(super) async fn send(&mut self, input: &StageInput<'_>, text: &str) -> Reply {
        self.messages.push(Message::user(text));
        let request = Request {
            model: self.target.model.clone(),
            system: None,
            messages: self.messages.clone(),
            max_tokens: self.target.limits.max_tokens(input.node.llm.max_tokens()),
            tools: Vec::new(),
            node_id: input.node.id.clone(),
            reasoning_effort: Some(reasoning_effort(input.node)),
            prompt_cache: input.services.prompt_cache(&input.node.id),
            ..Request::default()
        };
        // Retries and failover (SPEC 9.2, 9.4), with their events.
        let client = self.target.budgeted_client(
            Arc::clone(&input.services.emitter),
            &input.services.budget,
            &input.node.id,
        );
        let call = client.complete(&request);
        let response = tokio::select! {
            response = call => response,
            () = input.services.cancel.cancelled() => {
                self.messages.pop();
                return Reply::failed("canceled", FailureClass::Canceled);
            }
        };
        match response {
            Ok(response) => {
                self.messages
                    .push(Message::assistant(response.text.clone()));
                Reply {
                    text: response.text,
                    usage: Some(response.usage),
                    ..Reply::default()
                }
            }
            Err(error) => {
                self.messages.pop();
                Reply::failed(error.to_string(), error.kind.failure_class())
            }
        }
    }

    /// Stores the list back into its thread.
    pub(super) fn finish(self, input: &StageInput<'_>) {
        if let Some(key) = &self.thread {
            input.services.threads.set_messages(key, self.messages);
        }
    }
}
