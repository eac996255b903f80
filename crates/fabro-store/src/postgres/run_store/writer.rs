//! A run's writer: the events and stage saves of a run that executes here go to a queue
//! instead of a round trip each, and a task on the store's bridge writes what waits in
//! one statement; a checkpoint closes the statement it joins and its writer waits for it
//! (a synchronous commit, which makes what came before it durable too).
//!
//! So a stage costs the engine the round trip of its checkpoint and, at most, that of
//! the statement already under way, instead of one per event and per save. What is
//! queued is written in order, before anything queued after it; the first failure is
//! kept and refuses every later write of the run (the run stops as an engine error, as
//! when an append fails), and reads of the run through this store wait for what is
//! queued, so a process reads its own writes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use fabro_engine::backend::StageCopy;
use fabro_engine::RunId;
use sqlx::postgres::PgPool;
use tokio::sync::mpsc;

use super::super::retry::{connection_lost, next_pause, RETRY_PATIENCE};
use super::leases::Held;
use super::EVENTS_CHANNEL;
use crate::bridge::Bridge;

/// The statement of a batch, `$events` closing the events' insert and `$journal` the
/// journal's condition (see [`WRITE_AGAIN`]).
macro_rules! write_statement {
    ($events:literal, $journal:literal) => {
        concat!(
            "WITH fence AS (SELECT run_id FROM runs WHERE $15::bigint IS NOT NULL \
     AND run_id = $1 AND lease_epoch = $15 FOR SHARE), \
     go AS (SELECT 1 WHERE $15::bigint IS NULL OR EXISTS (SELECT 1 FROM fence)), \
     ev AS (INSERT INTO run_events (run_id, id, envelope) \
     SELECT $1, i, e FROM unnest($2::bigint[], $3::text[]) AS t(i, e), go ",
            $events,
            " RETURNING id), \
     st AS (INSERT INTO run_stages (run_id, rank, node_id, visit, status, files) \
     SELECT $1, r, n, v, s, ARRAY(SELECT json_array_elements_text(f::json)) \
     FROM unnest($4::bigint[], $5::text[], $6::bigint[], $7::text[], $8::text[]) \
     AS t(r, n, v, s, f), go ON CONFLICT (run_id, rank) DO UPDATE SET node_id = excluded.node_id, \
     visit = excluded.visit, status = excluded.status, files = excluded.files), \
     dropped AS (DELETE FROM stage_files WHERE run_id = $1 AND path LIKE ANY ($9::text[]) \
     AND NOT (path = ANY ($10::text[])) AND EXISTS (SELECT 1 FROM go)), \
     filed AS (INSERT INTO stage_files (run_id, path, content) \
     SELECT $1, p, c FROM unnest($10::text[], $11::bytea[]) AS f(p, c), go \
     ON CONFLICT (run_id, path) DO UPDATE SET content = excluded.content, blob = NULL), \
     made AS (INSERT INTO runs (run_id, workflow_name, status) \
     SELECT $1, '', 'running' FROM go WHERE $12::text IS NOT NULL ON CONFLICT (run_id) DO NOTHING), \
     journaled AS (INSERT INTO run_journal (run_id, seq, record) \
     SELECT $1, coalesce(max(seq), 0) + 1, $12::text FROM run_journal WHERE run_id = $1 \
     HAVING $12::text IS NOT NULL AND EXISTS (SELECT 1 FROM go)",
            $journal,
            " RETURNING seq), \
     kept AS (INSERT INTO run_checkpoints (run_id, checkpoint, seq) \
     SELECT $1, $13::text, coalesce((SELECT seq FROM journaled), \
     (SELECT max(seq) FROM run_journal WHERE run_id = $1)) FROM go WHERE $13::text IS NOT NULL \
     ON CONFLICT (run_id) DO UPDATE SET checkpoint = excluded.checkpoint, seq = excluded.seq, \
     updated_at = now()), \
     touched AS (UPDATE run_checkpoints SET updated_at = now() WHERE run_id = $1 \
     AND $12::text IS NOT NULL AND $13::text IS NULL AND EXISTS (SELECT 1 FROM go)), \
     notified AS (SELECT pg_notify($14, $1) FROM go WHERE EXISTS (SELECT 1 FROM ev)) \
     SELECT EXISTS (SELECT 1 FROM go), (SELECT count(*) FROM notified)"
        )
    };
}

