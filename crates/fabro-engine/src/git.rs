//! Git checkpointing over libgit2 (SPEC 8): the clean-tree test, the run branch and its
//! worktree, run-branch commits with trailers, the orphan metadata ref, and the read side
//! that resume needs.
//!
//! The pieces, in the order a run uses them:
//! - [`inspect`] decides whether checkpointing is active ([`RepoState`], SPEC 8.1).
//! - [`RunGit::create`] makes `fabro/run/{run_id}` at the base SHA and a linked worktree on it
//!   (SPEC 8.4); [`RunGit::reattach`] does the same for a resumed run (SPEC 8.7 step 4).
//! - [`RunGit::write_metadata`] writes one commit of `refs/fabro/{run_id}` straight into the
//!   object database (SPEC 8.3); [`RunGit::checkpoint_stage`] writes it together with the
//!   run-branch commit of the stage's changes, whose trailers name that metadata commit.
//! - [`CheckedOutBranch::create_branch`] gives each parallel branch its own branch and worktree
//!   ([`BranchWorktree`], SPEC 5.7); [`CheckedOutBranch::advance`] moves the run branch to the
//!   chosen branch head (SPEC 5.8).
//! - [`RewindGit`] moves a run back to an earlier stage's commit (SPEC 20.3), keeping the
//!   previous head as `refs/fabro-rewound/{run_id}/{k}`.
//! - [`RunHistory`] reads the metadata history, finds run-branch commits by trailer and reads
//!   stored files.
//!
//! Nothing here touches the user's `HEAD`, index, working tree or current branch (SPEC 13.6):
//! the only refs written are `refs/heads/fabro/run/{run_id}`, `refs/fabro/{run_id}`,
//! `refs/heads/fabro/parallel/{run_id}/…` and `refs/fabro-rewound/{run_id}/{k}`, and all
//! index and checkout work happens in the run's own worktrees.
//! Everything is blocking; async callers run it in `spawn_blocking`.

mod before;
mod exclude;
mod full_scan;
mod history;
mod index_file;
mod inspect;
mod message;
mod metadata;
mod object;
mod pack;
mod parallel_branch;
mod remote;
mod rewind;
mod run_git;
mod stage;
#[cfg(test)]
pub(crate) mod test_repo;
mod tree_diff;
mod watch;
mod worktree;

use std::path::PathBuf;

pub(crate) use before::{before_ref_name, save_before};
pub use history::{MetadataEntry, RunHistory};
pub(crate) use inspect::{inspect, RepoState};
pub(crate) use message::MetadataMessage;
pub(crate) use metadata::{MetadataFile, METADATA_FILE_LIMIT};
pub(crate) use parallel_branch::{BranchCleanup, BranchWorktree, CheckedOutBranch, ParallelSite};
pub(crate) use remote::RemotePush;
pub use remote::{
    checkout_origin, has_credentials, without_credentials, CheckoutOrigin, Mirrors, PushedRefs,
    RemoteRepository,
};
pub(crate) use rewind::RewindGit;
pub(crate) use run_git::{RunGit, RunGitSettings, StageCommit, StagedChanges};
pub(crate) use watch::ChangeFeed;

/// Name and email used as author and committer of fabro's commits (SPEC 8.3, `[git]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Author {
    name: String,
    email: String,
}

impl Author {
    /// An author with the given name and email.
    pub(crate) fn new(name: impl Into<String>, email: impl Into<String>) -> Author {
        Author {
            name: name.into(),
            email: email.into(),
        }
    }

    fn signature(&self) -> Result<git2::Signature<'static>, GitError> {
        git2::Signature::now(&self.name, &self.email).map_err(|source| GitError::Author {
            name: self.name.clone(),
            email: self.email.clone(),
            source,
        })
    }
}

impl Default for Author {
    /// `fabro <fabro@local>`, the default of SPEC 8.3.
    fn default() -> Author {
        Author::new("fabro", "fabro@local")
    }
}

