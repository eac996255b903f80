//! Agent and prompt nodes (SPEC 5.2, 5.3): assemble the prompt, hold the conversation
//! (a prompt message list, an agent session or an external agent process), capture
//! the response, read routing directives (SPEC 7.2, with the agent's file fallbacks),
//! validate `output_schema` with repair turns (SPEC 7.3, 7.4), and set the context keys
//! of SPEC 6.2.
//!
//! The backends live in `prompt.rs` (one call without tools) and `agent.rs` (api, cli
//! and acp agents); this module drives them through [`Conversation`].

use std::path::Path;
use std::time::SystemTime;

use fabro_language::model::{Backend, OutputSchema};
use fabro_language::{HandlerKind, StageStatus};
use fabro_llm::Usage;

use super::reply::Reply;
use super::{agent, prompt, StageInput};
use crate::context::is_reserved_key;
use crate::event::kind::StageOutputRepair;
use crate::event::Event;
use crate::failure::FailureClass;
use crate::llm_target::LlmTarget;
use crate::outcome::Outcome;
use crate::output_schema::{self, RoutingCheck};
use crate::routing::{self, Directive};

/// The conversation of one stage.
pub(super) enum Conversation {
    /// `--dry-run`: the simulated text, no provider.
    DryRun,
    /// A prompt node's message list.
    Prompt(prompt::PromptConversation),
    /// An agent of any backend.
    Agent(Box<agent::AgentConversation>),
}

impl Conversation {
    async fn send(&mut self, input: &StageInput<'_>, text: &str) -> Reply {
        match self {
            Conversation::DryRun => Reply {
                text: fabro_llm::simulated::unscripted_text(&input.node.id),
                ..Reply::default()
            },
            Conversation::Prompt(conversation) => conversation.send(input, text).await,
            Conversation::Agent(conversation) => conversation.send(input, text).await,
        }
    }

    /// A repair turn after `rejected` failed validation (SPEC 7.4).
    async fn repair(&mut self, input: &StageInput<'_>, rejected: &str, message: &str) -> Reply {
        match self {
            Conversation::DryRun => self.send(input, message).await,
            Conversation::Prompt(conversation) => conversation.send(input, message).await,
            Conversation::Agent(conversation) => {
                conversation.repair(input, rejected, message).await
            }
        }
    }

    fn finish(self, input: &StageInput<'_>) {
        if let Conversation::Prompt(conversation) = self {
            conversation.finish(input);
        }
    }
}

/// Runs one attempt of an agent or prompt node.
pub(super) async fn execute(input: &StageInput<'_>) -> Outcome {
    let node = input.node;
    let services = input.services;
    // SPEC 13.1: redacted before it is written and before any provider sees it.
    let mut prompt = assemble(input);
    fabro_llm::redact::redactor().redact_string(&mut prompt);
    if let Err(error) = fs_err::write(input.stage_dir.join("prompt.md"), &prompt) {
        // fabro's own storage failed: the run stops, resumable (issue 14 item 6).
        return Outcome::engine_error(error);
    }
    execute_with(input, services.llm.target_for(node), &prompt).await
}

/// [`execute`] against `target` once `prompt.md` is written.
async fn execute_with(input: &StageInput<'_>, target: LlmTarget, prompt: &str) -> Outcome {
    let node = input.node;
    let services = input.services;
    let thread = input
        .context
        .get_str("internal.thread_id")
        .map(str::to_owned);
    services.threads.set_last(thread.clone());
    let conversation = if services.dry_run {
        Conversation::DryRun
    } else if node.handler == HandlerKind::Prompt {
        Conversation::Prompt(prompt::PromptConversation::new(input, &target, thread))
    } else {
        match agent::AgentConversation::new(input, &target, thread.as_deref()).await {
            Ok(conversation) => Conversation::Agent(Box::new(conversation)),
            Err(failure) => {
                let outcome = Outcome::fail(failure.reason, failure.class);
                let backend = agent::external_backend(node, &target);
                return record_identity(outcome, node, &target, backend);
            }
        }
    };
    let external = match &conversation {
        Conversation::Agent(agent) => agent.backend(),
        Conversation::DryRun | Conversation::Prompt(_) => None,
    };
    let mut conversation = conversation;
    // Registered until the stage's conversation ends (SPEC 20.1).
    let _steering = match &mut conversation {
        Conversation::Agent(agent) => Some(agent.steer(input).await),
        Conversation::DryRun | Conversation::Prompt(_) => None,
    };
    let outcome = match node.timeout() {
        // An external-agent node that runs fabro's own loop (a `cli` node with the
        // simulated provider) gets the node timeout the traversal leaves to it.
        Some(limit) if external == Some(Backend::Api) && super::handles_own_timeout(node) => {
            tokio::time::timeout(limit, converse(input, conversation, prompt))
                .await
                .unwrap_or_else(|_| {
                    Outcome::fail(
                        format!(
                            "stage timed out after {}",
                            fabro_language::value::format_duration(limit)
                        ),
                        FailureClass::TransientInfra,
                    )
                })
        }
        _ => converse(input, conversation, prompt).await,
    };
    record_identity(outcome, node, &target, external)
}

