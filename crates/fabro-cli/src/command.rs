//! One module per command; each returns a [`Status`] or a [`CliError`].

mod answer;
mod cancel;
mod diff;
mod dump;
mod events;
mod fork;
mod gc;
mod graph;
mod inspect;
mod logs;
mod model;
mod remote;
mod resume;
mod rewind;
mod run;
mod runs;
mod server;
mod steer;
mod store;
mod validate;
mod worker;

use std::path::Path;
use std::time::Duration;

use fabro_engine::configuration::{self, ConfigSources, FsConfigReader};
use fabro_engine::local::{RunIndex, RunIndexError};
use fabro_engine::{ConfiguredModels, RunRecord};
use fabro_language::{
    check, decode_source, oversized_source, CheckOptions, Checked, Diagnostic, Variables,
};

use crate::args::{Cli, Command};
use crate::error::{CliError, Status};
use crate::loader::{config_error, fabro_home, read_workflow_file, resolve_workflow, FsLoader};
use crate::output::Output;

/// Runs the command `cli` names. Whether a command works on this machine's runs or
/// through a server (`--server`, `FABRO_SERVER`) is chosen here, once: the local
/// implementations never reach for the remote one.
pub(crate) fn run(cli: Cli, output: &mut Output) -> Result<Status, CliError> {
    let server = |flag: &Option<String>| remote::server_url(flag.as_deref());
    match cli.command {
        Command::Validate(args) => validate::run(&args, output),
        Command::Graph(args) => graph::run(&args, output),
        Command::Run(args) => {
            run::check_model_flags(&args.stages)?;
            match server(&args.server) {
                Some(url) => remote::run(&url, &args, output),
                None => run::run(&args, output),
            }
        }
        Command::Resume(args) => {
            run::check_model_flags(&args.stages)?;
            match server(&args.server) {
                Some(url) => remote::resume(&url, &args, output),
                None => resume::run(&args, output),
            }
        }
        Command::Fork(args) => {
            run::check_model_flags(&args.stages)?;
            match server(&args.server) {
                Some(url) => remote::fork(&url, &args, output),
                None => fork::run(&args, output),
            }
        }
        Command::Rewind(args) => match server(&args.server) {
            Some(url) => remote::rewind(&url, &args, output),
            None => rewind::run(&args, output),
        },
        Command::Runs(args) => runs::run(&args, output),
        Command::Inspect(args) => match server(&args.server) {
            Some(url) => inspect::print(&remote::inspect(&url, &args.run)?, args.json, output),
            None => inspect::run(&args, output),
        },
        Command::Events(args) => match server(&args.server) {
            Some(url) => remote::events(&url, &args, output),
            None => events::run(&args, output),
        },
        Command::Dump(args) => dump::run(&args, output),
        Command::Logs(args) => logs::run(&args, output),
        Command::Diff(args) => diff::run(&args, output),
        Command::Gc(args) => gc::run(&args, output),
        Command::Model(args) => model::run(&args, output),
        Command::Answer(args) => match server(&args.server) {
            Some(url) => remote::answer(&url, &args, output),
            None => answer::run(&args, output),
        },
        Command::Cancel(args) => match server(&args.server) {
            Some(url) => remote::cancel(&url, &args.run, output),
            None => cancel::run(&args, output),
        },
        Command::Steer(args) => match server(&args.server) {
            Some(url) => remote::steer(&url, &args, output),
            None => steer::run(&args, output),
        },
        Command::Server(args) => server::run(&args, output),
        Command::Store(args) => store::run(&args, output),
        Command::Worker(args) => worker::run(&args, output),
    }
}

/// A workflow file read from disk and checked.
pub(crate) struct LoadedWorkflow {
    /// The path as the user wrote it (or the resolved workflow name), for messages.
    pub(crate) display_name: String,
    /// The decoded text (lossily decoded when decoding failed).
    pub(crate) text: String,
    /// The check result; a decoding failure is a single `parse_error`.
    pub(crate) checked: Checked,
}

