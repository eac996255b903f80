//! `fabro store migrate --store URL` (SPEC 18.1): creates or upgrades the schema of a
//! shared store. Any failure (an unreachable store, a schema newer than this binary)
//! exits 2; URLs are printed with their passwords redacted.

use fabro_store::{redact_url, PgStore};

use crate::args::{StoreArgs, StoreCommand};
use crate::error::{CliError, Status};
use crate::output::Output;

pub(crate) fn run(args: &StoreArgs, output: &mut Output) -> Result<Status, CliError> {
    let StoreCommand::Migrate { store } = &args.command;
    let store = store
        .clone()
        .or_else(|| {
            std::env::var("FABRO_STORE")
                .ok()
                .filter(|url| !url.is_empty())
        })
        .ok_or_else(|| {
            CliError::Usage("fabro store migrate needs --store URL (or FABRO_STORE)".to_owned())
        })?;
    let store = store.as_str();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(CliError::Runtime)?;
    let version = runtime.block_on(async {
        let connected = PgStore::connect(store).await?;
        connected.migrate().await
    });
    let version = version.map_err(CliError::Store)?;
    output.out(&format!(
        "store {}: schema version {version}\n",
        redact_url(store)
    ));
    Ok(Status::Success)
}
