//! The logs and the lease a [`PgRunStore`](super::PgRunStore) opens for a run: its lock
//! (a connection holding an advisory lock), its checkpoint log and its event log (both
//! written by the run's [`RunWriter`]), and its event readers.

use std::sync::Arc;

use fabro_engine::backend::{
    ChangeHint, Checkpoint, CheckpointError, CheckpointLog, CheckpointView, EventLog,
    JournalRecords, RunLease,
};
use fabro_engine::{EventReader, RunId, RunStatus, StoreError, StoredEvent};
use sqlx::postgres::{PgConnection, PgPool};
use sqlx::Connection;

use super::backend;
use super::writer::{RunWriter, Writers};
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

/// How many journal records may follow the stored whole checkpoint: a write stores the
/// whole checkpoint only every so many records (and when the run's status is no longer
/// `running`), so that a stage costs its record and not the size of the run's state
/// (about 100 KB after 1,000 stages); a reader replays at most this many records onto
/// it.
pub(super) const RECORDS_PER_WHOLE: u32 = 64;

/// A run's checkpoints: each write appends its journal record (the first checkpoint
/// whole, then what changed, as the local journal) and, every [`RECORDS_PER_WHOLE`]
/// records and at the run's end, replaces the stored whole checkpoint, in the statement
/// of the run's [`RunWriter`] that also writes what was queued before it.
#[derive(Debug)]
pub(super) struct PgCheckpointLog {
    pub(super) writer: Arc<RunWriter>,
    pub(super) records: JournalRecords,
    pub(super) bytes: Vec<u8>,
    /// Records written since the stored whole checkpoint; `None` before the first write
    /// of this log, which stores it whole.
    pub(super) since_whole: Option<u32>,
}

impl CheckpointLog for PgCheckpointLog {
    fn write(
        &mut self,
        checkpoint: &CheckpointView<'_>,
        hint: &ChangeHint<'_>,
    ) -> Result<&[u8], CheckpointError> {
        let failed =
            |source: Box<dyn std::error::Error + Send + Sync>| CheckpointError::Backend(source);
        // A write that fails stops the run (an engine error): the log is not written again,
        // and a resume opens another from what is stored.
        let record = self
            .records
            .record(checkpoint, hint)
            .map_err(|error| failed(Box::new(error)))?;
        let record = String::from_utf8_lossy(record).into_owned();
        let whole = self.records.render(checkpoint);
        let store_whole = match self.since_whole {
            None => true,
            Some(since) => {
                since + 1 >= RECORDS_PER_WHOLE || checkpoint.run_status != RunStatus::Running
            }
        };
        let stored = store_whole.then(|| String::from_utf8_lossy(whole).into_owned());
        self.bytes.clear();
        self.bytes.extend_from_slice(whole);
        self.bytes.push(b'\n');
        self.writer
            .checkpoint(record, stored)
            .map_err(|error| failed(error.into()))?;
        self.since_whole = Some(match self.since_whole {
            Some(since) if !store_whole => since + 1,
            _ => 0,
        });
        Ok(&self.bytes)
    }

    fn last(&self) -> Option<&Checkpoint> {
        self.records.last()
    }

    /// The lease of a claimed run is not lost and has not run out unrenewed.
    fn still_held(&self) -> Result<(), CheckpointError> {
        self.writer
            .check_lease()
            .map_err(|error| CheckpointError::Backend(Box::new(error)))
    }
}

/// A run's events: each append is queued on the run's [`RunWriter`], which stores the
/// envelope under its id and wakes the streams of every server with `NOTIFY`. Dropping
/// the log waits for what is queued.
pub(super) struct PgEventLog {
    pub(super) writer: Arc<RunWriter>,
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
        self.writer.append(id, text).map_err(std::io::Error::other)
    }
}

impl Drop for PgEventLog {
    fn drop(&mut self) {
        // A failure was reported by the append or the checkpoint it refused.
        let _ = self.writer.flush();
    }
}

/// Reads a run's events from `run_events`, by id.
pub(super) struct PgEventReader {
    pub(super) pool: PgPool,
    pub(super) bridge: Bridge,
    pub(super) run_id: RunId,
    pub(super) after: u64,
    pub(super) writers: Writers,
}

impl EventReader for PgEventReader {
    fn read_new(&mut self) -> Result<Vec<StoredEvent>, StoreError> {
        self.writers.settle(&self.run_id);
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
