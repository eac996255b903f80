//! Staging a worktree's changes for a commit (SPEC 8.3): everything except the configured and
//! built-in exclusions, nested repositories and files the repository ignores.
//!
//! A full scan is a workdir-only status of the whole tree (with the index's stat cache); the
//! staged tree is then written from the index's cache tree. With a change feed
//! ([`WorktreeWatch`](super::watch::WorktreeWatch)) the status is limited to the touched
//! paths (a directory covering its subtree), and the tree is the parent tree with exactly
//! the staged entries replaced, so neither the scan nor the tree writing visits unchanged
//! directories (writing from the index would rebuild its whole cache tree). The index equals
//! the parent tree plus the staged changes either way, so both modes produce the same tree.
//! The index file is written with only the changed entries ([`WorktreeIndex`]).

use std::path::Path;

use git2::{
    build::TreeUpdateBuilder, FileMode, Oid, Repository, Status, StatusOptions, StatusShow,
};

use super::exclude::Excludes;
use super::index_file::WorktreeIndex;
use super::GitError;

/// Which paths a stage examines.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scope<'a> {
    /// The whole worktree.
    Full,
    /// Only these paths (relative to the worktree root; a directory covers its subtree).
    Paths(&'a [String]),
}

/// Stages the changes within `scope` in `repo`'s index (`worktree_index`), writes the index
/// file when it changed (the stages' own git commands read it), and returns the staged tree.
pub(crate) fn stage_worktree(
    repo: &Repository,
    worktree_index: &mut WorktreeIndex,
    parent_tree: Oid,
    excludes: &Excludes,
    scope: Scope<'_>,
) -> Result<Oid, GitError> {
    if let Scope::Paths(paths) = scope {
        if paths.is_empty() {
            return Ok(parent_tree);
        }
    }
    let mut options = StatusOptions::new();
    options
        .show(StatusShow::Workdir)
        .include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false)
        .exclude_submodules(true)
        .renames_index_to_workdir(false);
    if let Scope::Paths(paths) = scope {
        options.disable_pathspec_match(true);
        for path in paths {
            options.pathspec(path);
        }
    }
    let statuses = repo
        .statuses(Some(&mut options))
        .map_err(GitError::git("scan the worktree"))?;
    let mut index = repo
        .index()
        .map_err(GitError::git("read the worktree index"))?;
    let mut updates: Vec<(String, bool)> = Vec::new();
    for entry in statuses.iter() {
        let Ok(path) = std::str::from_utf8(entry.path_bytes()) else {
            continue;
        };
        // A trailing slash marks a nested repository, which fabro does not stage.
        if path.ends_with('/') || excludes.is_excluded(path) {
            continue;
        }
        let status = entry.status();
        let stage_error = GitError::git(format!("stage {path}"));
        if status.contains(Status::WT_DELETED) {
            index.remove_path(Path::new(path)).map_err(stage_error)?;
            updates.push((path.to_owned(), false));
        } else if status.intersects(Status::WT_NEW | Status::WT_MODIFIED | Status::WT_TYPECHANGE) {
            index.add_path(Path::new(path)).map_err(stage_error)?;
            updates.push((path.to_owned(), true));
        }
    }
    drop(statuses);
    if updates.is_empty() {
        return Ok(parent_tree);
    }
    let updated = match scope {
        Scope::Paths(_) => updated_tree(repo, &index, parent_tree, &updates)?,
        Scope::Full => None,
    };
    let tree = match updated {
        Some(tree) => tree,
        None => index
            .write_tree()
            .map_err(GitError::git("write the staged tree"))?,
    };
    for (path, _) in &updates {
        worktree_index.touched(path);
    }
    worktree_index.write(repo)?;
    Ok(tree)
}

/// The parent tree with the staged entries of `updates` (path, still present) upserted or
/// removed; `None` when a file turned into a directory or back (the caller then writes the
/// tree from the index).
fn updated_tree(
    repo: &Repository,
    index: &git2::Index,
    parent_tree: Oid,
    updates: &[(String, bool)],
) -> Result<Option<Oid>, GitError> {
    let tree_error = || GitError::git("write the staged tree");
    let parent = repo.find_tree(parent_tree).map_err(tree_error())?;
    let mut builder = TreeUpdateBuilder::new();
    for (path, present) in updates {
        if *present {
            let Some(entry) = index.get_path(Path::new(path), 0) else {
                return Ok(None);
            };
            let mode = match entry.mode {
                0o100755 => FileMode::BlobExecutable,
                0o120000 => FileMode::Link,
                0o160000 => FileMode::Commit,
                _ => FileMode::Blob,
            };
            builder.upsert(path.as_str(), entry.id, mode);
        } else {
            builder.remove(path.as_str());
        }
    }
    match builder.create_updated(repo, &parent) {
        Ok(tree) => Ok(Some(tree)),
        // A D/F conflict: an entry changed between file and directory.
        Err(error) if error.class() == git2::ErrorClass::Tree => Ok(None),
        Err(error) => Err(tree_error()(error)),
    }
}
