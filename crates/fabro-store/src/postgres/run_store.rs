//! [`PgRunStore`]: the engine's [`RunStore`] over the shared store's database (SPEC
//! 18.1): one `runs` row per run, its records as the exact text the local store writes,
//! events in `run_events` with the ids the run's emitter gave them, checkpoints in
//! `run_journal` with the newest in `run_checkpoints`, stages in `run_stages` with their
//! files in `stage_files`.
//!
//! A run's lock is a PostgreSQL session advisory lock held on a connection of its own
//! for as long as the lease lives, so a process that dies releases it with its
//! connection, and [`RunStore::is_active`] asks `pg_locks`. The engine's traits are
//! synchronous: every call runs on the store's [`Bridge`].

use std::path::Path;

use fabro_engine::backend::{
    Checkpoint, CheckpointLog, Manifest, OpenedEvents, Opening, PendingRewind, RecordParts,
    RunLease, RunRecords, StageCopy, StoredWorkflow,
};
use fabro_engine::configuration::RunConfig;
use fabro_engine::gate::Question;
use fabro_engine::local::StageDir;
use fabro_engine::{
    EventEnvelope, EventReader, FiledAnswer, Notice, RunId, RunRecord, RunStatus, RunStore,
    StoreError, StoredStage,
};
use sqlx::postgres::PgPool;

use self::leases::{LeasedRun, Leases};
use self::listing::Listings;
pub use self::listing::RUNS_CHANNEL;
use self::logs::{PgCheckpointLog, PgEventLog, PgEventReader, PgLease};
use self::records::Records;
use self::writer::{Batch, RunWriter, SavedStage, Writers};
use super::retry::again;
use super::PgStore;
use crate::bridge::Bridge;

/// A row of `run_stages`: rank, node, visit, `status.json` text, files.
type StageRow = (i64, String, i64, Option<String>, Vec<String>);

/// The channel `NOTIFY` wakes event streams on, with the run id as payload (SPEC 18.1).
pub const EVENTS_CHANNEL: &str = "fabro_events";

/// The run store of a shared store's database.
#[derive(Debug, Clone)]
pub struct PgRunStore {
    pool: PgPool,
    /// The pool of the writes that a later synchronous commit makes durable: event
    /// appends and stage saves, whose commits do not wait for their WAL to be flushed.
    /// The run's next checkpoint (a synchronous commit) flushes them with it, so after
    /// each checkpoint they are as durable as the local store's `events.jsonl` and stage
    /// directories (written, not synced, between its synced journal records).
    fast: PgPool,
    bridge: Bridge,
    /// The sender of the database's notices, once something subscribed.
    notices: std::sync::Arc<std::sync::OnceLock<tokio::sync::broadcast::Sender<Notice>>>,
    /// The kept run list.
    listings: std::sync::Arc<Listings>,
    /// The writers of the runs that execute through this store.
    writers: Writers,
    /// The leases of the runs this store claimed for a worker (SPEC 18.2).
    leases: Leases,
}

/// A row of `run_stages` (or `rewound_stages`) as the engine's stage.
fn stored_stage((rank, node_id, visit, status, files): StageRow) -> StoredStage {
    StoredStage {
        rank: u32::try_from(rank).unwrap_or(u32::MAX),
        node_id,
        visit: u32::try_from(visit).unwrap_or(u32::MAX),
        status: status.and_then(|text| serde_json::from_str(&text).ok()),
        files,
    }
}

/// A failed query as the engine's store error.
fn backend(action: impl Into<String>) -> impl FnOnce(sqlx::Error) -> StoreError {
    let action = action.into();
    move |source| StoreError::backend(action, source)
}

/// A JSON column read back: `what` names it in the error when it is not valid.
fn stored<T: serde::de::DeserializeOwned>(text: &str, what: String) -> Result<T, StoreError> {
    serde_json::from_str(text)
        .map_err(|error| StoreError::backend(format!("{what} is not valid"), error))
}

