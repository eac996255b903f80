//! Automatic asset capture (SPEC 7.8): test reports, screenshots, videos and traces that a
//! command (or an agent's `shell` calls) wrote are copied into the run directory.
//!
//! Before each attempt [`AssetScanner::baseline`] fingerprints (size, mtime) every candidate
//! file under the working directory; after it [`AssetScanner::capture`] rescans and copies the
//! new or changed candidates whose mtime is not earlier than the attempt's start into
//! [`asset_dir`]`(run_dir, node_id, attempt)`. Limits produce [`AssetSkip`] records, which the
//! engine reports as `Warning` events with code `asset_skipped`.
//! Everything is blocking file-system work; async callers use `spawn_blocking`.
//!
//! The rescan after an attempt is also a [`Snapshot`] of the candidates: when nothing can
//! have written to the working directory since (the engine knows when no other stage ran),
//! it serves as the next attempt's baseline, so a chain of commands walks the tree once
//! per command instead of twice.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use ignore::gitignore::{Gitignore, GitignoreBuilder};

use crate::git::ChangeFeed;

/// Directories whose files are all candidates, at any depth (SPEC 7.8).
const ASSET_DIRS: [&str; 2] = ["playwright-report", "test-results"];
/// `cypress/videos/` and `cypress/screenshots/`: (parent, directory).
const CYPRESS_DIRS: [(&str, &str); 2] = [("cypress", "videos"), ("cypress", "screenshots")];
/// Directories never entered, by name.
const NEVER_SCANNED: [&str; 4] = [".git", "node_modules", "target", ".fabro"];
/// Directories never entered, as (parent, directory).
const NEVER_SCANNED_NESTED: [(&str, &str); 2] = [(".cache", "ms-playwright"), (".yarn", "cache")];
/// File timestamps come from the kernel's coarse clock and may lag the clock read at the
/// attempt's start by a few milliseconds; a file written just after the start must not look
/// older than it. A file unpacked with an old mtime is far older than this.
const MTIME_TOLERANCE: Duration = Duration::from_secs(1);

/// The limits of SPEC 7.8, per attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CaptureLimits {
    /// Files larger than this are skipped (10 MB).
    pub max_file_bytes: u64,
    /// At most this many files are captured (100).
    pub max_files: usize,
    /// At most this many bytes are captured in total (50 MB).
    pub max_total_bytes: u64,
    /// A scan stops after this long (30 s).
    pub scan_timeout: Duration,
}

impl Default for CaptureLimits {
    fn default() -> CaptureLimits {
        CaptureLimits {
            max_file_bytes: 10 * 1024 * 1024,
            max_files: 100,
            max_total_bytes: 50 * 1024 * 1024,
            scan_timeout: Duration::from_secs(30),
        }
    }
}

/// Finds and copies assets; built once per run from `[artifacts] include`.
#[derive(Debug, Clone)]
pub(crate) struct AssetScanner {
    include: Gitignore,
    limits: CaptureLimits,
    /// Directories never entered (canonical paths): fabro's own storage when it lies
    /// inside the working directory.
    skipped: Vec<PathBuf>,
    /// The run worktree's change feed, when the run has one (see [`AssetScanner::follow`]).
    followed: Arc<Mutex<Option<Followed>>>,
}

/// A working directory whose changes come from a file-system watch, and its candidates as
/// of the last read of the feed.
#[derive(Debug)]
struct Followed {
    feed: ChangeFeed,
    work_dir: PathBuf,
    /// The working directory relative to the feed's root.
    prefix: PathBuf,
    files: Option<HashMap<String, Fingerprint>>,
}

/// The candidate files before an attempt, and when the attempt started.
#[derive(Debug, Clone)]
pub(crate) struct Baseline {
    work_dir: PathBuf,
    started: SystemTime,
    files: HashMap<String, Fingerprint>,
}

/// The candidate files as a complete scan found them: the baseline of a later attempt in
/// the same working directory when nothing else wrote to it in between.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    work_dir: PathBuf,
    files: HashMap<String, Fingerprint>,
    /// The scan stopped at its time limit, so files may be missing.
    timed_out: bool,
}

impl Snapshot {
    /// The working directory that was scanned.
    pub(crate) fn work_dir(&self) -> &Path {
        &self.work_dir
    }

    /// The baseline of an attempt starting now, or `None` when the scan was cut short
    /// (a file missing from a baseline would count as new).
    pub(crate) fn into_baseline(self) -> Option<Baseline> {
        (!self.timed_out).then(|| Baseline {
            work_dir: self.work_dir,
            started: SystemTime::now(),
            files: self.files,
        })
    }
}

