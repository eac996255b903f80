//! The read side of git checkpointing, for resume and inspection (SPEC 8.7 step 2): the metadata
//! history newest first, the run-branch commit whose `Fabro-Checkpoint` trailer names a
//! metadata commit, and files stored in metadata commits.

use std::collections::HashMap;
use std::path::Path;

use git2::{Oid, Repository};

use super::message::trailer;
use super::worktree::remote_tracking_refs;
use super::{metadata_ref_name, run_branch_name, GitError};

/// A repository opened for reading runs' refs (any directory inside it, or a worktree).
pub struct RunHistory {
    repo: Repository,
}

/// One metadata commit, as listed by [`RunHistory::metadata_history`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataEntry {
    /// The metadata commit's SHA.
    pub sha: String,
    /// Its message (`fabro({run_id}): checkpoint {node_id}`, …).
    pub message: String,
    /// The bytes of its `checkpoint.json`, when the tree has one.
    pub checkpoint: Option<Vec<u8>>,
}

impl std::fmt::Debug for RunHistory {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RunHistory")
            .field("path", &self.repo.path())
            .finish()
    }
}

impl RunHistory {
    /// Opens the repository containing `path`; `Ok(None)` when there is none.
    pub fn open(path: &Path) -> Result<Option<RunHistory>, GitError> {
        match Repository::discover(path) {
            Ok(repo) => Ok(Some(RunHistory { repo })),
            Err(error) if error.code() == git2::ErrorCode::NotFound => Ok(None),
            Err(source) => Err(GitError::Git {
                action: format!("open the repository of {}", path.display()),
                source,
            }),
        }
    }

    /// The working tree of the repository (for a linked worktree, that worktree);
    /// `None` for a bare repository.
    pub fn work_dir(&self) -> Option<&Path> {
        self.repo.workdir()
    }

    /// The newest complete metadata commit of `run_id` (SPEC 8.7 step 2): walking back from
    /// the tip, the first whose checkpoint names its run-branch commit or is named by a
    /// run-branch commit's `Fabro-Checkpoint` trailer. `None` when there is none.
    pub fn newest_complete_metadata(&self, run_id: &str) -> Result<Option<String>, GitError> {
        let commits = self.run_commits_by_checkpoint(run_id)?;
        for entry in self.metadata_history(run_id)? {
            let entry = entry?;
            let Some(bytes) = entry.checkpoint else {
                continue;
            };
            let names_commit = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .is_some_and(|checkpoint| checkpoint["git_commit_sha"].is_string());
            if names_commit || commits.contains_key(&entry.sha) {
                return Ok(Some(entry.sha));
            }
        }
        Ok(None)
    }

    /// The newest metadata commit of `run_id`: `refs/fabro/{run_id}`, else a local branch
    /// `fabro/meta/{run_id}`, else a remote-tracking `{remote}/fabro/meta/{run_id}` (the
    /// first remote by name). `None` when the run has no metadata in this repository.
    pub fn metadata_tip(&self, run_id: &str) -> Result<Option<String>, GitError> {
        Ok(self.metadata_tip_oid(run_id)?.map(|oid| oid.to_string()))
    }

    fn metadata_tip_oid(&self, run_id: &str) -> Result<Option<Oid>, GitError> {
        metadata_tip(&self.repo, run_id)
    }

