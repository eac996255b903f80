//! The run list of a [`PgRunStore`] (SPEC 18.1): the `runs` columns a listing shows (no
//! manifest is read) and, when a row says `running`, the locks held, in two queries; kept
//! between calls as long as nothing changed it.
//!
//! What changes a listing is a write to a run's row: its records, its start, its end, a
//! rewind, an import. Each such write of this process marks the kept listing stale when
//! it has committed, and each one of any process sends a `NOTIFY` on [`RUNS_CHANNEL`] in
//! its transaction, which the store's listening connection turns into the same mark. A
//! listing is kept only while that connection listens (notices missed while it was down
//! would go unseen), and one with a running run for at most [`RUNNING_RECHECK`]: a run
//! whose process died keeps its `running` row, and only its lock, gone without a notice,
//! tells that it is interrupted.
//!
//! Each listed run comes with its [`RecordStamps`]: the row's `revision` (bumped by the
//! same writes) and the time of its newest checkpoint, which together change whenever
//! the run's `fabro inspect` document can (a server keeps documents by them).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fabro_engine::local::Listing;
use fabro_engine::{RecordStamps, RunId, RunRecord, RunStatus, RunStore, StoreError};
use sqlx::postgres::PgRow;
use sqlx::Row;

use super::{backend, lock_key, PgRunStore};

/// The channel of changes to the run list, with the run id as payload.
pub const RUNS_CHANNEL: &str = "fabro_runs";

/// The longest a listing that shows a running run is kept.
const RUNNING_RECHECK: Duration = Duration::from_secs(1);

/// The query of the columns of listed runs, `$rest` after its `FROM`.
macro_rules! listed {
    ($rest:literal) => {
        concat!(
            "SELECT r.run_id, r.workflow_name, coalesce(r.workflow_path, '') AS workflow_path, \
             r.goal, r.status, coalesce(r.started_at, to_char(r.created_at AT TIME ZONE 'UTC', \
             'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')) AS started_at, r.finished_at, \
             coalesce(r.run_dir, '') AS run_dir, r.parent_run_id, r.revision, \
             (extract(epoch FROM c.updated_at) * 1000000)::bigint AS checkpoint_at, \
             CASE WHEN r.status = 'running' THEN c.checkpoint::jsonb ->> 'run_status' END \
             AS ended, (r.owner IS NOT NULL AND r.lease_expires_at IS NOT NULL) AS leased, \
             CASE WHEN r.claimed_at IS NOT NULL THEN r.owner END AS worker \
             FROM runs r LEFT JOIN run_checkpoints c ON c.run_id = r.run_id ",
            $rest
        )
    };
}

/// The kept listing and what tells whether it is current.
#[derive(Debug, Default)]
pub(super) struct Listings {
    /// Bumped when a listing may have changed: after a write of this process, on a
    /// notice of another's, whenever the listening connection comes or goes.
    generation: AtomicU64,
    /// Whether the listening connection listens.
    listening: AtomicBool,
    kept: Mutex<Option<Arc<Snapshot>>>,
    /// Held while a listing is read, so that concurrent callers read it once.
    reading: Mutex<()>,
}

