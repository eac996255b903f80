//! Unit tests of the human gate handler with scripted interviewers: answer sources in
//! order, routing, events, timeouts and cancellation (SPEC 5.5).

use std::sync::Arc;

use fabro_language::{StageStatus, Workflow};
use serde_json::{json, Value};

use super::*;
use crate::event::EventEnvelope;
use crate::handler::test_support::{workflow, TestRun};
use crate::interviewer::test_support::Scripted;
use crate::interviewer::{AnswerFlags, AutoApprove, FirstApplicable, Interviewer};

/// A gate `gate` labelled "Ship it?" after `start`, with the edges in `edges`.
fn gate_workflow(edges: &str, gate_attributes: &str) -> Workflow {
    workflow(&format!(
        "digraph t {{\n start [shape=Mdiamond]\n exit [shape=Msquare]\n gate [shape=hexagon, label=\"Ship it?\"{gate_attributes}]\n start -> gate\n {edges}\n}}"
    ))
}

const MENU: &str = r#"gate -> exit [label="[A] Approve"]
        gate -> fix [label="[R] Retry"]
        gate -> later [label="Review later"]"#;
const MENU_WITH_FREEFORM: &str = r#"gate -> exit [label="[A] Approve"]
        gate -> fix [label="[R] Retry"]
        gate -> notes [label="Comment", freeform=true]"#;

/// The run's interviewer as the engine composes it from `--answer` and
/// `--auto-approve`, without an interactive source.
fn interviewer(answers: &[(String, String)], auto_approve: bool) -> Arc<dyn Interviewer> {
    with_interactive(answers, auto_approve, None)
}

/// The same, with `interactive` last.
fn with_interactive(
    answers: &[(String, String)],
    auto_approve: bool,
    interactive: Option<Arc<dyn Interviewer>>,
) -> Arc<dyn Interviewer> {
    let mut sources: Vec<Arc<dyn Interviewer>> = vec![Arc::new(AnswerFlags::new(answers))];
    if auto_approve {
        sources.push(Arc::new(AutoApprove));
    }
    sources.extend(interactive);
    Arc::new(FirstApplicable::new(sources))
}

fn answers(values: &[(&str, &str)]) -> Vec<(String, String)> {
    values
        .iter()
        .map(|(node, value)| ((*node).to_owned(), (*value).to_owned()))
        .collect()
}

/// Runs the gate of `workflow` once in `run`.
async fn run_gate(run: &TestRun, workflow: &Workflow) -> Outcome {
    execute(&run.input(workflow, "gate")).await
}

fn human_events(run: &TestRun) -> Vec<EventEnvelope> {
    run.events()
        .into_iter()
        .filter(|event| event.name().starts_with("Human"))
        .collect()
}

/// The `HumanAnswer` properties that do not vary: source, key, label, text.
fn answer_summary(run: &TestRun) -> Vec<Value> {
    human_events(run)
        .iter()
        .filter(|event| event.name() == "HumanAnswer")
        .map(|event| {
            let property = |name: &str| event.properties().get(name).cloned().unwrap_or_default();
            json!([
                property("source"),
                property("selected_key"),
                property("label"),
                property("text")
            ])
        })
        .collect()
}

fn gate_context(outcome: &Outcome) -> Value {
    json!([
        outcome.context_updates.get("human.gate.selected"),
        outcome.context_updates.get("human.gate.label"),
        outcome.context_updates.get("human.gate.text"),
    ])
}

fn assert_failed(outcome: &Outcome, reason: &str, class: FailureClass) {
    assert_eq!(outcome.status, StageStatus::Fail, "{outcome:?}");
    assert_eq!(outcome.failure_reason(), reason);
    assert_eq!(outcome.failure_class(), Some(class));
    assert!(outcome.context_updates.is_empty(), "{outcome:?}");
    assert!(outcome.preferred_label.is_none() && outcome.suggested_next_ids.is_empty());
}

