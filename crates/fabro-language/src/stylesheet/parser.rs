//! Recursive-descent parser for the model stylesheet grammar of SPEC 2.12.
//!
//! It reads the text once, left to right, and never goes back further than one lookahead over a word and the trivia after it, so it runs in linear time.
//! On an error it records a [`StylesheetError`] and recovers at the next `;` or `}`, or where the next rule appears to start, so one pass reports every error.

use std::ops::Range;
use std::sync::Arc;

use super::{Declaration, Rule, Selector, StyleProperty, Stylesheet, StylesheetError};

/// Parses a whole stylesheet; see [`Stylesheet::parse`].
pub(super) fn parse(text: &str) -> Result<Stylesheet, Vec<StylesheetError>> {
    let mut parser = Parser {
        text,
        pos: 0,
        rules: Vec::new(),
        errors: Vec::new(),
        swallowed_rest: false,
    };
    parser.stylesheet();
    if parser.errors.is_empty() {
        Ok(Stylesheet {
            rules: parser.rules,
        })
    } else {
        Err(parser.errors)
    }
}

/// Every property name SPEC 2.12 accepts, aliases last; the order decides between equally close suggestions.
const PROPERTY_NAMES: [&str; 6] = [
    "model",
    "provider",
    "reasoning_effort",
    "backend",
    "llm_model",
    "llm_provider",
];

/// Longest excerpt of the text quoted in a message; longer ones are cut with `…`.
const MAX_QUOTED_CHARS: usize = 40;

/// How a declaration ended, as far as the enclosing block is concerned.
enum DeclarationEnd {
    /// Parsing continues inside the block.
    Continue,
    /// The block was never closed and the next rule starts here.
    NextRule,
}

struct Parser<'t> {
    text: &'t str,
    /// Byte offset of the next character; always on a character boundary.
    pos: usize,
    rules: Vec<Rule>,
    errors: Vec<StylesheetError>,
    /// Set when an unterminated comment or string ran to the end of the text, so that the errors this causes at the end (a missing `}` or value) are not reported a second time.
    swallowed_rest: bool,
}

impl<'t> Parser<'t> {
    /// `Stylesheet ::= Rule*`, with stray `}`, `;` and selector-less blocks reported and skipped.
    fn stylesheet(&mut self) {
        loop {
            self.skip_trivia();
            match self.peek() {
                None => return,
                Some(stray @ ('}' | ';')) => {
                    let range = self.bump();
                    self.error(format!("unexpected `{stray}` outside a rule"), range);
                }
                Some('{') => {
                    self.error("expected a selector before `{`", self.pos..self.pos + 1);
                    self.block();
                }
                Some(_) => self.rule(),
            }
        }
    }

    /// `Rule ::= Selector "{" … "}"`, starting at a non-empty selector word.
    fn rule(&mut self) {
        let word = self.scan_word(is_word_stop);
        let selector = self.selector(word);
        self.skip_trivia();
        if self.peek() == Some('{') {
            let declarations = self.block();
            if let Some(selector) = selector {
                self.rules.push(Rule {
                    selector,
                    declarations,
                });
            }
            return;
        }
        let found = self.next_token();
        self.error_unless_swallowed(
            format!(
                "expected `{{` after selector, found {}",
                self.describe(&found)
            ),
            found,
        );
        if !self.looks_like_rule_start() {
            self.skip_to_block_end();
        }
    }

    /// `Selector ::= "*" | ShapeName | "#" NodeId | "." ClassName`; reports the whole selector word when it is invalid.
    fn selector(&mut self, range: Range<usize>) -> Option<Selector> {
        let word = self.slice(&range);
        let result = if word == "*" {
            Ok(Selector::Universal)
        } else if let Some(id) = word.strip_prefix('#') {
            if id.is_empty() {
                Err("expected a node id after `#`".to_owned())
            } else if is_identifier(id) {
                Ok(Selector::Id(id.to_owned()))
            } else {
                Err(format!(
                    "invalid node id {} in selector: use letters, digits and `_`, not starting with a digit",
                    quote(id)
                ))
            }
        } else if let Some(class) = word.strip_prefix('.') {
            if class.is_empty() {
                Err("expected a class name after `.`".to_owned())
            } else if is_class_name(class) {
                Ok(Selector::Class(class.to_owned()))
            } else {
                Err(format!(
                    "invalid class name {} in selector: use lowercase letters, digits and `-`",
                    quote(class)
                ))
            }
        } else if is_identifier(word) {
            Ok(Selector::Shape(word.to_owned()))
        } else {
            Err(format!(
                "invalid selector {}: expected `*`, a shape name, `#node_id` or `.class`",
                quote(word)
            ))
        };
        result.map_err(|message| self.error(message, range)).ok()
    }

