//! Recursive-descent parser for the condition grammar of SPEC 4.6.
//!
//! One left-to-right pass over the text, without a separate token list: the only allocations are the clause
//! vector, unescaped quoted literals and compiled regexes. Every error names what was expected and carries a byte
//! range that lies within the text on character boundaries.

use std::ops::Range;

use regex::Regex;

use super::{
    Clause, ConditionError, EqualityOperator, KeyKind, Literal, Operator, OrderingOperator,
    Pattern, StatusMatching, Test,
};
use crate::status::StageStatus;

/// Parses `text` into clauses in source order; empty or all-whitespace text yields no clauses.
pub(super) fn parse(text: &str) -> Result<Vec<Clause>, ConditionError> {
    let mut parser = Parser {
        text,
        position: 0,
        clauses: Vec::new(),
    };
    parser.skip_whitespace();
    if !parser.at_end() {
        parser.or_expression()?;
    }
    Ok(parser.clauses)
}

/// `&&` or `||`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Connective {
    And,
    Or,
}

impl Connective {
    fn as_str(self) -> &'static str {
        match self {
            Connective::And => "&&",
            Connective::Or => "||",
        }
    }
}

/// What came right before the clause being parsed, so a missing clause is reported against it.
#[derive(Debug, Clone)]
enum Preceding {
    Start,
    Connective(Connective, Range<usize>),
    Not(Range<usize>),
}

struct Parser<'t> {
    text: &'t str,
    /// Byte offset of the next unread character; always on a character boundary.
    position: usize,
    clauses: Vec<Clause>,
}

/// Symbolic operators, longest first so `!=`, `>=` and `<=` win over `=`, `>` and `<`.
const SYMBOLIC_OPERATORS: [(&str, Operator); 6] = [
    ("!=", Operator::NotEq),
    (">=", Operator::Ge),
    ("<=", Operator::Le),
    ("=", Operator::Eq),
    (">", Operator::Gt),
    ("<", Operator::Lt),
];

const EXPECTED_OPERATOR: &str =
    "an operator (`=`, `!=`, `>`, `<`, `>=`, `<=`, `contains`, `matches`), `&&`, `||` or the end of the condition";

impl<'t> Parser<'t> {
    /// `OrExpr ::= AndExpr ("||" AndExpr)*` and `AndExpr ::= Unary ("&&" Unary)*`, flattened: each clause records
    /// whether it starts a new `||` alternative.
    fn or_expression(&mut self) -> Result<(), ConditionError> {
        let mut preceding = Preceding::Start;
        loop {
            let starts_alternative =
                !matches!(preceding, Preceding::Connective(Connective::And, _));
            let mut clause = self.unary(preceding)?;
            clause.starts_alternative = starts_alternative;
            self.clauses.push(clause);
            self.skip_whitespace();
            let start = self.position;
            match self.connective() {
                Some(connective) => {
                    self.position += 2;
                    preceding = Preceding::Connective(connective, start..self.position);
                }
                None if self.at_end() => return Ok(()),
                None => {
                    let (found, range) = self.found(start);
                    return Err(error(
                        format!("expected `&&`, `||` or the end of the condition, found {found}"),
                        range,
                    ));
                }
            }
        }
    }

    /// `Unary ::= "!" Unary | Clause`.
    fn unary(&mut self, mut preceding: Preceding) -> Result<Clause, ConditionError> {
        let mut negated = false;
        self.skip_whitespace();
        while self.peek() == Some('!') {
            negated = !negated;
            preceding = Preceding::Not(self.position..self.position + 1);
            self.position += 1;
            self.skip_whitespace();
        }
        let mut clause = self.clause(preceding)?;
        clause.negated = negated;
        Ok(clause)
    }

