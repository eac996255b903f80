//! `fabro inspect RUN [--json]` (SPEC 12.1): a run's summary from the index, its
//! manifest and checkpoint, then one row per stage from `stages/*/status.json`, sorted
//! by rank, with totals.

use fabro_engine::local::{inspect, InspectView, StageView};

use crate::args::InspectArgs;
use crate::command::{format_elapsed, index_error, json_document, render_table, resolve_run};
use crate::error::{CliError, Status};
use crate::output::Output;

pub(crate) fn run(args: &InspectArgs, output: &mut Output) -> Result<Status, CliError> {
    let view = inspect(resolve_run(&args.run)?).map_err(index_error)?;
    print(&view, args.json, output)
}

/// Prints an inspect document, as a table or as JSON (local or from a server).
pub(crate) fn print(
    view: &InspectView,
    json: bool,
    output: &mut Output,
) -> Result<Status, CliError> {
    if json {
        output.out(&json_document(view)?);
    } else {
        output.out(&render(view));
    }
    Ok(Status::Success)
}

/// The human summary: `label: value` lines, a blank line, then the stage table.
fn render(view: &InspectView) -> String {
    let dash = |value: Option<&str>| value.unwrap_or("-").to_owned();
    let mut text = String::new();
    let mut line = |label: &str, value: String| text.push_str(&format!("{label}: {value}\n"));
    line("run id", view.run_id.clone());
    line(
        "workflow",
        format!("{} ({})", view.workflow_name, view.workflow_path),
    );
    line("goal", view.goal.clone());
    line("status", view.status.clone());
    line("started", view.started_at.clone());
    line("finished", dash(view.finished_at.as_deref()));
    line(
        "duration",
        view.duration_ms.map_or_else(|| "-".to_owned(), elapsed),
    );
    line("run dir", view.run_dir.clone());
    line("base SHA", dash(view.base_sha.as_deref()));
    line("run branch", dash(view.run_branch.as_deref()));
    if let Some(source) = &view.forked_from {
        line(
            "forked from",
            format!("run {} after stage {}", source.run_id, source.rank),
        );
    }
    if view.simulated_llm {
        line("simulated LLM", "yes".to_owned());
    }
    line("current node", dash(view.current_node.as_deref()));
    line("next node", dash(view.next_node_id.as_deref()));
    text.push('\n');
    let mut rows: Vec<Vec<String>> = view.stages.iter().map(stage_row).collect();
    let totals = &view.totals;
    rows.push(vec![
        "total".to_owned(),
        format!(
            "{} stage{}",
            totals.stages,
            if totals.stages == 1 { "" } else { "s" }
        ),
        String::new(),
        String::new(),
        String::new(),
        totals.attempts.to_string(),
        elapsed(totals.duration_ms),
        totals.tokens.to_string(),
        cached_share(Some(totals.cache_read_tokens), Some(totals.input_tokens)),
        cost(totals.cost_usd),
        totals.files_touched.len().to_string(),
    ]);
    text.push_str(&render_table(&HEADER, &rows));
    // SPEC 20.3: the stages rewinds moved away, apart from the current ones.
    for rewound in &view.rewound {
        text.push_str(&format!(
            "\nrewound by rewind {} (not current):\n",
            rewound.k
        ));
        let rows: Vec<Vec<String>> = rewound.stages.iter().map(stage_row).collect();
        text.push_str(&render_table(&HEADER, &rows));
    }
    text
}

/// The columns of the stage tables.
const HEADER: [&str; 11] = [
    "RANK", "NODE", "VISIT", "HANDLER", "STATUS", "ATTEMPTS", "DURATION", "TOKENS", "CACHED",
    "COST", "FILES",
];

/// One stage as a table row.
fn stage_row(stage: &StageView) -> Vec<String> {
    let dash = |value: Option<&str>| value.unwrap_or("-").to_owned();
    vec![
        stage.rank.to_string(),
        stage.node_id.clone(),
        stage.visit.to_string(),
        dash(stage.handler.as_deref()),
        stage.status.clone(),
        stage
            .attempts
            .map_or_else(|| "-".to_owned(), |attempts| attempts.to_string()),
        stage.duration_ms.map_or_else(|| "-".to_owned(), elapsed),
        stage
            .tokens
            .map_or_else(|| "-".to_owned(), |tokens| tokens.to_string()),
        cached_share(stage.cache_read_tokens, stage.input_tokens),
        cost(stage.cost_usd),
        stage.files_touched.len().to_string(),
    ]
}

fn elapsed(milliseconds: u64) -> String {
    format_elapsed(std::time::Duration::from_millis(milliseconds))
}

/// The share of a stage's input read from the provider's prompt cache (SPEC 10.8), in
/// whole percent; `-` without input.
fn cached_share(cache_read_tokens: Option<u64>, input_tokens: Option<u64>) -> String {
    match (cache_read_tokens, input_tokens) {
        (Some(read), Some(input)) if input > 0 => format!("{}%", read * 100 / input),
        _ => "-".to_owned(),
    }
}

fn cost(cost_usd: Option<f64>) -> String {
    cost_usd.map_or_else(|| "-".to_owned(), |cost| format!("${cost:.4}"))
}
