//! The logs and the lease a [`PgRunStore`](super::PgRunStore) opens for a run: its lock
//! (a connection holding an advisory lock), its checkpoint log, its event log and its
//! event readers.

use fabro_engine::backend::{
    ChangeHint, Checkpoint, CheckpointError, CheckpointLog, CheckpointView, EventLog,
    JournalRecords, RunLease,
};
use fabro_engine::{EventReader, RunId, StoreError, StoredEvent};
use sqlx::postgres::{PgConnection, PgPool};
use sqlx::Connection;

use super::{backend, EVENTS_CHANNEL};
use crate::bridge::Bridge;

/// A run's lock: the connection that holds its advisory lock. Dropping it closes the
/// connection, which releases the lock.
pub(super) struct PgLease {
    pub(super) connection: Option<PgConnection>,
    pub(super) bridge: Bridge,
}

impl std::fmt::Debug for PgLease {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("PgLease").finish_non_exhaustive()
    }
}

impl RunLease for PgLease {}

impl Drop for PgLease {
    fn drop(&mut self) {
        if let Some(connection) = self.connection.take() {
            // Closing ends the session and with it the lock; a failure to close
            // cleanly ends it as surely when the socket goes.
            let _ = self.bridge.run(async move {
                let _ = connection.close().await;
            });
        }
    }
}

/// A run's checkpoints: each write appends its journal record (the first checkpoint
/// whole, then what changed, as the local journal) and replaces the newest, in one
/// statement.
#[derive(Debug)]
pub(super) struct PgCheckpointLog {
    pub(super) pool: PgPool,
    pub(super) bridge: Bridge,
    pub(super) run_id: RunId,
    pub(super) records: JournalRecords,
    pub(super) bytes: Vec<u8>,
}

impl CheckpointLog for PgCheckpointLog {
    fn write(
        &mut self,
        checkpoint: &CheckpointView<'_>,
        hint: &ChangeHint<'_>,
    ) -> Result<&[u8], CheckpointError> {
        let run = self.run_id.clone();
        let failed = |source: Box<dyn std::error::Error + Send + Sync>| {
            CheckpointError::Backend(format!("run {run}: {source}").into())
        };
        let text = serde_json::to_string(checkpoint).map_err(|error| failed(Box::new(error)))?;
        // A write that fails stops the run (an engine error): the log is not written again,
        // and a resume opens another from what is stored.
        let record = self
            .records
            .record(checkpoint, hint)
            .map_err(|error| failed(Box::new(error)))?;
        let record = String::from_utf8_lossy(record).into_owned();
        let pool = self.pool.clone();
        let run_id = self.run_id.as_str().to_owned();
        let full = text.clone();
        let stored = self.bridge.run(async move {
            // One statement, so one round trip and one transaction. A new run's first
            // checkpoint comes before its records (a run killed between the two has its
            // checkpoint, as with the local store): its row is made here, without a
            // manifest, so that no listing shows it until the records arrive. The
            // foreign keys are checked at the end of the statement, when the row exists.
            sqlx::query(
                "WITH made AS (INSERT INTO runs (run_id, workflow_name, status) \
                 VALUES ($1, '', 'running') ON CONFLICT (run_id) DO NOTHING), \
                 journaled AS (INSERT INTO run_journal (run_id, seq, record) \
                 SELECT $1, coalesce(max(seq), 0) + 1, $2 FROM run_journal WHERE run_id = $1) \
                 INSERT INTO run_checkpoints (run_id, checkpoint) VALUES ($1, $3) \
                 ON CONFLICT (run_id) DO UPDATE SET checkpoint = $3, updated_at = now()",
            )
            .bind(&run_id)
            .bind(&record)
            .bind(&full)
            .execute(&pool)
            .await
            .map(|_| ())
        });
        match stored {
            Some(Ok(())) => {}
            Some(Err(error)) => return Err(failed(Box::new(error))),
            None => return Err(failed("the store's thread stopped".into())),
        }
        self.bytes = text.into_bytes();
        self.bytes.push(b'\n');
        Ok(&self.bytes)
    }

    fn last(&self) -> Option<&Checkpoint> {
        self.records.last()
    }
}

/// A run's events: each append stores the envelope under its id and wakes the streams
/// of every server with `NOTIFY`, in one statement (on the store's pool of
/// asynchronous commits).
pub(super) struct PgEventLog {
    pub(super) pool: PgPool,
    pub(super) bridge: Bridge,
    pub(super) run_id: RunId,
}

/// The id of a serialised envelope.
#[derive(serde::Deserialize)]
struct EnvelopeId {
    id: u64,
}

impl EventLog for PgEventLog {
    fn append(&mut self, line: &[u8]) -> std::io::Result<()> {
        let text = std::str::from_utf8(line)
            .map_err(std::io::Error::other)?
            .trim_end_matches('\n')
            .to_owned();
        let id: EnvelopeId = serde_json::from_str(&text).map_err(std::io::Error::other)?;
        let id = i64::try_from(id.id).map_err(std::io::Error::other)?;
        let pool = self.pool.clone();
        let run_id = self.run_id.as_str().to_owned();
        self.bridge
            .run(async move {
                // One statement, so one round trip; the notification goes out when it
                // commits.
                sqlx::query(
                    "WITH stored AS (INSERT INTO run_events (run_id, id, envelope) \
                     VALUES ($1, $2, $3) RETURNING run_id) \
                     SELECT pg_notify($4, run_id) FROM stored",
                )
                .bind(&run_id)
                .bind(id)
                .bind(&text)
                .bind(EVENTS_CHANNEL)
                .execute(&pool)
                .await
                .map(|_| ())
            })
            .ok_or_else(|| std::io::Error::other("the store's thread stopped"))?
            .map_err(std::io::Error::other)
    }
}

/// Reads a run's events from `run_events`, by id.
pub(super) struct PgEventReader {
    pub(super) pool: PgPool,
    pub(super) bridge: Bridge,
    pub(super) run_id: RunId,
    pub(super) after: u64,
}

impl EventReader for PgEventReader {
    fn read_new(&mut self) -> Result<Vec<StoredEvent>, StoreError> {
        let pool = self.pool.clone();
        let id = self.run_id.as_str().to_owned();
        let after = i64::try_from(self.after).unwrap_or(i64::MAX);
        let action = format!("cannot read the events of run {}", self.run_id);
        let lines: Vec<String> = self
            .bridge
            .run({
                let action = action.clone();
                async move {
                    sqlx::query_scalar(
                        "SELECT envelope FROM run_events WHERE run_id = $1 AND id > $2 \
                         ORDER BY id",
                    )
                    .bind(&id)
                    .bind(after)
                    .fetch_all(&pool)
                    .await
                    .map_err(backend(&action))
                }
            })
            .unwrap_or_else(|| Err(backend(&action)(sqlx::Error::PoolClosed)))?;
        let events: Vec<StoredEvent> = lines
            .iter()
            .filter_map(|line| StoredEvent::parse(line.as_bytes()))
            .collect();
        if let Some(last) = events.last() {
            self.after = last.id;
        }
        Ok(events)
    }
}
