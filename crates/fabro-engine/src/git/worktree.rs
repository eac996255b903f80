//! The run's linked worktree on disk: adding, removing and recognising it, the repository
//! lock that serialises worktree registrations, and ref helpers shared by [`RunGit`](super::RunGit)
//! and the history reader.

use std::path::{Path, PathBuf};

use git2::{Oid, Repository};

use super::{run_branch_name, GitError};

/// Serialises the changes of worktree registrations and fabro's branch creation between
/// processes and threads sharing a repository: an exclusive `flock` on
/// `{common_dir}/fabro.lock`, held while a worktree is added or removed. libgit2's worktree
/// add is not safe against a concurrent one: it reads every registration to check that the
/// branch is not checked out elsewhere (a half-written registration reads as "already
/// checked out") and fails when another process creates `.git/worktrees` at the same time.
/// Released when dropped.
pub(crate) struct RepoLock {
    // Held for its lock; closing the descriptor releases it.
    _file: std::fs::File,
}

impl RepoLock {
    /// Waits for and takes the lock of the repository whose common directory is
    /// `common_dir`.
    pub(crate) fn acquire(common_dir: &Path) -> Result<RepoLock, GitError> {
        let path = common_dir.join("fabro.lock");
        let file = fs_err::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(GitError::io("open", path.clone()))?;
        file.file().lock().map_err(GitError::io("lock", path))?;
        Ok(RepoLock {
            _file: file.into_parts().0,
        })
    }
}

pub(super) fn open(path: &Path) -> Result<Repository, GitError> {
    Repository::open(path).map_err(GitError::git(format!(
        "open the repository at {}",
        path.display()
    )))
}

pub(super) fn find_commit<'r>(
    repo: &'r Repository,
    sha: &str,
) -> Result<git2::Commit<'r>, GitError> {
    Oid::from_str(sha)
        .and_then(|oid| repo.find_commit(oid))
        .map_err(|_| GitError::UnknownCommit {
            sha: sha.to_owned(),
        })
}

/// The name of the run's entry in `.git/worktrees`.
pub(super) fn worktree_name(run_id: &str) -> String {
    format!("fabro-run-{run_id}")
}

pub(super) fn worktree_admin_dir(common_dir: &Path, run_id: &str) -> PathBuf {
    common_dir.join("worktrees").join(worktree_name(run_id))
}

pub(super) fn add_worktree(
    main: &Repository,
    run_id: &str,
    worktree_path: &Path,
) -> Result<(), GitError> {
    if let Some(parent) = worktree_path.parent() {
        fs_err::create_dir_all(parent).map_err(|source| GitError::Io {
            action: "create",
            path: parent.to_path_buf(),
            source,
        })?;
    }
    let branch_ref = main
        .find_reference(&format!("refs/heads/{}", run_branch_name(run_id)))
        .map_err(GitError::git(format!("find {}", run_branch_name(run_id))))?;
    let mut options = git2::WorktreeAddOptions::new();
    options.reference(Some(&branch_ref));
    let admin_dir = worktree_admin_dir(main.commondir(), run_id);
    let admin_existed = admin_dir.exists();
    if let Err(source) = main.worktree(&worktree_name(run_id), worktree_path, Some(&options)) {
        // libgit2 registers the worktree before creating its directory; a failure after that
        // would otherwise leave a registration that blocks the next attempt.
        if !admin_existed {
            if let Err(cleanup) = remove_dir_if_present(&admin_dir) {
                tracing::warn!(error = %cleanup, "cannot remove a half-made worktree registration");
            }
        }
        return Err(GitError::Git {
            action: format!("add worktree {}", worktree_path.display()),
            source,
        });
    }
    Ok(())
}

/// Deletes the run's worktree registration and the directory at `worktree_path`, after
/// checking that the directory is this run's worktree (or empty).
/// Removes every `*.lock` file under `directory` (the run's parallel branch refs): locks a
/// killed process left while moving one of them. Missing directories are fine.
pub(super) fn remove_lock_files(directory: &Path) {
    let Ok(entries) = std::fs::read_dir(directory) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => remove_lock_files(&path),
            Ok(_)
                if path
                    .extension()
                    .is_some_and(|extension| extension == "lock") =>
            {
                if let Err(error) = fs_err::remove_file(&path) {
                    tracing::warn!(%error, "cannot remove a stale ref lock");
                }
            }
            _ => {}
        }
    }
}

pub(super) fn remove_worktree_files(
    main: &Repository,
    run_id: &str,
    worktree_path: &Path,
) -> Result<(), GitError> {
    let admin_dir = worktree_admin_dir(main.commondir(), run_id);
    if worktree_path.exists() && !is_own_worktree(&admin_dir, worktree_path) {
        return Err(GitError::WorktreePathOccupied {
            path: worktree_path.to_path_buf(),
            run_id: run_id.to_owned(),
        });
    }
    remove_dir_if_present(worktree_path)?;
    remove_dir_if_present(&admin_dir)
}

/// Whether the existing directory `worktree_path` may be deleted as this run's worktree: it
/// is empty, its `.git` file points at the run's registration, or the registration points at
/// it.
pub(super) fn is_own_worktree(admin_dir: &Path, worktree_path: &Path) -> bool {
    let empty = std::fs::read_dir(worktree_path)
        .map(|mut entries| entries.next().is_none())
        .unwrap_or(false);
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    };
    let gitfile_points_here = fs_err::read_to_string(worktree_path.join(".git"))
        .ok()
        .and_then(|text| {
            text.trim()
                .strip_prefix("gitdir:")
                .map(|dir| same(Path::new(dir.trim()), admin_dir))
        })
        .unwrap_or(false);
    let registration_points_here = fs_err::read_to_string(admin_dir.join("gitdir"))
        .ok()
        .and_then(|text| {
            Path::new(text.trim())
                .parent()
                .map(|dir| same(dir, worktree_path))
        })
        .unwrap_or(false);
    // A process killed while libgit2 was adding the worktree leaves this run's
    // registration without its `gitdir` file (written after the directory and, possibly
    // empty, `.git` link): this run's unfinished worktree, which no other can claim.
    let half_made = admin_dir.is_dir() && !admin_dir.join("gitdir").exists();
    empty || half_made || gitfile_points_here || registration_points_here
}

pub(super) fn remove_dir_if_present(path: &Path) -> Result<(), GitError> {
    match fs_err::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(GitError::Io {
            action: "remove",
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Remote-tracking refs `refs/remotes/*/{branch}` with their targets, sorted by name.
pub(crate) fn remote_tracking_refs(
    repo: &Repository,
    branch: &str,
) -> Result<Vec<(String, Oid)>, GitError> {
    let suffix = format!("/{branch}");
    let mut found = Vec::new();
    let references = repo
        .references_glob("refs/remotes/*")
        .map_err(GitError::git("list remote-tracking refs"))?;
    for reference in references.flatten() {
        let (Some(name), Some(target)) = (reference.name(), reference.target()) else {
            continue;
        };
        let Some(remote_part) = name
            .strip_prefix("refs/remotes/")
            .and_then(|rest| rest.strip_suffix(&suffix))
        else {
            continue;
        };
        if !remote_part.is_empty() && !remote_part.contains('/') {
            found.push((name.to_owned(), target));
        }
    }
    found.sort();
    Ok(found)
}