/// One statement for everything a batch holds: its events (and the `NOTIFY` that
/// wakes streams when there are any), its stages with their files (the files a stage no
/// longer has removed), and its checkpoint (the journal record, and the whole
/// checkpoint with the record's `seq` when the log stores it whole, else only the
/// checkpoint's time; a new run's row made, without a manifest, when the checkpoint
/// comes before the records). Parts with nothing to write insert no rows; no row is touched
/// twice, as one statement requires (a batch keeps one save per stage).
///
/// A run a worker holds (SPEC 18.2) passes its lease epoch (`$15`): the run's row is
/// share-locked where it still has that epoch (a claim that moved it on waits for the
/// statement, or the statement finds the row changed), and nothing is written when it
/// has not; the statement answers whether it wrote.
const WRITE: &str = write_statement!("", "");

/// [`WRITE`] for a batch written again after its connection was lost, which may have
/// been committed before: events already stored by id are kept, and the journal record
/// is not appended again when it is the newest.
const WRITE_AGAIN: &str = write_statement!(
    "ON CONFLICT (run_id, id) DO NOTHING",
    " AND (SELECT record FROM run_journal WHERE run_id = $1 ORDER BY seq DESC LIMIT 1) \
     IS DISTINCT FROM $12::text"
);

/// A stage as saved: its row and its files under `{rank}/{name}`.
#[derive(Debug)]
pub(super) struct SavedStage {
    rank: i64,
    node_id: String,
    visit: i64,
    status: Option<String>,
    files: Vec<String>,
    contents: Vec<(String, Vec<u8>)>,
}

impl SavedStage {
    /// The save of `copy`, a stage directory as read now.
    pub(super) fn new(copy: StageCopy) -> SavedStage {
        let rank = i64::from(copy.stage.rank);
        let status = copy
            .contents
            .iter()
            .find(|(name, _)| name == "status.json")
            .map(|(_, bytes)| String::from_utf8_lossy(bytes).into_owned());
        SavedStage {
            rank,
            node_id: copy.stage.node_id,
            visit: i64::from(copy.stage.visit),
            status,
            files: copy.stage.files,
            contents: copy
                .contents
                .into_iter()
                .map(|(name, bytes)| (format!("{rank}/{name}"), bytes))
                .collect(),
        }
    }

    /// The rank, for errors.
    pub(super) fn rank(&self) -> i64 {
        self.rank
    }
}

/// What one statement writes.
#[derive(Debug, Default)]
pub(super) struct Batch {
    events: Vec<(i64, String)>,
    stages: Vec<SavedStage>,
    /// The journal record and, when it is stored this time, the whole checkpoint.
    checkpoint: Option<(String, Option<String>)>,
}

impl Batch {
    /// A batch of one stage save.
    pub(super) fn stage(stage: SavedStage) -> Batch {
        Batch {
            stages: vec![stage],
            ..Batch::default()
        }
    }

    /// Adds `stage`; a later save of the same rank replaces the earlier (a save copies
    /// the whole stage directory).
    fn add_stage(&mut self, stage: SavedStage) {
        match self
            .stages
            .iter_mut()
            .find(|saved| saved.rank == stage.rank)
        {
            Some(saved) => *saved = stage,
            None => self.stages.push(stage),
        }
    }

    fn is_empty(&self) -> bool {
        self.events.is_empty() && self.stages.is_empty() && self.checkpoint.is_none()
    }

