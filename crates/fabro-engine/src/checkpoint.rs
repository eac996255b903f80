//! The checkpoint cycle after every stage (SPEC 8.6): make the run's state durable,
//! then replace `checkpoint.json` for readers.
//!
//! Durability comes from the [`Journal`](crate::journal::Journal): its synced append is
//! the moment a stage's checkpoint becomes complete when git checkpointing is off.
//! `checkpoint.json` is replaced atomically (temporary file, rename) but not synced: after
//! an operating-system crash it may be older than the journal, and resume reads the
//! journal ([`load_newest`]).

use std::path::{Path, PathBuf};

use crate::git::{MetadataFile, MetadataMessage, RunGit, StagedChanges};
use crate::journal::image::CheckpointImage;
use crate::journal::{ChangeHint, CheckpointDelta, Journal, JournalError};
use crate::record::{Checkpoint, CheckpointView};
use crate::run_dir::replace_via_spare;
use crate::run_index::RunStatus;

/// Why a checkpoint could not be written.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The journal could not be written or synced.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// A git step of the cycle failed.
    #[error(transparent)]
    Git(#[from] crate::git::GitError),
    /// Git checkpointing was lost in the middle of a cycle.
    #[error("git checkpointing is not active")]
    GitMissing,
    /// A store other than files (a database, SPEC 18.1) could not keep the checkpoint.
    #[error("cannot store the checkpoint")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
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

/// Where a run's checkpoints are made durable and shown to readers: the checkpoint half
/// of the [`RunStore`](crate::store::RunStore) seam. `FsCheckpointLog` is the journal
/// and `checkpoint.json` of a run directory; a database-backed store keeps them in rows.
pub trait CheckpointLog: Send + std::fmt::Debug {
    /// Makes `checkpoint` durable and the one readers see. `hint` names what changed
    /// since the previous write. Returns the checkpoint as readers see it: the bytes of
    /// `checkpoint.json`, newline included (git metadata commits store them).
    fn write(
        &mut self,
        checkpoint: &CheckpointView<'_>,
        hint: &ChangeHint<'_>,
    ) -> Result<&[u8], CheckpointError>;

    /// The last checkpoint written (or continued from), if any.
    fn last(&self) -> Option<&Checkpoint>;

    /// Whether the run may still write, asked right before its refs are pushed to a
    /// repository named by URL (SPEC 18.3): a worker's lease that was lost or ran out
    /// unrenewed is an error. A log without a lease is always held.
    fn still_held(&self) -> Result<(), CheckpointError> {
        Ok(())
    }
}

/// The checkpoints of a run directory (SPEC 8.6): `journal.jsonl`, synced at every
/// append, and `checkpoint.json`, replaced for readers.
#[derive(Debug)]
pub(crate) struct FsCheckpointLog {
    journal_path: PathBuf,
    checkpoint_path: PathBuf,
    spare_path: PathBuf,
    journal: Option<Journal>,
    /// `checkpoint.json` as fragments, following the journal.
    image: Option<CheckpointImage>,
    buffer: Vec<u8>,
}

impl FsCheckpointLog {
    /// The log of the run directory `run_dir`; the journal is created by the first
    /// write.
    pub(crate) fn new(run_dir: &Path) -> FsCheckpointLog {
        FsCheckpointLog {
            journal_path: journal_path(run_dir),
            checkpoint_path: run_dir.join(crate::run_dir::CHECKPOINT_FILE),
            spare_path: run_dir.join(format!(".{}.spare", crate::run_dir::CHECKPOINT_FILE)),
            journal: None,
            image: None,
            buffer: Vec::new(),
        }
    }

    /// Continues the journal of a resumed run, cutting off a partial last record.
    pub(crate) fn resume(run_dir: &Path) -> Result<FsCheckpointLog, CheckpointError> {
        let mut log = FsCheckpointLog::new(run_dir);
        log.journal = Journal::reopen(&log.journal_path)?;
        Ok(log)
    }
}

impl CheckpointLog for FsCheckpointLog {
    /// Journal append (synced), then `checkpoint.json` replaced; the cost is that of the
    /// changes plus a copy of the file's bytes.
    fn write(
        &mut self,
        checkpoint: &CheckpointView<'_>,
        hint: &ChangeHint<'_>,
    ) -> Result<&[u8], CheckpointError> {
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
        replace_via_spare(&self.checkpoint_path, &self.spare_path, &self.buffer).map_err(
            |source| CheckpointError::File {
                path: self.checkpoint_path.clone(),
                source,
            },
        )?;
        Ok(&self.buffer)
    }

    fn last(&self) -> Option<&Checkpoint> {
        self.journal.as_ref().map(Journal::last)
    }
}

/// Writes one run's checkpoints: the cycle of SPEC 8.6 over a [`CheckpointLog`], with
/// git checkpointing when attached.
#[derive(Debug)]
pub(crate) struct Checkpointer {
    log: Box<dyn CheckpointLog>,
    /// The last checkpoint as readers see it (`checkpoint.json`), kept while git
    /// checkpointing is active.
    buffer: Vec<u8>,
    /// Git checkpointing (SPEC 8), when active.
    git: Option<RunGit>,
    /// The changes of the stage being recorded, staged before its status was written
    /// ([`Checkpointer::stage_command`]); the next stage checkpoint commits them.
    staged: Option<StagedChanges>,
    run_dir: PathBuf,
}

/// Which checkpoint of the cycle (SPEC 8.6) is written.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Cycle<'a> {
    /// The initial checkpoint (SPEC 4.1): steps 1 and 2.
    Initial,
    /// After a stage: all four steps.
    Stage {
        /// The node whose stage completed.
        node_id: &'a str,
        /// Its status.
        status: &'a str,
        /// Its stage directory.
        stage_dir: &'a Path,
    },
    /// A final checkpoint that follows no stage: steps 1 and 2.
    Final,
}