/// The run branch of a run: `fabro/run/{run_id}` (SPEC 8.2).
pub(crate) fn run_branch_name(run_id: &str) -> String {
    format!("fabro/run/{run_id}")
}

/// The local metadata ref of a run: `refs/fabro/{run_id}` (SPEC 8.2).
pub(crate) fn metadata_ref_name(run_id: &str) -> String {
    format!("refs/fabro/{run_id}")
}

/// Failures of fabro's git operations.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// libgit2 failed while doing `action`.
    #[error("git: cannot {action}")]
    Git {
        /// What fabro was doing, e.g. `open repository /path`.
        action: String,
        /// The libgit2 error.
        #[source]
        source: git2::Error,
    },
    /// A file-system operation on fabro's own files (worktree directory) failed.
    #[error("cannot {action} {}", .path.display())]
    Io {
        /// What fabro was doing.
        action: &'static str,
        /// The path concerned.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The configured author cannot form a git signature.
    #[error("invalid git author {name} <{email}>")]
    Author {
        /// Configured name.
        name: String,
        /// Configured email.
        email: String,
        /// The libgit2 error.
        #[source]
        source: git2::Error,
    },
    /// A string that should be a commit SHA is not one, or names no commit.
    #[error("{sha} is not a commit of the repository")]
    UnknownCommit {
        /// The SHA as given.
        sha: String,
    },
    /// The run branch already exists when a run is created.
    #[error("branch {branch} already exists")]
    BranchExists {
        /// The branch name.
        branch: String,
    },
    /// Neither a local nor a remote-tracking run branch exists for a resumed run.
    #[error("run branch {branch} not found, neither locally nor on a remote")]
    BranchMissing {
        /// The branch name.
        branch: String,
    },
    /// The worktree path holds files that are not a worktree of this run.
    #[error("{} exists and is not the worktree of run {run_id}", .path.display())]
    WorktreePathOccupied {
        /// The path.
        path: PathBuf,
        /// The run.
        run_id: String,
    },
    /// A metadata file path is empty or has an empty, `.`, `..` or `.git` component.
    #[error("invalid metadata path {path:?}")]
    InvalidMetadataPath {
        /// The path as given.
        path: String,
    },
    /// An exclude glob of `[checkpoint] exclude_globs` is not valid gitignore syntax.
    #[error("invalid checkpoint exclude glob {glob:?}")]
    ExcludeGlob {
        /// The glob as configured.
        glob: String,
        /// The parse error.
        #[source]
        source: ignore::Error,
    },
    /// A commit made since the parallel base does not apply on top of the chosen branch head
    /// (SPEC 5.8).
    #[error("commit {sha} conflicts with the chosen parallel branch")]
    ReplayConflict {
        /// The commit that did not apply.
        sha: String,
    },
    /// The `git` program failed (a fetch, a push: SPEC 18.3).
    #[error("git: cannot {action}: {detail}")]
    Program {
        /// What fabro was doing, e.g. `push the refs of run {id}`.
        action: String,
        /// The end of git's error output, without credentials.
        detail: String,
    },
    /// The run id cannot be part of a ref name.
    #[error("invalid run id {run_id:?} for a git ref")]
    InvalidRunId {
        /// The run id.
        run_id: String,
    },
}

impl GitError {
    fn git(action: impl Into<String>) -> impl FnOnce(git2::Error) -> GitError {
        let action = action.into();
        move |source| GitError::Git { action, source }
    }

    fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> GitError {
        let path = path.into();
        move |source| GitError::Io {
            action,
            path,
            source,
        }
    }
}

/// Whether `run_id` can be used inside `fabro/run/{run_id}` and `refs/fabro/{run_id}`.
fn check_run_id(run_id: &str) -> Result<(), GitError> {
    let valid = !run_id.is_empty()
        && run_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if valid {
        Ok(())
    } else {
        Err(GitError::InvalidRunId {
            run_id: run_id.to_owned(),
        })
    }
}
