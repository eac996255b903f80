//! Tests of the DOT parser: statements, scoping, errors and never-panic properties.

use super::*;
use crate::span::LineIndex;
use crate::syntax::SyntaxNode;

fn parse_ok(text: &str) -> SyntaxGraph {
    match parse(text) {
        Ok(graph) => graph,
        Err(diagnostic) => panic!("unexpected parse error: {diagnostic:?}"),
    }
}

/// Asserts that `text` fails at 1-based `line`:`column` with a message containing `needle`.
fn check_error(text: &str, line: u32, column: u32, needle: &str) {
    let diagnostic = parse(text).expect_err("input must be rejected");
    assert_eq!(diagnostic.rule, Rule::ParseError);
    assert!(
        diagnostic.message.contains(needle),
        "message {:?} lacks {needle:?}",
        diagnostic.message
    );
    let span = diagnostic.span.expect("parse errors carry a span");
    let index = LineIndex::new(text);
    assert_eq!(
        index.position(text, span.start),
        (line, column),
        "position of {:?}",
        diagnostic.message
    );
}

fn node<'g>(graph: &'g SyntaxGraph, id: &str) -> &'g SyntaxNode {
    let index = graph.node_index(id).expect("node exists");
    &graph.nodes[index]
}

fn derived<'g>(graph: &'g SyntaxGraph, id: &str) -> Vec<&'g str> {
    let index = graph.node_index(id).expect("node exists");
    graph.derived_classes_of(index).collect()
}

#[test]
fn chained_edges_share_attributes_and_keep_order() {
    let graph = parse_ok("digraph G { a -> b -> c [label=\"x\", weight=2] c -> a }");
    assert_eq!(graph.id.as_deref(), Some("G"));
    let pairs: Vec<_> = graph
        .edges
        .iter()
        .map(|e| {
            (
                graph.nodes[e.from].id.as_str(),
                graph.nodes[e.to].id.as_str(),
            )
        })
        .collect();
    assert_eq!(pairs, [("a", "b"), ("b", "c"), ("c", "a")]);
    for edge in &graph.edges[..2] {
        assert_eq!(edge.attributes.value("label"), Some("x"));
        assert_eq!(edge.attributes.value("weight"), Some("2"));
    }
    assert!(graph.edges[2].attributes.is_empty());
    assert!(graph.nodes.iter().all(|n| !n.declared));
}

#[test]
fn defaults_are_scoped_to_subgraphs() {
    let graph = parse_ok(
        "digraph {
            node [shape=box, timeout=5s]
            edge [weight=1]
            a
            subgraph inner {
                node [shape=tab]
                edge [weight=7]
                b
                b -> c
            }
            d
            d -> e
        }",
    );
    assert_eq!(node(&graph, "a").attributes.value("shape"), Some("box"));
    assert_eq!(node(&graph, "b").attributes.value("shape"), Some("tab"));
    assert_eq!(node(&graph, "b").attributes.value("timeout"), Some("5s"));
    assert_eq!(node(&graph, "c").attributes.value("shape"), Some("tab"));
    assert_eq!(node(&graph, "d").attributes.value("shape"), Some("box"));
    assert_eq!(graph.edges[0].attributes.value("weight"), Some("7"));
    assert_eq!(graph.edges[1].attributes.value("weight"), Some("1"));
}

#[test]
fn statement_attributes_override_defaults_and_merge() {
    let graph =
        parse_ok("digraph { node [shape=box, label=d] a [label=one] a [prompt=p] a [label=two] }");
    let a = node(&graph, "a");
    assert_eq!(a.attributes.value("shape"), Some("box"));
    assert_eq!(a.attributes.value("label"), Some("two"));
    assert_eq!(a.attributes.value("prompt"), Some("p"));
    assert!(a.declared);
}

#[test]
fn defaults_apply_when_a_node_is_created_by_an_edge() {
    let graph = parse_ok("digraph { a -> b node [shape=tab] b -> c }");
    assert_eq!(node(&graph, "b").attributes.value("shape"), None);
    assert_eq!(node(&graph, "c").attributes.value("shape"), Some("tab"));
}

