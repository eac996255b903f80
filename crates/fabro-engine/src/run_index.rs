//! The run index and the run lock (SPEC 11.4).
//!
//! [`RunIndex`] is `{root}/runs.db`, one SQLite row per run, written when a run starts
//! and when it ends. It is a cache of what the run directories already say: reads first
//! add every `{root}/scratch/*` run the table lacks (from `manifest.json` and
//! `checkpoint.json`) and drop rows whose directory is gone, so a missing, deleted or
//! corrupt database is rebuilt by the next read and a failed write at run start heals.
//!
//! [`RunLock`] is `{run_dir}/run.lock`: an advisory lock held by the process executing
//! the run, with its pid written inside. A run whose recorded status is `running` but
//! whose lock nobody holds was interrupted (killed, crashed, power lost), and is
//! reported as [`RunStatus::Interrupted`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rusqlite::{params, Connection};
use serde::Deserialize;

use crate::record::Manifest;
use crate::run_dir::RunPaths;
use crate::timestamp::parse_rfc3339;

mod catalog;
mod database;
pub(crate) mod lock;
mod queued;

pub use catalog::{Listing, RunCatalog};

use database::{connect, is_corruption, remove_database, ConnectError};
pub use lock::{lock_pid, RunLock, LOCK_PATIENCE};
pub(crate) use queued::read_queued;
pub use queued::{queued_runs, remove_queued, write_queued, QueuedRun};

/// The index file under a storage root.
pub(crate) const INDEX_FILE: &str = "runs.db";

/// The shortest run-id prefix a `RUN` argument may use (SPEC 12.1).
pub const MIN_PREFIX_LEN: usize = 4;

/// The run index of one storage root.
pub struct RunIndex {
    root: PathBuf,
    path: PathBuf,
    connection: Connection,
}

pub(crate) use crate::run_status::RunStatus;

/// One run as listed by the index.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    /// Run id.
    pub run_id: String,
    /// Graph id or file stem.
    pub workflow_name: String,
    /// The workflow file the run started from.
    pub workflow_path: String,
    /// Resolved goal.
    pub goal: String,
    /// Status, with `running` checked against the checkpoint and the run lock.
    pub status: RunStatus,
    /// RFC 3339 start time.
    pub started_at: String,
    /// RFC 3339 end time, once the run ended.
    pub finished_at: Option<String>,
    /// The run directory.
    pub run_dir: PathBuf,
    /// Parent run of a child workflow.
    pub parent_run_id: Option<String>,
    /// Why the run is [`RunStatus::Unreadable`].
    pub reason: Option<String>,
    /// The worker that executes or executed the run last, on a shared store's queue
    /// (SPEC 18.2).
    pub worker: Option<String>,
}

/// Why the index could not answer.
#[derive(Debug, thiserror::Error)]
pub enum RunIndexError {
    /// The database could not be opened, read or written.
    #[error("run index {} failed", .path.display())]
    Database {
        /// `runs.db`.
        path: PathBuf,
        /// The cause.
        #[source]
        source: rusqlite::Error,
    },
    /// The database stayed unusable after it was replaced.
    #[error("run index {} is corrupt: {reason}", .path.display())]
    Corrupt {
        /// `runs.db`.
        path: PathBuf,
        /// What SQLite reported.
        reason: String,
    },
    /// A file or directory could not be read or written.
    #[error("{action} {}", .path.display())]
    Io {
        /// What was attempted.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// No run has this id or prefix.
    #[error("unknown run '{run}'")]
    UnknownRun {
        /// The `RUN` argument.
        run: String,
    },
    /// Several runs start with this prefix.
    #[error("ambiguous run '{run}': it matches {}", list_candidates(.candidates))]
    AmbiguousRun {
        /// The `RUN` argument.
        run: String,
        /// The matching run ids, sorted.
        candidates: Vec<String>,
    },
    /// The argument is neither a full run id nor long enough to be a prefix.
    #[error("unknown run '{run}': a prefix needs at least {MIN_PREFIX_LEN} characters")]
    PrefixTooShort {
        /// The `RUN` argument.
        run: String,
    },
    /// Another process holds the run lock.
    #[error("run lock {} is held by another process{}", .path.display(), .pid.map(|pid| format!(" (pid {pid})")).unwrap_or_default())]
    Locked {
        /// `run.lock`.
        path: PathBuf,
        /// The pid written in `run.lock`, when there is one.
        pid: Option<u32>,
    },
}

/// What a [`RunIndexError`] means to a caller deciding what to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunIndexErrorKind {
    /// The database or a file failed.
    Storage,
    /// The `RUN` argument names no single run (unknown, ambiguous or too short).
    NoSuchRun,
    /// Another process holds the run lock.
    Locked,
}

