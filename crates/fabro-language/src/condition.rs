//! The condition language of edge guards and `manager.stop_condition` (SPEC 4.6).
//!
//! A condition is parsed once into a [`Condition`] (the parser lives in `condition/parser.rs`) and then evaluated
//! against a [`ConditionContext`] as often as needed. The parsed form keeps the source text and refers to keys and
//! literals by byte range, so parsing allocates little and evaluating plain string comparisons allocates nothing.
//! Regexes of `matches` clauses are compiled at parse time, which is also when an invalid one is reported
//! (SPEC 3.2 `condition_syntax`).

mod parser;

use std::borrow::Cow;
use std::fmt::{self, Write as _};
use std::ops::Range;
use std::sync::Arc;

use regex::Regex;
use serde_json::Value;

use crate::status::StageStatus;

/// A parsed condition expression (parsed once, evaluated many times; never re-parsed per evaluation).
///
/// Equality compares the parsed form, including the byte ranges of its clauses, so the same expression with
/// different surrounding whitespace is not equal.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    /// The parse, behind one pointer: every edge of a large workflow holds a condition
    /// slot, and the many edges with the same condition share one parse.
    parsed: Arc<Parsed>,
}

/// What a [`Condition`] shares.
#[derive(Debug, PartialEq)]
struct Parsed {
    /// The text given to [`Condition::parse`], untrimmed, so clause ranges index into it.
    source: Box<str>,
    /// Clauses in source order; `Clause::starts_alternative` splits them into the `||` alternatives.
    clauses: Box<[Clause]>,
}

/// A parse error with the byte range (into the condition text) that it concerns.
///
/// The range is within the text and on character boundaries; it is empty only when the problem is the end of the
/// text itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConditionError {
    /// One-line description naming what was expected, lowercase, without a final period.
    pub message: String,
    /// Byte range of the offending text.
    pub range: Range<usize>,
}

/// What a condition reads. The engine implements this over its run context.
pub trait ConditionContext {
    /// Outcome string of the stage just completed (canonical status or custom outcome).
    fn outcome(&self) -> &str;
    /// The outcome's preferred label ("" when none).
    fn preferred_label(&self) -> &str;
    /// Context entry with exactly this name, if present. The engine materialises blob refs before returning.
    fn lookup(&self, key: &str) -> Option<Cow<'_, Value>>;
}

/// Comparison operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// `=`: rendered value equals the literal.
    Eq,
    /// `!=`: rendered value differs from the literal.
    NotEq,
    /// `>`: numeric greater-than.
    Gt,
    /// `<`: numeric less-than.
    Lt,
    /// `>=`: numeric greater-or-equal.
    Ge,
    /// `<=`: numeric less-or-equal.
    Le,
    /// `contains`: array element or substring.
    Contains,
    /// `matches`: unanchored regex search.
    Matches,
}

impl Operator {
    /// The operator as written in a condition: `=`, `!=`, `>`, `<`, `>=`, `<=`, `contains` or `matches`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::Eq => "=",
            Operator::NotEq => "!=",
            Operator::Gt => ">",
            Operator::Lt => "<",
            Operator::Ge => ">=",
            Operator::Le => "<=",
            Operator::Contains => "contains",
            Operator::Matches => "matches",
        }
    }
}

/// One `key op literal` clause, as exposed to lint rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comparison<'a> {
    /// The key as written, e.g. `outcome` or `context.ready`.
    pub key: &'a str,
    /// The comparison operator.
    pub operator: Operator,
    /// The literal with quotes removed and escapes resolved; not canonicalised (`succeeded` stays `succeeded`).
    pub literal: &'a str,
    /// Byte range of the clause in the text, from the key to the end of the literal (closing quote included).
    pub range: Range<usize>,
}

impl Condition {
    /// Parses `text`; empty or all-whitespace text yields the always-true condition.
    ///
    /// Fails with a [`ConditionError`] for anything outside the grammar of SPEC 4.6, including `(` at the start of a
    /// clause, a word operator not surrounded by whitespace, an unknown escape in a quoted literal and a `matches`
    /// literal that is not a valid regex.
    pub fn parse(text: &str) -> Result<Condition, ConditionError> {
        let clauses = parser::parse(text)?;
        Ok(Condition {
            parsed: Arc::new(Parsed {
                source: text.into(),
                clauses: clauses.into(),
            }),
        })
    }

