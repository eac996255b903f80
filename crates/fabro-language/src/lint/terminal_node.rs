//! `terminal_node`: exactly one exit node (SPEC 2.8, 3.2).

use super::Lint;
use crate::diagnostic::{Diagnostic, Rule};

pub(super) fn check(lint: &mut Lint<'_>) {
    let candidates = lint.workflow.exit_candidates();
    match candidates {
        [] => lint.report(
            Diagnostic::new(Rule::TerminalNode, "workflow has no exit node")
                .fix("add a node with shape=Msquare (or id 'exit'), e.g. exit [shape=Msquare]"),
        ),
        [_] => {}
        [_, rest @ ..] => {
            for &extra in rest {
                let node = lint.workflow.node(extra);
                let first = lint.workflow.node(candidates[0]);
                lint.report(
                    Diagnostic::new(
                        Rule::TerminalNode,
                        format!(
                            "workflow has more than one exit node: '{}' and '{}'",
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
    fn one_exit_node_passes() {
        assert_fires(Rule::TerminalNode, &frame("start -> exit"), 0);
        assert_fires(Rule::TerminalNode, "digraph { start -> End }", 0);
    }

    #[test]
    fn missing_exit_node_fails() {
        let found = assert_fires(Rule::TerminalNode, "digraph { start [shape=Mdiamond] }", 1);
        assert_eq!(found[0].message, "workflow has no exit node");
    }

    #[test]
    fn two_exit_nodes_fail() {
        assert_fires(
            Rule::TerminalNode,
            "digraph { start -> exit; start -> end; exit [shape=Msquare]; end [shape=Msquare] }",
            1,
        );
        assert_fires(
            Rule::TerminalNode,
            "digraph { start -> exit; start -> end }",
            1,
        );
    }
}
