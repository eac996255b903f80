//! The workflows under the server's roots, and the `fabro validate --json` diagnostics
//! an invalid workflow is refused with.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `GET /api/v1/workflows`: the workflows under the roots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WorkflowList {
    /// Per root, `.fabro/workflows/*/workflow.fabro` then `*.fabro`, each sorted.
    pub workflows: Vec<WorkflowEntry>,
}

/// One workflow under a root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WorkflowEntry {
    /// Its name: the directory of `.fabro/workflows/{name}/workflow.fabro`, else the
    /// file's stem.
    pub name: String,
    /// Its file.
    pub path: String,
    /// Its goal; null when it does not parse.
    pub goal: Option<String>,
    /// Its number of nodes (0 when it does not parse).
    pub node_count: usize,
    /// How many diagnostics `fabro validate` reports for it.
    pub diagnostics_count: usize,
}

/// One diagnostic of `fabro validate --json` (SPEC 12.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Diagnostic {
    /// The file it is about.
    pub file: String,
    /// The rule's id, e.g. `parse_error`.
    pub rule: String,
    /// `error` or `warning`.
    pub severity: String,
    /// What is wrong.
    pub message: String,
    /// The node it is about.
    pub node_id: Option<String>,
    /// The edge it is about.
    pub edge: Option<DiagnosticEdge>,
    /// Where in the file.
    pub span: Option<DiagnosticSpan>,
    /// A suggestion for fixing it.
    pub fix: Option<String>,
}

/// The edge of a [`Diagnostic`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DiagnosticEdge {
    /// Its tail node.
    pub from: String,
    /// Its head node.
    pub to: String,
}

/// The position of a [`Diagnostic`]: 1-based lines and columns (in Unicode scalar
/// values), the end exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DiagnosticSpan {
    /// Line of the start.
    pub line: u32,
    /// Column of the start.
    pub column: u32,
    /// Line of the end.
    pub end_line: u32,
    /// Column of the end.
    pub end_column: u32,
}