    /// Evaluates against `context`.
    pub fn evaluate(&self, context: &dyn ConditionContext) -> bool {
        // SPEC 4.6: `&&` binds tighter than `||`, so the clauses form alternatives of conjunctions.
        self.parsed.clauses.is_empty()
            || self
                .parsed
                .clauses
                .chunk_by(|_, next| !next.starts_alternative)
                .any(|alternative| {
                    alternative
                        .iter()
                        .all(|clause| clause.holds(&self.parsed.source, context))
                })
    }

    /// True when the condition is empty (always true).
    pub fn is_empty(&self) -> bool {
        self.parsed.clauses.is_empty()
    }

    /// Every comparison clause with an operator, in source order (for lints such as orphan_custom_outcome).
    pub fn comparisons(&self) -> impl Iterator<Item = Comparison<'_>> {
        self.parsed.clauses.iter().filter_map(move |clause| {
            let (operator, literal) = clause.test.comparison()?;
            Some(Comparison {
                key: clause.key(&self.parsed.source),
                operator,
                literal: literal.text(&self.parsed.source),
                range: clause.range.clone(),
            })
        })
    }

    /// Every key referenced (comparisons and truthiness tests), in source order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.parsed
            .clauses
            .iter()
            .map(move |clause| clause.key(&self.parsed.source))
    }
}

impl fmt::Display for Condition {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.parsed.source.trim())
    }
}

/// Renders a JSON value as conditions see it (SPEC 4.6): strings as-is, booleans true/false,
/// numbers in shortest JSON form, null as "", arrays/objects as compact JSON.
///
/// Borrows for strings, booleans and null; allocates only for numbers, arrays and objects.
pub fn render_value(value: &Value) -> Cow<'_, str> {
    match value {
        Value::String(text) => Cow::Borrowed(text),
        Value::Bool(true) => Cow::Borrowed("true"),
        Value::Bool(false) => Cow::Borrowed("false"),
        Value::Null => Cow::Borrowed(""),
        // serde_json's `Display` is compact JSON, and numbers use the shortest round-trip form.
        Value::Number(_) | Value::Array(_) | Value::Object(_) => Cow::Owned(value.to_string()),
    }
}

/// One `[!…] Key [Op Literal]` unary of the grammar (SPEC 4.6).
#[derive(Debug, Clone, PartialEq)]
struct Clause {
    /// An odd number of `!` precedes the clause.
    negated: bool,
    /// First clause of an `||` alternative; later clauses of the same alternative follow `&&`.
    starts_alternative: bool,
    /// Byte range of the key in the source.
    key: Range<usize>,
    /// How the key resolves, decided once at parse time.
    key_kind: KeyKind,
    /// Byte range from the key to the end of the literal (or of the key, for truthiness tests).
    range: Range<usize>,
    /// What is checked on the resolved value.
    test: Test,
}

/// Key resolution classes of SPEC 4.6.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyKind {
    /// `outcome`: [`ConditionContext::outcome`].
    Outcome,
    /// `preferred_label`: [`ConditionContext::preferred_label`].
    PreferredLabel,
    /// `context.KEY`: entry `context.KEY`, falling back to entry `KEY`.
    ContextPrefixed,
    /// Any other key: the entry of exactly that name.
    Entry,
}

/// The check a clause makes, with everything derivable from the literal prepared at parse time.
#[derive(Debug, Clone, PartialEq)]
enum Test {
    /// Bare key: the rendered value is non-empty and neither `false` nor `0`.
    Truthy,
    /// `=` or `!=`.
    Equality {
        operator: EqualityOperator,
        literal: Literal,
        statuses: StatusMatching,
    },
    /// `>`, `<`, `>=` or `<=`; `number` is `None` when the literal is not numeric, making the clause false.
    Ordering {
        operator: OrderingOperator,
        literal: Literal,
        number: Option<f64>,
    },
    /// `contains`.
    Contains { literal: Literal },
    /// `matches`, with the regex compiled from the literal.
    Matches { literal: Literal, pattern: Pattern },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EqualityOperator {
    Eq,
    NotEq,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OrderingOperator {
    Gt,
    Lt,
    Ge,
    Le,
}

/// Whether `=`/`!=` canonicalise status names first (SPEC 4.6: only for `outcome` and `context.outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StatusMatching {
    /// Compare the rendered value with the literal as written.
    Verbatim,
    /// Replace each side that parses as a [`StageStatus`] by its canonical name; holds the literal's status.
    Canonical(Option<StageStatus>),
}

/// A literal's text: a slice of the source when it needs no unescaping, which is the common case.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Literal {
    /// Byte range in the source (a bare literal, or a quoted one without escapes, quotes excluded).
    Source(Range<usize>),
    /// A quoted literal whose escapes were resolved.
    Unescaped(Box<str>),
}

