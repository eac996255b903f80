//! Git snapshots (SPEC 7.6, 13.4) from a file-system watch's change feed (issue 20): the
//! same snapshot as [`GitSnapshot::take`], with `git` asked only about the paths that
//! changed instead of scanning the whole working tree.
//!
//! A [`ChangeTracker`] keeps the set of paths that may be modified or untracked: after its
//! first snapshot (a full one), every path that is modified or untracked at a snapshot was
//! either so at the previous snapshot or reported by the watch since. Each snapshot adds the
//! reported paths to the set, asks `git diff --name-only` and `git ls-files --others
//! --exclude-standard` about exactly those paths (a directory covers its subtree), and keeps
//! the answer as the new set. A changed `.gitignore` adds its directory.
//!
//! What no watch of the working tree sees, and so a tracker does not either: a path whose
//! state changes only through the index (`git rm --cached`, `git reset` of a path nobody
//! wrote), writes through a shared `mmap` or a hard link outside the tree. When the watch
//! cannot tell (events lost), the tracker takes a full snapshot instead.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use crate::environment::ProcessEnv;
use crate::snapshot::GitSnapshot;

/// A file-system watch of a working tree, as the tracker reads it.
pub trait ChangeSource: Send {
    /// The root of the watched tree (a git worktree's top-level directory).
    fn root(&self) -> &Path;

    /// The paths touched since the previous call, relative to [`root`](ChangeSource::root)
    /// (`/`-separated; a directory stands for its subtree), once every write made before
    /// the call has been reported; `None` when the watch cannot tell.
    fn changes(&mut self) -> Option<Vec<String>>;
}

/// The paths of a worktree that may be modified or untracked; see the module documentation.
pub struct ChangeTracker {
    source: Box<dyn ChangeSource>,
    /// `None` until the first (full) snapshot.
    candidates: Option<BTreeSet<String>>,
}

impl std::fmt::Debug for ChangeTracker {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ChangeTracker")
            .field("root", &self.source.root())
            .field("candidates", &self.candidates.as_ref().map(BTreeSet::len))
            .finish()
    }
}

impl ChangeTracker {
    /// A tracker of `source`'s tree. Start the source no later than the tracker.
    pub fn new(source: Box<dyn ChangeSource>) -> ChangeTracker {
        ChangeTracker {
            source,
            candidates: None,
        }
    }

    /// The snapshot [`GitSnapshot::take`] would take of `directory`, a directory of the
    /// watched tree; `None` when `git` cannot run.
    pub async fn snapshot(&mut self, directory: &Path, env: &ProcessEnv) -> Option<GitSnapshot> {
        let root = self.source.root().to_path_buf();
        let relative = directory.strip_prefix(&root).ok()?.to_path_buf();
        // A changed `.gitignore` may admit or ignore files nobody touched: its directory
        // counts as changed (the root's: everything).
        let changes = self.source.changes().and_then(|mut changes| {
            let mut scopes = Vec::new();
            for path in &changes {
                if path == ".gitignore" {
                    return None;
                }
                if let Some(directory) = path.strip_suffix("/.gitignore") {
                    scopes.push(directory.to_owned());
                }
            }
            changes.extend(scopes);
            Some(changes)
        });
        let dirty = match (self.candidates.take(), changes) {
            (Some(mut candidates), Some(changes)) => {
                candidates.extend(changes);
                dirty_paths(&root, &candidates, env).await
            }
            // The first snapshot, events were lost, or the root's `.gitignore` changed.
            _ => GitSnapshot::take(&root, env)
                .await
                .map(|snapshot| snapshot.paths().map(str::to_owned).collect()),
        }?;
        let prefix = relative.to_str()?.to_owned();
        let paths = dirty
            .iter()
            .filter_map(|path| {
                if prefix.is_empty() {
                    Some(path.clone())
                } else {
                    path.strip_prefix(prefix.as_str())
                        .and_then(|rest| rest.strip_prefix('/'))
                        .map(str::to_owned)
                }
            })
            .collect();
        self.candidates = Some(dirty);
        Some(GitSnapshot::from_paths(directory, paths))
    }
}

/// How an agent attempt finds the files it changed: git snapshots of its working directory,
/// or a run's [`ChangeTracker`] when the directory lies in the tracked tree. Cheap to clone;
/// clones share the tracker.
#[derive(Debug, Clone, Default)]
pub struct FileTracking {
    tracker: Option<Arc<tokio::sync::Mutex<ChangeTracker>>>,
}

impl FileTracking {
    /// Tracking through `tracker`.
    pub fn with_tracker(tracker: ChangeTracker) -> FileTracking {
        FileTracking {
            tracker: Some(Arc::new(tokio::sync::Mutex::new(tracker))),
        }
    }

    /// A snapshot of `directory` (see [`GitSnapshot::take`]).
    pub async fn snapshot(&self, directory: &Path, env: &ProcessEnv) -> Option<GitSnapshot> {
        if let Some(tracker) = &self.tracker {
            let mut tracker = tracker.lock().await;
            if directory.starts_with(tracker.source.root()) {
                return tracker.snapshot(directory, env).await;
            }
        }
        GitSnapshot::take(directory, env).await
    }
}

/// Of `paths` (relative to `root`, a directory covering its subtree), the modified and the
/// untracked, not ignored ones (files, relative to `root`); `None` when `git` fails.
async fn dirty_paths(
    root: &Path,
    paths: &BTreeSet<String>,
    env: &ProcessEnv,
) -> Option<BTreeSet<String>> {
    let mut dirty = BTreeSet::new();
    let paths: Vec<&String> = paths.iter().collect();
    // Bounded command lines.
    for chunk in paths.chunks(1000) {
        for arguments in [
            &["diff", "--name-only", "--"][..],
            &["ls-files", "--others", "--exclude-standard", "--"][..],
        ] {
            let mut command: Vec<&str> = arguments.to_vec();
            command.extend(chunk.iter().map(|path| path.as_str()));
            let output = crate::snapshot::git_literal(root, env, &command).await?;
            dirty.extend(
                output
                    .lines()
                    .filter(|line| !line.is_empty())
                    .map(str::to_owned),
            );
        }
    }
    Some(dirty)
}

#[cfg(test)]
mod tests;