/// What [`AssetScanner::capture`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CaptureReport {
    /// The files copied, in path order.
    pub captured: Vec<CapturedAsset>,
    /// The files (or the scan) left out because of a limit or an error.
    pub skipped: Vec<AssetSkip>,
}

/// One copied file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CapturedAsset {
    /// Path relative to the working directory, `/`-separated.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Where the copy is: the attempt's asset directory joined with `path`.
    pub stored: PathBuf,
}

/// A file, or the rest of a scan, that was not captured (a `Warning` with code
/// `asset_skipped`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AssetSkip {
    /// The file is larger than [`CaptureLimits::max_file_bytes`].
    FileTooLarge {
        /// Path relative to the working directory.
        path: String,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// [`CaptureLimits::max_files`] files were already captured.
    TooManyFiles {
        /// Path relative to the working directory.
        path: String,
        /// The limit.
        limit: usize,
    },
    /// Copying the file would exceed [`CaptureLimits::max_total_bytes`].
    TotalTooLarge {
        /// Path relative to the working directory.
        path: String,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The scan reached [`CaptureLimits::scan_timeout`]; files not reached were not considered.
    ScanTimedOut {
        /// The limit.
        after: Duration,
    },
    /// The file could not be copied (it vanished, is unreadable, or the target is not
    /// writable).
    CopyFailed {
        /// Path relative to the working directory.
        path: String,
        /// The I/O error, as text for the warning.
        error: String,
    },
}

impl fmt::Display for AssetSkip {
    /// The warning message.
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AssetSkip::FileTooLarge { path, size, limit } => write!(
                formatter,
                "asset {path} skipped: {size} bytes is over the {limit}-byte file limit"
            ),
            AssetSkip::TooManyFiles { path, limit } => write!(
                formatter,
                "asset {path} skipped: {limit} files already captured in this attempt"
            ),
            AssetSkip::TotalTooLarge { path, size, limit } => write!(
                formatter,
                "asset {path} skipped: its {size} bytes would exceed the {limit}-byte total for this attempt"
            ),
            AssetSkip::ScanTimedOut { after } => write!(
                formatter,
                "asset scan stopped after {}s; later files were not captured",
                after.as_secs()
            ),
            AssetSkip::CopyFailed { path, error } => {
                write!(formatter, "asset {path} skipped: {error}")
            }
        }
    }
}

/// `[artifacts] include` holds a glob that is not valid gitignore-style syntax.
#[derive(Debug, thiserror::Error)]
#[error("invalid [artifacts] include glob {glob:?}")]
pub struct IncludeGlobError {
    glob: String,
    #[source]
    source: ignore::Error,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint {
    size: u64,
    modified: SystemTime,
}

struct Candidate {
    path: String,
    absolute: PathBuf,
    fingerprint: Fingerprint,
}

impl AssetScanner {
    /// A scanner for the built-in candidates plus `include` globs (gitignore syntax, relative
    /// to the working directory).
    pub(crate) fn new(
        include: &[String],
        limits: CaptureLimits,
    ) -> Result<AssetScanner, IncludeGlobError> {
        let mut builder = GitignoreBuilder::new("");
        for glob in include {
            builder
                .add_line(None, glob)
                .map_err(|source| IncludeGlobError {
                    glob: glob.clone(),
                    source,
                })?;
        }
        let include = builder.build().map_err(|source| IncludeGlobError {
            glob: include.join(", "),
            source,
        })?;
        Ok(AssetScanner {
            include,
            limits,
            skipped: Vec::new(),
            followed: Arc::new(Mutex::new(None)),
        })
    }

    /// Never enters `directory` (e.g. `$FABRO_HOME` inside a project): its run
    /// directories grow with every stage and hold no assets of the workflow's own.
    pub(crate) fn skipping(mut self, directory: &Path) -> AssetScanner {
        if let Ok(canonical) = directory.canonicalize() {
            self.skipped.push(canonical);
        }
        self
    }

