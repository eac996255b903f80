//! Attribute lists and values: `[ … ]` blocks, `key = value` assignments, qualified keys
//! (`human.default_choice`) and the bare or quoted value literals of SPEC 2.3.
//!
//! Keys are interned per file ([`Parser::key_position`]) so that every `label` attribute
//! shares one allocation, and a value equal to the key's previous value shares that too.

use std::sync::Arc;

use super::{concatenation_message, error, html_message, is_ident, Literal, Parser, Scan};
use crate::id_hash::same_text;
use crate::span::{LineIndex, Span};
use crate::syntax::{Attribute, Attributes};

impl<'s> Parser<'s> {
    /// Consumes `.ident` continuations of a qualified key; returns the end offset.
    #[inline]
    pub(super) fn qualified_tail(&mut self) -> Scan<usize> {
        if self.cursor.peek() != Some(b'.') {
            return Ok(self.cursor.pos());
        }
        self.qualified_tail_dots()
    }

    /// [`Parser::qualified_tail`] at a `.`.
    #[inline(never)]
    fn qualified_tail_dots(&mut self) -> Scan<usize> {
        while self.cursor.peek() == Some(b'.') {
            self.cursor.bump();
            let here = self.cursor.here();
            if self.cursor.ident().is_none() {
                return error("expected a name after '.' in a qualified key", here);
            }
        }
        Ok(self.cursor.pos())
    }

    /// Parses `[ … ]`, setting each attribute on `attributes` (later keys win).
    pub(super) fn attribute_block_into(&mut self, attributes: &mut Attributes) -> Scan<()> {
        // At the `[`, a one-byte character.
        let open = Span::new(self.cursor.pos(), self.cursor.pos() + 1);
        self.cursor.bump();
        loop {
            self.cursor.skip_trivia()?;
            let start = self.cursor.pos();
            match self.cursor.peek() {
                None => {
                    return error("missing ']' to close this attribute list", open);
                }
                Some(b']') => {
                    self.cursor.bump();
                    return Ok(());
                }
                Some(b',' | b';') => self.cursor.bump(),
                Some(byte) if byte.is_ascii_alphabetic() || byte == b'_' => {
                    self.cursor.ident();
                    let key_end = self.qualified_tail()?;
                    let key_span = Span::new(start, key_end);
                    let key = &self.text[key_span.range()];
                    self.cursor.skip_trivia()?;
                    if !self.cursor.eat(b'=') {
                        let (line, _) = LineIndex::new(self.text).position(self.text, open.start);
                        return error(
                            format!(
                                "expected '=' after attribute '{key}' (is the ']' of the attribute list opened on line {line} missing?)"
                            ),
                            key_span,
                        );
                    }
                    let literal = self.value(key)?;
                    attributes.set_interned(self.attribute(key, key_span, literal));
                }
                Some(b'"') => {
                    let literal = self.cursor.quoted()?;
                    let key_span = literal.span;
                    let key = quoted_key(self.text, &literal)?;
                    self.cursor.skip_trivia()?;
                    if !self.cursor.eat(b'=') {
                        return error(format!("expected '=' after attribute '{key}'"), key_span);
                    }
                    let literal = self.value(key)?;
                    attributes.set_interned(self.attribute(key, key_span, literal));
                }
                Some(b'[') => {
                    return error("missing ']' to close the previous attribute list", open)
                }
                Some(_) => {
                    let here = self.cursor.here();
                    return error(
                        format!(
                            "expected an attribute or ']', found '{}'",
                            &self.text[here.range()]
                        ),
                        here,
                    );
                }
            }
        }
    }