/// Counts a write to run `run_id`'s row or records in its `revision` and tells every
/// process on the store, in `transaction`.
async fn notify_changed(
    transaction: &mut sqlx::PgConnection,
    run_id: &str,
    action: &str,
) -> Result<(), StoreError> {
    sqlx::query(
        "WITH changed AS (UPDATE runs SET revision = revision + 1 WHERE run_id = $1 \
         RETURNING run_id) SELECT pg_notify($2, run_id) FROM changed",
    )
    .bind(run_id)
    .bind(RUNS_CHANNEL)
    .execute(transaction)
    .await
    .map(|_| ())
    .map_err(backend(action))
}

/// The advisory lock key of a run: the first eight bytes of the SHA-256 of its id.
fn lock_key(run_id: &RunId) -> i64 {
    let digest = fabro_engine::backend::hex_digest(run_id.as_str().as_bytes());
    let high = u64::from_str_radix(&digest[..16], 16).unwrap_or(0);
    i64::from_ne_bytes(high.to_ne_bytes())
}

impl PgRunStore {
    /// The run store of `store`'s database (migrated by the caller). It opens its own
    /// connections, on its bridge's runtime: a connection belongs to the runtime that
    /// opened it, and `store`'s may be gone.
    pub fn new(store: &PgStore) -> std::io::Result<PgRunStore> {
        let options = (*store.pool.connect_options()).clone();
        let bridge = Bridge::start("fabro-pg-store")?;
        let (pool, fast) = bridge
            .run(async move {
                let fast = super::pool_options(&options, 4, true)
                    .acquire_timeout(super::CONNECT_TIMEOUT)
                    .connect_lazy_with(options.clone());
                let pool = super::pool_options(&options, 12, false)
                    .acquire_timeout(super::CONNECT_TIMEOUT)
                    .connect_lazy_with(options);
                (pool, fast)
            })
            .ok_or_else(|| std::io::Error::other("the store's thread stopped"))?;
        Ok(PgRunStore {
            pool,
            fast,
            bridge,
            notices: std::sync::Arc::default(),
            listings: std::sync::Arc::default(),
            writers: Writers::default(),
            leases: Leases::default(),
        })
    }

    /// Runs `future` on the bridge; a dead bridge is a store error naming `action`.
    fn run<T: Send + 'static>(
        &self,
        action: &str,
        future: impl std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.bridge
            .run(future)
            .unwrap_or_else(|| Err(backend(action)(sqlx::Error::PoolClosed)))
    }
}

impl RunStore for PgRunStore {
    /// A run this store claimed for a worker holds its lease instead (SPEC 18.2).
    fn lock(&self, run_id: &RunId) -> Result<Box<dyn RunLease>, StoreError> {
        if let Some(held) = self.leases.get(run_id.as_str()) {
            held.epoch()?;
            return Ok(Box::new(LeasedRun(held)));
        }
        let pool = self.pool.clone();
        let key = lock_key(run_id);
        let action = format!("cannot lock run {run_id}");
        let connection = self.run(&action.clone(), async move {
            let mut connection = pool.acquire().await.map_err(backend(&action))?.detach();
            let taken: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
                .bind(key)
                .fetch_one(&mut connection)
                .await
                .map_err(backend(&action))?;
            Ok(taken.then_some(connection))
        })?;
        match connection {
            Some(connection) => Ok(Box::new(PgLease {
                connection: Some(connection),
                bridge: self.bridge.clone(),
            })),
            None => Err(StoreError::Locked {
                run_id: run_id.clone(),
            }),
        }
    }

