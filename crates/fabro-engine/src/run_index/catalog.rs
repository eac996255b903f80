//! [`RunCatalog`]: the run index as a long-lived process (the server) reads it, many
//! times a second.
//!
//! [`RunIndex::list`] syncs the table with `{root}/scratch` and reads every run's
//! manifest on each call: right for a CLI command that lists once, far too slow for a
//! server answering `GET /api/v1/runs` under load. A catalog keeps one connection and a
//! snapshot of the listing, and rebuilds the snapshot (the same way `list` reads) only
//! when something it was built from changed:
//!
//! - a run directory was created or removed: the modification time of `{root}/scratch`
//!   (a time too close to the build to tell two changes apart makes the next call
//!   rebuild again, as git treats "racily clean" files);
//! - a process wrote the table (a run started or ended): the file change counter in the
//!   header of `runs.db` (SQLite's file format: incremented by every commit in rollback
//!   journal mode, documented for other processes to notice changes), read with one
//!   `pread` on a kept descriptor, or SQLite's `data_version` when the file is in WAL
//!   mode; and the inode of `runs.db` (deleted and recreated by someone else);
//! - a manifest changed (say, corrupted by hand): every [`MANIFEST_RECHECK`] one caller
//!   compares the `stat` of each run's manifest with the one the snapshot read.
//!
//! The status of a run that is not finished (running, queued, or a stale `running` row)
//! depends on its checkpoint and its lock, not on the table alone: those few runs are
//! checked on every call, exactly as [`RunIndex::list`] checks them.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use super::{
    effective_status, read_manifest, RunIndex, RunIndexError, RunRecord, RunStatus, StoredRow,
    MIN_PREFIX_LEN,
};

/// How often the manifests of a snapshot are compared with the files.
const MANIFEST_RECHECK: Duration = Duration::from_secs(1);

/// A directory modification time this close to a build may hide a later change made in
/// the same clock tick, so the snapshot is not trusted beyond the next call.
const RACY: Duration = Duration::from_millis(100);

/// The run index of one storage root, kept open, with a snapshot of its listing.
pub struct RunCatalog {
    root: PathBuf,
    state: Mutex<State>,
    /// Set when a manifest check found a change; the next call rebuilds.
    dirty: AtomicBool,
    /// When the next manifest check is due, in milliseconds since `born`.
    next_check: AtomicU64,
    manifest_recheck: Duration,
    born: Instant,
}

/// The runs of the catalog at one moment, newest first. The status of each unfinished
/// run (its checkpoint and lock) is read as [`Listing::iter`] reaches it, so a caller
/// that takes a page pays for that page only. A clone shares the snapshot.
#[derive(Clone)]
pub struct Listing {
    snapshot: Arc<Snapshot>,
}

impl Listing {
    /// The runs, newest first.
    pub fn iter(&self) -> impl Iterator<Item = Arc<RunRecord>> + '_ {
        self.snapshot.entries.iter().map(current_record)
    }

    /// Whether run `run_id` is listed.
    pub fn contains(&self, run_id: &str) -> bool {
        self.snapshot.by_id.contains_key(run_id)
    }

    /// How many runs are listed.
    pub fn len(&self) -> usize {
        self.snapshot.entries.len()
    }

    /// Whether no run is listed.
    pub fn is_empty(&self) -> bool {
        self.snapshot.entries.is_empty()
    }

    /// A listing of `records` as they are (a store that decides each status when it
    /// lists), newest first.
    pub fn of(records: Vec<RunRecord>) -> Listing {
        let mut entries: Vec<Entry> = records
            .into_iter()
            .map(|record| Entry {
                record: Arc::new(record),
                unfinished: None,
                manifest: None,
            })
            .collect();
        entries.sort_by(|a, b| {
            (&b.record.started_at, &b.record.run_id).cmp(&(&a.record.started_at, &a.record.run_id))
        });
        let by_id = entries
            .iter()
            .enumerate()
            .map(|(position, entry)| (entry.record.run_id.clone(), position))
            .collect();
        Listing {
            snapshot: Arc::new(Snapshot { entries, by_id }),
        }
    }

    /// The run named by a `RUN` argument (a full id, or a unique prefix of at least
    /// [`MIN_PREFIX_LEN`] characters), as [`RunIndex::resolve`] finds it.
    pub fn find(&self, run: &str) -> Result<Arc<RunRecord>, RunIndexError> {
        find(&self.snapshot, run)
    }
}

