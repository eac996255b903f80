//! JSON documents the CLI prints (`--json`), one struct per shape, snake_case keys.

use serde::Serialize;

use fabro_language::{Diagnostic, LineColumn, LineIndex, Workflow};

/// `fabro validate --json` (SPEC 3.2): `valid` is true exactly when there are no errors.
#[derive(Debug, Serialize)]
pub(crate) struct ValidateView<'a> {
    pub(crate) valid: bool,
    pub(crate) diagnostics: Vec<DiagnosticView<'a>>,
    pub(crate) nodes: Vec<NodeView<'a>>,
    pub(crate) edges: Vec<EdgeView<'a>>,
}

/// One diagnostic (SPEC 3.1), with its position resolved to lines and columns.
#[derive(Debug, Serialize)]
pub(crate) struct DiagnosticView<'a> {
    pub(crate) file: &'a str,
    pub(crate) rule: &'static str,
    pub(crate) severity: &'static str,
    pub(crate) message: &'a str,
    pub(crate) node_id: Option<&'a str>,
    pub(crate) edge: Option<EdgeRefView<'a>>,
    pub(crate) span: Option<LineColumn>,
    pub(crate) fix: Option<&'a str>,
}

/// An edge named by its endpoints.
#[derive(Debug, Serialize)]
pub(crate) struct EdgeRefView<'a> {
    pub(crate) from: &'a str,
    pub(crate) to: &'a str,
}

/// A node of the workflow.
#[derive(Debug, Serialize)]
pub(crate) struct NodeView<'a> {
    pub(crate) id: &'a str,
    pub(crate) handler: &'static str,
    pub(crate) label: &'a str,
}

/// An edge of the workflow.
#[derive(Debug, Serialize)]
pub(crate) struct EdgeView<'a> {
    pub(crate) from: &'a str,
    pub(crate) to: &'a str,
    pub(crate) label: &'a str,
    pub(crate) condition: String,
}

impl<'a> DiagnosticView<'a> {
    pub(crate) fn new(
        file: &'a str,
        text: &str,
        index: &LineIndex,
        diagnostic: &'a Diagnostic,
    ) -> DiagnosticView<'a> {
        DiagnosticView {
            file,
            rule: diagnostic.rule.id(),
            severity: diagnostic.severity().as_str(),
            message: &diagnostic.message,
            node_id: diagnostic.node_id.as_deref(),
            edge: diagnostic.edge.as_ref().map(|edge| EdgeRefView {
                from: &edge.from,
                to: &edge.to,
            }),
            span: diagnostic.span.map(|span| index.line_column(text, span)),
            fix: diagnostic.fix.as_deref(),
        }
    }
}

impl<'a> ValidateView<'a> {
    pub(crate) fn new(
        file: &'a str,
        text: &str,
        diagnostics: &'a [Diagnostic],
        workflow: Option<&'a Workflow>,
    ) -> ValidateView<'a> {
        let index = LineIndex::new(text);
        let nodes = workflow.map_or_else(Vec::new, |workflow| {
            workflow
                .nodes()
                .iter()
                .map(|node| NodeView {
                    id: &node.id,
                    handler: node.handler.as_str(),
                    label: node.label(),
                })
                .collect()
        });
        let edges = workflow.map_or_else(Vec::new, |workflow| {
            workflow
                .edges()
                .iter()
                .map(|edge| EdgeView {
                    from: &workflow.node(edge.from).id,
                    to: &workflow.node(edge.to).id,
                    label: edge.label(),
                    condition: edge
                        .condition
                        .as_ref()
                        .map_or_else(String::new, ToString::to_string),
                })
                .collect()
        });
        ValidateView {
            valid: !fabro_language::diagnostic::has_errors(diagnostics),
            diagnostics: diagnostics
                .iter()
                .map(|diagnostic| DiagnosticView::new(file, text, &index, diagnostic))
                .collect(),
            nodes,
            edges,
        }
    }
}
