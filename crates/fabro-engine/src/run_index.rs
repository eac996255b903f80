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
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fabro_language::StageStatus;
use rusqlite::{params, Connection};
use serde::{Deserialize, Serialize};

use crate::record::Manifest;
use crate::run_dir::RunPaths;

/// The shortest run-id prefix a `RUN` argument may use (SPEC 12.1).
pub const MIN_PREFIX_LEN: usize = 4;

/// The run index of one storage root.
pub struct RunIndex {
    root: PathBuf,
    path: PathBuf,
    connection: Connection,
}

/// The status of a run as the index reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    /// A process is executing the run (it holds the run lock).
    Running,
    /// Reached exit with every goal met.
    Success,
    /// Reached exit with failures routed around (SPEC 4.7).
    PartialSuccess,
    /// Failed.
    Fail,
    /// Cancelled by the user or the stall watchdog.
    Canceled,
    /// Recorded as running, but no process holds its lock: it died mid-run.
    Interrupted,
    /// Its `manifest.json` cannot be read or parsed ([`RunRecord::reason`] says why).
    Unreadable,
}

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

/// The advisory lock of a run being executed; released when dropped (or when the
/// process dies, which is what makes interrupted runs detectable).
#[derive(Debug)]
pub struct RunLock {
    // Held for its lock; closing the descriptor releases it.
    _file: std::fs::File,
}

impl RunStatus {
    /// The word stored in the index and printed by the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Success => "success",
            RunStatus::PartialSuccess => "partial_success",
            RunStatus::Fail => "fail",
            RunStatus::Canceled => "canceled",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Unreadable => "unreadable",
        }
    }

    /// Parses a stored status (`checkpoint.json` `run_status`, the index column), in
    /// any case; the stage-status aliases (`succeeded`, `failed`, …) are accepted for
    /// the statuses they name (SPEC "Open questions decided" 1).
    pub fn parse(text: &str) -> Option<RunStatus> {
        const WORDS: [(&str, RunStatus); 5] = [
            ("running", RunStatus::Running),
            ("canceled", RunStatus::Canceled),
            ("cancelled", RunStatus::Canceled),
            ("interrupted", RunStatus::Interrupted),
            ("unreadable", RunStatus::Unreadable),
        ];
        if let Some(&(_, status)) = WORDS
            .iter()
            .find(|(word, _)| word.eq_ignore_ascii_case(text))
        {
            return Some(status);
        }
        match StageStatus::parse(text)? {
            StageStatus::Success => Some(RunStatus::Success),
            StageStatus::PartialSuccess => Some(RunStatus::PartialSuccess),
            StageStatus::Fail => Some(RunStatus::Fail),
            StageStatus::Skipped | StageStatus::Retry => None,
        }
    }

    /// The run status of a run that reached exit with `status`.
    pub fn completed(status: StageStatus) -> RunStatus {
        match status {
            StageStatus::Success => RunStatus::Success,
            StageStatus::PartialSuccess => RunStatus::PartialSuccess,
            StageStatus::Fail | StageStatus::Skipped | StageStatus::Retry => RunStatus::Fail,
        }
    }

    /// Whether the run ended (every status but `running`).
    pub fn is_finished(self) -> bool {
        match self {
            RunStatus::Running => false,
            RunStatus::Success
            | RunStatus::PartialSuccess
            | RunStatus::Fail
            | RunStatus::Canceled
            | RunStatus::Interrupted
            | RunStatus::Unreadable => true,
        }
    }
}