    fn is_active(&self, run_id: &RunId) -> bool {
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let key = lock_key(run_id);
        let bits = u64::from_ne_bytes(key.to_ne_bytes());
        let (high, low) = (i64::try_from(bits >> 32), i64::try_from(bits & 0xffff_ffff));
        let (Ok(high), Ok(low)) = (high, low) else {
            return false;
        };
        self.run("cannot read the run locks", async move {
            // A run a worker holds, or that another takes over, has a lease instead.
            sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted \
                 AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1) \
                 OR EXISTS (SELECT 1 FROM runs WHERE run_id = $3 AND status = 'running' \
                 AND owner IS NOT NULL AND lease_expires_at IS NOT NULL)",
            )
            .bind(high)
            .bind(low)
            .bind(id)
            .fetch_one(&pool)
            .await
            .map_err(backend("cannot read the run locks"))
        })
        // A store that cannot answer shows no run as active: readers then see
        // `interrupted`, never a run that seems to run forever.
        .unwrap_or(false)
    }

    /// In one transaction, written again while the store's connection is lost.
    fn write_records(&self, run_id: &RunId, records: &RunRecords<'_>) -> Result<(), StoreError> {
        let action = format!("cannot write the records of run {run_id}");
        let encode = |error: serde_json::Error| StoreError::backend(action.clone(), error);
        let written = Records {
            run_id: run_id.as_str().to_owned(),
            name: records.manifest.workflow_name.clone(),
            path: records.manifest.workflow_path.clone(),
            started: records.manifest.started_at.clone(),
            manifest: serde_json::to_string_pretty(records.manifest).map_err(encode)?,
            config: serde_json::to_string_pretty(records.config).map_err(encode)?,
            graph: records.graph.to_owned(),
            goal: records.manifest.goal.clone(),
            parent: records.manifest.parent_run_id.clone(),
            run_dir: records.run_dir.map(|dir| dir.display().to_string()),
            children: records.children.to_vec(),
            epoch: self.leases.fence(run_id)?,
        };
        let epoch = written.epoch;
        let pool = self.pool.clone();
        let updated = self.run(&action.clone(), async move {
            again("writing the records", || written.write(&pool))
                .await
                .map_err(backend(&action))
        })?;
        self.fenced(run_id, epoch, updated)?;
        self.listings.changed();
        Ok(())
    }

    fn read_manifest(&self, run_id: &RunId) -> Result<Manifest, StoreError> {
        self.record(run_id, "manifest")
    }

    fn read_config(&self, run_id: &RunId) -> Result<RunConfig, StoreError> {
        self.record(run_id, "config")
    }

    fn read_workflow(&self, run_id: &RunId) -> Result<StoredWorkflow, StoreError> {
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let action = format!("cannot read the workflow of run {run_id}");
        let (graph, children) = self.run(&action.clone(), async move {
            let mut transaction = pool.begin().await.map_err(backend(&action))?;
            let graph: Option<Option<String>> =
                sqlx::query_scalar("SELECT graph FROM runs WHERE run_id = $1")
                    .bind(&id)
                    .fetch_optional(&mut *transaction)
                    .await
                    .map_err(backend(&action))?;
            let children: Vec<(String, String)> = sqlx::query_as(
                "SELECT name, text FROM run_children WHERE run_id = $1 ORDER BY name",
            )
            .bind(&id)
            .fetch_all(&mut *transaction)
            .await
            .map_err(backend(&action))?;
            transaction.commit().await.map_err(backend(&action))?;
            Ok((graph.flatten(), children))
        })?;
        let graph = graph.ok_or_else(|| StoreError::Missing {
            run_id: run_id.clone(),
            record: "graph",
        })?;
        Ok(StoredWorkflow { graph, children })
    }

    fn open_checkpoints(
        &self,
        run_id: &RunId,
        opening: Opening,
    ) -> Result<Box<dyn CheckpointLog>, StoreError> {
        let last = match opening {
            Opening::New => None,
            Opening::Resume => self.load_checkpoint(run_id)?,
        };
        Ok(Box::new(PgCheckpointLog {
            writer: self.writer(run_id),
            records: fabro_engine::backend::JournalRecords::after(last),
            bytes: Vec::new(),
            since_whole: None,
        }))
    }

    /// The stored whole checkpoint with the journal records written after it replayed
    /// onto it (at most [`logs::RECORDS_PER_WHOLE`] of them).
    fn load_checkpoint(&self, run_id: &RunId) -> Result<Option<Checkpoint>, StoreError> {
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let action = format!("cannot read the checkpoint of run {run_id}");
        let row: Option<(String, Vec<String>)> = self.run(&action.clone(), async move {
            sqlx::query_as(
                "SELECT c.checkpoint, ARRAY(SELECT j.record FROM run_journal j \
                 WHERE j.run_id = c.run_id AND j.seq > c.seq ORDER BY j.seq) \
                 FROM run_checkpoints c WHERE c.run_id = $1",
            )
            .bind(&id)
            .fetch_optional(&pool)
            .await
            .map_err(backend(&action))
        })?;
        let Some((text, after)) = row else {
            return Ok(None);
        };
        let whole: Checkpoint = stored(&text, format!("the stored checkpoint of run {run_id}"))?;
        fabro_engine::backend::replay_records_onto(
            Some(whole),
            after.iter().map(String::as_str),
            &mut |_| {},
        )
        .map_err(|(position, message)| {
            StoreError::backend(
                format!("journal record {position} after the stored checkpoint of run {run_id} is not valid"),
                std::io::Error::other(message),
            )
        })
    }

    /// Nothing to do: a checkpoint is the one readers see as soon as it is written.
    fn publish_checkpoint(
        &self,
        _run_id: &RunId,
        _checkpoint: &Checkpoint,
    ) -> Result<(), StoreError> {
        Ok(())
    }

    /// The records of `run_journal`, by sequence: the first whole, then deltas.
    fn replay_checkpoints(
        &self,
        run_id: &RunId,
        visit: &mut dyn FnMut(&Checkpoint),
    ) -> Result<(), StoreError> {
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let action = format!("cannot read the checkpoints of run {run_id}");
        let records: Vec<String> = self.run(&action.clone(), async move {
            sqlx::query_scalar("SELECT record FROM run_journal WHERE run_id = $1 ORDER BY seq")
                .bind(&id)
                .fetch_all(&pool)
                .await
                .map_err(backend(&action))
        })?;
        fabro_engine::backend::replay_records(records.iter().map(String::as_str), visit)
            .map(|_| ())
            .map_err(|(position, message)| {
                StoreError::backend(
                    format!("journal record {position} of run {run_id} is not valid"),
                    std::io::Error::other(message),
                )
            })
    }

    fn pending_rewind(&self, run_id: &RunId) -> Result<Option<PendingRewind>, StoreError> {
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let action = format!("cannot read the pending rewind of run {run_id}");
        let text: Option<Option<String>> = self.run(&action.clone(), async move {
            sqlx::query_scalar("SELECT pending_rewind FROM runs WHERE run_id = $1")
                .bind(&id)
                .fetch_optional(&pool)
                .await
                .map_err(backend(&action))
        })?;
        text.flatten()
            .map(|text| stored(&text, format!("the pending rewind of run {run_id}")))
            .transpose()
    }

    fn set_pending_rewind(
        &self,
        run_id: &RunId,
        rewind: Option<&PendingRewind>,
    ) -> Result<(), StoreError> {
        let action = format!("cannot record the rewind of run {run_id}");
        let text = rewind
            .map(serde_json::to_string)
            .transpose()
            .map_err(|error| StoreError::backend(action.clone(), error))?;
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let updated = self.run(&action.clone(), async move {
            sqlx::query(
                "WITH changed AS (UPDATE runs SET pending_rewind = $2, revision = revision + 1 \
                 WHERE run_id = $1 RETURNING run_id) SELECT pg_notify($3, run_id) FROM changed",
            )
            .bind(&id)
            .bind(&text)
            .bind(RUNS_CHANNEL)
            .execute(&pool)
            .await
            .map(|done| done.rows_affected())
            .map_err(backend(&action))
        })?;
        self.listings.changed();
        if updated == 0 {
            return Err(StoreError::Missing {
                run_id: run_id.clone(),
                record: "manifest",
            });
        }
        Ok(())
    }

    fn open_events(&self, run_id: &RunId, opening: Opening) -> Result<OpenedEvents, StoreError> {
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let action = format!("cannot open the events of run {run_id}");
        let next_id: i64 = self.run(&action.clone(), async move {
            match opening {
                Opening::New => {
                    sqlx::query("DELETE FROM run_events WHERE run_id = $1")
                        .bind(&id)
                        .execute(&pool)
                        .await
                        .map_err(backend(&action))?;
                    Ok(1)
                }
                Opening::Resume => sqlx::query_scalar(
                    "SELECT coalesce(max(id), 0) + 1 FROM run_events WHERE run_id = $1",
                )
                .bind(&id)
                .fetch_one(&pool)
                .await
                .map_err(backend(&action)),
            }
        })?;
        Ok(OpenedEvents {
            log: Box::new(PgEventLog {
                writer: self.writer(run_id),
            }),
            next_id: u64::try_from(next_id).unwrap_or(1),
        })
    }

    fn read_events(&self, run_id: &RunId, from_id: u64) -> Result<Vec<EventEnvelope>, StoreError> {
        self.writers.settle(run_id);
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let from = i64::try_from(from_id).unwrap_or(i64::MAX);
        let action = format!("cannot read the events of run {run_id}");
        let lines: Vec<String> = self.run(&action.clone(), async move {
            sqlx::query_scalar(
                "SELECT envelope FROM run_events WHERE run_id = $1 AND id >= $2 ORDER BY id",
            )
            .bind(&id)
            .bind(from)
            .fetch_all(&pool)
            .await
            .map_err(backend(&action))
        })?;
        // Rows are stored whole, in their transaction: one that does not parse is damage
        // to report, not a torn last line to pass over.
        lines
            .iter()
            .map(|line| stored(line, format!("an event of run {run_id}")))
            .collect()
    }

    fn register_start(&self, manifest: &Manifest, run_dir: &Path) -> Result<(), StoreError> {
        let pool = self.pool.clone();
        let id = manifest.run_id.clone();
        let run_dir = run_dir.display().to_string();
        let action = format!("cannot register the start of run {id}");
        let run = RunId::from(id.as_str());
        let epoch = self.leases.fence(&run)?;
        let updated = self.run(&action.clone(), async move {
            again("registering the start", || {
                sqlx::query(
                    "WITH changed AS (UPDATE runs SET status = 'running', run_dir = $2, \
                 finished_at = NULL, revision = revision + 1, resume_request = NULL, \
                 cancel_requested = ($4::bigint IS NOT NULL AND cancel_requested) \
                 WHERE run_id = $1 AND ($4::bigint IS NULL OR lease_epoch = $4) \
                 RETURNING run_id) SELECT pg_notify($3, run_id) FROM changed",
                )
                .bind(&id)
                .bind(&run_dir)
                .bind(RUNS_CHANNEL)
                .bind(epoch)
                .execute(&pool)
            })
            .await
            .map(|done| done.rows_affected())
            .map_err(backend(&action))
        })?;
        self.fenced(&run, epoch, updated)?;
        self.listings.changed();
        Ok(())
    }

    fn register_end(&self, run_id: &RunId, status: RunStatus) -> Result<(), StoreError> {
        // The run's last events first: a stream that sees the end has them.
        self.writers.settle(run_id);
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let action = format!("cannot register the end of run {run_id}");
        let epoch = self.leases.fence(run_id)?;
        let updated = self.run(&action.clone(), async move {
            again("registering the end", || {
                sqlx::query(
                    "WITH changed AS (UPDATE runs SET status = $2, finished_at = \
                 to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), \
                 revision = revision + 1 WHERE run_id = $1 \
                 AND ($4::bigint IS NULL OR lease_epoch = $4) RETURNING run_id) \
                 SELECT pg_notify($3, run_id) FROM changed",
                )
                .bind(&id)
                .bind(status.as_str())
                .bind(RUNS_CHANNEL)
                .bind(epoch)
                .execute(&pool)
            })
            .await
            .map(|done| done.rows_affected())
            .map_err(backend(&action))
        })?;
        self.fenced(run_id, epoch, updated)?;
        self.listings.changed();
        Ok(())
    }

    /// Runs with a manifest, newest first; a `running` run nobody holds is
    /// [`RunStatus::Interrupted`].
    fn list_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        self.read_listed().map(|(records, _)| records)
    }

    /// Kept while nothing changes it (see [`listing`](self::listing)).
    fn listing(&self) -> Result<fabro_engine::local::Listing, StoreError> {
        self.kept_listing()
    }

    fn cached_listing(&self) -> Option<fabro_engine::local::Listing> {
        self.current_listing()
    }

    /// From the kept listing, else from the rows the argument matches, read now (a run
    /// another process made a moment ago may not be listed yet).
    fn resolve(&self, run: &str) -> Result<std::sync::Arc<RunRecord>, StoreError> {
        if let Some(found) = self
            .current_listing()
            .and_then(|listing| listing.find(run).ok())
        {
            return Ok(found);
        }
        Ok(fabro_engine::local::Listing::of(self.read_matching(run)?).find(run)?)
    }

    /// Only what the kept listing finds; a miss is asked of the store by `resolve`.
    fn resolve_cached(&self, run: &str) -> Option<Result<std::sync::Arc<RunRecord>, StoreError>> {
        self.current_listing()?.find(run).ok().map(Ok)
    }

    fn record_stamps(&self, run_id: &RunId) -> Option<fabro_engine::RecordStamps> {
        self.stamps_of(run_id)
    }

    fn checkpoint_stamp(&self, run_id: &RunId) -> Option<Option<(u64, std::time::SystemTime)>> {
        self.stamps_of(run_id).map(|stamps| stamps.checkpoint)
    }

    fn record_parts(&self, record: &RunRecord) -> Result<RecordParts, StoreError> {
        fabro_engine::backend::stored_record_parts(self, record)
    }

    fn stages(&self, run_id: &RunId) -> Result<Vec<StoredStage>, StoreError> {
        self.writers.settle(run_id);
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let action = format!("cannot read the stages of run {run_id}");
        let rows: Vec<StageRow> = self.run(&action.clone(), async move {
            sqlx::query_as(
                "SELECT rank, node_id, visit, status, files FROM run_stages \
                     WHERE run_id = $1 ORDER BY rank, node_id, visit",
            )
            .bind(&id)
            .fetch_all(&pool)
            .await
            .map_err(backend(&action))
        })?;
        Ok(rows.into_iter().map(stored_stage).collect())
    }

    fn stage_file(
        &self,
        run_id: &RunId,
        rank: u32,
        name: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        self.read_stage_file(run_id, rank, name)
    }

    /// Replaces the row of the stage's rank and its files, in one transaction: queued on
    /// the run's writer while it executes here, written at once otherwise.
    fn save_stage(&self, run_id: &RunId, stage: &StageDir) -> Result<(), StoreError> {
        let stage = SavedStage::new(StageCopy::read(stage)?);
        let action = format!("cannot save stage {} of run {run_id}", stage.rank());
        if let Some(writer) = self.writers.get(run_id) {
            return writer
                .save_stage(stage)
                .map_err(|error| StoreError::backend(action, std::io::Error::other(error)));
        }
        let (pool, fast) = (self.pool.clone(), self.fast.clone());
        let epoch = self.leases.fence(run_id)?;
        let id = run_id.as_str().to_owned();
        let held = self.run(&action.clone(), async move {
            Batch::stage(stage)
                .write(&id, &pool, &fast, epoch)
                .await
                .map_err(backend(&action))
        })?;
        self.fenced(run_id, epoch, u64::from(held))
    }

    fn event_reader(&self, run_id: &RunId, after: u64) -> Box<dyn EventReader> {
        Box::new(PgEventReader {
            pool: self.pool.clone(),
            bridge: self.bridge.clone(),
            run_id: run_id.clone(),
            after,
            writers: self.writers.clone(),
        })
    }

    /// Placed after the run's last event by one query now.
    fn event_tail(&self, run_id: &RunId) -> Box<dyn EventReader> {
        let after = self.max_event_id(run_id).unwrap_or(0);
        self.event_reader(run_id, after)
    }

    fn last_event_id(&self, run_id: &RunId) -> u64 {
        self.max_event_id(run_id).unwrap_or(0)
    }

    fn rewind_stages(&self, run_id: &RunId, k: u32, after: u32) -> Result<(), StoreError> {
        self.move_to_rewound(run_id, k, after)
    }

    fn rewound_stages(&self, run_id: &RunId) -> Result<Vec<(u32, Vec<StoredStage>)>, StoreError> {
        self.read_rewound(run_id)
    }

    fn notices(&self) -> Option<tokio::sync::broadcast::Receiver<Notice>> {
        self.subscribe()
    }

    fn request_cancel(&self, run_id: &RunId) -> Result<bool, StoreError> {
        self.record_cancel_request(run_id)
    }

    fn cancel_requested(&self, run_id: &RunId) -> Result<bool, StoreError> {
        self.read_cancel_request(run_id)
    }

    fn queue(&self) -> Option<&dyn fabro_engine::RunQueue> {
        Some(self)
    }

    fn steering(&self) -> Option<&dyn fabro_engine::SteeringStore> {
        Some(self)
    }

    fn set_pending_question(
        &self,
        run_id: &RunId,
        question: Option<&Question>,
    ) -> Result<(), StoreError> {
        self.record_question(run_id, question)
    }

    fn pending_question(&self, run_id: &RunId) -> Result<Option<Question>, StoreError> {
        self.open_question(run_id)
    }

    fn file_answer(&self, run_id: &RunId, answer: &FiledAnswer) -> Result<(), StoreError> {
        self.record_answer(run_id, answer)
    }

    fn take_answer(
        &self,
        run_id: &RunId,
        question_id: &str,
    ) -> Result<Option<FiledAnswer>, StoreError> {
        self.taken_answer(run_id, question_id)
    }

    fn withdraw_answer(&self, run_id: &RunId, question_id: &str) -> Result<bool, StoreError> {
        self.withdrawn_answer(run_id, question_id)
    }

    fn answer_waiting(&self, run_id: &RunId, question_id: &str) -> Result<bool, StoreError> {
        self.waiting_answer(run_id, question_id)
    }
}

