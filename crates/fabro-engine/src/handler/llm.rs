//! Agent and prompt nodes (SPEC 5.2, 5.3): assemble the prompt, make the LLM call
//! through the resolved [`LlmClient`](fabro_llm::LlmClient), write `prompt.md` and
//! `response.md`, and read routing directives from the response (SPEC 7.2).
//!
//! The coding-agent loop with tools arrives with issue 6; until then an agent node makes
//! the same single call as a prompt node.

use fabro_language::StageStatus;
use fabro_llm::{LlmClient, LlmErrorKind, Message, Request};

use super::StageInput;
use crate::context::is_reserved_key;
use crate::event::Event;
use crate::failure::FailureClass;
use crate::outcome::Outcome;
use crate::routing;

pub(super) async fn execute(input: &StageInput<'_>) -> Outcome {
    let node = input.node;
    let services = input.services;
    let task = if node.llm.prompt.is_empty() {
        node.label()
    } else {
        node.llm.prompt.as_str()
    };
    let task = services.variables.expand(task);
    let prompt = if input.preamble.is_empty() {
        task.into_owned()
    } else {
        format!("{}\n\n{task}", input.preamble)
    };
    if let Err(error) = fs_err::write(input.stage_dir.join("prompt.md"), &prompt) {
        return Outcome::fail(
            format!("engine error: {error}"),
            FailureClass::Deterministic,
        );
    }
    let target = services.llm.target_for(node);
    let mut outcome = if services.dry_run {
        respond(input, &fabro_llm::simulated::unscripted_text(&node.id))
    } else {
        let request = Request {
            model: target.model.clone(),
            system: None,
            messages: vec![Message::user(prompt)],
            max_tokens: node.llm.max_tokens,
            tools: Vec::new(),
            node_id: node.id.clone(),
            ..Request::default()
        };
        let client = target.stage_client(services.emitter.clone(), &node.id);
        let call = client.complete(&request);
        let response = tokio::select! {
            response = call => response,
            () = services.cancel.cancelled() => {
                return Outcome::fail("canceled", FailureClass::Canceled);
            }
        };
        match response {
            Ok(response) => {
                let mut outcome = respond(input, &response.text);
                outcome.usage = Some(response.usage);
                outcome
            }
            Err(error) => Outcome::fail(error.to_string(), failure_class(error.kind)),
        }
    };
    outcome.model = Some(target.model.clone());
    outcome.provider = Some(target.provider.as_str().to_owned());
    outcome
}

/// The outcome of a response: routing directive applied, response keys set (SPEC 6.2).
fn respond(input: &StageInput<'_>, text: &str) -> Outcome {
    let node_id = &input.node.id;
    if let Err(error) = fs_err::write(input.stage_dir.join("response.md"), text) {
        return Outcome::fail(
            format!("engine error: {error}"),
            FailureClass::Deterministic,
        );
    }
    let mut outcome = Outcome::success();
    if let Some(directive) = routing::extract(text) {
        if let Some(reported) = directive
            .outcome
            .as_deref()
            .filter(|value| !value.is_empty())
        {
            match StageStatus::parse(reported) {
                Some(StageStatus::Fail) => {
                    outcome = Outcome::fail(
                        directive
                            .failure_reason
                            .clone()
                            .unwrap_or_else(|| "agent reported failure".to_owned()),
                        FailureClass::Deterministic,
                    );
                }
                Some(StageStatus::Retry) => {
                    outcome = Outcome::retry(
                        directive
                            .failure_reason
                            .clone()
                            .unwrap_or_else(|| "agent asked for a retry".to_owned()),
                    );
                }
                Some(status) => outcome.status = status,
                None => {
                    outcome.custom_outcome = Some(reported.to_owned());
                    input.services.emitter.emit(Event::warning(
                        Some(node_id),
                        "custom_outcome",
                        &format!("node {node_id} reported custom outcome '{reported}'"),
                    ));
                }
            }
        }
        outcome.preferred_label = directive.preferred_label;
        outcome.suggested_next_ids = directive.suggested_next_ids;
        for (key, value) in directive.context_updates {
            if is_reserved_key(&key) {
                input.services.emitter.emit(Event::warning(
                    Some(node_id),
                    "reserved_context_key",
                    &format!("node {node_id} tried to set reserved context key '{key}'; ignored"),
                ));
            } else {
                outcome.context_updates.insert(key, value);
            }
        }
        if directive.notes.is_some() {
            outcome.notes = directive.notes;
        }
    }
    let last_response: String = text.chars().take(200).collect();
    outcome
        .context_updates
        .insert("last_stage".to_owned(), serde_json::json!(node_id));
    outcome
        .context_updates
        .insert("last_response".to_owned(), serde_json::json!(last_response));
    outcome
        .context_updates
        .insert(format!("response.{node_id}"), serde_json::json!(text));
    outcome
}

/// The failure class of an LLM error kind (SPEC 10.3).
pub(crate) fn failure_class(kind: LlmErrorKind) -> FailureClass {
    match kind {
        LlmErrorKind::RateLimit
        | LlmErrorKind::Server
        | LlmErrorKind::Timeout
        | LlmErrorKind::Network
        | LlmErrorKind::Stream => FailureClass::TransientInfra,
        LlmErrorKind::Quota | LlmErrorKind::ContextLength => FailureClass::BudgetExhausted,
        LlmErrorKind::Auth
        | LlmErrorKind::InvalidRequest
        | LlmErrorKind::NotFound
        | LlmErrorKind::ContentFilter
        | LlmErrorKind::Configuration => FailureClass::Deterministic,
        LlmErrorKind::Aborted => FailureClass::Canceled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_classes_agree_with_the_llm_layer() {
        for kind in [
            LlmErrorKind::RateLimit,
            LlmErrorKind::Server,
            LlmErrorKind::Timeout,
            LlmErrorKind::Network,
            LlmErrorKind::Stream,
            LlmErrorKind::Quota,
            LlmErrorKind::Auth,
            LlmErrorKind::InvalidRequest,
            LlmErrorKind::NotFound,
            LlmErrorKind::ContextLength,
            LlmErrorKind::ContentFilter,
            LlmErrorKind::Configuration,
            LlmErrorKind::Aborted,
        ] {
            assert_eq!(
                failure_class(kind).as_str(),
                kind.failure_class(),
                "{kind:?}"
            );
        }
    }
}
