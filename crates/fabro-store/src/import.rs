//! [`import_home`]: `fabro store import` (SPEC 18.1). Copies the runs of a local storage
//! root (`$FABRO_HOME`) that are not running or queued into a shared store, so that a
//! team can start from one person's history, and the root's blobs into the object store.
//!
//! The local runs are read through the engine's file store ([`Stores::local`]), as the
//! local server reads them; each run is written in one transaction as the rows a
//! [`PgRunStore`](crate::PgRunStore) that had executed it would hold ([`rows`]), with its
//! ids, times, status and run directory, so that a server on the shared store answers
//! for it exactly as a server on the local root does. A run the store has already is
//! left as it is. Blobs are copied first, so that every imported run finds its blobs.

use std::path::{Path, PathBuf};

use fabro_engine::backend::{hex_digest, BlobError, Manifest, PendingRewind};
use fabro_engine::{BlobRef, RunId, RunRecord, RunStatus, RunStore, Stores, STAGE_FILES};

use crate::blobs::ObjectBlobStore;
use crate::postgres::PgStore;

mod rows;

/// What became of one local run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// Copied into the store; its status there.
    Imported(RunStatus),
    /// The store has a run with this id already; it is left as it is.
    AlreadyThere,
    /// Running or queued: not imported.
    Unfinished(RunStatus),
    /// Its records cannot be read; why.
    Unreadable(String),
}

/// What the import reports as it goes, in order: first each local blob it cannot use,
/// then each run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportNote {
    /// A blob of the local root that is not copied: unreadable, or its content does not
    /// have the digest it is named after.
    UnusableBlob {
        /// The blob's file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A run, and what became of it.
    Run {
        /// The run.
        run_id: String,
        /// What became of it.
        outcome: RunOutcome,
    },
}

/// What an import did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ImportSummary {
    /// Runs copied into the store.
    pub imported: usize,
    /// Runs the store had already.
    pub already_there: usize,
    /// Runs left out because they are running or queued.
    pub unfinished: usize,
    /// Runs whose records cannot be read.
    pub unreadable: usize,
    /// Blobs copied into the object store.
    pub blobs_copied: usize,
    /// Blobs the object store had already.
    pub blobs_present: usize,
    /// Local blobs that are not copied ([`ImportNote::UnusableBlob`]).
    pub blobs_unusable: usize,
}

