//! Git checkpointing of a new run (SPEC 8.1): decided while preparing ([`plan_git`]),
//! carried out at INITIALIZE.

use std::path::PathBuf;

use super::{RunError, RunOptions};
use crate::config::{DirtyWorktree, RunConfig};

/// Whether and how a new run checkpoints into git (SPEC 8.1).
#[derive(Debug, Clone)]
pub(super) enum GitPlan {
    /// No repository, a dry run, a child workflow or a resumed run.
    Off,
    /// Tracked files are modified: run in place, warn; the tree was saved under
    /// `before_ref` (SPEC 17.2).
    Dirty {
        /// Root of the repository's working tree (in the manifest, for `fabro gc`).
        repo_root: PathBuf,
        /// `refs/fabro-before/{run_id}`.
        before_ref: String,
    },
    /// A clean repository: a run branch and a worktree.
    Clean {
        repo_root: PathBuf,
        head_sha: String,
        work_dir_relative: PathBuf,
        untracked: Vec<String>,
    },
}

/// Author, exclusions and working directory of a run's git checkpointing (SPEC 8.3).
pub(super) fn git_settings(
    config: &RunConfig,
    work_dir_relative: PathBuf,
) -> crate::git::RunGitSettings {
    crate::git::RunGitSettings {
        author: crate::git::Author::new(
            config
                .git
                .author_name
                .clone()
                .unwrap_or_else(|| "fabro".to_owned()),
            config
                .git
                .author_email
                .clone()
                .unwrap_or_else(|| "fabro@local".to_owned()),
        ),
        exclude_globs: config.checkpoint.exclude_globs.clone().unwrap_or_default(),
        work_dir_relative,
    }
}

/// SPEC 8.1: inspect the working directory's repository; warnings go to `warnings`.
/// A dirty tree is saved under `refs/fabro-before/{run_id}` first (SPEC 17.2), or refused.
pub(super) fn plan_git(
    options: &RunOptions,
    run_id: &str,
    warnings: &mut Vec<String>,
) -> Result<GitPlan, RunError> {
    // SPEC 18.3: a repository named by URL is its mirror at the fetched commit.
    if let Some(repository) = &options.repository {
        return Ok(GitPlan::Clean {
            repo_root: repository.mirror.clone(),
            head_sha: repository.commit.clone(),
            work_dir_relative: PathBuf::new(),
            untracked: Vec::new(),
        });
    }
    let work_dir = match &options.work_dir {
        Some(work_dir) => work_dir.clone(),
        None => match std::env::current_dir() {
            Ok(directory) => directory,
            Err(_) => return Ok(GitPlan::Off),
        },
    };
    Ok(match crate::git::inspect(&work_dir) {
        Ok(crate::git::RepoState::Clean {
            repo_root,
            head_sha,
            work_dir_relative,
            untracked,
        }) => {
            if !untracked.is_empty() {
                warnings.push(format!(
                    "warning: untracked files are not in the run worktree: {}",
                    list_paths(&untracked)
                ));
            }
            GitPlan::Clean {
                repo_root,
                head_sha,
                work_dir_relative,
                untracked,
            }
        }
        Ok(crate::git::RepoState::Dirty { repo_root, .. }) => {
            if options.config.run.dirty_worktree == Some(DirtyWorktree::Refuse) {
                return Err(RunError::DirtyWorktree);
            }
            // SPEC 17.2: the user's work is saved before anything runs in it.
            let author = git_settings(&options.config, PathBuf::new()).author;
            crate::git::save_before(&repo_root, run_id, &author).map_err(|source| {
                RunError::SaveBefore {
                    run_id: run_id.to_owned(),
                    source,
                }
            })?;
            GitPlan::Dirty {
                before_ref: crate::git::before_ref_name(run_id),
                repo_root,
            }
        }
        Ok(_) => GitPlan::Off,
        Err(error) => {
            warnings.push(format!(
                "warning: cannot inspect the git repository; running without git checkpoints: {}",
                crate::error_chain(&error)
            ));
            GitPlan::Off
        }
    })
}

/// The `dirty_worktree` warning of SPEC 17.2, without its `warning: ` prefix.
pub(super) fn dirty_warning(before_ref: &str) -> String {
    format!(
        "working tree has uncommitted changes; running in place without git checkpoints \
         (saved as {before_ref}; restore with: git restore --source={before_ref} --worktree -- .)"
    )
}

/// The first 20 paths, comma-separated, then `and {n} more` (SPEC 8.1).
fn list_paths(paths: &[String]) -> String {
    let mut text = paths
        .iter()
        .take(20)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if paths.len() > 20 {
        text.push_str(&format!(" and {} more", paths.len() - 20));
    }
    text
}
