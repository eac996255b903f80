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

use std::collections::BTreeMap;
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
    let mut index = repo
        .index()
        .map_err(GitError::git("read the worktree index"))?;
    let changes = scan(repo, scope, index.len())?;
    let mut updates: Vec<(String, bool)> = Vec::new();
    for (path, status) in changes {
        // A trailing slash marks a nested repository, which fabro does not stage.
        if path.ends_with('/') || excludes.is_excluded(&path) {
            continue;
        }
        let stage_error = GitError::git(format!("stage {path}"));
        if status.contains(Status::WT_DELETED) {
            index.remove_path(Path::new(&path)).map_err(stage_error)?;
            updates.push((path, false));
        } else if status.intersects(Status::WT_NEW | Status::WT_MODIFIED | Status::WT_TYPECHANGE) {
            index.add_path(Path::new(&path)).map_err(stage_error)?;
            updates.push((path, true));
        }
    }
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

/// At most this many touched paths are examined one status each; more take one status
/// over the whole index filtered by the path list.
const SEPARATE_STATUS_LIMIT: usize = 64;

/// About as many index entries as one status costs to set up: touched paths get a status
/// each only when the index has this many entries per path (a small repository is
/// cheaper to walk once).
#[cfg(not(test))]
const ENTRIES_PER_STATUS: usize = 2048;
/// In unit tests every index counts as large, so that the small repositories of the
/// equivalence tests (`git/watch/tests.rs`) go through the statuses per path.
#[cfg(test)]
const ENTRIES_PER_STATUS: usize = 0;

/// The workdir status of the paths within `scope`, in path order.
///
/// libgit2 walks the whole index for a status filtered by a path list, but only the
/// range of a pathspec's literal prefix for a single pathspec: a stage touching a few
/// paths is examined one status per path, so its cost does not grow with the number of
/// files in the repository. A path with a wildcard character or a leading `!` (which a
/// pathspec would expand or negate) goes through the filtered list, and so do paths of an
/// index of fewer than [`ENTRIES_PER_STATUS`] entries per path.
fn scan(
    repo: &Repository,
    scope: Scope<'_>,
    index_entries: usize,
) -> Result<BTreeMap<String, Status>, GitError> {
    let mut changes = BTreeMap::new();
    let mut collect = |options: &mut StatusOptions| -> Result<(), GitError> {
        options
            .show(StatusShow::Workdir)
            .include_untracked(true)
            .recurse_untracked_dirs(true)
            .include_ignored(false)
            .exclude_submodules(true)
            .renames_index_to_workdir(false);
        let statuses = repo
            .statuses(Some(options))
            .map_err(GitError::git("scan the worktree"))?;
        for entry in statuses.iter() {
            if let Ok(path) = std::str::from_utf8(entry.path_bytes()) {
                changes.insert(path.to_owned(), entry.status());
            }
        }
        Ok(())
    };
    match scope {
        Scope::Full => collect(&mut StatusOptions::new())?,
        Scope::Paths(paths)
            if paths.len() <= SEPARATE_STATUS_LIMIT
                && paths.len() * ENTRIES_PER_STATUS <= index_entries
                && !paths
                    .iter()
                    .any(|path| path.starts_with('!') || path.contains(['*', '?', '[', '\\'])) =>
        {
            for path in paths {
                collect(StatusOptions::new().pathspec(path))?;
            }
        }
        Scope::Paths(paths) => {
            let mut options = StatusOptions::new();
            options.disable_pathspec_match(true);
            for path in paths {
                options.pathspec(path);
            }
            collect(&mut options)?;
        }
    }
    Ok(changes)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::test_repo::TestRepo;

    /// The workdir changes of `scope` in `repo`, as `path status` lines.
    fn changes(repo: &TestRepo, scope: Scope<'_>) -> Vec<String> {
        let libgit2 = Repository::open(repo.path()).unwrap();
        scan(&libgit2, scope, 10)
            .unwrap()
            .into_iter()
            .map(|(path, status)| format!("{path} {status:?}"))
            .collect()
    }

    #[test]
    fn a_status_per_path_and_a_filtered_status_find_the_same_changes() {
        let Some(repo) = TestRepo::empty() else {
            return;
        };
        for name in [
            "a*b", "axb", "[x]", "x", "!neg", "plain", "dir/one", "dir/two", "other/f",
        ] {
            repo.write(name, "1\n");
        }
        repo.write(".gitignore", "*.log\n");
        repo.git(&["add", "-A"]);
        repo.git(&["commit", "-q", "-m", "initial"]);
        for name in [
            "a*b", "axb", "[x]", "x", "!neg", "dir/two", "dir/new", "dirt",
        ] {
            repo.write(name, "2\n");
        }
        repo.write("dir/skip.log", "ignored\n");
        std::fs::remove_file(repo.path().join("other/f")).unwrap();
        let everything = changes(&repo, Scope::Full);
        assert_eq!(
            everything,
            [
                "!neg Status(WT_MODIFIED)",
                "[x] Status(WT_MODIFIED)",
                "a*b Status(WT_MODIFIED)",
                "axb Status(WT_MODIFIED)",
                "dir/new Status(WT_NEW)",
                "dir/two Status(WT_MODIFIED)",
                "dirt Status(WT_NEW)",
                "other/f Status(WT_DELETED)",
                "x Status(WT_MODIFIED)",
            ]
        );
        // Literal paths, one status each: a directory covers its subtree, not its
        // namesakes (`dir` is not `dirt`).
        let literal: Vec<String> = ["dir", "other/f", "plain", "dir/two"]
            .map(str::to_owned)
            .to_vec();
        assert_eq!(
            changes(&repo, Scope::Paths(&literal)),
            [
                "dir/new Status(WT_NEW)",
                "dir/two Status(WT_MODIFIED)",
                "other/f Status(WT_DELETED)"
            ]
        );
        // Wildcards and a leading `!` are names here, not patterns.
        for special in ["a*b", "[x]", "!neg"] {
            let paths = vec![special.to_owned()];
            assert_eq!(
                changes(&repo, Scope::Paths(&paths)),
                [format!("{special} Status(WT_MODIFIED)")],
                "{special}"
            );
        }
        // More paths than separate statuses are worth: one filtered status.
        let many: Vec<String> = (0..=SEPARATE_STATUS_LIMIT)
            .map(|index| format!("missing{index}"))
            .chain(["dir".to_owned(), "dirt".to_owned()])
            .collect();
        assert_eq!(
            changes(&repo, Scope::Paths(&many)),
            [
                "dir/new Status(WT_NEW)",
                "dir/two Status(WT_MODIFIED)",
                "dirt Status(WT_NEW)"
            ]
        );
    }
}