#[tokio::test]
async fn answer_flag_selects_by_key_label_or_target() {
    let workflow = gate_workflow(MENU, "");
    let mut run = TestRun::new();
    run.services.interviewer = interviewer(
        &answers(&[("gate", "a"), ("gate", "retry"), ("gate", "later")]),
        false,
    );
    let by_key = run_gate(&run, &workflow).await;
    assert_eq!(by_key.status, StageStatus::Success);
    assert_eq!(by_key.preferred_label.as_deref(), Some("[A] Approve"));
    assert_eq!(by_key.suggested_next_ids, ["exit"]);
    assert_eq!(gate_context(&by_key), json!(["A", "[A] Approve", ""]));
    let by_label = run_gate(&run, &workflow).await;
    assert_eq!(by_label.suggested_next_ids, ["fix"]);
    assert_eq!(gate_context(&by_label), json!(["R", "[R] Retry", ""]));
    let by_target = run_gate(&run, &workflow).await;
    assert_eq!(by_target.preferred_label.as_deref(), Some("Review later"));
    assert_eq!(by_target.suggested_next_ids, ["later"]);
    assert_eq!(
        answer_summary(&run),
        [
            json!(["answer_flag", "A", "[A] Approve", ""]),
            json!(["answer_flag", "R", "[R] Retry", ""]),
            json!(["answer_flag", "R", "Review later", ""]),
        ]
    );
}

#[tokio::test]
async fn answers_are_consumed_one_per_visit() {
    let workflow = gate_workflow(MENU, "");
    let mut run = TestRun::new();
    run.services.interviewer = interviewer(
        &answers(&[("other", "a"), ("gate", "r"), ("gate", "a")]),
        false,
    );
    let first = run_gate(&run, &workflow).await;
    let second = run_gate(&run, &workflow).await;
    let third = run_gate(&run, &workflow).await;
    assert_eq!(first.suggested_next_ids, ["fix"]);
    assert_eq!(second.suggested_next_ids, ["exit"]);
    assert_failed(
        &third,
        "human input unavailable: no interactive terminal (use --answer or --auto-approve)",
        FailureClass::Deterministic,
    );
}

#[tokio::test]
async fn unmatched_answers_go_to_the_freeform_edge_or_fail() {
    let freeform = gate_workflow(MENU_WITH_FREEFORM, "");
    let mut run = TestRun::new();
    run.services.interviewer = interviewer(&answers(&[("gate", "ship it on Monday")]), false);
    let outcome = run_gate(&run, &freeform).await;
    assert_eq!(outcome.status, StageStatus::Success);
    assert_eq!(outcome.preferred_label, None);
    assert_eq!(outcome.suggested_next_ids, ["notes"]);
    assert_eq!(
        gate_context(&outcome),
        json!(["freeform", "Comment", "ship it on Monday"])
    );
    assert_eq!(
        answer_summary(&run),
        [json!([
            "answer_flag",
            "freeform",
            "Comment",
            "ship it on Monday"
        ])]
    );

    let closed = gate_workflow(MENU, "");
    let mut run = TestRun::new();
    run.services.interviewer = interviewer(&answers(&[("gate", "ship it"), ("gate", "")]), false);
    let unmatched = run_gate(&run, &closed).await;
    assert_failed(
        &unmatched,
        "answer 'ship it' matches no option of gate gate",
        FailureClass::Deterministic,
    );
    let empty = run_gate(&run, &closed).await;
    assert_failed(
        &empty,
        "human skipped interaction",
        FailureClass::Deterministic,
    );
    assert!(answer_summary(&run).is_empty());
}

#[tokio::test]
async fn auto_approve_uses_the_default_choice_else_the_first_option() {
    let mut run = TestRun::new();
    run.services.interviewer = interviewer(&[], true);
    let plain = run_gate(&run, &gate_workflow(MENU, "")).await;
    assert_eq!(plain.suggested_next_ids, ["exit"]);
    let with_default = run_gate(&run, &gate_workflow(MENU, ", human.default_choice=later")).await;
    assert_eq!(with_default.suggested_next_ids, ["later"]);
    assert_eq!(
        gate_context(&with_default),
        json!(["R", "Review later", ""])
    );
    let freeform_only = run_gate(&run, &gate_workflow("gate -> notes [freeform=true]", "")).await;
    assert_eq!(freeform_only.suggested_next_ids, ["notes"]);
    assert_eq!(
        gate_context(&freeform_only),
        json!(["freeform", "", "auto-approved"])
    );
    assert_eq!(
        answer_summary(&run),
        [
            json!(["auto_approve", "A", "[A] Approve", ""]),
            json!(["auto_approve", "R", "Review later", ""]),
            json!(["auto_approve", "freeform", "", "auto-approved"]),
        ]
    );
}