/// A compiled `matches` regex; two patterns are equal when their source text is.
#[derive(Debug, Clone)]
struct Pattern(Regex);

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

/// A key's value during evaluation; missing entries resolve to `Text("")` (SPEC 4.6: null renders as "").
enum Resolved<'a> {
    Text(&'a str),
    Json(Cow<'a, Value>),
}

impl Clause {
    fn key<'s>(&self, source: &'s str) -> &'s str {
        source.get(self.key.clone()).unwrap_or_default()
    }

    fn holds(&self, source: &str, context: &dyn ConditionContext) -> bool {
        let key = self.key(source);
        let value = resolve(self.key_kind, key, context);
        self.test.holds(&value, source) != self.negated
    }
}

/// SPEC 4.6 key resolution table.
fn resolve<'c>(kind: KeyKind, key: &str, context: &'c dyn ConditionContext) -> Resolved<'c> {
    let entry = match kind {
        KeyKind::Outcome => return Resolved::Text(context.outcome()),
        KeyKind::PreferredLabel => return Resolved::Text(context.preferred_label()),
        KeyKind::ContextPrefixed => context.lookup(key).or_else(|| {
            key.strip_prefix("context.")
                .and_then(|bare| context.lookup(bare))
        }),
        KeyKind::Entry => context.lookup(key),
    };
    entry.map_or(Resolved::Text(""), Resolved::Json)
}

impl Test {
    fn holds(&self, value: &Resolved<'_>, source: &str) -> bool {
        match self {
            Test::Truthy => {
                value.with_text(|text| !text.is_empty() && text != "false" && text != "0")
            }
            Test::Equality {
                operator,
                literal,
                statuses,
            } => {
                let literal = literal.text(source);
                let equal = match statuses {
                    StatusMatching::Verbatim => value.renders_as(literal),
                    StatusMatching::Canonical(literal_status) => {
                        let expected = literal_status.map_or(literal, |status| status.as_str());
                        value.with_text(|text| {
                            StageStatus::parse(text).map_or(text, |status| status.as_str())
                                == expected
                        })
                    }
                };
                match operator {
                    EqualityOperator::Eq => equal,
                    EqualityOperator::NotEq => !equal,
                }
            }
            Test::Ordering {
                operator, number, ..
            } => match (value.number(), number) {
                (Some(left), Some(right)) => match operator {
                    OrderingOperator::Gt => left > *right,
                    OrderingOperator::Lt => left < *right,
                    OrderingOperator::Ge => left >= *right,
                    OrderingOperator::Le => left <= *right,
                },
                _ => false,
            },
            Test::Contains { literal } => {
                let literal = literal.text(source);
                match value {
                    Resolved::Json(json) => match json.as_ref() {
                        Value::Array(items) => items.iter().any(|item| renders_as(item, literal)),
                        other => render_value(other).contains(literal),
                    },
                    Resolved::Text(text) => text.contains(literal),
                }
            }
            Test::Matches { pattern, .. } => value.with_text(|text| pattern.0.is_match(text)),
        }
    }

    /// The public operator and the literal, or `None` for a truthiness test.
    fn comparison(&self) -> Option<(Operator, &Literal)> {
        match self {
            Test::Truthy => None,
            Test::Equality {
                operator, literal, ..
            } => Some((
                match operator {
                    EqualityOperator::Eq => Operator::Eq,
                    EqualityOperator::NotEq => Operator::NotEq,
                },
                literal,
            )),
            Test::Ordering {
                operator, literal, ..
            } => Some((
                match operator {
                    OrderingOperator::Gt => Operator::Gt,
                    OrderingOperator::Lt => Operator::Lt,
                    OrderingOperator::Ge => Operator::Ge,
                    OrderingOperator::Le => Operator::Le,
                },
                literal,
            )),
            Test::Contains { literal } => Some((Operator::Contains, literal)),
            Test::Matches { literal, .. } => Some((Operator::Matches, literal)),
        }
    }
}