impl RunRecord {
    /// Wall-clock duration: start to end, or start to `now` while running; `None` when a
    /// timestamp does not parse or an interrupted run has no end time.
    pub fn duration(&self, now: SystemTime) -> Option<Duration> {
        let started = parse_rfc3339(&self.started_at)?;
        let ended = match (&self.finished_at, self.status) {
            (Some(finished_at), _) => parse_rfc3339(finished_at)?,
            (None, RunStatus::Running) => now,
            (None, _) => return None,
        };
        ended.duration_since(started).ok()
    }
}

impl RunIndexError {
    /// What the error means, for callers choosing an exit code or a fallback.
    pub fn kind(&self) -> RunIndexErrorKind {
        match self {
            RunIndexError::Database { .. }
            | RunIndexError::Corrupt { .. }
            | RunIndexError::Io { .. } => RunIndexErrorKind::Storage,
            RunIndexError::UnknownRun { .. }
            | RunIndexError::AmbiguousRun { .. }
            | RunIndexError::PrefixTooShort { .. } => RunIndexErrorKind::NoSuchRun,
            RunIndexError::Locked { .. } => RunIndexErrorKind::Locked,
        }
    }
}

const COLUMNS: &str =
    "run_id, workflow_name, workflow_path, goal, status, started_at, finished_at, run_dir, parent_run_id";

impl RunIndex {
    /// Opens `{root}/runs.db`, creating it (and `root`) when missing. A file that is not
    /// a database, or whose `runs` table has other columns, is replaced by an empty one;
    /// the next read fills it from the run directories.
    pub fn open(root: &Path) -> Result<RunIndex, RunIndexError> {
        fs_err::create_dir_all(root).map_err(|source| RunIndexError::Io {
            action: "cannot create storage root",
            path: root.to_path_buf(),
            source,
        })?;
        let path = root.join(INDEX_FILE);
        let connection = match connect(&path) {
            Ok(connection) => connection,
            Err(ConnectError::Corrupt(reason)) => {
                tracing::warn!(path = %path.display(), %reason, "run index is corrupt; rebuilding it");
                remove_database(&path)?;
                connect(&path).map_err(|error| error.into_index_error(&path))?
            }
            Err(error) => return Err(error.into_index_error(&path)),
        };
        Ok(RunIndex {
            root: root.to_path_buf(),
            path,
            connection,
        })
    }

    /// Records a run that starts now with status `running` (replacing any older row of
    /// the same id).
    pub fn record_start(&self, manifest: &Manifest, run_dir: &Path) -> Result<(), RunIndexError> {
        self.connection
            .execute(
                &format!("INSERT OR REPLACE INTO runs({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, NULL, ?7, ?8)"),
                params![
                    manifest.run_id,
                    manifest.workflow_name,
                    manifest.workflow_path,
                    manifest.goal,
                    RunStatus::Running.as_str(),
                    manifest.started_at,
                    run_dir.to_string_lossy(),
                    manifest.parent_run_id,
                ],
            )
            .map_err(|source| self.database_error(source))?;
        Ok(())
    }

    /// Records a status change; `finished_at` is the end time of a finished run.
    /// [`RunIndexError::UnknownRun`] when the run has no row.
    pub fn record_status(
        &self,
        run_id: &str,
        status: RunStatus,
        finished_at: Option<&str>,
    ) -> Result<(), RunIndexError> {
        let changed = self
            .connection
            .execute(
                "UPDATE runs SET status = ?2, finished_at = ?3 WHERE run_id = ?1",
                params![run_id, status.as_str(), finished_at],
            )
            .map_err(|source| self.database_error(source))?;
        if changed == 0 {
            return Err(RunIndexError::UnknownRun {
                run: run_id.to_owned(),
            });
        }
        Ok(())
    }

