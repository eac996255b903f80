//! `start_no_incoming`: no edge may target the start node (SPEC 3.2).

use super::Lint;
use crate::diagnostic::{Diagnostic, Rule};

pub(super) fn check(lint: &mut Lint<'_>) {
    let workflow = lint.workflow;
    for &start in workflow.start_candidates() {
        for (edge_index, edge) in workflow.incoming(start) {
            let from = &workflow.node(edge.from).id;
            let to = &workflow.node(start).id;
            lint.report(
                Diagnostic::new(
                    Rule::StartNoIncoming,
                    format!("edge {from} -> {to} targets the start node"),
                )
                .at(workflow.edge_from_span(edge_index))
                .edge(from, to),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::Rule;
    use crate::lint::test_support::{assert_fires, frame};

    #[test]
    fn start_without_incoming_edges_passes() {
        assert_fires(Rule::StartNoIncoming, &frame("start -> a -> exit"), 0);
    }

    #[test]
    fn edge_into_start_fails() {
        let found = assert_fires(
            Rule::StartNoIncoming,
            &frame("start -> a -> exit\n a -> start"),
            1,
        );
        assert_eq!(found[0].message, "edge a -> start targets the start node");
    }
}
