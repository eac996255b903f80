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

/// One element of `fabro runs --json` (SPEC 12.1), newest run first.
#[derive(Debug, Serialize)]
pub(crate) struct RunView<'a> {
    pub(crate) run_id: &'a str,
    pub(crate) workflow_name: &'a str,
    /// `running`, `success`, `partial_success`, `fail`, `canceled`, `interrupted` or
    /// `unreadable`.
    pub(crate) status: &'static str,
    pub(crate) started_at: &'a str,
    pub(crate) finished_at: Option<&'a str>,
    pub(crate) run_dir: String,
    pub(crate) goal: &'a str,
    /// The simulated provider was chosen because no credentials were found (SPEC 10.2).
    pub(crate) simulated_llm: bool,
    /// Why the run is `unreadable` (its manifest cannot be read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<&'a str>,
}

/// `fabro inspect --json` (SPEC 12.1): the run's summary, its stages by rank, and totals.
#[derive(Debug, Serialize)]
pub(crate) struct InspectView {
    pub(crate) run_id: String,
    pub(crate) workflow_name: String,
    pub(crate) workflow_path: String,
    pub(crate) goal: String,
    pub(crate) status: &'static str,
    pub(crate) started_at: String,
    pub(crate) finished_at: Option<String>,
    /// Wall-clock time; up to now while the run is running.
    pub(crate) duration_ms: Option<u64>,
    pub(crate) run_dir: String,
    pub(crate) base_sha: Option<String>,
    pub(crate) run_branch: Option<String>,
    pub(crate) simulated_llm: bool,
    pub(crate) dry_run: bool,
    pub(crate) parent_run_id: Option<String>,
    /// The node whose stage is running; otherwise, from `checkpoint.json`, the node
    /// that completed last (SPEC 17.7).
    pub(crate) current_node: Option<String>,
    /// From `checkpoint.json`: the node a resume would run next.
    pub(crate) next_node_id: Option<String>,
    pub(crate) stages: Vec<StageView>,
    pub(crate) totals: TotalsView,
}

/// One stage visit, from `stages/{rank:03}-{node_id}@{visit}/status.json` (SPEC 7.5). A
/// stage without a readable `status.json` has not finished: its status is `running`
/// while the run runs, `incomplete` otherwise, and the fields only `status.json` knows
/// are null.
#[derive(Debug, Serialize)]
pub(crate) struct StageView {
    pub(crate) rank: u32,
    pub(crate) node_id: String,
    pub(crate) visit: u32,
    pub(crate) handler: Option<String>,
    pub(crate) status: String,
    /// The final attempt number.
    pub(crate) attempts: Option<u32>,
    /// Wall time; for a running stage, the time since it started.
    pub(crate) duration_ms: Option<u64>,
    /// Input plus output tokens; null for stages that made no LLM call.
    pub(crate) tokens: Option<u64>,
    pub(crate) input_tokens: Option<u64>,
    pub(crate) output_tokens: Option<u64>,
    pub(crate) cost_usd: Option<f64>,
    pub(crate) files_touched: Vec<String>,
}

/// Sums over the stages of `fabro inspect`.
#[derive(Debug, Serialize)]
pub(crate) struct TotalsView {
    pub(crate) stages: usize,
    pub(crate) attempts: u64,
    pub(crate) duration_ms: u64,
    pub(crate) tokens: u64,
    pub(crate) input_tokens: u64,
    pub(crate) output_tokens: u64,
    /// Null when no stage reported a cost.
    pub(crate) cost_usd: Option<f64>,
    /// Distinct paths, sorted.
    pub(crate) files_touched: Vec<String>,
}
