//! `fabro runs [--status S]... [--limit N] [--json]` (SPEC 12.1, 17.4): the runs of
//! `$FABRO_HOME`, newest first, with start times in local time and their age.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use fabro_engine::run_index::{read_manifest, RunRecord};

use crate::args::RunsArgs;
use crate::command::{format_elapsed, index_error, json_document, open_index, render_table};
use crate::error::{CliError, Status};
use crate::output::Output;
use crate::view::RunView;

/// How many runs a terminal shows without `--limit` (SPEC 17.4).
const TERMINAL_LIMIT: usize = 50;

pub(crate) fn run(args: &RunsArgs, output: &mut Output) -> Result<Status, CliError> {
    let records = open_index()?.list().map_err(index_error)?;
    let limit = args
        .limit
        .or_else(|| (!args.json && output.stdout_is_terminal()).then_some(TERMINAL_LIMIT));
    // `simulated_llm` is not a column of the index (SPEC 11.4); the manifest has it. An
    // unreadable manifest only loses the note.
    let runs: Vec<(RunRecord, bool)> = records
        .into_iter()
        .filter(|record| args.status.is_empty() || args.status.contains(&record.status))
        .take(limit.unwrap_or(usize::MAX))
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
    let mut name_counts: HashMap<&str, usize> = HashMap::new();
    for (record, _) in &runs {
        *name_counts
            .entry(record.workflow_name.as_str())
            .or_default() += 1;
    }
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|(record, simulated_llm)| {
            let status = match (&record.reason, *simulated_llm) {
                (Some(reason), _) => format!("{} ({reason})", record.status),
                (None, true) => format!("{} (simulated LLM)", record.status),
                (None, false) => record.status.as_str().to_owned(),
            };
            // SPEC 17.4: the path tells apart runs of workflows that share a name.
            let workflow = if name_counts.get(record.workflow_name.as_str()) > Some(&1) {
                format!("{} ({})", record.workflow_name, record.workflow_path)
            } else {
                record.workflow_name.clone()
            };
            vec![
                record.run_id.clone(),
                workflow,
                status,
                local_start(&record.started_at, now),
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

/// `2026-11-25 14:03 (2h ago)`: an RFC 3339 time in the local time zone (`TZ`, else the
/// system's) to the minute, with its age; the text as stored when it cannot be read.
fn local_start(started_at: &str, now: SystemTime) -> String {
    let Some(started) = fabro_engine::parse_rfc3339(started_at) else {
        return started_at.to_owned();
    };
    let Ok(timestamp) = jiff::Timestamp::try_from(started) else {
        return started_at.to_owned();
    };
    let local = timestamp.to_zoned(jiff::tz::TimeZone::system());
    let age = now.duration_since(started).unwrap_or_default();
    format!(
        "{} ({} ago)",
        local.strftime("%Y-%m-%d %H:%M"),
        format_age(age)
    )
}

/// An age in its largest whole unit: `45s`, `12m`, `5h`, `3d`.
fn format_age(age: Duration) -> String {
    let seconds = age.as_secs();
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3600 => format!("{}m", seconds / 60),
        3600..86_400 => format!("{}h", seconds / 3600),
        _ => format!("{}d", seconds / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_in_their_largest_unit() {
        let age = |seconds| format_age(Duration::from_secs(seconds));
        assert_eq!(age(0), "0s");
        assert_eq!(age(59), "59s");
        assert_eq!(age(60), "1m");
        assert_eq!(age(3599), "59m");
        assert_eq!(age(7200), "2h");
        assert_eq!(age(86_399), "23h");
        assert_eq!(age(3 * 86_400 + 5), "3d");
    }

    #[test]
    fn unreadable_times_are_shown_as_stored() {
        assert_eq!(local_start("yesterday", SystemTime::now()), "yesterday");
    }
}