    /// Walks the metadata history of `run_id` from the tip along first parents, newest first,
    /// reading each commit's `checkpoint.json` as it goes; stop iterating once the wanted
    /// checkpoint is found. Empty when the run has no metadata here.
    pub fn metadata_history(
        &self,
        run_id: &str,
    ) -> Result<impl Iterator<Item = Result<MetadataEntry, GitError>> + '_, GitError> {
        let mut next = self.metadata_tip_oid(run_id)?;
        Ok(std::iter::from_fn(move || {
            let oid = next.take()?;
            let entry = (|| {
                let read_error = || GitError::git(format!("read metadata commit {oid}"));
                let commit = self.repo.find_commit(oid).map_err(read_error())?;
                next = commit.parent_ids().next();
                let checkpoint = self.read_blob(&commit, crate::run_dir::CHECKPOINT_FILE)?;
                Ok(MetadataEntry {
                    sha: oid.to_string(),
                    message: String::from_utf8_lossy(commit.message_bytes()).into_owned(),
                    checkpoint,
                })
            })();
            Some(entry)
        }))
    }

    /// Maps metadata commit SHA → run-branch commit SHA, from the `Fabro-Checkpoint` trailers
    /// of every commit reachable from the run branch, local and remote-tracking (SPEC 8.3:
    /// the way "back" from metadata to file changes). Build it once per resume.
    pub fn run_commits_by_checkpoint(
        &self,
        run_id: &str,
    ) -> Result<HashMap<String, String>, GitError> {
        let walk_error = || GitError::git(format!("walk {}", run_branch_name(run_id)));
        let mut walk = self.repo.revwalk().map_err(walk_error())?;
        let mut any_tip = false;
        if let Ok(reference) = self
            .repo
            .find_reference(&format!("refs/heads/{}", run_branch_name(run_id)))
        {
            if let Some(target) = reference.target() {
                walk.push(target).map_err(walk_error())?;
                any_tip = true;
            }
        }
        for (_, target) in remote_tracking_refs(&self.repo, &run_branch_name(run_id))? {
            walk.push(target).map_err(walk_error())?;
            any_tip = true;
        }
        let mut found = HashMap::new();
        if !any_tip {
            return Ok(found);
        }
        for oid in walk {
            let oid = oid.map_err(walk_error())?;
            let commit = self.repo.find_commit(oid).map_err(walk_error())?;
            let message = String::from_utf8_lossy(commit.message_bytes());
            if trailer(&message, "Fabro-Run") != Some(run_id) {
                continue;
            }
            if let Some(metadata_sha) = trailer(&message, "Fabro-Checkpoint") {
                found
                    .entry(metadata_sha.to_owned())
                    .or_insert_with(|| oid.to_string());
            }
        }
        Ok(found)
    }

    /// The run-branch commit whose `Fabro-Checkpoint` trailer names `metadata_sha`, if any
    /// (SPEC 8.6: that stage's checkpoint is complete).
    pub fn find_run_commit(
        &self,
        run_id: &str,
        metadata_sha: &str,
    ) -> Result<Option<String>, GitError> {
        Ok(self.run_commits_by_checkpoint(run_id)?.remove(metadata_sha))
    }

    /// The bytes of `path` (`manifest.json`, `graph.fabro`, `config.json`,
    /// `nodes/{id}/status.json`, …) in metadata commit `metadata_sha`; `None` when absent.
    pub fn read_file(&self, metadata_sha: &str, path: &str) -> Result<Option<Vec<u8>>, GitError> {
        let commit = self.find_commit(metadata_sha)?;
        self.read_blob(&commit, path)
    }

    /// Every file under directory `dir` (e.g. `children`) of metadata commit `metadata_sha`,
    /// as (path relative to the tree root, bytes), sorted by path; empty when absent.
    pub fn read_dir(
        &self,
        metadata_sha: &str,
        dir: &str,
    ) -> Result<Vec<(String, Vec<u8>)>, GitError> {
        let commit = self.find_commit(metadata_sha)?;
        let read_error = || GitError::git(format!("read {dir} of metadata commit {metadata_sha}"));
        let root = commit.tree().map_err(read_error())?;
        let Ok(entry) = root.get_path(Path::new(dir)) else {
            return Ok(Vec::new());
        };
        let Ok(tree) = self.repo.find_tree(entry.id()) else {
            return Ok(Vec::new());
        };
        let mut files = Vec::new();
        let mut failure = None;
        tree.walk(git2::TreeWalkMode::PreOrder, |parent, entry| {
            if entry.kind() != Some(git2::ObjectType::Blob) {
                return git2::TreeWalkResult::Ok;
            }
            match self.repo.find_blob(entry.id()) {
                Ok(blob) => {
                    let name = String::from_utf8_lossy(entry.name_bytes());
                    files.push((format!("{dir}/{parent}{name}"), blob.content().to_vec()));
                    git2::TreeWalkResult::Ok
                }
                Err(error) => {
                    failure = Some(error);
                    git2::TreeWalkResult::Abort
                }
            }
        })
        .or_else(|error| {
            if failure.is_some() {
                Ok(())
            } else {
                Err(error)
            }
        })
        .map_err(read_error())?;
        if let Some(source) = failure {
            return Err(read_error()(source));
        }
        files.sort();
        Ok(files)
    }

    /// Moves the run branch and the metadata ref of `run_id` forward to the run-branch
    /// commit `commit_sha` and the metadata commit its `Fabro-Checkpoint` trailer names,
    /// when those commits exist and each ref is behind them (missing, or an ancestor).
    ///
    /// Objects reach the disk synced before the refs move, and the journal records the
    /// commit only after that, but ref updates themselves are not synced: after an
    /// operating-system crash the journal can be ahead of the refs. Resume calls this with
    /// the journal's newest commit so that no completed stage is lost (SPEC 13.2). Never
    /// moves a ref backwards or sideways; returns whether anything moved.
    pub fn recover_refs(&self, run_id: &str, commit_sha: &str) -> Result<bool, GitError> {
        let Ok(commit) = self.find_commit(commit_sha) else {
            return Ok(false);
        };
        let metadata = commit
            .message()
            .and_then(|message| trailer(message, "Fabro-Checkpoint"))
            .and_then(|sha| self.find_commit(sha).ok())
            .map(|metadata| metadata.id());
        let mut moved = false;
        let targets = [
            (metadata_ref_name(run_id), metadata),
            (
                format!("refs/heads/{}", run_branch_name(run_id)),
                Some(commit.id()),
            ),
        ];
        for (name, target) in targets {
            let Some(target) = target else { continue };
            let behind = match self.repo.refname_to_id(&name) {
                Ok(current) if current == target => false,
                Ok(current) => self
                    .repo
                    .graph_descendant_of(target, current)
                    .map_err(GitError::git(format!("compare {name} with {target}")))?,
                Err(_) => true,
            };
            if behind {
                self.repo
                    .reference(&name, target, true, "fabro: recover after a crash")
                    .map_err(GitError::git(format!("update {name}")))?;
                moved = true;
            }
        }
        Ok(moved)
    }

    fn find_commit(&self, sha: &str) -> Result<git2::Commit<'_>, GitError> {
        Oid::from_str(sha)
            .and_then(|oid| self.repo.find_commit(oid))
            .map_err(|_| GitError::UnknownCommit {
                sha: sha.to_owned(),
            })
    }

    fn read_blob(
        &self,
        commit: &git2::Commit<'_>,
        path: &str,
    ) -> Result<Option<Vec<u8>>, GitError> {
        let read_error = || GitError::git(format!("read {path} of commit {}", commit.id()));
        let tree = commit.tree().map_err(read_error())?;
        let Ok(entry) = tree.get_path(Path::new(path)) else {
            return Ok(None);
        };
        if entry.kind() != Some(git2::ObjectType::Blob) {
            return Ok(None);
        }
        let blob = self.repo.find_blob(entry.id()).map_err(read_error())?;
        Ok(Some(blob.content().to_vec()))
    }
}

/// The newest metadata commit of `run_id` in `repo`, looked up as
/// [`RunHistory::metadata_tip`] describes.
pub(crate) fn metadata_tip(repo: &Repository, run_id: &str) -> Result<Option<Oid>, GitError> {
    for name in [
        metadata_ref_name(run_id),
        format!("refs/heads/fabro/meta/{run_id}"),
    ] {
        if let Ok(reference) = repo.find_reference(&name) {
            if let Ok(commit) = reference.peel_to_commit() {
                return Ok(Some(commit.id()));
            }
        }
    }
    let remote = remote_tracking_refs(repo, &format!("fabro/meta/{run_id}"))?;
    Ok(remote.first().map(|(_, oid)| *oid))
}
