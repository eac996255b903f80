//! The model stylesheet: CSS-like rules in the graph attribute `model_stylesheet` that fill model settings on nodes (SPEC 2.12).
//!
//! [`Stylesheet::parse`] turns the attribute text into rules and reports every syntax error with a byte range inside that text;
//! [`Stylesheet::resolve`] gives the declarations a node receives, and [`Stylesheet::declarations`] lists what was written, for lints such as `stylesheet_model_known` (SPEC 3.2).
//! This module only knows the stylesheet text: it does not compute line and column in the workflow file, and it does not apply the wider resolution order in which explicit node attributes beat the stylesheet.

mod parser;

use std::ops::Range;
use std::sync::Arc;

/// A parsed model stylesheet (SPEC 2.12).
///
/// Holds its rules in source order; the order matters because ties in specificity go to the rule written last.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stylesheet {
    rules: Vec<Rule>,
}

/// A syntax error with the byte range inside the stylesheet text that it concerns.
///
/// Every error of SPEC 2.12 is reported as the rule `stylesheet_syntax`: syntax errors, unknown properties and invalid `reasoning_effort` or `backend` values.
/// The range always lies on character boundaries of the parsed text; it is empty only when the error is at the end of the text (for example a missing `{` after the last selector).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct StylesheetError {
    /// One-line description, lowercase and without a final period.
    pub message: String,
    /// Byte range inside the stylesheet text.
    pub range: Range<usize>,
}

/// Properties a stylesheet may set (SPEC 2.12).
///
/// The aliases `llm_model` and `llm_provider` parse to [`StyleProperty::Model`] and [`StyleProperty::Provider`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StyleProperty {
    /// `model` (alias `llm_model`): a model id or alias, passed through as written.
    Model,
    /// `provider` (alias `llm_provider`): a provider name, passed through as written.
    Provider,
    /// `reasoning_effort`: one of `low`, `medium`, `high`.
    ReasoningEffort,
    /// `backend`: one of `api`, `cli`, `acp`.
    Backend,
}

impl StyleProperty {
    /// The canonical property name, as written in a stylesheet (never an alias).
    pub fn as_str(self) -> &'static str {
        match self {
            StyleProperty::Model => "model",
            StyleProperty::Provider => "provider",
            StyleProperty::ReasoningEffort => "reasoning_effort",
            StyleProperty::Backend => "backend",
        }
    }
}

/// The values a node receives from the stylesheet; `None` where no rule matched.
///
/// `reasoning_effort` and `backend`, when set, hold one of the values SPEC 2.12 allows: the parser rejects any other.
/// Values are shared with the stylesheet (a reference-count increment, no copy), so resolving every node of a large workflow allocates nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StyleDeclarations {
    /// The winning `model` (or `llm_model`) value.
    pub model: Option<Arc<str>>,
    /// The winning `provider` (or `llm_provider`) value.
    pub provider: Option<Arc<str>>,
    /// The winning `reasoning_effort` value: `low`, `medium` or `high`.
    pub reasoning_effort: Option<Arc<str>>,
    /// The winning `backend` value: `api`, `cli` or `acp`.
    pub backend: Option<Arc<str>>,
}

/// One declaration as written, for lints (e.g. `stylesheet_model_known`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclarationRef<'a> {
    /// The property, with aliases mapped to their canonical property.
    pub property: StyleProperty,
    /// The value, with the quotes and escapes of a quoted string removed.
    pub value: &'a str,
    /// Byte range of the value as written in the stylesheet text, quotes included.
    pub range: Range<usize>,
}

impl Stylesheet {
    /// Parses the text; returns every error found (at least one on failure).
    ///
    /// Empty, whitespace-only and comment-only text is valid and gives an empty stylesheet.
    /// The parser recovers at the next `;` or `}` (or at what looks like the next rule) so that one call reports all errors, in source order.
    /// It runs in time linear in the length of the text and never panics.
    pub fn parse(text: &str) -> Result<Stylesheet, Vec<StylesheetError>> {
        parser::parse(text)
    }

