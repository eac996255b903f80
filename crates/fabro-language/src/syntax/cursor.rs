//! Byte-level scanning for the DOT parser: trivia, identifiers, values and strings.
//!
//! The parser drives a [`Cursor`] directly instead of materialising a token stream, which
//! keeps parsing of 100,000-node workflows allocation-light.

use crate::span::Span;

/// A syntax error: message and the span it concerns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyntaxError {
    pub(crate) message: String,
    pub(crate) span: Span,
}

pub(crate) type Scan<T> = Result<T, SyntaxError>;

pub(crate) fn error<T>(message: impl Into<String>, span: Span) -> Scan<T> {
    Err(SyntaxError {
        message: message.into(),
        span,
    })
}

/// A scanned value literal; borrowed from the source unless escapes had to be resolved.
pub(crate) struct Literal<'s> {
    pub(crate) value: std::borrow::Cow<'s, str>,
    pub(crate) span: Span,
}

pub(crate) struct Cursor<'s> {
    text: &'s str,
    bytes: &'s [u8],
    pos: usize,
}

impl<'s> Cursor<'s> {
    pub(crate) fn new(text: &'s str) -> Cursor<'s> {
        Cursor {
            text,
            bytes: text.as_bytes(),
            pos: 0,
        }
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    pub(crate) fn peek_at(&self, offset: usize) -> Option<u8> {
        self.bytes.get(self.pos + offset).copied()
    }

    pub(crate) fn bump(&mut self) {
        self.pos += 1;
    }

    pub(crate) fn at_end(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    /// Span of the character at the cursor (empty at the end of input).
    #[inline]
    pub(crate) fn here(&self) -> Span {
        let len = match self.peek() {
            None => 0,
            Some(byte) if byte.is_ascii() => 1,
            Some(_) => self.text[self.pos..]
                .chars()
                .next()
                .map_or(0, char::len_utf8),
        };
        Span::new(self.pos, self.pos + len)
    }

    /// Skips whitespace and comments (SPEC 2.2).
    ///
    /// Called before almost every token: the whitespace run is skipped inline, and only
    /// a `/` leads to the out-of-line comment loop.
    #[inline(always)]
    pub(crate) fn skip_trivia(&mut self) -> Scan<()> {
        self.skip_blanks();
        if self.peek() == Some(b'/') {
            return self.skip_comments();
        }
        Ok(())
    }

    /// Skips a run of whitespace (indentation, line ends).
    #[inline(always)]
    fn skip_blanks(&mut self) {
        let rest = self.bytes.get(self.pos..).unwrap_or_default();
        let blank = rest
            .iter()
            .position(|&byte| !matches!(byte, b' ' | b'\t' | b'\r' | b'\n'))
            .unwrap_or(rest.len());
        self.pos += blank;
    }

    /// Skips comments and the whitespace after them, starting at a `/`.
    #[cold]
    #[inline(never)]
    fn skip_comments(&mut self) -> Scan<()> {
        loop {
            match self.peek() {
                Some(b'/') if self.peek_at(1) == Some(b'/') => {
                    while !matches!(self.peek(), None | Some(b'\n')) {
                        self.bump();
                    }
                }
                Some(b'/') if self.peek_at(1) == Some(b'*') => {
                    let start = self.pos;
                    match self.text[start + 2..].find("*/") {
                        Some(end) => self.pos = start + 2 + end + 2,
                        None => {
                            return error("unterminated block comment", Span::new(start, start + 2))
                        }
                    }
                }
                _ => return Ok(()),
            }
            self.skip_blanks();
        }
    }

    /// Consumes `byte` if it is next.
    pub(crate) fn eat(&mut self, byte: u8) -> bool {
        if self.peek() == Some(byte) {
            self.bump();
            true
        } else {
            false
        }
    }

    /// Scans an identifier `[A-Za-z_][A-Za-z0-9_]*` if one starts here.
    #[inline]
    pub(crate) fn ident(&mut self) -> Option<(&'s str, Span)> {
        let start = self.pos;
        match self.peek() {
            Some(byte) if byte.is_ascii_alphabetic() || byte == b'_' => {}
            _ => return None,
        }
        let rest = &self.bytes[start + 1..];
        let len = rest
            .iter()
            .position(|&byte| !(byte.is_ascii_alphanumeric() || byte == b'_'))
            .unwrap_or(rest.len());
        self.pos = start + 1 + len;
        Some((&self.text[start..self.pos], Span::new(start, self.pos)))
    }

    /// Scans a run of characters that may form a bare value (SPEC 2.3 `Bare`, numbers,
    /// durations), without judging it.
    pub(crate) fn bare_run(&mut self) -> (&'s str, Span) {
        let start = self.pos;
        while let Some(byte) = self.peek() {
            let allowed = byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'.' | b':');
            let dash = byte == b'-' && self.peek_at(1) != Some(b'>');
            if !(allowed || dash) {
                break;
            }
            self.bump();
        }
        (&self.text[start..self.pos], Span::new(start, self.pos))
    }

    /// Scans a quoted string starting at the opening `"` (SPEC 2.3 escapes).
    pub(crate) fn quoted(&mut self) -> Scan<Literal<'s>> {
        let start = self.pos;
        self.bump();
        // Fast path: no backslash before the closing quote means the value is a plain
        // slice of the source.
        let body = &self.bytes[self.pos..];
        if let Some(end) = find_quote_or_backslash(body) {
            if body[end] == b'"' {
                let value = &self.text[self.pos..self.pos + end];
                self.pos += end + 1;
                return Ok(Literal {
                    value: std::borrow::Cow::Borrowed(value),
                    span: Span::new(start, self.pos),
                });
            }
        }
        let mut value = String::new();
        let mut chunk_start = self.pos;
        loop {
            match self.peek() {
                None => return error("unterminated string", Span::new(start, start + 1)),
                Some(b'"') => {
                    value.push_str(&self.text[chunk_start..self.pos]);
                    self.bump();
                    return Ok(Literal {
                        value: std::borrow::Cow::Owned(value),
                        span: Span::new(start, self.pos),
                    });
                }
                Some(b'\\') => {
                    value.push_str(&self.text[chunk_start..self.pos]);
                    match self.peek_at(1) {
                        Some(b'"') => value.push('"'),
                        Some(b'\\') => value.push('\\'),
                        Some(b'n') => value.push('\n'),
                        Some(b't') => value.push('\t'),
                        Some(b'\n') => {}
                        Some(b'\r') if self.peek_at(2) == Some(b'\n') => self.bump(),
                        // Any other pair is kept verbatim; it is re-scanned as ordinary
                        // text so that multi-byte characters stay whole.
                        _ => {
                            self.bump();
                            chunk_start = self.pos - 1;
                            continue;
                        }
                    }
                    self.pos += 2;
                    chunk_start = self.pos;
                }
                Some(_) => self.bump(),
            }
        }
    }
}

/// Position of the first `"` or `\` in `bytes`, examining eight bytes at a time.
fn find_quote_or_backslash(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut chunks = bytes.chunks_exact(8);
    let mut offset = 0;
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let word = u64::from_le_bytes(word);
        let quotes = word ^ (ONES * u64::from(b'"'));
        let backslashes = word ^ (ONES * u64::from(b'\\'));
        // A byte of `x` is zero where the high bit of `(x - ONES) & !x` is set; bits above
        // the first zero byte may be set spuriously, so only the lowest one is used.
        let found = ((quotes.wrapping_sub(ONES) & !quotes)
            | (backslashes.wrapping_sub(ONES) & !backslashes))
            & HIGHS;
        if found != 0 {
            return Some(offset + (found.trailing_zeros() / 8) as usize);
        }
        offset += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| b == b'"' || b == b'\\')
        .map(|position| offset + position)
}

#[cfg(test)]
mod scan_tests {
    use super::find_quote_or_backslash;

    #[test]
    fn finds_the_first_quote_or_backslash_at_every_offset() {
        for length in 0..40 {
            for target in 0..length {
                for special in [b'"', b'\\'] {
                    // Bytes next to the searched ones (`!`, `#`, `[`, `]`) and non-ASCII
                    // bytes must not be mistaken for them.
                    let mut bytes: Vec<u8> = (0..length)
                        .map(|i| [b'!', b'#', b'[', b']', 0xc3, 0xa9, b'a'][i % 7])
                        .collect();
                    bytes[target] = special;
                    if target + 3 < length {
                        bytes[target + 3] = b'"';
                    }
                    assert_eq!(find_quote_or_backslash(&bytes), Some(target), "{bytes:?}");
                }
            }
            let plain: Vec<u8> = (0..length).map(|i| b'a' + (i % 26) as u8).collect();
            assert_eq!(find_quote_or_backslash(&plain), None);
        }
    }
}