#[tokio::test]
async fn answers_come_before_auto_approve() {
    let mut run = TestRun::new();
    run.services.interviewer = interviewer(&answers(&[("gate", "r")]), true);
    let workflow = gate_workflow(MENU, "");
    assert_eq!(run_gate(&run, &workflow).await.suggested_next_ids, ["fix"]);
    assert_eq!(run_gate(&run, &workflow).await.suggested_next_ids, ["exit"]);
}

#[tokio::test]
async fn without_a_source_the_gate_fails_closed() {
    let run = TestRun::new();
    let outcome = run_gate(&run, &gate_workflow(MENU, "")).await;
    assert_failed(
        &outcome,
        "human input unavailable: no interactive terminal (use --answer or --auto-approve)",
        FailureClass::Deterministic,
    );
    let names: Vec<_> = human_events(&run)
        .into_iter()
        .map(|event| event.name().to_owned())
        .collect();
    assert_eq!(names, ["HumanQuestion"]);
}

#[tokio::test]
async fn a_gate_without_options_fails() {
    let mut run = TestRun::new();
    run.services.interviewer = interviewer(&[], true);
    let workflow = gate_workflow("gate -> exit [condition=\"outcome=success\"]", "");
    let outcome = run_gate(&run, &workflow).await;
    assert_failed(
        &outcome,
        "No outgoing edges for human gate",
        FailureClass::Deterministic,
    );
    assert!(human_events(&run).is_empty());
}

#[tokio::test]
async fn dry_run_picks_the_default_choice_else_the_first_option() {
    let mut run = TestRun::new();
    run.services.dry_run = true;
    run.services.interviewer = interviewer(&answers(&[("gate", "r")]), false);
    let plain = run_gate(&run, &gate_workflow(MENU_WITH_FREEFORM, "")).await;
    assert_eq!(plain.suggested_next_ids, ["exit"]);
    let with_default = run_gate(
        &run,
        &gate_workflow(MENU, ", human.default_choice=\"Review later\""),
    )
    .await;
    assert_eq!(with_default.suggested_next_ids, ["later"]);
    assert_eq!(
        answer_summary(&run),
        [
            json!(["auto_approve", "A", "[A] Approve", ""]),
            json!(["auto_approve", "R", "Review later", ""]),
        ]
    );
    // The dry run did not consume the --answer entry.
    run.services.dry_run = false;
    assert_eq!(
        run_gate(&run, &gate_workflow(MENU, ""))
            .await
            .suggested_next_ids,
        ["fix"]
    );
}

#[tokio::test]
async fn events_describe_the_question_and_the_answer() {
    let workflow = gate_workflow(
        MENU_WITH_FREEFORM,
        ", human.default_choice=fix, timeout=90s",
    );
    let mut run = TestRun::new();
    run.services.interviewer = interviewer(&answers(&[("gate", "A")]), false);
    run_gate(&run, &workflow).await;
    let events = human_events(&run);
    assert_eq!(events.len(), 2);
    let (question, answer) = (&events[0], &events[1]);
    assert_eq!(question.name(), "HumanQuestion");
    assert_eq!(question.node_id.as_deref(), Some("gate"));
    let question_properties = question.properties();
    let question_id = question_properties["question_id"]
        .as_str()
        .expect("question id");
    assert!(question_id.starts_with("gate-1-"), "{question_id}");
    let mut properties = question.properties();
    properties.remove("question_id");
    assert_eq!(
        Value::Object(properties),
        json!({
            "text": "Ship it?",
            "question_type": "multiple_choice",
            "options": [
                {"key": "A", "label": "[A] Approve", "target": "exit"},
                {"key": "R", "label": "[R] Retry", "target": "fix"},
            ],
            "allow_freeform": true,
            "default_choice": "fix",
            "timeout_ms": 90_000,
        })
    );
    assert_eq!(answer.name(), "HumanAnswer");
    assert_eq!(
        Value::Object(answer.properties()),
        json!({"question_id": question_id, "source": "answer_flag", "selected_key": "A",
               "label": "[A] Approve", "text": ""})
    );
}