struct State {
    index: Option<RunIndex>,
    /// The inode of `runs.db` when `index` opened it.
    index_inode: Option<u64>,
    /// `runs.db` opened for reading its header (the same inode as `index`).
    header: Option<std::fs::File>,
    /// What the snapshot was built from; `None`: rebuild on the next call.
    stamp: Option<Stamp>,
    snapshot: Arc<Snapshot>,
}

/// What the listing depends on, besides the manifests and the unfinished runs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    scratch: Option<FileStamp>,
    database_inode: Option<u64>,
    version: Version,
}

/// What tells that a connection committed to `runs.db`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    /// The file change counter (offset 24 of the header): one `pread`, no transaction.
    /// A `PRAGMA data_version` starts a read transaction, which with the kept rollback
    /// journal costs about 20 system calls (locks, the hot-journal check opening the
    /// journal), the largest part of answering a cached `GET /api/v1/runs/{id}`.
    Counter(u32),
    /// `PRAGMA data_version`, for a file in WAL mode (whose commits need not change the
    /// counter) or a header that cannot be read.
    Data(i64),
}

/// The file change counter of the SQLite database open as `file`, or `None` when the
/// header is short or the file is in WAL mode (SQLite file format, section 1.3: bytes
/// 18 and 19 are the write and read versions, 2 for WAL; bytes 24 to 27 the counter,
/// big-endian).
fn change_counter(file: &std::fs::File) -> Option<u32> {
    use std::os::unix::fs::FileExt;
    let mut header = [0u8; 12];
    file.read_exact_at(&mut header, 16).ok()?;
    let [_, _, write_version, read_version, _, _, _, _, c0, c1, c2, c3] = header;
    (write_version == 1 && read_version == 1).then_some(u32::from_be_bytes([c0, c1, c2, c3]))
}

/// The version of the table as `index` and `header` (the same file) see it now.
fn version(index: &RunIndex, header: Option<&std::fs::File>) -> Result<Version, RunIndexError> {
    match header.and_then(change_counter) {
        Some(counter) => Ok(Version::Counter(counter)),
        None => index.data_version().map(Version::Data),
    }
}

/// Enough of a file's `stat` to notice it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    inode: u64,
    len: u64,
    modified: SystemTime,
}

#[derive(Default)]
struct Snapshot {
    /// Newest first.
    entries: Vec<Entry>,
    by_id: HashMap<String, usize>,
}

struct Entry {
    record: Arc<RunRecord>,
    /// The row as stored, for a run whose status is decided again on every call.
    unfinished: Option<Stored>,
    /// The manifest's stat when the snapshot read it (finished runs and unreadable ones).
    manifest: Option<Option<FileStamp>>,
}

#[derive(Clone)]
struct Stored {
    status: Option<RunStatus>,
    finished_at: Option<String>,
}

impl RunCatalog {
    /// The catalog of `{root}`; nothing is read before the first call.
    pub fn new(root: &Path) -> RunCatalog {
        RunCatalog {
            root: root.to_path_buf(),
            state: Mutex::new(State {
                index: None,
                index_inode: None,
                header: None,
                stamp: None,
                snapshot: Arc::default(),
            }),
            dirty: AtomicBool::new(false),
            next_check: AtomicU64::new(0),
            manifest_recheck: MANIFEST_RECHECK,
            born: Instant::now(),
        }
    }

    /// The same catalog with manifests compared with their files every `every` instead
    /// of once a second.
    pub fn with_manifest_recheck(mut self, every: Duration) -> RunCatalog {
        self.manifest_recheck = every;
        self
    }

