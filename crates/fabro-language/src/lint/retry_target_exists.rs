//! `retry_target_exists`: retry targets of nodes and of the graph must name existing
//! nodes (SPEC 3.2, 9.5).

use super::Lint;
use crate::diagnostic::{Diagnostic, Rule};
use crate::syntax::Attributes;

const KEYS: [&str; 2] = ["retry_target", "fallback_retry_target"];

pub(super) fn check(lint: &mut Lint<'_>) {
    let workflow = lint.workflow;
    report_missing(lint, &workflow.attributes, None);
    if !workflow.may_have_any_key(&KEYS) {
        return;
    }
    for node in workflow.nodes() {
        report_missing(lint, &node.attributes, Some(&node.id));
    }
}

fn report_missing(lint: &mut Lint<'_>, attributes: &Attributes, node: Option<&str>) {
    for key in KEYS {
        let Some(attribute) = attributes.get(key) else {
            continue;
        };
        let target = attribute.value.as_ref();
        // Lowering treats an empty target as unset.
        if target.is_empty() || lint.workflow.find(target).is_some() {
            continue;
        }
        let owner = match node {
            Some(node) => format!("node '{node}'"),
            None => "the graph".to_owned(),
        };
        let diagnostic = Diagnostic::new(
            Rule::RetryTargetExists,
            format!(
                "{key} of {owner} names node '{}', which does not exist",
                target.escape_debug()
            ),
        )
        .at(attribute.key_span)
        .fix("name an existing node, or fix the typo");
        lint.report(match node {
            Some(node) => diagnostic.node(node),
            None => diagnostic,
        });
    }
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::Rule;
    use crate::lint::test_support::{assert_fires, frame, position};

    #[test]
    fn existing_targets_pass() {
        let text = frame("graph [retry_target=a]\n a [fallback_retry_target=start, retry_target=\"\"]\n start -> a -> exit");
        assert_fires(Rule::RetryTargetExists, &text, 0);
    }

    #[test]
    fn missing_targets_warn() {
        let text = frame(
            "graph [fallback_retry_target=nowhere]\n a [retry_target=plan]\n start -> a -> exit",
        );
        let found = assert_fires(Rule::RetryTargetExists, &text, 2);
        assert_eq!(
            found[0].message,
            "fallback_retry_target of the graph names node 'nowhere', which does not exist"
        );
        assert_eq!(found[0].node_id, None);
        assert_eq!(position(&text, &found[0]), (4, 8));
        assert_eq!(
            found[1].message,
            "retry_target of node 'a' names node 'plan', which does not exist"
        );
        assert_eq!(found[1].node_id.as_deref(), Some("a"));
    }
}