    /// `Clause ::= Key [Op Literal]`, neither negated nor starting an alternative until the callers say so.
    fn clause(&mut self, preceding: Preceding) -> Result<Clause, ConditionError> {
        let start = self.position;
        let Some(first) = self.peek() else {
            return Err(match preceding {
                Preceding::Connective(connective, range) => error(
                    format!("expected a clause after `{}`", connective.as_str()),
                    range,
                ),
                Preceding::Not(range) => error("expected a clause after `!`", range),
                Preceding::Start => error("expected a clause", start..start),
            });
        };
        if let Some(connective) = self.connective() {
            return Err(error(
                format!("expected a clause before `{}`", connective.as_str()),
                start..start + 2,
            ));
        }
        if first == '(' {
            // SPEC 4.6: grouping is by precedence alone.
            return Err(error(
                "expected a key, found `(`: parentheses are not part of the condition language (`&&` binds tighter than `||`)",
                start..start + 1,
            ));
        }
        if !is_key_start(first) {
            let (found, range) = self.found(start);
            return Err(error(
                format!("expected a key (a letter or `_`), found {found}"),
                range,
            ));
        }
        self.position = self.scan(start, is_key_char);
        let key = start..self.position;
        let key_text = self.slice(key.clone());
        let key_kind = match key_text {
            "outcome" => KeyKind::Outcome,
            "preferred_label" => KeyKind::PreferredLabel,
            _ if key_text.starts_with("context.") => KeyKind::ContextPrefixed,
            _ => KeyKind::Entry,
        };

        self.skip_whitespace();
        let (test, end) = match self.operator(key.clone())? {
            None => (Test::Truthy, key.end),
            Some((operator, operator_range)) => {
                self.comparison(key_text, operator, operator_range)?
            }
        };
        Ok(Clause {
            negated: false,
            starts_alternative: false,
            key: key.clone(),
            key_kind,
            range: key.start..end,
            test,
        })
    }

    /// The operator after a key, or `None` when the clause is a truthiness test.
    fn operator(
        &mut self,
        key: Range<usize>,
    ) -> Result<Option<(Operator, Range<usize>)>, ConditionError> {
        let start = self.position;
        if self.at_end() || self.connective().is_some() {
            return Ok(None);
        }
        let rest = self.slice(start..self.text.len());
        // SPEC 4.6: symbolic operators need no surrounding spaces.
        for (symbol, operator) in SYMBOLIC_OPERATORS {
            if rest.starts_with(symbol) {
                self.position = start + symbol.len();
                return Ok(Some((operator, start..self.position)));
            }
        }
        let word_end = self.scan(start, |c| c.is_ascii_alphanumeric() || c == '_');
        let operator = match self.slice(start..word_end) {
            "contains" => Operator::Contains,
            "matches" => Operator::Matches,
            _ => {
                let (found, range) = self.found(start);
                return Err(error(
                    format!(
                        "expected {EXPECTED_OPERATOR} after key `{}`, found {found}",
                        self.slice(key)
                    ),
                    range,
                ));
            }
        };
        // SPEC 4.6: `contains` and `matches` must be surrounded by whitespace. The space before is guaranteed, since
        // a letter right after the key would have extended the key.
        if let Some(next) = self.char_at(word_end) {
            if !next.is_whitespace() {
                return Err(error(
                    format!(
                        "expected whitespace after `{}`: word operators must be surrounded by whitespace",
                        operator.as_str()
                    ),
                    start..word_end + next.len_utf8(),
                ));
            }
        }
        self.position = word_end;
        Ok(Some((operator, start..word_end)))
    }

