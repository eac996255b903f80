//! `fabro server` settings (SPEC 14.1): the `[server]` table of `{root}/server.toml`,
//! under the command-line flags, and its `[store]` table (SPEC 18.1), under `--store`,
//! `--blobs` and their variables. The rest of `server.toml` is a configuration layer of
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
    /// `[store] url`: the shared store's database (SPEC 18.1); absent: the local store.
    pub store: Option<String>,
    /// `[store] blobs`: the shared store's blobs.
    pub blobs: Option<String>,
    /// `--no-worker` (SPEC 18.2): with a shared store, runs are queued for the workers
    /// and this process executes none.
    pub no_worker: bool,
    /// Who the embedded worker is (SPEC 18.2), set by `fabro server` on a shared store
    /// without `--no-worker`: the server claims runs like a worker, and the runs it
    /// accepts are held under its leases.
    pub embedded_worker: Option<WorkerOptions>,
}

/// Who a worker is and how long its leases last: a `fabro worker`, or the embedded
/// worker of a server on a shared store (SPEC 18.2).
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Its name, unique among the workers of a store (`owner` of the runs it holds).
    pub name: String,
    /// The machine it runs on, as `GET /api/v1/workers` shows it.
    pub host: String,
    /// How long a lease lasts without a renewal (renewed every third of it).
    pub lease_ttl: std::time::Duration,
}

/// The tables of `server.toml` that are the server's own, not a configuration layer.
pub const SERVER_TABLES: &[&str] = &["server", "store"];

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
        let document = match fs_err::read_to_string(&path) {
            Ok(text) => text
                .parse::<toml::Table>()
                .map_err(|error| SettingsError::Syntax {
                    path: path.clone(),
                    message: error.message().to_owned(),
                })?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => toml::Table::new(),
            Err(source) => return Err(SettingsError::Read { path, source }),
        };
        let section = |name: &str| {
            document
                .get(name)
                .and_then(toml::Value::as_table)
                .cloned()
                .unwrap_or_default()
        };
        let table = section("server");
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
            store: None,
            blobs: None,
            no_worker: false,
            embedded_worker: None,
        };
        for (key, value) in &section("store") {
            match (key.as_str(), value) {
                ("url", toml::Value::String(url)) => settings.store = Some(url.clone()),
                ("blobs", toml::Value::String(url)) => settings.blobs = Some(url.clone()),
                (key, _) => {
                    return Err(invalid(format!(
                        "unknown key or bad value for 'store.{key}'"
                    )))
                }
            }
        }
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

    #[test]
    fn the_store_table_names_the_shared_store_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let load = |text: &str| {
            fs_err::write(dir.path().join("server.toml"), text).unwrap();
            ServerSettings::load(dir.path(), &SettingsFlags::default(), dir.path())
        };
        let settings = load(
            "[store]
url = \"postgres://db/fabro\"
blobs = \"s3://b/p\"
",
        )
        .unwrap();
        assert_eq!(settings.store.as_deref(), Some("postgres://db/fabro"));
        assert_eq!(settings.blobs.as_deref(), Some("s3://b/p"));
        let local = load(
            "[server]
max_concurrent_runs = 2
",
        )
        .unwrap();
        assert_eq!((local.store, local.blobs), (None, None));
        let error = load(
            "[store]
urll = \"postgres://db/fabro\"
",
        )
        .unwrap_err();
        assert!(error.to_string().contains("store.urll"), "{error}");
        let error = load(
            "[store]
url = 5
",
        )
        .unwrap_err();
        assert!(error.to_string().contains("store.url"), "{error}");
    }
}
