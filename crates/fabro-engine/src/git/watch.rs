//! Change detection for a worktree from one file-system watch (inotify through `notify`),
//! so a stage's checkpoint examines what the stage changed instead of the whole tree.
//!
//! [`WorktreeWatch::start`] watches the worktree recursively, plus a private directory for
//! markers (`{worktree registration}/fabro-watch`). The watch thread records every path that
//! a creation, deletion, rename, write or mode change touched. Events arrive asynchronously,
//! so [`WorktreeWatch::changes`] first writes a marker file and waits for its event: inotify
//! queues events in the order of the system calls that caused them, so once the marker's
//! event is seen, every write that returned before the marker was made has been recorded.
//! A second, synchronous request to the watch thread then waits until it has finished
//! adding watches for directories reported before the marker.
//!
//! A directory that was created, or moved into the tree, stands for everything under it
//! (the caller examines the whole subtree); [`WorktreeWatch::changes`] adds watches for its
//! subdirectories itself, each before reading it, so no later change inside goes unseen.
//! When events were lost (the kernel queue overflowed, a watch could not be added, the marker
//! did not come back) the result is [`Changes::Unknown`] with the reason, and the caller
//! scans the whole worktree for that stage; the watch is re-established over the whole tree.
//!
//! Not seen by any inotify watch, and so not by this one: writes through a shared `mmap`,
//! and writes through a hard link that lives outside the worktree.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode};
use notify::{Config, Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};

/// How long [`WorktreeWatch::changes`] waits for its marker's event.
const SYNC_TIMEOUT: Duration = Duration::from_secs(10);
/// More changed paths than this between two stages are not kept: the stage scans the tree.
const MAX_PATHS: usize = 100_000;

/// One worktree's watch; see the module documentation.
pub(crate) struct WorktreeWatch {
    watcher: RecommendedWatcher,
    root: PathBuf,
    sync_dir: PathBuf,
    shared: Arc<Shared>,
    next_marker: u64,
    /// Set once the watch cannot be trusted any more (a watch limit was reached).
    broken: Option<String>,
}

impl std::fmt::Debug for WorktreeWatch {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("WorktreeWatch")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

/// What changed in the worktree since the previous [`WorktreeWatch::changes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Changes {
    /// The touched paths, relative to the worktree root, `/`-separated, sorted. A path that
    /// is a directory now stands for its whole subtree.
    Paths(Vec<String>),
    /// The watch cannot tell; the reason, for the `full_scan` warning.
    Unknown(String),
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    arrived: Condvar,
}

#[derive(Default)]
struct State {
    changed: BTreeSet<String>,
    /// Why events were lost since the last [`WorktreeWatch::changes`].
    lost: Option<String>,
    /// The newest marker whose event has arrived.
    marker_seen: u64,
    /// The readers of [`ChangeFeed`]s, by id.
    feeds: Vec<FeedState>,
    /// The watch was dropped or cannot be trusted any more.
    closed: bool,
    /// Test hook: while set, the watch thread blocks in its handler, so the kernel queue
    /// fills up and overflows.
    #[cfg(test)]
    stalled: bool,
}

/// What one [`ChangeFeed`] has not read yet.
#[derive(Default)]
struct FeedState {
    changed: BTreeSet<String>,
    lost: bool,
    marker_seen: u64,
}

/// A second reader of a [`WorktreeWatch`] (asset capture): the paths touched since its
/// own previous read, independently of the stage commits.
pub(crate) struct ChangeFeed {
    shared: Arc<Shared>,
    root: PathBuf,
    sync_dir: PathBuf,
    id: usize,
    next_marker: u64,
}

impl std::fmt::Debug for ChangeFeed {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ChangeFeed")
            .field("root", &self.root)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl ChangeFeed {
    /// The paths touched since the previous call (relative to the root, sorted; a
    /// directory stands for its subtree), once every write made before this call has been
    /// reported; `None` when the watch cannot tell (the caller scans).
    pub(crate) fn changes(&mut self) -> Option<Vec<String>> {
        self.next_marker += 1;
        let marker = self.next_marker;
        let name = |number: u64| self.sync_dir.join(format!("feed{}-{number}", self.id));
        let moved = match std::fs::rename(name(marker - 1), name(marker)) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                fs_err::write(name(marker), b"")
            }
            other => other,
        };
        let deadline = Instant::now() + SYNC_TIMEOUT;
        let mut state = lock(&self.shared);
        let arrived = moved.is_ok()
            && loop {
                let feed = &state.feeds[self.id];
                if state.closed || feed.lost {
                    break false;
                }
                if feed.marker_seen >= marker {
                    break true;
                }
                let now = Instant::now();
                if now >= deadline {
                    break false;
                }
                state = self
                    .shared
                    .arrived
                    .wait_timeout(state, deadline - now)
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0;
            };
        let feed = &mut state.feeds[self.id];
        let changed = std::mem::take(&mut feed.changed);
        feed.lost = false;
        arrived.then(|| changed.into_iter().collect())
    }
}