    /// `Op Literal`, after the operator: returns the clause's test and the end of the literal.
    fn comparison(
        &mut self,
        key: &str,
        operator: Operator,
        operator_range: Range<usize>,
    ) -> Result<(Test, usize), ConditionError> {
        self.skip_whitespace();
        if self.at_end() || self.connective().is_some() {
            return Err(error(
                format!("expected a value after `{}`", operator.as_str()),
                operator_range,
            ));
        }
        let (literal, range) = if self.peek() == Some('"') {
            self.quoted_literal()?
        } else {
            self.bare_literal(operator)?
        };
        let text = match &literal {
            Literal::Source(source) => self.slice(source.clone()),
            Literal::Unescaped(text) => text,
        };
        // SPEC 4.6: statuses are canonicalised only for these two keys.
        let statuses = |text: &str| {
            if key == "outcome" || key == "context.outcome" {
                StatusMatching::Canonical(StageStatus::parse(text))
            } else {
                StatusMatching::Verbatim
            }
        };
        // Fields derived from `text` come before `literal`, which `text` may borrow from.
        let test = match operator {
            Operator::Eq => Test::Equality {
                operator: EqualityOperator::Eq,
                statuses: statuses(text),
                literal,
            },
            Operator::NotEq => Test::Equality {
                operator: EqualityOperator::NotEq,
                statuses: statuses(text),
                literal,
            },
            Operator::Gt => Test::Ordering {
                operator: OrderingOperator::Gt,
                number: text.parse().ok(),
                literal,
            },
            Operator::Lt => Test::Ordering {
                operator: OrderingOperator::Lt,
                number: text.parse().ok(),
                literal,
            },
            Operator::Ge => Test::Ordering {
                operator: OrderingOperator::Ge,
                number: text.parse().ok(),
                literal,
            },
            Operator::Le => Test::Ordering {
                operator: OrderingOperator::Le,
                number: text.parse().ok(),
                literal,
            },
            Operator::Contains => Test::Contains { literal },
            Operator::Matches => match Regex::new(text) {
                Ok(regex) => Test::Matches {
                    pattern: Pattern(regex),
                    literal,
                },
                Err(problem) => {
                    return Err(error(
                        format!("invalid regex after `matches`: {}", regex_problem(&problem)),
                        range,
                    ))
                }
            },
        };
        Ok((test, range.end))
    }

    /// `'"' chars-with-escapes '"'`: returns the literal and the range including both quotes.
    fn quoted_literal(&mut self) -> Result<(Literal, Range<usize>), ConditionError> {
        let open = self.position;
        let bytes = self.text.as_bytes();
        let mut index = open + 1;
        let mut segment_start = index;
        let mut unescaped: Option<String> = None;
        let close = loop {
            match bytes.get(index) {
                None => {
                    return Err(error(
                        "expected a closing `\"` for the quoted value",
                        open..self.text.len(),
                    ))
                }
                Some(b'"') => break index,
                Some(b'\\') => {
                    let replacement = match self.char_at(index + 1) {
                        Some('"') => '"',
                        Some('\\') => '\\',
                        Some('n') => '\n',
                        Some('t') => '\t',
                        None => {
                            return Err(error(
                                "expected a closing `\"` for the quoted value",
                                open..self.text.len(),
                            ))
                        }
                        Some(other) => {
                            return Err(error(
                                format!(
                                "expected an escape (`\\\"`, `\\\\`, `\\n` or `\\t`), found `\\{}`",
                                printable(other)
                            ),
                                index..index + 1 + other.len_utf8(),
                            ))
                        }
                    };
                    let buffer = unescaped.get_or_insert_with(String::new);
                    buffer.push_str(self.slice(segment_start..index));
                    buffer.push(replacement);
                    // Every accepted escape is two ASCII bytes.
                    index += 2;
                    segment_start = index;
                }
                // Multi-byte characters never contain the ASCII bytes matched above.
                Some(_) => index += 1,
            }
        };
        self.position = close + 1;
        let literal = match unescaped {
            None => Literal::Source(open + 1..close),
            Some(mut buffer) => {
                buffer.push_str(self.slice(segment_start..close));
                Literal::Unescaped(buffer.into_boxed_str())
            }
        };
        Ok((literal, open..self.position))
    }

    /// `BareLiteral`: the text up to the next `&&`, `||` or the end, trimmed. Leading whitespace is already skipped
    /// and the first character is neither a connective nor the end, so the literal is never empty.
    fn bare_literal(
        &mut self,
        operator: Operator,
    ) -> Result<(Literal, Range<usize>), ConditionError> {
        let start = self.position;
        if matches!(operator, Operator::Eq | Operator::NotEq) && self.peek() == Some('=') {
            // `==` is a common slip that would otherwise compare against a value starting with `=`.
            return Err(error(
                format!(
                    "expected a value after `{}`, found `=`: equality is a single `=` (quote a value that starts with `=`)",
                    operator.as_str()
                ),
                start..start + 1,
            ));
        }
        let end = self.next_connective(start).unwrap_or(self.text.len());
        let trimmed = self.slice(start..end).trim_end();
        let range = start..start + trimmed.len();
        self.position = end;
        Ok((Literal::Source(range.clone()), range))
    }

    fn skip_whitespace(&mut self) {
        self.position = self.scan(self.position, char::is_whitespace);
    }

