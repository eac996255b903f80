//! `output_schema_invalid` and `output_schema_unsupported`: where `output_schema` may be
//! set and what it may say (SPEC 2.10, 3.2, 7.3, 7.4).
//!
//! Lowering already reports inline schemas that are not valid JSON Schema and reference
//! resolution reports `@path` schemas that are not, so this rule only reports values of
//! none of the three accepted forms.

use super::Lint;
use crate::diagnostic::{Diagnostic, Rule};
use crate::model::{Backend, HandlerKind, Node};
use crate::syntax::Attribute;

pub(super) fn check(lint: &mut Lint<'_>) {
    if !lint.workflow.may_have_key("output_schema") {
        return;
    }
    for node in lint.workflow.nodes() {
        let Some(attribute) = node.attributes.get("output_schema") else {
            continue;
        };
        let value = attribute.value.trim();
        // An empty value clears an inherited schema, as lowering treats it: nothing to check.
        if value.is_empty() {
            continue;
        }
        if !is_accepted_form(value) {
            lint.report(
                Diagnostic::new(
                    Rule::OutputSchemaInvalid,
                    format!(
                        "node '{}' has output_schema \"{}\", which is neither routing, an @path reference nor an inline JSON Schema",
                        node.id,
                        attribute.value.escape_debug()
                    ),
                )
                .at(attribute.key_span)
                .node(&node.id)
                .fix("use output_schema=\"routing\", output_schema=\"@schema.json\" or an inline schema starting with {"),
            );
        }
        if let Some(reason) = unsupported(node) {
            report_unsupported(lint, node, attribute, reason);
        }
    }
}

/// `routing`, an `@path` reference (SPEC 2.6: `@` followed by text without whitespace) or
/// an inline schema (first non-blank character `{`).
fn is_accepted_form(value: &str) -> bool {
    let reference = value
        .strip_prefix('@')
        .is_some_and(|path| !path.is_empty() && !path.contains(char::is_whitespace));
    value == "routing" || reference || value.starts_with('{')
}

/// Why `node` cannot validate structured output, if it cannot.
fn unsupported(node: &Node) -> Option<String> {
    match node.handler {
        // SPEC 2.10: `backend` is ignored by prompt nodes, so only agents are affected.
        HandlerKind::Agent if node.llm.backend == Backend::Acp => {
            Some("its backend is acp".to_owned())
        }
        HandlerKind::Agent | HandlerKind::Prompt => None,
        HandlerKind::Start
        | HandlerKind::Exit
        | HandlerKind::Command
        | HandlerKind::Human
        | HandlerKind::Conditional
        | HandlerKind::Parallel
        | HandlerKind::FanIn
        | HandlerKind::Wait
        | HandlerKind::SubWorkflow => Some(format!("it is a {} node", node.handler)),
    }
}

fn report_unsupported(lint: &mut Lint<'_>, node: &Node, attribute: &Attribute, reason: String) {
    lint.report(
        Diagnostic::new(
            Rule::OutputSchemaUnsupported,
            format!(
                "node '{}' sets output_schema, but {reason}; only agent and prompt nodes validate structured output",
                node.id
            ),
        )
        .at(attribute.key_span)
        .node(&node.id)
        .fix("remove output_schema, or make the node an agent (not acp) or prompt node"),
    );
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::Rule;
    use crate::lint::test_support::{assert_fires, findings_with, frame, position};

    #[test]
    fn accepted_forms_pass() {
        let text = frame(
            "a [output_schema=routing]\n b [shape=tab, output_schema=\"{\\\"type\\\": \\\"object\\\"}\"]\n c [output_schema=\"@s.json\"]\n d [output_schema=\"\"]\n start -> a -> b -> c -> d -> exit",
        );
        let files = [("/w/s.json", r#"{"type": "object"}"#)];
        assert!(findings_with(Rule::OutputSchemaInvalid, &text, &files).is_empty());
        assert!(findings_with(Rule::OutputSchemaUnsupported, &text, &files).is_empty());
    }

    #[test]
    fn other_values_are_invalid() {
        let text = frame("a [output_schema=\"json please\"]\n start -> a -> exit");
        let found = assert_fires(Rule::OutputSchemaInvalid, &text, 1);
        assert_eq!(
            found[0].message,
            "node 'a' has output_schema \"json please\", which is neither routing, an @path reference nor an inline JSON Schema"
        );
        assert_eq!(found[0].node_id.as_deref(), Some("a"));
        assert_eq!(position(&text, &found[0]), (4, 4));
    }

    #[test]
    fn broken_inline_schema_is_reported_once_by_lowering() {
        let text = frame("a [output_schema=\"{ nope\"]\n start -> a -> exit");
        assert_fires(Rule::OutputSchemaInvalid, &text, 1);
    }

    #[test]
    fn schema_on_other_handlers_or_acp_is_unsupported() {
        let text = frame(
            "c [shape=parallelogram, script=\"true\", output_schema=routing]\n a [backend=acp, output_schema=routing]\n p [shape=tab, backend=acp, output_schema=routing]\n start -> c -> a -> p -> exit",
        );
        let found = assert_fires(Rule::OutputSchemaUnsupported, &text, 2);
        assert_eq!(
            found[0].message,
            "node 'c' sets output_schema, but it is a command node; only agent and prompt nodes validate structured output"
        );
        assert_eq!(position(&text, &found[0]), (4, 40));
        assert_eq!(found[1].node_id.as_deref(), Some("a"));
        assert!(found[1].message.contains("its backend is acp"));
    }
}
