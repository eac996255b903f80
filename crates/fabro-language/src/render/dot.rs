//! Normalised DOT output (SPEC 12.1 `fabro graph --format dot`, and the stored
//! `graph.fabro` of SPEC 4.1).
//!
//! The output is plain DOT that Graphviz accepts and that this crate parses back to the
//! same workflow: defaults applied, chains expanded, subgraphs flattened (their derived
//! classes written into `class`) except that `subgraph cluster…` blocks are kept with
//! their label and member nodes (so Graphviz still draws them), the resolved handler
//! written as `type`, `@path` prompts and schemas inlined, unknown attributes reproduced.
//! Every value is quoted.

use std::fmt::Write;

use crate::model::{Node, OutputSchema, Workflow};
use crate::syntax::Attributes;

/// Renders `workflow` as normalised DOT text.
pub fn render_dot(workflow: &Workflow) -> String {
    let mut out = String::with_capacity(64 * (workflow.nodes().len() + workflow.edges().len()));
    out.push_str("digraph ");
    if let Some(id) = &workflow.id {
        write_id(&mut out, id);
        out.push(' ');
    }
    out.push_str("{\n");
    if !workflow.attributes.is_empty() {
        out.push_str("    graph [");
        write_attributes(
            &mut out,
            workflow
                .attributes
                .iter()
                .map(|a| (a.key.as_ref(), a.value.as_ref())),
        );
        out.push_str("]\n");
    }
    for node in workflow.nodes() {
        out.push_str("    ");
        write_id(&mut out, &node.id);
        out.push_str(" [");
        write_attributes(&mut out, node_attributes(node));
        out.push_str("]\n");
    }
    if !workflow.clusters.is_empty() {
        let mut children = vec![Vec::new(); workflow.clusters.len()];
        let mut top = Vec::new();
        for (position, cluster) in workflow.clusters.iter().enumerate() {
            match cluster.parent.and_then(|parent| children.get_mut(parent)) {
                // A parent always comes first; anything else is written at the top.
                Some(list) if cluster.parent < Some(position) => list.push(position),
                _ => top.push(position),
            }
        }
        write_clusters(&mut out, workflow, &children, &top, 1);
    }
    for edge in workflow.edges() {
        out.push_str("    ");
        write_id(&mut out, &workflow.node(edge.from).id);
        out.push_str(" -> ");
        write_id(&mut out, &workflow.node(edge.to).id);
        if !edge.attributes.is_empty() {
            out.push_str(" [");
            write_attributes(
                &mut out,
                edge.attributes
                    .iter()
                    .map(|a| (a.key.as_ref(), a.value.as_ref())),
            );
            out.push(']');
        }
        out.push('\n');
    }
    out.push_str("}\n");
    out
}

/// Writes `clusters` (positions in [`Workflow::clusters`], all with the same parent) as
/// `subgraph cluster… { label=…; members; nested clusters }` blocks at `depth`;
/// `children` lists each cluster's nested clusters.
///
/// Each node is listed in the innermost cluster that holds it; its attributes are
/// already on its own statement above, so the blocks only carry membership.
fn write_clusters(
    out: &mut String,
    workflow: &Workflow,
    children: &[Vec<usize>],
    clusters: &[usize],
    depth: usize,
) {
    if depth > MAX_CLUSTER_DEPTH {
        return;
    }
    let indent = "    ".repeat(depth);
    for &position in clusters {
        let Some(cluster) = workflow.clusters.get(position) else {
            continue;
        };
        out.push_str(&indent);
        out.push_str("subgraph ");
        write_id(out, &cluster.name);
        out.push_str(" {\n");
        if !cluster.label.is_empty() {
            out.push_str(&indent);
            out.push_str("    label=");
            write_quoted(out, &cluster.label);
            out.push('\n');
        }
        let nested = children.get(position).map_or(&[][..], Vec::as_slice);
        for &node in &cluster.nodes {
            // Member lists are ascending, so membership is a binary search.
            let in_nested = nested
                .iter()
                .any(|&other| workflow.clusters[other].nodes.binary_search(&node).is_ok());
            if in_nested || node.get() >= workflow.nodes().len() {
                continue;
            }
            out.push_str(&indent);
            out.push_str("    ");
            write_id(out, &workflow.node(node).id);
            out.push('\n');
        }
        write_clusters(out, workflow, children, nested, depth + 1);
        out.push_str(&indent);
        out.push_str("}\n");
    }
}

/// Clusters nest at most as deep as the parser accepts subgraphs; the bound keeps
/// the recursion finite whatever the input.
const MAX_CLUSTER_DEPTH: usize = 64;