    /// The first offset at or after `from` whose character does not satisfy `accept`.
    fn scan(&self, from: usize, accept: impl Fn(char) -> bool) -> usize {
        let rest = self.slice(from..self.text.len());
        from + rest.find(|c| !accept(c)).unwrap_or(rest.len())
    }

    fn at_end(&self) -> bool {
        self.position >= self.text.len()
    }

    fn peek(&self) -> Option<char> {
        self.char_at(self.position)
    }

    fn char_at(&self, offset: usize) -> Option<char> {
        self.text.get(offset..)?.chars().next()
    }

    /// The text in `range`; empty for a range that is not on character boundaries, which the parser never builds.
    fn slice(&self, range: Range<usize>) -> &'t str {
        self.text.get(range).unwrap_or_default()
    }

    /// The connective starting at the current position, if any.
    fn connective(&self) -> Option<Connective> {
        let rest = self.slice(self.position..self.text.len());
        if rest.starts_with("&&") {
            Some(Connective::And)
        } else if rest.starts_with("||") {
            Some(Connective::Or)
        } else {
            None
        }
    }

    /// Offset of the first `&&` or `||` at or after `from`.
    fn next_connective(&self, from: usize) -> Option<usize> {
        let bytes = self.text.as_bytes();
        (from..bytes.len().saturating_sub(1)).find(|&index| {
            matches!(
                (bytes.get(index), bytes.get(index + 1)),
                (Some(b'&'), Some(b'&')) | (Some(b'|'), Some(b'|'))
            )
        })
    }

    /// Describes the token at `at` for an error message: a whole word, or a single character.
    fn found(&self, at: usize) -> (String, Range<usize>) {
        match self.char_at(at) {
            None => ("the end of the condition".to_owned(), at..at),
            Some(first) if is_key_char(first) => {
                let end = self.scan(at, is_key_char);
                (format!("`{}`", self.slice(at..end)), at..end)
            }
            // Escaped, so a control character cannot break the one-line message.
            Some(first) => (format!("`{}`", printable(first)), at..at + first.len_utf8()),
        }
    }
}

fn is_key_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '.'
}

/// A character as shown in a message: control characters escaped so the message stays on one line.
fn printable(c: char) -> String {
    if c.is_control() {
        c.escape_debug().to_string()
    } else {
        c.to_string()
    }
}

fn error(message: impl Into<String>, range: Range<usize>) -> ConditionError {
    ConditionError {
        message: message.into(),
        range,
    }
}

/// One line describing why a regex was rejected (SPEC 3.1: diagnostic messages are one line).
fn regex_problem(problem: &regex::Error) -> String {
    match problem {
        // The syntax report draws the pattern with a caret; its last `error: ` line holds the reason.
        regex::Error::Syntax(report) => report
            .lines()
            .rev()
            .find_map(|line| line.strip_prefix("error: "))
            .unwrap_or(report)
            .to_owned(),
        regex::Error::CompiledTooBig(limit) => {
            format!("the compiled regex exceeds the size limit of {limit} bytes")
        }
        // `regex::Error` is non-exhaustive.
        other => other.to_string().lines().collect::<Vec<_>>().join(" "),
    }
}

#[cfg(test)]
mod tests {
    use std::ops::Range;

    use proptest::prelude::*;

    use crate::condition::{Condition, ConditionError};

    /// Parses `text` and compares the error; `expected` is the message and the range.
    fn check(text: &str, expected: (&str, Range<usize>)) {
        let (message, range) = expected;
        assert_eq!(
            Condition::parse(text),
            Err(ConditionError {
                message: message.to_owned(),
                range,
            }),
            "{text:?}"
        );
    }

    #[test]
    fn missing_clauses() {
        check("a &&", ("expected a clause after `&&`", 2..4));
        check("a ||  ", ("expected a clause after `||`", 2..4));
        check("&& a", ("expected a clause before `&&`", 0..2));
        check("a && && b", ("expected a clause before `&&`", 5..7));
        check("a || && b", ("expected a clause before `&&`", 5..7));
        check("a &&|| b", ("expected a clause before `||`", 4..6));
        check("!", ("expected a clause after `!`", 0..1));
        check("a && ! ", ("expected a clause after `!`", 5..6));
    }