/// A listing as read at one moment.
struct Snapshot {
    listing: Listing,
    stamps: HashMap<String, RecordStamps>,
    generation: u64,
    read_at: Instant,
    /// Whether a listed run is running.
    running: bool,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Snapshot")
            .field("runs", &self.listing.len())
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

impl Listings {
    /// Marks the kept listing stale.
    pub(super) fn changed(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Whether the listening connection listens; either way what was kept is stale.
    pub(super) fn set_listening(&self, listening: bool) {
        self.listening.store(listening, Ordering::SeqCst);
        self.changed();
    }

    /// The kept snapshot when it is current.
    fn current(&self) -> Option<Arc<Snapshot>> {
        if !self.listening.load(Ordering::SeqCst) {
            return None;
        }
        let kept = self
            .kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()?;
        (kept.generation == self.generation.load(Ordering::SeqCst)
            && (!kept.running || kept.read_at.elapsed() < RUNNING_RECHECK))
            .then_some(kept)
    }
}

/// The stamps of a run from its `revision` and its newest checkpoint's time.
fn stamps(revision: i64, checkpoint_at: Option<i64>) -> RecordStamps {
    let revision = u64::try_from(revision).unwrap_or(0);
    let at = |micros: i64| UNIX_EPOCH + Duration::from_micros(u64::try_from(micros).unwrap_or(0));
    RecordStamps {
        events: None,
        checkpoint: checkpoint_at.map(|micros| (revision, at(micros))),
        manifest: Some((revision, SystemTime::UNIX_EPOCH)),
        stages: Some((revision, SystemTime::UNIX_EPOCH)),
    }
}

/// A listed row as the engine's record, its status as stored; a final checkpoint wins
/// over a `running` row whose end is not registered yet, as on the local store.
fn listed(row: &PgRow) -> RunRecord {
    let ended = row
        .get::<Option<&str>, _>("ended")
        .and_then(RunStatus::parse)
        .filter(|ended| ended.is_finished() && *ended != RunStatus::Interrupted);
    let status = RunStatus::parse(row.get("status")).unwrap_or(RunStatus::Running);
    RunRecord {
        run_id: row.get("run_id"),
        workflow_name: row.get("workflow_name"),
        workflow_path: row.get("workflow_path"),
        goal: row.get("goal"),
        status: match (status, ended) {
            (RunStatus::Running, Some(ended)) => ended,
            (status, _) => status,
        },
        started_at: row.get("started_at"),
        finished_at: row.get("finished_at"),
        run_dir: PathBuf::from(row.get::<String, _>("run_dir")),
        parent_run_id: row.get("parent_run_id"),
        reason: None,
        worker: row.get("worker"),
    }
}

impl PgRunStore {
    /// Every run with a manifest or queued (listed from its queuing, SPEC 18.2), newest
    /// first, read now; a `running` run nobody holds is [`RunStatus::Interrupted`].
    pub(super) fn read_listed(
        &self,
    ) -> Result<(Vec<RunRecord>, HashMap<String, RecordStamps>), StoreError> {
        let pool = self.pool.clone();
        let action = "cannot list the runs".to_owned();
        let (rows, held) = self.run(&action.clone(), async move {
            let rows = sqlx::query(listed!(
                "WHERE (r.manifest IS NOT NULL OR r.status = 'queued') \
                 ORDER BY started_at DESC, r.run_id DESC"
            ))
            .fetch_all(&pool)
            .await
            .map_err(backend(&action))?;
            let running = rows
                .iter()
                .any(|row| row.get::<&str, _>("status") == RunStatus::Running.as_str());
            let held: Vec<i64> = if running {
                sqlx::query_scalar(
                    "SELECT (classid::bigint << 32) | objid::bigint FROM pg_locks \
                     WHERE locktype = 'advisory' AND granted AND objsubid = 1",
                )
                .fetch_all(&pool)
                .await
                .map_err(backend(&action))?
            } else {
                Vec::new()
            };
            Ok((rows, held))
        })?;
        let held: HashSet<i64> = held.into_iter().collect();
        // A worker holds these, or another takes them over (SPEC 18.2): not interrupted.
        let leased: HashSet<String> = rows
            .iter()
            .filter(|row| row.get::<bool, _>("leased"))
            .map(|row| row.get("run_id"))
            .collect();
        let mut stamped = HashMap::with_capacity(rows.len());
        let mut records: Vec<RunRecord> = rows
            .iter()
            .map(|row| {
                stamped.insert(
                    row.get("run_id"),
                    stamps(row.get("revision"), row.get("checkpoint_at")),
                );
                listed(row)
            })
            .collect();
        let unheld: Vec<&mut RunRecord> = records
            .iter_mut()
            .filter(|record| {
                record.status == RunStatus::Running
                    && !leased.contains(&record.run_id)
                    && !held.contains(&lock_key(&RunId::from(record.run_id.as_str())))
            })
            .collect();
        self.settle(unheld)?;
        Ok((records, stamped))
    }

    /// The runs whose rows said `running` when no lock was held for them: each ended
    /// since (its end is written before its lock goes) or is interrupted. Reading the
    /// rows again tells which.
    fn settle(&self, unheld: Vec<&mut RunRecord>) -> Result<(), StoreError> {
        if unheld.is_empty() {
            return Ok(());
        }
        let pool = self.pool.clone();
        let ids: Vec<String> = unheld.iter().map(|record| record.run_id.clone()).collect();
        let action = "cannot list the runs".to_owned();
        let now: Vec<(String, String, Option<String>)> = self.run(&action.clone(), async move {
            sqlx::query_as("SELECT run_id, status, finished_at FROM runs WHERE run_id = ANY($1)")
                .bind(&ids)
                .fetch_all(&pool)
                .await
                .map_err(backend(&action))
        })?;
        let now: HashMap<String, (String, Option<String>)> = now
            .into_iter()
            .map(|(run_id, status, finished_at)| (run_id, (status, finished_at)))
            .collect();
        for record in unheld {
            match now.get(&record.run_id) {
                Some((status, finished_at)) if status != RunStatus::Running.as_str() => {
                    record.status = RunStatus::parse(status).unwrap_or(RunStatus::Interrupted);
                    record.finished_at.clone_from(finished_at);
                }
                _ => record.status = RunStatus::Interrupted,
            }
        }
        Ok(())
    }

