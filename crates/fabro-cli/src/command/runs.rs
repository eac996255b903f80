//! `fabro runs [--status S]... [--limit N] [--json]` (SPEC 12.1, 17.4): the runs of
//! `$FABRO_HOME`, newest first, with start times in local time and their age.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use fabro_engine::local::{run_view, RunView};

use crate::args::RunsArgs;
use crate::command::{
    format_elapsed, index_error, json_document, open_index, remote, render_table,
};
use crate::error::{CliError, Status};
use crate::output::Output;

/// How many runs a terminal shows without `--limit` (SPEC 17.4).
const TERMINAL_LIMIT: usize = 50;

pub(crate) fn run(args: &RunsArgs, output: &mut Output) -> Result<Status, CliError> {
    let limit = args
        .limit
        .or_else(|| (!args.json && output.stdout_is_terminal()).then_some(TERMINAL_LIMIT));
    let runs: Vec<Listed> = match remote::server_url(args.server.as_deref()) {
        Some(url) => remote::runs(&url, &args.status, limit)?
            .into_iter()
            .map(|(view, workflow_path, worker)| Listed {
                view,
                workflow_path,
                worker,
            })
            .collect(),
        None => open_index()?
            .list()
            .map_err(index_error)?
            .into_iter()
            .filter(|record| args.status.is_empty() || args.status.contains(&record.status))
            .take(limit.unwrap_or(usize::MAX))
            .map(|record| Listed {
                view: run_view(&record),
                workflow_path: record.workflow_path,
                worker: record.worker,
            })
            .collect(),
    };
    if args.json {
        let views: Vec<JsonRun<'_>> = runs
            .iter()
            .map(|listed| JsonRun {
                view: &listed.view,
                worker: listed.worker.as_deref(),
            })
            .collect();
        output.out(&json_document(&views)?);
        return Ok(Status::Success);
    }
    output.out(&render(&runs, SystemTime::now()));
    Ok(Status::Success)
}

/// One run of `--json`: the run's view, and the worker that executes or executed it
/// when a store's queue names one (absent otherwise, so other listings are unchanged).
#[derive(serde::Serialize)]
struct JsonRun<'a> {
    #[serde(flatten)]
    view: &'a RunView,
    #[serde(skip_serializing_if = "Option::is_none")]
    worker: Option<&'a str>,
}

/// One run of the listing, its workflow's path, which tells apart runs of workflows
/// that share a name, and the worker that executes or executed it (SPEC 18.2).
struct Listed {
    view: RunView,
    workflow_path: String,
    worker: Option<String>,
}

fn render(runs: &[Listed], now: SystemTime) -> String {
    let mut name_counts: HashMap<&str, usize> = HashMap::new();
    for listed in runs {
        *name_counts
            .entry(listed.view.workflow_name.as_str())
            .or_default() += 1;
    }
    // A store's queue names the worker of each run; other listings have no such column.
    let workers = runs.iter().any(|listed| listed.worker.is_some());
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(
            |Listed {
                 view,
                 workflow_path,
                 worker,
             }| {
                let status = match (&view.reason, view.simulated_llm) {
                    (Some(reason), _) => format!("{} ({reason})", view.status),
                    (None, true) => format!("{} (simulated LLM)", view.status),
                    (None, false) => view.status.clone(),
                };
                // SPEC 17.4: the path tells apart runs of workflows that share a name.
                let workflow = if name_counts.get(view.workflow_name.as_str()) > Some(&1) {
                    format!("{} ({workflow_path})", view.workflow_name)
                } else {
                    view.workflow_name.clone()
                };
                let mut row = vec![
                    view.run_id.clone(),
                    workflow,
                    status,
                    local_start(&view.started_at, now),
                    duration(view, now).map_or_else(|| "-".to_owned(), format_elapsed),
                ];
                if workers {
                    row.push(worker.clone().unwrap_or_else(|| "-".to_owned()));
                }
                row
            },
        )
        .collect();
    let mut header = vec!["RUN ID", "WORKFLOW", "STATUS", "STARTED", "DURATION"];
    if workers {
        header.push("WORKER");
    }
    render_table(&header, &rows)
}

/// Wall-clock time; up to `now` while the run is running.
fn duration(view: &RunView, now: SystemTime) -> Option<Duration> {
    let started = fabro_engine::parse_rfc3339(&view.started_at)?;
    let ended = match (&view.finished_at, view.status.as_str()) {
        (Some(finished_at), _) => fabro_engine::parse_rfc3339(finished_at)?,
        (None, "running") => now,
        (None, _) => return None,
    };
    ended.duration_since(started).ok()
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