    /// `"{" [ Decl ( ";" Decl )* [ ";" ] ] "}"`, starting at the `{`; returns the valid declarations.
    fn block(&mut self) -> Vec<Declaration> {
        let open = self.bump();
        let mut declarations = Vec::new();
        loop {
            self.skip_trivia();
            match self.peek() {
                None => {
                    if !self.swallowed_rest {
                        self.error("missing `}` to close this rule", open);
                    }
                    return declarations;
                }
                Some('}') => {
                    self.bump();
                    return declarations;
                }
                Some(';') => {
                    let range = self.bump();
                    self.error("expected a declaration, found `;`", range);
                }
                Some(_) => match self.declaration(&mut declarations) {
                    DeclarationEnd::Continue => {}
                    DeclarationEnd::NextRule => {
                        self.error("missing `}` to close this rule", open);
                        return declarations;
                    }
                },
            }
        }
    }

    /// `Decl ::= Property ":" ( QuotedString | BareValue )` and the `;` after it, starting at neither trivia, `;`, `}` nor the end.
    fn declaration(&mut self, declarations: &mut Vec<Declaration>) -> DeclarationEnd {
        if self.looks_like_rule_start() {
            return DeclarationEnd::NextRule;
        }
        let name_range = self.scan_word(|c| c == ':' || is_word_stop(c));
        if name_range.is_empty() {
            let found = self.next_token();
            self.error(
                format!("expected a property name, found {}", self.describe(&found)),
                found,
            );
            self.skip_to_declaration_end();
            return DeclarationEnd::Continue;
        }
        let name = self.slice(&name_range);
        let property = property_named(name);
        if property.is_none() {
            self.error(unknown_property_message(name), name_range.clone());
        }

        self.skip_trivia();
        if self.peek() == Some(':') {
            self.bump();
        } else {
            let found = self.next_token();
            let message = format!(
                "expected `:` after {}, found {}",
                quote(name),
                self.describe(&found)
            );
            self.error_unless_swallowed(message, found);
            self.skip_to_declaration_end();
            return DeclarationEnd::Continue;
        }

        self.skip_trivia();
        let value = match self.peek() {
            Some('"') => self.quoted_string(),
            None | Some(';' | '}' | '{') => {
                let found = self.next_token();
                let message = format!(
                    "expected a value for {}, found {}",
                    quote(name),
                    self.describe(&found)
                );
                self.error_unless_swallowed(message, found);
                self.skip_to_declaration_end();
                return DeclarationEnd::Continue;
            }
            Some(_) => {
                let range = self.scan_word(is_word_stop);
                Some((self.slice(&range).to_owned(), range))
            }
        };
        if let (Some(property), Some((value, range))) = (property, value) {
            if self.check_value(property, &value, &range) {
                declarations.push(Declaration {
                    property,
                    value: Arc::from(value),
                    range,
                });
            }
        }

        self.skip_trivia();
        match self.peek() {
            Some(';') => {
                self.bump();
            }
            // The block reports a missing `}` at the end of the text.
            None | Some('}') => {}
            Some(_) => {
                if self.looks_like_rule_start() {
                    return DeclarationEnd::NextRule;
                }
                let found = self.next_token();
                self.error(
                    format!(
                        "expected `;` or `}}` after the value, found {}",
                        self.describe(&found)
                    ),
                    found,
                );
                self.skip_to_declaration_end();
            }
        }
        DeclarationEnd::Continue
    }