/// Sets the model and provider a stage records: `target`'s, or for an external agent
/// (`backend`) what the program reported in `outcome.model` (decision 69).
fn record_identity(
    mut outcome: Outcome,
    node: &fabro_language::Node,
    target: &LlmTarget,
    backend: Option<Backend>,
) -> Outcome {
    let reported = outcome.model.take();
    // Decision 69: an external agent's stage records what the program reported; a cli
    // program is its provider's and runs the model fabro passed it.
    let (model, provider) = match backend {
        Some(Backend::Acp) => agent::acp_identity(node, reported.as_deref()),
        Some(Backend::Cli) => (
            reported.or_else(|| Some(target.model.clone())),
            Some(target.name.clone()),
        ),
        Some(Backend::Api) | None => (Some(target.model.clone()), Some(target.name.clone())),
    };
    outcome.model = model;
    outcome.provider = provider;
    outcome
}

/// The user message: preamble, a blank line, the expanded prompt (or label) (SPEC 5.2).
pub(super) fn assemble(input: &StageInput<'_>) -> String {
    let node = input.node;
    let task = if node.llm.prompt.is_empty() {
        node.label()
    } else {
        &*node.llm.prompt
    };
    let task = input.services.variables.expand(task);
    if input.preamble.is_empty() {
        task.into_owned()
    } else {
        format!("{}\n\n{task}", input.preamble.trim_end())
    }
}

/// Accumulates the turns of a stage.
#[derive(Default)]
struct Totals {
    usage: Option<Usage>,
    model: Option<String>,
    files_touched: Vec<String>,
    last_touched: Option<String>,
}

impl Totals {
    fn add(&mut self, reply: &Reply) {
        if let Some(usage) = &reply.usage {
            self.usage.get_or_insert_with(Usage::default).add(usage);
        }
        if reply.model.is_some() {
            self.model.clone_from(&reply.model);
        }
        for file in &reply.files_touched {
            if !self.files_touched.contains(file) {
                self.files_touched.push(file.clone());
            }
        }
        if reply.last_touched.is_some() {
            self.last_touched.clone_from(&reply.last_touched);
        }
    }

    fn apply(&self, mut outcome: Outcome) -> Outcome {
        outcome.usage = self.usage;
        outcome.model.clone_from(&self.model);
        outcome.files_touched.clone_from(&self.files_touched);
        outcome
    }
}

async fn converse(input: &StageInput<'_>, mut conversation: Conversation, prompt: &str) -> Outcome {
    let node = input.node;
    let is_agent = node.handler == HandlerKind::Agent;
    let status_file = input.work_dir.join("status.json");
    let status_before = file_stamp(&status_file);
    let mut totals = Totals::default();
    let mut reply = conversation.send(input, prompt).await;
    totals.add(&reply);
    let schema = if input.services.dry_run {
        None
    } else {
        node.llm.output_schema()
    };
    let max_repairs = node.llm.output_retries;
    let mut repairs = 0;
    let outcome = loop {
        if let Some(failure) = reply.failure.take() {
            if let Err(error) = write_response(input, &reply.text) {
                break totals.apply(Outcome::engine_error(error));
            }
            break totals.apply(Outcome::fail(failure.reason, failure.class));
        }
        // What this turn yields: a finished outcome, or validation errors to repair.
        let checked: Result<Outcome, Vec<String>> = match schema {
            Some(OutputSchema::Json(schema)) => output_schema::check_custom(&reply.text, schema)
                .map(|value| Outcome::success().with_update(format!("output.{}", node.id), value)),
            Some(OutputSchema::Routing) => {
                let mut check = output_schema::check_routing(&reply.text);
                let mut from_status_file = false;
                if check == RoutingCheck::Absent && is_agent {
                    if let Some(text) = changed_file(&status_file, status_before) {
                        check = output_schema::check_routing(&text);
                        from_status_file = true;
                    }
                }
                if check == RoutingCheck::Absent && is_agent {
                    if let Some(text) = last_touched_text(input.work_dir, &totals) {
                        check = output_schema::check_routing(&text);
                        from_status_file = false;
                    }
                }
                match check {
                    RoutingCheck::Valid(directive) => {
                        Ok(apply_directive(input, &directive, from_status_file))
                    }
                    RoutingCheck::Invalid(errors) => Err(errors),
                    RoutingCheck::Absent => Ok(Outcome::success()),
                }
            }
            None => {
                let (directive, from_status_file) =
                    if let Some(directive) = routing::extract(&reply.text) {
                        (Some(directive), false)
                    } else if is_agent {
                        match changed_file(&status_file, status_before)
                            .and_then(|text| routing::extract(&text))
                        {
                            Some(directive) => (Some(directive), true),
                            None => (
                                last_touched_text(input.work_dir, &totals)
                                    .and_then(|text| routing::extract(&text)),
                                false,
                            ),
                        }
                    } else {
                        (None, false)
                    };
                Ok(directive.map_or_else(Outcome::success, |directive| {
                    apply_directive(input, &directive, from_status_file)
                }))
            }
        };
        match checked {
            Ok(outcome) => {
                if let Err(error) = write_response(input, &reply.text) {
                    break totals.apply(Outcome::engine_error(error));
                }
                break totals.apply(with_response_keys(outcome, &node.id, &reply.text));
            }
            Err(errors) => {
                if repairs >= max_repairs {
                    if let Err(error) = write_response(input, &reply.text) {
                        break totals.apply(Outcome::engine_error(error));
                    }
                    let failed = Outcome::fail(
                        output_schema::exhausted_reason(max_repairs),
                        FailureClass::Deterministic,
                    );
                    break totals.apply(with_response_keys(failed, &node.id, &reply.text));
                }
                repairs += 1;
                input.services.emitter.emit(Event::node(
                    &node.id,
                    StageOutputRepair {
                        attempt: repairs,
                        errors: errors.clone(),
                        max: max_repairs,
                    },
                ));
                let message = output_schema::repair_message(&errors);
                let rejected = std::mem::take(&mut reply.text);
                reply = conversation.repair(input, &rejected, &message).await;
                totals.add(&reply);
            }
        }
    };
    conversation.finish(input);
    outcome
}

