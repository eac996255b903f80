//! Byte spans into a workflow source and their conversion to 1-based line and column.
//!
//! Spans are stored as byte offsets so that parsing stays cheap; line and column are
//! computed only when a diagnostic is rendered (SPEC 3.1 counts columns in Unicode
//! scalar values).

use serde::Serialize;

/// A half-open byte range `[start, end)` into one source text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Span {
    /// First byte of the span.
    pub start: u32,
    /// One past the last byte of the span.
    pub end: u32,
}

impl Span {
    /// Creates a span from byte offsets. Offsets above `u32::MAX` saturate; sources are
    /// limited to 10 MB (SPEC 2.1), so this never happens for accepted input.
    pub fn new(start: usize, end: usize) -> Span {
        Span {
            start: u32::try_from(start).unwrap_or(u32::MAX),
            end: u32::try_from(end).unwrap_or(u32::MAX),
        }
    }

    /// The span as a `usize` range, for slicing the source.
    pub fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }

    /// A span of `len` bytes starting `offset` bytes after this span's start.
    pub fn sub(self, offset: usize, len: usize) -> Span {
        let start = self.start as usize + offset;
        Span::new(start, start + len)
    }
}

/// A resolved position: 1-based line and column, with an end position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LineColumn {
    /// 1-based line of the start.
    pub line: u32,
    /// 1-based column of the start, in Unicode scalar values.
    pub column: u32,
    /// 1-based line of the end.
    pub end_line: u32,
    /// 1-based column of the end (exclusive), in Unicode scalar values.
    pub end_column: u32,
}

/// Bytes between two checkpoints of [`LineIndex`]'s character counts.
const CHECKPOINT_STRIDE: usize = 256;

/// Maps byte offsets of one source text to lines and columns.
///
/// Built once per text, it answers each lookup by a binary search over line starts and
/// a count of at most [`CHECKPOINT_STRIDE`] bytes, so rendering many diagnostics on one
/// long line stays linear (issue 14 item 8).
#[derive(Debug, Clone)]
pub struct LineIndex {
    line_starts: Vec<u32>,
    /// Characters (Unicode scalar values) before each multiple of
    /// [`CHECKPOINT_STRIDE`] bytes; empty for ASCII text, where bytes are characters.
    checkpoints: Vec<u32>,
}

/// Whether `byte` starts a character (is not a UTF-8 continuation byte).
fn starts_char(byte: u8) -> bool {
    (byte as i8) >= -0x40
}

impl LineIndex {
    /// Indexes the line starts of `text`.
    pub fn new(text: &str) -> LineIndex {
        let mut line_starts = vec![0];
        line_starts.extend(
            text.bytes()
                .enumerate()
                .filter(|&(_, byte)| byte == b'\n')
                .map(|(index, _)| u32::try_from(index + 1).unwrap_or(u32::MAX)),
        );
        let checkpoints = if text.is_ascii() {
            Vec::new()
        } else {
            let mut total = 0u32;
            let mut checkpoints = Vec::with_capacity(text.len() / CHECKPOINT_STRIDE + 1);
            for chunk in text.as_bytes().chunks(CHECKPOINT_STRIDE) {
                checkpoints.push(total);
                let chars = chunk.iter().filter(|&&byte| starts_char(byte)).count();
                total = total.saturating_add(u32::try_from(chars).unwrap_or(u32::MAX));
            }
            checkpoints
        };
        LineIndex {
            line_starts,
            checkpoints,
        }
    }

    /// Characters of `text` before byte `offset` (at most the text's length).
    fn chars_before(&self, text: &str, offset: usize) -> usize {
        if self.checkpoints.is_empty() {
            return offset;
        }
        let checkpoint = offset / CHECKPOINT_STRIDE;
        let counted = self
            .checkpoints
            .get(checkpoint)
            .map_or(0, |&count| count as usize);
        let rest = text
            .as_bytes()
            .get(checkpoint * CHECKPOINT_STRIDE..offset)
            .map_or(0, |bytes| {
                bytes.iter().filter(|&&byte| starts_char(byte)).count()
            });
        counted + rest
    }

