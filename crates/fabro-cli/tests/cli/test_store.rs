//! Reading the runs of a test's servers with `fabro` commands on either store (issue 31
//! acceptance 2; see [`ServerStore`]): local commands when the servers keep their runs
//! in the test's home, commands with `--server` when they keep them in PostgreSQL.

use std::process::Output;
use std::sync::Arc;

use fabro_test_support::{Record, ServerStore, TestEnv};
use serde_json::Value;

use crate::server::Server;

/// Reads a store's runs with `fabro` commands while none of the test's servers runs.
pub(crate) struct Reader {
    server: Option<Server>,
}

impl Reader {
    /// Local commands on the home, else commands through a new server over the store on
    /// `env` (its `server.toml` applies).
    pub(crate) fn new(store: &Arc<ServerStore>, env: &TestEnv) -> Reader {
        Reader {
            server: (!store.is_home()).then(|| Server::start_on(env, &[], Arc::clone(store))),
        }
    }

    /// [`Reader::new`] whose server executes nothing (`--no-worker`): on a shared store
    /// it claims no queued run and takes over no run whose lease runs out.
    pub(crate) fn serving_only(store: &Arc<ServerStore>, env: &TestEnv) -> Reader {
        Reader {
            server: (!store.is_home())
                .then(|| Server::start_with(env, &["--no-worker"], &[], Arc::clone(store))),
        }
    }

    /// `fabro` with `args`, reading the store.
    pub(crate) fn fabro(&self, env: &TestEnv, args: &[&str]) -> Output {
        fabro_reading(env, args, self.server.as_ref())
    }
}

/// `fabro` with `args`, and `--server {url}` of `server` when there is one.
pub(crate) fn fabro_reading(env: &TestEnv, args: &[&str], server: Option<&Server>) -> Output {
    let mut command = env.command(env!("CARGO_BIN_EXE_fabro"));
    command.args(args);
    if let Some(server) = server {
        // The token too: the server may be one of another home.
        command
            .args(["--server", &server.url()])
            .env("FABRO_SERVER_TOKEN", &server.token);
    }
    command.output().expect("the fabro binary runs")
}

/// `record` of the run `run_id` of `store` (its file in `run_dir` on the home, its row
/// in the database) as JSON.
pub(crate) fn record_json(
    store: &ServerStore,
    run_dir: &std::path::Path,
    run_id: &str,
    record: Record,
) -> Value {
    let text = store.stored_record(run_id, record).unwrap_or_else(|| {
        let file = match record {
            Record::Manifest => "manifest.json",
            Record::Checkpoint => "checkpoint.json",
        };
        fs_err::read_to_string(run_dir.join(file)).expect("the run's record")
    });
    serde_json::from_str(&text).unwrap_or_else(|_| panic!("{record:?} of {run_id}: {text}"))
}