    /// `QuotedString`, starting at the opening quote: double quotes with `\"` and `\\` escapes.
    ///
    /// Returns the unescaped text and the range including the quotes, or `None` after an error.
    fn quoted_string(&mut self) -> Option<(String, Range<usize>)> {
        let start = self.pos;
        self.bump();
        let mut value = String::new();
        let mut valid = true;
        loop {
            match self.peek() {
                None => {
                    self.error("unterminated string", start..self.text.len());
                    self.swallowed_rest = true;
                    return None;
                }
                Some('"') => {
                    self.bump();
                    return valid.then_some((value, start..self.pos));
                }
                Some('\\') => {
                    let escape_start = self.pos;
                    self.bump();
                    match self.peek() {
                        Some(escaped @ ('"' | '\\')) => {
                            value.push(escaped);
                            self.bump();
                        }
                        Some(_) => {
                            let escaped = self.bump();
                            let range = escape_start..escaped.end;
                            let message = format!(
                                "invalid escape {} in string: only `\\\"` and `\\\\` are allowed",
                                quote(self.slice(&range))
                            );
                            self.error(message, range);
                            valid = false;
                        }
                        // The next turn reports the unterminated string.
                        None => {}
                    }
                }
                Some(other) => {
                    value.push(other);
                    self.bump();
                }
            }
        }
    }

    /// Reports a value that SPEC 2.12 does not allow for `property`; returns whether the value is allowed.
    fn check_value(&mut self, property: StyleProperty, value: &str, range: &Range<usize>) -> bool {
        let allowed: &[&str] = match property {
            StyleProperty::Model | StyleProperty::Provider => return true,
            StyleProperty::ReasoningEffort => &["low", "medium", "high"],
            StyleProperty::Backend => &["api", "cli", "acp"],
        };
        if allowed.contains(&value) {
            return true;
        }
        let message = format!(
            "invalid {} {}: expected {}",
            property.as_str(),
            quote(value),
            alternatives(allowed)
        );
        self.error(message, range.clone());
        false
    }

    /// Error recovery inside a block: skips to just after the next `;`, or to the next `}` or the end.
    fn skip_to_declaration_end(&mut self) {
        loop {
            self.skip_trivia();
            match self.peek() {
                None | Some('}') => return,
                Some(';') => {
                    self.bump();
                    return;
                }
                Some(_) => {
                    self.bump();
                }
            }
        }
    }

    /// Error recovery after a selector without `{`: skips to just after the next `}` (parsing a `{ … }` block on the way, whose errors still count) or to the end.
    fn skip_to_block_end(&mut self) {
        loop {
            self.skip_trivia();
            match self.peek() {
                None => return,
                Some('{') => {
                    self.block();
                    return;
                }
                Some('}') => {
                    self.bump();
                    return;
                }
                Some(_) => {
                    self.bump();
                }
            }
        }
    }

    /// Whether a word followed by trivia and `{` starts here: the sign of a rule whose predecessor lacks its `}`, or of a selector after a stray word.
    fn looks_like_rule_start(&self) -> bool {
        let end = word_end(self.text, self.pos, is_word_stop);
        end > self.pos
            && trivia_end(self.text, end).is_ok_and(|after| {
                self.text
                    .get(after..)
                    .is_some_and(|rest| rest.starts_with('{'))
            })
    }

    /// Skips whitespace and comments, reporting an unterminated comment.
    fn skip_trivia(&mut self) {
        match trivia_end(self.text, self.pos) {
            Ok(end) => self.pos = end,
            Err(comment_start) => {
                self.pos = self.text.len();
                self.error("unterminated comment", comment_start..self.pos);
                self.swallowed_rest = true;
            }
        }
    }

    /// Consumes a possibly empty word ending at trivia or a character for which `stop` holds.
    fn scan_word(&mut self, stop: fn(char) -> bool) -> Range<usize> {
        let start = self.pos;
        self.pos = word_end(self.text, start, stop);
        start..self.pos
    }

    /// The range of the token at the current position, without consuming it: empty at the end of the text, one character for punctuation, otherwise a bare word.
    fn next_token(&self) -> Range<usize> {
        match self.peek() {
            None => self.pos..self.pos,
            Some(punctuation @ ('{' | '}' | ';' | ':' | '"')) => {
                self.pos..self.pos + punctuation.len_utf8()
            }
            Some(_) => self.pos..word_end(self.text, self.pos, is_word_stop),
        }
    }

    /// Names the token in `range` for a message: quoted text, or "end of stylesheet".
    fn describe(&self, range: &Range<usize>) -> String {
        if range.is_empty() {
            "end of stylesheet".to_owned()
        } else {
            quote(self.slice(range))
        }
    }