    /// Every run, newest first (ties by run id, descending). A run whose `manifest.json`
    /// cannot be read or parsed is listed as [`RunStatus::Unreadable`] with the reason;
    /// a run directory without any manifest is listed as [`RunStatus::Queued`] when it
    /// holds `queued.json`, else it is the leftover of a set-up that never finished and
    /// is not listed.
    pub fn list(&mut self) -> Result<Vec<RunRecord>, RunIndexError> {
        let mut records = self.read(|index, unreadable| {
            let mut records = index.query(
                &format!("SELECT {COLUMNS} FROM runs ORDER BY started_at DESC, run_id DESC"),
                &[],
            )?;
            records.extend(unreadable.iter().cloned());
            Ok(records)
        })?;
        for record in &mut records {
            // A queued run has no manifest yet (`queued.json` stands in for it).
            if matches!(record.status, RunStatus::Unreadable | RunStatus::Queued) {
                continue;
            }
            if let Err(error) = read_manifest(&record.run_dir) {
                record.status = RunStatus::Unreadable;
                record.finished_at = None;
                record.reason = Some(crate::error_chain(&error));
            }
        }
        records.sort_by(|a, b| (&b.started_at, &b.run_id).cmp(&(&a.started_at, &a.run_id)));
        Ok(records)
    }

    /// The run named by a `RUN` argument: a full run id, or a prefix of at least
    /// [`MIN_PREFIX_LEN`] characters that only one run id starts with (SPEC 12.1).
    pub fn resolve(&mut self, run: &str) -> Result<RunRecord, RunIndexError> {
        self.read(
            |index, unreadable| match unreadable.iter().find(|record| record.run_id == run) {
                Some(record) => Ok(record.clone()),
                None => index.find(run),
            },
        )
    }

    /// Runs `query` after syncing the table with the run directories. When SQLite finds
    /// the file damaged, the database is replaced, rebuilt and `query` runs once more.
    /// `query` also gets the runs that cannot be indexed because their manifest is
    /// unreadable.
    fn read<T>(
        &mut self,
        query: impl Fn(&RunIndex, &[RunRecord]) -> Result<T, RunIndexError>,
    ) -> Result<T, RunIndexError> {
        let attempt = |index: &RunIndex| {
            let unreadable = index.sync_with_run_dirs()?;
            query(index, &unreadable)
        };
        match attempt(self) {
            Err(RunIndexError::Database { source, .. }) if is_corruption(&source) => {
                tracing::warn!(path = %self.path.display(), error = %source, "run index is corrupt; rebuilding it");
                self.replace_database()?;
                attempt(self)
            }
            result => result,
        }
    }

    /// Closes, deletes and recreates `runs.db`, empty.
    fn replace_database(&mut self) -> Result<(), RunIndexError> {
        let closed = Connection::open_in_memory().map_err(|source| self.database_error(source))?;
        drop(std::mem::replace(&mut self.connection, closed));
        remove_database(&self.path)?;
        self.connection =
            connect(&self.path).map_err(|error| error.into_index_error(&self.path))?;
        Ok(())
    }

    fn find(&self, run: &str) -> Result<RunRecord, RunIndexError> {
        let exact = self.query(
            &format!("SELECT {COLUMNS} FROM runs WHERE run_id = ?1"),
            &[&run],
        )?;
        if let Some(record) = exact.into_iter().next() {
            return Ok(record);
        }
        if run.chars().count() < MIN_PREFIX_LEN {
            return Err(RunIndexError::PrefixTooShort {
                run: run.to_owned(),
            });
        }
        let mut matches = self.query(
            &format!(
                "SELECT {COLUMNS} FROM runs WHERE substr(run_id, 1, length(?1)) = ?1 ORDER BY run_id"
            ),
            &[&run],
        )?;
        match matches.len() {
            0 => Err(RunIndexError::UnknownRun {
                run: run.to_owned(),
            }),
            1 => Ok(matches.remove(0)),
            _ => Err(RunIndexError::AmbiguousRun {
                run: run.to_owned(),
                candidates: matches.into_iter().map(|record| record.run_id).collect(),
            }),
        }
    }