    /// The kept listing when it is current, else one read now (and kept).
    pub(super) fn kept_listing(&self) -> Result<Listing, StoreError> {
        if let Some(kept) = self.listings.current() {
            return Ok(kept.listing.clone());
        }
        let _reading = self
            .listings
            .reading
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Another caller may have read it while this one waited.
        if let Some(kept) = self.listings.current() {
            return Ok(kept.listing.clone());
        }
        // Listening from the first listing on; the generation is taken before the read,
        // so that a change during it leaves what is read stale.
        let _ = self.subscribe();
        let generation = self.listings.generation.load(Ordering::SeqCst);
        let (records, stamps) = self.read_listed()?;
        let running = records
            .iter()
            .any(|record| record.status == RunStatus::Running);
        let listing = Listing::of(records);
        *self
            .listings
            .kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(Snapshot {
            listing: listing.clone(),
            stamps,
            generation,
            read_at: Instant::now(),
            running,
        }));
        Ok(listing)
    }

    /// The kept listing when it is current; nothing is read.
    pub(super) fn current_listing(&self) -> Option<Listing> {
        self.listings.current().map(|kept| kept.listing.clone())
    }

    /// The stamps of run `run_id`: from the kept listing when it is current and lists
    /// the run, else read now; `None` when the store has no such run or cannot answer.
    pub(super) fn stamps_of(&self, run_id: &RunId) -> Option<RecordStamps> {
        if let Some(stamps) = self
            .listings
            .current()
            .and_then(|kept| kept.stamps.get(run_id.as_str()).cloned())
        {
            return Some(stamps);
        }
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let action = format!("cannot read the stamps of run {run_id}");
        let row: Option<(i64, Option<i64>)> = self
            .run(&action.clone(), async move {
                sqlx::query_as(
                    "SELECT r.revision, (extract(epoch FROM c.updated_at) * 1000000)::bigint \
                     FROM runs r LEFT JOIN run_checkpoints c ON c.run_id = r.run_id \
                     WHERE r.run_id = $1",
                )
                .bind(&id)
                .fetch_optional(&pool)
                .await
                .map_err(backend(&action))
            })
            .ok()?;
        row.map(|(revision, checkpoint_at)| stamps(revision, checkpoint_at))
    }
}

/// The most runs a prefix is matched against when the kept listing cannot answer.
const MATCHED: i64 = 50;

impl PgRunStore {
    /// The listed runs whose id is `run` or begins with it (at most [`MATCHED`]), read
    /// now, each `running` one checked against its lock.
    pub(super) fn read_matching(&self, run: &str) -> Result<Vec<RunRecord>, StoreError> {
        if run.contains('\0') {
            // PostgreSQL's text holds no NUL, so no id has one: nothing to ask.
            return Ok(Vec::new());
        }
        let pool = self.pool.clone();
        let pattern = format!(
            "{}%",
            run.replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_")
        );
        let action = format!("cannot find run {run}");
        let rows = self.run(&action.clone(), async move {
            sqlx::query(listed!(
                "WHERE (r.manifest IS NOT NULL OR r.status = 'queued') AND r.run_id LIKE $1 \
                 ORDER BY r.run_id LIMIT $2"
            ))
            .bind(&pattern)
            .bind(MATCHED)
            .fetch_all(&pool)
            .await
            .map_err(backend(&action))
        })?;
        let mut records: Vec<RunRecord> = rows.iter().map(listed).collect();
        let unheld: Vec<&mut RunRecord> = records
            .iter_mut()
            .filter(|record| {
                record.status == RunStatus::Running
                    && !self.is_active(&RunId::from(record.run_id.as_str()))
            })
            .collect();
        self.settle(unheld)?;
        Ok(records)
    }
}
