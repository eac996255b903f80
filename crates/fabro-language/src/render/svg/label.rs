//! Label text: Graphviz escape sequences, an estimate of the drawn size, and XML-escaped `<text>` output.
//!
//! There are no font metrics at hand, so widths come from a per-character estimate for a sans-serif face.
//! The estimate errs wide, so text stays inside its shape in common viewers.

use std::fmt::Write as _;

use super::geometry::{Point, Size};
use super::number;

/// Font size of node labels.
pub(super) const NODE_FONT_SIZE: f64 = 14.0;
/// Font size of edge labels.
pub(super) const EDGE_FONT_SIZE: f64 = 12.0;
/// Line height as a multiple of the font size.
const LINE_SPACING: f64 = 1.2;

/// How one line sits in its label box: Graphviz ends lines with `\n` (centred), `\l` (left) or `\r` (right).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Justify {
    Left,
    Center,
    Right,
}

/// One line of a label.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Line {
    pub(super) text: String,
    pub(super) justify: Justify,
}

/// A label split into lines, with its estimated size.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Label {
    lines: Vec<Line>,
    font_size: f64,
    size: Size,
}

/// What `\N` and `\G` stand for in a label.
#[derive(Debug, Clone, Copy)]
pub(super) struct Names<'a> {
    pub(super) node: Option<&'a str>,
    pub(super) graph: &'a str,
}

