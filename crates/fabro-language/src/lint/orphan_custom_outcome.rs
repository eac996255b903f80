//! `orphan_custom_outcome`: a condition compares `outcome` with a custom value that the
//! edge's source node can never report (SPEC 3.2, 4.4).
//!
//! Only agent and prompt nodes without a custom JSON `output_schema` report custom
//! outcomes. A conditional node copies the outcome of the stage completed before it
//! (SPEC 5.6), so it can carry a custom outcome when one of its predecessors, possibly
//! through a chain of conditional nodes, can report one; treating such gates as able to
//! report custom outcomes avoids warning on the routing pattern SPEC 5.6 describes.

use super::Lint;
use crate::condition::Operator;
use crate::diagnostic::{Diagnostic, Rule};
use crate::model::{HandlerKind, Node, OutputSchema, Workflow};
use crate::status::StageStatus;

pub(super) fn check(lint: &mut Lint<'_>) {
    let workflow = lint.workflow;
    let reports_custom = custom_outcome_sources(workflow);
    for (from, &can_report) in workflow.node_indices().zip(&reports_custom) {
        if can_report {
            continue;
        }
        let node = workflow.node(from);
        for (_, edge) in workflow.outgoing(from) {
            let (Some(condition), Some(attribute)) =
                (&edge.condition, edge.attributes.get("condition"))
            else {
                continue;
            };
            let to = &workflow.node(edge.to).id;
            for comparison in condition.comparisons() {
                let is_outcome = matches!(comparison.key, "outcome" | "context.outcome");
                let is_equality = matches!(comparison.operator, Operator::Eq | Operator::NotEq);
                // `retry` is an internal status, but still a status rather than a custom outcome.
                if !is_outcome
                    || !is_equality
                    || comparison.literal.is_empty()
                    || StageStatus::parse(comparison.literal).is_some()
                {
                    continue;
                }
                lint.report(
                    Diagnostic::new(
                        Rule::OrphanCustomOutcome,
                        format!(
                            "edge {} -> {to} tests {} for custom outcome '{}', which {} can never report",
                            node.id,
                            comparison.key,
                            comparison.literal.escape_debug(),
                            describe(node)
                        ),
                    )
                    .at(attribute.value_subspan(lint.source, comparison.range))
                    .edge(&node.id, to)
                    .fix("compare with a status (success, partial_success, fail, skipped) or a context key"),
                );
            }
        }
    }
}

/// Per node: whether it can report a custom outcome, directly (agent or prompt node
/// without a JSON output schema) or by passing one through (conditional node).
fn custom_outcome_sources(workflow: &Workflow) -> Vec<bool> {
    let mut reports = vec![false; workflow.nodes().len()];
    let mut queue = Vec::new();
    for (index, node) in workflow.node_indices().zip(workflow.nodes()) {
        if reports_directly(node) {
            reports[index.get()] = true;
            queue.push(index);
        }
    }
    while let Some(index) = queue.pop() {
        for (_, edge) in workflow.outgoing(index) {
            let target = edge.to.get();
            if !reports[target] && workflow.node(edge.to).handler == HandlerKind::Conditional {
                reports[target] = true;
                queue.push(edge.to);
            }
        }
    }
    reports
}

fn reports_directly(node: &Node) -> bool {
    node.handler.is_llm() && !matches!(node.llm.output_schema(), Some(OutputSchema::Json(_)))
}

fn describe(node: &Node) -> String {
    if node.handler.is_llm() {
        format!("node '{}' with a custom output_schema", node.id)
    } else if node.handler == HandlerKind::Conditional {
        format!(
            "conditional node '{}' (no agent or prompt node precedes it)",
            node.id
        )
    } else {
        format!("{} node '{}'", node.handler, node.id)
    }
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::Rule;
    use crate::lint::test_support::{assert_fires, findings_with, frame, position};

    #[test]
    fn custom_outcomes_of_agents_and_their_gates_pass() {
        let text = frame(
            "a [prompt=\"decide\"]\n gate [shape=diamond]\n start -> a -> gate\n gate -> exit [condition=\"outcome=port\"]\n gate -> a [condition=\"outcome=skip\"]\n a -> exit [condition=\"context.outcome!=done\"]",
        );
        assert_fires(Rule::OrphanCustomOutcome, &text, 0);
    }

    #[test]
    fn statuses_and_aliases_pass_on_any_node() {
        let text = frame(
            "c [shape=parallelogram, script=\"true\"]\n start -> c\n c -> exit [condition=\"outcome=SUCCEEDED\"]\n c -> exit [condition=\"outcome=retry || outcome=error\"]\n c -> exit [condition=\"context.flag=port\"]",
        );
        assert_fires(Rule::OrphanCustomOutcome, &text, 0);
    }

    #[test]
    fn custom_outcome_of_command_node_warns_inside_condition() {
        let text = frame(
            "c [shape=parallelogram, script=\"true\"]\n start -> c\n c -> exit [condition=\"outcome=success && outcome=port\"]\n c -> exit",
        );
        let found = assert_fires(Rule::OrphanCustomOutcome, &text, 1);
        assert_eq!(
            found[0].message,
            "edge c -> exit tests outcome for custom outcome 'port', which command node 'c' can never report"
        );
        assert_eq!(position(&text, &found[0]), (6, 43));
        let span = found[0].span.expect("span");
        assert_eq!(&text[span.range()], "outcome=port");
    }

    #[test]
    fn node_with_json_schema_cannot_report_custom_outcomes() {
        let text = frame(
            "a [output_schema=\"@s.json\"]\n start -> a\n a -> exit [condition=\"outcome=port\"]\n a -> exit",
        );
        let found = findings_with(
            Rule::OrphanCustomOutcome,
            &text,
            &[("/w/s.json", r#"{"type": "object"}"#)],
        );
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(found[0]
            .message
            .contains("node 'a' with a custom output_schema"));
    }

    #[test]
    fn gate_without_llm_predecessor_warns() {
        let text = frame("gate [shape=diamond]\n start -> gate\n gate -> exit [condition=\"outcome=port\"]\n gate -> exit");
        let found = assert_fires(Rule::OrphanCustomOutcome, &text, 1);
        assert!(found[0].message.contains("conditional node 'gate'"));
    }
}
