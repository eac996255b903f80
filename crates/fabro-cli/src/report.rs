//! Diagnostics as people read them (SPEC 3.1): one
//! `{file}:{line}:{column}: {severity}[{rule}]: {message}` line each, optionally followed
//! by the source line with a caret under the span, then a summary line.

use fabro_language::{Diagnostic, LineIndex, Severity};

use crate::output::{paint, BLUE, RED, YELLOW};

/// A source file as the user named it, for rendering positions.
pub(crate) struct SourceView<'a> {
    pub(crate) display_name: &'a str,
    pub(crate) text: &'a str,
    pub(crate) index: LineIndex,
}

impl<'a> SourceView<'a> {
    pub(crate) fn new(display_name: &'a str, text: &'a str) -> SourceView<'a> {
        SourceView {
            display_name,
            text,
            index: LineIndex::new(text),
        }
    }
}

/// How to decorate rendered diagnostics.
#[derive(Clone, Copy)]
pub(crate) struct Style {
    /// Show the source line and a caret (terminals only).
    pub(crate) snippet: bool,
    /// Use ANSI colour.
    pub(crate) color: bool,
}

/// Renders every diagnostic and the summary line.
pub(crate) fn render_diagnostics(
    source: &SourceView<'_>,
    diagnostics: &[Diagnostic],
    style: Style,
) -> String {
    let mut out = String::new();
    for diagnostic in diagnostics {
        out.push_str(&render_one(source, diagnostic, style));
    }
    out.push_str(&summary(diagnostics));
    out.push('\n');
    out
}

/// `{E} error(s), {W} warning(s)`.
pub(crate) fn summary(diagnostics: &[Diagnostic]) -> String {
    let errors = diagnostics
        .iter()
        .filter(|diagnostic| diagnostic.severity() == Severity::Error)
        .count();
    format!(
        "{errors} error(s), {} warning(s)",
        diagnostics.len() - errors
    )
}

fn render_one(source: &SourceView<'_>, diagnostic: &Diagnostic, style: Style) -> String {
    let severity = diagnostic.severity().as_str();
    let color = match diagnostic.severity() {
        Severity::Error => RED,
        Severity::Warning => YELLOW,
    };
    let label = paint(
        &format!("{severity}[{}]", diagnostic.rule.id()),
        color,
        style.color,
    );
    let mut out = match diagnostic.span {
        Some(span) => {
            let position = source.index.line_column(source.text, span);
            format!(
                "{}:{}:{}: {label}: {}\n",
                source.display_name, position.line, position.column, diagnostic.message
            )
        }
        None => format!("{}: {label}: {}\n", source.display_name, diagnostic.message),
    };
    if style.snippet {
        if let Some(span) = diagnostic.span {
            out.push_str(&snippet(source, span, color, style.color));
        }
        if let Some(fix) = &diagnostic.fix {
            out.push_str(&format!("  {}: {fix}\n", paint("hint", BLUE, style.color)));
        }
    }
    out
}

/// The source line of `span` with carets under it.
fn snippet(
    source: &SourceView<'_>,
    span: fabro_language::Span,
    color: &str,
    colored: bool,
) -> String {
    let position = source.index.line_column(source.text, span);
    let line_text = source.index.line_text(source.text, position.line);
    let gutter = position.line.to_string();
    let pad = " ".repeat(gutter.len());
    let visible: String = line_text
        .chars()
        .map(|c| if c == '\t' { ' ' } else { c })
        .collect();
    let line_length = visible.chars().count() as u32;
    let start = position.column.saturating_sub(1).min(line_length);
    let end = if position.end_line == position.line {
        position.end_column.saturating_sub(1).min(line_length)
    } else {
        line_length
    };
    let width = end.saturating_sub(start).max(1) as usize;
    let carets = paint(&"^".repeat(width), color, colored);
    format!(
        "{pad} |\n{gutter} | {visible}\n{pad} | {}{carets}\n",
        " ".repeat(start as usize)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabro_language::{Rule, Span};

    #[test]
    fn renders_position_snippet_and_summary() {
        let text = "digraph {\n  a [max_retries=x]\n}";
        let source = SourceView::new("w.fabro", text);
        let diagnostics = vec![
            Diagnostic::new(Rule::StartNode, "workflow has no start node"),
            Diagnostic::new(Rule::AttributeType, "bad").at(Span::new(15, 26)),
        ];
        let plain = render_diagnostics(
            &source,
            &diagnostics,
            Style {
                snippet: false,
                color: false,
            },
        );
        assert_eq!(
            plain,
            "w.fabro: error[start_node]: workflow has no start node\nw.fabro:2:6: error[attribute_type]: bad\n2 error(s), 0 warning(s)\n"
        );
        let rich = render_diagnostics(
            &source,
            &diagnostics[1..],
            Style {
                snippet: true,
                color: false,
            },
        );
        assert_eq!(
            rich,
            "w.fabro:2:6: error[attribute_type]: bad\n  |\n2 |   a [max_retries=x]\n  |      ^^^^^^^^^^^\n1 error(s), 0 warning(s)\n"
        );
    }
}