/// What a checkpoint produced in git.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CycleShas {
    /// The run-branch commit holding the work so far.
    pub(crate) git_commit_sha: Option<String>,
    /// The metadata commit of this checkpoint.
    pub(crate) metadata_sha: Option<String>,
    /// Why the stage's changes were found by scanning the whole worktree (the `full_scan`
    /// warning, once per run).
    pub(crate) full_scan: Option<String>,
}

impl Checkpointer {
    /// A checkpointer for the run directory `run_dir`; the journal is created by the
    /// first [`Checkpointer::write`].
    #[cfg(test)]
    pub(crate) fn new(run_dir: &Path) -> Checkpointer {
        Checkpointer::with_log(run_dir, Box::new(FsCheckpointLog::new(run_dir)))
    }

    /// Continues the journal of a resumed run, cutting off a partial last record.
    #[cfg(test)]
    pub(crate) fn resume(run_dir: &Path) -> Result<Checkpointer, CheckpointError> {
        Ok(Checkpointer::with_log(
            run_dir,
            Box::new(FsCheckpointLog::resume(run_dir)?),
        ))
    }

    /// A checkpointer writing to `log`; `run_dir` holds the stage files that git
    /// metadata commits store.
    pub(crate) fn with_log(run_dir: &Path, log: Box<dyn CheckpointLog>) -> Checkpointer {
        Checkpointer {
            log,
            buffer: Vec::new(),
            git: None,
            staged: None,
            run_dir: run_dir.to_path_buf(),
        }
    }

    /// Writes `checkpoint` to the log and keeps its bytes as readers see them.
    fn write_state(
        &mut self,
        checkpoint: &CheckpointView<'_>,
        hint: &ChangeHint<'_>,
    ) -> Result<(), CheckpointError> {
        let bytes = self.log.write(checkpoint, hint)?;
        // Only git metadata commits read the bytes again.
        if self.git.is_some() {
            self.buffer.clear();
            self.buffer.extend_from_slice(bytes);
        }
        Ok(())
    }
}

