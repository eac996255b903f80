//! `type_known`: an explicit handler type must name a handler type or alias; otherwise
//! the shape decides (SPEC 2.8, 3.2).

use super::Lint;
use crate::diagnostic::{Diagnostic, Rule};
use crate::model::HandlerKind;

/// The attribute and its aliases, in the order lowering reads them.
const KEYS: [&str; 3] = ["type", "node_type", "codergen_mode"];

pub(super) fn check(lint: &mut Lint<'_>) {
    if !lint.workflow.may_have_any_key(&KEYS) {
        return;
    }
    for node in lint.workflow.nodes() {
        for key in KEYS {
            let Some(attribute) = node.attributes.get(key) else {
                continue;
            };
            if HandlerKind::parse(&attribute.value).is_some() {
                continue;
            }
            lint.report(
                Diagnostic::new(
                    Rule::TypeKnown,
                    format!(
                        "node '{}' has unknown {key} \"{}\"; its shape {} selects the {} handler",
                        node.id,
                        attribute.value.escape_debug(),
                        node.shape(),
                        HandlerKind::from_shape(node.shape())
                    ),
                )
                .at(attribute.key_span)
                .node(&node.id)
                .fix(format!("use one of: {}", type_names())),
            );
        }
    }
}

fn type_names() -> String {
    let names: Vec<_> = HandlerKind::ALL.iter().map(|kind| kind.as_str()).collect();
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::Rule;
    use crate::lint::test_support::{assert_fires, frame, position};

    #[test]
    fn known_types_and_aliases_pass() {
        let text = frame("a [type=codergen]\n b [node_type=\"wait.human\"]\n c [codergen_mode=one_shot]\n start -> a -> b -> c -> exit");
        assert_fires(Rule::TypeKnown, &text, 0);
    }

    #[test]
    fn unknown_type_warns_at_key() {
        let text = frame("a [shape=tab, node_type=\"stack.steer\"]\n start -> a -> exit");
        let found = assert_fires(Rule::TypeKnown, &text, 1);
        assert_eq!(
            found[0].message,
            "node 'a' has unknown node_type \"stack.steer\"; its shape tab selects the prompt handler"
        );
        assert_eq!(position(&text, &found[0]), (4, 15));
        assert!(found[0]
            .fix
            .as_deref()
            .is_some_and(|fix| fix.contains("sub_workflow")));
    }
}
