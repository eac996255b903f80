//! `human_duplicate_key`: the options of a human gate should have distinct accelerator
//! keys, compared case-insensitively (SPEC 3.2, 5.5).

use std::collections::HashMap;

use super::Lint;
use crate::diagnostic::{Diagnostic, Rule};
use crate::label::accelerator_key;
use crate::model::HandlerKind;

pub(super) fn check(lint: &mut Lint<'_>) {
    let workflow = lint.workflow;
    if !workflow.has_handler(HandlerKind::Human) {
        return;
    }
    let mut first_with_key: HashMap<String, &str> = HashMap::new();
    for index in workflow.node_indices() {
        let node = workflow.node(index);
        if node.handler != HandlerKind::Human {
            continue;
        }
        first_with_key.clear();
        // SPEC 5.5: options are the unconditional edges without freeform=true.
        let options = workflow
            .outgoing(index)
            .filter(|(_, edge)| edge.is_unconditional() && !edge.freeform);
        for (edge_index, edge) in options {
            let to = workflow.node(edge.to).id.as_str();
            // SPEC 5.5: an option with an empty label is labelled with its target id.
            let label = if edge.label().is_empty() {
                to
            } else {
                edge.label()
            };
            let Some(key) = accelerator_key(label) else {
                continue;
            };
            let Some(&first) = first_with_key.get(&key.to_lowercase()) else {
                first_with_key.insert(key.to_lowercase(), to);
                continue;
            };
            lint.report(
                Diagnostic::new(
                    Rule::HumanDuplicateKey,
                    format!(
                        "options {} -> {first} and {} -> {to} of human node '{}' share accelerator key '{key}'; the key selects {} -> {first}",
                        node.id, node.id, node.id, node.id
                    ),
                )
                .at(workflow.edge_from_span(edge_index))
                .edge(&node.id, to)
                .fix("give the option its own key with a prefix such as \"[X] Label\""),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::Rule;
    use crate::lint::test_support::{assert_fires, frame, position};

    #[test]
    fn distinct_keys_pass() {
        let text = frame("gate [shape=hexagon]\n start -> gate\n gate -> exit [label=\"[A] Approve\"]\n gate -> fix [label=\"[R] Retry\"]\n gate -> exit [label=\"Abort\", condition=\"outcome=fail\"]\n gate -> fix [label=\"Anything\", freeform=true]\n fix -> exit");
        assert_fires(Rule::HumanDuplicateKey, &text, 0);
    }

    #[test]
    fn same_key_in_any_case_warns_once_per_later_option() {
        let text = frame("gate [shape=hexagon]\n start -> gate\n gate -> exit [label=\"Approve\"]\n gate -> again [label=\"a) again\"]\n gate -> abort\n again -> exit\n abort -> exit");
        let found = assert_fires(Rule::HumanDuplicateKey, &text, 2);
        assert_eq!(
            found[0].message,
            "options gate -> exit and gate -> again of human node 'gate' share accelerator key 'a'; the key selects gate -> exit"
        );
        assert_eq!(position(&text, &found[0]), (7, 2));
        let edge = found[1].edge.as_ref().expect("edge");
        assert_eq!(edge.to, "abort");
    }

    #[test]
    fn other_nodes_are_ignored() {
        let text = frame(
            "start -> a [label=\"Go\"]\n start -> b [label=\"Gone\"]\n a -> exit\n b -> exit",
        );
        assert_fires(Rule::HumanDuplicateKey, &text, 0);
    }
}
