//! Which paths a stage commit examines, from a worktree's watch, and the run-wide record of
//! the stages that had to scan the whole worktree instead (the `full_scan` warning, once per
//! run, whichever worktree of the run it came from: the run's own or a parallel branch's).

use std::sync::{Arc, Mutex};

use super::watch::{Changes, WorktreeWatch};

/// The `full_scan` warning of one run, shared by the run's worktree and its parallel
/// branches' worktrees (which commit from other threads).
#[derive(Debug, Clone, Default)]
pub(crate) struct FullScanLog {
    state: Arc<Mutex<FullScanState>>,
}

#[derive(Debug, Default)]
struct FullScanState {
    /// Whether a reason was recorded (handed out or not): the warning is given once.
    warned: bool,
    /// The reason not yet handed out.
    pending: Option<String>,
    /// Test hook: how many stage commits scanned the whole worktree for want of a watch.
    #[cfg(test)]
    fallbacks: usize,
}

impl FullScanLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, FullScanState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records that a stage commit scanned the whole worktree because of `reason`; only the
    /// run's first reason is kept.
    pub(crate) fn record(&self, reason: String) {
        let mut state = self.lock();
        #[cfg(test)]
        {
            state.fallbacks += 1;
        }
        if !state.warned {
            state.warned = true;
            state.pending = Some(reason);
        }
    }

    /// The reason for the `full_scan` warning, once per run.
    pub(crate) fn take(&self) -> Option<String> {
        self.lock().pending.take()
    }

    /// Test hook: how many stage commits fell back to a full scan.
    #[cfg(test)]
    pub(crate) fn fallbacks(&self) -> usize {
        self.lock().fallbacks
    }
}

/// The paths a stage commit examines: what `watch` reported since its previous report, plus
/// the scopes of touched `.gitignore` files; `None` for a full scan (when `force_full`, or
/// when the watch cannot tell or is missing, then with the reason recorded in `log`).
pub(crate) fn watched_paths(
    watch: Result<&mut WorktreeWatch, &str>,
    force_full: bool,
    log: &FullScanLog,
) -> Option<Vec<String>> {
    let changes = match watch {
        Ok(watch) => watch.changes(),
        Err(reason) => Changes::Unknown(format!("no file-system watch: {reason}")),
    };
    match changes {
        Changes::Paths(paths) if !force_full => with_ignore_scopes(paths),
        Changes::Paths(_) => None,
        Changes::Unknown(reason) => {
            log.record(reason);
            None
        }
    }
}

/// The touched `paths`, plus the directory of every touched `.gitignore`: its rules may now
/// admit files that were ignored before and are otherwise unchanged. `None` (scan the whole
/// worktree) when the root's `.gitignore` changed.
pub(crate) fn with_ignore_scopes(mut paths: Vec<String>) -> Option<Vec<String>> {
    let mut directories = Vec::new();
    for path in &paths {
        if path == ".gitignore" {
            return None;
        }
        if let Some(directory) = path.strip_suffix("/.gitignore") {
            directories.push(directory.to_owned());
        }
    }
    paths.extend(directories);
    Some(paths)
}
