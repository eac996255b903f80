//! Context compaction (SPEC 6.8): when the history passes 80 % of the window, older
//! entries are summarised by one call and replaced by a `[Context Summary]` message.

use fabro_llm::{
    replay_response, BoxFuture, LlmClient, LlmError, Message, Provider, Request, Response, Role,
    StreamSink, Usage,
};

use crate::history::Entry;

/// Entries kept verbatim.
pub const PRESERVED_ENTRIES: usize = 6;

/// Context window assumed when neither the caller nor the catalog knows the model.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 200_000;

/// Tool arguments and results are cut to this many characters when rendered.
const RENDER_CUT: usize = 500;

/// Prefix of the summary message.
pub const SUMMARY_PREFIX: &str = "[Context Summary]";

/// Instructions of the summary call.
const SUMMARY_INSTRUCTIONS: &str = "You summarise the earlier part of a coding agent's conversation so that the agent can continue without it. Write a concise structured summary with exactly these markdown sections:\n## Goal\nWhat the user asked for.\n## Progress\nWhat was accomplished, with file paths and key decisions.\n## Key Decisions\nImportant choices and their rationale.\n## Failed Approaches\nWhat was tried and did not work.\n## Open Issues\nRemaining bugs, edge cases or TODOs.\n## Next Steps\nWhat should happen next.";

/// Estimated tokens: characters of system prompt and history ÷ 4.
pub(crate) fn estimate_tokens(system: &str, entries: &[Entry]) -> u64 {
    let characters = system.chars().count() + entries.iter().map(Entry::characters).sum::<usize>();
    u64::try_from(characters / 4).unwrap_or(u64::MAX)
}

/// Whether `estimated` is above 80 % of `window`.
pub(crate) fn over_threshold(estimated: u64, window: u64) -> bool {
    u128::from(estimated) * 10 > u128::from(window) * 8
}

/// Index of the first preserved entry: the last 6 are kept, moved back so the kept
/// part never begins with tool results. `None` when nothing older would remain.
pub(crate) fn split_point(entries: &[Entry]) -> Option<usize> {
    let mut split = entries.len().checked_sub(PRESERVED_ENTRIES)?;
    while split > 0 && matches!(entries.get(split), Some(Entry::ToolResults(_))) {
        split -= 1;
    }
    (split > 0).then_some(split)
}

/// The older entries as text, tool arguments and results cut to 500 characters.
pub(crate) fn render(entries: &[Entry]) -> String {
    let mut out = String::new();
    for entry in entries {
        match entry {
            Entry::Message(message) => {
                let speaker = match message.role {
                    Role::System => "System",
                    Role::User => "User",
                    Role::Assistant => "Assistant",
                    Role::Tool => "Tool",
                };
                out.push_str(&format!("[{speaker}]\n{}\n", message.text));
                for call in &message.tool_calls {
                    out.push_str(&format!(
                        "[Tool call {}] {}\n",
                        call.name,
                        cut(&call.arguments.to_string())
                    ));
                }
            }
            Entry::ToolResults(results) => {
                for result in results {
                    let status = if result.is_error { " (error)" } else { "" };
                    out.push_str(&format!("[Tool result{status}]\n{}\n", cut(&result.text)));
                }
            }
        }
        out.push('\n');
    }
    out
}

/// The non-streaming summary request (same model, no tools).
pub(crate) fn summary_request(model: &str, node_id: &str, rendered: &str) -> Request {
    Request {
        model: model.to_owned(),
        system: Some(SUMMARY_INSTRUCTIONS.to_owned()),
        messages: vec![Message::user(format!(
            "Summarise this conversation:\n\n{rendered}"
        ))],
        max_tokens: None,
        tools: Vec::new(),
        node_id: node_id.to_owned(),
        ..Request::default()
    }
}

/// The message replacing the older entries; the tracker's File Operations section is
/// copied verbatim when there is one. Providers that reject mid-conversation system
/// messages (Anthropic, Gemini) get it as a user message.
pub(crate) fn summary_message(provider: Provider, summary: &str, file_operations: &str) -> Message {
    let mut text = format!("{SUMMARY_PREFIX}\n{}", summary.trim());
    if !file_operations.is_empty() {
        text.push_str("\n\n## File Operations\n");
        text.push_str(file_operations);
    }
    let mut message = Message::user(text);
    if matches!(
        provider,
        Provider::OpenAi | Provider::OpenAiCompatible | Provider::Simulated
    ) {
        message.role = Role::System;
    }
    message
}

