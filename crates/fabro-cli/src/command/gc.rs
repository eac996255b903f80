//! `fabro gc [--older-than D] [--dry-run]` (SPEC 17.4): prints one line per run (and
//! set-up leftover) that `fabro_engine::local::collect_garbage` removed, or would remove, and the space
//! freed.

use std::time::SystemTime;

use fabro_engine::local::{collect_garbage, GcOptions, GcReport};

use crate::args::GcArgs;
use crate::error::{CliError, Status};
use crate::loader::fabro_home;
use crate::output::Output;

pub(crate) fn run(args: &GcArgs, output: &mut Output) -> Result<Status, CliError> {
    let options = GcOptions {
        older_than: args.older_than,
        dry_run: args.dry_run,
    };
    let report = collect_garbage(&fabro_home(), &options, SystemTime::now())
        .map_err(|error| CliError::Usage(fabro_engine::error_chain(&error)))?;
    for warning in &report.warnings {
        output.err(&format!("warning: {warning}\n"));
    }
    output.out(&render(&report));
    Ok(Status::Success)
}

fn render(report: &GcReport) -> String {
    if report.runs.is_empty() && report.leftovers.is_empty() && report.blobs == 0 {
        return "nothing to collect\n".to_owned();
    }
    let verb = if report.dry_run {
        "would remove"
    } else {
        "removed"
    };
    let mut text = String::new();
    for run in &report.runs {
        let mut git = Vec::new();
        if !run.refs.is_empty() {
            git.push(plural(run.refs.len(), "ref"));
        }
        if !run.worktrees.is_empty() {
            git.push(plural(run.worktrees.len(), "worktree"));
        }
        let git = if git.is_empty() {
            String::new()
        } else {
            format!(", {}", git.join(", "))
        };
        text.push_str(&format!(
            "{verb} {} {} ({}, ended {}): {}{git}\n",
            run.run_id,
            run.workflow_name,
            run.status,
            run.ended_at,
            format_size(run.bytes),
        ));
    }
    for leftover in &report.leftovers {
        text.push_str(&format!(
            "{verb} set-up leftover {}: {}\n",
            leftover.path.display(),
            format_size(leftover.bytes)
        ));
    }
    text.push_str(&format!(
        "{} {} ({}, {}, {})\n",
        if report.dry_run {
            "would free"
        } else {
            "freed"
        },
        format_size(report.freed_bytes()),
        plural(report.runs.len(), "run"),
        plural(report.leftovers.len(), "leftover"),
        plural(report.blobs, "unreferenced blob"),
    ));
    text
}

fn plural(count: usize, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

/// `512 B`, `1.5 KiB`, `12.0 MiB`, `2.3 GiB`.
fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    #[expect(clippy::cast_precision_loss, reason = "one decimal is shown")]
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use fabro_engine::local::CollectedRun;
    use fabro_engine::RunStatus;

    use super::*;

    #[test]
    fn sizes_read_at_a_glance() {
        assert_eq!(format_size(0), "0 B");
        assert_eq!(format_size(1023), "1023 B");
        assert_eq!(format_size(1536), "1.5 KiB");
        assert_eq!(format_size(5 * 1024 * 1024), "5.0 MiB");
        assert_eq!(format_size(3 << 30), "3.0 GiB");
    }

    #[test]
    fn one_line_per_run_then_the_space_freed() {
        let mut report = GcReport {
            dry_run: true,
            runs: vec![CollectedRun {
                run_id: "01RUN".to_owned(),
                workflow_name: "w".to_owned(),
                status: RunStatus::Success,
                ended_at: "2020-01-01T00:00:00.000Z".to_owned(),
                bytes: 2048,
                refs: vec![
                    "refs/fabro/01RUN".to_owned(),
                    "refs/heads/fabro/run/01RUN".to_owned(),
                ],
                worktrees: Vec::new(),
            }],
            blobs: 1,
            blob_bytes: 10,
            ..GcReport::default()
        };
        assert_eq!(
            render(&report),
            "would remove 01RUN w (success, ended 2020-01-01T00:00:00.000Z): 2.0 KiB, 2 refs\n\
             would free 2.0 KiB (1 run, 0 leftovers, 1 unreferenced blob)\n"
        );
        report.dry_run = false;
        assert!(render(&report).starts_with("removed 01RUN"));
        assert_eq!(render(&GcReport::default()), "nothing to collect\n");
    }
}