/// Why an import stopped before it was done. Runs imported until then stay imported:
/// each run is one transaction.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The local root's runs cannot be listed.
    #[error("cannot list the runs of {}", .home.display())]
    List {
        /// The local root.
        home: PathBuf,
        /// Why.
        #[source]
        source: fabro_engine::StoreError,
    },
    /// The local root's blobs cannot be listed.
    #[error("cannot list the blobs in {}", .path.display())]
    ListBlobs {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The object store failed.
    #[error("cannot copy a blob into the blob store")]
    Blobs(#[source] BlobError),
    /// The database failed while a run was written.
    #[error("cannot write run {run_id} into the store")]
    Store {
        /// The run.
        run_id: String,
        /// Why (a query error names no credentials).
        #[source]
        source: sqlx::Error,
    },
}

/// Imports the runs of the local root `home` that are neither running nor queued into
/// `store` (migrated by the caller) and the root's blobs into `blobs` (`None`: the
/// shared store keeps its blobs in `{home}/blobs`, SPEC 18.1, so there is nothing to
/// copy), calling `note` for each unusable blob and each run, and returns the counts.
///
/// Local records are read with blocking file I/O (and `git`, for the checkpoints of
/// runs with git checkpointing) on the calling thread: call it on a runtime of its own
/// (a CLI command's).
pub async fn import_home(
    home: &Path,
    store: &PgStore,
    blobs: Option<&ObjectBlobStore>,
    note: &mut dyn FnMut(&ImportNote),
) -> Result<ImportSummary, ImportError> {
    let local = Stores::local(home);
    let mut summary = ImportSummary::default();
    if let Some(blobs) = blobs {
        copy_blobs(home, local.blobs.as_ref(), blobs, note, &mut summary).await?;
    }
    let records = local.runs.list_runs().map_err(|source| ImportError::List {
        home: home.to_path_buf(),
        source,
    })?;
    // Oldest first, so that a store's listing of the imported runs grows in their order.
    for record in records.iter().rev() {
        let outcome = import_run(local.runs.as_ref(), store, record).await?;
        match outcome {
            RunOutcome::Imported(_) => summary.imported += 1,
            RunOutcome::AlreadyThere => summary.already_there += 1,
            RunOutcome::Unfinished(_) => summary.unfinished += 1,
            RunOutcome::Unreadable(_) => summary.unreadable += 1,
        }
        note(&ImportNote::Run {
            run_id: record.run_id.clone(),
            outcome,
        });
    }
    Ok(summary)
}

/// Imports the run `record` lists, unless it is running or queued or the store has it.
async fn import_run(
    local: &dyn RunStore,
    store: &PgStore,
    record: &RunRecord,
) -> Result<RunOutcome, ImportError> {
    let failed = |source| ImportError::Store {
        run_id: record.run_id.clone(),
        source,
    };
    match record.status {
        RunStatus::Running | RunStatus::Queued => return Ok(RunOutcome::Unfinished(record.status)),
        RunStatus::Unreadable => {
            let reason = record.reason.clone().unwrap_or_default();
            return Ok(RunOutcome::Unreadable(reason));
        }
        _ => {}
    }
    if rows::has_run(store.pool(), &record.run_id)
        .await
        .map_err(failed)?
    {
        return Ok(RunOutcome::AlreadyThere);
    }
    let run_id = RunId::from(record.run_id.as_str());
    // Held while the run is read, so that no resume changes it meanwhile; a run whose
    // lock is taken started again since it was listed. A lock that cannot be taken for
    // another reason (a root on a read-only disk, where nothing resumes) is done without.
    let _lease = match local.lock(&run_id) {
        Ok(lease) => Some(lease),
        Err(fabro_engine::StoreError::Locked { .. }) => {
            return Ok(RunOutcome::Unfinished(RunStatus::Running))
        }
        Err(fabro_engine::StoreError::Index(error))
            if error.kind() == fabro_engine::local::RunIndexErrorKind::Locked =>
        {
            return Ok(RunOutcome::Unfinished(RunStatus::Running))
        }
        Err(_) => None,
    };
    let run = match LocalRun::read(local, record) {
        Ok(run) => run,
        Err(error) => return Ok(RunOutcome::Unreadable(fabro_engine::error_chain(&error))),
    };
    if rows::write_run(store.pool(), &run).await.map_err(failed)? {
        Ok(RunOutcome::Imported(record.status))
    } else {
        Ok(RunOutcome::AlreadyThere)
    }
}

/// Everything a shared store keeps of a run, read from the local store.
#[derive(Debug)]
struct LocalRun {
    /// The index entry: id, status, end time, run directory.
    record: RunRecord,
    manifest: Manifest,
    /// `manifest.json` and `config.json` as a [`PgRunStore`](crate::PgRunStore) writes them.
    manifest_text: String,
    config_text: String,
    graph: String,
    children: Vec<(String, String)>,
    /// Every checkpoint of the journal, oldest first, as serialised.
    journal: Vec<String>,
    /// The newest complete checkpoint and its time of writing.
    checkpoint: Option<(String, String)>,
    pending_rewind: Option<PendingRewind>,
    /// `(id, envelope line)`, by id.
    events: Vec<(u64, String)>,
    stages: Vec<LocalStage>,
    /// The stages each rewind moved away (rows only: the store serves no file of them).
    rewound: Vec<(u32, Vec<fabro_engine::StoredStage>)>,
}

/// A stage and the bytes of its files.
#[derive(Debug)]
struct LocalStage {
    rank: u32,
    node_id: String,
    visit: u32,
    /// `status.json` as text, once the stage ended.
    status: Option<String>,
    files: Vec<String>,
    contents: Vec<(String, Vec<u8>)>,
}

impl LocalRun {
    /// Reads the run `record` lists through `local`.
    fn read(
        local: &dyn RunStore,
        record: &RunRecord,
    ) -> Result<LocalRun, fabro_engine::StoreError> {
        let run_id = RunId::from(record.run_id.as_str());
        let encode = |error: serde_json::Error| {
            fabro_engine::StoreError::backend(
                format!("cannot encode the records of run {run_id}"),
                error,
            )
        };
        let manifest = local.read_manifest(&run_id)?;
        let config = local.read_config(&run_id)?;
        let workflow = local.read_workflow(&run_id)?;
        let mut journal = Vec::new();
        let mut encoding = Ok(());
        local.replay_checkpoints(
            &run_id,
            &mut |checkpoint| match serde_json::to_string(checkpoint) {
                Ok(text) => journal.push(text),
                Err(error) => encoding = Err(error),
            },
        )?;
        encoding.map_err(encode)?;
        let checkpoint = local
            .load_checkpoint(&run_id)?
            .map(|checkpoint| {
                serde_json::to_string(&checkpoint).map(|text| (text, checkpoint.timestamp))
            })
            .transpose()
            .map_err(encode)?;
        Ok(LocalRun {
            record: record.clone(),
            manifest_text: serde_json::to_string_pretty(&manifest).map_err(encode)?,
            config_text: serde_json::to_string_pretty(&config).map_err(encode)?,
            manifest,
            graph: workflow.graph,
            children: workflow.children,
            journal,
            checkpoint,
            pending_rewind: local.pending_rewind(&run_id)?,
            events: read_events(local, &run_id)?,
            stages: read_stages(local, &run_id)?,
            rewound: local.record_parts(record)?.rewound,
        })
    }
}

/// The run's events as stored: the complete lines, then a last event whose line lacks
/// only its newline (a process killed as it wrote it), as the store reads it.
fn read_events(
    local: &dyn RunStore,
    run_id: &RunId,
) -> Result<Vec<(u64, String)>, fabro_engine::StoreError> {
    let mut events: Vec<(u64, String)> = local
        .event_reader(run_id, 0)
        .read_new()?
        .into_iter()
        .map(|event| (event.id, event.line))
        .collect();
    let next = events.last().map_or(1, |(id, _)| id + 1);
    for envelope in local.read_events(run_id, next)? {
        let line = serde_json::to_string(&envelope).map_err(|error| {
            fabro_engine::StoreError::backend(
                format!("cannot encode an event of run {run_id}"),
                error,
            )
        })?;
        events.push((envelope.id, line));
    }
    Ok(events)
}

/// The run's stages with the bytes of their files. Of two stages of one rank (a shared
/// store keeps one per rank), the first is kept, as the local store answers for that rank.
fn read_stages(
    local: &dyn RunStore,
    run_id: &RunId,
) -> Result<Vec<LocalStage>, fabro_engine::StoreError> {
    let mut stages: Vec<LocalStage> = Vec::new();
    for stage in local.stages(run_id)? {
        if stages.iter().any(|kept| kept.rank == stage.rank) {
            continue;
        }
        let mut contents = Vec::new();
        for name in STAGE_FILES {
            if !stage.files.iter().any(|file| file == name) {
                continue;
            }
            if let Some(bytes) = local.stage_file(run_id, stage.rank, name)? {
                contents.push((name.to_owned(), bytes));
            }
        }
        let status = contents
            .iter()
            .find(|(name, _)| name == "status.json")
            .map(|(_, bytes)| String::from_utf8_lossy(bytes).into_owned());
        stages.push(LocalStage {
            rank: stage.rank,
            node_id: stage.node_id,
            visit: stage.visit,
            status,
            files: contents.iter().map(|(name, _)| name.clone()).collect(),
            contents,
        });
    }
    Ok(stages)
}

/// Copies the blobs of `{home}/blobs/sha256/` that `target` lacks, byte for byte.
async fn copy_blobs(
    home: &Path,
    local: &dyn fabro_engine::BlobStore,
    target: &ObjectBlobStore,
    note: &mut dyn FnMut(&ImportNote),
    summary: &mut ImportSummary,
) -> Result<(), ImportError> {
    for (path, reference) in local_blobs(home)? {
        let hex = reference.hex();
        let unusable = match local.read(&reference) {
            Ok(bytes) if hex_digest(&bytes) == hex => {
                let copied = target
                    .copy_in(&hex, bytes)
                    .await
                    .map_err(ImportError::Blobs)?;
                if copied {
                    summary.blobs_copied += 1;
                } else {
                    summary.blobs_present += 1;
                }
                None
            }
            Ok(_) => Some("its content does not have the digest it is named after".to_owned()),
            Err(error) => Some(fabro_engine::error_chain(&error)),
        };
        if let Some(reason) = unusable {
            summary.blobs_unusable += 1;
            note(&ImportNote::UnusableBlob { path, reason });
        }
    }
    Ok(())
}

/// The blobs under `{home}/blobs/sha256/{hex[0..2]}/{hex}` (SPEC 11.2), by digest;
/// other entries (a write's temporary file) are not blobs.
fn local_blobs(home: &Path) -> Result<Vec<(PathBuf, BlobRef)>, ImportError> {
    let root = home.join("blobs").join("sha256");
    let list = |path: &Path| -> Result<Vec<PathBuf>, ImportError> {
        let listing = |source| ImportError::ListBlobs {
            path: path.to_path_buf(),
            source,
        };
        let mut paths = Vec::new();
        for entry in fs_err::read_dir(path).map_err(listing)? {
            paths.push(entry.map_err(listing)?.path());
        }
        paths.sort();
        Ok(paths)
    };
    if !root.is_dir() {
        return Ok(Vec::new());
    }
    let mut blobs = Vec::new();
    for directory in list(&root)? {
        if !directory.is_dir() {
            continue;
        }
        for path in list(&directory)? {
            let name = path
                .file_name()
                .and_then(|name| name.to_str())
                .unwrap_or("");
            let reference = BlobRef::parse(&format!("blob://sha256/{name}"))
                .filter(|_| name.bytes().all(|byte| !byte.is_ascii_uppercase()));
            if let Some(reference) = reference.filter(|_| path.is_file()) {
                blobs.push((path, reference));
            }
        }
    }
    Ok(blobs)
}

#[cfg(test)]
mod tests;