impl PgRunStore {
    /// The writer of `run_id`'s logs (see [`writer`]).
    fn writer(&self, run_id: &RunId) -> std::sync::Arc<RunWriter> {
        self.writers.open(
            &self.bridge,
            run_id,
            (&self.pool, &self.fast),
            self.leases.get(run_id.as_str()),
        )
    }

    /// The id of the run's last stored event, 0 when it has none.
    fn max_event_id(&self, run_id: &RunId) -> Result<u64, StoreError> {
        self.writers.settle(run_id);
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let action = format!("cannot read the events of run {run_id}");
        let last: i64 = self.run(&action.clone(), async move {
            sqlx::query_scalar("SELECT coalesce(max(id), 0) FROM run_events WHERE run_id = $1")
                .bind(&id)
                .fetch_one(&pool)
                .await
                .map_err(backend(&action))
        })?;
        Ok(u64::try_from(last).unwrap_or(0))
    }

    /// A run's `manifest.json` (`"manifest"`) or `config.json` (`"config"`) text;
    /// `None` when the run or the record is missing.
    fn record_text(
        &self,
        run_id: &RunId,
        record: &'static str,
    ) -> Result<Option<String>, StoreError> {
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let action = format!("cannot read the {record} of run {run_id}");
        let query = if record == "config" {
            "SELECT config FROM runs WHERE run_id = $1"
        } else {
            "SELECT manifest FROM runs WHERE run_id = $1"
        };
        self.run(&action.clone(), async move {
            let row: Option<Option<String>> = sqlx::query_scalar(query)
                .bind(&id)
                .fetch_optional(&pool)
                .await
                .map_err(backend(&action))?;
            Ok(row.flatten())
        })
    }

    /// A record of a run, parsed; [`StoreError::Missing`] when it is not stored.
    fn record<T: serde::de::DeserializeOwned>(
        &self,
        run_id: &RunId,
        record: &'static str,
    ) -> Result<T, StoreError> {
        let text = self
            .record_text(run_id, record)?
            .ok_or_else(|| StoreError::Missing {
                run_id: run_id.clone(),
                record,
            })?;
        stored(&text, format!("the stored {record} of run {run_id}"))
    }
}

mod leases;
mod listing;
mod logs;
mod notices;
mod questions;
mod records;
mod rewound;
mod stage_files;
mod steering;
mod writer;

#[cfg(test)]
mod tests;