#[test]
fn subgraph_labels_derive_classes_outermost_first() {
    let graph = parse_ok(
        r#"digraph {
            x
            subgraph cluster_outer {
                a
                subgraph cluster_inner {
                    label = "Inner Loop!"
                    b
                    a -> c
                }
                label = "Loop A"
            }
            x -> a
        }"#,
    );
    assert_eq!(derived(&graph, "a"), ["loop-a"]);
    assert_eq!(derived(&graph, "b"), ["loop-a", "inner-loop"]);
    assert_eq!(derived(&graph, "c"), ["loop-a", "inner-loop"]);
    assert!(derived(&graph, "x").is_empty());
    assert_eq!(graph.attributes.value("label"), None);
}

#[test]
fn derived_classes_of_sibling_subgraphs_keep_closing_order() {
    let graph = parse_ok(
        r#"digraph {
            subgraph cluster_one { label = "Zeta"; a; b }
            subgraph cluster_two { label = "Alpha"; b; a; c }
            subgraph cluster_three { label = "zeta"; a }
        }"#,
    );
    assert_eq!(derived(&graph, "a"), ["zeta", "alpha"]);
    assert_eq!(derived(&graph, "b"), ["zeta", "alpha"]);
    assert_eq!(derived(&graph, "c"), ["alpha"]);
}

#[test]
fn graph_attributes_from_blocks_and_assignments_later_wins() {
    let graph = parse_ok("digraph { graph [goal=\"one\", rankdir=LR] goal = \"two\"; }");
    assert_eq!(graph.attributes.value("goal"), Some("two"));
    assert_eq!(graph.attributes.value("rankdir"), Some("LR"));
}

#[test]
fn strings_resolve_escapes_and_continuations() {
    let graph =
        parse_ok("digraph { a [prompt=\"say \\\"hi\\\"\\n\\tdone \\\\ \\d long\\\nline\"] }");
    assert_eq!(
        node(&graph, "a").attributes.value("prompt"),
        Some("say \"hi\"\n\tdone \\ \\d longline")
    );
}

#[test]
fn values_keep_their_literal_spelling() {
    let graph = parse_ok(
        "digraph { a [model=gpt-5.2, timeout=900s, weight=-1, w=0.5, f=summary:high, human.default_choice=yes, ok=true, n=.5] }",
    );
    let attributes = &node(&graph, "a").attributes;
    assert_eq!(attributes.value("model"), Some("gpt-5.2"));
    assert_eq!(attributes.value("timeout"), Some("900s"));
    assert_eq!(attributes.value("weight"), Some("-1"));
    assert_eq!(attributes.value("w"), Some("0.5"));
    assert_eq!(attributes.value("f"), Some("summary:high"));
    assert_eq!(attributes.value("human.default_choice"), Some("yes"));
    assert_eq!(attributes.value("n"), Some(".5"));
}

#[test]
fn keywords_are_case_insensitive_and_comments_ignored() {
    let graph = parse_ok(
        "// leading\nDiGraph /* c */ g { NODE [shape=box] /* multi\nline */ a -> b // tail\n }",
    );
    assert_eq!(graph.nodes.len(), 2);
    assert_eq!(node(&graph, "a").attributes.value("shape"), Some("box"));
}

#[test]
fn quoted_ids_and_anonymous_subgraphs() {
    let graph = parse_ok("digraph { \"node\" -> b; { c } }");
    assert!(node(&graph, "node").quoted);
    assert!(node(&graph, "c").declared);
}

#[test]
fn attribute_spans_point_at_key_and_value() {
    let text = "digraph {\n  a [max_retries=\"x\"]\n}";
    let graph = parse_ok(text);
    let attribute = node(&graph, "a")
        .attributes
        .get("max_retries")
        .expect("set");
    assert_eq!(&text[attribute.key_span.range()], "max_retries");
    assert_eq!(&text[attribute.value_span.range()], "\"x\"");
    assert!(attribute.is_quoted(text));
    let bare = node(&graph, "a").attributes.get("max_retries");
    assert!(bare.is_some_and(|attribute| attribute.is_quoted(text)));
    let text = "digraph {\n  a [max_retries=x, label=\"\"]\n}";
    let graph = parse_ok(text);
    let attributes = &node(&graph, "a").attributes;
    assert!(attributes
        .get("max_retries")
        .is_some_and(|attribute| !attribute.is_quoted(text)));
    assert!(attributes
        .get("label")
        .is_some_and(|attribute| attribute.is_quoted(text)));
}

