//! The `fabro` binary: parses arguments, runs one command, renders its results and
//! decides the exit code.
//!
//! Everything a server would also need lives in the library crates; this crate only turns
//! flags into library calls and writes what comes back to the terminal (SPEC section 12).

mod args;
mod command;
mod console;
mod error;
mod loader;
mod output;
mod progress;
mod report;
mod secrets;
mod view;

use std::process::ExitCode;

use clap::Parser;

use crate::args::Cli;
use crate::error::{CliError, Status};
use crate::output::Output;

/// mimalloc instead of the system allocator (docs/benchmarks.md, issue 2).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // First, while this is the only thread (SPEC 13.1, 13.5).
    secrets::take_from_environment();
    let mut output = Output::new();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            // Help and version requests go to stdout and succeed; real usage errors
            // exit 2 (SPEC 12.2).
            let code = if error.use_stderr() { 2 } else { 0 };
            let _ = error.print();
            return ExitCode::from(code);
        }
    };
    let result = command::run(cli, &mut output);
    if let Err(error) = &result {
        output.error(error);
    }
    exit_code(&result)
}

/// The one place exit codes are chosen (SPEC 12.2).
fn exit_code(result: &Result<Status, CliError>) -> ExitCode {
    match result {
        Ok(Status::Success) => ExitCode::SUCCESS,
        Ok(Status::Failure) => ExitCode::from(1),
        Ok(Status::PartialSuccess) => ExitCode::from(3),
        Ok(Status::Canceled) => ExitCode::from(130),
        Err(
            CliError::Usage(_)
            | CliError::Io { .. }
            | CliError::Run(_)
            | CliError::Index(_)
            | CliError::Dump(_)
            | CliError::Config(_)
            | CliError::Store(_)
            | CliError::Import(_)
            | CliError::Runtime(_)
            | CliError::Aborted(_)
            | CliError::EncodeJson(_)
            | CliError::NotACheckpoint { .. },
        ) => ExitCode::from(2),
    }
}
