//! `thread_id_requires_fidelity_full`: thread keys only matter under `full` fidelity
//! (SPEC 6.4, 6.5), so a `thread_id` or `default_thread` where the resolved fidelity can
//! never be `full` has no effect (SPEC 3.2).
//!
//! The fidelity of a node about to run is, first match wins: the `fidelity` of the edge
//! just traversed, the node's own, the graph's `default_fidelity`, `compact`. Invalid
//! values count as unset, as they do at run time.

use super::Lint;
use crate::diagnostic::{Diagnostic, Rule};
use crate::model::{Edge, Fidelity, Node, Workflow};

pub(super) fn check(lint: &mut Lint<'_>) {
    let workflow = lint.workflow;
    let graph_full = workflow.settings.default_fidelity == Some(Fidelity::Full);
    let mut any_full = graph_full;
    let default_thread = workflow.settings.default_thread.is_some();
    for index in workflow.node_indices() {
        let node = workflow.node(index);
        // Only a thread key, or a graph default thread not yet known to be useful, needs
        // the answer; skipping the rest keeps the rule from walking every incoming list.
        if node.llm.thread_id().is_none() && (any_full || !default_thread) {
            continue;
        }
        let entered_full = workflow
            .incoming(index)
            .any(|(_, edge)| edge.fidelity == Some(Fidelity::Full));
        // Without an edge fidelity (or entering without an edge, e.g. a retry jump) the
        // node's own fidelity, then the graph default, decides.
        let can_be_full = entered_full || own_fidelity_full(node, graph_full);
        any_full |= can_be_full;
        if node.llm.thread_id().is_some() && !can_be_full {
            report_node(lint, node);
        }
    }
    for edge in workflow.edges() {
        if edge.thread_id().is_some() && !edge_enters_full(workflow, edge, graph_full) {
            report_edge(lint, edge);
        }
    }
    if workflow.settings.default_thread.is_some() && !any_full {
        report_graph(lint);
    }
}

/// Whether the node runs with `full` fidelity when no edge fidelity applies.
fn own_fidelity_full(node: &Node, graph_full: bool) -> bool {
    match node.llm.fidelity {
        Some(fidelity) => fidelity == Fidelity::Full,
        None => graph_full,
    }
}

/// Whether the target runs with `full` fidelity when entered through `edge`.
fn edge_enters_full(workflow: &Workflow, edge: &Edge, graph_full: bool) -> bool {
    match edge.fidelity {
        Some(fidelity) => fidelity == Fidelity::Full,
        None => own_fidelity_full(workflow.node(edge.to), graph_full),
    }
}

const FIX: &str =
    "set fidelity=\"full\" where the thread should continue, or remove the thread key";

fn report_node(lint: &mut Lint<'_>, node: &Node) {
    let Some(attribute) = node.attributes.get("thread_id") else {
        return;
    };
    lint.report(
        Diagnostic::new(
            Rule::ThreadIdRequiresFidelityFull,
            format!(
                "node '{}' sets thread_id \"{}\", but its fidelity can never be full, so the thread is never used",
                node.id,
                attribute.value.escape_debug()
            ),
        )
        .at(attribute.key_span)
        .node(&node.id)
        .fix(FIX),
    );
}

fn report_edge(lint: &mut Lint<'_>, edge: &Edge) {
    let Some(attribute) = edge.attributes.get("thread_id") else {
        return;
    };
    let from = &lint.workflow.node(edge.from).id;
    let to = &lint.workflow.node(edge.to).id;
    lint.report(
        Diagnostic::new(
            Rule::ThreadIdRequiresFidelityFull,
            format!(
                "edge {from} -> {to} sets thread_id \"{}\", but '{to}' entered through it never has fidelity full, so the thread is never used",
                attribute.value.escape_debug()
            ),
        )
        .at(attribute.key_span)
        .edge(from, to)
        .fix(FIX),
    );
}

fn report_graph(lint: &mut Lint<'_>) {
    let Some(attribute) = lint
        .workflow
        .attributes
        .get_any(&["default_thread", "context_thread_default"])
    else {
        return;
    };
    lint.report(
        Diagnostic::new(
            Rule::ThreadIdRequiresFidelityFull,
            format!(
                "graph {} \"{}\" is never used: no node can run with fidelity full",
                attribute.key,
                attribute.value.escape_debug()
            ),
        )
        .at(attribute.key_span)
        .fix(FIX),
    );
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::Rule;
    use crate::lint::test_support::{assert_fires, frame, position};

    #[test]
    fn threads_that_can_be_full_pass() {
        let text = frame(
            "default_thread=main\n a [thread_id=t, fidelity=full]\n b [thread_id=t]\n c [thread_id=t, fidelity=compact]\n start -> a -> b [fidelity=full]\n b -> c [fidelity=full, thread_id=u]\n c -> exit",
        );
        assert_fires(Rule::ThreadIdRequiresFidelityFull, &text, 0);
        let text =
            frame("default_fidelity=full\n a [thread_id=t]\n start -> a [thread_id=u]\n a -> exit");
        assert_fires(Rule::ThreadIdRequiresFidelityFull, &text, 0);
    }

    #[test]
    fn node_thread_without_full_fidelity_warns() {
        let text = frame("a [thread_id=t, fidelity=compact]\n b [thread_id=t]\n start -> a -> b [fidelity=truncate]\n b -> exit");
        let found = assert_fires(Rule::ThreadIdRequiresFidelityFull, &text, 2);
        assert_eq!(
            found[0].message,
            "node 'a' sets thread_id \"t\", but its fidelity can never be full, so the thread is never used"
        );
        assert_eq!(position(&text, &found[0]), (4, 4));
        assert_eq!(found[1].node_id.as_deref(), Some("b"));
    }

    #[test]
    fn edge_thread_into_non_full_target_warns() {
        let text = frame("a [fidelity=full]\n start -> a [thread_id=t, fidelity=compact]\n a -> exit [thread_id=t]");
        let found = assert_fires(Rule::ThreadIdRequiresFidelityFull, &text, 2);
        assert_eq!(
            found[0].message,
            "edge start -> a sets thread_id \"t\", but 'a' entered through it never has fidelity full, so the thread is never used"
        );
        assert_eq!(position(&text, &found[0]), (5, 14));
        let edge = found[1].edge.as_ref().expect("edge");
        assert_eq!((edge.from.as_str(), edge.to.as_str()), ("a", "exit"));
    }

    #[test]
    fn default_thread_without_any_full_node_warns() {
        let text = frame("context_thread_default=main\n start -> a -> exit");
        let found = assert_fires(Rule::ThreadIdRequiresFidelityFull, &text, 1);
        assert_eq!(
            found[0].message,
            "graph context_thread_default \"main\" is never used: no node can run with fidelity full"
        );
        assert_eq!(position(&text, &found[0]), (4, 1));
        assert_eq!(found[0].node_id, None);
    }
}
