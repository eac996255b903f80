//! Unit tests of the question model: options, question types, matching rules and
//! automatic answers (SPEC 5.5).

use fabro_language::Workflow;

use super::*;
use crate::handler::test_support::workflow;

/// A gate `gate` labelled "Ship it?" after `start`, with the edges in `edges`.
fn gate_workflow(edges: &str, gate_attributes: &str) -> Workflow {
    workflow(&format!(
        "digraph t {{\n start [shape=Mdiamond]\n exit [shape=Msquare]\n gate [shape=hexagon, label=\"Ship it?\"{gate_attributes}]\n start -> gate\n {edges}\n}}"
    ))
}

fn question_with(edges: &str, gate_attributes: &str) -> Option<Question> {
    let workflow = gate_workflow(edges, gate_attributes);
    let gate = workflow.find("gate").expect("gate node");
    Question::of_gate(&workflow, gate, "gate-1-x".to_owned(), "")
}

const MENU: &str = r#"gate -> exit [label="[A] Approve"]
        gate -> fix [label="[R] Retry"]
        gate -> later [label="Review later"]"#;
const MENU_WITH_FREEFORM: &str = r#"gate -> exit [label="[A] Approve"]
        gate -> fix [label="[R] Retry"]
        gate -> notes [label="Comment", freeform=true]"#;

