//! `random_selection_no_conditions`: a node with `selection="random"` must not have
//! conditional outgoing edges (SPEC 3.2, 4.5).

use super::Lint;
use crate::diagnostic::{Diagnostic, Rule};
use crate::model::Selection;

pub(super) fn check(lint: &mut Lint<'_>) {
    let workflow = lint.workflow;
    // Only a `selection` attribute makes a node's selection random.
    if !workflow.may_have_key("selection") {
        return;
    }
    for index in workflow.node_indices() {
        let node = workflow.node(index);
        if node.selection != Selection::Random {
            continue;
        }
        for (edge_index, edge) in workflow.outgoing(index) {
            let Some(condition) = &edge.condition else {
                continue;
            };
            let to = &workflow.node(edge.to).id;
            lint.report(
                Diagnostic::new(
                    Rule::RandomSelectionNoConditions,
                    format!(
                        "edge {} -> {to} has condition \"{}\", but node '{}' uses selection=\"random\"",
                        node.id,
                        condition.to_string().escape_debug(),
                        node.id
                    ),
                )
                .at(workflow.edge_from_span(edge_index))
                .edge(&node.id, to)
                .fix("remove the condition, or use selection=\"deterministic\""),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::Rule;
    use crate::lint::test_support::{assert_fires, frame, position};

    #[test]
    fn random_selection_with_unconditional_edges_passes() {
        let text = frame("a [selection=random]\n start -> a\n a -> exit [weight=3]\n a -> b\n b -> exit [condition=\"outcome=success\"]");
        assert_fires(Rule::RandomSelectionNoConditions, &text, 0);
    }

    #[test]
    fn conditional_edge_of_random_node_fails() {
        let text = frame("a [selection=random]\n start -> a\n a -> exit\n a -> b [condition=\"outcome=fail\"]\n b -> exit");
        let found = assert_fires(Rule::RandomSelectionNoConditions, &text, 1);
        assert_eq!(
            found[0].message,
            "edge a -> b has condition \"outcome=fail\", but node 'a' uses selection=\"random\""
        );
        assert_eq!(position(&text, &found[0]), (7, 2));
    }
}
