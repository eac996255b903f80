//! Runs a server accepted but has not started (SPEC 14.2 status `queued`): the run
//! directory holds `queued.json`, written by the server, and no manifest yet. The index
//! lists them as [`RunStatus::Queued`]; the engine's manifest, written when the run
//! starts, supersedes the file. A server that stops leaves the file, and the next server
//! on the same root starts the run from the request it keeps (SPEC 14.1).

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{RunRecord, RunStatus};
use crate::run_dir::write_json_atomic;

/// The file that marks a queued run.
pub(crate) const QUEUED_FILE: &str = "queued.json";

/// What `queued.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueuedRun {
    /// Run id.
    pub run_id: String,
    /// Graph id or file stem, as far as the request names it.
    pub workflow_name: String,
    /// The workflow file, when the request named one.
    pub workflow_path: String,
    /// The goal the request gave, else empty.
    pub goal: String,
    /// RFC 3339 time the server accepted the run (queue order: oldest first).
    pub queued_at: String,
    /// The request to start the run with, as the server understands it.
    pub request: serde_json::Value,
}

impl QueuedRun {
    /// A run queued now.
    pub fn now(
        run_id: String,
        workflow_name: String,
        workflow_path: String,
        goal: String,
        request: serde_json::Value,
    ) -> QueuedRun {
        QueuedRun {
            run_id,
            workflow_name,
            workflow_path,
            goal,
            queued_at: crate::timestamp::now_rfc3339(),
            request,
        }
    }
}

/// Writes `queued.json` into `run_dir`.
///
/// # Errors
/// When the file cannot be written.
pub fn write_queued(run_dir: &Path, queued: &QueuedRun) -> std::io::Result<()> {
    write_json_atomic(&run_dir.join(QUEUED_FILE), queued)
}

/// The queued run in `run_dir`: `queued.json` there and no manifest yet.
pub(crate) fn read_queued(run_dir: &Path) -> Option<QueuedRun> {
    if run_dir.join(crate::run_dir::MANIFEST_FILE).exists() {
        return None;
    }
    let text = fs_err::read_to_string(run_dir.join(QUEUED_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Removes `queued.json` (the run started, or was given up); absent is fine.
///
/// # Errors
/// When the file exists and cannot be removed.
pub fn remove_queued(run_dir: &Path) -> std::io::Result<()> {
    match fs_err::remove_file(run_dir.join(QUEUED_FILE)) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}

/// The index record of a queued run.
pub(super) fn queued_record(queued: &QueuedRun, run_dir: &Path) -> RunRecord {
    RunRecord {
        run_id: queued.run_id.clone(),
        workflow_name: queued.workflow_name.clone(),
        workflow_path: queued.workflow_path.clone(),
        goal: queued.goal.clone(),
        status: RunStatus::Queued,
        started_at: queued.queued_at.clone(),
        finished_at: None,
        run_dir: run_dir.to_path_buf(),
        parent_run_id: None,
        reason: None,
        worker: None,
    }
}

/// Every queued run under `{root}/scratch`, oldest first.
pub fn queued_runs(root: &Path) -> Vec<QueuedRun> {
    let Ok(entries) = fs_err::read_dir(crate::run_dir::scratch_dir(root)) else {
        return Vec::new();
    };
    let mut queued: Vec<QueuedRun> = entries
        .flatten()
        .filter_map(|entry| read_queued(&entry.path()))
        .collect();
    queued.sort_by(|a, b| (&a.queued_at, &a.run_id).cmp(&(&b.queued_at, &b.run_id)));
    queued
}
