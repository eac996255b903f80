//! `provider_known`: a provider named on a node (`provider`, alias `llm_provider`), by
//! the graph's `default_provider` or in the model stylesheet must be one of the
//! providers of SPEC 10.1 or an alias of one (SPEC 17.6, decision 62). Unlike unknown
//! models, which are passed through, an unknown provider cannot be called at all, so on
//! a node or the graph this is an error; in a stylesheet it is a warning, since
//! stylesheets are shared between projects and templates carry placeholders. The
//! message names the closest known provider within edit distance 2.

use std::collections::HashSet;

use super::unknown_attribute::edit_distance;
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

/// Other names of providers, as `(alias, provider)`: `google` names `gemini`
/// (SPEC 10.7, decision 62).
pub const PROVIDER_ALIASES: [(&str, &str); 1] = [("google", "gemini")];

/// Node attribute keys naming a provider, in the order lowering reads them.
const NODE_KEYS: [&str; 2] = ["provider", "llm_provider"];

/// Whether `name` may be used (an empty value means unset).
fn is_known(lint: &Lint<'_>, name: &str) -> bool {
    name.is_empty() || lint.options.models.is_provider_known(name)
}

/// What follows the message: the closest known name, or the list of them.
fn hint(name: &str) -> String {
    let closest = PROVIDERS
        .iter()
        .chain(PROVIDER_ALIASES.iter().map(|(alias, _)| alias))
        .map(|known| (edit_distance(name, known), *known))
        .filter(|(distance, _)| *distance <= 2)
        .min_by_key(|(distance, _)| *distance);
    match closest {
        Some((_, known)) => format!("did you mean '{known}'?"),
        None => format!("expected one of: {}", PROVIDERS.join(", ")),
    }
}

fn fix() -> String {
    format!("use one of: {}", PROVIDERS.join(", "))
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
                hint(&attribute.value)
            ),
        )
        .at(attribute.key_span)
        .fix(fix()),
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
                        hint(&attribute.value)
                    ),
                )
                .at(attribute.key_span)
                .node(&node.id)
                .fix(fix()),
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
                    hint(declaration.value)
                ),
            )
            .at(attribute.value_subspan(lint.source, declaration.range))
            .fix(fix())
            .as_warning(),
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
        let text = frame(" a [label=\"A\", provider=azure]\n start -> a -> exit");
        let found = assert_fires(Rule::ProviderKnown, &text, 1);
        assert_eq!(found[0].severity(), Severity::Error);
        assert_eq!(
            found[0].message,
            "unknown provider 'azure' on node 'a'; expected one of: anthropic, openai, gemini, openai_compatible, simulated"
        );
        assert_eq!(found[0].node_id.as_deref(), Some("a"));
        assert_eq!(position(&text, &found[0]), (4, 16));
    }

    /// Decision 62: `google` names `gemini`, on nodes, the graph and in stylesheets.
    #[test]
    fn google_is_an_alias_of_gemini() {
        let text = frame(
            " default_provider=google\n model_stylesheet=\"* { provider: google }\"\n a [provider=google]\n start -> a -> exit",
        );
        assert_fires(Rule::ProviderKnown, &text, 0);
    }

    /// SPEC 17.6: a misspelt provider is an error naming the closest known one.
    #[test]
    fn a_misspelt_provider_names_the_closest_one() {
        let text = frame(" a [label=\"A\", provider=\"antropic\"]\n start -> a -> exit");
        let found = assert_fires(Rule::ProviderKnown, &text, 1);
        assert_eq!(found[0].severity(), Severity::Error);
        assert_eq!(
            found[0].message,
            "unknown provider 'antropic' on node 'a'; did you mean 'anthropic'?"
        );
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
            "unknown default_provider 'Anthropic'; did you mean 'anthropic'?"
        );
        assert_eq!(found[0].severity(), Severity::Error);
        assert_eq!(position(&text, &found[0]), (4, 2));
        assert!(found[1]
            .message
            .starts_with("unknown provider 'azure' on node 'a'"));
        assert_eq!(position(&text, &found[1]), (5, 8));
    }

    #[test]
    fn an_unknown_stylesheet_provider_is_a_warning_pointing_inside_the_value() {
        let text = frame(
            " model_stylesheet=\"* { model: x }\n  #a { provider: inception }\"\n a\n start -> a -> exit",
        );
        let found = assert_fires(Rule::ProviderKnown, &text, 1);
        assert_eq!(
            found[0].message,
            "model_stylesheet sets unknown provider 'inception'; expected one of: anthropic, openai, gemini, openai_compatible, simulated"
        );
        assert_eq!(found[0].severity(), Severity::Warning);
        assert_eq!(position(&text, &found[0]), (5, 18));
        let span = found[0].span.expect("span");
        assert_eq!(&text[span.range()], "inception");
    }
}