    /// Every run, newest first, as [`RunIndex::list`] lists them. May read the table,
    /// the run directories and every manifest: call it where blocking is allowed.
    pub fn list(&self) -> Result<Listing, RunIndexError> {
        self.check_manifests_if_due();
        let snapshot = self.snapshot()?;
        Ok(Listing { snapshot })
    }

    /// [`RunCatalog::list`] when the snapshot is current, at the cost of a few `stat`s;
    /// `None` when answering needs a rebuild or a manifest check.
    pub fn list_cached(&self) -> Option<Listing> {
        let snapshot = self.cached_snapshot()?;
        Some(Listing { snapshot })
    }

    /// The run named by a `RUN` argument, as [`RunIndex::resolve`] finds it (a full id,
    /// or a unique prefix of at least [`MIN_PREFIX_LEN`] characters). May block.
    pub fn resolve(&self, run: &str) -> Result<Arc<RunRecord>, RunIndexError> {
        self.check_manifests_if_due();
        let snapshot = self.snapshot()?;
        find(&snapshot, run)
    }

    /// [`RunCatalog::resolve`] when the snapshot is current; `None` when answering needs
    /// a rebuild or a manifest check.
    pub fn resolve_cached(&self, run: &str) -> Option<Result<Arc<RunRecord>, RunIndexError>> {
        let snapshot = self.cached_snapshot()?;
        Some(find(&snapshot, run))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn millis_since_born(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn cached_snapshot(&self) -> Option<Arc<Snapshot>> {
        if self.millis_since_born() >= self.next_check.load(Ordering::Acquire) {
            return None;
        }
        let mut state = self.state();
        let current = self.is_current(&mut state);
        current.then(|| Arc::clone(&state.snapshot))
    }

    /// The current snapshot, rebuilt first when it is stale.
    fn snapshot(&self) -> Result<Arc<Snapshot>, RunIndexError> {
        let mut state = self.state();
        if !self.is_current(&mut state) {
            self.rebuild(&mut state)?;
        }
        Ok(Arc::clone(&state.snapshot))
    }

    fn is_current(&self, state: &mut State) -> bool {
        if self.dirty.load(Ordering::Acquire) {
            return false;
        }
        let Some(stamp) = &state.stamp else {
            return false;
        };
        let Some(index) = &state.index else {
            return false;
        };
        let Ok(version) = version(index, state.header.as_ref()) else {
            return false;
        };
        let now = Stamp {
            scratch: file_stamp(&crate::run_dir::scratch_dir(&self.root)),
            database_inode: file_stamp(&self.root.join("runs.db")).map(|file| file.inode),
            version,
        };
        *stamp == now
    }

    /// Reads the listing again, as [`RunIndex::list`] does, reusing the manifest checks
    /// of the old snapshot whose files did not change.
    fn rebuild(&self, state: &mut State) -> Result<(), RunIndexError> {
        state.stamp = None;
        self.dirty.store(false, Ordering::Release);
        let started = SystemTime::now();
        let database = file_stamp(&self.root.join("runs.db")).map(|file| file.inode);
        if state.index.is_none() || database.is_none() || database != state.index_inode {
            // Deleted (and perhaps recreated) by someone else: the open connection
            // would keep reading the old file.
            state.index = None;
            state.header = None;
            state.index = Some(RunIndex::open(&self.root)?);
            let path = self.root.join("runs.db");
            state.index_inode = file_stamp(&path).map(|file| file.inode);
            // Opened after the connection, and kept only when it is the same file: a
            // replacement in between shows as a changed inode at the next call.
            state.header = fs_err::File::open(&path)
                .ok()
                .map(|file| file.into_parts().0)
                .filter(|file| {
                    file.metadata().ok().map(|metadata| metadata.ino()) == state.index_inode
                });
        }
        let Some(index) = state.index.as_mut() else {
            return Ok(());
        };
        // Taken before the reads: a change made while they run shows at the next call.
        let scratch = file_stamp(&crate::run_dir::scratch_dir(&self.root));
        let data_before = index.data_version()?;
        let counter_before = state.header.as_ref().and_then(change_counter);
        let (rows, unreadable) = index.stored_rows()?;
        // The reads may write (the sync with the run directories), which moves the
        // counter but not this connection's `data_version`: when `data_version` did not
        // move either, no other connection committed, and the counter after the reads
        // (read first) is the state the snapshot holds; else the one before, so the next
        // call rebuilds.
        let counter_after = state.header.as_ref().and_then(change_counter);
        let data_after = index.data_version()?;
        let version = match (counter_before, counter_after) {
            (Some(_), Some(after)) if data_after == data_before => Version::Counter(after),
            (Some(before), Some(_)) => Version::Counter(before),
            _ => Version::Data(data_before),
        };
        let stamp = Stamp {
            scratch,
            database_inode: state.index_inode,
            version,
        };
        let old = Arc::clone(&state.snapshot);
        let mut entries: Vec<Entry> = rows
            .into_iter()
            .map(|row| entry_of_row(row, &old))
            .collect();
        entries.extend(unreadable.into_iter().map(|record| Entry {
            manifest: Some(file_stamp(
                &record.run_dir.join(crate::run_dir::MANIFEST_FILE),
            )),
            record: Arc::new(record),
            unfinished: None,
        }));
        entries.sort_by(|a, b| {
            (&b.record.started_at, &b.record.run_id).cmp(&(&a.record.started_at, &a.record.run_id))
        });
        let by_id = entries
            .iter()
            .enumerate()
            .map(|(position, entry)| (entry.record.run_id.clone(), position))
            .collect();
        state.snapshot = Arc::new(Snapshot { entries, by_id });
        let racy = scratch.is_some_and(|scratch| {
            started
                .duration_since(scratch.modified)
                .map_or(true, |age| age < RACY)
        });
        state.stamp = (!racy).then_some(stamp);
        Ok(())
    }

    /// Every `manifest_recheck`, the one caller that claims the check compares each
    /// manifest the snapshot read with its file, outside the lock; a difference makes
    /// the next call rebuild.
    fn check_manifests_if_due(&self) {
        let now = self.millis_since_born();
        let due = self.next_check.load(Ordering::Acquire);
        let next = now
            .saturating_add(u64::try_from(self.manifest_recheck.as_millis()).unwrap_or(u64::MAX));
        if now < due
            || self
                .next_check
                .compare_exchange(due, next, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return;
        }
        let snapshot = Arc::clone(&self.state().snapshot);
        let changed = snapshot.entries.iter().any(|entry| {
            entry.manifest.is_some_and(|seen| {
                seen != file_stamp(&entry.record.run_dir.join(crate::run_dir::MANIFEST_FILE))
            })
        });
        if changed {
            self.dirty.store(true, Ordering::Release);
        }
    }
}

/// A snapshot entry for a stored row: a finished run's record is final once its
/// manifest was checked (again only when the manifest's stat changed since `old`).
fn entry_of_row(row: StoredRow, old: &Snapshot) -> Entry {
    let stored = Stored {
        status: RunStatus::parse(&row.status),
        finished_at: row.finished_at.clone(),
    };
    let finished = stored
        .status
        .is_some_and(|status| status.is_finished() && status != RunStatus::Interrupted);
    let mut record = row.into_record();
    if !finished {
        return Entry {
            record: Arc::new(record),
            unfinished: Some(stored),
            manifest: None,
        };
    }
    let manifest = file_stamp(&record.run_dir.join(crate::run_dir::MANIFEST_FILE));
    let previous = old
        .by_id
        .get(&record.run_id)
        .and_then(|position| old.entries.get(*position))
        .filter(|entry| entry.unfinished.is_none() && entry.manifest == Some(manifest));
    match previous {
        Some(entry) if entry.record.status == RunStatus::Unreadable => {
            record.status = RunStatus::Unreadable;
            record.finished_at = None;
            record.reason.clone_from(&entry.record.reason);
        }
        Some(_) => {}
        None => mark_if_unreadable(&mut record),
    }
    Entry {
        record: Arc::new(record),
        unfinished: None,
        manifest: Some(manifest),
    }
}

fn current_record(entry: &Entry) -> Arc<RunRecord> {
    let Some(stored) = &entry.unfinished else {
        return Arc::clone(&entry.record);
    };
    let mut record = RunRecord::clone(&entry.record);
    let (status, finished_at) =
        effective_status(stored.status, stored.finished_at.clone(), &record.run_dir);
    record.status = status;
    record.finished_at = finished_at;
    mark_if_unreadable(&mut record);
    Arc::new(record)
}

/// As [`RunIndex::list`]: a listed run whose manifest cannot be read is unreadable.
fn mark_if_unreadable(record: &mut RunRecord) {
    if matches!(record.status, RunStatus::Unreadable | RunStatus::Queued) {
        return;
    }
    if let Err(error) = read_manifest(&record.run_dir) {
        record.status = RunStatus::Unreadable;
        record.finished_at = None;
        record.reason = Some(crate::error_chain(&error));
    }
}

/// As [`RunIndex::resolve`] finds a run, in the snapshot.
fn find(snapshot: &Snapshot, run: &str) -> Result<Arc<RunRecord>, RunIndexError> {
    if let Some(entry) = snapshot
        .by_id
        .get(run)
        .and_then(|position| snapshot.entries.get(*position))
    {
        return Ok(current_record(entry));
    }
    if run.chars().count() < MIN_PREFIX_LEN {
        return Err(RunIndexError::PrefixTooShort {
            run: run.to_owned(),
        });
    }
    let mut matches: Vec<&Entry> = snapshot
        .entries
        .iter()
        .filter(|entry| entry.record.run_id.starts_with(run))
        .collect();
    match matches.len() {
        0 => Err(RunIndexError::UnknownRun {
            run: run.to_owned(),
        }),
        1 => Ok(current_record(matches.remove(0))),
        _ => {
            let mut candidates: Vec<String> = matches
                .into_iter()
                .map(|entry| entry.record.run_id.clone())
                .collect();
            candidates.sort();
            Err(RunIndexError::AmbiguousRun {
                run: run.to_owned(),
                candidates,
            })
        }
    }
}

fn file_stamp(path: &Path) -> Option<FileStamp> {
    let metadata = std::fs::metadata(path).ok()?;
    Some(FileStamp {
        inode: metadata.ino(),
        len: metadata.len(),
        modified: metadata.modified().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{manifest, write_run};
    use super::*;
    use crate::run_dir::write_json_atomic;
    use crate::run_index::RunLock;

    const DAY1: &str = "2026-01-01T00:00:00.000Z";
    const DAY2: &str = "2026-01-02T00:00:00.000Z";
    const DAY3: &str = "2026-01-03T00:00:00.000Z";

    /// Moves the modification time of `{root}/scratch` out of the racy window, as if the
    /// last run directory had been created a while ago.
    fn settle(root: &Path) {
        let scratch = fs_err::File::open(root.join("scratch")).expect("opens the directory");
        scratch
            .file()
            .set_modified(SystemTime::now() - Duration::from_secs(10))
            .expect("sets the time");
    }

    fn statuses(listing: &Listing) -> Vec<(String, RunStatus)> {
        listing
            .iter()
            .map(|record| (record.run_id.clone(), record.status))
            .collect()
    }

    fn listed(catalog: &RunCatalog) -> Vec<(String, RunStatus)> {
        statuses(&catalog.list().expect("lists"))
    }

    /// Answers from the snapshot, without a rebuild.
    fn cached(catalog: &RunCatalog) -> Option<Vec<(String, RunStatus)>> {
        catalog.list_cached().map(|records| statuses(&records))
    }

    #[test]
    fn the_snapshot_serves_until_a_run_directory_or_the_table_changes() {
        let root = tempfile::tempdir().expect("tempdir");
        let root = root.path();
        write_run(root, "old", DAY1, Some("success"));
        let catalog = RunCatalog::new(root);
        settle(root);
        let first = vec![("old".to_owned(), RunStatus::Success)];
        assert_eq!(listed(&catalog), first);
        assert_eq!(cached(&catalog), Some(first));

        // A run another process created: a new directory under scratch.
        write_run(root, "new", DAY2, Some("fail"));
        assert_eq!(cached(&catalog), None, "a new run directory is noticed");
        let both = vec![
            ("new".to_owned(), RunStatus::Fail),
            ("old".to_owned(), RunStatus::Success),
        ];
        assert_eq!(listed(&catalog), both);
        settle(root);
        assert_eq!(listed(&catalog), both);
        assert_eq!(cached(&catalog), Some(both));

        // Another process records a status change: only the table changes.
        let other = RunIndex::open(root).expect("opens");
        other
            .record_status("old", RunStatus::Canceled, Some(DAY3))
            .expect("records");
        assert_eq!(cached(&catalog), None, "a write to the table is noticed");
        assert_eq!(
            listed(&catalog),
            [
                ("new".to_owned(), RunStatus::Fail),
                ("old".to_owned(), RunStatus::Canceled)
            ]
        );
        assert!(cached(&catalog).is_some());

        // A removed run directory disappears.
        fs_err::remove_dir_all(root.join("scratch/new")).expect("removes");
        assert_eq!(listed(&catalog), [("old".to_owned(), RunStatus::Canceled)]);
    }

    #[test]
    fn the_change_counter_moves_with_each_commit_and_is_not_used_in_wal_mode() {
        let root = tempfile::tempdir().expect("tempdir");
        let path = root.path().join("runs.db");
        let writer = rusqlite::Connection::open(&path).expect("opens");
        writer
            .execute_batch("PRAGMA journal_mode=PERSIST; CREATE TABLE t(x);")
            .expect("creates");
        let header = fs_err::File::open(&path).expect("opens").into_parts().0;
        let before = change_counter(&header).expect("a rollback-journal database");
        writer
            .execute("INSERT INTO t VALUES (1)", [])
            .expect("inserts");
        let after = change_counter(&header).expect("a rollback-journal database");
        assert_ne!(before, after, "a commit moves the counter");
        assert_eq!(change_counter(&header), Some(after), "reading does not");
        let mode: String = writer
            .query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))
            .expect("switches");
        assert_eq!(mode, "wal");
        assert_eq!(
            change_counter(&header),
            None,
            "WAL commits need not move it"
        );
        let empty = fs_err::File::create(root.path().join("empty.db"))
            .expect("creates")
            .into_parts()
            .0;
        assert_eq!(change_counter(&empty), None, "no header");
    }

    #[test]
    fn a_commit_to_a_database_in_wal_mode_is_noticed() {
        let root = tempfile::tempdir().expect("tempdir");
        let root = root.path();
        write_run(root, "old", DAY1, Some("success"));
        let catalog = RunCatalog::new(root);
        settle(root);
        assert_eq!(listed(&catalog), [("old".to_owned(), RunStatus::Success)]);
        let other = rusqlite::Connection::open(root.join("runs.db")).expect("opens");
        let mode: String = other
            .query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))
            .expect("switches");
        assert_eq!(mode, "wal");
        assert_eq!(listed(&catalog), [("old".to_owned(), RunStatus::Success)]);
        assert!(cached(&catalog).is_some(), "an unchanged WAL database");
        other
            .execute(
                "UPDATE runs SET status = 'canceled' WHERE run_id = 'old'",
                [],
            )
            .expect("updates");
        assert_eq!(cached(&catalog), None, "a WAL commit is noticed");
        assert_eq!(listed(&catalog), [("old".to_owned(), RunStatus::Canceled)]);
    }

