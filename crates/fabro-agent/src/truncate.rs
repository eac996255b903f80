//! Output truncation for what the model sees (SPEC 10.5); events keep the full text.

/// How a character limit cuts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TruncationMode {
    /// Keep the first and last half of the limit.
    HeadTail,
    /// Keep the last `limit` characters.
    Tail,
}

/// A tool's output limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLimit {
    /// Maximum characters (Unicode scalar values).
    pub chars: usize,
    /// How characters are cut.
    pub mode: TruncationMode,
    /// Maximum lines, applied after the character limit.
    pub lines: Option<usize>,
}

impl OutputLimit {
    /// A limit of `chars` characters cut with `mode`, without a line limit.
    pub const fn new(chars: usize, mode: TruncationMode) -> OutputLimit {
        OutputLimit {
            chars,
            mode,
            lines: None,
        }
    }

    /// The same limit with a line limit.
    pub const fn with_lines(self, lines: usize) -> OutputLimit {
        OutputLimit {
            lines: Some(lines),
            ..self
        }
    }

    /// Cuts `output` for the model: characters first, then lines.
    pub fn apply(&self, output: &str) -> String {
        let cut = truncate_chars(output, self.chars, self.mode);
        match self.lines {
            Some(lines) => truncate_lines(&cut, lines),
            None => cut,
        }
    }
}

/// Cuts `text` to `limit` characters.
pub(crate) fn truncate_chars(text: &str, limit: usize, mode: TruncationMode) -> String {
    let total = text.chars().count();
    if total <= limit {
        return text.to_owned();
    }
    match mode {
        TruncationMode::HeadTail => {
            let head = limit / 2;
            let tail = limit - head;
            let removed = total - head - tail;
            let head_end = byte_index(text, head);
            let tail_start = byte_index(text, total - tail);
            format!(
                "{}\n\n[WARNING: Tool output was truncated. {removed} characters were removed from the middle. The full output is available in the event stream. If you need to see specific parts, re-run the tool with more targeted parameters.]\n\n{}",
                &text[..head_end],
                &text[tail_start..]
            )
        }
        TruncationMode::Tail => {
            let removed = total - limit;
            let start = byte_index(text, removed);
            format!(
                "[WARNING: Tool output was truncated. First {removed} characters were removed. The full output is available in the event stream.]\n\n{}",
                &text[start..]
            )
        }
    }
}

/// Keeps the first and last half of `limit` lines.
pub(crate) fn truncate_lines(text: &str, limit: usize) -> String {
    let lines: Vec<&str> = text.split('\n').collect();
    if lines.len() <= limit {
        return text.to_owned();
    }
    let head = limit / 2;
    let tail = limit - head;
    let omitted = lines.len() - head - tail;
    let mut out = lines[..head].join("\n");
    if !out.is_empty() || head > 0 {
        out.push('\n');
    }
    out.push_str(&format!("[... {omitted} lines omitted ...]"));
    if tail > 0 {
        out.push('\n');
        out.push_str(&lines[lines.len() - tail..].join("\n"));
    }
    out
}

/// Byte offset of the character at `chars`.
fn byte_index(text: &str, chars: usize) -> usize {
    text.char_indices()
        .nth(chars)
        .map_or(text.len(), |(index, _)| index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_output_is_untouched() {
        let limit = OutputLimit::new(10, TruncationMode::HeadTail).with_lines(3);
        assert_eq!(limit.apply("a\nb\nc"), "a\nb\nc");
    }

    #[test]
    fn head_tail_keeps_both_ends() {
        let cut = truncate_chars("abcdefghijéé", 6, TruncationMode::HeadTail);
        assert!(cut.starts_with("abc\n\n[WARNING: Tool output was truncated. 6 characters were removed from the middle."));
        assert!(cut.ends_with("re-run the tool with more targeted parameters.]\n\njéé"));
    }

    #[test]
    fn tail_keeps_the_end() {
        let cut = truncate_chars("0123456789", 4, TruncationMode::Tail);
        assert_eq!(cut, "[WARNING: Tool output was truncated. First 6 characters were removed. The full output is available in the event stream.]\n\n6789");
    }

    #[test]
    fn lines_keep_first_and_last_half() {
        let text = (1..=10)
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(
            truncate_lines(&text, 4),
            "1\n2\n[... 6 lines omitted ...]\n9\n10"
        );
    }
}
