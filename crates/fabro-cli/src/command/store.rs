//! `fabro store migrate --store URL` and `fabro store import --store URL [--blobs URL]`
//! (SPEC 18.1): creates or upgrades the schema of a shared store, and copies the runs of
//! `$FABRO_HOME` that are not running or queued (and its blobs) into one. A store that
//! cannot be used (unreachable, a schema newer than this binary, a failing query) exits
//! 2; URLs are printed with their passwords redacted.

use std::path::Path;

use fabro_store::{
    import_home, redact_url, ImportNote, ImportSummary, ObjectBlobStore, PgStore, RunOutcome,
};

use crate::args::{StoreArgs, StoreCommand};
use crate::error::{CliError, Status};
use crate::loader::fabro_home;
use crate::output::Output;

pub(crate) fn run(args: &StoreArgs, output: &mut Output) -> Result<Status, CliError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(CliError::Runtime)?;
    match &args.command {
        StoreCommand::Migrate { store } => {
            let store = store_url(store.as_ref(), "migrate")?;
            let version = runtime.block_on(async {
                let connected = PgStore::connect(&store).await?;
                connected.migrate().await
            });
            let version = version.map_err(CliError::Store)?;
            output.out(&format!(
                "store {}: schema version {version}\n",
                redact_url(&store)
            ));
            Ok(Status::Success)
        }
        StoreCommand::Import {
            store,
            blobs,
            no_migrate,
        } => {
            let store = store_url(store.as_ref(), "import")?;
            let blobs = blobs.clone().or_else(|| from_env("FABRO_BLOBS"));
            runtime.block_on(import(&store, blobs.as_deref(), *no_migrate, output))
        }
    }
}

/// `--store`, else `FABRO_STORE`; a usage error naming `command` without either.
fn store_url(flag: Option<&String>, command: &str) -> Result<String, CliError> {
    flag.cloned()
        .or_else(|| from_env("FABRO_STORE"))
        .ok_or_else(|| {
            CliError::Usage(format!(
                "fabro store {command} needs --store URL (or FABRO_STORE)"
            ))
        })
}

fn from_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|url| !url.is_empty())
}

/// `fabro store import`: one line per run on stdout (a run that cannot be read, or a
/// blob that cannot be copied, on stderr), then the counts.
async fn import(
    store: &str,
    blobs: Option<&str>,
    no_migrate: bool,
    output: &mut Output,
) -> Result<Status, CliError> {
    let connected = PgStore::connect(store).await.map_err(CliError::Store)?;
    if no_migrate {
        connected.check_schema().await.map_err(CliError::Store)?;
    } else {
        connected.migrate().await.map_err(CliError::Store)?;
    }
    let target = blobs
        .map(ObjectBlobStore::from_url)
        .transpose()
        .map_err(|error| CliError::Usage(fabro_engine::error_chain(&error)))?;
    let home = fabro_home();
    let summary = import_home(&home, &connected, target.as_ref(), &mut |note| {
        print_note(note, output);
    })
    .await
    .map_err(CliError::Import)?;
    output.out(&summary_line(&summary, store, blobs, &home));
    if summary.unreadable > 0 || summary.blobs_unusable > 0 {
        Ok(Status::Failure)
    } else {
        Ok(Status::Success)
    }
}

fn print_note(note: &ImportNote, output: &mut Output) {
    match note {
        ImportNote::Run { run_id, outcome } => match outcome {
            RunOutcome::Imported(status) => {
                output.out(&format!("imported run {run_id} ({})\n", status.as_str()));
            }
            RunOutcome::AlreadyThere => {
                output.out(&format!("skipped run {run_id}: already in the store\n"));
            }
            RunOutcome::Unfinished(status) => {
                output.out(&format!("skipped run {run_id}: {}\n", status.as_str()));
            }
            RunOutcome::Unreadable(reason) => {
                output.err(&format!("error: cannot import run {run_id}: {reason}\n"));
            }
        },
        ImportNote::UnusableBlob { path, reason } => {
            output.err(&format!(
                "error: cannot copy blob {}: {reason}\n",
                path.display()
            ));
        }
    }
}

/// `store {url}: 48 runs imported, 1 already there, 1 running or queued; blobs {url}:
/// 12 copied, 0 already there`, with the unreadable runs and unusable blobs when there
/// are any.
fn summary_line(summary: &ImportSummary, store: &str, blobs: Option<&str>, home: &Path) -> String {
    let mut line = format!(
        "store {}: {} runs imported, {} already there, {} running or queued",
        redact_url(store),
        summary.imported,
        summary.already_there,
        summary.unfinished
    );
    if summary.unreadable > 0 {
        line.push_str(&format!(", {} unreadable", summary.unreadable));
    }
    match blobs {
        Some(blobs) => {
            line.push_str(&format!(
                "; blobs {}: {} copied, {} already there",
                redact_url(blobs),
                summary.blobs_copied,
                summary.blobs_present
            ));
            if summary.blobs_unusable > 0 {
                line.push_str(&format!(", {} unusable", summary.blobs_unusable));
            }
        }
        None => line.push_str(&format!("; blobs stay in {}", home.join("blobs").display())),
    }
    line.push('\n');
    line
}
