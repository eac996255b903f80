//! `selection_valid`, `join_policy_valid`, `retry_policy_valid` and `backend_valid`:
//! enumerated node attributes with a value outside their set (SPEC 2.4, 2.10, 3.2).
//! Lowering silently uses the default for such values; these rules say so.

use super::Lint;
use crate::diagnostic::{Diagnostic, Rule};
use crate::model::{Backend, JoinPolicy, RetryPolicy, Selection};

/// One enumerated attribute: its rule, key, accepted spellings and what is used instead.
struct EnumAttribute {
    rule: Rule,
    key: &'static str,
    accepts: fn(&str) -> bool,
    values: fn() -> Vec<&'static str>,
    fallback: &'static str,
}

const ATTRIBUTES: [EnumAttribute; 4] = [
    EnumAttribute {
        rule: Rule::SelectionValid,
        key: "selection",
        accepts: |text| Selection::parse(text).is_some(),
        values: || Selection::ALL.iter().map(|value| value.as_str()).collect(),
        fallback: "deterministic is used",
    },
    EnumAttribute {
        rule: Rule::JoinPolicyValid,
        key: "join_policy",
        accepts: |text| JoinPolicy::parse(text).is_some(),
        values: || JoinPolicy::ALL.iter().map(|value| value.as_str()).collect(),
        fallback: "wait_all is used",
    },
    EnumAttribute {
        rule: Rule::RetryPolicyValid,
        key: "retry_policy",
        accepts: |text| RetryPolicy::parse(text).is_some(),
        values: || {
            RetryPolicy::ALL
                .iter()
                .map(|value| value.as_str())
                .collect()
        },
        fallback: "the node's max_retries or the graph default applies",
    },
    EnumAttribute {
        rule: Rule::BackendValid,
        key: "backend",
        accepts: |text| Backend::parse(text).is_some(),
        values: || Backend::ALL.iter().map(|value| value.as_str()).collect(),
        fallback: "api is used",
    },
];

pub(super) fn check(lint: &mut Lint<'_>) {
    if !ATTRIBUTES
        .iter()
        .any(|spec| lint.workflow.may_have_key(spec.key))
    {
        return;
    }
    for node in lint.workflow.nodes() {
        for spec in &ATTRIBUTES {
            let Some(attribute) = node.attributes.get(spec.key) else {
                continue;
            };
            if (spec.accepts)(&attribute.value) {
                continue;
            }
            lint.report(
                Diagnostic::new(
                    spec.rule,
                    format!(
                        "node '{}' has unknown {} \"{}\"; {}",
                        node.id,
                        spec.key,
                        attribute.value.escape_debug(),
                        spec.fallback
                    ),
                )
                .at(attribute.key_span)
                .node(&node.id)
                .fix(format!("use one of: {}", (spec.values)().join(", "))),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::Rule;
    use crate::lint::test_support::{assert_fires, frame, position};

    const RULES: [Rule; 4] = [
        Rule::SelectionValid,
        Rule::JoinPolicyValid,
        Rule::RetryPolicyValid,
        Rule::BackendValid,
    ];

    #[test]
    fn known_values_pass() {
        let text = frame("a [selection=random, retry_policy=patient, backend=cli]\n p [shape=component, join_policy=first_success]\n start -> a -> p -> exit");
        for rule in RULES {
            assert_fires(rule, &text, 0);
        }
    }

    #[test]
    fn unknown_values_warn_with_their_rule() {
        let text = frame("a [selection=Random, retry_policy=eager, backend=\"\"]\n p [shape=component, join_policy=any]\n start -> a -> p -> exit");
        let found = assert_fires(Rule::SelectionValid, &text, 1);
        assert_eq!(
            found[0].message,
            "node 'a' has unknown selection \"Random\"; deterministic is used"
        );
        assert_eq!(
            found[0].fix.as_deref(),
            Some("use one of: deterministic, random")
        );
        assert_eq!(position(&text, &found[0]), (4, 4));
        let found = assert_fires(Rule::JoinPolicyValid, &text, 1);
        assert_eq!(found[0].node_id.as_deref(), Some("p"));
        assert_eq!(position(&text, &found[0]), (5, 22));
        assert_fires(Rule::RetryPolicyValid, &text, 1);
        let found = assert_fires(Rule::BackendValid, &text, 1);
        assert_eq!(
            found[0].message,
            "node 'a' has unknown backend \"\"; api is used"
        );
    }
}