/// Written as [`RunStatus::as_str`].
impl Serialize for RunStatus {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// Read through [`RunStatus::parse`].
impl<'de> Deserialize<'de> for RunStatus {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<RunStatus, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(deserializer)?;
        RunStatus::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown run status '{text}'")))
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
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

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS runs(
    run_id TEXT PRIMARY KEY NOT NULL,
    workflow_name TEXT NOT NULL,
    workflow_path TEXT NOT NULL,
    goal TEXT NOT NULL,
    status TEXT NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    run_dir TEXT NOT NULL,
    parent_run_id TEXT
)";

/// Created after the columns are checked, so a foreign `runs` table reads as corrupt.
const SCHEMA_INDEX: &str = "CREATE INDEX IF NOT EXISTS runs_started_at ON runs(started_at)";

/// Per-connection settings: see [`connect`].
const DURABILITY: &str = "PRAGMA journal_mode=PERSIST; PRAGMA synchronous=OFF;";

/// How long a writer waits for another process's transaction on `runs.db`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

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
        let path = root.join("runs.db");
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
    /// a run directory without any manifest is the leftover of a set-up that never
    /// finished and is not listed.
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
            if record.status == RunStatus::Unreadable {
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
    /// their manifests and checkpoints, and (second) those whose manifest exists but
    /// cannot be read, as [`RunStatus::Unreadable`]. Directories without a manifest are
    /// skipped: they are what a set-up killed before INITIALIZE finished leaves.
    fn unindexed_runs(
        &self,
        known: &HashMap<String, PathBuf>,
    ) -> Result<(Vec<RunRecord>, Vec<RunRecord>), RunIndexError> {
        let scratch = self.root.join("scratch");
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
        let mut records = Vec::new();
        for row in rows {
            let row = row.map_err(|source| self.database_error(source))?;
            records.push(row.into_record());
        }
        Ok(records)
    }

    fn database_error(&self, source: rusqlite::Error) -> RunIndexError {
        RunIndexError::Database {
            path: self.path.clone(),
            source,
        }
    }
}

impl RunLock {
    /// Takes the lock of the run in `run_dir` and writes this process's pid into
    /// `run.lock`, without waiting for another holder: [`RunIndexError::Locked`] at once
    /// when a live process holds it. Two kinds of holder are waited out (for at most
    /// [`LOCK_PATIENCE`]): readers testing the lock for an instant ([`RunLock::is_held`]),
    /// and a holder whose recorded pid is dead (a child forked by a killed run keeps the
    /// descriptor until it execs).
    pub fn acquire(run_dir: &Path) -> Result<RunLock, RunIndexError> {
        let path = lock_path(run_dir);
        let io = |action: &'static str| {
            let path = path.clone();
            move |source| RunIndexError::Io {
                action,
                path,
                source,
            }
        };
        let mut file = fs_err::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io("cannot open"))?;
        let started = std::time::Instant::now();
        loop {
            match file.file().try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) => {
                    // An exclusive holder makes the shared test fail too; readers do not.
                    let pid = lock_pid(run_dir);
                    let live_holder =
                        RunLock::is_held(run_dir) && pid.is_some_and(process_is_alive);
                    if live_holder || started.elapsed() >= LOCK_PATIENCE {
                        return Err(RunIndexError::Locked { path, pid });
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(std::fs::TryLockError::Error(source)) => {
                    return Err(io("cannot lock")(source));
                }
            }
        }
        file.set_len(0).map_err(io("cannot write"))?;
        writeln!(file, "{}", std::process::id()).map_err(io("cannot write"))?;
        file.flush().map_err(io("cannot write"))?;
        Ok(RunLock {
            _file: file.into_parts().0,
        })
    }

    /// Whether some process holds the lock of the run in `run_dir`. Where the file
    /// system cannot lock, the pid written in `run.lock` is checked instead.
    pub fn is_held(run_dir: &Path) -> bool {
        let path = lock_path(run_dir);
        let Ok(file) = fs_err::File::open(&path) else {
            return false;
        };
        match file.file().try_lock_shared() {
            // Dropping `file` releases the shared lock at once.
            Ok(()) => false,
            Err(std::fs::TryLockError::WouldBlock) => true,
            Err(std::fs::TryLockError::Error(error)) => {
                tracing::debug!(path = %path.display(), %error, "cannot test run lock; checking its pid");
                lock_pid(run_dir).is_some_and(process_is_alive)
            }
        }
    }
}

/// How long [`RunLock::acquire`] waits out readers and the children of dead holders.
pub const LOCK_PATIENCE: Duration = Duration::from_secs(2);

