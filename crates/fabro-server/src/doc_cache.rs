//! The documents of runs that are not running, built once: `GET /api/v1/runs/{id}`
//! (serialized) and the run list's summary of each run.
//!
//! Building them reads the manifest, the checkpoint and every stage's `status.json`
//! (1,001 files for W1). A run that no process executes changes only when something
//! writes to it again (a resume, a repair): each entry is kept with the index row's
//! status and times and the store's stamps of the run's records (for files, the length
//! and modification time of `events.jsonl`, `checkpoint.json`, `manifest.json` and the
//! `stages` directory), and is built again when any of them differs. Running and queued
//! runs, and runs of a store that has no stamps, are built on each request; the first
//! because their documents hold elapsed times.
//!
//! The run list asks for up to 200 summaries per request, so [`DocCache::cached_summary`]
//! checks less: the index row on every request, the stat of `checkpoint.json` at most
//! every [`SUMMARY_RECHECK`]. A summary holds the row's fields, the current node and the
//! usage totals; after a run ended nothing changes them without also changing its row
//! (a resume starts it again) or rewriting its checkpoint (by hand: seen within
//! [`SUMMARY_RECHECK`]). It is kept serialized, ready to be copied into the list.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use fabro_api::{InspectDocument, RunDocument, RunSummary};
use fabro_engine::{RecordStamps, RunId, RunRecord, RunStatus, RunStore};

use crate::engine_bridge::records;
use crate::error::ApiError;

/// Entries beyond this many are dropped all at once (runs removed from the store
/// leave theirs behind until then).
const MAX_ENTRIES: usize = 10_000;

/// The cache, shared by the handlers.
#[derive(Default)]
pub struct DocCache {
    map: Mutex<HashMap<String, Arc<Entry>>>,
}

/// One run's documents.
struct Entry {
    key: Freshness,
    /// `fabro inspect --json` plus `"pending_question": null`, serialized.
    document: Bytes,
    /// The run list's summary.
    summary: RunSummary,
    /// The same, serialized.
    summary_bytes: Bytes,
    /// When the checkpoint was last found unchanged, in milliseconds since `built`.
    summary_checked: AtomicU64,
    built: Instant,
}

/// How long a list summary is served without looking at the run's checkpoint again.
pub const SUMMARY_RECHECK: Duration = Duration::from_secs(1);

/// What an entry was built from.
#[derive(Debug, PartialEq, Eq)]
struct Freshness {
    status: RunStatus,
    started_at: String,
    finished_at: Option<String>,
    files: RecordStamps,
}

impl Freshness {
    /// What the documents of `record` would be built from now; `None` when the store
    /// cannot tell.
    fn of(store: &dyn RunStore, record: &RunRecord) -> Option<Freshness> {
        Some(Freshness {
            status: record.status,
            started_at: record.started_at.clone(),
            finished_at: record.finished_at.clone(),
            files: store.record_stamps(&RunId::from(record.run_id.as_str()))?,
        })
    }

    /// Whether the entry was built from this index row.
    fn same_row(&self, record: &RunRecord) -> bool {
        self.status == record.status
            && self.started_at == record.started_at
            && self.finished_at == record.finished_at
    }
}

/// Whether the run's documents may be kept: no process executes it.
fn cacheable(status: RunStatus) -> bool {
    !matches!(
        status,
        RunStatus::Queued | RunStatus::Running | RunStatus::Unreadable
    )
}

impl DocCache {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Entry>>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The fresh entry of a cacheable run, built if missing or stale.
    fn entry(
        &self,
        store: &dyn RunStore,
        record: &RunRecord,
        key: Freshness,
    ) -> Result<Arc<Entry>, ApiError> {
        if let Some(entry) = self.map().get(&record.run_id) {
            if entry.key == key {
                return Ok(Arc::clone(entry));
            }
        }
        let view = fabro_engine::inspect_in(store, record).map_err(ApiError::internal)?;
        let summary = records::summary_of(store, record, Some(&view));
        let document = RunDocument::Inspected(Box::new(InspectDocument {
            inspect: view,
            pending_question: None,
        }));
        let document = serde_json::to_vec(&document).map_err(ApiError::internal)?;
        let summary_bytes = serde_json::to_vec(&summary).map_err(ApiError::internal)?;
        let entry = Arc::new(Entry {
            key,
            document: Bytes::from(document),
            summary,
            summary_bytes: Bytes::from(summary_bytes),
            summary_checked: AtomicU64::new(0),
            built: Instant::now(),
        });
        let mut map = self.map();
        if map.len() >= MAX_ENTRIES {
            map.clear();
        }
        map.insert(record.run_id.clone(), Arc::clone(&entry));
        Ok(entry)
    }

    /// The serialized `GET /api/v1/runs/{id}` document of a run that no process
    /// executes (its `pending_question` is null), or `None` for a running, queued or
    /// unreadable run, and for a run of a store without stamps.
    pub fn document(
        &self,
        store: &dyn RunStore,
        record: &RunRecord,
    ) -> Option<Result<Bytes, ApiError>> {
        if !cacheable(record.status) {
            return None;
        }
        let key = Freshness::of(store, record)?;
        Some(
            self.entry(store, record, key)
                .map(|entry| entry.document.clone()),
        )
    }

    /// The `GET /api/v1/runs/{id}` document of a run that no process executes, when the
    /// cache holds a fresh one; a few `stat`s, nothing is built.
    pub fn cached_document(&self, store: &dyn RunStore, record: &RunRecord) -> Option<Bytes> {
        if !cacheable(record.status) {
            return None;
        }
        let entry = Arc::clone(self.map().get(&record.run_id)?);
        (Some(&entry.key) == Freshness::of(store, record).as_ref()).then(|| entry.document.clone())
    }

    /// The serialized list summary (`pending_question` null) of a run that no process
    /// executes, when the cache holds one built from the same index row and checkpoint
    /// (one `stat`); nothing is built.
    pub fn cached_summary(&self, store: &dyn RunStore, record: &RunRecord) -> Option<Bytes> {
        if !cacheable(record.status) {
            return None;
        }
        let entry = Arc::clone(self.map().get(&record.run_id)?);
        if !entry.key.same_row(record) {
            return None;
        }
        let now = u64::try_from(entry.built.elapsed().as_millis()).unwrap_or(u64::MAX);
        let checked = entry.summary_checked.load(Ordering::Relaxed);
        let recheck = u64::try_from(SUMMARY_RECHECK.as_millis()).unwrap_or(u64::MAX);
        if now.saturating_sub(checked) >= recheck {
            let checkpoint = store.checkpoint_stamp(&RunId::from(record.run_id.as_str()));
            if checkpoint != Some(entry.key.files.checkpoint) {
                return None;
            }
            entry.summary_checked.store(now, Ordering::Relaxed);
        }
        Some(entry.summary_bytes.clone())
    }

    /// The run list's summary of a run (`pending_question` null).
    pub fn summary(&self, store: &dyn RunStore, record: &RunRecord) -> RunSummary {
        if cacheable(record.status) {
            if let Some(key) = Freshness::of(store, record) {
                if let Ok(entry) = self.entry(store, record, key) {
                    return entry.summary.clone();
                }
            }
        }
        records::run_summary(store, record)
    }
}
