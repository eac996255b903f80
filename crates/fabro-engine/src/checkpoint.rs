//! The checkpoint cycle after every stage (SPEC 8.6): make the run's state durable,
//! then replace `checkpoint.json` for readers.
//!
//! Durability comes from the [`Journal`](crate::journal::Journal): its synced append is
//! the moment a stage's checkpoint becomes complete when git checkpointing is off.
//! `checkpoint.json` is replaced atomically (temporary file, rename) but not synced: after
//! an operating-system crash it may be older than the journal, and resume reads the
//! journal ([`load_newest`]).

use std::path::{Path, PathBuf};

use crate::journal::{ChangeHint, CheckpointDelta, Journal, JournalError};

mod image;

use crate::record::{Checkpoint, CheckpointView};
use crate::run_dir::replace_via_spare;
use image::CheckpointImage;

/// Why a checkpoint could not be written.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The journal could not be written or synced.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// `checkpoint.json` could not be replaced.
    #[error("cannot write {}", .path.display())]
    File {
        /// The checkpoint file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Writes one run's checkpoints.
#[derive(Debug)]
pub(crate) struct Checkpointer {
    journal_path: PathBuf,
    checkpoint_path: PathBuf,
    spare_path: PathBuf,
    journal: Option<Journal>,
    /// `checkpoint.json` as fragments, following the journal.
    image: Option<CheckpointImage>,
    buffer: Vec<u8>,
}

impl Checkpointer {
    /// A checkpointer for the run directory `run_dir`; the journal is created by the
    /// first [`Checkpointer::write`], or continued when `resume` is set.
    pub(crate) fn new(run_dir: &Path) -> Checkpointer {
        Checkpointer {
            journal_path: journal_path(run_dir),
            checkpoint_path: run_dir.join("checkpoint.json"),
            spare_path: run_dir.join(".checkpoint.json.spare"),
            journal: None,
            image: None,
            buffer: Vec::new(),
        }
    }

    /// Continues the journal of a resumed run, cutting off a partial last record.
    pub(crate) fn resume(run_dir: &Path) -> Result<Checkpointer, CheckpointError> {
        let mut checkpointer = Checkpointer::new(run_dir);
        checkpointer.journal = Journal::reopen(&checkpointer.journal_path)?;
        Ok(checkpointer)
    }

    /// Makes `checkpoint` durable (journal append, synced) and replaces
    /// `checkpoint.json`. `hint` names what changed since the previous write; the cost
    /// is that of the changes plus a copy of the file's bytes.
    pub(crate) fn write(
        &mut self,
        checkpoint: &CheckpointView<'_>,
        hint: &ChangeHint<'_>,
    ) -> Result<(), CheckpointError> {
        let image = match &mut self.journal {
            Some(journal) => {
                let delta = CheckpointDelta::between_hinted(journal.last(), checkpoint, hint);
                let image = self
                    .image
                    .get_or_insert_with(|| CheckpointImage::of(journal.last()));
                image.apply(&delta);
                journal.append_delta(delta)?;
                image
            }
            None => {
                let journal = Journal::create(&self.journal_path, checkpoint)?;
                let image = self.image.insert(CheckpointImage::of(journal.last()));
                self.journal = Some(journal);
                image
            }
        };
        self.buffer.clear();
        image.render(checkpoint, &mut self.buffer);
        self.buffer.push(b'\n');
        replace_via_spare(&self.checkpoint_path, &self.spare_path, &self.buffer).map_err(|source| {
            CheckpointError::File {
                path: self.checkpoint_path.clone(),
                source,
            }
        })
    }
}

impl Checkpointer {
    /// Writes the last complete checkpoint again with `run_status`: the final checkpoint
    /// of a run cancelled in the middle of a stage, which must not count the interrupted
    /// visit (its rank, visit and simulated replies are used again on resume).
    pub(crate) fn write_last_with_status(
        &mut self,
        run_status: &str,
    ) -> Result<bool, CheckpointError> {
        let Some(mut record) = self.journal.as_ref().map(|journal| journal.last().clone()) else {
            return Ok(false);
        };
        record.run_status = run_status.to_owned();
        record.timestamp = crate::timestamp::now_rfc3339();
        self.write(&record.view(), &ChangeHint::everything())?;
        Ok(true)
    }
}

/// `{run_dir}/journal.jsonl`.
pub fn journal_path(run_dir: &Path) -> PathBuf {
    run_dir.join("journal.jsonl")
}

/// The newest complete checkpoint of a run without git checkpointing: the journal's
/// state, or `checkpoint.json` when there is no journal (or it is behind the file).
pub fn load_newest(run_dir: &Path) -> Result<Option<Checkpoint>, LoadError> {
    let journaled = crate::journal::replay(&journal_path(run_dir))?;
    let file_path = run_dir.join("checkpoint.json");
    let from_file = match fs_err::read(&file_path) {
        Ok(bytes) => match serde_json::from_slice::<Checkpoint>(&bytes) {
            Ok(checkpoint) => Some(checkpoint),
            // A checkpoint.json torn by an operating-system crash; the journal has it.
            Err(_) if journaled.is_some() => None,
            Err(source) => {
                return Err(LoadError::Parse {
                    path: file_path,
                    source,
                })
            }
        },
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(LoadError::Io {
                path: file_path,
                source,
            })
        }
    };
    Ok(match (journaled, from_file) {
        (Some(journaled), Some(file)) if newer(&file, &journaled) => Some(file),
        (Some(journaled), _) => Some(journaled),
        (None, file) => file,
    })
}