    /// Writes the batch in one statement: with a synchronous commit on `pool` when it
    /// holds a checkpoint, on `fast` (commits that do not wait for their WAL to be
    /// flushed; the next checkpoint flushes them) otherwise. `false` when the run's
    /// lease has moved on from `epoch` and nothing was written.
    pub(super) async fn write(
        self,
        run_id: &str,
        pool: &PgPool,
        fast: &PgPool,
        epoch: Option<i64>,
    ) -> Result<bool, sqlx::Error> {
        if self.is_empty() {
            return Ok(true);
        }
        Columns::of(self)
            .write(WRITE, run_id, (pool, fast), epoch)
            .await
    }
}

/// A batch as the arrays its statement binds.
#[derive(Debug, Default)]
struct Columns {
    ids: Vec<i64>,
    envelopes: Vec<String>,
    ranks: Vec<i64>,
    nodes: Vec<String>,
    visits: Vec<i64>,
    statuses: Vec<Option<String>>,
    files: Vec<String>,
    patterns: Vec<String>,
    paths: Vec<String>,
    contents: Vec<Vec<u8>>,
    record: Option<String>,
    checkpoint: Option<String>,
}

impl Columns {
    fn of(batch: Batch) -> Columns {
        let (ids, envelopes) = batch.events.into_iter().unzip();
        let (record, checkpoint) = batch.checkpoint.unzip();
        let mut columns = Columns {
            ids,
            envelopes,
            record,
            checkpoint: checkpoint.flatten(),
            ..Columns::default()
        };
        for stage in batch.stages {
            columns.ranks.push(stage.rank);
            columns.nodes.push(stage.node_id);
            columns.visits.push(stage.visit);
            columns.statuses.push(stage.status);
            columns
                .files
                .push(serde_json::Value::from(stage.files).to_string());
            columns.patterns.push(format!("{}/%", stage.rank));
            for (path, bytes) in stage.contents {
                columns.paths.push(path);
                columns.contents.push(bytes);
            }
        }
        columns
    }

    /// Runs `statement` ([`WRITE`] or [`WRITE_AGAIN`]) over the columns.
    async fn write(
        &self,
        statement: &'static str,
        run_id: &str,
        (pool, fast): (&PgPool, &PgPool),
        epoch: Option<i64>,
    ) -> Result<bool, sqlx::Error> {
        let pool = if self.record.is_some() { pool } else { fast };
        sqlx::query_as(statement)
            .bind(run_id)
            .bind(&self.ids[..])
            .bind(&self.envelopes[..])
            .bind(&self.ranks[..])
            .bind(&self.nodes[..])
            .bind(&self.visits[..])
            .bind(&self.statuses[..])
            .bind(&self.files[..])
            .bind(&self.patterns[..])
            .bind(&self.paths[..])
            .bind(&self.contents[..])
            .bind(&self.record)
            .bind(&self.checkpoint)
            .bind(EVENTS_CHANNEL)
            .bind(epoch)
            .fetch_one(pool)
            .await
            .map(|row: (bool, i64)| row.0)
    }
}

/// Writes `batch`, again (idempotently) while the connection is lost, for at most
/// [`RETRY_PATIENCE`]; `Ok(false)` when the lease moved on, `Err` with the run's
/// failure otherwise.
async fn write_batch(
    batch: Batch,
    run_id: &str,
    pools: (&PgPool, &PgPool),
    held: Option<&Held>,
) -> Result<bool, String> {
    if batch.is_empty() {
        return Ok(true);
    }
    let columns = Columns::of(batch);
    let deadline = Instant::now() + RETRY_PATIENCE;
    let mut pause = Duration::from_millis(50);
    let mut statement = WRITE;
    loop {
        let epoch = held
            .map(Held::epoch)
            .transpose()
            .map_err(|error| error.to_string())?;
        match columns.write(statement, run_id, pools, epoch).await {
            Ok(written) => return Ok(written),
            Err(error) if connection_lost(&error) && Instant::now() < deadline => {
                tracing::warn!(%run_id, %error, "lost the store's connection while writing; writing again");
                tokio::time::sleep(pause).await;
                pause = next_pause(pause);
                statement = WRITE_AGAIN;
            }
            Err(error) => {
                tracing::error!(%run_id, %error, "cannot write to the shared store; the run stops");
                return Err(format!("run {run_id}: {error}"));
            }
        }
    }
}