    #[test]
    fn missing_values() {
        check("a =", ("expected a value after `=`", 2..3));
        check("a != && b", ("expected a value after `!=`", 2..4));
        check("a>=||b", ("expected a value after `>=`", 1..3));
        check("a contains ", ("expected a value after `contains`", 2..10));
        check("a matches", ("expected a value after `matches`", 2..9));
    }

    #[test]
    fn bad_keys() {
        check(
            "9lives",
            ("expected a key (a letter or `_`), found `9lives`", 0..6),
        );
        check(
            "a && -b",
            ("expected a key (a letter or `_`), found `-`", 5..6),
        );
        check(
            "a && é",
            ("expected a key (a letter or `_`), found `é`", 5..7),
        );
        check("!=x", ("expected a key (a letter or `_`), found `=`", 1..2));
        check(
            r#""a"=b"#,
            ("expected a key (a letter or `_`), found `\"`", 0..1),
        );
    }

    #[test]
    fn parentheses_are_rejected() {
        let message = "expected a key, found `(`: parentheses are not part of the condition language (`&&` binds tighter than `||`)";
        check("(a || b) && c", (message, 0..1));
        check("a && (b || c)", (message, 5..6));
        check("!(a)", (message, 1..2));
    }

    #[test]
    fn unknown_operators() {
        let expected = "expected an operator (`=`, `!=`, `>`, `<`, `>=`, `<=`, `contains`, `matches`), `&&`, `||` or the end of the condition";
        check(
            "a b",
            (&format!("{expected} after key `a`, found `b`"), 2..3),
        );
        check(
            "a ~ b",
            (&format!("{expected} after key `a`, found `~`"), 2..3),
        );
        check(
            "tags CONTAINS x",
            (
                &format!("{expected} after key `tags`, found `CONTAINS`"),
                5..13,
            ),
        );
        check(
            "tags containsx",
            (
                &format!("{expected} after key `tags`, found `containsx`"),
                5..14,
            ),
        );
        check(
            "a & b",
            (&format!("{expected} after key `a`, found `&`"), 2..3),
        );
    }

    #[test]
    fn word_operators_need_surrounding_whitespace() {
        check(
            r#"tags contains"x""#,
            (
                "expected whitespace after `contains`: word operators must be surrounded by whitespace",
                5..14,
            ),
        );
        check(
            "name matches.x",
            (
                "expected whitespace after `matches`: word operators must be surrounded by whitespace",
                5..13,
            ),
        );
        // Without whitespace before, the operator word is part of the key.
        assert_eq!(
            Condition::parse("tagscontains x").map_err(|error| error.range),
            Err(13..14)
        );
        assert!(Condition::parse("tags\tcontains\tx").is_ok());
    }

    #[test]
    fn junk_after_quoted_value() {
        check(
            r#"a="x" y"#,
            (
                "expected `&&`, `||` or the end of the condition, found `y`",
                6..7,
            ),
        );
        check(
            r#"a="x""y""#,
            (
                "expected `&&`, `||` or the end of the condition, found `\"`",
                5..6,
            ),
        );
    }

    #[test]
    fn quoted_value_errors() {
        check(
            r#"a="unterminated"#,
            ("expected a closing `\"` for the quoted value", 2..15),
        );
        check(
            r#"a="ends in backslash\"#,
            ("expected a closing `\"` for the quoted value", 2..21),
        );
        check(
            r#"a="\q""#,
            (
                r#"expected an escape (`\"`, `\\`, `\n` or `\t`), found `\q`"#,
                3..5,
            ),
        );
        check(
            "a=\"\\é\"",
            (
                r#"expected an escape (`\"`, `\\`, `\n` or `\t`), found `\é`"#,
                3..6,
            ),
        );
    }

