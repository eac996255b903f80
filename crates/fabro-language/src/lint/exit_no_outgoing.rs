//! `exit_no_outgoing`: no edge may leave the exit node (SPEC 3.2).

use super::Lint;
use crate::diagnostic::{Diagnostic, Rule};

pub(super) fn check(lint: &mut Lint<'_>) {
    let workflow = lint.workflow;
    for &exit in workflow.exit_candidates() {
        for (edge_index, edge) in workflow.outgoing(exit) {
            let from = &workflow.node(exit).id;
            let to = &workflow.node(edge.to).id;
            lint.report(
                Diagnostic::new(
                    Rule::ExitNoOutgoing,
                    format!("edge {from} -> {to} leaves the exit node"),
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
    fn exit_without_outgoing_edges_passes() {
        assert_fires(Rule::ExitNoOutgoing, &frame("start -> exit"), 0);
    }

    #[test]
    fn edge_out_of_exit_fails() {
        let found = assert_fires(Rule::ExitNoOutgoing, &frame("start -> exit -> a"), 1);
        assert_eq!(found[0].message, "edge exit -> a leaves the exit node");
    }
}
