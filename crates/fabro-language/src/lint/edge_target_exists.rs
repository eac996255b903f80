//! `edge_target_exists`: edge endpoints should be declared by a node statement
//! (SPEC 3.2; DOT creates them implicitly, so a typo would silently become an agent).

use super::Lint;
use crate::diagnostic::{Diagnostic, Rule};
use crate::model::HandlerKind;

pub(super) fn check(lint: &mut Lint<'_>) {
    for node in lint.workflow.nodes() {
        if node.declared {
            continue;
        }
        // An undeclared node's attributes are the `node [...]` defaults in effect where
        // it was first mentioned; they may make it something other than an agent.
        let runs_as = if node.attributes.is_empty() && node.handler == HandlerKind::Agent {
            "a default agent node".to_owned()
        } else {
            let handler = node.handler.as_str();
            let article = if handler.starts_with(['a', 'e', 'i', 'o', 'u']) {
                "an"
            } else {
                "a"
            };
            let origin = if node.attributes.is_empty() {
                ""
            } else {
                " (from the node [...] defaults)"
            };
            format!("{article} {handler} node{origin}")
        };
        lint.report(
            Diagnostic::new(
                Rule::EdgeTargetExists,
                format!(
                    "node '{}' is used by an edge but never declared; it runs as {runs_as}",
                    node.id
                ),
            )
            .at(node.span)
            .node(&node.id)
            .fix(format!(
                "declare it, e.g. {} [label=\"...\"], or fix the typo",
                node.id
            )),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::Rule;
    use crate::lint::test_support::{assert_fires, frame};
    use crate::span::LineIndex;

    #[test]
    fn declared_endpoints_pass() {
        assert_fires(Rule::EdgeTargetExists, &frame("a\n start -> a -> exit"), 0);
    }

    #[test]
    fn undeclared_endpoint_warns_at_first_mention() {
        let text = frame("start -> tpyo\n tpyo -> exit");
        let found = assert_fires(Rule::EdgeTargetExists, &text, 1);
        let span = found[0].span.expect("span");
        assert_eq!(LineIndex::new(&text).position(&text, span.start), (4, 10));
        assert_eq!(found[0].rule.severity(), crate::Severity::Warning);
    }

    #[test]
    fn the_warning_names_the_handler_the_node_defaults_give() {
        let default = assert_fires(Rule::EdgeTargetExists, &frame("start -> tpyo -> exit"), 1);
        assert_eq!(
            default[0].message,
            "node 'tpyo' is used by an edge but never declared; it runs as a default agent node"
        );
        let text = frame("node [shape=parallelogram, script=\"echo hi\"]\n start -> tpyo -> exit");
        let command = assert_fires(Rule::EdgeTargetExists, &text, 1);
        assert_eq!(
            command[0].message,
            "node 'tpyo' is used by an edge but never declared; it runs as a command node (from the node [...] defaults)"
        );
        let text = frame("node [type=\"prompt\"]\n start -> tpyo -> exit");
        let prompt = assert_fires(Rule::EdgeTargetExists, &text, 1);
        assert!(
            prompt[0]
                .message
                .ends_with("it runs as a prompt node (from the node [...] defaults)"),
            "{}",
            prompt[0].message
        );
        // Defaults that keep the agent handler still say where its settings come from.
        let text = frame("node [model=\"known-model\"]\n start -> tpyo -> exit");
        let agent = assert_fires(Rule::EdgeTargetExists, &text, 1);
        assert!(
            agent[0]
                .message
                .ends_with("it runs as an agent node (from the node [...] defaults)"),
            "{}",
            agent[0].message
        );
    }
}
