//! `fabro server` settings (SPEC 14.1): the `[server]` table of `{root}/server.toml`,
//! under the command-line flags. The rest of `server.toml` is a configuration layer of
//! the runs the server starts (SPEC 12.3), read by [`crate::engine_bridge`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The default listen address.
pub const DEFAULT_BIND: &str = "127.0.0.1:3210";
/// The default of `max_concurrent_runs`.
pub const DEFAULT_MAX_CONCURRENT_RUNS: usize = 4;

/// The server's settings.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// Listen address.
    pub bind: SocketAddr,
    /// Runs executing at once; later ones wait `queued`.
    pub max_concurrent_runs: usize,
    /// Directories whose workflows and working directories the API may use (canonical).
    pub roots: Vec<PathBuf>,
    /// Resume the server's own interrupted runs at start.
    pub resume_interrupted: bool,
}

/// Why the settings could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// `server.toml` could not be read.
    #[error("cannot read {}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// `server.toml` is not valid TOML.
    #[error("{}: {message}", .path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        message: String,
    },
    /// A `[server]` key has the wrong type or value, or is unknown.
    #[error("{}: {message}", .path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A root does not exist.
    #[error("server root {} cannot be resolved", .path.display())]
    Root {
        /// The root.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// Command-line overrides of `fabro server`.
#[derive(Debug, Clone, Default)]
pub struct SettingsFlags {
    /// `--bind`.
    pub bind: Option<SocketAddr>,
    /// `--max-concurrent-runs`.
    pub max_concurrent_runs: Option<usize>,
}

/// The path of `server.toml` under `root`.
pub fn server_toml(root: &Path) -> PathBuf {
    root.join("server.toml")
}

impl ServerSettings {
    /// Reads `{root}/server.toml` (absent: defaults) and applies `flags`; relative roots
    /// resolve against `current_dir`, which is also the default root.
    pub fn load(
        root: &Path,
        flags: &SettingsFlags,
        current_dir: &Path,
    ) -> Result<ServerSettings, SettingsError> {
        let path = server_toml(root);
        let table = match fs_err::read_to_string(&path) {
            Ok(text) => text
                .parse::<toml::Table>()
                .map_err(|error| SettingsError::Syntax {
                    path: path.clone(),
                    message: error.message().to_owned(),
                })?
                .get("server")
                .and_then(toml::Value::as_table)
                .cloned()
                .unwrap_or_default(),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => toml::Table::new(),
            Err(source) => return Err(SettingsError::Read { path, source }),
        };
        let invalid = |message: String| SettingsError::Invalid {
            path: path.clone(),
            message,
        };
        let mut settings = ServerSettings {
            bind: DEFAULT_BIND
                .parse()
                .map_err(|_| invalid("bad default bind".to_owned()))?,
            max_concurrent_runs: DEFAULT_MAX_CONCURRENT_RUNS,
            roots: vec![current_dir.to_path_buf()],
            resume_interrupted: false,
        };
        for (key, value) in &table {
            match (key.as_str(), value) {
                ("bind", toml::Value::String(text)) => {
                    settings.bind = text
                        .parse()
                        .map_err(|_| invalid(format!("[server] bind: '{text}' is no address")))?;
                }
                ("max_concurrent_runs", toml::Value::Integer(count)) if *count >= 1 => {
                    settings.max_concurrent_runs = usize::try_from(*count)
                        .map_err(|_| invalid(format!("[server] max_concurrent_runs: {count}")))?;
                }
                ("roots", toml::Value::Array(items)) => {
                    settings.roots = items
                        .iter()
                        .map(|item| {
                            item.as_str()
                                .map(|text| current_dir.join(text))
                                .ok_or_else(|| {
                                    invalid("[server] roots must be an array of paths".to_owned())
                                })
                        })
                        .collect::<Result<_, _>>()?;
                }
                ("resume_interrupted", toml::Value::Boolean(flag)) => {
                    settings.resume_interrupted = *flag;
                }
                (key, _) => {
                    return Err(invalid(format!(
                        "unknown key or bad value for 'server.{key}'"
                    )))
                }
            }
        }
        if let Some(bind) = flags.bind {
            settings.bind = bind;
        }
        if let Some(count) = flags.max_concurrent_runs {
            if count == 0 {
                return Err(invalid(
                    "--max-concurrent-runs must be at least 1".to_owned(),
                ));
            }
            settings.max_concurrent_runs = count;
        }
        settings.roots = settings
            .roots
            .iter()
            .map(|root| {
                fs_err::canonicalize(root).map_err(|source| SettingsError::Root {
                    path: root.clone(),
                    source,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_toml_and_flags_layer_over_the_defaults() {
        let dir = tempfile::tempdir().unwrap();
        fs_err::write(
            dir.path().join("server.toml"),
            "[server]\nmax_concurrent_runs = 2\nresume_interrupted = true\n[llm]\nmodel = \"x\"\n",
        )
        .unwrap();
        let settings =
            ServerSettings::load(dir.path(), &SettingsFlags::default(), dir.path()).unwrap();
        assert_eq!(settings.max_concurrent_runs, 2);
        assert!(settings.resume_interrupted);
        assert_eq!(settings.bind.to_string(), DEFAULT_BIND);
        let flags = SettingsFlags {
            bind: Some("127.0.0.1:0".parse().unwrap()),
            max_concurrent_runs: Some(1),
        };
        let settings = ServerSettings::load(dir.path(), &flags, dir.path()).unwrap();
        assert_eq!(settings.max_concurrent_runs, 1);
        assert_eq!(settings.bind.port(), 0);
        fs_err::write(dir.path().join("server.toml"), "[server]\nbogus = 1\n").unwrap();
        let error = ServerSettings::load(dir.path(), &SettingsFlags::default(), dir.path());
        assert!(error.unwrap_err().to_string().contains("server.bogus"));
    }
}
