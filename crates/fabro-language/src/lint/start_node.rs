//! `start_node`: exactly one start node (SPEC 2.8, 3.2).

use super::Lint;
use crate::diagnostic::{Diagnostic, Rule};

pub(super) fn check(lint: &mut Lint<'_>) {
    let candidates = lint.workflow.start_candidates();
    match candidates {
        [] => lint.report(
            Diagnostic::new(Rule::StartNode, "workflow has no start node")
                .fix("add a node with shape=Mdiamond (or id 'start'), e.g. start [shape=Mdiamond]"),
        ),
        [_] => {}
        [_, rest @ ..] => {
            for &extra in rest {
                let node = lint.workflow.node(extra);
                let first = lint.workflow.node(candidates[0]);
                lint.report(
                    Diagnostic::new(
                        Rule::StartNode,
                        format!(
                            "workflow has more than one start node: '{}' and '{}'",
                            first.id, node.id
                        ),
                    )
                    .at(node.span)
                    .node(&node.id),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::Rule;
    use crate::lint::test_support::{assert_fires, frame};

    #[test]
    fn one_start_node_passes() {
        assert_fires(Rule::StartNode, &frame("start -> exit"), 0);
        assert_fires(Rule::StartNode, "digraph { start -> exit }", 0);
    }

    #[test]
    fn missing_start_node_fails() {
        let found = assert_fires(Rule::StartNode, "digraph { a -> exit }", 1);
        assert_eq!(found[0].message, "workflow has no start node");
        assert!(found[0].span.is_none());
    }

    #[test]
    fn two_start_nodes_fail() {
        let found = assert_fires(
            Rule::StartNode,
            &frame("second [shape=Mdiamond]\n start -> exit\n second -> exit"),
            1,
        );
        assert_eq!(found[0].node_id.as_deref(), Some("second"));
    }
}