impl Checkpointer {
    /// The paths the run-branch commit of the command stage that just ended will change
    /// (SPEC 17.7: its `files_touched`), sorted; none without git checkpointing. Stages
    /// the worktree now, and the stage's checkpoint commits exactly what was staged. A
    /// failure is logged and gives none: the checkpoint stages again and reports it.
    pub(crate) fn stage_command(&mut self) -> Vec<String> {
        let Some(git) = self.git.as_mut() else {
            return Vec::new();
        };
        let staged = match git.stage() {
            Ok(staged) => staged,
            Err(error) => {
                tracing::warn!(error = %crate::error_chain(&error), "cannot stage a command's changes");
                return Vec::new();
            }
        };
        let paths = git.changed_paths(&staged);
        self.staged = Some(staged);
        paths.unwrap_or_else(|error| {
            tracing::warn!(error = %crate::error_chain(&error), "cannot list a command's changes");
            Vec::new()
        })
    }

    /// Uses git checkpointing from now on.
    pub(crate) fn attach_git(&mut self, git: RunGit) {
        self.git = Some(git);
    }

    /// Hands the run's git state back, e.g. to remove the worktree after a success.
    pub(crate) fn take_git(&mut self) -> Option<RunGit> {
        self.git.take()
    }

    /// The run's git state, when git checkpointing is active (parallel branches, fan-in).
    pub(crate) fn git_mut(&mut self) -> Option<&mut RunGit> {
        self.git.as_mut()
    }

    /// The run-branch tip, when git checkpointing is active.
    pub(crate) fn git_head(&self) -> Option<String> {
        self.git.as_ref().map(RunGit::head_sha)
    }

    /// The checkpoint cycle (SPEC 8.6): (1) the state made durable and
    /// `checkpoint.json` replaced; with git, (2) the metadata commit, (3) the run-branch
    /// commit naming it, (4) the state again with `git_commit_sha` set. Initial and
    /// final checkpoints stop after step 2 with the branch tip as their commit.
    pub(crate) fn write(
        &mut self,
        checkpoint: &CheckpointView<'_>,
        hint: &ChangeHint<'_>,
        cycle: Cycle<'_>,
    ) -> Result<CycleShas, CheckpointError> {
        let Some(head) = self.git_head() else {
            self.write_state(checkpoint, hint)?;
            return Ok(CycleShas::default());
        };
        let mut view = *checkpoint;
        match cycle {
            Cycle::Stage {
                node_id,
                status,
                stage_dir,
            } => {
                view.git_commit_sha = None;
                self.write_state(&view, hint)?;
                let git = self.git.as_mut().ok_or(CheckpointError::GitMissing)?;
                let staged = match self.staged.take() {
                    Some(staged) => staged,
                    None => git.stage()?,
                };
                let full_scan = git.take_full_scan_warning();
                if let Some(patch) = git.diff_patch(&staged, crate::git::METADATA_FILE_LIMIT)? {
                    let path = stage_dir.join("diff.patch");
                    let patch = fabro_llm::redact::redactor().redact_bytes(patch.as_ref());
                    fs_err::write(&path, patch)
                        .map_err(|source| CheckpointError::File { path, source })?;
                }
                let files = stage_files(&self.run_dir, node_id, stage_dir, &self.buffer);
                let borrowed: Vec<MetadataFile<'_>> = files
                    .iter()
                    .map(|(path, contents)| MetadataFile { path, contents })
                    .collect();
                let (metadata, sha) = git.checkpoint_stage(
                    staged,
                    &borrowed,
                    &crate::git::StageCommit {
                        node_id,
                        status,
                        completed_count: view.completed_nodes.len(),
                    },
                )?;
                // SPEC 18.3: on the remote before the store names the commit, and only
                // while the run's lease is held.
                if git.pushes() {
                    self.log.still_held()?;
                    git.push()?;
                }
                view.git_commit_sha = Some(&sha);
                self.write_state(&view, &ChangeHint::nothing())?;
                Ok(CycleShas {
                    git_commit_sha: Some(sha.clone()),
                    metadata_sha: Some(metadata.sha),
                    full_scan,
                })
            }
            Cycle::Initial | Cycle::Final => {
                // Changes staged for a stage whose checkpoint never came are not committed.
                self.staged = None;
                view.git_commit_sha = Some(&head);
                self.write_state(&view, hint)?;
                let mut files = Vec::new();
                if matches!(cycle, Cycle::Initial) {
                    for name in [crate::run_dir::MANIFEST_FILE, "graph.fabro", "config.json"] {
                        if let Ok(bytes) = fs_err::read(self.run_dir.join(name)) {
                            files.push((name.to_owned(), bytes));
                        }
                    }
                    // SPEC 4.1: the stored child workflows.
                    stored_children(&self.run_dir, "children", &mut files);
                }
                files.push((
                    crate::run_dir::CHECKPOINT_FILE.to_owned(),
                    self.buffer.clone(),
                ));
                let borrowed: Vec<MetadataFile<'_>> = files
                    .iter()
                    .map(|(path, contents)| MetadataFile { path, contents })
                    .collect();
                let message = match cycle {
                    Cycle::Initial => MetadataMessage::Initialize,
                    _ => MetadataMessage::Final {
                        run_status: view.run_status.as_str(),
                    },
                };
                let git = self.git.as_mut().ok_or(CheckpointError::GitMissing)?;
                let metadata = git.write_metadata(message, &borrowed)?;
                if git.pushes() {
                    self.log.still_held()?;
                    git.push()?;
                }
                Ok(CycleShas {
                    git_commit_sha: Some(head),
                    metadata_sha: Some(metadata.sha),
                    full_scan: None,
                })
            }
        }
    }