/// The pid written in `{run_dir}/run.lock` by the last process that executed the run.
pub fn lock_pid(run_dir: &Path) -> Option<u32> {
    fs_err::read_to_string(lock_path(run_dir))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Reads `{run_dir}/manifest.json`.
pub fn read_manifest(run_dir: &Path) -> Result<Manifest, RunIndexError> {
    let path = run_dir.join("manifest.json");
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

/// Records the start in the index (the caller holds the run lock). Failures are logged
/// and never stop the run (SPEC 11.4): the next read of the index finds the run anyway.
pub(crate) fn register_start(paths: &RunPaths, manifest: &Manifest) {
    if let Err(error) =
        RunIndex::open(paths.root()).and_then(|index| index.record_start(manifest, paths.run_dir()))
    {
        tracing::warn!(error = %crate::error_chain(&error), "cannot record the run in the run index");
    }
}

/// Records the final status in the index, then releases the run lock, in that order so
/// readers never see a running status without a lock holder. Failures are logged only.
pub(crate) fn register_end(
    paths: &RunPaths,
    run_id: &str,
    status: RunStatus,
    lock: Option<RunLock>,
) {
    let finished_at = crate::timestamp::now_rfc3339();
    if let Err(error) = RunIndex::open(paths.root())
        .and_then(|index| index.record_status(run_id, status, Some(&finished_at)))
    {
        tracing::warn!(error = %crate::error_chain(&error), "cannot record the run status in the run index");
    }
    drop(lock);
}

fn lock_path(run_dir: &Path) -> PathBuf {
    run_dir.join("run.lock")
}

fn process_is_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) => true,
        Err(errno) => errno == nix::errno::Errno::EPERM,
    }
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
    let text = fs_err::read_to_string(run_dir.join("checkpoint.json")).ok()?;
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
    if let Some(status) = stored.filter(|status| status.is_finished()) {
        if status != RunStatus::Interrupted {
            return (status, finished_at);
        }
    }
    if let Some(checkpoint) = read_checkpoint_status(run_dir) {
        if let Some(status) = RunStatus::parse(&checkpoint.run_status) {
            if status.is_finished() {
                return (status, finished_at.or(Some(checkpoint.timestamp)));
            }
        }
    }
    if RunLock::is_held(run_dir) {
        (RunStatus::Running, None)
    } else {
        (RunStatus::Interrupted, finished_at)
    }
}

/// A run whose manifest cannot be read: its id is its directory's name, its start time
/// the manifest file's modification time.
fn unreadable_record(run_id: &str, run_dir: &Path, error: &RunIndexError) -> RunRecord {
    let started_at = fs_err::metadata(run_dir.join("manifest.json"))
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
    }
}

enum ConnectError {
    Corrupt(String),
    Sqlite(rusqlite::Error),
}

impl ConnectError {
    fn into_index_error(self, path: &Path) -> RunIndexError {
        match self {
            ConnectError::Corrupt(reason) => RunIndexError::Corrupt {
                path: path.to_path_buf(),
                reason,
            },
            ConnectError::Sqlite(source) => RunIndexError::Database {
                path: path.to_path_buf(),
                source,
            },
        }
    }
}

fn connect(path: &Path) -> Result<Connection, ConnectError> {
    let classify = |error: rusqlite::Error| {
        if is_corruption(&error) {
            ConnectError::Corrupt(error.to_string())
        } else {
            ConnectError::Sqlite(error)
        }
    };
    let connection = Connection::open(path).map_err(classify)?;
    connection.busy_timeout(BUSY_TIMEOUT).map_err(classify)?;
    // The index is a cache that the next read rebuilds from the run directories, so it
    // needs no syncs (three fsyncs and a directory sync per write cost about 5 ms on a
    // run's start and end), and a kept rollback journal spares creating and deleting one
    // file per transaction.
    connection.execute_batch(DURABILITY).map_err(classify)?;
    connection.execute_batch(SCHEMA).map_err(classify)?;
    let columns = {
        let mut statement = connection
            .prepare("SELECT name FROM pragma_table_info('runs') ORDER BY cid")
            .map_err(classify)?;
        let names = statement
            .query_map([], |row| row.get::<_, String>(0))
            .map_err(classify)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(classify)?;
        names.join(", ")
    };
    if columns != COLUMNS {
        return Err(ConnectError::Corrupt(format!(
            "table runs has columns ({columns})"
        )));
    }
    connection.execute_batch(SCHEMA_INDEX).map_err(classify)?;
    // No integrity check here: it reads the whole file on every open. Damage deeper in
    // the file surfaces as `DatabaseCorrupt` on a read, which `RunIndex::read` repairs.
    Ok(connection)
}