/// The agents' file tracking (SPEC 7.6, 13.4) reads the run worktree's changes from a feed.
impl fabro_agent::ChangeSource for ChangeFeed {
    fn root(&self) -> &Path {
        &self.root
    }

    fn changes(&mut self) -> Option<Vec<String>> {
        ChangeFeed::changes(self)
    }
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared
        .state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl WorktreeWatch {
    /// Starts watching `root` recursively, with markers in `sync_dir` (created when missing;
    /// it must lie outside `root`). Errors name why no watch is possible (another operating
    /// system, the inotify instance or watch limit, an unreadable directory).
    pub(crate) fn start(root: &Path, sync_dir: &Path) -> Result<WorktreeWatch, String> {
        if !cfg!(target_os = "linux") {
            return Err("file-system watches are only used on Linux".to_owned());
        }
        fs_err::create_dir_all(sync_dir).map_err(|error| error.to_string())?;
        let shared = Arc::new(Shared::default());
        let handler = {
            let shared = Arc::clone(&shared);
            let root = root.to_path_buf();
            let sync_dir = sync_dir.to_path_buf();
            move |result: notify::Result<Event>| handle(&shared, &root, &sync_dir, result)
        };
        let mut watcher =
            RecommendedWatcher::new(handler, Config::default().with_follow_symlinks(false))
                .map_err(|error| format!("cannot start a file-system watch: {error}"))?;
        watcher
            .watch(sync_dir, RecursiveMode::NonRecursive)
            .map_err(|error| format!("cannot watch {}: {error}", sync_dir.display()))?;
        watcher
            .watch(root, RecursiveMode::Recursive)
            .map_err(|error| format!("cannot watch {}: {error}", root.display()))?;
        Ok(WorktreeWatch {
            watcher,
            root: root.to_path_buf(),
            sync_dir: sync_dir.to_path_buf(),
            shared,
            next_marker: 0,
            broken: None,
        })
    }

    /// Every path touched since the previous call (or since the start), once all events of
    /// writes made before this call have arrived. See [`Changes`].
    pub(crate) fn changes(&mut self) -> Changes {
        if let Some(reason) = &self.broken {
            self.take();
            return Changes::Unknown(reason.clone());
        }
        let synced = self.sync();
        let (changed, lost) = self.take();
        let problem = match synced {
            Err(reason) => Some(reason),
            Ok(()) => lost,
        };
        if let Some(reason) = problem {
            // Directories created while events were lost may be unwatched: watch them all.
            if let Err(error) = self.watcher.watch(&self.root, RecursiveMode::Recursive) {
                self.broken = Some(format!("cannot watch {}: {error}", self.root.display()));
                lock(&self.shared).closed = true;
            }
            self.take();
            return Changes::Unknown(reason);
        }
        for path in &changed {
            if let Err(reason) = self.watch_new_directory(&self.root.join(path)) {
                self.broken = Some(reason.clone());
                lock(&self.shared).closed = true;
                return Changes::Unknown(reason);
            }
        }
        Changes::Paths(changed.into_iter().collect())
    }

    fn take(&self) -> (BTreeSet<String>, Option<String>) {
        let mut state = lock(&self.shared);
        (std::mem::take(&mut state.changed), state.lost.take())
    }

    /// Renames the marker to the next number and waits for that event, then for the watch
    /// thread to be idle. (A rename allocates no inode, unlike a new file per stage.)
    fn sync(&mut self) -> Result<(), String> {
        let previous = self.sync_dir.join(self.next_marker.to_string());
        self.next_marker += 1;
        let marker = self.next_marker;
        let path = self.sync_dir.join(marker.to_string());
        let moved = match std::fs::rename(&previous, &path) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => fs_err::write(&path, b""),
            other => other,
        };
        moved.map_err(|error| {
            format!(
                "cannot write a marker in {}: {error}",
                self.sync_dir.display()
            )
        })?;
        let deadline = Instant::now() + SYNC_TIMEOUT;
        let mut state = lock(&self.shared);
        while state.marker_seen < marker && state.lost.is_none() {
            let now = Instant::now();
            if now >= deadline {
                return Err(format!(
                    "the file-system watch did not report within {}s",
                    SYNC_TIMEOUT.as_secs()
                ));
            }
            state = self
                .shared
                .arrived
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        drop(state);
        // Answered by the watch thread once it has handled everything read before: the
        // watches of directories created before the marker are in place.
        self.watcher
            .watch(&self.sync_dir, RecursiveMode::NonRecursive)
            .map_err(|error| format!("cannot watch {}: {error}", self.sync_dir.display()))
    }

    /// When `path` is a directory (not a symlink), watches it and every directory below it,
    /// each before reading it. Directories that vanish meanwhile are passed over.
    fn watch_new_directory(&mut self, path: &Path) -> Result<(), String> {
        let is_dir = std::fs::symlink_metadata(path).is_ok_and(|metadata| metadata.is_dir());
        if !is_dir {
            return Ok(());
        }
        let mut pending = vec![path.to_path_buf()];
        while let Some(directory) = pending.pop() {
            match self.watcher.watch(&directory, RecursiveMode::NonRecursive) {
                Ok(()) => {}
                Err(error) if matches!(error.kind, notify::ErrorKind::PathNotFound) => continue,
                Err(error) if is_not_found(&error) => continue,
                Err(error) => {
                    return Err(format!("cannot watch {}: {error}", directory.display()));
                }
            }
            let Ok(entries) = std::fs::read_dir(&directory) else {
                continue;
            };
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                    pending.push(entry.path());
                }
            }
        }
        Ok(())
    }

    /// A new reader of this watch's events; see [`ChangeFeed`].
    pub(crate) fn feed(&self) -> ChangeFeed {
        let mut state = lock(&self.shared);
        state.feeds.push(FeedState::default());
        ChangeFeed {
            shared: Arc::clone(&self.shared),
            root: self.root.clone(),
            sync_dir: self.sync_dir.clone(),
            id: state.feeds.len() - 1,
            next_marker: 0,
        }
    }

    /// Test hook: blocks (or releases) the watch thread in its event handler.
    #[cfg(test)]
    pub(crate) fn stall(&self, stalled: bool) {
        lock(&self.shared).stalled = stalled;
        self.shared.arrived.notify_all();
    }
}