/// Sets `last_stage`, `last_response` (200 characters) and `response.{node_id}`.
fn with_response_keys(mut outcome: Outcome, node_id: &str, text: &str) -> Outcome {
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

/// Writes `response.md`; a failure is fabro's own storage failing (issue 14 item 6).
fn write_response(input: &StageInput<'_>, text: &str) -> std::io::Result<()> {
    let text = fabro_llm::redact::redactor().redact_str(text);
    fs_err::write(input.stage_dir.join("response.md"), text.as_bytes())
}

/// Modification time and length of a file, when it exists.
fn file_stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let metadata = fs_err::metadata(path).ok()?;
    Some((metadata.modified().ok()?, metadata.len()))
}

/// The text of `path` if it was created or modified since `before` was taken.
fn changed_file(path: &Path, before: Option<(SystemTime, u64)>) -> Option<String> {
    let now = file_stamp(path)?;
    if before == Some(now) {
        return None;
    }
    fs_err::read_to_string(path).ok()
}

/// The text of the file the agent touched last (SPEC 7.2 source 3).
fn last_touched_text(work_dir: &Path, totals: &Totals) -> Option<String> {
    let last = totals.last_touched.as_deref()?;
    fs_err::read_to_string(work_dir.join(last)).ok()
}

/// The outcome a routing directive describes (SPEC 7.2); reserved context keys are
/// dropped with a warning.
fn apply_directive(
    input: &StageInput<'_>,
    directive: &Directive,
    from_status_file: bool,
) -> Outcome {
    let node_id = &input.node.id;
    let mut outcome = Outcome::success();
    if let Some(reported) = directive
        .outcome
        .as_deref()
        .filter(|value| !value.is_empty())
    {
        match StageStatus::parse(reported) {
            Some(StageStatus::Fail) => {
                let class = directive
                    .failure_class
                    .as_deref()
                    .filter(|_| from_status_file)
                    .and_then(FailureClass::parse)
                    .unwrap_or(FailureClass::Deterministic);
                outcome = Outcome::fail(
                    directive
                        .failure_reason
                        .clone()
                        .unwrap_or_else(|| "agent reported failure".to_owned()),
                    class,
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
    outcome
        .preferred_label
        .clone_from(&directive.preferred_label);
    outcome
        .suggested_next_ids
        .clone_from(&directive.suggested_next_ids);
    for (key, value) in &directive.context_updates {
        if is_reserved_key(key) {
            input.services.emitter.emit(Event::warning(
                Some(node_id),
                "reserved_context_key",
                &format!("node {node_id} tried to set reserved context key '{key}'; ignored"),
            ));
        } else {
            outcome.context_updates.insert(key.clone(), value.clone());
        }
    }
    if directive.notes.is_some() {
        outcome.notes.clone_from(&directive.notes);
    }
    outcome
}

#[cfg(test)]
mod tests;