    /// Writes the last complete checkpoint again with `run_status`: the final checkpoint
    /// of a run cancelled in the middle of a stage, which must not count the interrupted
    /// visit (its rank, visit and simulated replies are used again on resume). The LLM
    /// totals are the run's current ones: tokens spent by the interrupted stage were
    /// spent, and budgets count them (SPEC 17.1).
    pub(crate) fn write_last_with_status(
        &mut self,
        run_status: RunStatus,
        totals: crate::budget::Totals,
    ) -> Result<bool, CheckpointError> {
        let Some(mut record) = self.log.last().cloned() else {
            return Ok(false);
        };
        record.llm_tokens = totals.tokens;
        record.llm_cost_usd = totals.cost_usd;
        record.run_status = run_status;
        record.timestamp = crate::timestamp::now_rfc3339();
        self.write(&record.view(), &ChangeHint::everything(), Cycle::Final)?;
        Ok(true)
    }
}

/// The metadata files of a stage (SPEC 8.3): `checkpoint.json`, and the stage's
/// prompt, response, status and diff under `nodes/{node_id}/` and under
/// `stages/{rank}-{node_id}@{visit}/`.
fn stage_files(
    run_dir: &Path,
    node_id: &str,
    stage_dir: &Path,
    checkpoint: &[u8],
) -> Vec<(String, Vec<u8>)> {
    let mut files = vec![(
        crate::run_dir::CHECKPOINT_FILE.to_owned(),
        checkpoint.to_vec(),
    )];
    let stage_name = stage_dir
        .strip_prefix(run_dir)
        .map(|relative| relative.to_string_lossy().into_owned())
        .unwrap_or_default();
    for name in ["prompt.md", "response.md", "status.json", "diff.patch"] {
        let Ok(bytes) = fs_err::read(stage_dir.join(name)) else {
            continue;
        };
        if !stage_name.is_empty() {
            files.push((format!("{stage_name}/{name}"), bytes.clone()));
        }
        files.push((format!("nodes/{node_id}/{name}"), bytes));
    }
    files
}

/// The files under `{run_dir}/{relative}`, recursively, as (path in the tree, bytes).
fn stored_children(run_dir: &Path, relative: &str, files: &mut Vec<(String, Vec<u8>)>) {
    let Ok(entries) = fs_err::read_dir(run_dir.join(relative)) else {
        return;
    };
    let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
    entries.sort_by_key(fs_err::DirEntry::file_name);
    for entry in entries {
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let path = format!("{relative}/{name}");
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => stored_children(run_dir, &path, files),
            Ok(kind) if kind.is_file() => {
                if let Ok(bytes) = fs_err::read(entry.path()) {
                    files.push((path, bytes));
                }
            }
            _ => {}
        }
    }
}

/// `{run_dir}/journal.jsonl`.
pub(crate) fn journal_path(run_dir: &Path) -> PathBuf {
    run_dir.join(crate::run_dir::JOURNAL_FILE)
}

