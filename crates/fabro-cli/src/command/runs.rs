//! `fabro runs [--json]` (SPEC 12.1): every run of `$FABRO_HOME`, newest first.

use std::time::SystemTime;

use fabro_engine::run_index::{read_manifest, RunRecord};

use crate::args::RunsArgs;
use crate::command::{format_elapsed, index_error, json_document, open_index, render_table};
use crate::error::{CliError, Status};
use crate::output::Output;
use crate::view::RunView;

pub(crate) fn run(args: &RunsArgs, output: &mut Output) -> Result<Status, CliError> {
    let records = open_index()?.list().map_err(index_error)?;
    // `simulated_llm` is not a column of the index (SPEC 11.4); the manifest has it. An
    // unreadable manifest only loses the note.
    let runs: Vec<(RunRecord, bool)> = records
        .into_iter()
        .map(|record| {
            let simulated = read_manifest(&record.run_dir)
                .map(|manifest| manifest.simulated_llm)
                .unwrap_or(false);
            (record, simulated)
        })
        .collect();
    if args.json {
        let views: Vec<RunView<'_>> = runs
            .iter()
            .map(|(record, simulated_llm)| RunView {
                run_id: &record.run_id,
                workflow_name: &record.workflow_name,
                status: record.status.as_str(),
                started_at: &record.started_at,
                finished_at: record.finished_at.as_deref(),
                run_dir: record.run_dir.display().to_string(),
                goal: &record.goal,
                simulated_llm: *simulated_llm,
                reason: record.reason.as_deref(),
            })
            .collect();
        output.out(&json_document(&views)?);
        return Ok(Status::Success);
    }
    let now = SystemTime::now();
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|(record, simulated_llm)| {
            let status = match (&record.reason, *simulated_llm) {
                (Some(reason), _) => format!("{} ({reason})", record.status),
                (None, true) => format!("{} (simulated LLM)", record.status),
                (None, false) => record.status.as_str().to_owned(),
            };
            vec![
                record.run_id.clone(),
                record.workflow_name.clone(),
                status,
                record.started_at.clone(),
                record
                    .duration(now)
                    .map_or_else(|| "-".to_owned(), format_elapsed),
            ]
        })
        .collect();
    output.out(&render_table(
        &["RUN ID", "WORKFLOW", "STATUS", "STARTED", "DURATION"],
        &rows,
    ));
    Ok(Status::Success)
}