    /// Records the attempt's start and the fingerprints of the candidates under `work_dir`.
    /// Call it right before the attempt runs. Unreadable directories are passed over.
    pub(crate) fn baseline(&self, work_dir: &Path) -> Baseline {
        let started = SystemTime::now();
        let mut followed = self.follow_for(work_dir);
        if let Some(followed) = followed.as_mut().and_then(|guard| guard.as_mut()) {
            let previous = followed.files.take();
            if let (Some(mut files), Some(changed)) = (previous, self.changed_paths(followed)) {
                self.refresh(work_dir, &mut files, &changed);
                followed.files = Some(files.clone());
                return Baseline {
                    work_dir: work_dir.to_path_buf(),
                    started,
                    files,
                };
            }
        }
        let (candidates, timed_out) = self.scan(work_dir);
        let files: HashMap<String, Fingerprint> = candidates
            .into_iter()
            .map(|candidate| (candidate.path, candidate.fingerprint))
            .collect();
        if let Some(followed) = followed.as_mut().and_then(|guard| guard.as_mut()) {
            followed.files = (!timed_out).then(|| files.clone());
        }
        Baseline {
            work_dir: work_dir.to_path_buf(),
            started,
            files,
        }
    }

    /// Takes the candidates of `work_dir` (a run worktree's working directory, `prefix`
    /// below the feed's root) from `feed` from now on: baselines and rescans examine only
    /// the touched paths instead of walking the tree.
    ///
    /// The one walk of the tree happens here, when the run is set up, rather than in its
    /// first stage: the feed already runs, so whatever changes during or after the walk
    /// is re-examined by the next baseline.
    pub(crate) fn follow(&self, feed: ChangeFeed, work_dir: &Path, prefix: &Path) {
        let (candidates, timed_out) = self.scan(work_dir);
        let files = (!timed_out).then(|| {
            candidates
                .into_iter()
                .map(|candidate| (candidate.path, candidate.fingerprint))
                .collect()
        });
        if let Ok(mut followed) = self.followed.lock() {
            *followed = Some(Followed {
                feed,
                work_dir: work_dir.to_path_buf(),
                prefix: prefix.to_path_buf(),
                files,
            });
        }
    }

    /// The followed state, locked, when it is about `work_dir`.
    fn follow_for(&self, work_dir: &Path) -> Option<std::sync::MutexGuard<'_, Option<Followed>>> {
        let guard = self.followed.lock().ok()?;
        guard
            .as_ref()
            .is_some_and(|followed| followed.work_dir == work_dir)
            .then_some(guard)
    }

    /// The paths the feed reports, relative to the working directory; `None` when the feed
    /// cannot tell or the working directory itself was touched.
    fn changed_paths(&self, followed: &mut Followed) -> Option<Vec<String>> {
        let mut changed = Vec::new();
        for path in followed.feed.changes()? {
            match Path::new(&path).strip_prefix(&followed.prefix) {
                Ok(relative) if !relative.as_os_str().is_empty() => {
                    changed.push(relative.to_str()?.to_owned());
                }
                Ok(_) => return None,
                Err(_) if followed.prefix.starts_with(&path) => return None,
                Err(_) => {}
            }
        }
        Some(changed)
    }

    /// Re-examines `changed` paths (relative to `work_dir`; a directory with its subtree)
    /// in `files`, and returns the candidates found there, sorted by path.
    fn refresh(
        &self,
        work_dir: &Path,
        files: &mut HashMap<String, Fingerprint>,
        changed: &[String],
    ) -> Vec<Candidate> {
        let mut walk = Walk {
            scanner: self,
            deadline: Instant::now() + self.limits.scan_timeout,
            timed_out: false,
            found: Vec::new(),
        };
        for path in changed {
            let below = format!("{path}/");
            files.retain(|file, _| file != path && !file.starts_with(&below));
            walk.path(work_dir, path);
        }
        let mut found = walk.found;
        found.sort_by(|a, b| a.path.cmp(&b.path));
        found.dedup_by(|a, b| a.path == b.path);
        for candidate in &found {
            files.insert(candidate.path.clone(), candidate.fingerprint);
        }
        found
    }

    /// [`AssetScanner::capture_with_snapshot`] without the snapshot.
    #[cfg(test)]
    pub(crate) fn capture(&self, baseline: &Baseline, asset_dir: &Path) -> CaptureReport {
        self.capture_with_snapshot(baseline, asset_dir).0
    }

