//! The run journal: an append-only, synced log of checkpoints that makes every stage
//! durable before the next one starts (SPEC 8.6, 13.2), for a fraction of the cost of
//! syncing a rewritten `checkpoint.json`.
//!
//! `{run_dir}/journal.jsonl` holds one JSON object per line. The first line carries a
//! whole [`Checkpoint`]; every later line carries a [`CheckpointDelta`] against the state
//! the previous lines describe. Each append is followed by `fdatasync`, so a record that
//! [`Journal::append`] returned from survives a crash of the process or the operating
//! system. `checkpoint.json` is still replaced after every stage, for readers; it is the
//! journal that resume trusts when the two disagree ([`replay`]).
//!
//! A crash in the middle of an append leaves a partial last line: [`replay`] ignores it
//! and [`Journal::reopen`] cuts it off before appending again.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::outcome::Outcome;
use crate::record::{Checkpoint, CheckpointView};
use crate::run_index::RunStatus;

pub(crate) mod image;
mod records;
pub use records::{replay_records, replay_records_onto, JournalRecords};

/// Errors of the journal.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// Reading, writing or syncing failed.
    #[error("journal I/O error at {path}")]
    Io {
        /// The journal file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A complete line does not describe a checkpoint.
    #[error("journal {path} line {line} is not a checkpoint record: {message}")]
    Corrupt {
        /// The journal file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

/// One journal line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Record {
    /// A whole checkpoint (the first line).
    Checkpoint(Box<Checkpoint>),
    /// Changes against the state of the previous lines.
    Delta(Box<CheckpointDelta>),
}

impl Record {
    /// Applies the record to the state of the records before it (`None`: none yet) and
    /// gives `visit` the state after it; a delta before any checkpoint is an error.
    fn replay_onto(
        self,
        state: &mut Option<Checkpoint>,
        visit: &mut dyn FnMut(&Checkpoint),
    ) -> Result<(), &'static str> {
        match (self, state.as_mut()) {
            (Record::Checkpoint(checkpoint), _) => {
                visit(&checkpoint);
                *state = Some(*checkpoint);
            }
            (Record::Delta(delta), Some(current)) => {
                delta.apply(current);
                visit(current);
            }
            (Record::Delta(_), None) => return Err("a delta before the first checkpoint"),
        }
        Ok(())
    }
}

/// Changes to a map field: keys set (added or changed) and keys removed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(bound(deserialize = "V: DeserializeOwned"))]
pub(crate) struct MapChange<V> {
    /// Added or changed entries.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub set: BTreeMap<String, V>,
    /// Removed keys.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
}

impl<V> Default for MapChange<V> {
    fn default() -> Self {
        MapChange {
            set: BTreeMap::new(),
            removed: Vec::new(),
        }
    }
}

impl<V: Clone + PartialEq> MapChange<V> {
    /// The changes that turn `old` into `new`, in one merge walk over both.
    pub(crate) fn between(old: &BTreeMap<String, V>, new: &BTreeMap<String, V>) -> MapChange<V> {
        let mut change = MapChange::default();
        let mut old_entries = old.iter().peekable();
        for (key, value) in new {
            loop {
                match old_entries.peek() {
                    Some((old_key, _)) if *old_key < key => {
                        change.removed.push((*old_key).clone());
                        old_entries.next();
                    }
                    _ => break,
                }
            }
            match old_entries.peek() {
                Some((old_key, old_value)) if *old_key == key => {
                    if *old_value != value {
                        change.set.insert(key.clone(), value.clone());
                    }
                    old_entries.next();
                }
                _ => {
                    change.set.insert(key.clone(), value.clone());
                }
            }
        }
        change
            .removed
            .extend(old_entries.map(|(key, _)| key.clone()));
        change
    }

    pub(crate) fn apply(self, map: &mut BTreeMap<String, V>) {
        for key in self.removed {
            map.remove(&key);
        }
        map.extend(self.set);
    }

    fn is_empty(&self) -> bool {
        self.set.is_empty() && self.removed.is_empty()
    }