/// A reply to a writer waiting for its write: the run's first failure, if any.
type Reply = std::sync::mpsc::SyncSender<Result<(), String>>;

enum Item {
    Event {
        id: i64,
        text: String,
    },
    Stage(SavedStage),
    Checkpoint {
        record: String,
        whole: Option<String>,
        done: Reply,
    },
    Flush(Reply),
}

/// The queue of one run's writes and the task that writes them.
#[derive(Debug)]
pub(super) struct RunWriter {
    queue: mpsc::UnboundedSender<Item>,
    /// Items sent, and items the task has written (or refused).
    sent: AtomicU64,
    done: Arc<AtomicU64>,
    /// The first write that failed: every later one is refused with it.
    failure: Arc<OnceLock<String>>,
    /// The lease it writes under, if any: a later claim of the run gets a writer of
    /// its own.
    held: Option<Arc<Held>>,
}

impl RunWriter {
    /// An error once the lease the writer writes under is lost or ran out unrenewed.
    pub(super) fn check_lease(&self) -> Result<(), fabro_engine::StoreError> {
        self.held
            .as_ref()
            .map_or(Ok(()), |held| held.epoch().map(drop))
    }

    /// Starts the writer of `run_id` on `bridge`; a run this store holds the lease of
    /// (`held`) writes with its epoch.
    fn start(
        bridge: &Bridge,
        run_id: &RunId,
        (pool, fast): (&PgPool, &PgPool),
        held: Option<Arc<Held>>,
    ) -> RunWriter {
        let (queue, items) = mpsc::unbounded_channel();
        let done = Arc::new(AtomicU64::new(0));
        let failure = Arc::new(OnceLock::new());
        bridge.spawn(drain(
            run_id.as_str().to_owned(),
            items,
            (pool.clone(), fast.clone(), held.clone()),
            done.clone(),
            failure.clone(),
        ));
        RunWriter {
            queue,
            sent: AtomicU64::new(0),
            done,
            failure,
            held,
        }
    }

    fn send(&self, item: Item) -> Result<(), String> {
        if let Some(failure) = self.failure.get() {
            return Err(failure.clone());
        }
        self.sent.fetch_add(1, Ordering::SeqCst);
        self.queue
            .send(item)
            .map_err(|_| "the store's thread stopped".to_owned())
    }

    /// Sends `item` made with a reply channel and waits for its reply.
    fn wait(&self, item: impl FnOnce(Reply) -> Item) -> Result<(), String> {
        let (reply, replied) = std::sync::mpsc::sync_channel(1);
        self.send(item(reply))?;
        replied
            .recv()
            .unwrap_or_else(|_| Err("the store's thread stopped".to_owned()))
    }

    /// Queues event `id`, serialised as `text`.
    pub(super) fn append(&self, id: i64, text: String) -> Result<(), String> {
        self.send(Item::Event { id, text })
    }

    /// Queues the save of `stage`.
    pub(super) fn save_stage(&self, stage: SavedStage) -> Result<(), String> {
        self.send(Item::Stage(stage))
    }

    /// Writes a checkpoint (its journal `record` and, when given, the `whole` newest
    /// checkpoint) after everything queued, and waits for it.
    pub(super) fn checkpoint(&self, record: String, whole: Option<String>) -> Result<(), String> {
        self.wait(|done| Item::Checkpoint {
            record,
            whole,
            done,
        })
    }

