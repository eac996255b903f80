//! File access for the language crate, and locating workflow files (SPEC 12.1).

use std::path::{Path, PathBuf};

use fabro_engine::configuration::{workflow_graph, ConfigError, FsConfigReader};
use fabro_engine::{read_regular_file, BoundedRead};

use crate::error::CliError;

pub(crate) use fabro_engine::FsLoader;
use fabro_language::syntax::MAX_SOURCE_BYTES;

/// Resolves a WORKFLOW argument: an existing path, or a bare name resolved to
/// `.fabro/workflows/{name}/workflow.fabro` under the nearest ancestor that holds
/// `.fabro/`.
pub(crate) fn locate_workflow(argument: &Path) -> PathBuf {
    if argument.exists() {
        return argument.to_path_buf();
    }
    let is_bare_name = argument.components().count() == 1 && argument.extension().is_none();
    if is_bare_name {
        if let Ok(current) = std::env::current_dir() {
            for directory in current.ancestors() {
                if directory.join(".fabro").is_dir() {
                    let candidate = directory
                        .join(".fabro/workflows")
                        .join(argument)
                        .join("workflow.fabro");
                    if candidate.exists() {
                        return candidate;
                    }
                    break;
                }
            }
        }
    }
    argument.to_path_buf()
}

/// Resolves a WORKFLOW argument to its DOT file, plus the run-config TOML when the
/// argument is one: its `[workflow] graph`, default `workflow.fabro`, relative to the
/// TOML (SPEC 12.1).
pub(crate) fn resolve_workflow(argument: &Path) -> Result<(PathBuf, Option<PathBuf>), CliError> {
    let path = locate_workflow(argument);
    if path
        .extension()
        .is_some_and(|extension| extension == "toml")
    {
        let graph = workflow_graph(&path, &FsConfigReader).map_err(config_error)?;
        Ok((graph, Some(path)))
    } else {
        Ok((path, None))
    }
}

/// Configuration errors exit 2 (SPEC 12.2, 12.3).
pub(crate) fn config_error(error: ConfigError) -> CliError {
    match error {
        ConfigError::Read { path, source } => {
            CliError::io("cannot read configuration", path, source)
        }
        other => CliError::Config(other),
    }
}

/// The storage root: `$FABRO_HOME`, else `$HOME/.fabro`, else `.fabro` (SPEC 11.1).
/// Empty variables count as unset.
pub(crate) fn fabro_home() -> PathBuf {
    let env = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    env("FABRO_HOME").map(PathBuf::from).unwrap_or_else(|| {
        env("HOME").map_or_else(
            || PathBuf::from(".fabro"),
            |home| PathBuf::from(home).join(".fabro"),
        )
    })
}

/// Reads a whole file; the error names `action` and the path.
pub(crate) fn read_file(action: &'static str, path: &Path) -> Result<Vec<u8>, CliError> {
    #[expect(
        clippy::disallowed_methods,
        reason = "the error is wrapped with the path right here"
    )]
    std::fs::read(path).map_err(|error| CliError::io(action, path, error))
}

/// Reads a workflow file: a regular file only (a FIFO or device is refused rather than
/// waited on or read forever), and no more than one byte past the 10 MB limit.
pub(crate) fn read_workflow_file(path: &Path) -> Result<BoundedRead, CliError> {
    read_regular_file(path, MAX_SOURCE_BYTES)
        .map_err(|error| CliError::io("cannot read workflow", path, error))
}

/// Writes a whole file; the error names the path.
pub(crate) fn write_file(path: &Path, contents: &[u8]) -> Result<(), CliError> {
    #[expect(
        clippy::disallowed_methods,
        reason = "the error is wrapped with the path right here"
    )]
    std::fs::write(path, contents).map_err(|error| CliError::io("cannot write", path, error))
}