    /// Scans the value after `key =`.
    pub(super) fn value(&mut self, key: &str) -> Scan<Literal<'s>> {
        self.cursor.skip_trivia()?;
        match self.cursor.peek() {
            Some(b'"') => {
                let literal = self.cursor.quoted()?;
                self.cursor.skip_trivia()?;
                if self.cursor.peek() == Some(b'+') {
                    return error(concatenation_message(), self.cursor.here());
                }
                Ok(literal)
            }
            Some(b'<') => error(html_message(), self.cursor.here()),
            _ => {
                let (run, span) = self.cursor.bare_run();
                if run.is_empty() {
                    // Nothing was consumed: the cursor is still where the value belongs.
                    return error(format!("missing value after '{key}='"), self.cursor.here());
                }
                if !is_bare_value(run) {
                    return error(
                        format!("invalid value '{run}': expected a number, a duration such as 900s, a name, or a quoted string"),
                        span,
                    );
                }
                Ok(Literal {
                    value: std::borrow::Cow::Borrowed(run),
                    span,
                })
            }
        }
    }

    pub(super) fn assign(&mut self, attribute: Attribute) {
        if self.scopes.len() > 1 {
            if &*attribute.key == "label" {
                self.scope_mut().label = Some(attribute.value.to_string());
            }
            return;
        }
        self.graph.attributes.set(attribute);
    }

    /// Builds an attribute, sharing the key's allocation with earlier uses of the key.
    pub(super) fn attribute(
        &mut self,
        key: &'s str,
        key_span: Span,
        literal: Literal<'s>,
    ) -> Attribute {
        let position = self.key_position(key);
        let (key, last_value) = &mut self.interned[position];
        if !same_text(last_value, &literal.value) {
            *last_value = Arc::from(literal.value.as_ref());
        }
        Attribute {
            key: key.clone(),
            key_span,
            value: last_value.clone(),
            value_span: literal.span,
        }
    }

    /// The position of `key` in [`Parser::interned`], interning it on first use.
    #[inline]
    fn key_position(&mut self, key: &'s str) -> usize {
        let [latest, before] = self.recent_keys;
        if same_text(latest.0, key) && latest.1 != usize::MAX {
            return latest.1;
        }
        let position = if same_text(before.0, key) && before.1 != usize::MAX {
            before.1
        } else {
            let next = self.interned.len();
            let position = *self.keys.entry(key).or_insert(next);
            if position == next {
                self.interned.push((Arc::from(key), Arc::from("")));
            }
            position
        };
        self.recent_keys = [(key, position), latest];
        position
    }
}

/// Whether an unquoted run is a valid `Bare`, `Integer`, `Float` or `Duration`.
fn is_bare_value(run: &str) -> bool {
    let bytes = run.as_bytes();
    if matches!(bytes.first(), Some(b) if b.is_ascii_alphabetic() || *b == b'_') {
        return true;
    }
    let unsigned = run.strip_prefix('-').unwrap_or(run);
    let digits = unsigned.bytes().take_while(u8::is_ascii_digit).count();
    let rest = &unsigned[digits..];
    if rest.is_empty() {
        return digits > 0;
    }
    if let Some(fraction) = rest.strip_prefix('.') {
        return !fraction.is_empty() && fraction.bytes().all(|b| b.is_ascii_digit());
    }
    digits > 0 && !run.starts_with('-') && matches!(rest, "ms" | "s" | "m" | "h" | "d")
}

/// A quoted attribute key must still have the form of `Key` (SPEC 2.3); being made of
/// identifiers, it is the source between the quotes.
pub(super) fn quoted_key<'s>(text: &'s str, literal: &Literal<'s>) -> Scan<&'s str> {
    let valid = !literal.value.is_empty() && literal.value.split('.').all(is_ident);
    if !valid {
        return error(
            format!(
                "\"{}\" is not a valid attribute key: use names like 'label' or 'human.default_choice'",
                literal.value.escape_debug()
            ),
            literal.span,
        );
    }
    let source = &text[literal.span.start as usize + 1..literal.span.end as usize - 1];
    if source != literal.value {
        return error(
            "a quoted attribute key must not contain escapes",
            literal.span,
        );
    }
    Ok(source)
}