    /// The changes of the entries `keys` only (the caller knows no other entry changed).
    pub(crate) fn of_keys<'k>(
        old: &BTreeMap<String, V>,
        new: &BTreeMap<String, V>,
        keys: impl IntoIterator<Item = &'k String>,
    ) -> MapChange<V> {
        let mut change = MapChange::default();
        for key in keys {
            match (old.get(key), new.get(key)) {
                (Some(before), Some(after)) if before == after => {}
                (_, Some(after)) => {
                    change.set.insert(key.clone(), after.clone());
                }
                (Some(_), None) => {
                    if !change.removed.contains(key) {
                        change.removed.push(key.clone());
                    }
                }
                (None, None) => {}
            }
        }
        change.removed.sort();
        change
    }
}

/// Changes to a list field: entries appended, or the whole list replaced when the new
/// list does not extend the old one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ListChange {
    /// Entries appended at the end.
    Append(Vec<String>),
    /// The new list.
    Replace(Vec<String>),
}

impl ListChange {
    /// The change from `old` to `new`; `append_only` promises that `new` extends `old`
    /// unless it is shorter, which saves comparing every entry.
    fn between_hinted(old: &[String], new: &[String], append_only: bool) -> ListChange {
        if append_only && old.len() <= new.len() {
            debug_assert!(new.starts_with(old), "an append-only list was rewritten");
            ListChange::Append(new[old.len()..].to_vec())
        } else {
            ListChange::between(old, new)
        }
    }

    fn between(old: &[String], new: &[String]) -> ListChange {
        if new.starts_with(old) {
            ListChange::Append(new[old.len()..].to_vec())
        } else {
            ListChange::Replace(new.to_vec())
        }
    }

    pub(crate) fn apply(self, list: &mut Vec<String>) {
        match self {
            ListChange::Append(entries) => list.extend(entries),
            ListChange::Replace(entries) => *list = entries,
        }
    }

    fn is_empty(&self) -> bool {
        matches!(self, ListChange::Append(entries) if entries.is_empty())
    }
}

impl Default for ListChange {
    fn default() -> Self {
        ListChange::Append(Vec::new())
    }
}

/// The difference between two checkpoints of one run. Scalars are always carried; maps
/// and lists only as changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CheckpointDelta {
    pub(crate) timestamp: String,
    pub(crate) current_node: Option<String>,
    pub(crate) next_node_id: Option<String>,
    #[serde(default, skip_serializing_if = "ListChange::is_empty")]
    pub(crate) completed_nodes: ListChange,
    #[serde(default, skip_serializing_if = "MapChange::is_empty")]
    pub(crate) node_retries: MapChange<u32>,
    #[serde(default, skip_serializing_if = "MapChange::is_empty")]
    pub(crate) node_visits: MapChange<u32>,
    #[serde(default, skip_serializing_if = "MapChange::is_empty")]
    pub(crate) epoch_node_visits: MapChange<u32>,
    #[serde(default, skip_serializing_if = "MapChange::is_empty")]
    pub(crate) node_outcomes: MapChange<Outcome>,
    #[serde(default, skip_serializing_if = "MapChange::is_empty")]
    pub(crate) context_values: MapChange<Value>,
    #[serde(default, skip_serializing_if = "ListChange::is_empty")]
    pub(crate) logs: ListChange,
    pub(crate) git_commit_sha: Option<String>,
    #[serde(default, skip_serializing_if = "MapChange::is_empty")]
    pub(crate) loop_failure_signatures: MapChange<u32>,
    #[serde(default, skip_serializing_if = "MapChange::is_empty")]
    pub(crate) restart_failure_signatures: MapChange<u32>,
    pub(crate) restart_count: u32,
    pub(crate) stage_rank: u32,
    #[serde(default, skip_serializing_if = "MapChange::is_empty")]
    pub(crate) simulated_cursors: MapChange<u64>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) llm_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero_usd")]
    pub(crate) llm_cost_usd: f64,
    pub(crate) run_status: RunStatus,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // the signature serde requires
fn is_zero(value: &u64) -> bool {
    *value == 0
}

#[allow(clippy::trivially_copy_pass_by_ref)] // the signature serde requires
fn is_zero_usd(value: &f64) -> bool {
    *value == 0.0
}

/// What changed in the run state since the last checkpoint, as the traversal tracked
/// it: lets a checkpoint cost what changed rather than the size of the state.
#[derive(Debug, Clone, Copy)]
pub struct ChangeHint<'a> {
    /// Node ids whose entries in the per-node maps may have changed.
    pub nodes: &'a BTreeSet<String>,
    /// Context keys that may have changed.
    pub context_keys: &'a BTreeSet<String>,
    /// Something changed in bulk (a loop restart, a restored state): compare everything.
    pub everything: bool,
}