    #[test]
    fn a_run_in_progress_is_checked_on_every_call() {
        let root = tempfile::tempdir().expect("tempdir");
        let root = root.path();
        let run_dir = write_run(root, "live", DAY1, Some("running"));
        let index = RunIndex::open(root).expect("opens");
        index
            .record_start(&manifest("live", DAY1), &run_dir)
            .expect("records");
        let lock = RunLock::acquire(&run_dir).expect("locks");
        let catalog = RunCatalog::new(root);
        settle(root);
        assert_eq!(listed(&catalog), [("live".to_owned(), RunStatus::Running)]);
        assert_eq!(
            cached(&catalog),
            Some(vec![("live".to_owned(), RunStatus::Running)])
        );
        drop(lock);
        assert!(super::super::lock::released_soon(&run_dir));
        assert_eq!(
            cached(&catalog),
            Some(vec![("live".to_owned(), RunStatus::Interrupted)]),
            "the lock is tested on each call"
        );
        // The process wrote its final checkpoint but not its row.
        write_json_atomic(
            &run_dir.join("checkpoint.json"),
            &serde_json::json!({"run_status": "success", "timestamp": DAY2}),
        )
        .expect("writes");
        let record = catalog
            .resolve_cached("live")
            .expect("current")
            .expect("found");
        assert_eq!(record.status, RunStatus::Success);
        assert_eq!(record.finished_at.as_deref(), Some(DAY2));
    }

