//! `all_conditional_edges`: a node other than exit should have an unconditional fallback
//! edge among its outgoing edges (SPEC 3.2, 4.5).

use super::Lint;
use crate::diagnostic::{Diagnostic, Rule};
use crate::model::HandlerKind;

pub(super) fn check(lint: &mut Lint<'_>) {
    let workflow = lint.workflow;
    for index in workflow.node_indices() {
        let node = workflow.node(index);
        if node.handler == HandlerKind::Exit {
            continue;
        }
        let mut outgoing = workflow.outgoing(index).peekable();
        if outgoing.peek().is_none() || outgoing.any(|(_, edge)| edge.is_unconditional()) {
            continue;
        }
        lint.report(
            Diagnostic::new(
                Rule::AllConditionalEdges,
                format!(
                    "every edge leaving node '{}' has a condition; when none holds the stage has no next edge",
                    node.id
                ),
            )
            .at(node.span)
            .node(&node.id)
            .fix(format!("add an unconditional fallback edge, e.g. {} -> exit", node.id)),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::Rule;
    use crate::lint::test_support::{assert_fires, frame, position};

    #[test]
    fn node_with_fallback_passes() {
        let text = frame("start -> a\n a -> exit [condition=\"outcome=success\"]\n a -> exit");
        assert_fires(Rule::AllConditionalEdges, &text, 0);
    }

    #[test]
    fn only_conditional_edges_warn() {
        let text = frame("start -> a\n a -> exit [condition=\"outcome=success\"]\n a -> a [condition=\"outcome=fail\"]");
        let found = assert_fires(Rule::AllConditionalEdges, &text, 1);
        assert_eq!(found[0].node_id.as_deref(), Some("a"));
        assert_eq!(
            found[0].message,
            "every edge leaving node 'a' has a condition; when none holds the stage has no next edge"
        );
        assert_eq!(position(&text, &found[0]), (4, 10));
    }

    #[test]
    fn nodes_without_outgoing_edges_pass() {
        assert_fires(
            Rule::AllConditionalEdges,
            &frame("start -> exit\n dangling"),
            0,
        );
    }
}
