//! Tests of lowering: typed attributes, aliases, stylesheet application and error spans.

use super::*;
use crate::span::LineIndex;
use crate::syntax::parse;

fn lower_text(text: &str) -> (Workflow, Vec<Diagnostic>) {
    let syntax = parse(text).expect("test input parses");
    lower(syntax, text)
}

fn node<'w>(workflow: &'w Workflow, id: &str) -> &'w Node {
    workflow.node(workflow.find(id).expect("node exists"))
}

/// Asserts exactly one diagnostic of `rule` at `line`:`column` whose message contains
/// `needle`.
fn check_diagnostic(text: &str, rule: Rule, line: u32, column: u32, needle: &str) {
    let (_, diagnostics) = lower_text(text);
    let found: Vec<_> = diagnostics.iter().filter(|d| d.rule == rule).collect();
    assert_eq!(found.len(), 1, "{diagnostics:#?}");
    assert!(found[0].message.contains(needle), "{:?}", found[0].message);
    let span = found[0].span.expect("span");
    assert_eq!(
        LineIndex::new(text).position(text, span.start),
        (line, column)
    );
}

#[test]
fn handler_resolution_prefers_type_then_shape_then_agent() {
    let (workflow, _) = lower_text(
        "digraph { a [shape=tab, type=command] b [shape=tab] c d [type=bogus, shape=hexagon] e [node_type=wait.human] f [codergen_mode=one_shot] }",
    );
    assert_eq!(node(&workflow, "a").handler, HandlerKind::Command);
    assert_eq!(node(&workflow, "b").handler, HandlerKind::Prompt);
    assert_eq!(node(&workflow, "c").handler, HandlerKind::Agent);
    assert_eq!(node(&workflow, "d").handler, HandlerKind::Human);
    assert_eq!(node(&workflow, "e").handler, HandlerKind::Human);
    assert_eq!(node(&workflow, "f").handler, HandlerKind::Prompt);
}

#[test]
fn start_and_exit_are_recognised_by_id() {
    let (workflow, _) = lower_text("digraph { Start -> work -> End }");
    assert_eq!(node(&workflow, "Start").handler, HandlerKind::Start);
    assert_eq!(node(&workflow, "End").handler, HandlerKind::Exit);
    assert_eq!(workflow.start(), workflow.find("Start"));
    assert_eq!(workflow.exit(), workflow.find("End"));
}

#[test]
fn typed_node_attributes_with_aliases_and_defaults() {
    let (workflow, diagnostics) = lower_text(
        r#"digraph {
            a [max_retries="3", timeout=1200, goal_gate=TRUE, llm_model=gpt-5.2, llm_prompt="do it",
               max_agent_turns=7, output_retries=-4, write_scope="src/**, docs/*", class="x, y,x",
               tool_command="make", language=python, human.default_choice=yes, max_parallel=2,
               acp_command="agent --flag 'two words'"]
            b [fidelity="summary:high", retry_policy=patient, selection=random, backend=cli]
        }"#,
    );
    assert!(diagnostics.is_empty(), "{diagnostics:#?}");
    let a = node(&workflow, "a");
    assert_eq!(a.max_retries(), Some(3));
    assert_eq!(a.timeout(), Some(Duration::from_secs(1200)));
    assert!(a.goal_gate);
    assert_eq!(a.llm.model(), Some("gpt-5.2"));
    assert_eq!(&*a.llm.prompt, "do it");
    assert_eq!(a.llm.max_turns, 7);
    assert_eq!(a.llm.output_retries, 0);
    assert_eq!(a.llm.write_scope(), ["src/**", "docs/*"]);
    assert_eq!(&*a.classes, ["x", "y"]);
    assert_eq!(a.script(), "make");
    assert_eq!(a.language(), &ScriptLanguage::Python);
    assert_eq!(a.default_choice(), Some("yes"));
    assert_eq!(a.max_parallel, 2);
    assert_eq!(
        a.llm.acp_command(),
        Some(
            &[
                "agent".to_owned(),
                "--flag".to_owned(),
                "two words".to_owned()
            ][..]
        )
    );
    let b = node(&workflow, "b");
    assert_eq!(b.llm.fidelity, Some(Fidelity::SummaryHigh));
    assert_eq!(b.retry_policy, Some(RetryPolicy::Patient));
    assert_eq!(b.selection, Selection::Random);
    assert_eq!(b.llm.backend, Backend::Cli);
    assert_eq!(b.label(), "b");
    assert!(!b.has_label());
    assert_eq!(b.llm.output_retries, 2);
    // Settings b leaves unset read as their defaults.
    assert_eq!(b.language(), &ScriptLanguage::Shell);
    assert_eq!(b.script(), "");
    assert_eq!(
        (b.max_retries(), b.max_visits(), b.timeout()),
        (None, None, None)
    );
    assert_eq!((b.llm.model(), b.llm.thread_id()), (None, None));
}