impl Label {
    /// Splits `raw` into lines at real newlines and at the escapes `\n`, `\l` and `\r`.
    ///
    /// `\N` becomes the node id, `\G` the graph title and `\\` one backslash; other escapes are kept as written.
    pub(super) fn parse(raw: &str, names: Names<'_>, font_size: f64) -> Label {
        let lines = split_lines(raw, names);
        let width = lines
            .iter()
            .map(|line| text_width(&line.text, font_size))
            .fold(0.0, f64::max);
        let height = lines.len() as f64 * font_size * LINE_SPACING;
        Label {
            lines,
            font_size,
            size: Size::new(width, height),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    pub(super) fn size(&self) -> Size {
        self.size
    }

    #[cfg(test)]
    pub(super) fn lines(&self) -> &[Line] {
        &self.lines
    }

    /// Writes the label as one `<text>` element centred on `center`; nothing for an empty label.
    pub(super) fn write(&self, out: &mut String, center: Point) {
        let line_height = self.font_size * LINE_SPACING;
        let top = center.y - self.size.height / 2.0;
        // A baseline about 0.35 em below a line's middle centres the glyphs without `dominant-baseline`.
        let baseline = |index: f64| top + line_height * (index + 0.5) + self.font_size * 0.35;
        let anchor_x = |justify: Justify| match justify {
            Justify::Left => (center.x - self.size.width / 2.0, "start"),
            Justify::Center => (center.x, "middle"),
            Justify::Right => (center.x + self.size.width / 2.0, "end"),
        };
        match self.lines.as_slice() {
            [] => {}
            [line] => {
                let (x, anchor) = anchor_x(line.justify);
                let _ = write!(
                    out,
                    r#"<text x="{}" y="{}" text-anchor="{anchor}" font-size="{}">{}</text>"#,
                    number(x),
                    number(baseline(0.0)),
                    number(self.font_size),
                    escape(&line.text)
                );
            }
            lines => {
                let _ = write!(out, r#"<text font-size="{}">"#, number(self.font_size));
                for (index, line) in lines.iter().enumerate() {
                    let (x, anchor) = anchor_x(line.justify);
                    let _ = write!(
                        out,
                        r#"<tspan x="{}" y="{}" text-anchor="{anchor}">{}</tspan>"#,
                        number(x),
                        number(baseline(index as f64)),
                        escape(&line.text)
                    );
                }
                out.push_str("</text>");
            }
        }
    }
}

fn split_lines(raw: &str, names: Names<'_>) -> Vec<Line> {
    let mut lines = Vec::new();
    let mut current = String::new();
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        let justify = match c {
            '\n' => Some(Justify::Center),
            '\r' => None,
            '\\' => match chars.next() {
                Some('n') => Some(Justify::Center),
                Some('l') => Some(Justify::Left),
                Some('r') => Some(Justify::Right),
                Some('N') => {
                    push_name(&mut current, names.node, 'N');
                    None
                }
                Some('G') => {
                    current.push_str(names.graph);
                    None
                }
                Some('\\') => {
                    current.push('\\');
                    None
                }
                Some(other) => {
                    current.push('\\');
                    current.push(other);
                    None
                }
                None => {
                    current.push('\\');
                    None
                }
            },
            other => {
                current.push(other);
                None
            }
        };
        if let Some(justify) = justify {
            lines.push(Line {
                text: std::mem::take(&mut current),
                justify,
            });
        }
    }
    // As in Graphviz, a final line break ends the last line rather than starting an empty one.
    if !current.is_empty() {
        lines.push(Line {
            text: current,
            justify: Justify::Center,
        });
    }
    if lines.iter().all(|line| line.text.trim().is_empty()) {
        lines.clear();
    }
    lines
}

fn push_name(current: &mut String, name: Option<&str>, escape: char) {
    match name {
        Some(name) => current.push_str(name),
        None => {
            current.push('\\');
            current.push(escape);
        }
    }
}

/// Estimated advance width of `text` in a sans-serif face.
fn text_width(text: &str, font_size: f64) -> f64 {
    text.chars().map(char_width).sum::<f64>() * font_size
}

/// Advance of one character in em, rounded up from Helvetica's metrics.
fn char_width(c: char) -> f64 {
    match c {
        'i' | 'j' | 'l' | '.' | ',' | ':' | ';' | '\'' | '|' | '!' | '`' => 0.3,
        'f' | 't' | 'r' | ' ' | '(' | ')' | '[' | ']' | '{' | '}' | '/' | '\\' | '-' | '"' => 0.4,
        'm' | 'w' | '%' | '@' => 0.9,
        'M' | 'W' => 0.95,
        'A'..='Z' | '&' | '#' | '~' => 0.72,
        '0'..='9' | 'a'..='z' | '_' | '+' | '=' | '<' | '>' | '?' | '$' | '*' | '^' => 0.58,
        c if c.is_ascii() => 0.6,
        // CJK and other wide scripts take a full em.
        c if u32::from(c) >= 0x1100 => 1.0,
        _ => 0.65,
    }
}

/// Escapes text for XML content and attribute values.
///
/// Characters that XML 1.0 forbids (most C0 controls, U+FFFE, U+FFFF) become U+FFFD,
/// so any input yields a well-formed document.
pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if u32::from(c) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(raw: &str, expected: &[(&str, Justify)]) {
        let names = Names {
            node: Some("node_id"),
            graph: "Graph",
        };
        let label = Label::parse(raw, names, NODE_FONT_SIZE);
        let actual: Vec<(&str, Justify)> = label
            .lines()
            .iter()
            .map(|line| (line.text.as_str(), line.justify))
            .collect();
        assert_eq!(actual, expected, "label {raw:?}");
    }

    #[test]
    fn splits_at_escapes_and_newlines() {
        use Justify::*;
        check("plain", &[("plain", Center)]);
        check(r"one\ntwo", &[("one", Center), ("two", Center)]);
        check("one\ntwo", &[("one", Center), ("two", Center)]);
        check("one\r\ntwo", &[("one", Center), ("two", Center)]);
        check(r"left\lright\r", &[("left", Left), ("right", Right)]);
        check(r"a\n\nb", &[("a", Center), ("", Center), ("b", Center)]);
        check(r"ends\n", &[("ends", Center)]);
    }

    #[test]
    fn substitutes_names_and_keeps_unknown_escapes() {
        use Justify::*;
        check(r"\N in \G", &[("node_id in Graph", Center)]);
        check(r"a\\b \x\", &[(r"a\b \x\", Center)]);
    }

    #[test]
    fn blank_label_has_no_lines() {
        check("", &[]);
        check(r"\n \n", &[]);
        let label = Label::parse(
            "",
            Names {
                node: None,
                graph: "",
            },
            NODE_FONT_SIZE,
        );
        assert!(label.is_empty());
        assert_eq!(label.size(), Size::default());
    }

    #[test]
    fn size_grows_with_text() {
        let names = Names {
            node: None,
            graph: "",
        };
        let short = Label::parse("ab", names, NODE_FONT_SIZE).size();
        let long = Label::parse("abcdef", names, NODE_FONT_SIZE).size();
        let tall = Label::parse(r"ab\nab", names, NODE_FONT_SIZE).size();
        assert!(long.width > short.width);
        assert_eq!(tall.width, short.width);
        assert_eq!(tall.height, 2.0 * short.height);
    }

    #[test]
    fn escape_covers_markup_and_forbidden_characters() {
        assert_eq!(
            escape(r#"<a href="x">&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&apos;&lt;/a&gt;"
        );
        assert_eq!(escape("bell\u{7}\u{FFFF}"), "bell\u{FFFD}\u{FFFD}");
        assert_eq!(escape("tab\tok"), "tab\tok");
    }

    #[test]
    fn multi_line_label_writes_one_text_with_tspans() {
        let label = Label::parse(
            r"a\nb",
            Names {
                node: None,
                graph: "",
            },
            NODE_FONT_SIZE,
        );
        let mut out = String::new();
        label.write(&mut out, Point::new(50.0, 50.0));
        assert_eq!(out.matches("<text").count(), 1);
        assert_eq!(out.matches("<tspan").count(), 2);
        assert!(out.contains(">a</tspan>") && out.contains(">b</tspan>"));
    }
}
