//! `provider_known`: a provider named on a node (`provider`, alias `llm_provider`), by
//! the graph's `default_provider` or in the model stylesheet must be one of the
//! providers of SPEC 10.1 (SPEC 17.6). Unlike unknown models, which are passed through,
//! an unknown provider cannot be called at all, so this is an error.

use std::collections::HashSet;

use super::Lint;
use crate::diagnostic::{Diagnostic, Rule};
use crate::span::Span;
use crate::stylesheet::StyleProperty;

/// The providers of SPEC 10.1, as written in workflows and configuration.
pub const PROVIDERS: [&str; 5] = [
    "anthropic",
    "openai",
    "gemini",
    "openai_compatible",
    "simulated",
];

/// Node attribute keys naming a provider, in the order lowering reads them.
const NODE_KEYS: [&str; 2] = ["provider", "llm_provider"];

/// Whether `name` may be used (an empty value means unset).
fn is_known(lint: &Lint<'_>, name: &str) -> bool {
    name.is_empty() || lint.options.models.is_provider_known(name)
}

fn expected() -> String {
    format!("expected one of: {}", PROVIDERS.join(", "))
}

pub(super) fn check(lint: &mut Lint<'_>) {
    check_graph(lint);
    check_nodes(lint);
    check_stylesheet(lint);
}

fn check_graph(lint: &mut Lint<'_>) {
    let Some(attribute) = lint.workflow.attributes.get("default_provider") else {
        return;
    };
    if is_known(lint, &attribute.value) {
        return;
    }
    lint.report(
        Diagnostic::new(
            Rule::ProviderKnown,
            format!(
                "unknown default_provider '{}'; {}",
                attribute.value.escape_debug(),
                expected()
            ),
        )
        .at(attribute.key_span)
        .fix(format!("use one of: {}", PROVIDERS.join(", "))),
    );
}

fn check_nodes(lint: &mut Lint<'_>) {
    if !lint.workflow.may_have_any_key(&NODE_KEYS) {
        return;
    }
    // A provider set by `node [provider=...]` defaults is one attribute shared by many
    // nodes: it is reported once, where written.
    let mut reported: HashSet<Span> = HashSet::new();
    for node in lint.workflow.nodes() {
        for key in NODE_KEYS {
            let Some(attribute) = node.attributes.get(key) else {
                continue;
            };
            if is_known(lint, &attribute.value) || !reported.insert(attribute.key_span) {
                continue;
            }
            lint.report(
                Diagnostic::new(
                    Rule::ProviderKnown,
                    format!(
                        "unknown provider '{}' on node '{}'; {}",
                        attribute.value.escape_debug(),
                        node.id,
                        expected()
                    ),
                )
                .at(attribute.key_span)
                .node(&node.id)
                .fix(format!("use one of: {}", PROVIDERS.join(", "))),
            );
        }
    }
}

fn check_stylesheet(lint: &mut Lint<'_>) {
    let Some(attribute) = lint.workflow.attributes.get("model_stylesheet") else {
        return;
    };
    let providers = lint
        .workflow
        .settings
        .stylesheet
        .declarations()
        .filter(|declaration| declaration.property == StyleProperty::Provider);
    for declaration in providers {
        if is_known(lint, declaration.value) {
            continue;
        }
        lint.report(
            Diagnostic::new(
                Rule::ProviderKnown,
                format!(
                    "model_stylesheet sets unknown provider '{}'; {}",
                    declaration.value.escape_debug(),
                    expected()
                ),
            )
            .at(attribute.value_subspan(lint.source, declaration.range))
            .fix(format!("use one of: {}", PROVIDERS.join(", "))),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::{Rule, Severity};
    use crate::lint::test_support::{assert_fires, frame, position};

    #[test]
    fn every_provider_of_the_spec_passes() {
        let text = frame(
            " default_provider=openai\n model_stylesheet=\"* { provider: gemini } .x { llm_provider: \\\"openai_compatible\\\" }\"\n a [provider=anthropic]\n b [llm_provider=simulated]\n c [provider=\"\"]\n start -> a -> b -> c -> exit",
        );
        assert_fires(Rule::ProviderKnown, &text, 0);
    }

    #[test]
    fn an_unknown_node_provider_is_an_error_at_its_key() {
        let text = frame(" a [label=\"A\", provider=google]\n start -> a -> exit");
        let found = assert_fires(Rule::ProviderKnown, &text, 1);
        assert_eq!(found[0].severity(), Severity::Error);
        assert_eq!(
            found[0].message,
            "unknown provider 'google' on node 'a'; expected one of: anthropic, openai, gemini, openai_compatible, simulated"
        );
        assert_eq!(found[0].node_id.as_deref(), Some("a"));
        assert_eq!(position(&text, &found[0]), (4, 16));
    }

    #[test]
    fn aliases_defaults_and_the_graph_default_are_checked() {
        let text = frame(
            " default_provider=Anthropic\n node [llm_provider=azure]\n a\n b\n start -> a -> b -> exit",
        );
        let found = assert_fires(Rule::ProviderKnown, &text, 2);
        assert_eq!(
            found[0].message,
            "unknown default_provider 'Anthropic'; expected one of: anthropic, openai, gemini, openai_compatible, simulated"
        );
        assert_eq!(position(&text, &found[0]), (4, 2));
        assert!(found[1]
            .message
            .starts_with("unknown provider 'azure' on node 'a'"));
        assert_eq!(position(&text, &found[1]), (5, 8));
    }

    #[test]
    fn an_unknown_stylesheet_provider_points_inside_the_value() {
        let text = frame(
            " model_stylesheet=\"* { model: x }\n  #a { provider: google }\"\n a\n start -> a -> exit",
        );
        let found = assert_fires(Rule::ProviderKnown, &text, 1);
        assert_eq!(
            found[0].message,
            "model_stylesheet sets unknown provider 'google'; expected one of: anthropic, openai, gemini, openai_compatible, simulated"
        );
        assert_eq!(position(&text, &found[0]), (5, 18));
        let span = found[0].span.expect("span");
        assert_eq!(&text[span.range()], "google");
    }
}