impl ChangeHint<'static> {
    /// A hint that promises that no map or list changed (only scalars).
    pub fn nothing() -> ChangeHint<'static> {
        static EMPTY: BTreeSet<String> = BTreeSet::new();
        ChangeHint {
            nodes: &EMPTY,
            context_keys: &EMPTY,
            everything: false,
        }
    }

    /// A hint that promises nothing: compare everything.
    pub fn everything() -> ChangeHint<'static> {
        static EMPTY: BTreeSet<String> = BTreeSet::new();
        ChangeHint {
            nodes: &EMPTY,
            context_keys: &EMPTY,
            everything: true,
        }
    }
}

impl CheckpointDelta {
    /// The changes that turn `old` into `new`, comparing only what `hint` names. Debug
    /// builds check the result against [`CheckpointDelta::between`].
    pub(crate) fn between_hinted(
        old: &Checkpoint,
        new: &CheckpointView<'_>,
        hint: &ChangeHint<'_>,
    ) -> CheckpointDelta {
        if hint.everything {
            return CheckpointDelta::between(old, new);
        }
        let delta = CheckpointDelta {
            timestamp: new.timestamp.to_owned(),
            current_node: new.current_node.map(str::to_owned),
            next_node_id: new.next_node_id.map(str::to_owned),
            completed_nodes: ListChange::between_hinted(
                &old.completed_nodes,
                new.completed_nodes,
                true,
            ),
            node_retries: MapChange::of_keys(&old.node_retries, new.node_retries, hint.nodes),
            node_visits: MapChange::of_keys(&old.node_visits, new.node_visits, hint.nodes),
            epoch_node_visits: MapChange::of_keys(
                &old.epoch_node_visits,
                new.epoch_node_visits,
                hint.nodes,
            ),
            node_outcomes: MapChange::of_keys(&old.node_outcomes, new.node_outcomes, hint.nodes),
            context_values: MapChange::of_keys(
                &old.context_values,
                new.context_values,
                hint.context_keys,
            ),
            logs: ListChange::between_hinted(&old.logs, new.logs, true),
            git_commit_sha: new.git_commit_sha.map(str::to_owned),
            loop_failure_signatures: MapChange::between(
                &old.loop_failure_signatures,
                new.loop_failure_signatures,
            ),
            restart_failure_signatures: MapChange::between(
                &old.restart_failure_signatures,
                new.restart_failure_signatures,
            ),
            restart_count: new.restart_count,
            stage_rank: new.stage_rank,
            simulated_cursors: MapChange::between(&old.simulated_cursors, new.simulated_cursors),
            llm_tokens: new.llm_tokens,
            llm_cost_usd: new.llm_cost_usd,
            run_status: new.run_status,
        };
        debug_assert_eq!(
            delta,
            CheckpointDelta::between(old, new),
            "the traversal did not report every change"
        );
        delta
    }

    /// The changes that turn `old` into `new`.
    pub(crate) fn between(old: &Checkpoint, new: &CheckpointView<'_>) -> CheckpointDelta {
        CheckpointDelta {
            timestamp: new.timestamp.to_owned(),
            current_node: new.current_node.map(str::to_owned),
            next_node_id: new.next_node_id.map(str::to_owned),
            completed_nodes: ListChange::between(&old.completed_nodes, new.completed_nodes),
            node_retries: MapChange::between(&old.node_retries, new.node_retries),
            node_visits: MapChange::between(&old.node_visits, new.node_visits),
            epoch_node_visits: MapChange::between(&old.epoch_node_visits, new.epoch_node_visits),
            node_outcomes: MapChange::between(&old.node_outcomes, new.node_outcomes),
            context_values: MapChange::between(&old.context_values, new.context_values),
            logs: ListChange::between(&old.logs, new.logs),
            git_commit_sha: new.git_commit_sha.map(str::to_owned),
            loop_failure_signatures: MapChange::between(
                &old.loop_failure_signatures,
                new.loop_failure_signatures,
            ),
            restart_failure_signatures: MapChange::between(
                &old.restart_failure_signatures,
                new.restart_failure_signatures,
            ),
            restart_count: new.restart_count,
            stage_rank: new.stage_rank,
            simulated_cursors: MapChange::between(&old.simulated_cursors, new.simulated_cursors),
            llm_tokens: new.llm_tokens,
            llm_cost_usd: new.llm_cost_usd,
            run_status: new.run_status,
        }
    }

