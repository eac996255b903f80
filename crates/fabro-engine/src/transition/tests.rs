//! Tests of edge selection: every tier, its priority over the next, and tie-breaks.

use rand::rngs::StdRng;
use rand::SeedableRng;

use super::*;
use fabro_language::{check, AnyModel, CheckOptions, NoFiles, Variables};

fn workflow(body: &str) -> Workflow {
    let text = format!("digraph t {{ start [shape=Mdiamond] exit [shape=Msquare] {body} }}");
    let variables = Variables::default();
    let options = CheckOptions {
        loader: &NoFiles,
        variables: &variables,
        models: &AnyModel,
    };
    check("t.fabro".as_ref(), &text, &options)
        .workflow
        .expect("parses")
}

/// The target chosen after `node` completes with `outcome` and `context`.
fn pick(
    workflow: &Workflow,
    node: &str,
    outcome: &Outcome,
    context: &Context,
) -> Option<(String, SelectionReason)> {
    let directory = tempfile::tempdir().expect("tempdir");
    let blobs = crate::blob::FsBlobStore::new(directory.path());
    let view = ConditionView {
        outcome: outcome.condition_value(),
        preferred_label: outcome.preferred_label.as_deref().unwrap_or(""),
        context,
        blobs: &blobs,
    };
    let mut rng = StdRng::seed_from_u64(7);
    let index = workflow.find(node).expect("node");
    select_edge(workflow, index, outcome, &view, &mut rng)
        .map(|(edge, reason)| (workflow.node(workflow.edge(edge).to).id.clone(), reason))
}

fn target(result: Option<(String, SelectionReason)>) -> Option<String> {
    result.map(|(target, _)| target)
}

#[test]
fn conditions_beat_preferred_labels_and_weights() {
    let workflow =
        workflow(r#"a -> x [condition="outcome=success"] a -> y [label="Y", weight=10] a -> z"#);
    let mut outcome = Outcome::success();
    outcome.preferred_label = Some("y".to_owned());
    assert_eq!(
        pick(&workflow, "a", &outcome, &Context::new()),
        Some(("x".to_owned(), SelectionReason::Condition))
    );
}

#[test]
fn preferred_label_beats_suggested_ids_and_ignores_accelerators() {
    let workflow = workflow(r#"a -> x [label="[A] Approve"] a -> y a -> z [weight=5]"#);
    let mut outcome = Outcome::success();
    outcome.preferred_label = Some(" approve ".to_owned());
    outcome.suggested_next_ids = vec!["y".to_owned()];
    assert_eq!(
        pick(&workflow, "a", &outcome, &Context::new()),
        Some(("x".to_owned(), SelectionReason::PreferredLabel))
    );
}

#[test]
fn suggested_ids_beat_the_unconditional_fallback() {
    let workflow = workflow(r#"a -> x [weight=5] a -> y"#);
    let mut outcome = Outcome::success();
    outcome.suggested_next_ids = vec!["missing".to_owned(), "y".to_owned()];
    assert_eq!(
        pick(&workflow, "a", &outcome, &Context::new()),
        Some(("y".to_owned(), SelectionReason::SuggestedNext))
    );
}

#[test]
fn preferred_labels_never_match_conditional_edges() {
    let workflow = workflow(r#"a -> x [label="go", condition="outcome=fail"] a -> y"#);
    let mut outcome = Outcome::success();
    outcome.preferred_label = Some("go".to_owned());
    assert_eq!(
        target(pick(&workflow, "a", &outcome, &Context::new())),
        Some("y".to_owned())
    );
}

#[test]
fn weight_then_lexical_order_break_ties() {
    let workflow = workflow(r#"a -> c a -> b [weight=1] a -> d [weight=1]"#);
    assert_eq!(
        target(pick(&workflow, "a", &Outcome::success(), &Context::new())),
        Some("b".to_owned())
    );
    let workflow2 = workflow_with_lexical();
    assert_eq!(
        target(pick(&workflow2, "a", &Outcome::success(), &Context::new())),
        Some("alpha".to_owned())
    );
}

fn workflow_with_lexical() -> Workflow {
    workflow(r#"a -> beta a -> alpha a -> gamma"#)
}

#[test]
fn conditions_read_the_context() {
    let workflow = workflow(r#"a -> x [condition="context.ready=true && tries < 3"] a -> y"#);
    let mut context = Context::new();
    context.set("ready", true);
    context.set("tries", 2);
    assert_eq!(
        target(pick(&workflow, "a", &Outcome::success(), &context)),
        Some("x".to_owned())
    );
    context.set("tries", 3);
    assert_eq!(
        target(pick(&workflow, "a", &Outcome::success(), &context)),
        Some("y".to_owned())
    );
}

#[test]
fn failed_human_gates_fail_closed() {
    let workflow = workflow(r#"h [shape=hexagon] h -> x [label="yes"]"#);
    let failed = Outcome::fail("no answer", crate::failure::FailureClass::Deterministic);
    assert_eq!(pick(&workflow, "h", &failed, &Context::new()), None);
    let workflow = workflow_plain();
    assert_eq!(
        target(pick(&workflow, "a", &failed, &Context::new())),
        Some("x".to_owned())
    );
}

fn workflow_plain() -> Workflow {
    workflow(r#"a -> x"#)
}

#[test]
fn no_edge_when_nothing_matches() {
    let workflow = workflow(r#"a -> x [condition="outcome=fail"]"#);
    assert_eq!(
        pick(&workflow, "a", &Outcome::success(), &Context::new()),
        None
    );
}

#[test]
fn random_selection_is_weighted() {
    let workflow = workflow(r#"a [selection=random] a -> x [weight=3] a -> y [weight=1]"#);
    let directory = tempfile::tempdir().expect("tempdir");
    let blobs = crate::blob::FsBlobStore::new(directory.path());
    let context = Context::new();
    let outcome = Outcome::success();
    let view = ConditionView {
        outcome: "success",
        preferred_label: "",
        context: &context,
        blobs: &blobs,
    };
    let mut rng = StdRng::seed_from_u64(42);
    let node = workflow.find("a").expect("a");
    let mut to_x = 0;
    for _ in 0..4000 {
        let (edge, reason) =
            select_edge(&workflow, node, &outcome, &view, &mut rng).expect("selects");
        assert_eq!(reason, SelectionReason::Unconditional);
        if workflow.node(workflow.edge(edge).to).id == "x" {
            to_x += 1;
        }
    }
    assert!(
        (2800..3200).contains(&to_x),
        "{to_x} of 4000 picks went to x"
    );
}

#[test]
fn conditions_read_blob_contents() {
    let workflow = workflow(r#"a -> x [condition="command.output contains PASS"] a -> y"#);
    let directory = tempfile::tempdir().expect("tempdir");
    let blobs = crate::blob::FsBlobStore::new(directory.path());
    let (reference, _) = blobs
        .put_value(&serde_json::json!("all tests PASS"))
        .expect("stored");
    let mut context = Context::new();
    context.set("command.output", reference.as_str());
    let view = ConditionView {
        outcome: "success",
        preferred_label: "",
        context: &context,
        blobs: &blobs,
    };
    let mut rng = StdRng::seed_from_u64(1);
    let (edge, _) = select_edge(
        &workflow,
        workflow.find("a").expect("a"),
        &Outcome::success(),
        &view,
        &mut rng,
    )
    .expect("selects");
    assert_eq!(workflow.node(workflow.edge(edge).to).id, "x");
}