    /// Resolves the declarations for a node.
    ///
    /// Per property, the most specific matching rule wins (`*` = 0, shape = 1, `.class` = 2, `#id` = 3); ties go to the rule written last, and within one rule to the declaration written last (SPEC 2.12).
    /// A shape selector matches when `shape` equals it; a class selector when `classes` contains it.
    pub fn resolve(&self, node_id: &str, shape: &str, classes: &[String]) -> StyleDeclarations {
        self.winners(node_id, shape, classes).into_declarations()
    }

    /// As [`Stylesheet::resolve`], but borrowing the winning values: lowering shares only
    /// those it keeps and parses the others in place.
    pub(crate) fn winners(&self, node_id: &str, shape: &str, classes: &[String]) -> Winners<'_> {
        let mut winners = Winners::default();
        for rule in &self.rules {
            if !rule.selector.matches(node_id, shape, classes) {
                continue;
            }
            let specificity = rule.selector.specificity();
            for declaration in &rule.declarations {
                let slot = winners.slot_mut(declaration.property);
                // SPEC 2.12: ties in specificity go to the rule written last, hence `>=`.
                if slot.is_none_or(|(best, _)| specificity >= best) {
                    *slot = Some((specificity, &declaration.value));
                }
            }
        }
        winners
    }

    /// Every declaration in source order, aliases mapped to their canonical property.
    pub fn declarations(&self) -> impl Iterator<Item = DeclarationRef<'_>> {
        self.rules.iter().flat_map(|rule| {
            rule.declarations.iter().map(|declaration| DeclarationRef {
                property: declaration.property,
                value: &declaration.value,
                range: declaration.range.clone(),
            })
        })
    }

    /// True when there are no rules.
    ///
    /// A rule with an empty block, such as `* {}`, still counts as a rule.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

/// One rule: a selector and its declarations in source order.
#[derive(Debug, Clone, PartialEq)]
struct Rule {
    selector: Selector,
    declarations: Vec<Declaration>,
}

/// The four selector kinds of SPEC 2.12.
#[derive(Debug, Clone, PartialEq)]
enum Selector {
    /// `*`, matching every node.
    Universal,
    /// A shape name such as `box`, matching nodes whose `shape` equals it.
    Shape(String),
    /// `#node_id`, matching the node with that id.
    Id(String),
    /// `.class`, matching nodes whose classes contain it.
    Class(String),
}

impl Selector {
    /// SPEC 2.12: `*` = 0, shape = 1, `.class` = 2, `#id` = 3.
    fn specificity(&self) -> u8 {
        match self {
            Selector::Universal => 0,
            Selector::Shape(_) => 1,
            Selector::Class(_) => 2,
            Selector::Id(_) => 3,
        }
    }

    fn matches(&self, node_id: &str, shape: &str, classes: &[String]) -> bool {
        match self {
            Selector::Universal => true,
            Selector::Shape(name) => name == shape,
            Selector::Id(id) => id == node_id,
            Selector::Class(class) => classes.iter().any(|candidate| candidate == class),
        }
    }
}

/// One valid declaration: the value is unescaped and, for enumerated properties, allowed.
#[derive(Debug, Clone, PartialEq)]
struct Declaration {
    property: StyleProperty,
    value: Arc<str>,
    /// Byte range of the value as written, quotes included.
    range: Range<usize>,
}