    /// Applies the changes to `checkpoint`.
    pub(crate) fn apply(self, checkpoint: &mut Checkpoint) {
        checkpoint.timestamp = self.timestamp;
        checkpoint.current_node = self.current_node;
        checkpoint.next_node_id = self.next_node_id;
        self.completed_nodes.apply(&mut checkpoint.completed_nodes);
        self.node_retries.apply(&mut checkpoint.node_retries);
        self.node_visits.apply(&mut checkpoint.node_visits);
        self.epoch_node_visits
            .apply(&mut checkpoint.epoch_node_visits);
        self.node_outcomes.apply(&mut checkpoint.node_outcomes);
        self.context_values.apply(&mut checkpoint.context_values);
        self.logs.apply(&mut checkpoint.logs);
        checkpoint.git_commit_sha = self.git_commit_sha;
        self.loop_failure_signatures
            .apply(&mut checkpoint.loop_failure_signatures);
        self.restart_failure_signatures
            .apply(&mut checkpoint.restart_failure_signatures);
        checkpoint.restart_count = self.restart_count;
        checkpoint.stage_rank = self.stage_rank;
        self.simulated_cursors
            .apply(&mut checkpoint.simulated_cursors);
        checkpoint.llm_tokens = self.llm_tokens;
        checkpoint.llm_cost_usd = self.llm_cost_usd;
        checkpoint.run_status = self.run_status;
    }
}

/// An open journal, positioned for appending, with the state its lines describe.
#[derive(Debug)]
pub(crate) struct Journal {
    path: PathBuf,
    file: fs_err::File,
    last: Checkpoint,
    /// Reused serialisation buffer.
    buffer: Vec<u8>,
}

impl Journal {
    /// Creates `path` with `first` as its first record, synced (the file's directory
    /// entry included).
    pub(crate) fn create(path: &Path, first: &CheckpointView<'_>) -> Result<Journal, JournalError> {
        let io = |source| JournalError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = fs_err::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(path)
            .map_err(io)?;
        let mut journal = Journal {
            path: path.to_path_buf(),
            file,
            last: first.to_owned(),
            buffer: Vec::new(),
        };
        journal.write_record(&Record::Checkpoint(Box::new(first.to_owned())))?;
        if let Some(directory) = path.parent() {
            sync_directory(directory).map_err(io)?;
        }
        Ok(journal)
    }

    /// Opens an existing journal for appending after a crash or a cancellation: cuts off
    /// a partial last line and returns the journal with the state it holds.
    pub(crate) fn reopen(path: &Path) -> Result<Option<Journal>, JournalError> {
        let io = |source| JournalError::Io {
            path: path.to_path_buf(),
            source,
        };
        let Some(replayed) = replay_with_length(path)? else {
            return Ok(None);
        };
        let file = fs_err::OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(io)?;
        file.set_len(replayed.valid_length).map_err(io)?;
        file.sync_data().map_err(io)?;
        let mut file = file;
        std::io::Seek::seek(&mut file, std::io::SeekFrom::End(0)).map_err(io)?;
        Ok(Some(Journal {
            path: path.to_path_buf(),
            file,
            last: replayed.checkpoint,
            buffer: Vec::new(),
        }))
    }

    /// Appends `checkpoint` as a delta against the previous record and syncs it. Returns
    /// once the record is on disk. Costs a comparison with the previous state and copies
    /// of what changed, never a copy of the whole state.
    #[cfg(test)]
    pub(crate) fn append(&mut self, checkpoint: &CheckpointView<'_>) -> Result<(), JournalError> {
        let delta = CheckpointDelta::between(&self.last, checkpoint);
        self.append_delta(delta)
    }

    /// Appends `delta` (against [`Journal::last`]) and syncs it, then applies it to the
    /// journal's state.
    pub(crate) fn append_delta(&mut self, delta: CheckpointDelta) -> Result<(), JournalError> {
        let record = Record::Delta(Box::new(delta));
        self.write_record(&record)?;
        if let Record::Delta(delta) = record {
            delta.apply(&mut self.last);
        }
        Ok(())
    }

