//! [`RecordStamps`]: a cheap version of a run's records, for readers that cache what they
//! build from them (a server's run documents) and must notice when they change.

use std::path::Path;
use std::time::SystemTime;

use crate::run_dir::{CHECKPOINT_FILE, EVENTS_FILE, MANIFEST_FILE};

/// The length and modification time of one record, `None` when it is missing.
pub(crate) type FileStamp = Option<(u64, SystemTime)>;

/// The stamps of the records a run document is built from: one `stat` each, no read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordStamps {
    /// `events.jsonl`.
    pub events: FileStamp,
    /// `checkpoint.json`.
    pub checkpoint: FileStamp,
    /// `manifest.json`.
    pub manifest: FileStamp,
    /// The `stages/` directory (a stage added or removed changes it).
    pub stages: FileStamp,
}

impl RecordStamps {
    /// The stamps of the records in `run_dir`.
    pub fn of(run_dir: &Path) -> RecordStamps {
        RecordStamps {
            events: stamp(&run_dir.join(EVENTS_FILE)),
            checkpoint: RecordStamps::checkpoint_of(run_dir),
            manifest: stamp(&run_dir.join(MANIFEST_FILE)),
            stages: stamp(&run_dir.join("stages")),
        }
    }

    /// Just the checkpoint's stamp: the record that changes with every stage.
    pub fn checkpoint_of(run_dir: &Path) -> FileStamp {
        stamp(&run_dir.join(CHECKPOINT_FILE))
    }
}

/// The length and modification time of `path`.
fn stamp(path: &Path) -> FileStamp {
    std::fs::metadata(path)
        .ok()
        .and_then(|metadata| Some((metadata.len(), metadata.modified().ok()?)))
}