    #[test]
    fn a_manifest_corrupted_after_indexing_shows_at_the_next_check() {
        let root = tempfile::tempdir().expect("tempdir");
        let root = root.path();
        write_run(root, "good", DAY1, Some("success"));
        write_run(root, "bad", DAY2, Some("success"));
        let catalog = RunCatalog::new(root).with_manifest_recheck(Duration::ZERO);
        settle(root);
        assert_eq!(
            listed(&catalog),
            [
                ("bad".to_owned(), RunStatus::Success),
                ("good".to_owned(), RunStatus::Success)
            ]
        );
        fs_err::write(root.join("scratch/bad/manifest.json"), "{\"run_id\": trunc")
            .expect("writes");
        let records = catalog.list().expect("lists");
        assert_eq!(
            statuses(&records),
            [
                ("bad".to_owned(), RunStatus::Unreadable),
                ("good".to_owned(), RunStatus::Success)
            ]
        );
        assert!(records
            .iter()
            .next()
            .expect("listed")
            .reason
            .as_deref()
            .is_some_and(|reason| reason.contains("manifest.json")));
        // Repaired: listed as it was.
        write_json_atomic(
            &root.join("scratch/bad/manifest.json"),
            &manifest("bad", DAY2),
        )
        .expect("writes");
        assert_eq!(
            listed(&catalog),
            [
                ("bad".to_owned(), RunStatus::Success),
                ("good".to_owned(), RunStatus::Success)
            ]
        );
    }