    /// The state described by the journal's records.
    pub(crate) fn last(&self) -> &Checkpoint {
        &self.last
    }

    fn write_record(&mut self, record: &Record) -> Result<(), JournalError> {
        let io = |source| JournalError::Io {
            path: self.path.clone(),
            source,
        };
        self.buffer.clear();
        serde_json::to_writer(&mut self.buffer, record).map_err(|error| io(error.into()))?;
        self.buffer.push(b'\n');
        // SPEC 13.1: context values, reasons and notes reach the disk redacted.
        let line = fabro_llm::redact::redactor().redact_bytes(&self.buffer);
        self.file.write_all(&line).map_err(io)?;
        self.file.sync_data().map_err(io)
    }
}

/// The state a journal describes, or `None` when the file does not exist or holds no
/// complete first record. A partial last line is ignored.
pub(crate) fn replay(path: &Path) -> Result<Option<Checkpoint>, JournalError> {
    Ok(replay_with_length(path)?.map(|replayed| replayed.checkpoint))
}

/// Replays the journal at `path` like [`replay`], giving `visit` the state after every
/// record, oldest first: every checkpoint the run wrote (SPEC 20.2, 20.3 pick one of
/// them). Nothing when the file does not exist.
pub(crate) fn replay_each(
    path: &Path,
    visit: &mut dyn FnMut(&Checkpoint),
) -> Result<(), JournalError> {
    replay_visiting(path, visit).map(|_| ())
}

struct Replayed {
    checkpoint: Checkpoint,
    /// Bytes of complete, valid lines.
    valid_length: u64,
}

fn replay_with_length(path: &Path) -> Result<Option<Replayed>, JournalError> {
    replay_visiting(path, &mut |_| {})
}