impl Literal {
    fn text<'a>(&'a self, source: &'a str) -> &'a str {
        match self {
            Literal::Source(range) => source.get(range.clone()).unwrap_or_default(),
            Literal::Unescaped(text) => text,
        }
    }
}

impl Resolved<'_> {
    /// Runs `check` on the rendered value; allocates only for numbers, arrays and objects.
    fn with_text<R>(&self, check: impl FnOnce(&str) -> R) -> R {
        match self {
            Resolved::Text(text) => check(text),
            Resolved::Json(json) => check(&render_value(json)),
        }
    }

    /// Whether the rendered value equals `expected`, without allocating.
    fn renders_as(&self, expected: &str) -> bool {
        match self {
            Resolved::Text(text) => *text == expected,
            Resolved::Json(json) => renders_as(json, expected),
        }
    }

    /// SPEC 4.6: the rendered value parsed as a 64-bit float, if it is numeric.
    fn number(&self) -> Option<f64> {
        match self {
            Resolved::Text(text) => text.parse().ok(),
            Resolved::Json(json) => match json.as_ref() {
                Value::Number(number) => number.as_f64(),
                Value::String(text) => text.parse().ok(),
                // Renderings of these ("", "true", "false", JSON text) never parse as floats.
                Value::Null | Value::Bool(_) | Value::Array(_) | Value::Object(_) => None,
            },
        }
    }
}

/// Whether [`render_value`] of `value` equals `expected`, compared piecewise so nothing is allocated.
fn renders_as(value: &Value, expected: &str) -> bool {
    match value {
        Value::String(text) => text == expected,
        Value::Null | Value::Bool(_) => render_value(value) == expected,
        Value::Number(_) | Value::Array(_) | Value::Object(_) => {
            let mut remaining = PrefixMatcher {
                remaining: expected,
            };
            write!(remaining, "{value}").is_ok() && remaining.remaining.is_empty()
        }
    }
}

/// A `fmt::Write` sink that consumes `remaining` and fails as soon as the written text diverges from it.
struct PrefixMatcher<'a> {
    remaining: &'a str,
}