/// Reads and checks the workflow named by `argument`. Unreadable files are I/O errors
/// (exit 2); everything else wrong with the content is a diagnostic. Providers and
/// models configured in the layers a run of the workflow would read (SPEC 10.7, 12.3)
/// are known; a configuration that cannot be read or parsed exits 2 as for `fabro run`.
pub(crate) fn load_workflow(argument: &Path) -> Result<LoadedWorkflow, CliError> {
    let (path, run_config) = resolve_workflow(argument)?;
    let sources = ConfigSources {
        root: fabro_home(),
        workflow: path.clone(),
        run_configs: run_config.into_iter().collect(),
    };
    let config = configuration::load(&sources, &FsConfigReader).map_err(config_error)?;
    let workflow_dir = path.parent().unwrap_or(Path::new("."));
    let models =
        ConfiguredModels::of(&config.llm).with_extensions(&config, &fabro_home(), workflow_dir);
    let read = read_workflow_file(&path)?;
    let display_name = path.display().to_string();
    if let Some(size) = read.oversized {
        return Ok(LoadedWorkflow {
            display_name,
            text: String::new(),
            checked: decoding_failure(oversized_source(size)),
        });
    }
    let bytes = read.bytes;
    let text = match decode_source(&bytes) {
        Ok(text) => {
            // Reuse the buffer instead of copying a file of up to 10 MB: the decoded text
            // is the buffer without its byte-order mark.
            let mark = bytes.len() - text.len();
            let mut bytes = bytes;
            bytes.drain(..mark);
            String::from_utf8(bytes).expect("decode_source accepted these bytes as UTF-8")
        }
        Err(diagnostic) => {
            return Ok(LoadedWorkflow {
                display_name,
                // Lossy text keeps the offsets before the first invalid byte, so the
                // diagnostic's line and column stay right.
                text: String::from_utf8_lossy(&bytes).into_owned(),
                checked: decoding_failure(diagnostic),
            });
        }
    };
    let variables = Variables::default();
    let options = CheckOptions {
        loader: &FsLoader,
        variables: &variables,
        models: &models,
    };
    let checked = check(&path, &text, &options);
    Ok(LoadedWorkflow {
        display_name,
        text,
        checked,
    })
}

fn decoding_failure(diagnostic: Diagnostic) -> Checked {
    Checked {
        workflow: None,
        diagnostics: vec![diagnostic],
        children: Vec::new(),
    }
}

/// Opens the run index of `$FABRO_HOME` (SPEC 11.4).
pub(crate) fn open_index() -> Result<RunIndex, CliError> {
    RunIndex::open(&fabro_home()).map_err(index_error)
}

/// The run a `RUN` argument names: a full id or a unique prefix of at least 4 characters;
/// unknown and ambiguous arguments exit 2 (SPEC 12.1).
pub(crate) fn resolve_run(run: &str) -> Result<RunRecord, CliError> {
    open_index()?.resolve(run).map_err(index_error)
}

/// Every index failure exits 2 (SPEC 12.2); the message carries the whole cause chain.
pub(crate) fn index_error(error: RunIndexError) -> CliError {
    CliError::Index(error)
}

/// Encodes a `--json` document, pretty-printed, with a final newline.
pub(crate) fn json_document(value: &impl serde::Serialize) -> Result<String, CliError> {
    let mut text = serde_json::to_string_pretty(value).map_err(CliError::EncodeJson)?;
    text.push('\n');
    Ok(text)
}

/// Left-aligned columns two spaces apart, without trailing spaces.
pub(crate) fn render_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|cell| cell.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let header: Vec<String> = header.iter().map(|&cell| cell.to_owned()).collect();
    let mut text = String::new();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (column, (cell, width)) in row.iter().zip(&widths).enumerate() {
            if column > 0 {
                line.push_str("  ");
            }
            line.push_str(cell);
            line.extend(std::iter::repeat_n(' ', width - cell.chars().count()));
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

/// A duration for tables: `850ms`, `12.3s`, `4m05s`, `2h07m`.
pub(crate) fn format_elapsed(duration: Duration) -> String {
    let milliseconds = duration.as_millis();
    let seconds = duration.as_secs();
    if milliseconds < 1000 {
        format!("{milliseconds}ms")
    } else if seconds < 60 {
        format!("{:.1}s", duration.as_secs_f64())
    } else if seconds < 3600 {
        format!("{}m{:02}s", seconds / 60, seconds % 60)
    } else {
        format!("{}h{:02}m", seconds / 3600, seconds % 3600 / 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elapsed_times_read_at_a_glance() {
        let check = |milliseconds: u64, expected: &str| {
            assert_eq!(
                format_elapsed(Duration::from_millis(milliseconds)),
                expected
            );
        };
        check(0, "0ms");
        check(999, "999ms");
        check(1_250, "1.2s");
        check(65_000, "1m05s");
        check(7_260_000, "2h01m");
    }

    #[test]
    fn tables_align_columns_without_trailing_spaces() {
        let rows = vec![
            vec!["r1".to_owned(), "long-name".to_owned(), String::new()],
            vec!["run-two".to_owned(), "w".to_owned(), "x".to_owned()],
        ];
        assert_eq!(
            render_table(&["ID", "WORKFLOW", "NOTE"], &rows),
            "ID       WORKFLOW   NOTE\nr1       long-name\nrun-two  w          x\n"
        );
    }
}