/// Whether SQLite says the file is not (or no longer) a sound database.
fn is_corruption(error: &rusqlite::Error) -> bool {
    matches!(
        error,
        rusqlite::Error::SqliteFailure(failure, _)
            if matches!(
                failure.code,
                rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt
            )
    )
}

fn remove_database(path: &Path) -> Result<(), RunIndexError> {
    let mut files = vec![path.to_path_buf()];
    for suffix in ["-journal", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        files.push(PathBuf::from(name));
    }
    for file in files {
        match fs_err::remove_file(&file) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(RunIndexError::Io {
                    action: "cannot remove corrupt run index",
                    path: file,
                    source,
                })
            }
        }
    }
    Ok(())
}

/// Parses the timestamps this crate writes (`2026-05-05T09:54:22.123Z`, SPEC 11.3);
/// also accepts whole seconds. Anything else is `None`.
fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut date_parts = date.splitn(3, '-');
    let year: i64 = date_parts.next()?.parse().ok()?;
    let month: u32 = date_parts.next()?.parse().ok()?;
    let day: u32 = date_parts.next()?.parse().ok()?;
    let (clock, fraction) = match time.split_once('.') {
        Some((clock, fraction)) => (clock, fraction),
        None => (time, "0"),
    };
    let mut clock_parts = clock.splitn(3, ':');
    let hour: u64 = clock_parts.next()?.parse().ok()?;
    let minute: u64 = clock_parts.next()?.parse().ok()?;
    let second: u64 = clock_parts.next()?.parse().ok()?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 || fraction.is_empty() || !fraction.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    let millis: u64 = format!("{fraction:0<3}").get(..3)?.parse().ok()?;
    let days = u64::try_from(days_from_civil(year, month, day)).ok()?;
    let seconds = days
        .checked_mul(86_400)?
        .checked_add(hour * 3600 + minute * 60 + second)?;
    UNIX_EPOCH.checked_add(Duration::from_secs(seconds) + Duration::from_millis(millis))
}

/// (year, month, day) to days since 1970-01-01, proleptic Gregorian (Howard Hinnant's
/// algorithm, the inverse of `timestamp`'s).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month = i64::from(month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::run_dir::write_json_atomic;
    use crate::timestamp::format_rfc3339;

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

    fn manifest(run_id: &str, started_at: &str) -> Manifest {
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
            repo_root: None,
            work_dir_relative: None,
        }
    }

    /// Writes a run directory with a manifest and, when given, a checkpoint status.
    fn write_run(root: &Path, run_id: &str, started_at: &str, status: Option<&str>) -> PathBuf {
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
        assert!(!RunLock::is_held(&run_dir));
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

    #[test]
    fn timestamps_parse_back_to_the_instant_they_name() {
        let check = |text: &str, expected: Option<Duration>| {
            assert_eq!(
                parse_rfc3339(text)
                    .map(|time| time.duration_since(UNIX_EPOCH).expect("after the epoch")),
                expected,
                "{text}"
            );
        };
        check("1970-01-01T00:00:00.000Z", Some(Duration::ZERO));
        check(
            "2000-02-29T00:00:00.005Z",
            Some(Duration::from_millis(951_782_400_005)),
        );
        check(
            "2026-05-06T09:54:22.123Z",
            Some(Duration::from_millis(1_778_061_262_123)),
        );
        check(
            "2026-05-06T09:54:22Z",
            Some(Duration::from_secs(1_778_061_262)),
        );
        check(
            "2026-05-06T09:54:22.1Z",
            Some(Duration::from_millis(1_778_061_262_100)),
        );
        for bad in [
            "",
            "2026-05-06",
            "2026-13-01T00:00:00Z",
            "2026-05-06T09:54:22.xZ",
            "2026-05-06T09:54:22+01:00",
        ] {
            check(bad, None);
        }
        for seconds in [0_u64, 86_399, 951_782_400, 4_102_444_799] {
            let time = UNIX_EPOCH + Duration::from_secs(seconds) + Duration::from_millis(7);
            assert_eq!(parse_rfc3339(&format_rfc3339(time)), Some(time));
        }
    }
}