#[test]
fn graph_settings_with_aliases() {
    let (workflow, diagnostics) = lower_text(
        "digraph { graph [goal=\"g\", default_max_retry=1, context_fidelity_default=truncate, stall_timeout=0, rankdir=LR, max_node_visits=4] }",
    );
    assert!(diagnostics.is_empty());
    let settings = &workflow.settings;
    assert_eq!(settings.goal, "g");
    assert_eq!(settings.default_max_retries, 1);
    assert_eq!(settings.default_fidelity, Some(Fidelity::Truncate));
    assert_eq!(settings.stall_timeout, Duration::ZERO);
    assert_eq!(settings.rankdir, RankDir::LeftToRight);
    assert_eq!(settings.max_node_visits, 4);
    assert_eq!(settings.loop_restart_signature_limit, 3);
}

#[test]
fn edges_are_typed() {
    let (workflow, diagnostics) = lower_text(
        r#"digraph { a -> b [label="[Y] Yes", condition="outcome=success && x", weight=0.5, loop_restart=true, freeform=false, fidelity=full, thread_id=t] a -> c [condition="  ", thread_id=""] }"#,
    );
    assert!(diagnostics.is_empty(), "{diagnostics:#?}");
    let edge = &workflow.edges()[0];
    assert_eq!(edge.label(), "[Y] Yes");
    assert!(edge.condition.is_some());
    assert_eq!(edge.weight, 0.5);
    assert!(edge.loop_restart);
    assert_eq!(edge.fidelity, Some(Fidelity::Full));
    assert_eq!(edge.thread_id(), Some("t"));
    assert!(workflow.edges()[1].is_unconditional());
    assert_eq!(workflow.edges()[1].label(), "");
    assert_eq!(workflow.edges()[1].thread_id(), None);
    let outgoing: Vec<_> = workflow
        .outgoing(workflow.find("a").expect("a"))
        .map(|(_, edge)| workflow.node(edge.to).id.as_str())
        .collect();
    assert_eq!(outgoing, ["b", "c"]);
}

#[test]
fn attribute_type_errors_point_at_the_key() {
    check_diagnostic(
        "digraph {\n a [max_retries=lots]\n}",
        Rule::AttributeType,
        2,
        5,
        "integer",
    );
    check_diagnostic(
        "digraph {\n a [timeout=\"1.5h\"]\n}",
        Rule::AttributeType,
        2,
        5,
        "duration",
    );
    check_diagnostic(
        "digraph {\n a [goal_gate=yes]\n}",
        Rule::AttributeType,
        2,
        5,
        "true or false",
    );
    check_diagnostic(
        "digraph {\n a -> b [weight=heavy]\n}",
        Rule::AttributeType,
        2,
        10,
        "number",
    );
    check_diagnostic(
        "digraph {\n max_restarts=0\n}",
        Rule::AttributeType,
        2,
        2,
        "≥ 1",
    );
    check_diagnostic(
        "digraph {\n a [max_visits=-1]\n}",
        Rule::AttributeType,
        2,
        5,
        "≥ 1",
    );
    check_diagnostic(
        "digraph {\n a [acp_command=\"x 'y\"]\n}",
        Rule::AttributeType,
        2,
        5,
        "balanced quotes",
    );
}

#[test]
fn condition_errors_point_inside_the_value() {
    check_diagnostic(
        "digraph {\n a -> b [condition=\"outcome=success && \"]\n}",
        Rule::ConditionSyntax,
        2,
        37,
        "&&",
    );
    check_diagnostic(
        "digraph {\n a [shape=house, manager.stop_condition=\"(x\"]\n}",
        Rule::ConditionSyntax,
        2,
        42,
        "",
    );
}

#[test]
fn stylesheet_errors_point_inside_the_value() {
    check_diagnostic(
        "digraph {\n model_stylesheet=\"* { modle: x; }\"\n}",
        Rule::StylesheetSyntax,
        2,
        24,
        "modle",
    );
}

#[test]
fn stylesheet_fills_only_unset_properties() {
    let (workflow, diagnostics) = lower_text(
        r#"digraph {
            graph [model_stylesheet="* { model: claude-sonnet-4-5; provider: anthropic } .code { model: claude-opus-4-6; } #critical_review { model: gpt-5.2; reasoning_effort: low } box { backend: cli }"]
            plan
            node [model=pinned]
            implement [class=code]
            critical_review [class=code, model=""]
            subgraph cluster_x { label="Code"; inner }
        }"#,
    );
    assert!(diagnostics.is_empty(), "{diagnostics:#?}");
    let plan = node(&workflow, "plan");
    assert_eq!(
        plan.llm.stylesheet_model.as_deref(),
        Some("claude-sonnet-4-5")
    );
    assert_eq!(plan.llm.stylesheet_provider.as_deref(), Some("anthropic"));
    assert_eq!(plan.llm.backend, Backend::Cli);
    let implement = node(&workflow, "implement");
    assert_eq!(implement.llm.model(), Some("pinned"));
    assert_eq!(
        implement.llm.stylesheet_model, None,
        "node defaults beat the stylesheet"
    );
    let review = node(&workflow, "critical_review");
    assert_eq!(review.llm.model(), None);
    assert_eq!(review.llm.reasoning_effort, ReasoningEffort::Low);
    let inner = node(&workflow, "inner");
    assert_eq!(&*inner.classes, ["code"]);
}

