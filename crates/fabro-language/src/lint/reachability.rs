//! `reachability`: every node should be reachable from the start node (SPEC 3.2).

use super::Lint;
use crate::diagnostic::{Diagnostic, Rule};

pub(super) fn check(lint: &mut Lint<'_>) {
    let workflow = lint.workflow;
    let Some(start) = workflow.start() else {
        return;
    };
    let mut reached = vec![false; workflow.nodes().len()];
    let mut queue = vec![start];
    reached[start.get()] = true;
    while let Some(node) = queue.pop() {
        for (_, edge) in workflow.outgoing(node) {
            if !reached[edge.to.get()] {
                reached[edge.to.get()] = true;
                queue.push(edge.to);
            }
        }
    }
    for (node, reached) in workflow.nodes().iter().zip(reached) {
        if !reached {
            lint.report(
                Diagnostic::new(
                    Rule::Reachability,
                    format!("node '{}' cannot be reached from the start node", node.id),
                )
                .at(node.span)
                .node(&node.id),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::Rule;
    use crate::lint::test_support::{assert_fires, frame};

    #[test]
    fn connected_workflow_passes() {
        assert_fires(
            Rule::Reachability,
            &frame("start -> a -> b -> exit\n b -> a"),
            0,
        );
    }

    #[test]
    fn orphan_nodes_are_reported() {
        let found = assert_fires(
            Rule::Reachability,
            &frame("start -> exit\n orphan\n x -> y"),
            3,
        );
        assert_eq!(found[0].node_id.as_deref(), Some("orphan"));
    }
}
