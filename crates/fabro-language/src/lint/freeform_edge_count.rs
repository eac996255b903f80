//! `freeform_edge_count`: a human gate routes free-text answers along at most one edge
//! (SPEC 3.2, 5.5).

use super::Lint;
use crate::diagnostic::{Diagnostic, Rule};
use crate::model::HandlerKind;

pub(super) fn check(lint: &mut Lint<'_>) {
    let workflow = lint.workflow;
    if !workflow.has_handler(HandlerKind::Human) {
        return;
    }
    for index in workflow.node_indices() {
        let node = workflow.node(index);
        if node.handler != HandlerKind::Human {
            continue;
        }
        let mut freeform = workflow.outgoing(index).filter(|(_, edge)| edge.freeform);
        let Some((_, first)) = freeform.next() else {
            continue;
        };
        let first_target = &workflow.node(first.to).id;
        for (edge_index, edge) in freeform {
            let to = &workflow.node(edge.to).id;
            lint.report(
                Diagnostic::new(
                    Rule::FreeformEdgeCount,
                    format!(
                        "human node '{}' has more than one freeform edge: {} -> {first_target} and {} -> {to}",
                        node.id, node.id, node.id
                    ),
                )
                .at(workflow.edge_from_span(edge_index))
                .edge(&node.id, to)
                .fix(format!("keep freeform=true on one edge leaving '{}'", node.id)),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::Rule;
    use crate::lint::test_support::{assert_fires, frame, position};

    #[test]
    fn one_freeform_edge_passes() {
        let text = frame("gate [shape=hexagon]\n start -> gate\n gate -> exit [label=\"Done\"]\n gate -> a [freeform=true]\n a -> exit");
        assert_fires(Rule::FreeformEdgeCount, &text, 0);
    }

    #[test]
    fn second_freeform_edge_fails() {
        let text = frame("gate [shape=hexagon]\n start -> gate\n gate -> a [freeform=true]\n gate -> b [freeform=true]\n a -> exit\n b -> exit");
        let found = assert_fires(Rule::FreeformEdgeCount, &text, 1);
        assert_eq!(
            found[0].message,
            "human node 'gate' has more than one freeform edge: gate -> a and gate -> b"
        );
        let edge = found[0].edge.as_ref().expect("edge");
        assert_eq!((edge.from.as_str(), edge.to.as_str()), ("gate", "b"));
        assert_eq!(position(&text, &found[0]), (7, 2));
    }

    #[test]
    fn freeform_edges_of_other_nodes_are_ignored() {
        let text = frame("start -> a [freeform=true]\n start -> exit [freeform=true]\n a -> exit");
        assert_fires(Rule::FreeformEdgeCount, &text, 0);
    }
}