/// Answers summary calls for the simulated provider: `[Simulated] summary`, without
/// consuming scripted entries (SPEC 10.1.5), usage ⌈characters ÷ 4⌉ as for every
/// simulated call.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SimulatedSummary;

/// The text of simulated summaries.
pub(crate) const SIMULATED_SUMMARY: &str = "[Simulated] summary";

impl LlmClient for SimulatedSummary {
    fn complete_streaming<'a>(
        &'a self,
        request: &'a Request,
        sink: &'a mut StreamSink<'_>,
    ) -> BoxFuture<'a, Result<Response, LlmError>> {
        Box::pin(async move {
            let characters = u64::try_from(request.characters()).unwrap_or(u64::MAX);
            let output = u64::try_from(SIMULATED_SUMMARY.chars().count()).unwrap_or(0);
            let response = Response {
                text: SIMULATED_SUMMARY.to_owned(),
                tool_calls: Vec::new(),
                usage: Usage {
                    input_tokens: characters.div_ceil(4),
                    output_tokens: output.div_ceil(4),
                    cost_usd: Some(0.0),
                    ..Usage::default()
                },
                model: request.model.clone(),
                thinking: Vec::new(),
            };
            replay_response(&response, sink);
            Ok(response)
        })
    }
}

fn cut(text: &str) -> String {
    match text.char_indices().nth(RENDER_CUT) {
        Some((index, _)) => format!("{}…", &text[..index]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabro_llm::ToolCall;
    use serde_json::json;

    fn assistant_with_call() -> Entry {
        let mut message = Message::assistant("calling");
        message.tool_calls.push(ToolCall {
            id: "c".to_owned(),
            name: "shell".to_owned(),
            arguments: json!({"command": "x".repeat(600)}),
        });
        Entry::Message(message)
    }

    fn results() -> Entry {
        Entry::ToolResults(vec![Message::tool_result("c", "y".repeat(600), false)])
    }

    #[test]
    fn split_keeps_six_and_never_starts_with_tool_results() {
        let user = Entry::Message(Message::user("go"));
        let mut entries = vec![user];
        assert_eq!(split_point(&entries), None);
        for _ in 0..3 {
            entries.push(assistant_with_call());
            entries.push(results());
        }
        // 7 entries: the split at 1 is an assistant turn.
        assert_eq!(split_point(&entries), Some(1));
        entries.push(assistant_with_call());
        // 8 entries: index 2 holds tool results, so the split moves back to 1.
        assert_eq!(split_point(&entries), Some(1));
        let six: Vec<Entry> = entries[..6].to_vec();
        assert_eq!(split_point(&six), None);
    }

    #[test]
    fn rendering_cuts_arguments_and_results() {
        let text = render(&[assistant_with_call(), results()]);
        assert!(text.contains(&format!(
            "[Tool call shell] {{\"command\":\"{}…",
            "x".repeat(488)
        )));
        assert!(text.contains(&format!("[Tool result]\n{}…", "y".repeat(500))));
        assert!(!text.contains(&"y".repeat(501)));
    }

    #[test]
    fn threshold_and_summary_message() {
        assert!(!over_threshold(800, 1000));
        assert!(over_threshold(801, 1000));
        let message = summary_message(Provider::Anthropic, "## Goal\nx", "- modified: a.rs");
        assert_eq!(message.role, Role::User);
        assert_eq!(
            message.text,
            "[Context Summary]\n## Goal\nx\n\n## File Operations\n- modified: a.rs"
        );
        assert_eq!(
            summary_message(Provider::OpenAi, "s", "").role,
            Role::System
        );
        assert_eq!(
            summary_message(Provider::OpenAi, "s", "").text,
            "[Context Summary]\ns"
        );
        let request = summary_request("m", "n", "body");
        assert!(request.tools.is_empty());
        assert!(request.system.unwrap().contains("## Failed Approaches"));
    }
}