    /// Adds the runs under `{root}/scratch` that the table lacks and drops rows whose
    /// run directory is gone. This is the rebuild of SPEC 11.4: after a missing or
    /// corrupt database every run is missing, and all are added back. Returns the run
    /// directories not in the table whose manifest exists but cannot be read.
    fn sync_with_run_dirs(&self) -> Result<Vec<RunRecord>, RunIndexError> {
        let mut known: HashMap<String, PathBuf> = HashMap::new();
        {
            let mut statement = self
                .connection
                .prepare("SELECT run_id, run_dir FROM runs")
                .map_err(|source| self.database_error(source))?;
            let rows = statement
                .query_map([], |row| {
                    Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
                })
                .map_err(|source| self.database_error(source))?;
            for row in rows {
                let (run_id, run_dir) = row.map_err(|source| self.database_error(source))?;
                known.insert(run_id, PathBuf::from(run_dir));
            }
        }
        let gone: Vec<&String> = known
            .iter()
            .filter(|(_, run_dir)| !run_dir.is_dir())
            .map(|(run_id, _)| run_id)
            .collect();
        let (missing, unreadable) = self.unindexed_runs(&known)?;
        if gone.is_empty() && missing.is_empty() {
            return Ok(unreadable);
        }
        let transaction = self
            .connection
            .unchecked_transaction()
            .map_err(|source| self.database_error(source))?;
        for run_id in gone {
            transaction
                .execute("DELETE FROM runs WHERE run_id = ?1", params![run_id])
                .map_err(|source| self.database_error(source))?;
        }
        for record in missing {
            // OR IGNORE: a run starting right now may have inserted its own row since.
            transaction
                .execute(
                    &format!("INSERT OR IGNORE INTO runs({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"),
                    params![
                        record.run_id,
                        record.workflow_name,
                        record.workflow_path,
                        record.goal,
                        record.status.as_str(),
                        record.started_at,
                        record.finished_at,
                        record.run_dir.to_string_lossy(),
                        record.parent_run_id,
                    ],
                )
                .map_err(|source| self.database_error(source))?;
        }
        transaction
            .commit()
            .map_err(|source| self.database_error(source))?;
        Ok(unreadable)
    }