fn replay_visiting(
    path: &Path,
    visit: &mut dyn FnMut(&Checkpoint),
) -> Result<Option<Replayed>, JournalError> {
    let bytes = match fs_err::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(JournalError::Io {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let mut state: Option<Checkpoint> = None;
    let mut valid_length = 0u64;
    let mut offset = 0usize;
    let mut line_number = 0usize;
    while let Some(length) = bytes[offset..].iter().position(|&byte| byte == b'\n') {
        line_number += 1;
        let line = &bytes[offset..offset + length];
        let next_offset = offset + length + 1;
        let is_last_line = next_offset == bytes.len();
        let record = match serde_json::from_slice::<Record>(line) {
            Ok(record) => record,
            // A crash can leave a complete-looking but torn last line (the newline of a
            // later partial write is never there, but a short write can be): treat the
            // last line like a partial one.
            Err(_) if is_last_line => break,
            Err(error) => {
                return Err(JournalError::Corrupt {
                    path: path.to_path_buf(),
                    line: line_number,
                    message: error.to_string(),
                })
            }
        };
        if let Err(message) = record.replay_onto(&mut state, visit) {
            return Err(JournalError::Corrupt {
                path: path.to_path_buf(),
                line: line_number,
                message: message.to_owned(),
            });
        }
        offset = next_offset;
        valid_length = offset as u64;
    }
    Ok(state.map(|checkpoint| Replayed {
        checkpoint,
        valid_length,
    }))
}

/// Syncs a directory so that a new entry in it survives a crash.
pub(crate) fn sync_directory(directory: &Path) -> std::io::Result<()> {
    fs_err::File::open(directory)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn checkpoint(completed: &[&str]) -> Checkpoint {
        Checkpoint {
            version: 1,
            run_id: crate::id::RunId::from("R"),
            timestamp: format!("t{}", completed.len()),
            current_node: completed.last().map(|node| (*node).to_owned()),
            next_node_id: Some("next".to_owned()),
            completed_nodes: completed.iter().map(|node| (*node).to_owned()).collect(),
            node_retries: BTreeMap::new(),
            node_visits: completed
                .iter()
                .map(|node| ((*node).to_owned(), 1))
                .collect(),
            epoch_node_visits: BTreeMap::new(),
            node_outcomes: completed
                .iter()
                .map(|node| ((*node).to_owned(), Outcome::success()))
                .collect(),
            context_values: BTreeMap::from([("n".to_owned(), serde_json::json!(completed.len()))]),
            logs: Vec::new(),
            git_commit_sha: None,
            loop_failure_signatures: BTreeMap::new(),
            restart_failure_signatures: BTreeMap::new(),
            restart_count: 0,
            stage_rank: u32::try_from(completed.len()).unwrap_or(0),
            simulated_cursors: BTreeMap::new(),
            llm_tokens: 0,
            llm_cost_usd: 0.0,
            run_status: RunStatus::Running,
        }
    }

    #[test]
    fn map_changes_cover_additions_changes_and_removals() {
        let old = BTreeMap::from([
            ("a".to_owned(), 1),
            ("b".to_owned(), 2),
            ("d".to_owned(), 4),
        ]);
        let new = BTreeMap::from([
            ("b".to_owned(), 20),
            ("c".to_owned(), 3),
            ("d".to_owned(), 4),
        ]);
        let change = MapChange::between(&old, &new);
        assert_eq!(
            change.set,
            BTreeMap::from([("b".to_owned(), 20), ("c".to_owned(), 3)])
        );
        assert_eq!(change.removed, vec!["a".to_owned()]);
        let mut applied = old.clone();
        change.apply(&mut applied);
        assert_eq!(applied, new);
        let trailing = MapChange::between(&old, &BTreeMap::from([("a".to_owned(), 1)]));
        assert_eq!(trailing.removed, vec!["b".to_owned(), "d".to_owned()]);
    }

    #[test]
    fn list_changes_append_or_replace() {
        let old = vec!["a".to_owned(), "b".to_owned()];
        let longer = vec!["a".to_owned(), "b".to_owned(), "c".to_owned()];
        assert_eq!(
            ListChange::between(&old, &longer),
            ListChange::Append(vec!["c".to_owned()])
        );
        let other = vec!["x".to_owned()];
        assert_eq!(
            ListChange::between(&old, &other),
            ListChange::Replace(other.clone())
        );
    }

    #[test]
    fn replay_returns_the_last_appended_state() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("journal.jsonl");
        let mut journal = Journal::create(&path, &checkpoint(&[]).view()).expect("creates");
        let mut expected = checkpoint(&[]);
        for completed in [vec!["start"], vec!["start", "a"], vec!["start", "a", "b"]] {
            expected = checkpoint(&completed);
            expected.node_visits.remove("start");
            journal.append(&expected.view()).expect("appends");
        }
        assert_eq!(replay(&path).expect("replays"), Some(expected.clone()));
        assert_eq!(journal.last(), &expected);
    }

    #[test]
    fn a_torn_last_line_is_ignored_and_cut_on_reopen() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("journal.jsonl");
        let mut journal = Journal::create(&path, &checkpoint(&[]).view()).expect("creates");
        journal
            .append(&checkpoint(&["start"]).view())
            .expect("appends");
        let complete = fs_err::read(&path).expect("reads");
        for torn in ["{\"delta\":{\"timest", "{\"delta\":{\"timestamp\":1}}\n"] {
            let mut bytes = complete.clone();
            bytes.extend_from_slice(torn.as_bytes());
            fs_err::write(&path, &bytes).expect("writes");
            assert_eq!(
                replay(&path).expect("replays"),
                Some(checkpoint(&["start"]))
            );
            let mut reopened = Journal::reopen(&path).expect("reopens").expect("exists");
            assert_eq!(fs_err::read(&path).expect("reads"), complete);
            reopened
                .append(&checkpoint(&["start", "a"]).view())
                .expect("appends");
            assert_eq!(
                replay(&path).expect("replays"),
                Some(checkpoint(&["start", "a"]))
            );
            fs_err::write(&path, &complete).expect("restores");
        }
    }

    #[test]
    fn a_corrupt_middle_line_is_an_error_and_a_missing_file_is_none() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("journal.jsonl");
        assert!(replay(&path).expect("no file").is_none());
        let mut journal = Journal::create(&path, &checkpoint(&[]).view()).expect("creates");
        journal
            .append(&checkpoint(&["start"]).view())
            .expect("appends");
        let text = fs_err::read_to_string(&path).expect("reads");
        fs_err::write(&path, format!("{text}garbage\n{text}")).expect("writes");
        assert!(matches!(
            replay(&path),
            Err(JournalError::Corrupt { line: 3, .. })
        ));
    }
}