    #[test]
    fn double_equals_is_rejected() {
        let message = |operator: &str| {
            format!("expected a value after `{operator}`, found `=`: equality is a single `=` (quote a value that starts with `=`)")
        };
        check("outcome==success", (&message("="), 8..9));
        check("a !== b", (&message("!="), 4..5));
        check("a = =b", (&message("="), 4..5));
        let quoted = Condition::parse(r#"a="=b""#).expect("a quoted `=` is a value");
        assert_eq!(
            quoted.comparisons().map(|c| c.literal).collect::<Vec<_>>(),
            ["=b"]
        );
        // Other operators keep a leading `=` in their value.
        assert!(Condition::parse("a contains =b").is_ok());
    }

    #[test]
    fn invalid_regex_is_rejected() {
        check(
            "a matches (x",
            ("invalid regex after `matches`: unclosed group", 10..12),
        );
        check(
            r#"a matches "[z-a]" && b"#,
            (
                "invalid regex after `matches`: invalid character class range, the start must be <= the end",
                10..17,
            ),
        );
        check(
            r"a matches x{99999999}",
            (
                "invalid regex after `matches`: the compiled regex exceeds the size limit of 10485760 bytes",
                10..21,
            ),
        );
    }

    #[test]
    fn control_characters_are_escaped_in_messages() {
        check(
            "a=\"\\\u{7}\"",
            (
                r#"expected an escape (`\"`, `\\`, `\n` or `\t`), found `\\u{7}`"#,
                3..5,
            ),
        );
        check(
            "a && \u{0}",
            ("expected a key (a letter or `_`), found `\\0`", 5..6),
        );
    }

    #[test]
    fn error_display_is_the_message() {
        let error = Condition::parse("a &&").expect_err("trailing `&&`");
        assert_eq!(error.to_string(), "expected a clause after `&&`");
    }

    /// Checks the invariants that hold for any input: no panic, ranges inside the text on character boundaries,
    /// and a parsed condition that survives printing and re-parsing.
    fn assert_parse_invariants(text: &str) {
        let in_text = |range: &Range<usize>| {
            range.start <= range.end
                && range.end <= text.len()
                && text.is_char_boundary(range.start)
                && text.is_char_boundary(range.end)
        };
        match Condition::parse(text) {
            Err(error) => {
                assert!(in_text(&error.range), "{text:?}: {error:?}");
                assert!(!error.message.is_empty());
                assert!(!error.message.contains('\n'), "{error:?}");
            }
            Ok(condition) => {
                for comparison in condition.comparisons() {
                    assert!(in_text(&comparison.range), "{text:?}: {comparison:?}");
                }
                let reparsed = Condition::parse(&condition.to_string())
                    .unwrap_or_else(|error| panic!("{text:?} does not re-parse: {error:?}"));
                assert!(condition.keys().eq(reparsed.keys()));
                assert!(condition
                    .comparisons()
                    .map(|c| (c.operator, c.literal))
                    .eq(reparsed.comparisons().map(|c| (c.operator, c.literal))));
            }
        }
    }

    const VALID: [&str; 8] = [
        "outcome=succeeded && context.ready=true || context.override",
        r#"a = "x && \"y\"" || !b"#,
        "tags contains alpha && n >= 3",
        r"branch matches ^feat/\d+ || !!x",
        "title = fix the build || é=ü",
        "a!=b&&c<=1||d>2&&e<3",
        "  \t ",
        "context.internal.node_visit_count >= 5",
    ];

    proptest! {
        #[test]
        fn arbitrary_text_never_panics(text in any::<String>()) {
            assert_parse_invariants(&text);
        }

        #[test]
        fn condition_like_text_never_panics(
            text in r#"[ a-z_.!&|=<>()"\\é0-9]{0,40}|([a-z]{1,3}|contains|matches|&&|\|\||!|=|!=|>=|"[a\\"]*"| ){0,12}"#
        ) {
            assert_parse_invariants(&text);
        }

        #[test]
        fn mutated_valid_conditions_never_panic(
            base in 0..VALID.len(),
            edits in proptest::collection::vec((any::<usize>(), any::<char>(), 0..3u8), 1..4),
        ) {
            let mut text = VALID[base].to_owned();
            for (offset, inserted, kind) in edits {
                let boundaries: Vec<usize> = text
                    .char_indices()
                    .map(|(index, _)| index)
                    .chain([text.len()])
                    .collect();
                let at = boundaries[offset % boundaries.len()];
                match kind {
                    0 => text.insert(at, inserted),
                    1 if at < text.len() => {
                        text.remove(at);
                    }
                    _ => text.insert_str(at, ["&&", "||", "!", "\"", "\\", "(", " contains "][offset % 7]),
                }
            }
            assert_parse_invariants(&text);
        }
    }
}