    /// 1-based line and column of `offset`, clamped to the text.
    pub fn position(&self, text: &str, offset: u32) -> (u32, u32) {
        let offset = offset.min(u32::try_from(text.len()).unwrap_or(u32::MAX));
        let line = self.line_starts.partition_point(|&start| start <= offset);
        let line_start = self.line_starts[line.saturating_sub(1)] as usize;
        let offset = offset as usize;
        // An offset inside a character counts as the line start, as slicing there fails.
        let prefix = if line_start <= offset && text.is_char_boundary(offset) {
            self.chars_before(text, offset) - self.chars_before(text, line_start)
        } else {
            0
        };
        (
            u32::try_from(line).unwrap_or(u32::MAX),
            u32::try_from(prefix + 1).unwrap_or(u32::MAX),
        )
    }

    /// Start and end positions of `span`.
    pub fn line_column(&self, text: &str, span: Span) -> LineColumn {
        let (line, column) = self.position(text, span.start);
        let (end_line, end_column) = self.position(text, span.end);
        LineColumn {
            line,
            column,
            end_line,
            end_column,
        }
    }

    /// The text of 1-based `line` without its line terminator.
    pub fn line_text<'t>(&self, text: &'t str, line: u32) -> &'t str {
        let index = (line as usize).saturating_sub(1);
        let Some(&start) = self.line_starts.get(index) else {
            return "";
        };
        let end = self
            .line_starts
            .get(index + 1)
            .map_or(text.len(), |&next| next as usize);
        text.get(start as usize..end)
            .unwrap_or("")
            .trim_end_matches(['\n', '\r'])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, offset: u32, expected: (u32, u32)) {
        let index = LineIndex::new(text);
        assert_eq!(index.position(text, offset), expected);
    }

    #[test]
    fn positions_are_one_based_and_count_chars() {
        check("abc", 0, (1, 1));
        check("abc\ndef", 4, (2, 1));
        check("abc\ndef", 6, (2, 3));
        check("é√x\ny", 5, (1, 3));
        check("ab", 99, (1, 3));
    }

    #[test]
    fn line_text_strips_terminators() {
        let text = "one\r\ntwo\nthree";
        let index = LineIndex::new(text);
        assert_eq!(index.line_text(text, 1), "one");
        assert_eq!(index.line_text(text, 2), "two");
        assert_eq!(index.line_text(text, 3), "three");
        assert_eq!(index.line_text(text, 4), "");
    }

    #[test]
    fn many_positions_on_one_long_line_take_linear_time() {
        // One 4 MB line mixing one-, two- and three-byte characters, and 50,000 positions
        // spread along it, as many diagnostics on one long line give (issue 14 item 8).
        // Counting each column from the line start reads 10^11 bytes (many seconds even
        // optimised); the index answers each in a few hundred bytes.
        let text: String = "a\u{e9}b\u{221a}".repeat(4 * 1024 * 1024 / 7);
        let positions = 50_000;
        let step = text.len() / positions;
        let started = std::time::Instant::now();
        let index = LineIndex::new(&text);
        let mut last = 0;
        for at in (0..positions).map(|position| position * step) {
            let at = (at..text.len())
                .find(|&at| text.is_char_boundary(at))
                .unwrap();
            let (line, column) = index.position(&text, u32::try_from(at).unwrap());
            assert_eq!(line, 1);
            assert!(column > last || at == 0, "columns grow along the line");
            last = column;
        }
        let elapsed = started.elapsed();
        // The exact columns of a few positions, against a plain count.
        for at in [0, 1, 3, 4, 7, 1000 * 7 + 3, text.len()] {
            let expected = text[..at].chars().count() + 1;
            assert_eq!(
                index.position(&text, at as u32),
                (1, expected as u32),
                "at {at}"
            );
        }
        // Linear takes well under a second in a debug build; quadratic takes many.
        assert!(elapsed.as_secs_f64() < 3.0, "took {elapsed:?}");
    }

    #[test]
    fn positions_inside_a_character_and_across_lines() {
        let text = "\u{e9}\u{e9}\n\u{221a}x\r\ny";
        let index = LineIndex::new(text);
        assert_eq!(index.position(text, 2), (1, 2));
        assert_eq!(index.position(text, 4), (1, 3));
        assert_eq!(index.position(text, 5), (2, 1));
        assert_eq!(index.position(text, 8), (2, 2));
        assert_eq!(index.position(text, 11), (3, 1));
        // Inside a character: column 1, as before the index counted characters.
        assert_eq!(index.position(text, 1), (1, 1));
    }
}
