//! One module per command; each returns a [`Status`] or a [`CliError`].

mod graph;
mod run;
mod validate;

use std::path::Path;

use fabro_language::{check, decode_source, CheckOptions, Checked, Diagnostic, Variables};

use crate::args::{Cli, Command};
use crate::error::{CliError, Status};
use crate::loader::{locate_workflow, read_file, Catalog, FsLoader};
use crate::output::Output;

/// Runs the command `cli` names.
pub(crate) fn run(cli: Cli, output: &mut Output) -> Result<Status, CliError> {
    match cli.command {
        Command::Validate(args) => validate::run(&args, output),
        Command::Graph(args) => graph::run(&args, output),
        Command::Run(args) => run::run(&args, output),
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
/// (exit 2); everything else wrong with the content is a diagnostic.
pub(crate) fn load_workflow(argument: &Path) -> Result<LoadedWorkflow, CliError> {
    let path = locate_workflow(argument);
    let bytes = read_file("cannot read workflow", &path)?;
    let display_name = path.display().to_string();
    let text = match decode_source(&bytes) {
        Ok(text) => text.to_owned(),
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
        models: &Catalog,
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
