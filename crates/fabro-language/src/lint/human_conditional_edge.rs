//! `human_conditional_edge`: conditional edges of a human gate are not offered as options
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
        for (edge_index, edge) in workflow.outgoing(index) {
            let Some(condition) = &edge.condition else {
                continue;
            };
            let to = &workflow.node(edge.to).id;
            lint.report(
                Diagnostic::new(
                    Rule::HumanConditionalEdge,
                    format!(
                        "edge {} -> {to} leaves human node '{}' with condition \"{}\"; it is not offered as an option",
                        node.id,
                        node.id,
                        condition.to_string().escape_debug()
                    ),
                )
                .at(workflow.edge_from_span(edge_index))
                .edge(&node.id, to)
                .fix("remove the condition to offer the edge as an option, or route through a conditional node"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::Rule;
    use crate::lint::test_support::{assert_fires, frame, position};

    #[test]
    fn unconditional_options_pass() {
        let text = frame("gate [shape=hexagon]\n start -> gate\n gate -> exit [label=\"[A] Approve\"]\n gate -> start2 [label=\"[R] Reject\"]\n start2 -> exit");
        assert_fires(Rule::HumanConditionalEdge, &text, 0);
    }

    #[test]
    fn conditional_edge_of_human_gate_warns() {
        let text = frame("gate [shape=hexagon]\n start -> gate\n gate -> exit [label=\"Approve\"]\n gate -> fix [condition=\"outcome=fail\"]\n fix -> exit");
        let found = assert_fires(Rule::HumanConditionalEdge, &text, 1);
        assert_eq!(
            found[0].message,
            "edge gate -> fix leaves human node 'gate' with condition \"outcome=fail\"; it is not offered as an option"
        );
        assert_eq!(position(&text, &found[0]), (7, 2));
    }

    #[test]
    fn conditional_edges_of_other_nodes_are_ignored() {
        let text = frame("start -> a\n a -> exit [condition=\"outcome=fail\"]\n a -> exit");
        assert_fires(Rule::HumanConditionalEdge, &text, 0);
    }
}
