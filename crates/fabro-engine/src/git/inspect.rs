//! The clean-tree test of SPEC 8.1: is the working directory inside a repository whose tracked
//! files have no staged or unstaged modifications, and which untracked files will the run's
//! worktree lack.

use std::path::{Path, PathBuf};

use git2::{Repository, Status, StatusOptions};

use super::GitError;

/// What [`inspect`] found about the workflow's working directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RepoState {
    /// The directory is not inside a (non-bare) git repository: nothing git-related happens.
    NoRepository,
    /// The repository has no commit yet, so there is no base SHA; treat as no repository.
    Unborn {
        /// Root of the repository's working tree.
        repo_root: PathBuf,
    },
    /// Tracked files have staged or unstaged modifications: run in place without checkpoints.
    Dirty {
        /// Root of the repository's working tree.
        repo_root: PathBuf,
        /// The modified tracked paths, relative to the repository root, sorted.
        modified: Vec<String>,
    },
    /// Git checkpointing can be active.
    Clean {
        /// Root of the repository's working tree.
        repo_root: PathBuf,
        /// The SHA of `HEAD`, the run's base SHA.
        head_sha: String,
        /// The working directory relative to `repo_root` (empty when they are the same); the
        /// run's working directory is the worktree joined with it.
        work_dir_relative: PathBuf,
        /// Untracked, not ignored files relative to the repository root, sorted: they are not
        /// in the run's worktree (the `untracked_not_in_worktree` warning of SPEC 8.1).
        untracked: Vec<String>,
    },
}

/// Inspects the repository containing `work_dir` without modifying anything in it.
///
/// Untracked files never make the repository dirty; changes inside submodules are ignored.
/// Errors come only from a repository that exists but cannot be read.
pub(crate) fn inspect(work_dir: &Path) -> Result<RepoState, GitError> {
    let repo = match Repository::discover(work_dir) {
        Ok(repo) => repo,
        Err(error) if error.code() == git2::ErrorCode::NotFound => {
            return Ok(RepoState::NoRepository)
        }
        Err(source) => {
            return Err(GitError::Git {
                action: format!("open the repository of {}", work_dir.display()),
                source,
            })
        }
    };
    let Some(repo_root) = repo.workdir().map(Path::to_path_buf) else {
        return Ok(RepoState::NoRepository);
    };
    let head = match repo.head() {
        Ok(head) => head,
        Err(error)
            if matches!(
                error.code(),
                git2::ErrorCode::UnbornBranch | git2::ErrorCode::NotFound
            ) =>
        {
            return Ok(RepoState::Unborn { repo_root })
        }
        Err(source) => {
            return Err(GitError::Git {
                action: format!("read HEAD of {}", repo_root.display()),
                source,
            })
        }
    };
    let head_sha = head
        .peel_to_commit()
        .map_err(GitError::git(format!(
            "read HEAD of {}",
            repo_root.display()
        )))?
        .id()
        .to_string();

    // One scan for both questions; without UPDATE_INDEX libgit2 never writes the user's index.
    let mut options = StatusOptions::new();
    options
        .include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false)
        .exclude_submodules(true)
        .renames_head_to_index(false)
        .renames_index_to_workdir(false);
    let status_error = || GitError::git(format!("read the status of {}", repo_root.display()));
    let statuses = match repo.statuses(Some(&mut options)) {
        Ok(statuses) => statuses,
        // libgit2 cannot read a split index (the one fabro writes in a large run worktree):
        // compare the working tree with the tree of `HEAD` instead, by content.
        Err(error) if error.class() == git2::ErrorClass::Index => {
            let tree = repo
                .find_commit(git2::Oid::from_str(&head_sha).map_err(status_error())?)
                .and_then(|commit| commit.tree())
                .map_err(status_error())?;
            let mut index = git2::Index::new().map_err(status_error())?;
            index.read_tree(&tree).map_err(status_error())?;
            repo.set_index(&mut index).map_err(status_error())?;
            options.no_refresh(true);
            repo.statuses(Some(&mut options)).map_err(status_error())?
        }
        Err(error) => return Err(status_error()(error)),
    };
    let mut modified = Vec::new();
    let mut untracked = Vec::new();
    for entry in statuses.iter() {
        let path = String::from_utf8_lossy(entry.path_bytes()).into_owned();
        let status = entry.status();
        if status == Status::WT_NEW {
            untracked.push(path);
        } else if !status.is_empty() && !status.contains(Status::IGNORED) {
            modified.push(path);
        }
    }
    modified.sort();
    untracked.sort();
    if !modified.is_empty() {
        return Ok(RepoState::Dirty {
            repo_root,
            modified,
        });
    }
    Ok(RepoState::Clean {
        work_dir_relative: relative_to_root(&repo_root, work_dir),
        repo_root,
        head_sha,
        untracked,
    })
}

/// `work_dir` relative to `repo_root`, comparing canonical paths so symlinked temp dirs agree.
fn relative_to_root(repo_root: &Path, work_dir: &Path) -> PathBuf {
    let root = repo_root
        .canonicalize()
        .unwrap_or_else(|_| repo_root.to_path_buf());
    let dir = work_dir
        .canonicalize()
        .unwrap_or_else(|_| work_dir.to_path_buf());
    dir.strip_prefix(&root)
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::test_repo::TestRepo;

    #[test]
    fn outside_a_repository_is_no_repository() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(inspect(dir.path()).unwrap(), RepoState::NoRepository);
    }

    #[test]
    fn untracked_file_keeps_the_repository_clean_and_is_listed() {
        let Some(repo) = TestRepo::new() else { return };
        repo.write("notes.txt", "scratch");
        repo.write("sub/new.rs", "fn main() {}");
        repo.write("build.log", "ignored");
        let state = inspect(&repo.path().join("src")).unwrap();
        let RepoState::Clean {
            head_sha,
            work_dir_relative,
            untracked,
            ..
        } = state
        else {
            panic!("expected clean, got {state:?}");
        };
        assert_eq!(head_sha, repo.git(&["rev-parse", "HEAD"]));
        assert_eq!(work_dir_relative, PathBuf::from("src"));
        assert_eq!(untracked, vec!["notes.txt", "sub/new.rs"]);
    }

    #[test]
    fn modified_tracked_file_is_dirty() {
        let Some(repo) = TestRepo::new() else { return };
        repo.write("README.md", "changed\n");
        let state = inspect(&repo.path()).unwrap();
        assert!(
            matches!(&state, RepoState::Dirty { modified, .. } if modified == &["README.md"]),
            "{state:?}"
        );
    }

    #[test]
    fn staged_change_is_dirty() {
        let Some(repo) = TestRepo::new() else { return };
        repo.write("added.txt", "new\n");
        repo.git(&["add", "added.txt"]);
        let state = inspect(&repo.path()).unwrap();
        assert!(
            matches!(&state, RepoState::Dirty { modified, .. } if modified == &["added.txt"]),
            "{state:?}"
        );
    }

    #[test]
    fn inspect_leaves_the_index_untouched() {
        let Some(repo) = TestRepo::new() else { return };
        let before = repo.snapshot();
        // Touching a tracked file makes its stat data stale, which tempts an index refresh.
        repo.write("README.md", "hello\n");
        inspect(&repo.path()).unwrap();
        assert_eq!(repo.snapshot(), before);
    }

    #[test]
    fn repository_without_commits_is_unborn() {
        let Some(repo) = TestRepo::empty() else {
            return;
        };
        assert!(matches!(
            inspect(&repo.path()).unwrap(),
            RepoState::Unborn { .. }
        ));
    }
}
