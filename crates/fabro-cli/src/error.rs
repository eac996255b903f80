//! Errors and statuses of commands; `main` turns them into exit codes.

use std::path::PathBuf;

/// How a command that ran to completion ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// Exit 0.
    Success,
    /// Exit 1: the workflow has errors, or the run failed or stalled. Already reported.
    Failure,
    /// Exit 3: the run reached exit with status `partial_success`.
    PartialSuccess,
    /// Exit 130: the user cancelled the run.
    Canceled,
}

/// A command that could not do its job.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    /// Bad arguments (exit 2).
    #[error("{0}")]
    Usage(String),
    /// A file could not be read or written (exit 2).
    #[error("{action} {}: {source}", .path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl CliError {
    /// An I/O error on `path`; the message says what was attempted.
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> CliError {
        CliError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