    fn peek(&self) -> Option<char> {
        self.text.get(self.pos..)?.chars().next()
    }

    /// Consumes one character and returns its range; does nothing at the end of the text.
    fn bump(&mut self) -> Range<usize> {
        let start = self.pos;
        self.pos += self.peek().map_or(0, char::len_utf8);
        start..self.pos
    }

    fn slice(&self, range: &Range<usize>) -> &'t str {
        self.text.get(range.clone()).unwrap_or_default()
    }

    fn error(&mut self, message: impl Into<String>, range: Range<usize>) {
        self.errors.push(StylesheetError {
            message: message.into(),
            range,
        });
    }

    /// Reports an error unless it is at the end of a text that an unterminated comment or string already swallowed.
    fn error_unless_swallowed(&mut self, message: String, range: Range<usize>) {
        if !(self.swallowed_rest && range.start == self.text.len()) {
            self.error(message, range);
        }
    }
}

/// Characters that end a selector word or a bare value (SPEC 2.12 BareValue), besides whitespace and `/*`.
fn is_word_stop(c: char) -> bool {
    matches!(c, '{' | '}' | ';')
}

/// The end of the word starting at `pos`: the first whitespace, comment start or character for which `stop` holds.
fn word_end(text: &str, pos: usize, stop: fn(char) -> bool) -> usize {
    let Some(rest) = text.get(pos..) else {
        return pos;
    };
    for (offset, c) in rest.char_indices() {
        // SPEC 2.12 allows comments between tokens, so `/*` ends a bare value as it ends any other token.
        if c.is_whitespace()
            || stop(c)
            || rest
                .get(offset..)
                .is_some_and(|tail| tail.starts_with("/*"))
        {
            return pos + offset;
        }
    }
    text.len()
}

/// The end of the whitespace and comments starting at `pos`, or `Err` with the start of an unterminated comment.
fn trivia_end(text: &str, mut pos: usize) -> Result<usize, usize> {
    while let Some(rest) = text.get(pos..) {
        if let Some(comment) = rest.strip_prefix("/*") {
            let Some(close) = comment.find("*/") else {
                return Err(pos);
            };
            pos += "/*".len() + close + "*/".len();
        } else if let Some(space) = rest.chars().next().filter(|c| c.is_whitespace()) {
            pos += space.len_utf8();
        } else {
            break;
        }
    }
    Ok(pos)
}

/// `[A-Za-z_][A-Za-z0-9_]*`, the NodeId and ShapeName of SPEC 2.12.
fn is_identifier(word: &str) -> bool {
    let mut chars = word.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `[a-z0-9-]+`, the ClassName of SPEC 2.12.
fn is_class_name(word: &str) -> bool {
    !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Maps a property name or alias to its property.
fn property_named(name: &str) -> Option<StyleProperty> {
    match name {
        "model" | "llm_model" => Some(StyleProperty::Model),
        "provider" | "llm_provider" => Some(StyleProperty::Provider),
        "reasoning_effort" => Some(StyleProperty::ReasoningEffort),
        "backend" => Some(StyleProperty::Backend),
        _ => None,
    }
}

/// Names an unknown property and suggests the closest known one within edit distance 2.
fn unknown_property_message(name: &str) -> String {
    let suggestion = PROPERTY_NAMES
        .iter()
        .filter_map(|known| edit_distance_within(name, known, 2).map(|distance| (distance, known)))
        .min_by_key(|(distance, _)| *distance);
    match suggestion {
        Some((_, known)) => format!("unknown property {}; did you mean `{known}`?", quote(name)),
        None => format!(
            "unknown property {}; expected model, provider, reasoning_effort or backend",
            quote(name)
        ),
    }
}

/// The Levenshtein distance between `a` and `b` if it is at most `limit`.
///
/// Words whose lengths differ by more than `limit` are rejected before any work, so a long unknown word costs no more than its length.
fn edit_distance_within(a: &str, b: &str, limit: usize) -> Option<usize> {
    let a: Vec<char> = a.chars().take(b.len() + limit + 1).collect();
    let b: Vec<char> = b.chars().collect();
    if a.len().abs_diff(b.len()) > limit {
        return None;
    }
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, a_char) in a.iter().enumerate() {
        let mut current = Vec::with_capacity(b.len() + 1);
        current.push(i + 1);
        for (j, b_char) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(a_char != b_char);
            let deletion = previous[j + 1] + 1;
            let insertion = current[j] + 1;
            current.push(substitution.min(deletion).min(insertion));
        }
        previous = current;
    }
    previous
        .last()
        .copied()
        .filter(|distance| *distance <= limit)
}