    /// Rescans the baseline's working directory and copies the new or changed candidates
    /// whose mtime is not earlier than the attempt's start into `asset_dir` (see
    /// [`asset_dir`]), within the limits; also returns the rescan as a [`Snapshot`].
    pub(crate) fn capture_with_snapshot(
        &self,
        baseline: &Baseline,
        asset_dir: &Path,
    ) -> (CaptureReport, Snapshot) {
        let mut followed = self.follow_for(&baseline.work_dir);
        if let Some(followed) = followed.as_mut().and_then(|guard| guard.as_mut()) {
            if let Some(changed) = self.changed_paths(followed) {
                let mut files = baseline.files.clone();
                let candidates = self.refresh(&baseline.work_dir, &mut files, &changed);
                followed.files = Some(files.clone());
                let report = self.copy_new(baseline, candidates, asset_dir, false);
                let snapshot = Snapshot {
                    work_dir: baseline.work_dir.clone(),
                    files,
                    timed_out: false,
                };
                return (report, snapshot);
            }
        }
        let (candidates, timed_out) = self.scan(&baseline.work_dir);
        let snapshot = Snapshot {
            work_dir: baseline.work_dir.clone(),
            files: candidates
                .iter()
                .map(|candidate| (candidate.path.clone(), candidate.fingerprint))
                .collect(),
            timed_out,
        };
        if let Some(followed) = followed.as_mut().and_then(|guard| guard.as_mut()) {
            followed.files = (!timed_out).then(|| snapshot.files.clone());
        }
        drop(followed);
        let report = self.copy_new(baseline, candidates, asset_dir, timed_out);
        (report, snapshot)
    }

    /// Copies the `candidates` (sorted by path) that are new or changed since `baseline`
    /// and not older than its start, within the limits.
    fn copy_new(
        &self,
        baseline: &Baseline,
        candidates: Vec<Candidate>,
        asset_dir: &Path,
        timed_out: bool,
    ) -> CaptureReport {
        let earliest = baseline
            .started
            .checked_sub(MTIME_TOLERANCE)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let mut report = CaptureReport::default();
        let mut total: u64 = 0;
        for candidate in candidates {
            let unchanged = baseline.files.get(&candidate.path) == Some(&candidate.fingerprint);
            if unchanged || candidate.fingerprint.modified < earliest {
                continue;
            }
            let size = candidate.fingerprint.size;
            let skip = if size > self.limits.max_file_bytes {
                Some(AssetSkip::FileTooLarge {
                    path: candidate.path.clone(),
                    size,
                    limit: self.limits.max_file_bytes,
                })
            } else if report.captured.len() >= self.limits.max_files {
                Some(AssetSkip::TooManyFiles {
                    path: candidate.path.clone(),
                    limit: self.limits.max_files,
                })
            } else if total.saturating_add(size) > self.limits.max_total_bytes {
                Some(AssetSkip::TotalTooLarge {
                    path: candidate.path.clone(),
                    size,
                    limit: self.limits.max_total_bytes,
                })
            } else {
                None
            };
            if let Some(skip) = skip {
                report.skipped.push(skip);
                continue;
            }
            let stored = asset_dir.join(&candidate.path);
            match copy(&candidate.absolute, &stored) {
                Ok(copied) => {
                    total = total.saturating_add(copied);
                    report.captured.push(CapturedAsset {
                        path: candidate.path,
                        size: copied,
                        stored,
                    });
                }
                Err(error) => report.skipped.push(AssetSkip::CopyFailed {
                    path: candidate.path,
                    error: error.to_string(),
                }),
            }
        }
        if timed_out {
            report.skipped.push(AssetSkip::ScanTimedOut {
                after: self.limits.scan_timeout,
            });
        }
        report
    }

    /// Every candidate under `work_dir`, sorted by path, and whether the scan timed out.
    fn scan(&self, work_dir: &Path) -> (Vec<Candidate>, bool) {
        let deadline = Instant::now() + self.limits.scan_timeout;
        let mut walk = Walk {
            scanner: self,
            deadline,
            timed_out: false,
            found: Vec::new(),
        };
        walk.directory(work_dir, "", false);
        let Walk {
            mut found,
            timed_out,
            ..
        } = walk;
        found.sort_by(|a, b| a.path.cmp(&b.path));
        (found, timed_out)
    }
}

/// Where the assets of one attempt go: `{run_dir}/artifacts/files/{node_slug}/retry_{attempt}`
/// (SPEC 7.8).
pub(crate) fn asset_dir(run_dir: &Path, node_id: &str, attempt: u32) -> PathBuf {
    run_dir
        .join("artifacts")
        .join("files")
        .join(node_slug(node_id))
        .join(format!("retry_{attempt}"))
}

/// The node id lowercased, with every character outside `[a-z0-9_-]` replaced by `-`.
pub(crate) fn node_slug(node_id: &str) -> String {
    node_id
        .chars()
        .flat_map(char::to_lowercase)
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

struct Walk<'a> {
    scanner: &'a AssetScanner,
    deadline: Instant,
    timed_out: bool,
    found: Vec<Candidate>,
}