#[test]
fn syntax_errors_have_positions() {
    check_error(
        "digraph {\n  a [label=\"open\n}",
        2,
        12,
        "unterminated string",
    );
    check_error("digraph {\n  a [label=x\n  b -> c\n}", 3, 3, "']'");
    check_error("digraph {\n  a [label=x\n", 2, 5, "missing ']'");
    check_error("digraph {\n  a -- b\n}", 2, 5, "'--'");
    check_error("strict digraph { a }", 1, 1, "strict");
    check_error("graph { a }", 1, 1, "undirected");
    check_error("digraph { a }\ndigraph { b }", 2, 1, "exactly one graph");
    check_error(
        "digraph {\n  a [timeout=5x]\n}",
        2,
        14,
        "invalid value '5x'",
    );
    check_error("digraph { a [label=<b>] }", 1, 20, "HTML");
    check_error(
        "digraph { a [label=\"a\" + \"b\"] }",
        1,
        24,
        "concatenation",
    );
    check_error("digraph { a:p -> b }", 1, 12, "ports");
    check_error(
        "digraph { {a b} -> c }",
        1,
        17,
        "subgraphs cannot be edge endpoints",
    );
    check_error(
        "digraph { a -> {b c} }",
        1,
        16,
        "subgraphs cannot be edge endpoints",
    );
    check_error("digraph { a [label] }", 1, 14, "expected '='");
    check_error("digraph { a [label=] }", 1, 20, "missing value");
    check_error("digraph { a", 1, 9, "missing '}'");
    check_error("digraph { a } }", 1, 15, "unexpected text");
    check_error("", 1, 1, "empty workflow");
    check_error("  /* never closed", 1, 3, "unterminated block comment");
    check_error("digraph { \"a b\" }", 1, 11, "must be an identifier");
    check_error("digraph { a -> node }", 1, 16, "keyword");
    check_error("digraph { 1 -> 2 }", 1, 11, "must start with a letter");
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let text = format!("digraph {{ {} }}", "{".repeat(10_000));
    let diagnostic = parse(&text).expect_err("too deep");
    assert!(diagnostic.message.contains("nested"));
}

#[test]
fn class_derivation_rules() {
    assert_eq!(derive_class("Loop A").as_deref(), Some("loop-a"));
    assert_eq!(derive_class("Déjà vu 2").as_deref(), Some("dj-vu-2"));
    assert_eq!(derive_class("!!!"), None);
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    const SAMPLE: &str = r#"digraph G {
        graph [goal="ship it", model_stylesheet="* { model: x; }"]
        node [shape=box]
        start [shape=Mdiamond]
        exit [shape=Msquare]
        subgraph cluster_a { label="Loop A"; work [prompt="do \"it\"", timeout=90s] }
        start -> work -> exit [condition="outcome=success", weight=2]
        work -> work [label="[R] Retry"]
    }"#;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
            check_spans(&text);
        }

        #[test]
        fn mutated_workflows_never_panic(
            position in 0usize..SAMPLE.len(),
            length in 0usize..20,
            insert in "[{}\\[\\]\"=;,\\-> a-z\\\\/*.:<+]{0,6}",
        ) {
            let mut text = SAMPLE.to_owned();
            let start = floor_boundary(&text, position);
            let end = floor_boundary(&text, (start + length).min(text.len()));
            text.replace_range(start..end, &insert);
            check_spans(&text);
        }
    }

    fn floor_boundary(text: &str, mut index: usize) -> usize {
        while !text.is_char_boundary(index) {
            index -= 1;
        }
        index
    }

    fn check_spans(text: &str) {
        match parse(text) {
            Ok(graph) => {
                for node in &graph.nodes {
                    assert!(text.get(node.span.range()).is_some());
                }
            }
            Err(diagnostic) => {
                let span = diagnostic.span.unwrap_or_default();
                assert!(
                    text.get(span.range()).is_some(),
                    "span {span:?} off boundary"
                );
            }
        }
    }
}