impl fmt::Write for PrefixMatcher<'_> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        let rest = self.remaining.strip_prefix(text).ok_or(fmt::Error)?;
        self.remaining = rest;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::collections::HashMap;

    use serde_json::{json, Value};

    use super::{render_value, Comparison, Condition, ConditionContext, Operator};

    /// A run context backed by a map; `owned` makes `lookup` return owned values like materialised blob refs.
    struct TestContext {
        outcome: &'static str,
        preferred_label: &'static str,
        entries: HashMap<String, Value>,
        owned: bool,
    }

    impl ConditionContext for TestContext {
        fn outcome(&self) -> &str {
            self.outcome
        }

        fn preferred_label(&self) -> &str {
            self.preferred_label
        }

        fn lookup(&self, key: &str) -> Option<Cow<'_, Value>> {
            let value = self.entries.get(key)?;
            Some(if self.owned {
                Cow::Owned(value.clone())
            } else {
                Cow::Borrowed(value)
            })
        }
    }

    fn context(outcome: &'static str, entries: Value) -> TestContext {
        let entries = match entries {
            Value::Object(map) => map.into_iter().collect(),
            other => panic!("test entries must be an object, got {other}"),
        };
        TestContext {
            outcome,
            preferred_label: "",
            entries,
            owned: false,
        }
    }

    /// Parses `text`, evaluates it against `context` with borrowed and with owned lookups, and compares.
    fn check(text: &str, context: &mut TestContext, expected: bool) {
        let condition = Condition::parse(text)
            .unwrap_or_else(|error| panic!("{text:?} should parse, got {error:?}"));
        for owned in [false, true] {
            context.owned = owned;
            assert_eq!(
                condition.evaluate(context),
                expected,
                "{text:?} (owned lookups: {owned})"
            );
        }
    }

    #[test]
    fn empty_condition_is_always_true() {
        let mut ctx = context("fail", json!({}));
        check("", &mut ctx, true);
        check("  \t\n ", &mut ctx, true);
        let condition = Condition::parse(" ").expect("whitespace parses");
        assert!(condition.is_empty());
        assert_eq!(condition.to_string(), "");
        assert!(!Condition::parse("a").expect("parses").is_empty());
    }

    #[test]
    fn equality_compares_rendered_values_case_sensitively() {
        let mut ctx = context(
            "success",
            json!({"mode": "fast", "flag": true, "count": 3, "ratio": 1.5, "none": null,
                   "list": [1, "a"], "map": {"k": "v"}}),
        );
        check("mode=fast", &mut ctx, true);
        check("mode=Fast", &mut ctx, false);
        check("mode != fast", &mut ctx, false);
        check("mode!=slow", &mut ctx, true);
        check("flag=true", &mut ctx, true);
        check("count=3", &mut ctx, true);
        check("count=3.0", &mut ctx, false);
        check("ratio=1.5", &mut ctx, true);
        check("none=\"\"", &mut ctx, true);
        check("missing=\"\"", &mut ctx, true);
        check("missing!=x", &mut ctx, true);
        check(r#"list="[1,\"a\"]""#, &mut ctx, true);
        check(r#"list="[1,\"a\"] ""#, &mut ctx, false);
        check(r#"map="{\"k\":\"v\"}""#, &mut ctx, true);
        check(r#"map="{\"k\":""#, &mut ctx, false);
    }

    #[test]
    fn outcome_statuses_are_canonicalised_on_both_sides() {
        let mut ctx = context("success", json!({"outcome": "FAILED"}));
        check("outcome=success", &mut ctx, true);
        check("outcome=succeeded", &mut ctx, true);
        check("outcome=SUCCEEDED", &mut ctx, true);
        check("outcome!=succeeded", &mut ctx, false);
        check("outcome=fail", &mut ctx, false);
        // `context.outcome` reads the context entry, canonicalised too.
        check("context.outcome=fail", &mut ctx, true);
        check("context.outcome=error", &mut ctx, true);
        check("context.outcome=FAILED", &mut ctx, true);
        check("context.outcome=success", &mut ctx, false);

        let mut ctx = context("Failed", json!({}));
        check("outcome=fail", &mut ctx, true);
        check("outcome=failure", &mut ctx, true);
        check("outcome=ERROR", &mut ctx, true);
        check("outcome=partial_success", &mut ctx, false);

        let mut ctx = context("partially_succeeded", json!({}));
        check("outcome=partial_success", &mut ctx, true);
    }

    #[test]
    fn custom_outcomes_compare_verbatim() {
        let mut ctx = context("needs_DoD", json!({"status": "succeeded"}));
        check("outcome=needs_DoD", &mut ctx, true);
        check("outcome=needs_dod", &mut ctx, false);
        check("outcome=success", &mut ctx, false);
        check("outcome!=needs_dod", &mut ctx, true);
        // Other keys never canonicalise statuses.
        check("status=success", &mut ctx, false);
        check("status=succeeded", &mut ctx, true);
    }

    #[test]
    fn preferred_label_resolves_from_the_outcome() {
        let mut ctx = context("success", json!({"preferred_label": "ignored"}));
        ctx.preferred_label = "Fix";
        check("preferred_label=Fix", &mut ctx, true);
        check("preferred_label=fix", &mut ctx, false);
        check("preferred_label", &mut ctx, true);
    }

    #[test]
    fn context_prefix_falls_back_to_the_bare_entry() {
        let mut ctx = context(
            "success",
            json!({"ready": "true", "context.mode": "prefixed", "mode": "bare",
                   "internal.node_visit_count": 6}),
        );
        check("context.ready=true", &mut ctx, true);
        check("context.mode=prefixed", &mut ctx, true);
        check("context.mode=bare", &mut ctx, false);
        check("mode=bare", &mut ctx, true);
        check("context.internal.node_visit_count >= 5", &mut ctx, true);
        check("internal.node_visit_count=6", &mut ctx, true);
        // A plain key never gains a `context.` prefix.
        check("ready.x", &mut ctx, false);
        check("context.missing", &mut ctx, false);
    }

    #[test]
    fn ordering_compares_numbers() {
        let mut ctx = context(
            "success",
            json!({"n": 5, "s": "2.5", "word": "five", "flag": true, "empty": ""}),
        );
        check("n > 4", &mut ctx, true);
        check("n > 5", &mut ctx, false);
        check("n<6", &mut ctx, true);
        check("n<5", &mut ctx, false);
        check("n>=5", &mut ctx, true);
        check("n>=5.5", &mut ctx, false);
        check("n<=5", &mut ctx, true);
        check("n<=4.99", &mut ctx, false);
        check("s > 2", &mut ctx, true);
        check("s < 1e1", &mut ctx, true);
        check("n > -1", &mut ctx, true);
    }

    #[test]
    fn ordering_with_a_non_numeric_side_is_false() {
        let mut ctx = context("success", json!({"n": 5, "word": "five", "flag": true}));
        check("word > 1", &mut ctx, false);
        check("word < 1", &mut ctx, false);
        check("n > five", &mut ctx, false);
        check("n <= five", &mut ctx, false);
        check("flag >= 0", &mut ctx, false);
        check("missing < 1", &mut ctx, false);
        check("outcome > 1", &mut ctx, false);
        // Negation applies after the comparison.
        check("!word > 1", &mut ctx, true);
    }

    #[test]
    fn contains_tests_array_elements_or_substrings() {
        let mut ctx = context(
            "success",
            json!({"tags": ["alpha", 2, true, null], "text": "hello world", "n": 12345}),
        );
        check("tags contains alpha", &mut ctx, true);
        check("tags contains alp", &mut ctx, false);
        check("tags contains 2", &mut ctx, true);
        check("tags contains true", &mut ctx, true);
        check(r#"tags contains """#, &mut ctx, true);
        check("text contains lo wo", &mut ctx, true);
        check("text contains World", &mut ctx, false);
        check("n contains 234", &mut ctx, true);
        check("outcome contains ucc", &mut ctx, true);
        check("missing contains x", &mut ctx, false);
    }

    #[test]
    fn matches_searches_unanchored() {
        let mut ctx = context("success", json!({"branch": "feature/login-42", "n": 17}));
        check("branch matches login-\\d+", &mut ctx, true);
        check("branch matches ^login", &mut ctx, false);
        check("branch matches ^feature/", &mut ctx, true);
        check(r#"branch matches "^feature/\\w+-\\d{2}$""#, &mut ctx, true);
        check("n matches ^1[0-9]$", &mut ctx, true);
        check("outcome matches ^succ", &mut ctx, true);
        check("missing matches ^$", &mut ctx, true);
        check("missing matches .", &mut ctx, false);
    }

    #[test]
    fn truthiness_of_bare_keys() {
        let mut ctx = context(
            "success",
            json!({"empty": "", "false_text": "false", "zero_text": "0", "null": null,
                   "false": false, "zero": 0, "yes": "yes", "one": 1, "true": true,
                   "list": [], "FALSE": "FALSE"}),
        );
        check("empty", &mut ctx, false);
        check("false_text", &mut ctx, false);
        check("zero_text", &mut ctx, false);
        check("null", &mut ctx, false);
        check("false", &mut ctx, false);
        check("zero", &mut ctx, false);
        check("missing", &mut ctx, false);
        check("yes", &mut ctx, true);
        check("one", &mut ctx, true);
        check("true", &mut ctx, true);
        check("list", &mut ctx, true);
        check("FALSE", &mut ctx, true);
        check("outcome", &mut ctx, true);
        check("preferred_label", &mut ctx, false);
    }

    #[test]
    fn negation() {
        let mut ctx = context("success", json!({"yes": true, "mode": "fast"}));
        check("!yes", &mut ctx, false);
        check("!missing", &mut ctx, true);
        check("!!yes", &mut ctx, true);
        check("! ! ! yes", &mut ctx, false);
        check("!mode=fast", &mut ctx, false);
        check("!mode=slow", &mut ctx, true);
        check("!mode!=fast", &mut ctx, true);
        check("!outcome=succeeded || yes", &mut ctx, true);
        check("!outcome=succeeded && yes", &mut ctx, false);
    }

    #[test]
    fn and_binds_tighter_than_or() {
        let mut ctx = context("success", json!({"a": false, "b": "x", "c": true}));
        check("a && b || c", &mut ctx, true);
        check("c || a && b", &mut ctx, true);
        check("a || b && c", &mut ctx, true);
        check("a || b && missing", &mut ctx, false);
        check("b && a || missing", &mut ctx, false);
        check("a && c || b && missing", &mut ctx, false);
        check("a && c || b && c", &mut ctx, true);
        check("a || missing || c", &mut ctx, true);
        check("b && c && !a", &mut ctx, true);

        let mut ctx = context("success", json!({"ready": "true", "override": ""}));
        let spec_example = "outcome=success && context.ready=true || context.override";
        check(spec_example, &mut ctx, true);
        let mut ctx = context("fail", json!({"ready": "true", "override": ""}));
        check(spec_example, &mut ctx, false);
        let mut ctx = context("fail", json!({"ready": "false", "override": "yes"}));
        check(spec_example, &mut ctx, true);
    }

    #[test]
    fn quoted_literals_resolve_escapes_and_keep_operators() {
        let mut ctx = context(
            "success",
            json!({"q": "say \"hi\"", "path": "C:\\tmp", "lines": "a\nb\tc",
                   "ops": "x && y || z", "pad": "  padded  "}),
        );
        check(r#"q="say \"hi\"""#, &mut ctx, true);
        check(r#"path="C:\\tmp""#, &mut ctx, true);
        check(r#"lines="a\nb\tc""#, &mut ctx, true);
        check(r#"ops="x && y || z""#, &mut ctx, true);
        check(r#"ops = "x && y || z" && outcome=success"#, &mut ctx, true);
        check(r#"pad="  padded  ""#, &mut ctx, true);
        check("pad=padded", &mut ctx, false);
    }

    #[test]
    fn bare_literals_are_trimmed_and_may_contain_spaces() {
        let mut ctx = context(
            "success",
            json!({"title": "fix the build", "expr": "a|b&c", "bang": "!x (y)"}),
        );
        check("title = fix the build ", &mut ctx, true);
        check("title=fix the build&&outcome=success", &mut ctx, true);
        check("title=fix the  build", &mut ctx, false);
        check("expr=a|b&c", &mut ctx, true);
        check("bang=!x (y)", &mut ctx, true);
    }

    #[test]
    fn comparisons_and_keys_in_source_order() {
        let condition = Condition::parse(
            r#" outcome=succeeded && !ready || count >= 3 && tags contains "a\"b" || branch matches ^x "#,
        )
        .expect("parses");
        let comparisons: Vec<Comparison<'_>> = condition.comparisons().collect();
        assert_eq!(
            comparisons,
            [
                Comparison {
                    key: "outcome",
                    operator: Operator::Eq,
                    literal: "succeeded",
                    range: 1..18,
                },
                Comparison {
                    key: "count",
                    operator: Operator::Ge,
                    literal: "3",
                    range: 32..42,
                },
                Comparison {
                    key: "tags",
                    operator: Operator::Contains,
                    literal: "a\"b",
                    range: 46..66,
                },
                Comparison {
                    key: "branch",
                    operator: Operator::Matches,
                    literal: "^x",
                    range: 70..87,
                },
            ]
        );
        let keys: Vec<&str> = condition.keys().collect();
        assert_eq!(keys, ["outcome", "ready", "count", "tags", "branch"]);
        assert_eq!(
            condition.to_string(),
            r#"outcome=succeeded && !ready || count >= 3 && tags contains "a\"b" || branch matches ^x"#
        );
    }

    #[test]
    fn operator_spelling() {
        let spelled: Vec<&str> = [
            Operator::Eq,
            Operator::NotEq,
            Operator::Gt,
            Operator::Lt,
            Operator::Ge,
            Operator::Le,
            Operator::Contains,
            Operator::Matches,
        ]
        .into_iter()
        .map(Operator::as_str)
        .collect();
        assert_eq!(
            spelled,
            ["=", "!=", ">", "<", ">=", "<=", "contains", "matches"]
        );
    }

    #[test]
    fn render_value_follows_spec() {
        let cases = [
            (json!("text"), "text"),
            (json!(true), "true"),
            (json!(false), "false"),
            (json!(null), ""),
            (json!(3), "3"),
            (json!(-2.5), "-2.5"),
            (json!(1.0), "1.0"),
            (json!([1, "a", null]), r#"[1,"a",null]"#),
            (json!({"k": [true]}), r#"{"k":[true]}"#),
        ];
        for (value, expected) in cases {
            assert_eq!(render_value(&value), expected, "{value:?}");
        }
        assert!(matches!(render_value(&json!("x")), Cow::Borrowed("x")));
    }

    #[test]
    fn conditions_compare_by_parsed_form() {
        let first = Condition::parse("a matches ^x && b").expect("parses");
        let second = Condition::parse("a matches ^x && b").expect("parses");
        let other = Condition::parse("a matches ^y && b").expect("parses");
        assert_eq!(first, second);
        assert_ne!(first, other);
        assert_eq!(first.clone(), first);
    }
}