#[tokio::test]
async fn an_interactive_source_answers_after_flags_and_auto_approve_decline() {
    let workflow = gate_workflow(MENU, "");
    let scripted = Arc::new(Scripted::new([Reply::Answered(
        Answer::Option(2),
        AnswerSource::Console,
    )]));
    let mut run = TestRun::new();
    run.services.interviewer =
        with_interactive(&answers(&[("gate", "r")]), false, Some(scripted.clone()));
    let context = crate::context::Context::from_values(
        [("last_response".to_owned(), json!("Plan written."))]
            .into_iter()
            .collect(),
    );
    let first = run_gate(&run, &workflow).await;
    assert_eq!(first.suggested_next_ids, ["fix"]);
    assert!(scripted.asked().is_empty(), "--answer came first");
    let input = StageInput {
        context: &context,
        ..run.input(&workflow, "gate")
    };
    let second = execute(&input).await;
    assert_eq!(second.suggested_next_ids, ["later"]);
    let asked = scripted.asked();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].context(), "Plan written.");
    assert_eq!(asked[0].node_id(), "gate");
    assert_eq!(
        answer_summary(&run),
        [
            json!(["answer_flag", "R", "[R] Retry", ""]),
            json!(["console", "R", "Review later", ""]),
        ]
    );
}

#[tokio::test]
async fn an_interactive_source_can_fail_the_gate() {
    let workflow = gate_workflow(MENU, "");
    let scripted = Arc::new(Scripted::new([
        Reply::Unanswered(Unanswered::NoMatch("never".to_owned())),
        Reply::Unanswered(Unanswered::Skipped),
    ]));
    let mut run = TestRun::new();
    run.services.interviewer = with_interactive(&[], false, Some(scripted));
    assert_failed(
        &run_gate(&run, &workflow).await,
        "answer 'never' matches no option of gate gate",
        FailureClass::Deterministic,
    );
    assert_failed(
        &run_gate(&run, &workflow).await,
        "human skipped interaction",
        FailureClass::Deterministic,
    );
}

#[tokio::test(start_paused = true)]
async fn timeout_uses_the_default_choice() {
    let workflow = gate_workflow(MENU, ", timeout=5m, human.default_choice=r");
    let scripted = Arc::new(Scripted::silent());
    let mut run = TestRun::new();
    run.services.interviewer = with_interactive(&[], false, Some(scripted.clone()));
    let outcome = run_gate(&run, &workflow).await;
    assert_eq!(outcome.suggested_next_ids, ["fix"]);
    assert_eq!(
        answer_summary(&run),
        [json!(["timeout_default", "R", "[R] Retry", ""])]
    );
    assert_eq!(scripted.asked().len(), 1);
    assert_eq!(scripted.open(), 0, "the timed-out question was withdrawn");
}

#[tokio::test(start_paused = true)]
async fn timeout_without_default_asks_for_a_retry() {
    let workflow = gate_workflow(MENU, ", timeout=30s");
    let mut run = TestRun::new();
    run.services.interviewer = with_interactive(&[], false, Some(Arc::new(Scripted::silent())));
    let outcome = run_gate(&run, &workflow).await;
    assert_eq!(outcome.status, StageStatus::Retry);
    assert_eq!(outcome.failure_reason(), "human gate timeout, no default");
    assert!(answer_summary(&run).is_empty());
}

#[tokio::test]
async fn cancellation_ends_an_open_question() {
    let workflow = gate_workflow(MENU, "");
    let scripted = Arc::new(Scripted::silent());
    let mut run = TestRun::new();
    run.services.interviewer = with_interactive(&[], false, Some(scripted.clone()));
    run.services.cancel.cancel();
    let outcome = run_gate(&run, &workflow).await;
    assert_failed(&outcome, "canceled", FailureClass::Canceled);
    assert_eq!(scripted.open(), 0);
}