/// `low, medium or high`.
fn alternatives(values: &[&str]) -> String {
    match values.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// Quotes user text for a message in backticks, cut to [`MAX_QUOTED_CHARS`] characters.
fn quote(text: &str) -> String {
    match text.char_indices().nth(MAX_QUOTED_CHARS) {
        Some((cut, _)) => format!("`{}…`", text.get(..cut).unwrap_or_default()),
        None => format!("`{text}`"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Where an expected error's range lies.
    enum Covers {
        /// The first occurrence of this text at or after the previous `Text` match.
        Text(&'static str),
        /// These bytes, for text that occurs more than once.
        Bytes(Range<usize>),
        /// The empty range at the end of the text.
        End,
    }

    use Covers::{Bytes, End, Text};

    /// Parses `text` and compares the errors, in order, with the expected messages and ranges.
    fn check(text: &str, expected: &[(&str, Covers)]) {
        let errors = Stylesheet::parse(text).expect_err("the stylesheet should be rejected");
        let mut search_from = 0;
        let expected: Vec<StylesheetError> = expected
            .iter()
            .map(|(message, covers)| {
                let range = match covers {
                    Text(covered) => {
                        let start = search_from
                            + text[search_from..]
                                .find(covered)
                                .unwrap_or_else(|| panic!("{covered:?} is not in {text:?}"));
                        search_from = start;
                        start..start + covered.len()
                    }
                    Bytes(range) => range.clone(),
                    End => text.len()..text.len(),
                };
                StylesheetError {
                    message: message.to_string(),
                    range,
                }
            })
            .collect();
        assert_eq!(errors, expected, "errors for {text:?}");
    }

    /// Parses `text` and compares its declarations with `expected`: property, value and the substring its range covers.
    fn check_ok(text: &str, expected: &[(StyleProperty, &str, &str)]) {
        let parsed = Stylesheet::parse(text)
            .unwrap_or_else(|errors| panic!("{text:?} should parse: {errors:?}"));
        let listed: Vec<(StyleProperty, &str, &str)> = parsed
            .declarations()
            .map(|declaration| {
                (
                    declaration.property,
                    declaration.value,
                    &text[declaration.range],
                )
            })
            .collect();
        assert_eq!(listed, expected, "declarations of {text:?}");
    }

    use StyleProperty::{Backend, Model, Provider, ReasoningEffort};

    #[test]
    fn bare_values_run_to_whitespace_semicolon_or_brace() {
        check_ok(
            "* { model: claude-sonnet-4-5; provider: DEFAULT_MODEL } .code { model: gpt-5.2 } box { model: a:b\"c }",
            &[
                (Model, "claude-sonnet-4-5", "claude-sonnet-4-5"),
                (Provider, "DEFAULT_MODEL", "DEFAULT_MODEL"),
                (Model, "gpt-5.2", "gpt-5.2"),
                (Model, "a:b\"c", "a:b\"c"),
            ],
        );
    }

    #[test]
    fn all_selector_kinds_parse() {
        let parsed =
            Stylesheet::parse("* {} Mdiamond {} #node_1 {} .high-effort-2 {} _shape {}").unwrap();
        let selectors: Vec<&Selector> = parsed.rules.iter().map(|rule| &rule.selector).collect();
        assert_eq!(
            selectors,
            [
                &Selector::Universal,
                &Selector::Shape("Mdiamond".to_owned()),
                &Selector::Id("node_1".to_owned()),
                &Selector::Class("high-effort-2".to_owned()),
                &Selector::Shape("_shape".to_owned()),
            ]
        );
    }

    #[test]
    fn quoted_values_keep_their_quotes_in_the_range() {
        check_ok(
            r#"* { model: "a \"b\" \\ c; {d}"; reasoning_effort: "high" }"#,
            &[
                (Model, r#"a "b" \ c; {d}"#, r#""a \"b\" \\ c; {d}""#),
                (ReasoningEffort, "high", r#""high""#),
            ],
        );
    }

    #[test]
    fn comments_and_newlines_may_separate_every_token() {
        check_ok(
            "/* head */\n*\n/* between */{\n  model /* a */ : /* b */ x /* c */ ;\n  backend:api/* d */}\n/* tail */",
            &[(Model, "x", "x"), (Backend, "api", "api")],
        );
        check_ok("*{model:x/*no space*/}", &[(Model, "x", "x")]);
        check_ok("/**/* {/***/}", &[]);
    }

    #[test]
    fn trailing_semicolon_is_optional() {
        check_ok("* { model: a }", &[(Model, "a", "a")]);
        check_ok("* { model: a; }", &[(Model, "a", "a")]);
        check_ok(
            "* { model: a; provider: b }",
            &[(Model, "a", "a"), (Provider, "b", "b")],
        );
    }

    #[test]
    fn aliases_map_to_canonical_properties() {
        check_ok(
            "* { llm_model: m; llm_provider: p }",
            &[(Model, "m", "m"), (Provider, "p", "p")],
        );
    }

    #[test]
    fn enumerated_values_accept_every_allowed_value() {
        check_ok(
            "* { reasoning_effort: low } * { reasoning_effort: medium } * { reasoning_effort: high } * { backend: api; backend: cli; backend: acp }",
            &[
                (ReasoningEffort, "low", "low"),
                (ReasoningEffort, "medium", "medium"),
                (ReasoningEffort, "high", "high"),
                (Backend, "api", "api"),
                (Backend, "cli", "cli"),
                (Backend, "acp", "acp"),
            ],
        );
    }

    #[test]
    fn empty_text_is_an_empty_stylesheet() {
        for text in ["", "  \n\t\r\n", "/* nothing */ /* here */"] {
            assert_eq!(Stylesheet::parse(text), Ok(Stylesheet::default()));
        }
    }

    #[test]
    fn missing_open_brace() {
        check(
            "* model: a; } #x { model: b }",
            &[(
                "expected `{` after selector, found `model:`",
                Text("model:"),
            )],
        );
        check(
            "box",
            &[("expected `{` after selector, found end of stylesheet", End)],
        );
        // A selector that follows directly is parsed as the next rule.
        check(
            "box\n#x { modle: b }",
            &[
                ("expected `{` after selector, found `#x`", Text("#x")),
                (
                    "unknown property `modle`; did you mean `model`?",
                    Text("modle"),
                ),
            ],
        );
    }

    #[test]
    fn missing_close_brace() {
        check(
            "* { model: a;",
            &[("missing `}` to close this rule", Text("{"))],
        );
        check(
            "* { model: a; }\n.code { model: b;\n#x { model: c }",
            &[("missing `}` to close this rule", Bytes(22..23))],
        );
        check(
            "* { model: a\n.code { model: b }",
            &[("missing `}` to close this rule", Text("{"))],
        );
    }

    #[test]
    fn missing_selector_or_stray_punctuation() {
        check(
            "{ model: a }",
            &[("expected a selector before `{`", Text("{"))],
        );
        check(
            "* {} } ;",
            &[
                ("unexpected `}` outside a rule", Bytes(5..6)),
                ("unexpected `;` outside a rule", Text(";")),
            ],
        );
    }

    #[test]
    fn invalid_selectors_cover_the_whole_selector() {
        check(
            ".Upper { model: a }",
            &[(
                "invalid class name `Upper` in selector: use lowercase letters, digits and `-`",
                Text(".Upper"),
            )],
        );
        check(
            "#1st { model: a }",
            &[(
                "invalid node id `1st` in selector: use letters, digits and `_`, not starting with a digit",
                Text("#1st"),
            )],
        );
        check(
            "# { model: a }",
            &[("expected a node id after `#`", Text("#"))],
        );
        check(
            ". { model: a }",
            &[("expected a class name after `.`", Text("."))],
        );
        check(
            "a,b { model: a }",
            &[(
                "invalid selector `a,b`: expected `*`, a shape name, `#node_id` or `.class`",
                Text("a,b"),
            )],
        );
        check(
            "box.code { model: a }",
            &[(
                "invalid selector `box.code`: expected `*`, a shape name, `#node_id` or `.class`",
                Text("box.code"),
            )],
        );
    }

    #[test]
    fn missing_colon() {
        check(
            "* { model a }",
            &[("expected `:` after `model`, found `a`", Text("a"))],
        );
        check(
            "* { model; provider: p }",
            &[("expected `:` after `model`, found `;`", Text(";"))],
        );
    }

    #[test]
    fn missing_property_name() {
        check(
            "* { : a } #n { model: b }",
            &[("expected a property name, found `:`", Text(":"))],
        );
    }

    #[test]
    fn missing_value() {
        check(
            "* { model: ; provider: p }",
            &[("expected a value for `model`, found `;`", Text(";"))],
        );
        check(
            "* { model: }",
            &[("expected a value for `model`, found `}`", Text("}"))],
        );
        check(
            "* { model:",
            &[
                ("expected a value for `model`, found end of stylesheet", End),
                ("missing `}` to close this rule", Text("{")),
            ],
        );
    }

    #[test]
    fn empty_declarations() {
        check(
            "* { ; }",
            &[("expected a declaration, found `;`", Text(";"))],
        );
        check(
            "* { model: a;; }",
            &[("expected a declaration, found `;`", Bytes(13..14))],
        );
    }

    #[test]
    fn junk_after_value() {
        check(
            "* { model: claude sonnet; provider: p }",
            &[(
                "expected `;` or `}` after the value, found `sonnet`",
                Text("sonnet"),
            )],
        );
    }

    #[test]
    fn unterminated_comment_runs_to_the_end() {
        check(
            "* { model: a } /* open",
            &[("unterminated comment", Text("/* open"))],
        );
        // The missing `}` and value it causes are not reported again.
        check(
            "* { model: /* open }",
            &[("unterminated comment", Text("/* open }"))],
        );
        check("/*/", &[("unterminated comment", Text("/*/"))]);
    }

    #[test]
    fn unterminated_string_runs_to_the_end() {
        check(
            "* { model: \"abc; }",
            &[("unterminated string", Text("\"abc; }"))],
        );
        check(
            "* { model: \"abc\\",
            &[("unterminated string", Text("\"abc\\"))],
        );
    }

    #[test]
    fn invalid_escape_covers_the_escape() {
        check(
            r#"* { model: "a\nb" }"#,
            &[(
                r#"invalid escape `\n` in string: only `\"` and `\\` are allowed"#,
                Text(r"\n"),
            )],
        );
        check(
            "* { model: \"a\\é\" }",
            &[(
                r#"invalid escape `\é` in string: only `\"` and `\\` are allowed"#,
                Text("\\é"),
            )],
        );
    }

    #[test]
    fn unknown_property_suggests_a_close_name() {
        check(
            "* { modle: a }",
            &[(
                "unknown property `modle`; did you mean `model`?",
                Text("modle"),
            )],
        );
        check(
            "* { Provider: a }",
            &[(
                "unknown property `Provider`; did you mean `provider`?",
                Text("Provider"),
            )],
        );
        check(
            "* { llm_backend: api }",
            &[(
                "unknown property `llm_backend`; expected model, provider, reasoning_effort or backend",
                Text("llm_backend"),
            )],
        );
        check(
            "* { colour: red }",
            &[(
                "unknown property `colour`; expected model, provider, reasoning_effort or backend",
                Text("colour"),
            )],
        );
    }

    #[test]
    fn invalid_enumerated_values() {
        check(
            "* { reasoning_effort: extreme }",
            &[(
                "invalid reasoning_effort `extreme`: expected low, medium or high",
                Text("extreme"),
            )],
        );
        check(
            "* { reasoning_effort: \"HIGH\" }",
            &[(
                "invalid reasoning_effort `HIGH`: expected low, medium or high",
                Text("\"HIGH\""),
            )],
        );
        check(
            "* { backend: tcp }",
            &[(
                "invalid backend `tcp`: expected api, cli or acp",
                Text("tcp"),
            )],
        );
    }

    #[test]
    fn every_error_is_reported() {
        check(
            "* { modle: a; reasoning_effort: max }\n.Bad { backend: tcp }\n#ok { model x; provider: p }",
            &[
                ("unknown property `modle`; did you mean `model`?", Text("modle")),
                (
                    "invalid reasoning_effort `max`: expected low, medium or high",
                    Text("max"),
                ),
                (
                    "invalid class name `Bad` in selector: use lowercase letters, digits and `-`",
                    Text(".Bad"),
                ),
                ("invalid backend `tcp`: expected api, cli or acp", Text("tcp")),
                ("expected `:` after `model`, found `x`", Text("x")),
            ],
        );
    }

    #[test]
    fn long_text_is_cut_in_messages() {
        let long_name = "x".repeat(100);
        let text = format!("* {{ {long_name}: a }}");
        let errors = Stylesheet::parse(&text).unwrap_err();
        assert_eq!(
            errors,
            vec![StylesheetError {
                message: format!(
                    "unknown property `{}…`; expected model, provider, reasoning_effort or backend",
                    "x".repeat(40)
                ),
                range: 4..104,
            }]
        );
    }

    #[test]
    fn pathological_inputs_stay_linear() {
        // Each of these would take minutes if any step rescanned the rest of the text.
        let size = 200_000;
        let rules = "* { model: a; }".repeat(size / 16);
        assert_eq!(Stylesheet::parse(&rules).unwrap().rules.len(), size / 16);
        assert_eq!(Stylesheet::parse(&"{".repeat(size)).unwrap_err().len(), 3);
        assert_eq!(Stylesheet::parse(&"a ".repeat(size)).unwrap_err().len(), 1);
        assert_eq!(
            Stylesheet::parse(&format!("* {{ {}", "a ".repeat(size)))
                .unwrap_err()
                .len(),
            3
        );
        assert_eq!(Stylesheet::parse(&"/* ".repeat(size)).unwrap_err().len(), 1);
        assert_eq!(
            Stylesheet::parse(&"}".repeat(size)).unwrap_err().len(),
            size
        );
        let unclosed = format!("* {{ model: \"{}", "\\\"".repeat(size));
        assert_eq!(Stylesheet::parse(&unclosed).unwrap_err().len(), 1);
    }

    #[test]
    fn edit_distance_is_bounded() {
        assert_eq!(edit_distance_within("model", "model", 2), Some(0));
        assert_eq!(edit_distance_within("modle", "model", 2), Some(2));
        assert_eq!(edit_distance_within("models", "model", 2), Some(1));
        assert_eq!(edit_distance_within("mod", "model", 2), Some(2));
        assert_eq!(edit_distance_within("mo", "model", 2), None);
        assert_eq!(edit_distance_within(&"m".repeat(10_000), "model", 2), None);
    }

    /// Text made mostly of the characters the grammar cares about, so that the parser reaches deep states.
    fn stylesheet_like() -> impl Strategy<Value = String> {
        prop::collection::vec(
            prop_oneof![
                Just("*"),
                Just("#"),
                Just("."),
                Just("{"),
                Just("}"),
                Just(":"),
                Just(";"),
                Just("\""),
                Just("\\"),
                Just("/*"),
                Just("*/"),
                Just("/"),
                Just(" "),
                Just("\n"),
                Just("é"),
                Just("model"),
                Just("backend"),
                Just("reasoning_effort"),
                Just("high"),
                Just("box"),
                Just("code"),
                Just("X"),
            ],
            0..40,
        )
        .prop_map(|parts| parts.concat())
    }

    fn assert_ranges_valid(text: &str) {
        let valid = |range: &Range<usize>| {
            range.start <= range.end
                && range.end <= text.len()
                && text.is_char_boundary(range.start)
                && text.is_char_boundary(range.end)
        };
        match Stylesheet::parse(text) {
            Ok(parsed) => {
                for declaration in parsed.declarations() {
                    assert!(valid(&declaration.range), "{declaration:?} in {text:?}");
                }
            }
            Err(errors) => {
                assert!(!errors.is_empty(), "no error for {text:?}");
                for error in &errors {
                    assert!(valid(&error.range), "{error:?} in {text:?}");
                }
            }
        }
    }

    proptest! {
        #[test]
        fn parse_never_panics_on_arbitrary_text(text in any::<String>()) {
            assert_ranges_valid(&text);
        }

        #[test]
        fn parse_never_panics_on_stylesheet_like_text(text in stylesheet_like()) {
            assert_ranges_valid(&text);
        }
    }
}
