//! The human gate handler (SPEC 5.5): turns the gate's outgoing edges into a
//! [`Question`], asks the run's [`Interviewer`] (first applicable source wins) under the
//! gate's timeout and the run's cancellation, and routes along the chosen edge through
//! `preferred_label` and `suggested_next_ids`.
//!
//! The question model lives in [`crate::interviewer`]; terminal I/O does not exist here
//! (the console interviewer belongs to `fabro-cli`).

use serde_json::json;

use super::StageInput;
use crate::event::kind::{HumanAnswer, HumanOption, HumanQuestion};
use crate::event::Event;
use crate::failure::FailureClass;
use crate::interviewer::{
    automatic_reply, Answer, AnswerSource, Matching, Question, Reply, Unanswered,
};
use crate::outcome::Outcome;

/// SPEC 5.5: a gate with neither an option nor a freeform edge.
const NO_EDGES: &str = "No outgoing edges for human gate";

/// Asks the gate's question and routes along the chosen edge (SPEC 5.5); a dry run
/// answers like `--auto-approve` (SPEC 4.9).
pub(super) async fn execute(input: &StageInput<'_>) -> Outcome {
    let node = input.node;
    let question_id = question_id(input);
    let last_response = input.context.get_str("last_response").unwrap_or_default();
    let Some(question) =
        Question::of_gate(input.workflow, input.node_index, question_id, last_response)
    else {
        return Outcome::fail(NO_EDGES, FailureClass::Deterministic);
    };
    let services = input.services;
    let asked = services.emitter.emit(question_event(&question));
    services.hooks.fire(
        crate::config::HookEvent::HumanQuestion,
        &asked,
        crate::hook::HookPlace {
            work_dir: input.work_dir,
            tmpdir: input.tmpdir,
            log_dir: input.stage_dir,
        },
    );
    // SPEC 4.9: a dry run answers like --auto-approve and reads no other source.
    let reply = if services.dry_run {
        automatic_reply(&question)
    } else {
        ask(input, &question).await
    };
    match reply {
        Reply::Answered(answer, source) => {
            services
                .emitter
                .emit(answer_event(&question, &answer, source));
            outcome(&question, &answer)
        }
        Reply::Declined => unanswered_outcome(&Unanswered::Unavailable, &node.id),
        Reply::Unanswered(unanswered) => unanswered_outcome(&unanswered, &node.id),
    }
}

/// The id of the gate's question: `{node}-{attempt}-{ulid}`, or the id of the same
/// gate's question that is still open in the run store, which a resumed run (a worker
/// that took the run over, SPEC 18.2) asks again, so that an answer filed for it in
/// between is applied.
fn question_id(input: &StageInput<'_>) -> String {
    let prefix = format!("{}-{}-", input.node.id, input.attempt);
    let run_id = crate::id::RunId::from(input.services.run_id.as_str());
    match input.services.runs.pending_question(&run_id) {
        Ok(Some(open)) if open.id().starts_with(&prefix) => open.id().to_owned(),
        _ => format!("{prefix}{}", ulid::Ulid::new()),
    }
}

/// Asks the run's interviewer with the node's `timeout` and cancellation around it.
async fn ask(input: &StageInput<'_>, question: &Question) -> Reply {
    let interview = input.services.interviewer.ask(question);
    let bounded = async {
        match question.timeout() {
            Some(limit) => tokio::time::timeout(limit, interview).await.ok(),
            None => Some(interview.await),
        }
    };
    tokio::select! {
        // An answer at hand (`--answer`, `--auto-approve`) wins over a cancellation that
        // is already requested, as before any interviewer could wait.
        biased;
        result = bounded => match result {
            Some(reply) => reply,
            // SPEC 5.5: on timeout the default choice is used, otherwise the attempt
            // asks for a retry, which re-asks while retries remain.
            None => match question.default_choice() {
                Some(choice) => match question.resolve(choice, Matching::Default) {
                    Ok(answer) => Reply::Answered(answer, AnswerSource::TimeoutDefault),
                    Err(unanswered) => Reply::Unanswered(unanswered),
                },
                None => Reply::Unanswered(Unanswered::TimedOut),
            },
        },
        () = input.services.cancel.cancelled() => Reply::Unanswered(Unanswered::Canceled),
    }
}

/// The successful outcome of `answer` (SPEC 5.5 "Result").
fn outcome(question: &Question, answer: &Answer) -> Outcome {
    let (selected, label, text) = question.gate_values(answer);
    let mut outcome = Outcome::success()
        .with_update("human.gate.selected", json!(selected))
        .with_update("human.gate.label", json!(label))
        .with_update("human.gate.text", json!(text));
    if let Answer::Option(index) = answer {
        if let Some(option) = question.options().get(*index) {
            outcome.preferred_label = Some(option.label().to_owned());
        }
    }
    if let Some(target) = question.target_of(answer) {
        outcome.suggested_next_ids = vec![target.to_owned()];
    }
    outcome
}

/// The failed (or retried) outcome of a gate without a usable answer.
fn unanswered_outcome(unanswered: &Unanswered, node_id: &str) -> Outcome {
    let reason = unanswered.reason(node_id);
    match unanswered {
        Unanswered::TimedOut => Outcome::retry(reason),
        Unanswered::Canceled => Outcome::fail(reason, FailureClass::Canceled),
        Unanswered::Skipped
        | Unanswered::NoMatch(_)
        | Unanswered::NoFreeform
        | Unanswered::Unavailable => Outcome::fail(reason, FailureClass::Deterministic),
    }
}

/// `HumanQuestion`.
fn question_event(question: &Question) -> Event {
    let options = question
        .options()
        .iter()
        .map(|option| HumanOption {
            key: option.key().to_owned(),
            label: option.label().to_owned(),
            target: option.target().to_owned(),
        })
        .collect();
    let timeout_ms = question
        .timeout()
        .map(|limit| u64::try_from(limit.as_millis()).unwrap_or(u64::MAX));
    Event::node(
        question.node_id(),
        HumanQuestion {
            allow_freeform: question.allows_freeform(),
            default_choice: question.default_choice().map(str::to_owned),
            options,
            question_id: question.id().to_owned(),
            question_type: question.question_type().as_str().to_owned(),
            text: question.text().to_owned(),
            timeout_ms,
        },
    )
}

/// `HumanAnswer`: `label` is the chosen option's label (the freeform edge's label for
/// free text).
fn answer_event(question: &Question, answer: &Answer, source: AnswerSource) -> Event {
    let (selected, _, text) = question.gate_values(answer);
    Event::node(
        question.node_id(),
        HumanAnswer {
            label: question.answer_label(answer).to_owned(),
            question_id: question.id().to_owned(),
            selected_key: selected.to_owned(),
            source: source.as_str().to_owned(),
            text: text.to_owned(),
        },
    )
}

#[cfg(test)]
mod tests;