/// What a pure function is asked about a gate.
enum Probe<'a> {
    /// The question built from the edges.
    Question,
    /// A value matched with these rules.
    Match(Matching, &'a str),
    /// The `--auto-approve` / dry-run answer with this default choice.
    Auto(Option<&'a str>),
    /// Free text for the freeform edge named by a label.
    Text(&'a str, &'a str),
}

fn check(edges: &str, probe: Probe<'_>, expected: &str) {
    let attributes = match &probe {
        Probe::Auto(Some(choice)) => format!(", human.default_choice=\"{choice}\""),
        _ => String::new(),
    };
    let question = question_with(edges, &attributes);
    let actual = match (probe, &question) {
        (Probe::Question, None) => "none".to_owned(),
        (Probe::Question, Some(question)) => describe_question(question),
        (Probe::Match(matching, value), Some(question)) => {
            describe_answer(question, question.resolve(value, matching))
        }
        (Probe::Auto(_), Some(question)) => describe_answer(question, question.automatic_answer()),
        (Probe::Text(label, text), Some(question)) => {
            describe_answer(question, question.resolve_text(label, text))
        }
        (_, None) => panic!("gate without a question: {edges}"),
    };
    assert_eq!(actual, expected, "edges:\n{edges}");
}

fn describe_question(question: &Question) -> String {
    let mut parts: Vec<String> = question
        .options
        .iter()
        .map(|option| format!("{}={}->{}", option.key, option.label, option.target))
        .collect();
    if let Some(edge) = &question.freeform {
        parts.push(format!("freeform->{}", edge.target));
    }
    format!("{}: {}", question.question_type.as_str(), parts.join(", "))
}

fn describe_answer(question: &Question, answer: Result<Answer, Unanswered>) -> String {
    match answer {
        Ok(Answer::Option(index)) => {
            let option = &question.options[index];
            format!("option {}->{}", option.label, option.target)
        }
        Ok(Answer::Freeform(text)) => format!("freeform '{text}'"),
        Err(Unanswered::NoMatch(value)) => format!("no match '{value}'"),
        Err(other) => format!("{other:?}"),
    }
}

#[test]
fn options_and_question_types() {
    check(
        MENU,
        Probe::Question,
        "multiple_choice: A=[A] Approve->exit, R=[R] Retry->fix, R=Review later->later",
    );
    check(
        "gate -> exit\n gate -> fix [label=\"AB) Fix it\"]\n gate -> x [label=\"q - Quit\"]",
        Probe::Question,
        "multiple_choice: e=exit->exit, AB=AB) Fix it->fix, q=q - Quit->x",
    );
    check(
        "gate -> exit",
        Probe::Question,
        "confirmation: e=exit->exit",
    );
    check(
        "gate -> exit [label=\"Yes\"]\n gate -> fix [label=\"No\"]",
        Probe::Question,
        "yes_no: Y=Yes->exit, N=No->fix",
    );
    check(
        "gate -> fix [label=\"[N] No\"]\n gate -> exit [label=\"[Y] yes\"]",
        Probe::Question,
        "yes_no: N=[N] No->fix, Y=[Y] yes->exit",
    );
    check(
        "gate -> exit [label=\"Yes\"]\n gate -> fix [label=\"Nope\"]",
        Probe::Question,
        "multiple_choice: Y=Yes->exit, N=Nope->fix",
    );
    check(
        "gate -> exit [label=\"Yes\"]\n gate -> fix [label=\"No\"]\n gate -> x [label=\"Maybe\"]",
        Probe::Question,
        "multiple_choice: Y=Yes->exit, N=No->fix, M=Maybe->x",
    );
    check(
        "gate -> notes [freeform=true]",
        Probe::Question,
        "freeform: freeform->notes",
    );
    check(
        MENU_WITH_FREEFORM,
        Probe::Question,
        "multiple_choice: A=[A] Approve->exit, R=[R] Retry->fix, freeform->notes",
    );
    check(
        "gate -> exit [label=\"Approve\"]\n gate -> notes [freeform=true]",
        Probe::Question,
        "confirmation: A=Approve->exit, freeform->notes",
    );
    // Conditional edges are neither options nor the freeform edge.
    check(
        "gate -> exit [label=\"Approve\"]\n gate -> fix [label=\"Abort\", condition=\"outcome=fail\"]\n gate -> notes [freeform=true, condition=\"x\"]",
        Probe::Question,
        "confirmation: A=Approve->exit",
    );
    check(
        "gate -> notes [freeform=true]\n gate -> other [freeform=true]",
        Probe::Question,
        "freeform: freeform->notes",
    );
    check(
        "gate -> exit [condition=\"outcome=success\"]",
        Probe::Question,
        "none",
    );
}

#[test]
fn answers_match_key_then_label_then_target() {
    let answer = |value| Probe::Match(Matching::Answer, value);
    check(MENU, answer("a"), "option [A] Approve->exit");
    check(MENU, answer("A"), "option [A] Approve->exit");
    // A duplicate key selects the first option with it; the other stays reachable.
    check(MENU, answer("r"), "option [R] Retry->fix");
    check(
        MENU,
        answer("  REVIEW later "),
        "option Review later->later",
    );
    check(MENU, answer("[R] Retry"), "option [R] Retry->fix");
    check(MENU, answer("retry"), "option [R] Retry->fix");
    check(MENU, answer("later"), "option Review later->later");
    check(MENU, answer("fix"), "option [R] Retry->fix");
    check(MENU, answer("1"), "no match '1'");
    check(MENU, answer(" nope "), "no match 'nope'");
    check(MENU, answer(""), "Skipped");
    check(MENU, answer("   "), "Skipped");
    check(MENU_WITH_FREEFORM, answer("a"), "option [A] Approve->exit");
    check(
        MENU_WITH_FREEFORM,
        answer("ship it now"),
        "freeform 'ship it now'",
    );
    check(MENU_WITH_FREEFORM, answer(""), "Skipped");
    let label_before_target = "gate -> fix [label=\"later\"]\n gate -> later [label=\"Postpone\"]";
    check(label_before_target, answer("later"), "option later->fix");
    let key_before_label = "gate -> x [label=\"B) Alpha\"]\n gate -> y [label=\"b\"]";
    check(key_before_label, answer("b"), "option B) Alpha->x");
    check(key_before_label, answer("alpha"), "option B) Alpha->x");
}

#[test]
fn default_choices_match_target_first() {
    let default = |value| Probe::Match(Matching::Default, value);
    let label_before_target = "gate -> fix [label=\"later\"]\n gate -> later [label=\"Postpone\"]";
    check(
        label_before_target,
        default("later"),
        "option Postpone->later",
    );
    check(label_before_target, default("p"), "option Postpone->later");
    check(label_before_target, default("LATER"), "option later->fix");
    check(MENU, default("a"), "option [A] Approve->exit");
    check(MENU, default("1"), "no match '1'");
    check(MENU_WITH_FREEFORM, default("lgtm"), "freeform 'lgtm'");
}

#[test]
fn console_input_also_matches_option_numbers() {
    let console = |value| Probe::Match(Matching::Console, value);
    check(MENU, console("1"), "option [A] Approve->exit");
    check(MENU, console("3\n"), "option Review later->later");
    check(MENU, console("0"), "no match '0'");
    check(MENU, console("4"), "no match '4'");
    check(MENU, console("r\n"), "option [R] Retry->fix");
    check(MENU, console("\n"), "Skipped");
    // A key beats an option number.
    let numbered_keys =
        "gate -> x [label=\"First\"]\n gate -> y [label=\"1) Second\"]\n gate -> z [label=\"Third\"]";
    check(numbered_keys, console("1"), "option 1) Second->y");
    check(numbered_keys, console("3"), "option Third->z");
    check(MENU_WITH_FREEFORM, console("9"), "freeform '9'");
}

#[test]
fn automatic_answers() {
    check(MENU, Probe::Auto(None), "option [A] Approve->exit");
    check(MENU, Probe::Auto(Some("fix")), "option [R] Retry->fix");
    check(
        MENU,
        Probe::Auto(Some("Review later")),
        "option Review later->later",
    );
    check(MENU, Probe::Auto(Some("zzz")), "no match 'zzz'");
    check(
        MENU_WITH_FREEFORM,
        Probe::Auto(Some("zzz")),
        "freeform 'zzz'",
    );
    check(
        "gate -> notes [freeform=true]",
        Probe::Auto(None),
        "freeform 'auto-approved'",
    );
}

#[test]
fn text_answers_name_the_freeform_edge() {
    check(
        MENU_WITH_FREEFORM,
        Probe::Text("comment", " ship it "),
        "freeform 'ship it'",
    );
    check(
        MENU_WITH_FREEFORM,
        Probe::Text("notes", "x"),
        "freeform 'x'",
    );
    check(
        MENU_WITH_FREEFORM,
        Probe::Text("freeform", "x"),
        "freeform 'x'",
    );
    check(MENU_WITH_FREEFORM, Probe::Text("a", "x"), "no match 'a'");
    check(MENU_WITH_FREEFORM, Probe::Text("comment", "  "), "Skipped");
    check(MENU, Probe::Text("a", "x"), "NoFreeform");
}

#[test]
fn display_labels_defaults_and_descriptions() {
    let question = question_with(MENU, ", human.default_choice=later").expect("question");
    let shown: Vec<_> = question
        .options()
        .iter()
        .map(|option| format!("[{}] {}", option.key(), option.display_label()))
        .collect();
    assert_eq!(shown, ["[A] Approve", "[R] Retry", "[R] Review later"]);
    assert_eq!(question.default_option(), Some(2));
    assert_eq!(question.describe(&Answer::Option(1)), "[R] Retry");
    assert_eq!(
        question.describe(&Answer::Freeform("hi".to_owned())),
        "\"hi\""
    );
    let plain = question_with(MENU, "").expect("question");
    assert_eq!(plain.default_option(), None);
}

#[test]
fn pending_question_files_round_trip() {
    let question = question_with(
        MENU_WITH_FREEFORM,
        ", timeout=90s, human.default_choice=fix",
    )
    .expect("question");
    let text = serde_json::to_string(&question).expect("serialise");
    let back: Question = serde_json::from_str(&text).expect("deserialise");
    assert_eq!(back, question);
    let value: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(value["node_id"], "gate");
    assert_eq!(value["question_type"], "multiple_choice");
    assert_eq!(value["timeout_ms"], 90_000);
    assert_eq!(back.timeout(), Some(Duration::from_secs(90)));
}
