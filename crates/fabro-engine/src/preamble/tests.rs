//! Snapshot tests of the preamble of every fidelity mode and of summary budgets.

use fabro_llm::Usage;
use serde_json::json;

use super::*;
use crate::failure::FailureClass;
use crate::handler::test_support::workflow;

const WORKFLOW: &str = r#"digraph {
    start [shape=Mdiamond] exit [shape=Msquare]
    plan [shape=box, prompt="Plan"]
    test [shape=parallelogram, script="cargo test"]
    review [shape=tab, prompt="Review"]
    start -> plan -> test -> review -> exit
}"#;

struct Fixture {
    dir: tempfile::TempDir,
    blobs: crate::blob::FsBlobStore,
    context: Context,
    stages: Vec<(String, Outcome)>,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("temporary directory");
    let blobs = crate::blob::FsBlobStore::new(&dir.path().join("home"));
    let (stdout_ref, _) = blobs
        .put_value(&json!((1..=30)
            .map(|n| format!("line {n}"))
            .collect::<Vec<_>>()
            .join("\n")))
        .expect("blob");
    let (stderr_ref, _) = blobs.put_value(&json!("")).expect("blob");
    let mut plan = Outcome::success();
    plan.model = Some("claude-sonnet-4-6".to_owned());
    plan.provider = Some("anthropic".to_owned());
    plan.usage = Some(Usage {
        input_tokens: 12_350,
        output_tokens: 950,
        ..Usage::default()
    });
    plan.files_touched = vec!["PLAN.md".to_owned(), "src/lib.rs".to_owned()];
    plan = plan
        .with_update(
            "response.plan",
            json!("Step 1: write the plan.\n\nStep 2: done."),
        )
        .with_update("last_stage", json!("plan"));
    let test = Outcome::fail("exit code 101", FailureClass::Deterministic)
        .with_update("command.output", json!(stdout_ref))
        .with_update("command.stderr", json!(stderr_ref));
    let review = Outcome::success().with_notes("looks fine");
    let mut context = Context::new();
    context.set("graph.goal", "Ship the feature");
    context.set("internal.run_id", "01RUN");
    context.set("internal.fidelity", "compact");
    context.set("outcome", "success");
    context.set("last_response", "x");
    context.set("response.plan", "Step 1");
    context.set("command.output", json!(stdout_ref));
    context.set("score", 9);
    context.set("notes_for_review", "a".repeat(600));
    Fixture {
        dir,
        blobs,
        context,
        stages: vec![
            ("plan".to_owned(), plan),
            ("test".to_owned(), test),
            ("review".to_owned(), review),
        ],
    }
}

fn render(fixture: &Fixture, fidelity: Fidelity) -> String {
    let workflow = workflow(WORKFLOW);
    let input = PreambleInput {
        workflow: &workflow,
        context: &fixture.context,
        stages: &fixture.stages,
        run_dir: fixture.dir.path(),
        blobs: &fixture.blobs,
    };
    build(fidelity, &input).replace(&fixture.dir.path().display().to_string(), "{run_dir}")
}

#[test]
fn full_has_no_preamble() {
    assert_eq!(render(&fixture(), Fidelity::Full), "");
}

#[test]
fn truncate_preamble() {
    insta::assert_snapshot!(render(&fixture(), Fidelity::Truncate));
}

#[test]
fn compact_preamble() {
    let fixture = fixture();
    let text = render(&fixture, Fidelity::Compact);
    insta::assert_snapshot!(text);
    // The stdout blob was materialised where the pointer says.
    let pointer = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("- Stdout: See: "))
        .expect("stdout pointer");
    let path = pointer.replace("{run_dir}", &fixture.dir.path().display().to_string());
    assert!(Path::new(&path).is_file(), "{path}");
    assert!(path.contains("/runtime/blobs/"), "{path}");
}

#[test]
fn summary_high_preamble() {
    insta::assert_snapshot!(render(&fixture(), Fidelity::SummaryHigh));
}

#[test]
fn summary_medium_preamble() {
    insta::assert_snapshot!(render(&fixture(), Fidelity::SummaryMedium));
}

#[test]
fn summary_low_preamble() {
    insta::assert_snapshot!(render(&fixture(), Fidelity::SummaryLow));
}

#[test]
fn summaries_collapse_then_drop_the_oldest_stages_over_budget() {
    let mut fixture = fixture();
    fixture.context = Context::new();
    fixture.context.set("graph.goal", "g");
    let long = "word ".repeat(400);
    fixture.stages = (0..40)
        .map(|n| {
            (
                format!("stage{n:02}"),
                Outcome::success().with_update(format!("response.stage{n:02}"), json!(long)),
            )
        })
        .collect();
    let high = render(&fixture, Fidelity::SummaryHigh);
    assert!(high.chars().count() <= 12_000, "{}", high.chars().count());
    assert!(high.contains("- stage00: success\n"), "oldest collapsed");
    assert!(high.contains("## Stage: stage39\n"), "newest kept in full");
    let low = render(&fixture, Fidelity::SummaryLow);
    assert!(low.chars().count() <= 2_400);
    fixture.stages = (0..300)
        .map(|n| (format!("stage{n:03}"), Outcome::success()))
        .collect();
    let low = render(&fixture, Fidelity::SummaryLow);
    assert!(low.chars().count() <= 2_400, "{}", low.chars().count());
    assert!(low.contains("earlier stages omitted)\n"), "{low}");
    assert!(low.contains("- stage299: success\n"));
}

#[test]
fn token_counts_print_like_the_spec() {
    let check = |count: u64, expected: &str| assert_eq!(format_tokens(count), expected, "{count}");
    check(950, "950");
    check(1000, "1.0k");
    check(12_350, "12.4k");
    check(999_950, "1.0m");
    check(1_234_567, "1.2m");
}

/// SPEC 6.6 (third milestone): the 1,000th visit of a node in a loop gets a `compact`
/// preamble of at most 16,000 characters plus its context section: the newest stages in
/// full, the oldest dropped.
#[test]
fn compact_keeps_its_stage_list_within_sixteen_thousand_characters() {
    let mut fixture = fixture();
    fixture.context = Context::new();
    fixture.context.set("graph.goal", "loop until done");
    fixture.context.set("score", 9);
    let mut visit = Outcome::success();
    visit.model = Some("claude-sonnet-4-6".to_owned());
    visit.usage = Some(Usage {
        input_tokens: 4_000,
        output_tokens: 300,
        ..Usage::default()
    });
    visit.files_touched = vec!["src/lib.rs".to_owned(), "NOTES.md".to_owned()];
    fixture.stages = (0..1_000)
        .map(|_| ("review".to_owned(), visit.clone()))
        .collect();
    let text = render(&fixture, Fidelity::Compact);
    let context = "\n## Context\n- score: 9\n";
    assert!(text.ends_with(context), "{text}");
    let list = text.chars().count() - context.chars().count();
    assert!(list <= 16_000, "{list} characters before the context");
    assert!(list > 15_000, "the budget is used: {list}");
    assert!(text.contains("earlier stages omitted)\n"), "oldest dropped");
    assert!(
        text.ends_with(&format!("  - Files: src/lib.rs, NOTES.md\n{context}")),
        "the newest stage keeps its full form: {}",
        &text[text.len() - 300..]
    );
    // Short runs are unchanged: every stage in full.
    fixture.stages.truncate(3);
    let short = render(&fixture, Fidelity::Compact);
    assert_eq!(short.matches("  - Model: claude-sonnet-4-6").count(), 3);
}
