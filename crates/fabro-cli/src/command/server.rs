//! `fabro server [--bind ADDR] [--max-concurrent-runs N]` (SPEC 14.1): serves the API
//! of `fabro-server` over the runs of `$FABRO_HOME` until SIGINT or SIGTERM, then
//! cancels the executing runs (resumable) and exits 0. On a shared store it executes
//! runs through an embedded worker (SPEC 18.2), unless `--no-worker`.

use fabro_server::worker::{lease_ttl_setting, WorkerOptions, DEFAULT_LEASE_TTL};
use fabro_server::{load_or_create_token, AppState, EngineBridge, ServerSettings, SettingsFlags};

use crate::args::ServerArgs;
use crate::error::{CliError, Status};
use crate::loader::fabro_home;
use crate::output::Output;

pub(crate) fn run(args: &ServerArgs, output: &mut Output) -> Result<Status, CliError> {
    let root = fabro_home();
    let current = std::env::current_dir()
        .map_err(|source| CliError::io("cannot read", "the current directory", source))?;
    let flags = SettingsFlags {
        bind: args.bind,
        max_concurrent_runs: args.max_concurrent_runs,
    };
    let mut settings = ServerSettings::load(&root, &flags, &current)
        .map_err(|error| CliError::Usage(fabro_engine::error_chain(&error)))?;
    settings.no_worker = args.no_worker;
    // `FABRO_SERVER_TOKEN` ends in `_TOKEN`: it was moved into the secret store at start.
    let env_token = fabro_llm::redact::secrets()
        .get_str("FABRO_SERVER_TOKEN")
        .map(str::to_owned)
        .or_else(|| std::env::var("FABRO_SERVER_TOKEN").ok());
    let token = load_or_create_token(&root, env_token).map_err(|source| {
        CliError::io(
            "cannot read or create",
            fabro_server::auth::token_file(&root),
            source,
        )
    })?;
    service_runtime()?.block_on(async {
        let named = StoreFlags {
            store: args.store.clone(),
            blobs: args.blobs.clone(),
            no_migrate: args.no_migrate,
        };
        let stores = shared_stores(&named, &settings).await?;
        if args.no_worker && stores.is_none() {
            return Err(CliError::Usage(
                "fabro server --no-worker needs --store URL (or FABRO_STORE, or [store] url)"
                    .to_owned(),
            ));
        }
        // SPEC 18.2: on a shared store the server executes runs through an embedded
        // worker, under leases like any other.
        if stores.is_some() && !args.no_worker {
            let (name, host) = identity(None);
            settings.embedded_worker = Some(WorkerOptions {
                name,
                host,
                lease_ttl: configured_lease_ttl(&root)?,
            });
        }
        let listener = tokio::net::TcpListener::bind(settings.bind)
            .await
            .map_err(|source| {
                CliError::io("cannot listen on", settings.bind.to_string(), source)
            })?;
        let address = listener.local_addr().map_err(|source| {
            CliError::io("cannot listen on", settings.bind.to_string(), source)
        })?;
        if !address.ip().is_loopback() {
            output.err(&format!(
                "warning: serving on {address} without TLS; put a TLS-terminating proxy in front\n"
            ));
        }
        // The only place the token is ever printed (SPEC 14.1).
        output.err(&format!(
            "fabro server listening on http://{address}/?token={}\n",
            token.expose()
        ));
        let resume_interrupted = settings.resume_interrupted;
        let mut bridge = EngineBridge::new(root.clone(), settings.roots.clone());
        if let Some(stores) = stores {
            bridge = bridge.with_stores(stores);
        }
        let state = AppState::new(bridge, token, settings);
        for run_id in fabro_server::runs::start_queued(&state).await {
            output.err(&format!("started queued run {run_id}\n"));
        }
        if resume_interrupted {
            for run_id in fabro_server::runs::resume_interrupted(&state).await {
                output.err(&format!("resumed interrupted run {run_id}\n"));
            }
        }
        let worker = state
            .settings()
            .embedded_worker
            .clone()
            .map(|options| tokio::spawn(fabro_server::worker::work(state.clone(), options)));
        let served = fabro_server::serve(listener, state, shutdown_signal())
            .await
            .map_err(|source| CliError::io("cannot serve on", address.to_string(), source));
        if let Some(worker) = worker {
            let _ = worker.await;
        }
        served
    })?;
    Ok(Status::Success)
}

