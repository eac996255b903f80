//! The git side of a rewind (SPEC 20.3): the run branch's previous head kept as
//! `refs/fabro-rewound/{run_id}/{k}`, a metadata commit whose checkpoint is the one the
//! run goes back to (so that resume finds it first, walking back from the tip), and the
//! run branch moved back to that checkpoint's commit.
//!
//! Every step can be done again: the rewound ref is made only when missing, the
//! metadata commit only when the tip is not rewind `k`'s already, and moving the branch
//! twice moves it to the same commit. Nothing is deleted: the commits left behind stay
//! reachable from the rewound ref and the metadata history.

use std::path::Path;

use git2::{Oid, Repository};

use super::history::metadata_tip;
use super::message::trailer;
use super::worktree::{find_commit, open};
use super::{check_run_id, metadata_ref_name, run_branch_name, Author, GitError};

/// `refs/fabro-rewound/{run_id}/{k}`: the run branch's head before rewind `k`.
pub(crate) fn rewound_ref_name(run_id: &str, k: u32) -> String {
    format!("refs/fabro-rewound/{run_id}/{k}")
}

/// The subject of rewind `k`'s metadata commit.
fn rewind_subject(run_id: &str, k: u32) -> String {
    format!("fabro({run_id}): rewind {k}")
}

/// One run's refs, opened to rewind it.
pub(crate) struct RewindGit {
    repo: Repository,
    run_id: String,
}

impl std::fmt::Debug for RewindGit {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RewindGit")
            .field("run_id", &self.run_id)
            .finish_non_exhaustive()
    }
}

impl RewindGit {
    /// The refs of run `run_id` in the repository at `repo_root`.
    pub(crate) fn open(repo_root: &Path, run_id: &str) -> Result<RewindGit, GitError> {
        check_run_id(run_id)?;
        Ok(RewindGit {
            repo: open(repo_root)?,
            run_id: run_id.to_owned(),
        })
    }

    /// The run branch's head, if the branch exists.
    pub(crate) fn run_branch_head(&self) -> Option<String> {
        self.repo
            .refname_to_id(&format!("refs/heads/{}", run_branch_name(&self.run_id)))
            .ok()
            .map(|oid| oid.to_string())
    }

    /// The numbers of the run's rewound refs.
    pub(crate) fn rewound_numbers(&self) -> Result<Vec<u32>, GitError> {
        let prefix = format!("refs/fabro-rewound/{}/", self.run_id);
        let references = self
            .repo
            .references_glob(&format!("{prefix}*"))
            .map_err(GitError::git(format!("list {prefix}")))?;
        Ok(references
            .flatten()
            .filter_map(|reference| reference.name()?.strip_prefix(&prefix)?.parse::<u32>().ok())
            .collect())
    }

    /// Keeps `sha` as `refs/fabro-rewound/{run_id}/{k}`, unless that ref exists.
    pub(crate) fn keep_rewound(&self, k: u32, sha: &str) -> Result<(), GitError> {
        let name = rewound_ref_name(&self.run_id, k);
        if self.repo.refname_to_id(&name).is_ok() {
            return Ok(());
        }
        let commit = find_commit(&self.repo, sha)?;
        self.repo
            .reference(
                &name,
                commit.id(),
                false,
                "fabro: keep the head before a rewind",
            )
            .map_err(GitError::git(format!("create {name}")))?;
        Ok(())
    }

    /// Writes rewind `k`'s metadata commit on top of the metadata tip, unless the tip is
    /// that commit already: the tree of the metadata commit that `commit_sha`'s
    /// `Fabro-Checkpoint` trailer names, with `checkpoint` as its `checkpoint.json`.
    pub(crate) fn record_rewind(
        &self,
        k: u32,
        commit_sha: &str,
        checkpoint: &[u8],
        author: &Author,
    ) -> Result<(), GitError> {
        let tip = metadata_tip(&self.repo, &self.run_id)?;
        let subject = rewind_subject(&self.run_id, k);
        if let Some(tip) = tip {
            let commit = self
                .repo
                .find_commit(tip)
                .map_err(GitError::git(format!("read metadata commit {tip}")))?;
            if commit.summary() == Some(subject.as_str()) {
                return Ok(());
            }
        }
        let target = find_commit(&self.repo, commit_sha)?;
        let named = target
            .message()
            .and_then(|message| trailer(message, "Fabro-Checkpoint"))
            .and_then(|sha| Oid::from_str(sha).ok())
            .and_then(|oid| self.repo.find_commit(oid).ok());
        let base_tree = match &named {
            Some(metadata) => Some(
                metadata
                    .tree()
                    .map_err(GitError::git(format!("read the tree of {}", metadata.id())))?,
            ),
            None => None,
        };
        let write_error = || GitError::git(format!("write the metadata of rewind {k}"));
        let blob = self
            .repo
            .blob(&fabro_llm::redact::redactor().redact_bytes(checkpoint))
            .map_err(write_error())?;
        let mut builder = self
            .repo
            .treebuilder(base_tree.as_ref())
            .map_err(write_error())?;
        builder
            .insert(crate::run_dir::CHECKPOINT_FILE, blob, 0o100_644)
            .map_err(write_error())?;
        let tree_id = builder.write().map_err(write_error())?;
        let tree = self.repo.find_tree(tree_id).map_err(write_error())?;
        let signature = author.signature()?;
        let parent = match tip {
            Some(tip) => Some(self.repo.find_commit(tip).map_err(write_error())?),
            None => None,
        };
        let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
        let oid = self
            .repo
            .commit(None, &signature, &signature, &subject, &tree, &parents)
            .map_err(write_error())?;
        let name = metadata_ref_name(&self.run_id);
        self.repo
            .reference(&name, oid, true, "fabro: rewind")
            .map_err(GitError::git(format!("update {name}")))?;
        Ok(())
    }

    /// Points the run branch at `commit_sha`.
    pub(crate) fn move_branch(&self, commit_sha: &str) -> Result<(), GitError> {
        let commit = find_commit(&self.repo, commit_sha)?;
        let name = format!("refs/heads/{}", run_branch_name(&self.run_id));
        self.repo
            .reference(&name, commit.id(), true, "fabro: rewind")
            .map_err(GitError::git(format!("move {name}")))?;
        Ok(())
    }
}