/// Whether `a` describes a later point of the run than `b`.
pub fn newer(a: &Checkpoint, b: &Checkpoint) -> bool {
    (
        a.completed_nodes.len(),
        a.stage_rank,
        a.run_status != "running",
    ) > (
        b.completed_nodes.len(),
        b.stage_rank,
        b.run_status != "running",
    )
}

/// Why a checkpoint could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The journal is unreadable or corrupt.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The checkpoint file is unreadable.
    #[error("cannot read {}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The checkpoint file is not a checkpoint.
    #[error("{} is not a valid checkpoint", .path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn checkpoint(completed: usize) -> Checkpoint {
        Checkpoint {
            version: 1,
            run_id: "R".to_owned(),
            timestamp: "t".to_owned(),
            current_node: None,
            next_node_id: Some("a".to_owned()),
            completed_nodes: (0..completed).map(|index| format!("n{index}")).collect(),
            node_retries: BTreeMap::new(),
            node_visits: BTreeMap::new(),
            epoch_node_visits: BTreeMap::new(),
            node_outcomes: BTreeMap::new(),
            context_values: BTreeMap::new(),
            logs: Vec::new(),
            git_commit_sha: None,
            loop_failure_signatures: BTreeMap::new(),
            restart_failure_signatures: BTreeMap::new(),
            restart_count: 0,
            stage_rank: u32::try_from(completed).unwrap_or(0),
            simulated_cursors: BTreeMap::new(),
            run_status: "running".to_owned(),
        }
    }

    #[test]
    fn the_journal_wins_over_a_stale_or_torn_checkpoint_file() {
        let directory = tempfile::tempdir().expect("tempdir");
        let mut checkpointer = Checkpointer::new(directory.path());
        for completed in 0..3 {
            checkpointer
                .write(&checkpoint(completed).view(), &ChangeHint::everything())
                .expect("writes");
        }
        let file = directory.path().join("checkpoint.json");
        assert_eq!(
            load_newest(directory.path()).expect("loads"),
            Some(checkpoint(2))
        );
        // An operating-system crash lost the last rename: the file is one stage behind.
        fs_err::write(&file, serde_json::to_vec(&checkpoint(1)).expect("json")).expect("w");
        assert_eq!(
            load_newest(directory.path()).expect("loads"),
            Some(checkpoint(2))
        );
        fs_err::write(&file, b"{\"version\":1,").expect("writes");
        assert_eq!(
            load_newest(directory.path()).expect("loads"),
            Some(checkpoint(2))
        );
    }

    #[test]
    fn without_a_journal_the_checkpoint_file_is_used() {
        let directory = tempfile::tempdir().expect("tempdir");
        assert_eq!(load_newest(directory.path()).expect("loads"), None);
        fs_err::write(
            directory.path().join("checkpoint.json"),
            serde_json::to_vec(&checkpoint(4)).expect("json"),
        )
        .expect("writes");
        assert_eq!(
            load_newest(directory.path()).expect("loads"),
            Some(checkpoint(4))
        );
        fs_err::write(directory.path().join("checkpoint.json"), b"nope").expect("writes");
        assert!(matches!(
            load_newest(directory.path()),
            Err(LoadError::Parse { .. })
        ));
    }

    #[test]
    fn resuming_continues_the_same_journal() {
        let directory = tempfile::tempdir().expect("tempdir");
        let mut checkpointer = Checkpointer::new(directory.path());
        checkpointer
            .write(&checkpoint(0).view(), &ChangeHint::everything())
            .expect("writes");
        checkpointer
            .write(&checkpoint(1).view(), &ChangeHint::everything())
            .expect("writes");
        drop(checkpointer);
        let mut resumed = Checkpointer::resume(directory.path()).expect("resumes");
        resumed
            .write(&checkpoint(2).view(), &ChangeHint::everything())
            .expect("writes");
        let lines = fs_err::read_to_string(journal_path(directory.path()))
            .expect("reads")
            .lines()
            .count();
        assert_eq!(lines, 3);
        assert_eq!(
            crate::journal::replay(&journal_path(directory.path())).expect("replays"),
            Some(checkpoint(2))
        );
    }
}
