//! Errors and statuses of commands; `main` turns them into exit codes.

use std::error::Error;
use std::path::PathBuf;

use fabro_engine::configuration::ConfigError;
use fabro_engine::local::{DumpError, RunIndexError};
use fabro_engine::RunError;

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

/// A command that could not do its job; every kind exits 2.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    /// Bad arguments.
    #[error("{0}")]
    Usage(String),
    /// A file could not be read or written.
    #[error("{action} {}: {source}", .path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A run could not be prepared, started or resumed.
    #[error(transparent)]
    Run(RunError),
    /// The run index or a run lock failed.
    #[error(transparent)]
    Index(RunIndexError),
    /// `fabro dump` failed (other than a missing blob, which is a failure status).
    #[error(transparent)]
    Dump(DumpError),
    /// A configuration file is invalid.
    #[error(transparent)]
    Config(ConfigError),
    /// The shared store cannot be reached or used (SPEC 18.1).
    #[error(transparent)]
    Store(fabro_store::StoreError),
    /// `fabro store import` stopped: the local runs cannot be listed, or a store failed.
    #[error(transparent)]
    Import(fabro_store::ImportError),
    /// The async runtime a run executes on could not be started.
    #[error("cannot start the async runtime")]
    Runtime(#[source] std::io::Error),
    /// The task executing a run was aborted before it finished.
    #[error("the run was aborted")]
    Aborted(#[source] tokio::task::JoinError),
    /// A `--json` document could not be encoded.
    #[error("cannot encode JSON")]
    EncodeJson(#[source] serde_json::Error),
    /// The checkpoint file `fabro resume` was given is not valid.
    #[error("{target} is not a checkpoint file")]
    NotACheckpoint {
        target: String,
        #[source]
        source: serde_json::Error,
    },
}

/// A run that could not start, resume or finish: a file error reads as the command's
/// own (with its cause below it), every other one as the run's.
impl From<RunError> for CliError {
    fn from(error: RunError) -> CliError {
        match error {
            RunError::Io {
                action,
                path,
                source,
            } => CliError::io(action, path, source),
            error => CliError::Run(error),
        }
    }
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

    /// What the `error:` line says, and the first cause printed below it as a
    /// `caused by:` line. An I/O error names its direct cause in the message and prints
    /// deeper ones below; every other error puts its whole chain on the one line.
    pub(crate) fn report(&self) -> (String, Option<&(dyn Error + 'static)>) {
        match self {
            CliError::Io { source, .. } => (self.to_string(), source.source()),
            CliError::Usage(message) => (message.clone(), None),
            CliError::Run(_)
            | CliError::Index(_)
            | CliError::Dump(_)
            | CliError::Config(_)
            | CliError::Store(_)
            | CliError::Import(_)
            | CliError::Runtime(_)
            | CliError::Aborted(_)
            | CliError::EncodeJson(_)
            | CliError::NotACheckpoint { .. } => (fabro_engine::error_chain(self), None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chained_errors_report_on_one_line() {
        let source = serde_json::from_str::<serde_json::Value>("{").unwrap_err();
        let error = CliError::NotACheckpoint {
            target: "cp.json".to_owned(),
            source,
        };
        let (message, cause) = error.report();
        assert_eq!(
            message,
            "cp.json is not a checkpoint file: EOF while parsing an object at line 1 column 1"
        );
        assert!(cause.is_none());
        let inner = std::io::Error::other("disk gone");
        let error = CliError::io(
            "cannot read",
            "f.txt",
            std::io::Error::other(Wrapped(inner)),
        );
        let (message, cause) = error.report();
        assert_eq!(message, "cannot read f.txt: wrapped");
        assert_eq!(cause.map(ToString::to_string).as_deref(), Some("disk gone"));
    }

    #[derive(Debug)]
    struct Wrapped(std::io::Error);

    impl std::fmt::Display for Wrapped {
        fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            formatter.write_str("wrapped")
        }
    }

    impl Error for Wrapped {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }
}