    #[test]
    fn a_deleted_and_recreated_database_is_reopened() {
        let root = tempfile::tempdir().expect("tempdir");
        let root = root.path();
        write_run(root, "first", DAY1, Some("success"));
        let catalog = RunCatalog::new(root);
        settle(root);
        assert_eq!(listed(&catalog).len(), 1);
        fs_err::remove_file(root.join("runs.db")).expect("removes");
        // Another process rebuilds the file, then records a run's end in it.
        let mut other = RunIndex::open(root).expect("opens");
        assert_eq!(
            other.resolve("first").expect("rebuilt").status,
            RunStatus::Success
        );
        other
            .record_status("first", RunStatus::Fail, Some(DAY2))
            .expect("records");
        assert_eq!(cached(&catalog), None);
        assert_eq!(listed(&catalog), [("first".to_owned(), RunStatus::Fail)]);
    }

    #[test]
    fn run_arguments_resolve_as_in_the_index() {
        let root = tempfile::tempdir().expect("tempdir");
        let root = root.path();
        for run_id in ["r1", "abcd-1", "abcd-2", "abcdef"] {
            write_run(root, run_id, DAY1, Some("success"));
        }
        let catalog = RunCatalog::new(root);
        let resolve = |run: &str| {
            catalog
                .resolve(run)
                .map(|record| record.run_id.clone())
                .map_err(|error| error.to_string())
        };
        assert_eq!(resolve("r1"), Ok("r1".to_owned()));
        assert_eq!(resolve("abcde"), Ok("abcdef".to_owned()));
        assert_eq!(
            resolve("abcd"),
            Err("ambiguous run 'abcd': it matches abcd-1, abcd-2, abcdef".to_owned())
        );
        assert_eq!(resolve("zzzz"), Err("unknown run 'zzzz'".to_owned()));
        assert_eq!(
            resolve("abc"),
            Err("unknown run 'abc': a prefix needs at least 4 characters".to_owned())
        );
    }
}
