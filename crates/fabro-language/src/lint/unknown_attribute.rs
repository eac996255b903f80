//! `unknown_attribute`: a graph, node or edge attribute that SPEC 2.9–2.11 does not
//! define for that element and that is not a Graphviz presentation attribute (SPEC
//! 17.6). Such attributes are kept and rendered but never read, so a misspelt `promt=`
//! or `scrpit=` silently does nothing; the message suggests the nearest known attribute
//! within edit distance 2.
//!
//! Cost: the distinct keys of the file are classified once; elements are walked only
//! when some key is unknown to their kind, and each attribute is then compared by
//! address with those few interned keys.

use std::collections::HashSet;
use std::sync::Arc;

use super::Lint;
use crate::diagnostic::{Diagnostic, Rule};
use crate::lower::NODE_KEYS;
use crate::span::Span;
use crate::syntax::{Attribute, Attributes};

/// Graph attributes and aliases (SPEC 2.9), as lowering reads them; lowering also reads
/// `stack.child_workflow` beside `stack.child_dotfile` at the graph level.
const GRAPH_KEYS: &[&str] = &[
    "goal",
    "label",
    "model_stylesheet",
    "default_max_retries",
    "default_max_retry",
    "retry_target",
    "fallback_retry_target",
    "default_fidelity",
    "context_fidelity_default",
    "default_thread",
    "context_thread_default",
    "default_model",
    "default_provider",
    "max_node_visits",
    "stall_timeout",
    "loop_restart_signature_limit",
    "max_restarts",
    "rankdir",
    "stack.child_dotfile",
    "stack.child_workflow",
];

/// Edge attributes (SPEC 2.11).
const EDGE_KEYS: &[&str] = &[
    "label",
    "condition",
    "weight",
    "fidelity",
    "thread_id",
    "loop_restart",
    "freeform",
];

/// Graphviz presentation attributes accepted on every element (SPEC 17.6).
const PRESENTATION_KEYS: &[&str] = &[
    "color",
    "fillcolor",
    "fontcolor",
    "fontname",
    "fontsize",
    "style",
    "penwidth",
    "margin",
    "width",
    "height",
    "fixedsize",
    "rank",
    "rankdir",
    "splines",
    "nodesep",
    "ranksep",
    "tooltip",
    "URL",
    "xlabel",
    "arrowhead",
    "arrowtail",
    "dir",
    "constraint",
    "labelloc",
    "labeljust",
    "compound",
    "concentrate",
    "bgcolor",
    "pad",
    "ratio",
    "size",
    "dpi",
    "peripheries",
    "group",
];

/// The kinds of element attributes belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Element {
    Graph,
    Node,
    Edge,
}

impl Element {
    const ALL: [Element; 3] = [Element::Graph, Element::Node, Element::Edge];

    /// The attributes SPEC 2.9–2.11 define for this kind of element.
    fn keys(self) -> &'static [&'static str] {
        match self {
            Element::Graph => GRAPH_KEYS,
            Element::Node => &NODE_KEYS,
            Element::Edge => EDGE_KEYS,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Element::Graph => "a graph",
            Element::Node => "a node",
            Element::Edge => "an edge",
        }
    }

    fn knows(self, key: &str) -> bool {
        self.keys().contains(&key) || PRESENTATION_KEYS.contains(&key)
    }
}

pub(super) fn check(lint: &mut Lint<'_>) {
    // The file's distinct keys that each kind of element does not know.
    let suspects = |element: Element| -> Vec<&Arc<str>> {
        lint.workflow
            .attribute_keys()
            .iter()
            .filter(|key| !element.knows(key))
            .collect()
    };
    let [graph, node, edge] = Element::ALL.map(suspects);
    if graph.is_empty() && node.is_empty() && edge.is_empty() {
        return;
    }
    let workflow = lint.workflow;
    let mut found = Found::default();
    if !graph.is_empty() {
        found.scan(Element::Graph, &workflow.attributes, &graph, None);
    }
    if !node.is_empty() {
        for each in workflow.nodes() {
            found.scan(Element::Node, &each.attributes, &node, Some(&each.id));
        }
    }
    if !edge.is_empty() {
        for each in workflow.edges() {
            found.scan(Element::Edge, &each.attributes, &edge, None);
        }
    }
    for (element, attribute, node) in found.attributes {
        let diagnostic = unknown(element, attribute).at(attribute.key_span);
        lint.report(match node {
            Some(node) => diagnostic.node(node),
            None => diagnostic,
        });
    }
}