/// The logging and the runtime of a long-lived process (a server, a worker). SPEC 14.1:
/// one line per request at `info` when `RUST_LOG` asks for it; warnings and errors (a
/// 500's cause, under its request id; a lost lease) in any case, on stderr.
pub(crate) fn service_runtime() -> Result<tokio::runtime::Runtime, CliError> {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(CliError::Runtime)
}

/// The shared store a server or a worker is pointed at.
pub(crate) struct StoreFlags {
    /// `--store`.
    pub(crate) store: Option<String>,
    /// `--blobs`.
    pub(crate) blobs: Option<String>,
    /// `--no-migrate`.
    pub(crate) no_migrate: bool,
}

/// `--store`/`--blobs` (else `FABRO_STORE`/`FABRO_BLOBS`, else `[store]` of
/// `server.toml`): the PostgreSQL run store, migrated unless `--no-migrate`, and the
/// object-store blob store (SPEC 18.1).
pub(crate) async fn shared_stores(
    args: &StoreFlags,
    settings: &ServerSettings,
) -> Result<Option<fabro_engine::Stores>, CliError> {
    let from_env = |name: &str| std::env::var(name).ok().filter(|url| !url.is_empty());
    let Some(store) = args
        .store
        .clone()
        .or_else(|| from_env("FABRO_STORE"))
        .or_else(|| settings.store.clone())
    else {
        return Ok(None);
    };
    let blobs = args
        .blobs
        .clone()
        .or_else(|| from_env("FABRO_BLOBS"))
        .or_else(|| settings.blobs.clone())
        .ok_or_else(|| {
            CliError::Usage(
                "--store needs --blobs URL (or FABRO_BLOBS, or [store] blobs)".to_owned(),
            )
        })?;
    let connected = fabro_store::PgStore::connect(&store)
        .await
        .map_err(CliError::Store)?;
    if args.no_migrate {
        connected.check_schema().await.map_err(CliError::Store)?;
    } else {
        connected.migrate().await.map_err(CliError::Store)?;
    }
    let runs = fabro_store::PgRunStore::new(&connected)
        .map_err(|source| CliError::io("cannot start", fabro_store::redact_url(&store), source))?;
    let blobs = fabro_store::ObjectBlobStore::from_url(&blobs)
        .map_err(|error| CliError::Usage(fabro_engine::error_chain(&error)))?;
    Ok(Some(fabro_engine::Stores {
        runs: std::sync::Arc::new(runs),
        blobs: std::sync::Arc::new(blobs),
    }))
}

/// The first SIGINT or SIGTERM.
pub(crate) async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut terminate), Ok(mut interrupt)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
}

/// `[worker] lease_ttl` of `{root}/worker.toml`, else the default (SPEC 18.2).
pub(super) fn configured_lease_ttl(
    root: &std::path::Path,
) -> Result<std::time::Duration, CliError> {
    Ok(lease_ttl_setting(root)
        .map_err(CliError::Usage)?
        .unwrap_or(DEFAULT_LEASE_TTL))
}

/// A worker's name (`--name`, else `{host}-{pid}`) and its machine's name.
pub(super) fn identity(name: Option<&str>) -> (String, String) {
    let host = fs_err::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_else(|_| "localhost".to_owned());
    let name = name.map_or_else(|| format!("{host}-{}", std::process::id()), str::to_owned);
    (name, host)
}