impl Walk<'_> {
    /// Scans `dir`, found at `relative` below the working directory; `in_asset_dir` says
    /// whether `dir` or an ancestor is an asset directory.
    fn is_skipped(&self, path: &Path, name: &str) -> bool {
        let skipped = &self.scanner.skipped;
        !skipped.is_empty()
            && skipped
                .iter()
                .any(|skip| skip.file_name().is_some_and(|skip_name| skip_name == name))
            && path
                .canonicalize()
                .is_ok_and(|canonical| skipped.contains(&canonical))
    }

    fn directory(&mut self, dir: &Path, relative: &str, in_asset_dir: bool) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let dir_name = relative.rsplit('/').next().filter(|_| !relative.is_empty());
        for entry in entries.flatten() {
            if Instant::now() >= self.deadline {
                self.timed_out = true;
                return;
            }
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            // Symlinks are never followed: they could lead outside the working directory.
            let Ok(file_type) = entry.file_type() else {
                continue;
            };
            let path = if relative.is_empty() {
                name.clone()
            } else {
                format!("{relative}/{name}")
            };
            if file_type.is_dir() {
                if never_scanned(dir_name, &name) || self.is_skipped(&entry.path(), &name) {
                    continue;
                }
                let asset_dir = in_asset_dir || is_asset_dir(dir_name, &name);
                self.directory(&entry.path(), &path, asset_dir);
                if self.timed_out {
                    return;
                }
            } else if file_type.is_file()
                && (in_asset_dir || is_asset_file(&name) || self.included(&path))
            {
                let Ok(metadata) = entry.metadata() else {
                    continue;
                };
                let Ok(modified) = metadata.modified() else {
                    continue;
                };
                self.found.push(Candidate {
                    absolute: entry.path(),
                    path,
                    fingerprint: Fingerprint {
                        size: metadata.len(),
                        modified,
                    },
                });
            }
        }
    }

    /// Adds the candidates at `path` (relative to `work_dir`): the file itself, or the
    /// directory's subtree, unless an ancestor is never scanned.
    fn path(&mut self, work_dir: &Path, path: &str) {
        let components: Vec<&str> = path.split('/').collect();
        let Some((name, ancestors)) = components.split_last() else {
            return;
        };
        let mut parent: Option<&str> = None;
        let mut in_asset_dir = false;
        let mut absolute = work_dir.to_path_buf();
        for ancestor in ancestors {
            absolute.push(ancestor);
            if never_scanned(parent, ancestor) || self.is_skipped(&absolute, ancestor) {
                return;
            }
            in_asset_dir = in_asset_dir || is_asset_dir(parent, ancestor);
            parent = Some(ancestor);
        }
        absolute.push(name);
        let Ok(metadata) = std::fs::symlink_metadata(&absolute) else {
            return;
        };
        if metadata.is_dir() {
            if never_scanned(parent, name) || self.is_skipped(&absolute, name) {
                return;
            }
            let asset_dir = in_asset_dir || is_asset_dir(parent, name);
            self.directory(&absolute, path, asset_dir);
        } else if metadata.is_file() && (in_asset_dir || is_asset_file(name) || self.included(path))
        {
            let Ok(modified) = metadata.modified() else {
                return;
            };
            self.found.push(Candidate {
                absolute,
                path: path.to_owned(),
                fingerprint: Fingerprint {
                    size: metadata.len(),
                    modified,
                },
            });
        }
    }

    fn included(&self, path: &str) -> bool {
        self.scanner
            .include
            .matched_path_or_any_parents(path, false)
            .is_ignore()
    }
}

fn never_scanned(parent: Option<&str>, name: &str) -> bool {
    NEVER_SCANNED.contains(&name)
        || NEVER_SCANNED_NESTED
            .iter()
            .any(|(outer, inner)| parent == Some(*outer) && name == *inner)
}

fn is_asset_dir(parent: Option<&str>, name: &str) -> bool {
    ASSET_DIRS.contains(&name)
        || CYPRESS_DIRS
            .iter()
            .any(|(outer, inner)| parent == Some(*outer) && name == *inner)
}

/// `junit*.xml` or `*.trace.zip`.
fn is_asset_file(name: &str) -> bool {
    (name.starts_with("junit") && name.ends_with(".xml") && name.len() >= "junit.xml".len())
        || (name.ends_with(".trace.zip") && name.len() > ".trace.zip".len())
}

fn copy(from: &Path, to: &Path) -> std::io::Result<u64> {
    if let Some(parent) = to.parent() {
        fs_err::create_dir_all(parent)?;
    }
    fs_err::copy(from, to)
}

#[cfg(test)]
mod tests;