/// Unknown attributes in the order found.
#[derive(Default)]
struct Found<'w> {
    attributes: Vec<(Element, &'w Attribute, Option<&'w str>)>,
    /// Defaults put one attribute on many elements: it is reported once, where written.
    seen: HashSet<Span>,
}

impl<'w> Found<'w> {
    /// Records the attributes of one element whose key is among `suspects`.
    fn scan(
        &mut self,
        element: Element,
        attributes: &'w Attributes,
        suspects: &[&Arc<str>],
        node: Option<&'w str>,
    ) {
        for attribute in attributes {
            // Keys are interned per file (one shared string per distinct key, the same
            // ones the key set holds), so a pointer comparison identifies the key.
            if suspects.iter().any(|key| Arc::ptr_eq(key, &attribute.key))
                && self.seen.insert(attribute.key_span)
            {
                self.attributes.push((element, attribute, node));
            }
        }
    }
}

/// The diagnostic for `attribute` on an `element`, with a suggestion when one fits.
fn unknown(element: Element, attribute: &Attribute) -> Diagnostic {
    let key = &*attribute.key;
    let mut message = format!("unknown attribute '{}'", key.escape_debug());
    // An attribute of another kind of element: say where it belongs rather than
    // suggesting a lookalike.
    let owners: Vec<&str> = Element::ALL
        .into_iter()
        .filter(|other| other.keys().contains(&key))
        .map(Element::name)
        .collect();
    if !owners.is_empty() {
        return Diagnostic::new(Rule::UnknownAttribute, message).fix(format!(
            "'{key}' is an attribute of {}, not of {}; it is ignored here",
            owners.join(" or "),
            element.name()
        ));
    }
    let suggestion = element
        .keys()
        .iter()
        .chain(PRESENTATION_KEYS)
        .map(|known| (edit_distance(key, known), *known))
        .filter(|(distance, _)| *distance <= 2)
        .min_by_key(|(distance, _)| *distance);
    match suggestion {
        Some((_, known)) => {
            message.push_str(&format!("; did you mean '{known}'?"));
            Diagnostic::new(Rule::UnknownAttribute, message).fix(format!("rename it to '{known}'"))
        }
        None => Diagnostic::new(Rule::UnknownAttribute, message).fix(
            "fabro ignores it; remove it, or check the attribute tables of the workflow language",
        ),
    }
}

