//! `node_model_known` and `stylesheet_model_known`: models set on nodes or in the
//! stylesheet should be catalog ids or aliases (SPEC 2.12, 3.2, 10.2). Unknown models
//! are still passed to the provider, hence warnings.

use std::collections::HashSet;

use super::Lint;
use crate::diagnostic::{Diagnostic, Rule};
use crate::span::Span;
use crate::stylesheet::StyleProperty;

pub(super) fn check(lint: &mut Lint<'_>) {
    check_nodes(lint);
    check_stylesheet(lint);
}

fn check_nodes(lint: &mut Lint<'_>) {
    // A model set by `node [model=...]` defaults is one attribute shared by many nodes:
    // report it once, at the defaults, rather than once per node.
    let mut reported: HashSet<Span> = HashSet::new();
    for node in lint.workflow.nodes() {
        let Some(attribute) = node.attributes.get_any(&["model", "llm_model"]) else {
            continue;
        };
        let model = attribute.value.as_ref();
        if model.is_empty()
            || lint.options.models.is_known(model)
            || !reported.insert(attribute.key_span)
        {
            continue;
        }
        lint.report(
            Diagnostic::new(
                Rule::NodeModelKnown,
                format!(
                    "node '{}' sets model '{}', which is neither a catalog id nor an alias",
                    node.id,
                    model.escape_debug()
                ),
            )
            .at(attribute.key_span)
            .node(&node.id)
            .fix("check the spelling against `fabro model list`; unknown models are passed through as written"),
        );
    }
}

fn check_stylesheet(lint: &mut Lint<'_>) {
    let Some(attribute) = lint.workflow.attributes.get("model_stylesheet") else {
        return;
    };
    let models = lint
        .workflow
        .settings
        .stylesheet
        .declarations()
        .filter(|declaration| declaration.property == StyleProperty::Model);
    for declaration in models {
        if lint.options.models.is_known(declaration.value) {
            continue;
        }
        lint.report(
            Diagnostic::new(
                Rule::StylesheetModelKnown,
                format!(
                    "model_stylesheet sets model '{}', which is neither a catalog id nor an alias",
                    declaration.value.escape_debug()
                ),
            )
            .at(attribute.value_subspan(lint.source, declaration.range))
            .fix("check the spelling against `fabro model list`; unknown models are passed through as written"),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::Rule;
    use crate::lint::test_support::{assert_fires, frame, position};

    #[test]
    fn known_models_pass() {
        let text = frame("model_stylesheet=\"* { model: known-model } .x { llm_model: alias }\"\n a [model=alias]\n b [llm_model=\"known-model\"]\n start -> a -> b -> exit");
        assert_fires(Rule::NodeModelKnown, &text, 0);
        assert_fires(Rule::StylesheetModelKnown, &text, 0);
    }

    #[test]
    fn unknown_node_model_warns_at_key() {
        let text = frame("a [llm_model=gpt-9]\n start -> a -> exit");
        let found = assert_fires(Rule::NodeModelKnown, &text, 1);
        assert_eq!(
            found[0].message,
            "node 'a' sets model 'gpt-9', which is neither a catalog id nor an alias"
        );
        assert_eq!(position(&text, &found[0]), (4, 4));
    }

    #[test]
    fn model_from_node_defaults_is_reported_once() {
        let text = frame("node [model=mystery]\n a\n b\n start -> a -> b -> exit");
        let found = assert_fires(Rule::NodeModelKnown, &text, 1);
        assert_eq!(position(&text, &found[0]), (4, 7));
    }

    #[test]
    fn unknown_stylesheet_model_warns_inside_value() {
        let text = frame("model_stylesheet=\"* { model: known-model; }\n  #a { model: \\\"opus-99\\\" }\"\n a\n start -> a -> exit");
        let found = assert_fires(Rule::StylesheetModelKnown, &text, 1);
        assert_eq!(
            found[0].message,
            "model_stylesheet sets model 'opus-99', which is neither a catalog id nor an alias"
        );
        assert_eq!(position(&text, &found[0]), (5, 15));
        let span = found[0].span.expect("span");
        assert_eq!(&text[span.range()], "\\\"opus-99\\\"");
    }
}