impl Drop for WorktreeWatch {
    fn drop(&mut self) {
        lock(&self.shared).closed = true;
        self.shared.arrived.notify_all();
    }
}

fn is_not_found(error: &notify::Error) -> bool {
    matches!(&error.kind, notify::ErrorKind::Io(io) if io.kind() == std::io::ErrorKind::NotFound)
}

/// The watch thread's handler: records touched paths, arrived markers and lost events.
fn handle(shared: &Shared, root: &Path, sync_dir: &Path, result: notify::Result<Event>) {
    let mut state = lock(shared);
    #[cfg(test)]
    while state.stalled {
        state = shared
            .arrived
            .wait(state)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
    }
    record(&mut state, shared, root, sync_dir, result);
    if state.lost.is_some() {
        for feed in &mut state.feeds {
            feed.lost = true;
            feed.changed.clear();
        }
    }
}

fn record(
    state: &mut State,
    shared: &Shared,
    root: &Path,
    sync_dir: &Path,
    result: notify::Result<Event>,
) {
    let event = match result {
        Ok(event) => event,
        Err(error) => {
            state
                .lost
                .get_or_insert_with(|| format!("the file-system watch failed: {error}"));
            shared.arrived.notify_all();
            return;
        }
    };
    if event.need_rescan() {
        state
            .lost
            .get_or_insert_with(|| "the file-system watch's event queue overflowed".to_owned());
        shared.arrived.notify_all();
    }
    let reads = matches!(
        event.kind,
        EventKind::Access(AccessKind::Open(_) | AccessKind::Read | AccessKind::Any)
            | EventKind::Access(AccessKind::Close(AccessMode::Read))
    );
    if reads {
        return;
    }
    for path in &event.paths {
        if let Ok(name) = path.strip_prefix(sync_dir) {
            let Some(name) = name.to_str() else {
                continue;
            };
            if let Ok(marker) = name.parse::<u64>() {
                state.marker_seen = state.marker_seen.max(marker);
            } else if let Some((id, marker)) = name
                .strip_prefix("feed")
                .and_then(|rest| rest.split_once('-'))
                .and_then(|(id, marker)| {
                    Some((id.parse::<usize>().ok()?, marker.parse::<u64>().ok()?))
                })
            {
                if let Some(feed) = state.feeds.get_mut(id) {
                    feed.marker_seen = feed.marker_seen.max(marker);
                }
            }
            shared.arrived.notify_all();
            continue;
        }
        let Ok(relative) = path.strip_prefix(root) else {
            continue;
        };
        let Some(relative) = relative.to_str() else {
            // Not UTF-8: no scan stages such a path either.
            continue;
        };
        if relative.is_empty() {
            state
                .lost
                .get_or_insert_with(|| "the worktree itself was moved or deleted".to_owned());
            shared.arrived.notify_all();
            continue;
        }
        if state.changed.len() >= MAX_PATHS {
            state.changed.clear();
            state
                .lost
                .get_or_insert_with(|| format!("more than {MAX_PATHS} paths changed in one stage"));
            shared.arrived.notify_all();
            continue;
        }
        for feed in &mut state.feeds {
            if feed.changed.len() < MAX_PATHS {
                feed.changed.insert(relative.to_owned());
            } else {
                feed.lost = true;
            }
        }
        state.changed.insert(relative.to_owned());
    }
}

#[cfg(test)]
mod tests;