/// The newest complete checkpoint of a run without git checkpointing: the journal's
/// state, or `checkpoint.json` when there is no journal (or it is behind the file).
pub(crate) fn load_newest(run_dir: &Path) -> Result<Option<Checkpoint>, LoadError> {
    let journaled = crate::journal::replay(&journal_path(run_dir))?;
    let file_path = run_dir.join(crate::run_dir::CHECKPOINT_FILE);
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

/// The newest complete checkpoint of a run with git checkpointing (SPEC 8.7 step 2):
/// walking back from the metadata tip, the first checkpoint that names its run-branch
/// commit, or whose metadata commit a run-branch commit names in its `Fabro-Checkpoint`
/// trailer; `git_commit_sha` is set to that commit. A newer stage whose run-branch
/// commit never happened does not count.
///
/// First the refs are brought forward to the newest run-branch commit the journal in
/// `run_dir` records ([`RunHistory::recover_refs`](crate::git::RunHistory::recover_refs)),
/// since after an operating-system crash the synced journal can be ahead of the refs.
pub(crate) fn load_newest_from_git(
    repo: &Path,
    run_dir: &Path,
    run_id: &str,
) -> Result<Option<Checkpoint>, LoadError> {
    let Some(history) = crate::git::RunHistory::open(repo)? else {
        return Ok(None);
    };
    let journaled = match crate::journal::replay(&journal_path(run_dir)) {
        Ok(replayed) => replayed.and_then(|checkpoint| checkpoint.git_commit_sha),
        Err(error) => {
            tracing::warn!(error = %crate::error_chain(&error), "cannot read the journal; resuming from the refs alone");
            None
        }
    };
    if let Some(sha) = journaled {
        if history.recover_refs(run_id, &sha)? {
            tracing::warn!(run_id, %sha, "the run's refs were behind its journal; moved them forward");
        }
    }
    let commits = history.run_commits_by_checkpoint(run_id)?;
    for entry in history.metadata_history(run_id)? {
        let entry = entry?;
        let Some(bytes) = entry.checkpoint else {
            continue;
        };
        let mut checkpoint: Checkpoint =
            serde_json::from_slice(&bytes).map_err(|source| LoadError::Parse {
                path: PathBuf::from(format!("{}:{}", entry.sha, crate::run_dir::CHECKPOINT_FILE)),
                source,
            })?;
        if checkpoint.git_commit_sha.is_some() {
            return Ok(Some(checkpoint));
        }
        if let Some(sha) = commits.get(&entry.sha) {
            checkpoint.git_commit_sha = Some(sha.clone());
            return Ok(Some(checkpoint));
        }
    }
    Ok(None)
}

/// Whether `a` describes a later point of the run than `b`.
pub(crate) fn newer(a: &Checkpoint, b: &Checkpoint) -> bool {
    (
        a.completed_nodes.len(),
        a.stage_rank,
        a.run_status != RunStatus::Running,
    ) > (
        b.completed_nodes.len(),
        b.stage_rank,
        b.run_status != RunStatus::Running,
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
    /// The git history could not be read.
    #[error(transparent)]
    Git(#[from] crate::git::GitError),
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
            run_id: crate::id::RunId::from("R"),
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
            llm_tokens: 0,
            llm_cost_usd: 0.0,
            run_status: RunStatus::Running,
        }
    }

    #[test]
    fn the_journal_wins_over_a_stale_or_torn_checkpoint_file() {
        let directory = tempfile::tempdir().expect("tempdir");
        let mut checkpointer = Checkpointer::new(directory.path());
        for completed in 0..3 {
            checkpointer
                .write(
                    &checkpoint(completed).view(),
                    &ChangeHint::everything(),
                    Cycle::Final,
                )
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
            .write(
                &checkpoint(0).view(),
                &ChangeHint::everything(),
                Cycle::Initial,
            )
            .expect("writes");
        checkpointer
            .write(
                &checkpoint(1).view(),
                &ChangeHint::everything(),
                Cycle::Final,
            )
            .expect("writes");
        drop(checkpointer);
        let mut resumed = Checkpointer::resume(directory.path()).expect("resumes");
        resumed
            .write(
                &checkpoint(2).view(),
                &ChangeHint::everything(),
                Cycle::Final,
            )
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