/// A node's attributes as written, with the resolved handler as `type`, merged classes,
/// and file references replaced by their content.
fn node_attributes(node: &Node) -> impl Iterator<Item = (&str, std::borrow::Cow<'_, str>)> {
    const REPLACED: &[&str] = &[
        "type",
        "node_type",
        "codergen_mode",
        "class",
        "prompt",
        "llm_prompt",
        "output_schema",
    ];
    let kept = node
        .attributes
        .iter()
        .filter(|attribute| !REPLACED.contains(&attribute.key.as_ref()))
        .map(|attribute| {
            (
                attribute.key.as_ref(),
                std::borrow::Cow::Borrowed(attribute.value.as_ref()),
            )
        });
    let mut extra: Vec<(&str, std::borrow::Cow<'_, str>)> = Vec::new();
    extra.push(("type", node.handler.as_str().into()));
    if !node.classes.is_empty() {
        extra.push(("class", node.classes.join(",").into()));
    }
    if has_prompt(&node.attributes) {
        extra.push(("prompt", (&*node.llm.prompt).into()));
    }
    match (
        node.llm.output_schema(),
        node.attributes.value("output_schema"),
    ) {
        (Some(OutputSchema::Routing), _) => extra.push(("output_schema", "routing".into())),
        (Some(OutputSchema::Json(schema)), _) => {
            extra.push(("output_schema", schema.to_string().into()))
        }
        (None, Some(raw)) => extra.push(("output_schema", raw.into())),
        (None, None) => {}
    }
    kept.chain(extra)
}

fn has_prompt(attributes: &Attributes) -> bool {
    attributes.get_any(&["prompt", "llm_prompt"]).is_some()
}

fn write_attributes<'a, V: AsRef<str>>(
    out: &mut String,
    attributes: impl Iterator<Item = (&'a str, V)>,
) {
    for (index, (key, value)) in attributes.enumerate() {
        if index > 0 {
            out.push_str(", ");
        }
        if crate::syntax::is_ident(key) {
            out.push_str(key);
        } else {
            write_quoted(out, key);
        }
        out.push('=');
        write_quoted(out, value.as_ref());
    }
}

fn write_id(out: &mut String, id: &str) {
    if crate::syntax::is_ident(id) && !crate::syntax::is_keyword(id) {
        out.push_str(id);
    } else {
        write_quoted(out, id);
    }
}

/// `text` as a quoted DOT string, exactly as normalised DOT output writes it.
pub fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    write_quoted(&mut out, text);
    out
}

/// Writes a quoted string that both Graphviz and our parser read back as `text`.
fn write_quoted(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => {}
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syntax::parse;

    fn round_trip(text: &str) -> (String, Workflow) {
        let syntax = parse(text).expect("input parses");
        let (workflow, _) = crate::lower::lower(syntax, text);
        let dot = render_dot(&workflow);
        let again =
            parse(&dot).unwrap_or_else(|error| panic!("output must parse: {error:?}\n{dot}"));
        let (reparsed, diagnostics) = crate::lower::lower(again, &dot);
        assert!(diagnostics.is_empty(), "{diagnostics:#?}\n{dot}");
        (dot, reparsed)
    }

    #[test]
    fn expands_chains_applies_defaults_and_writes_types() {
        let (dot, workflow) = round_trip(
            r#"digraph Demo {
                rankdir=LR
                node [shape=box, color=red]
                start [shape=Mdiamond]
                subgraph cluster_a { label="Loop A"; work [prompt="say \"hi\"\nnow", human.default_choice=x] }
                start -> work -> exit [label="go", condition="outcome=success"]
                exit [shape=Msquare]
            }"#,
        );
        assert!(dot.contains("graph [rankdir=\"LR\"]"), "{dot}");
        assert!(dot.contains("work [shape=\"box\", color=\"red\", \"human.default_choice\"=\"x\", type=\"agent\", class=\"loop-a\", prompt=\"say \\\"hi\\\"\\nnow\"]"), "{dot}");
        assert!(dot.contains("start -> work [label=\"go\", condition=\"outcome=success\"]"));
        assert!(dot.contains("work -> exit [label=\"go\""));
        let work = workflow.node(workflow.find("work").expect("work"));
        assert_eq!(&*work.llm.prompt, "say \"hi\"\nnow");
        assert_eq!(&*work.classes, ["loop-a"]);
        assert_eq!(work.attributes.value("color"), Some("red"));
    }

    #[test]
    fn quotes_keyword_ids_and_backslashes() {
        let (dot, workflow) = round_trip(r#"digraph "my graph" { "node" [script="echo \\d \x"] }"#);
        assert!(dot.starts_with("digraph \"my graph\" {"));
        assert!(dot.contains("\"node\" ["));
        let node = workflow.node(workflow.find("node").expect("node"));
        assert_eq!(node.script(), "echo \\d \\x");
    }

    #[test]
    fn keeps_cluster_subgraphs_nested_with_their_labels() {
        let (dot, workflow) = round_trip(
            r#"digraph {
                a
                subgraph cluster_outer {
                    label="Outer"
                    b
                    subgraph "cluster_inner" { c; d -> e }
                    subgraph plain { f }
                }
                subgraph cluster_outer { g }
                a -> b -> c
            }"#,
        );
        assert!(
            dot.contains(
                "    subgraph cluster_outer {\n        label=\"Outer\"\n        b\n        f\n        g\n        subgraph cluster_inner {\n            c\n            d\n            e\n        }\n    }\n"
            ),
            "{dot}"
        );
        let names: Vec<(&str, &str, Option<usize>)> = workflow
            .clusters
            .iter()
            .map(|cluster| (&*cluster.name, &*cluster.label, cluster.parent))
            .collect();
        assert_eq!(
            names,
            [
                ("cluster_outer", "Outer", None),
                ("cluster_inner", "", Some(0))
            ]
        );
        let ids = |cluster: &crate::model::Cluster| -> Vec<String> {
            cluster
                .nodes
                .iter()
                .map(|&node| workflow.node(node).id.clone())
                .collect()
        };
        assert_eq!(ids(&workflow.clusters[0]), ["b", "c", "d", "e", "f", "g"]);
        assert_eq!(ids(&workflow.clusters[1]), ["c", "d", "e"]);
    }
}