/// Edit distance counting insertions, deletions, substitutions and transpositions of
/// adjacent characters as one edit each (optimal string alignment), so that `scrpit` is
/// one edit from `script`.
pub(super) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // Three rows of the dynamic programme: two back, previous and current.
    let mut two_back: Vec<usize> = vec![0; b.len() + 1];
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current: Vec<usize> = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        current[0] = i;
        for j in 1..=b.len() {
            let substitution = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (previous[j] + 1)
                .min(current[j - 1] + 1)
                .min(previous[j - 1] + substitution);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(two_back[j - 2] + 1);
            }
            current[j] = best;
        }
        std::mem::swap(&mut two_back, &mut previous);
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::{edit_distance, EDGE_KEYS, GRAPH_KEYS, NODE_KEYS, PRESENTATION_KEYS};
    use crate::diagnostic::Rule;
    use crate::lint::test_support::{assert_fires, frame, position};

    #[test]
    fn edit_distance_counts_transpositions_once() {
        assert_eq!(edit_distance("promt", "prompt"), 1);
        assert_eq!(edit_distance("scrpit", "script"), 1);
        assert_eq!(edit_distance("script", "script"), 0);
        assert_eq!(edit_distance("", "dir"), 3);
        assert_eq!(edit_distance("lable", "label"), 1);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("modle", "model"), 1);
    }

    #[test]
    fn typos_warn_at_the_key_with_a_suggestion() {
        let text = frame(
            " a [label=\"A\", promt=\"Do it\"]\n b [shape=parallelogram, scrpit=\"make\"]\n start -> a -> b -> exit",
        );
        let found = assert_fires(Rule::UnknownAttribute, &text, 2);
        assert_eq!(
            found[0].message,
            "unknown attribute 'promt'; did you mean 'prompt'?"
        );
        assert_eq!(found[0].node_id.as_deref(), Some("a"));
        assert_eq!(position(&text, &found[0]), (4, 16));
        assert_eq!(
            found[1].message,
            "unknown attribute 'scrpit'; did you mean 'script'?"
        );
        assert_eq!(position(&text, &found[1]), (5, 26));
    }

    #[test]
    fn every_attribute_of_the_spec_tables_and_presentation_is_known() {
        let mut body = String::new();
        for key in GRAPH_KEYS.iter().chain(PRESENTATION_KEYS) {
            body.push_str(&format!(" \"{key}\"=\"x\"\n"));
        }
        let node: Vec<String> = NODE_KEYS
            .iter()
            .chain(PRESENTATION_KEYS)
            .map(|key| format!("\"{key}\"=\"x\""))
            .collect();
        let edge: Vec<String> = EDGE_KEYS
            .iter()
            .chain(PRESENTATION_KEYS)
            .map(|key| format!("\"{key}\"=\"x\""))
            .collect();
        body.push_str(&format!(
            " a [{}]\n start -> a [{}]\n a -> exit",
            node.join(", "),
            edge.join(", ")
        ));
        assert_fires(Rule::UnknownAttribute, &frame(&body), 0);
    }

    #[test]
    fn the_node_keys_cover_spec_2_10_and_the_legacy_aliases() {
        for key in [
            "label",
            "shape",
            "type",
            "node_type",
            "codergen_mode",
            "class",
            "timeout",
            "max_retries",
            "retry_policy",
            "max_visits",
            "retry_target",
            "fallback_retry_target",
            "goal_gate",
            "auto_status",
            "allow_partial",
            "selection",
            "prompt",
            "llm_prompt",
            "model",
            "llm_model",
            "provider",
            "llm_provider",
            "reasoning_effort",
            "max_tokens",
            "backend",
            "fidelity",
            "thread_id",
            "project_memory",
            "max_turns",
            "max_agent_turns",
            "output_schema",
            "output_retries",
            "write_scope",
            "acp_command",
            "script",
            "tool_command",
            "language",
            "human.default_choice",
            "join_policy",
            "max_parallel",
            "duration",
            "stack.child_workflow",
            "stack.child_dotfile",
            "stack.child_workdir",
            "stack.child_autostart",
            "manager.poll_interval",
            "manager.max_cycles",
            "manager.stop_condition",
            "manager.actions",
        ] {
            assert!(NODE_KEYS.contains(&key), "{key}");
        }
    }

    #[test]
    fn graph_and_edge_typos_are_reported_too() {
        let text = frame(" gaol=\"Ship\"\n start -> exit [wieght=2, colour=red]");
        let found = assert_fires(Rule::UnknownAttribute, &text, 3);
        let messages: Vec<&str> = found.iter().map(|d| d.message.as_str()).collect();
        assert!(
            messages.contains(&"unknown attribute 'gaol'; did you mean 'goal'?"),
            "{messages:?}"
        );
        assert!(
            messages.contains(&"unknown attribute 'wieght'; did you mean 'weight'?"),
            "{messages:?}"
        );
        assert!(
            messages.contains(&"unknown attribute 'colour'; did you mean 'color'?"),
            "{messages:?}"
        );
        assert!(found.iter().all(|d| d.node_id.is_none()));
    }

    #[test]
    fn far_from_every_known_attribute_there_is_no_suggestion() {
        let text = frame(" a [label=\"A\", is_codergen=true]\n start -> a -> exit");
        let found = assert_fires(Rule::UnknownAttribute, &text, 1);
        assert_eq!(found[0].message, "unknown attribute 'is_codergen'");
    }

    #[test]
    fn attributes_of_another_element_kind_say_where_they_belong() {
        let text = frame(" a [label=\"A\", weight=2]\n start -> a [prompt=\"x\"]\n a -> exit");
        let found = assert_fires(Rule::UnknownAttribute, &text, 2);
        assert_eq!(found[0].message, "unknown attribute 'weight'");
        assert_eq!(
            found[0].fix.as_deref(),
            Some("'weight' is an attribute of an edge, not of a node; it is ignored here")
        );
        assert_eq!(found[1].message, "unknown attribute 'prompt'");
        assert_eq!(
            found[1].fix.as_deref(),
            Some("'prompt' is an attribute of a node, not of an edge; it is ignored here")
        );
    }

    #[test]
    fn defaults_are_reported_once_where_written() {
        let text = frame(" node [promt=\"x\"]\n edge [wieght=1]\n a\n b\n start -> a -> b -> exit");
        let found = assert_fires(Rule::UnknownAttribute, &text, 2);
        assert_eq!(position(&text, &found[0]), (4, 8));
        assert_eq!(position(&text, &found[1]), (5, 8));
    }

    #[test]
    fn known_keys_only_cost_nothing_and_report_nothing() {
        let text = frame(
            " graph [goal=\"g\", rankdir=LR]\n a [label=\"A\", prompt=\"p\", color=red, style=filled]\n start -> a [label=\"go\", penwidth=2]\n a -> exit",
        );
        assert_fires(Rule::UnknownAttribute, &text, 0);
    }
}