#[test]
fn stylesheet_values_are_shared_between_nodes() {
    let (workflow, diagnostics) = lower_text(
        r#"digraph {
            graph [model_stylesheet="* { model: claude-sonnet-4-5; provider: anthropic }"]
            a
            b
        }"#,
    );
    assert!(diagnostics.is_empty(), "{diagnostics:#?}");
    let (a, b) = (node(&workflow, "a"), node(&workflow, "b"));
    let model = |node: &Node| node.llm.stylesheet_model.clone().expect("styled model");
    let provider = |node: &Node| {
        node.llm
            .stylesheet_provider
            .clone()
            .expect("styled provider")
    };
    assert_eq!(&*model(a), "claude-sonnet-4-5");
    assert!(Arc::ptr_eq(&model(a), &model(b)), "one allocation per rule");
    assert!(Arc::ptr_eq(&provider(a), &provider(b)));
}

#[test]
fn inline_output_schemas() {
    let (workflow, diagnostics) = lower_text(
        r#"digraph { a [output_schema=routing] b [output_schema="{\"type\":\"object\"}"] c [output_schema="{\"type\": 3}"] }"#,
    );
    assert_eq!(
        node(&workflow, "a").llm.output_schema(),
        Some(&OutputSchema::Routing)
    );
    assert!(matches!(
        node(&workflow, "b").llm.output_schema(),
        Some(OutputSchema::Json(_))
    ));
    assert_eq!(node(&workflow, "c").llm.output_schema(), None);
    assert_eq!(diagnostics.len(), 1);
    assert_eq!(diagnostics[0].rule, Rule::OutputSchemaInvalid);
}

#[test]
fn split_words_follows_posix_quoting() {
    let check = |text: &str, expected: Option<&[&str]>| {
        let words = split_words(text);
        let words: Option<Vec<&str>> = words
            .as_ref()
            .map(|w| w.iter().map(String::as_str).collect());
        assert_eq!(words.as_deref(), expected, "{text:?}");
    };
    check("a b  c", Some(&["a", "b", "c"]));
    check(r#"a "b c" 'd e'"#, Some(&["a", "b c", "d e"]));
    check(r#"a\ b "x\"y" '\n'"#, Some(&["a b", "x\"y", "\\n"]));
    check(r#"""  x"#, Some(&["", "x"]));
    check("'open", None);
    check("", Some(&[]));
}

#[test]
fn node_classes_keep_first_occurrences_in_order() {
    assert_eq!(
        super::node_classes(Some("b, a,b , c,,a, d, c")),
        ["b", "a", "c", "d"]
    );
    assert_eq!(super::node_classes(Some("x")), ["x"]);
    assert!(super::node_classes(Some("")).is_empty());
    assert!(super::node_classes(None).is_empty());
}

#[test]
fn derived_classes_follow_explicit_ones_per_node() {
    let (workflow, diagnostics) = lower_text(
        r#"digraph {
            x
            subgraph cluster_a { label = "Review"; a [class="fast,review"]; y }
            z
            subgraph cluster_b { label = "Loop"; subgraph cluster_c { label = "Inner"; a; b } }
        }"#,
    );
    assert!(diagnostics.is_empty(), "{diagnostics:#?}");
    let classes = |id: &str| node(&workflow, id).classes.to_vec();
    assert_eq!(classes("x"), Vec::<String>::new());
    assert_eq!(classes("a"), ["fast", "review", "loop", "inner"]);
    assert_eq!(classes("y"), ["review"]);
    assert_eq!(classes("z"), Vec::<String>::new());
    assert_eq!(classes("b"), ["loop", "inner"]);
}

/// SPEC 19: `mcp_servers`, `skills`, `tools` and `web`; an unknown tool set is an
/// `attribute_type` error at its line and column.
#[test]
fn agent_extension_attributes_are_typed() {
    let (workflow, diagnostics) = lower_text(
        r#"digraph { a [mcp_servers="files, tracker", skills="", tools="read-only", web="true"] b }"#,
    );
    assert!(diagnostics.is_empty(), "{diagnostics:#?}");
    let a = &node(&workflow, "a").llm;
    assert_eq!(
        a.mcp_servers(),
        Some(&["files".to_owned(), "tracker".to_owned()][..])
    );
    assert_eq!(a.skills(), Some(&[][..]));
    assert_eq!(a.tools(), ToolSet::ReadOnly);
    assert_eq!(a.web(), Some(true));
    let b = &node(&workflow, "b").llm;
    assert_eq!(
        (b.mcp_servers(), b.skills(), b.tools(), b.web()),
        (None, None, ToolSet::Full, None)
    );
    check_diagnostic(
        "digraph {\n a [tools=\"admin\"]\n}",
        Rule::AttributeType,
        2,
        5,
        "read-only, read-write or full",
    );
}