    /// Records for the run directories under `{root}/scratch` not in `known`, read from
    /// their manifests and checkpoints (or `queued.json` for a queued run), and (second)
    /// those whose manifest exists but cannot be read, as [`RunStatus::Unreadable`].
    /// Other directories without a manifest are skipped: they are what a set-up killed
    /// before INITIALIZE finished leaves.
    fn unindexed_runs(
        &self,
        known: &HashMap<String, PathBuf>,
    ) -> Result<(Vec<RunRecord>, Vec<RunRecord>), RunIndexError> {
        let scratch = crate::run_dir::scratch_dir(&self.root);
        let entries = match fs_err::read_dir(&scratch) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Ok((Vec::new(), Vec::new()))
            }
            Err(source) => {
                return Err(RunIndexError::Io {
                    action: "cannot list",
                    path: scratch,
                    source,
                })
            }
        };
        let mut records = Vec::new();
        let mut unreadable = Vec::new();
        for entry in entries.flatten() {
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if known.contains_key(&name) || !entry.path().is_dir() {
                continue;
            }
            let paths = RunPaths::new(&self.root, &name);
            match read_manifest(paths.run_dir()) {
                Ok(manifest) => records.push(record_from_run_dir(&manifest, paths.run_dir())),
                Err(RunIndexError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    if let Some(waiting) = read_queued(paths.run_dir()) {
                        records.push(queued::queued_record(&waiting, paths.run_dir()));
                        continue;
                    }
                    tracing::debug!(run_dir = %paths.run_dir().display(), "not listing a run directory without a manifest");
                }
                Err(error) => unreadable.push(unreadable_record(&name, paths.run_dir(), &error)),
            }
        }
        Ok((records, unreadable))
    }

    fn query(
        &self,
        sql: &str,
        parameters: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<RunRecord>, RunIndexError> {
        Ok(self
            .query_rows(sql, parameters)?
            .into_iter()
            .map(StoredRow::into_record)
            .collect())
    }

    /// Every row as stored, after syncing the table with the run directories, and the
    /// runs that cannot be indexed because their manifest is unreadable.
    fn stored_rows(&mut self) -> Result<(Vec<StoredRow>, Vec<RunRecord>), RunIndexError> {
        self.read(|index, unreadable| {
            let rows = index.query_rows(&format!("SELECT {COLUMNS} FROM runs"), &[])?;
            Ok((rows, unreadable.to_vec()))
        })
    }

    /// SQLite's `PRAGMA data_version`: it changes when another connection (of any
    /// process) commits a change to `runs.db`.
    fn data_version(&self) -> Result<i64, RunIndexError> {
        self.connection
            .prepare_cached("PRAGMA data_version")
            .and_then(|mut statement| statement.query_row([], |row| row.get(0)))
            .map_err(|source| self.database_error(source))
    }

    fn query_rows(
        &self,
        sql: &str,
        parameters: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<StoredRow>, RunIndexError> {
        let mut statement = self
            .connection
            .prepare(sql)
            .map_err(|source| self.database_error(source))?;
        let rows = statement
            .query_map(parameters, |row| {
                Ok(StoredRow {
                    run_id: row.get(0)?,
                    workflow_name: row.get(1)?,
                    workflow_path: row.get(2)?,
                    goal: row.get(3)?,
                    status: row.get(4)?,
                    started_at: row.get(5)?,
                    finished_at: row.get(6)?,
                    run_dir: row.get(7)?,
                    parent_run_id: row.get(8)?,
                })
            })
            .map_err(|source| self.database_error(source))?;
        rows.map(|row| row.map_err(|source| self.database_error(source)))
            .collect()
    }

    fn database_error(&self, source: rusqlite::Error) -> RunIndexError {
        RunIndexError::Database {
            path: self.path.clone(),
            source,
        }
    }
}

/// Reads `{run_dir}/manifest.json`.
pub fn read_manifest(run_dir: &Path) -> Result<Manifest, RunIndexError> {
    let path = run_dir.join(crate::run_dir::MANIFEST_FILE);
    let text = fs_err::read_to_string(&path).map_err(|source| RunIndexError::Io {
        action: "cannot read",
        path: path.clone(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|error| RunIndexError::Io {
        action: "cannot parse",
        path,
        source: std::io::Error::from(error),
    })
}

fn list_candidates(candidates: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut text = candidates
        .iter()
        .take(SHOWN)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if candidates.len() > SHOWN {
        text.push_str(&format!(" and {} more", candidates.len() - SHOWN));
    }
    text
}

/// A row as stored, before its status is checked against the run directory.
struct StoredRow {
    run_id: String,
    workflow_name: String,
    workflow_path: String,
    goal: String,
    status: String,
    started_at: String,
    finished_at: Option<String>,
    run_dir: String,
    parent_run_id: Option<String>,
}

impl StoredRow {
    fn into_record(self) -> RunRecord {
        let run_dir = PathBuf::from(self.run_dir);
        let (status, finished_at) =
            effective_status(RunStatus::parse(&self.status), self.finished_at, &run_dir);
        RunRecord {
            run_id: self.run_id,
            workflow_name: self.workflow_name,
            workflow_path: self.workflow_path,
            goal: self.goal,
            status,
            started_at: self.started_at,
            finished_at,
            run_dir,
            parent_run_id: self.parent_run_id,
            reason: None,
            worker: None,
        }
    }
}

/// The fields of `checkpoint.json` the index reads; the rest of the format is ignored.
#[derive(Deserialize)]
struct CheckpointStatus {
    run_status: String,
    timestamp: String,
}

fn read_checkpoint_status(run_dir: &Path) -> Option<CheckpointStatus> {
    let text = fs_err::read_to_string(run_dir.join(crate::run_dir::CHECKPOINT_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

/// A finished status stands. Otherwise the run counts as running only while its lock
/// is held; a checkpoint that says the run ended wins over a stale `running` row (the
/// process died between its final checkpoint and its index update).
fn effective_status(
    stored: Option<RunStatus>,
    finished_at: Option<String>,
    run_dir: &Path,
) -> (RunStatus, Option<String>) {
    effective_status_with(stored, finished_at, run_dir, RunLock::is_held)
}

/// [`effective_status`] with the lock test as a parameter, so tests can finish the run
/// between the reads. A run writes its final checkpoint, then lets its lock go: one
/// that does both between the first read of the checkpoint and the lock test would
/// read `interrupted` for an instant, so a free lock sends the reader back to the
/// checkpoint once more (SPEC decision 66).
fn effective_status_with(
    stored: Option<RunStatus>,
    finished_at: Option<String>,
    run_dir: &Path,
    lock_is_held: impl FnOnce(&Path) -> bool,
) -> (RunStatus, Option<String>) {
    if let Some(status) = stored.filter(|status| status.is_finished()) {
        if status != RunStatus::Interrupted {
            return (status, finished_at);
        }
    }
    if stored == Some(RunStatus::Queued) && read_queued(run_dir).is_some() {
        return (RunStatus::Queued, None);
    }
    let finished_checkpoint = |finished_at: Option<String>| {
        let checkpoint = read_checkpoint_status(run_dir)?;
        let status = RunStatus::parse(&checkpoint.run_status)?;
        status
            .is_finished()
            .then(|| (status, finished_at.or(Some(checkpoint.timestamp))))
    };
    if let Some(finished) = finished_checkpoint(finished_at.clone()) {
        return finished;
    }
    if lock_is_held(run_dir) {
        return (RunStatus::Running, None);
    }
    finished_checkpoint(finished_at.clone()).unwrap_or((RunStatus::Interrupted, finished_at))
}

/// A run whose manifest cannot be read: its id is its directory's name, its start time
/// the manifest file's modification time.
fn unreadable_record(run_id: &str, run_dir: &Path, error: &RunIndexError) -> RunRecord {
    let started_at = fs_err::metadata(run_dir.join(crate::run_dir::MANIFEST_FILE))
        .and_then(|metadata| metadata.modified())
        .map(crate::timestamp::format_rfc3339)
        .unwrap_or_default();
    RunRecord {
        run_id: run_id.to_owned(),
        workflow_name: String::new(),
        workflow_path: String::new(),
        goal: String::new(),
        status: RunStatus::Unreadable,
        started_at,
        finished_at: None,
        run_dir: run_dir.to_path_buf(),
        parent_run_id: None,
        reason: Some(crate::error_chain(error)),
        worker: None,
    }
}

fn record_from_run_dir(manifest: &Manifest, run_dir: &Path) -> RunRecord {
    let checkpoint = read_checkpoint_status(run_dir);
    let status = checkpoint
        .as_ref()
        .and_then(|checkpoint| RunStatus::parse(&checkpoint.run_status))
        .unwrap_or(RunStatus::Running);
    let finished_at = checkpoint
        .filter(|_| status.is_finished())
        .map(|checkpoint| checkpoint.timestamp);
    RunRecord {
        run_id: manifest.run_id.clone(),
        workflow_name: manifest.workflow_name.clone(),
        workflow_path: manifest.workflow_path.clone(),
        goal: manifest.goal.clone(),
        status,
        started_at: manifest.started_at.clone(),
        finished_at,
        run_dir: run_dir.to_path_buf(),
        parent_run_id: manifest.parent_run_id.clone(),
        reason: None,
        worker: None,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::run_dir::write_json_atomic;

    /// SPEC "Open questions decided" 1: statuses are read in any case, with the
    /// aliases of the canonical names.
    #[test]
    fn run_statuses_are_read_in_any_case_and_with_aliases() {
        for (text, status) in [
            ("success", RunStatus::Success),
            ("SUCCESS", RunStatus::Success),
            ("Succeeded", RunStatus::Success),
            ("partially_succeeded", RunStatus::PartialSuccess),
            ("Partial_Success", RunStatus::PartialSuccess),
            ("fail", RunStatus::Fail),
            ("FAILED", RunStatus::Fail),
            ("failure", RunStatus::Fail),
            ("error", RunStatus::Fail),
            ("Cancelled", RunStatus::Canceled),
            ("RUNNING", RunStatus::Running),
        ] {
            assert_eq!(RunStatus::parse(text), Some(status), "{text}");
        }
        assert_eq!(RunStatus::parse("skipped"), None);
        assert_eq!(RunStatus::parse("retry"), None);
        assert_eq!(RunStatus::parse("nonsense"), None);
    }

    #[test]
    fn run_statuses_serialise_as_their_names() {
        for status in [
            RunStatus::Running,
            RunStatus::Success,
            RunStatus::PartialSuccess,
            RunStatus::Fail,
            RunStatus::Canceled,
        ] {
            let json = serde_json::to_string(&status).expect("serialises");
            assert_eq!(json, format!("\"{}\"", status.as_str()));
            assert_eq!(
                serde_json::from_str::<RunStatus>(&json).expect("reads back"),
                status
            );
        }
        assert!(serde_json::from_str::<RunStatus>("\"skipped\"").is_err());
    }

    pub(super) fn manifest(run_id: &str, started_at: &str) -> Manifest {
        Manifest {
            run_id: run_id.to_owned(),
            workflow_name: "w".to_owned(),
            workflow_path: "w.fabro".to_owned(),
            goal: "g".to_owned(),
            node_count: 2,
            edge_count: 1,
            base_sha: None,
            run_branch: None,
            started_at: started_at.to_owned(),
            fabro_version: "0".to_owned(),
            dry_run: false,
            parent_run_id: None,
            vars: BTreeMap::new(),
            simulated_llm: false,
            origin: None,
            forked_from: None,
            repository_url: None,
            repo_root: None,
            work_dir_relative: None,
        }
    }

    /// Writes a run directory with a manifest and, when given, a checkpoint status.
    pub(super) fn write_run(
        root: &Path,
        run_id: &str,
        started_at: &str,
        status: Option<&str>,
    ) -> PathBuf {
        let run_dir = RunPaths::new(root, run_id).run_dir().to_path_buf();
        fs_err::create_dir_all(&run_dir).expect("tempdir is writable");
        write_json_atomic(
            &run_dir.join("manifest.json"),
            &manifest(run_id, started_at),
        )
        .expect("writes");
        if let Some(status) = status {
            write_json_atomic(
                &run_dir.join("checkpoint.json"),
                &serde_json::json!({"run_status": status, "timestamp": "2026-01-01T00:01:00.000Z", "version": 1}),
            )
            .expect("writes");
        }
        run_dir
    }

    fn ids_and_statuses(index: &mut RunIndex) -> Vec<(String, RunStatus)> {
        index
            .list()
            .expect("lists")
            .into_iter()
            .map(|record| (record.run_id, record.status))
            .collect()
    }

    #[test]
    fn missing_or_corrupt_databases_are_rebuilt_from_run_directories() {
        let root = tempfile::tempdir().expect("tempdir");
        let root = root.path();
        write_run(root, "old", "2026-01-01T00:00:00.000Z", Some("success"));
        write_run(root, "new", "2026-01-02T00:00:00.000Z", Some("fail"));
        fs_err::create_dir_all(root.join("scratch/no-manifest")).expect("writes");
        let expected = vec![
            ("new".to_owned(), RunStatus::Fail),
            ("old".to_owned(), RunStatus::Success),
        ];

        let mut index = RunIndex::open(root).expect("opens");
        assert_eq!(ids_and_statuses(&mut index), expected);
        let old = index.resolve("old").expect("indexed");
        assert_eq!(old.finished_at.as_deref(), Some("2026-01-01T00:01:00.000Z"));
        assert_eq!(old.run_dir, root.join("scratch/old"));
        drop(index);

        fs_err::write(
            root.join("runs.db"),
            b"this is not a database at all, not even close",
        )
        .expect("writes");
        let mut index = RunIndex::open(root).expect("replaces the corrupt file");
        assert_eq!(ids_and_statuses(&mut index), expected);
        drop(index);

        // A table with other columns is as unusable as garbage.
        fs_err::remove_file(root.join("runs.db")).expect("removes");
        Connection::open(root.join("runs.db"))
            .and_then(|connection| connection.execute_batch("CREATE TABLE runs(id TEXT)"))
            .expect("creates");
        let mut index = RunIndex::open(root).expect("replaces the foreign table");
        assert_eq!(ids_and_statuses(&mut index), expected);

        // Rows whose run directory was deleted disappear.
        fs_err::remove_dir_all(root.join("scratch/new")).expect("removes");
        assert_eq!(
            ids_and_statuses(&mut index),
            [("old".to_owned(), RunStatus::Success)]
        );
    }

    #[test]
    fn damage_found_on_read_rebuilds_the_database() {
        let root = tempfile::tempdir().expect("tempdir");
        let root = root.path();
        let ids: Vec<String> = (0..200).map(|number| format!("run-{number:03}")).collect();
        for run_id in &ids {
            write_run(root, run_id, "2026-01-01T00:00:00.000Z", Some("success"));
        }
        let mut index = RunIndex::open(root).expect("opens");
        assert_eq!(index.list().expect("lists").len(), ids.len());
        drop(index);
        // The schema lives on the first page, so the file still opens; the rows do not.
        let mut bytes = fs_err::read(root.join("runs.db")).expect("reads");
        assert!(bytes.len() > 8192, "the table spans several pages");
        for byte in &mut bytes[4096..] {
            *byte = 0xAB;
        }
        fs_err::write(root.join("runs.db"), bytes).expect("writes");
        let mut index = RunIndex::open(root).expect("opens: the first page is intact");
        let listed: Vec<String> = index
            .list()
            .expect("rebuilt")
            .into_iter()
            .map(|record| record.run_id)
            .collect();
        let mut expected = ids;
        expected.reverse();
        assert_eq!(listed, expected);
        assert_eq!(index.resolve("run-042").expect("found").run_id, "run-042");
    }

    #[test]
    fn run_arguments_resolve_full_ids_and_unique_prefixes() {
        let root = tempfile::tempdir().expect("tempdir");
        let root = root.path();
        for run_id in ["r1", "abcd-1", "abcd-2", "abcdef", "a_cd"] {
            write_run(root, run_id, "2026-01-01T00:00:00.000Z", Some("success"));
        }
        let mut index = RunIndex::open(root).expect("opens");
        let mut check = |run: &str, expected: Result<&str, RunIndexErrorKind>| {
            let actual = index
                .resolve(run)
                .map(|record| record.run_id)
                .map_err(|error| error.kind());
            assert_eq!(actual, expected.map(str::to_owned), "{run}");
        };
        check("r1", Ok("r1"));
        check("abcdef", Ok("abcdef"));
        check("abcde", Ok("abcdef"));
        check("abcd-", Err(RunIndexErrorKind::NoSuchRun));
        check("zzzz", Err(RunIndexErrorKind::NoSuchRun));
        check("abc", Err(RunIndexErrorKind::NoSuchRun));
        // `_` is a literal, not a LIKE wildcard.
        check("abcd-1", Ok("abcd-1"));
        check("a_cd", Ok("a_cd"));
        check("axcd", Err(RunIndexErrorKind::NoSuchRun));

        let mut messages = |run: &str| index.resolve(run).map(|_| ()).unwrap_err().to_string();
        assert_eq!(
            messages("abcd"),
            "ambiguous run 'abcd': it matches abcd-1, abcd-2, abcdef"
        );
        assert_eq!(messages("zzzz"), "unknown run 'zzzz'");
        assert_eq!(
            messages("abc"),
            "unknown run 'abc': a prefix needs at least 4 characters"
        );
        assert!(matches!(
            index.resolve("abcd"),
            Err(RunIndexError::AmbiguousRun { candidates, .. }) if candidates.len() == 3
        ));
    }

    /// Decision 66: a run that writes its final checkpoint and lets its lock go between
    /// the reader's first look at the checkpoint and its lock test is reported with its
    /// final status, never `interrupted`. The lock test itself finishes the run here, so
    /// the interleaving happens every time.
    #[test]
    fn a_run_finishing_between_the_checkpoint_read_and_the_lock_test_is_not_interrupted() {
        let root = tempfile::tempdir().expect("tempdir");
        let run_dir = write_run(
            root.path(),
            "ending",
            "2026-01-01T00:00:00.000Z",
            Some("running"),
        );
        let finish_then_release = |run_dir: &Path| {
            write_json_atomic(
                &run_dir.join("checkpoint.json"),
                &serde_json::json!({"run_status": "canceled", "timestamp": "2026-01-01T00:02:00.000Z"}),
            )
            .expect("writes the final checkpoint");
            false
        };
        let (status, finished_at) = effective_status_with(
            Some(RunStatus::Running),
            None,
            &run_dir,
            finish_then_release,
        );
        assert_eq!(status, RunStatus::Canceled);
        assert_eq!(finished_at.as_deref(), Some("2026-01-01T00:02:00.000Z"));

        // A run that is truly gone without a final checkpoint is still interrupted.
        let gone = write_run(
            root.path(),
            "gone",
            "2026-01-01T00:00:00.000Z",
            Some("running"),
        );
        let (status, _) = effective_status_with(Some(RunStatus::Running), None, &gone, |_| false);
        assert_eq!(status, RunStatus::Interrupted);
    }

    #[test]
    fn running_runs_without_a_lock_holder_are_interrupted() {
        let root = tempfile::tempdir().expect("tempdir");
        let root = root.path();
        let run_dir = write_run(root, "live", "2026-01-01T00:00:00.000Z", Some("running"));
        let mut index = RunIndex::open(root).expect("opens");
        index
            .record_start(&manifest("live", "2026-01-01T00:00:00.000Z"), &run_dir)
            .expect("records");
        let mut status = || index.resolve("live").expect("indexed").status;
        assert_eq!(status(), RunStatus::Interrupted);

        let lock = RunLock::acquire(&run_dir).expect("locks");
        assert!(RunLock::is_held(&run_dir));
        assert_eq!(lock_pid(&run_dir), Some(std::process::id()));
        assert_eq!(status(), RunStatus::Running);
        assert!(matches!(
            RunLock::acquire(&run_dir),
            Err(RunIndexError::Locked { .. })
        ));
        drop(lock);
        assert!(lock::released_soon(&run_dir));
        assert_eq!(status(), RunStatus::Interrupted);

        // A process that died after its final checkpoint still ended the run.
        write_json_atomic(
            &run_dir.join("checkpoint.json"),
            &serde_json::json!({"run_status": "canceled", "timestamp": "2026-01-01T00:02:00.000Z"}),
        )
        .expect("writes");
        let record = index.resolve("live").expect("indexed");
        assert_eq!(record.status, RunStatus::Canceled);
        assert_eq!(
            record.finished_at.as_deref(),
            Some("2026-01-01T00:02:00.000Z")
        );

        index
            .record_status("live", RunStatus::Success, Some("2026-01-01T00:03:00.000Z"))
            .expect("records");
        let record = index.resolve("live").expect("indexed");
        assert_eq!(record.status, RunStatus::Success);
        assert_eq!(
            record.duration(SystemTime::now()),
            Some(Duration::from_secs(180))
        );
        assert_eq!(
            index
                .record_status("ghost", RunStatus::Fail, None)
                .map_err(|error| error.kind()),
            Err(RunIndexErrorKind::NoSuchRun)
        );
    }
}
