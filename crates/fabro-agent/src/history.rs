//! The conversation of a session as entries (SPEC 6.8 counts user, assistant and
//! tool-result entries), flattened to [`Message`]s for each request.

use fabro_llm::Message;

/// One entry of the history.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Entry {
    /// A user, assistant or summary message.
    Message(Message),
    /// The results of one assistant turn's tool calls, in call order.
    ToolResults(Vec<Message>),
}

impl Entry {
    /// Characters counted for the size estimate: text plus tool-call names and arguments.
    pub(crate) fn characters(&self) -> usize {
        let message_characters = |message: &Message| {
            message.text.chars().count()
                + message
                    .tool_calls
                    .iter()
                    .map(|call| {
                        call.name.chars().count() + call.arguments.to_string().chars().count()
                    })
                    .sum::<usize>()
        };
        match self {
            Entry::Message(message) => message_characters(message),
            Entry::ToolResults(results) => results.iter().map(message_characters).sum(),
        }
    }
}

/// The messages of `entries`, in order.
pub(crate) fn flatten(entries: &[Entry]) -> Vec<Message> {
    let mut messages = Vec::new();
    for entry in entries {
        match entry {
            Entry::Message(message) => messages.push(message.clone()),
            Entry::ToolResults(results) => messages.extend(results.iter().cloned()),
        }
    }
    messages
}