/// The best declaration seen so far per property, with its specificity.
#[derive(Default)]
pub(crate) struct Winners<'a> {
    model: Option<(u8, &'a Arc<str>)>,
    provider: Option<(u8, &'a Arc<str>)>,
    reasoning_effort: Option<(u8, &'a Arc<str>)>,
    backend: Option<(u8, &'a Arc<str>)>,
}

impl<'a> Winners<'a> {
    /// The winning `model` value.
    pub(crate) fn model(&self) -> Option<&'a Arc<str>> {
        self.model.map(|(_, value)| value)
    }

    /// The winning `provider` value.
    pub(crate) fn provider(&self) -> Option<&'a Arc<str>> {
        self.provider.map(|(_, value)| value)
    }

    /// The winning `reasoning_effort` value.
    pub(crate) fn reasoning_effort(&self) -> Option<&'a str> {
        self.reasoning_effort.map(|(_, value)| &**value)
    }

    /// The winning `backend` value.
    pub(crate) fn backend(&self) -> Option<&'a str> {
        self.backend.map(|(_, value)| &**value)
    }

    fn slot_mut(&mut self, property: StyleProperty) -> &mut Option<(u8, &'a Arc<str>)> {
        match property {
            StyleProperty::Model => &mut self.model,
            StyleProperty::Provider => &mut self.provider,
            StyleProperty::ReasoningEffort => &mut self.reasoning_effort,
            StyleProperty::Backend => &mut self.backend,
        }
    }

    fn into_declarations(self) -> StyleDeclarations {
        let value = |winner: Option<(u8, &Arc<str>)>| winner.map(|(_, value)| Arc::clone(value));
        StyleDeclarations {
            model: value(self.model),
            provider: value(self.provider),
            reasoning_effort: value(self.reasoning_effort),
            backend: value(self.backend),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node as the resolver sees it.
    struct Node<'a> {
        id: &'a str,
        shape: &'a str,
        classes: &'a [&'a str],
    }

    /// Parses `stylesheet`, resolves `node` and compares with the `(property, value)` pairs expected; properties not listed must be unset.
    fn check(stylesheet: &str, node: Node<'_>, expected: &[(StyleProperty, &str)]) {
        let parsed = Stylesheet::parse(stylesheet)
            .unwrap_or_else(|errors| panic!("{stylesheet:?} should parse: {errors:?}"));
        let classes: Vec<String> = node.classes.iter().map(|class| class.to_string()).collect();
        let mut want = StyleDeclarations::default();
        for (property, value) in expected {
            let slot = match property {
                StyleProperty::Model => &mut want.model,
                StyleProperty::Provider => &mut want.provider,
                StyleProperty::ReasoningEffort => &mut want.reasoning_effort,
                StyleProperty::Backend => &mut want.backend,
            };
            *slot = Some(Arc::from(*value));
        }
        assert_eq!(
            parsed.resolve(node.id, node.shape, &classes),
            want,
            "stylesheet {stylesheet:?}, node {:?}",
            node.id
        );
    }

    fn node<'a>(id: &'a str, shape: &'a str, classes: &'a [&'a str]) -> Node<'a> {
        Node { id, shape, classes }
    }

    use StyleProperty::{Backend, Model, Provider, ReasoningEffort};

    const SPEC_EXAMPLE: &str = "* { model: claude-sonnet-4-5; } .code { model: claude-opus-4-6; } #critical_review { model: gpt-5.2; }";

    #[test]
    fn spec_example() {
        check(
            SPEC_EXAMPLE,
            node("plan", "box", &[]),
            &[(Model, "claude-sonnet-4-5")],
        );
        check(
            SPEC_EXAMPLE,
            node("implement", "box", &["code"]),
            &[(Model, "claude-opus-4-6")],
        );
        check(
            SPEC_EXAMPLE,
            node("critical_review", "box", &["code"]),
            &[(Model, "gpt-5.2")],
        );
    }

    #[test]
    fn more_specific_selector_wins_whatever_the_order() {
        // Ordered from least to most specific (SPEC 2.12).
        let selectors = ["*", "box", ".code", "#review"];
        for (low_index, low) in selectors.iter().enumerate() {
            for high in &selectors[low_index + 1..] {
                let low_first = format!("{low} {{ model: low }} {high} {{ model: high }}");
                let high_first = format!("{high} {{ model: high }} {low} {{ model: low }}");
                for stylesheet in [low_first, high_first] {
                    check(
                        &stylesheet,
                        node("review", "box", &["code"]),
                        &[(Model, "high")],
                    );
                }
            }
        }
    }

    #[test]
    fn equal_specificity_goes_to_the_later_rule() {
        let classes = node("n", "box", &["a", "b"]);
        check(".a { model: x } .b { model: y }", classes, &[(Model, "y")]);
        let classes = node("n", "box", &["a", "b"]);
        check(".b { model: y } .a { model: x }", classes, &[(Model, "x")]);
        check(
            "* { model: x } * { model: y }",
            node("n", "box", &[]),
            &[(Model, "y")],
        );
        check(
            "#n { model: x } box { model: z } #n { model: y }",
            node("n", "box", &[]),
            &[(Model, "y")],
        );
    }

    #[test]
    fn later_declaration_in_one_rule_wins() {
        check(
            "* { model: x; llm_model: y }",
            node("n", "box", &[]),
            &[(Model, "y")],
        );
    }

    #[test]
    fn each_property_is_resolved_on_its_own() {
        check(
            "* { model: a; provider: anthropic; reasoning_effort: low } .code { model: b } #n { reasoning_effort: high; backend: cli }",
            node("n", "box", &["code"]),
            &[
                (Model, "b"),
                (Provider, "anthropic"),
                (ReasoningEffort, "high"),
                (Backend, "cli"),
            ],
        );
    }

    #[test]
    fn aliases_set_model_and_provider() {
        check(
            "* { llm_model: gpt-5.2; llm_provider: openai }",
            node("n", "box", &[]),
            &[(Model, "gpt-5.2"), (Provider, "openai")],
        );
    }

    #[test]
    fn selectors_that_do_not_match_set_nothing() {
        let stylesheet = "diamond { model: a } .other { provider: b } #elsewhere { backend: api }";
        check(stylesheet, node("n", "box", &["code"]), &[]);
        check(stylesheet, node("n", "diamond", &[]), &[(Model, "a")]);
    }

    #[test]
    fn quoted_values_are_unescaped() {
        check(
            r#"* { model: "my \"special\" \\ model"; provider: "" }"#,
            node("n", "box", &[]),
            &[(Model, r#"my "special" \ model"#), (Provider, "")],
        );
    }

    #[test]
    fn empty_stylesheet_sets_nothing() {
        for text in ["", " \n\t ", "/* only a comment */"] {
            let parsed = Stylesheet::parse(text).unwrap();
            assert!(parsed.is_empty(), "{text:?}");
            check(text, node("n", "box", &["code"]), &[]);
        }
        let empty_rule = Stylesheet::parse("* {}").unwrap();
        assert!(!empty_rule.is_empty());
        check("* {}", node("n", "box", &[]), &[]);
    }

    #[test]
    fn declarations_are_listed_in_source_order_with_value_ranges() {
        let text = r#"* { llm_model: a } #n { backend: "acp"; model: b; }"#;
        let parsed = Stylesheet::parse(text).unwrap();
        let listed: Vec<DeclarationRef<'_>> = parsed.declarations().collect();
        assert_eq!(
            listed,
            vec![
                DeclarationRef {
                    property: Model,
                    value: "a",
                    range: 15..16
                },
                DeclarationRef {
                    property: Backend,
                    value: "acp",
                    range: 33..38
                },
                DeclarationRef {
                    property: Model,
                    value: "b",
                    range: 47..48
                },
            ]
        );
        assert_eq!(&text[33..38], r#""acp""#);
    }

    #[test]
    fn property_names_are_canonical() {
        let names: Vec<&str> = [Model, Provider, ReasoningEffort, Backend]
            .into_iter()
            .map(StyleProperty::as_str)
            .collect();
        assert_eq!(names, ["model", "provider", "reasoning_effort", "backend"]);
    }
}
