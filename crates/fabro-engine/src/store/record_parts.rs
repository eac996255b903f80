//! [`RecordParts`]: the records a run's `fabro inspect` document is built from (SPEC
//! 12.1), as a store reads them ([`RunStore::record_parts`]); `run_view` turns them into
//! the document. From a run directory ([`read_record_parts`]) or from any store through
//! its trait ([`stored_record_parts`]).

use std::collections::HashMap;
use std::path::Path;
use std::time::SystemTime;

use serde_json::Value;

use super::{EventCursor, RunStore, StoreError, StoredEvent, StoredStage};
use crate::id::RunId;
use crate::record::{Manifest, StageStatusFile};
use crate::run_index::{read_manifest, RunIndexError, RunRecord, RunStatus};

/// What a run's `fabro inspect` document is built from.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordParts {
    /// The run's manifest.
    pub manifest: Manifest,
    /// The newest checkpoint's `current_node`.
    pub current_node: Option<String>,
    /// The newest checkpoint's `next_node_id`.
    pub next_node_id: Option<String>,
    /// The stages by rank (then node and visit); their `files` are left empty, since the
    /// document does not list them.
    pub stages: Vec<StoredStage>,
    /// When each stage of a running run started, by rank (SPEC 17.7: a running stage's
    /// elapsed time); empty for a run that is not running.
    pub started: HashMap<u32, SystemTime>,
    /// The stages each rewind moved away (SPEC 20.3), `(k, stages)` by `k`.
    pub rewound: Vec<(u32, Vec<StoredStage>)>,
}

/// The parts of the run `record` lists, from its run directory: `manifest.json`,
/// `checkpoint.json` (read loosely: two fields, of any checkpoint version), the stage
/// directories, the end of `events.jsonl` for a running run, and `rewound/`.
pub fn read_record_parts(record: &RunRecord) -> Result<RecordParts, RunIndexError> {
    let run_dir = &record.run_dir;
    let manifest = read_manifest(run_dir)?;
    let checkpoint = read_checkpoint(run_dir);
    let checkpoint_field = |key: &str| {
        checkpoint
            .as_ref()
            .and_then(|checkpoint| checkpoint.get(key))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let started = if record.status == RunStatus::Running {
        file_stage_start_times(run_dir)
    } else {
        HashMap::new()
    };
    Ok(RecordParts {
        current_node: checkpoint_field("current_node"),
        next_node_id: checkpoint_field("next_node_id"),
        manifest,
        stages: read_stages(&run_dir.join("stages")),
        started,
        rewound: read_rewound(run_dir),
    })
}

/// The parts of the run `record` lists, read through `store`: its manifest, newest
/// checkpoint, saved and rewound stages, and (running) its events.
pub fn stored_record_parts(
    store: &dyn RunStore,
    record: &RunRecord,
) -> Result<RecordParts, StoreError> {
    let run_id = RunId::from(record.run_id.as_str());
    let manifest = store.read_manifest(&run_id)?;
    let checkpoint = store.load_checkpoint(&run_id)?;
    let started = if record.status == RunStatus::Running {
        stage_start_times(store.event_reader(&run_id, 0).read_new()?)
    } else {
        HashMap::new()
    };
    let (current_node, next_node_id) = checkpoint.map_or((None, None), |checkpoint| {
        (checkpoint.current_node, checkpoint.next_node_id)
    });
    Ok(RecordParts {
        manifest,
        current_node,
        next_node_id,
        stages: store.stages(&run_id)?,
        started,
        rewound: store.rewound_stages(&run_id)?,
    })
}

/// `checkpoint.json` as loose JSON: inspect reads two fields and must not fail on a
/// checkpoint of another version.
fn read_checkpoint(run_dir: &Path) -> Option<Value> {
    let text = fs_err::read_to_string(run_dir.join(crate::run_dir::CHECKPOINT_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

/// The stages of every `rewound/{k}/stages/` of the run, by `k`.
fn read_rewound(run_dir: &Path) -> Vec<(u32, Vec<StoredStage>)> {
    let Ok(entries) = fs_err::read_dir(run_dir.join(crate::run_dir::REWOUND_DIR)) else {
        return Vec::new();
    };
    let mut rewound: Vec<(u32, Vec<StoredStage>)> = entries
        .flatten()
        .filter_map(|entry| {
            let k = entry.file_name().to_str()?.parse().ok()?;
            Some((k, read_stages(&entry.path().join("stages"))))
        })
        .collect();
    rewound.sort_by_key(|(k, _)| *k);
    rewound
}

/// One stage per entry of `directory` (a run's `stages/`) named
/// `{rank}-{node_id}@{visit}`, sorted by rank (then node and visit), with its
/// `status.json` when it can be read.
fn read_stages(directory: &Path) -> Vec<StoredStage> {
    let Ok(entries) = fs_err::read_dir(directory) else {
        return Vec::new();
    };
    let mut stages: Vec<StoredStage> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_str()?.to_owned();
            let (rank, node_id, visit) = parse_stage_dir(&name)?;
            let status = fs_err::read_to_string(entry.path().join("status.json"))
                .ok()
                .and_then(|text| serde_json::from_str::<StageStatusFile>(&text).ok());
            Some(StoredStage {
                rank,
                node_id: node_id.to_owned(),
                visit,
                status,
                files: Vec::new(),
            })
        })
        .collect();
    stages.sort_by(|left, right| {
        (left.rank, &left.node_id, left.visit).cmp(&(right.rank, &right.node_id, right.visit))
    });
    stages
}

/// How much of the end of `events.jsonl` is read for the start times of running stages.
const EVENTS_TAIL_BYTES: u64 = 1 << 20;

/// When the stages of the newest `StageStarted` events started, by rank, from the end
/// of the run's `events.jsonl` (a running stage is among the newest events).
fn file_stage_start_times(run_dir: &Path) -> HashMap<u32, SystemTime> {
    let mut cursor = EventCursor::last_bytes(run_dir, EVENTS_TAIL_BYTES);
    let mut events = cursor.read_new();
    events.extend(cursor.finish());
    stage_start_times(events)
}

/// When the stages of the `StageStarted` events among `events` started, by rank.
fn stage_start_times(events: Vec<StoredEvent>) -> HashMap<u32, SystemTime> {
    let mut times = HashMap::new();
    for event in events {
        if event.name != "StageStarted" {
            continue;
        }
        let Ok(event) = serde_json::from_str::<Value>(&event.line) else {
            continue;
        };
        let rank = event["properties"]["rank"]
            .as_u64()
            .and_then(|rank| u32::try_from(rank).ok());
        let time = event["ts"].as_str().and_then(crate::parse_rfc3339);
        if let (Some(rank), Some(time)) = (rank, time) {
            times.insert(rank, time);
        }
    }
    times
}

/// `007-plan@2` → (7, "plan", 2).
fn parse_stage_dir(name: &str) -> Option<(u32, &str, u32)> {
    let (rank, rest) = name.split_once('-')?;
    let (node_id, visit) = rest.rsplit_once('@')?;
    if node_id.is_empty() {
        return None;
    }
    Some((rank.parse().ok()?, node_id, visit.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_directory_names_give_rank_node_and_visit() {
        let check = |name: &str, expected: Option<(u32, &str, u32)>| {
            assert_eq!(parse_stage_dir(name), expected, "{name}");
        };
        check("007-plan@2", Some((7, "plan", 2)));
        check("1234-a-b@c@10", Some((1234, "a-b@c", 10)));
        check("001-@1", None);
        check("x-plan@1", None);
        check("001-plan", None);
        check("001-plan@", None);
    }
}