    /// Waits until everything queued is written; the run's first failure, if any.
    pub(super) fn flush(&self) -> Result<(), String> {
        if self.done.load(Ordering::SeqCst) >= self.sent.load(Ordering::SeqCst) {
            return self
                .failure
                .get()
                .map_or(Ok(()), |failure| Err(failure.clone()));
        }
        self.wait(Item::Flush)
    }

    fn failed(&self) -> bool {
        self.failure.get().is_some()
    }
}

/// Writes the items of `items` in order, as many as wait at once in one statement, a
/// checkpoint last.
async fn drain(
    run_id: String,
    mut items: mpsc::UnboundedReceiver<Item>,
    (pool, fast, held): (PgPool, PgPool, Option<Arc<Held>>),
    done: Arc<AtomicU64>,
    failure: Arc<OnceLock<String>>,
) {
    while let Some(first) = items.recv().await {
        let mut batch = Batch::default();
        let mut replies = Vec::new();
        let mut count = 0;
        let mut next = Some(first);
        while let Some(item) = next.take() {
            count += 1;
            match item {
                Item::Event { id, text } => batch.events.push((id, text)),
                Item::Stage(stage) => batch.add_stage(stage),
                Item::Flush(reply) => replies.push(reply),
                Item::Checkpoint {
                    record,
                    whole,
                    done,
                } => {
                    batch.checkpoint = Some((record, whole));
                    replies.push(done);
                    break;
                }
            }
            next = items.try_recv().ok();
        }
        if failure.get().is_none() {
            match write_batch(batch, &run_id, (&pool, &fast), held.as_deref()).await {
                Ok(true) => {}
                Ok(false) => {
                    if let Some(held) = &held {
                        held.lose("another worker claimed it");
                    }
                    let _ = failure.set(format!("lost the lease of run {run_id}"));
                }
                Err(error) => {
                    let _ = failure.set(error);
                }
            }
        }
        done.fetch_add(count, Ordering::SeqCst);
        let outcome = failure.get().map_or(Ok(()), |failure| Err(failure.clone()));
        for reply in replies {
            let _ = reply.send(outcome.clone());
        }
    }
}

/// The writers of the runs that execute through one store, by run id.
#[derive(Debug, Default, Clone)]
pub(super) struct Writers {
    writers: Arc<Mutex<HashMap<String, Weak<RunWriter>>>>,
}

impl Writers {
    /// The writer of `run_id`: the one its logs share while they live and it has not
    /// failed, a new one otherwise.
    pub(super) fn open(
        &self,
        bridge: &Bridge,
        run_id: &RunId,
        pools: (&PgPool, &PgPool),
        held: Option<Arc<Held>>,
    ) -> Arc<RunWriter> {
        let mut writers = self
            .writers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(writer) = writers.get(run_id.as_str()).and_then(Weak::upgrade) {
            let same_lease = match (&writer.held, &held) {
                (Some(old), Some(new)) => Arc::ptr_eq(old, new),
                (old, new) => old.is_none() && new.is_none(),
            };
            if !writer.failed() && same_lease {
                return writer;
            }
        }
        writers.retain(|_, writer| writer.strong_count() > 0);
        let writer = Arc::new(RunWriter::start(bridge, run_id, pools, held));
        writers.insert(run_id.as_str().to_owned(), Arc::downgrade(&writer));
        writer
    }

    /// The live writer of `run_id`, if one is open.
    pub(super) fn get(&self, run_id: &RunId) -> Option<Arc<RunWriter>> {
        self.writers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(run_id.as_str())
            .and_then(Weak::upgrade)
    }

    /// Waits for what is queued for `run_id`, so that a read sees this process's own
    /// writes; a failed write is the run's to report, not the reader's.
    pub(super) fn settle(&self, run_id: &RunId) {
        if let Some(writer) = self.get(run_id) {
            let _ = writer.flush();
        }
    }
}
