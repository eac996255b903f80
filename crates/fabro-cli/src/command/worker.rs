//! `fabro worker --store URL [--blobs URL] [--concurrency N] [--name NAME]
//! [--state-dir DIR] [--lease-ttl D]` (SPEC 18.2): claims the queued runs of a shared
//! store and executes them under leases until SIGINT or SIGTERM, then cancels its
//! running stages, hands its runs back to the queue and exits 0.

use std::path::PathBuf;

use fabro_server::worker::WorkerOptions;
use fabro_server::{AppState, EngineBridge, ServerSettings, SettingsFlags, Token};

use super::server::{
    configured_lease_ttl, identity, service_runtime, shared_stores, shutdown_signal, StoreFlags,
};
use crate::args::WorkerArgs;
use crate::error::{CliError, Status};
use crate::loader::fabro_home;
use crate::output::Output;

/// Runs at once without `--concurrency`.
const DEFAULT_CONCURRENCY: u16 = 4;

pub(crate) fn run(args: &WorkerArgs, output: &mut Output) -> Result<Status, CliError> {
    let root = fabro_home();
    let state_dir = args
        .state_dir
        .clone()
        .unwrap_or_else(|| root.join("worker"));
    fs_err::create_dir_all(&state_dir)
        .map_err(|source| CliError::io("cannot create", &state_dir, source))?;
    let current = std::env::current_dir()
        .map_err(|source| CliError::io("cannot read", "the current directory", source))?;
    let flags = SettingsFlags {
        bind: None,
        max_concurrent_runs: Some(usize::from(args.concurrency.unwrap_or(DEFAULT_CONCURRENCY))),
    };
    let mut settings = ServerSettings::load(&root, &flags, &current)
        .map_err(|error| CliError::Usage(fabro_engine::error_chain(&error)))?;
    // The server that queued a run checked its paths against its own roots.
    settings.roots = vec![PathBuf::from("/")];
    let lease_ttl = match args.lease_ttl {
        Some(ttl) => ttl,
        None => configured_lease_ttl(&root)?,
    };
    let (name, host) = identity(args.name.as_deref());
    service_runtime()?.block_on(async {
        let named = StoreFlags {
            store: args.store.clone(),
            blobs: args.blobs.clone(),
            no_migrate: args.no_migrate,
        };
        let stores = shared_stores(&named, &settings).await?.ok_or_else(|| {
            CliError::Usage(
                "fabro worker needs --store URL (or FABRO_STORE, or [store] url)".to_owned(),
            )
        })?;
        let bridge = EngineBridge::new(state_dir, settings.roots.clone()).with_stores(stores);
        // A worker serves no requests: its state's token is never asked for.
        let state = AppState::new(bridge, Token::new(String::new()), settings);
        state.hand_back_on_stop();
        output.err(&format!(
            "fabro worker {name} claiming runs ({} at once, leases of {}s)\n",
            state.settings().max_concurrent_runs,
            lease_ttl.as_secs_f64()
        ));
        let options = WorkerOptions {
            name,
            host,
            lease_ttl,
        };
        let worker = tokio::spawn(fabro_server::worker::work(state.clone(), options));
        shutdown_signal().await;
        fabro_server::runs::shut_down(&state).await;
        let _ = worker.await;
        Ok::<_, CliError>(())
    })?;
    Ok(Status::Success)
}
