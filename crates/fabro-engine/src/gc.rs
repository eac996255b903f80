//! Garbage collection of old runs, as `fabro gc` does it (SPEC 17.4).
//!
//! A run is collected when its status is terminal (`success`, `partial_success`, `fail`;
//! SPEC 8.5) and it ended before the cutoff (its end time, or its start when the end is
//! unknown). Running, cancelled and interrupted runs are never touched: they can still be
//! resumed; neither are child runs of a run that stays. A collected run loses, in this
//! order, the git state its manifest names (the worktree registrations that point into its
//! run directory, then `refs/heads/fabro/run/{id}`, `refs/heads/fabro/parallel/{id}/…`,
//! `refs/fabro/{id}`, `refs/fabro-before/{id}` and `refs/fabro-rewound/{id}/…`), then its
//! run directory; the index row goes with the directory (the index drops rows whose
//! directory is gone, SPEC 11.4). Git objects are left to git's own garbage collection. Directories under `scratch/` without
//! `manifest.json` are set-up leftovers and go when older than the cutoff.
//!
//! Last, blobs that no remaining run directory mentions are deleted. What a run refers
//! to is found as `fabro dump` finds it: every `blob://sha256/{hex}` in its JSON records
//! (manifest, checkpoint, journal, events, stage `status.json`, artifact records), plus
//! the materialised `runtime/blobs/{hex}.json`. A running process may have stored a blob
//! that it has not recorded yet, so blobs written since the earliest start of a running
//! run are kept.

use std::collections::{BTreeSet, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use git2::{Repository, WorktreePruneOptions};

use crate::blob::BLOB_PREFIX;
use crate::run_index::{read_manifest, RunIndex, RunIndexError, RunLock, RunRecord, RunStatus};
use crate::timestamp::parse_rfc3339;

/// What to collect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcOptions {
    /// Runs that ended longer ago than this are collected.
    pub older_than: Duration,
    /// Only report what would be removed.
    pub dry_run: bool,
}

/// A run collected (or, in a dry run, to be collected).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectedRun {
    /// Run id.
    pub run_id: String,
    /// Workflow name.
    pub workflow_name: String,
    /// Its terminal status.
    pub status: RunStatus,
    /// When it ended (or started, when the end is unknown).
    pub ended_at: String,
    /// Bytes of its run directory.
    pub bytes: u64,
    /// Git refs deleted.
    pub refs: Vec<String>,
    /// Worktree registrations pruned.
    pub worktrees: Vec<String>,
}

/// A set-up leftover: a directory under `scratch/` without a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectedLeftover {
    /// The directory.
    pub path: PathBuf,
    /// Its bytes.
    pub bytes: u64,
}

/// What a collection removed (or would remove).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Whether nothing was actually removed.
    pub dry_run: bool,
    /// Runs, oldest first.
    pub runs: Vec<CollectedRun>,
    /// Set-up leftovers, by name.
    pub leftovers: Vec<CollectedLeftover>,
    /// Unreferenced blobs.
    pub blobs: usize,
    /// Their bytes.
    pub blob_bytes: u64,
    /// Things that could not be cleaned and were left in place (a repository that is
    /// gone, a ref that could not be deleted); collection continues past them.
    pub warnings: Vec<String>,
}

impl GcReport {
    /// Bytes freed (or to be freed) on disk: run directories, leftovers and blobs.
    pub fn freed_bytes(&self) -> u64 {
        let runs: u64 = self.runs.iter().map(|run| run.bytes).sum();
        let leftovers: u64 = self.leftovers.iter().map(|leftover| leftover.bytes).sum();
        runs.saturating_add(leftovers)
            .saturating_add(self.blob_bytes)
    }
}

/// Why a collection stopped.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    /// The run index could not be read.
    #[error(transparent)]
    Index(#[from] RunIndexError),
    /// A file or directory could not be read or removed.
    #[error("cannot {action} {}", .path.display())]
    Io {
        /// What was attempted.
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> GcError {
    let path = path.to_path_buf();
    move |source| GcError::Io {
        action,
        path,
        source,
    }
}

/// Collects the garbage of storage root `root` (`$FABRO_HOME`) as of `now`.
pub fn collect_garbage(
    root: &Path,
    options: &GcOptions,
    now: SystemTime,
) -> Result<GcReport, GcError> {
    let cutoff = now.checked_sub(options.older_than).unwrap_or(UNIX_EPOCH);
    let mut index = RunIndex::open(root)?;
    let records = index.list()?;
    let mut report = GcReport {
        dry_run: options.dry_run,
        ..GcReport::default()
    };

    let doomed = runs_to_collect(&records, cutoff);
    let mut removed_dirs: Vec<PathBuf> = Vec::new();
    for record in records
        .iter()
        .rev()
        .filter(|record| doomed.contains(&record.run_id))
    {
        let bytes = tree_size(&record.run_dir);
        let mut collected = CollectedRun {
            run_id: record.run_id.clone(),
            workflow_name: record.workflow_name.clone(),
            status: record.status,
            ended_at: record
                .finished_at
                .clone()
                .unwrap_or_else(|| record.started_at.clone()),
            bytes,
            refs: Vec::new(),
            worktrees: Vec::new(),
        };
        clean_repository(
            record,
            options.dry_run,
            &mut collected,
            &mut report.warnings,
        );
        if !options.dry_run {
            remove_tree(&record.run_dir)?;
        }
        removed_dirs.push(record.run_dir.clone());
        report.runs.push(collected);
    }

    let indexed: BTreeSet<&Path> = records
        .iter()
        .map(|record| record.run_dir.as_path())
        .collect();
    for leftover in leftovers(root, &indexed, cutoff)? {
        let bytes = tree_size(&leftover);
        if !options.dry_run {
            remove_tree(&leftover)?;
        }
        report.leftovers.push(CollectedLeftover {
            bytes,
            path: leftover.clone(),
        });
        removed_dirs.push(leftover);
    }
    if !options.dry_run && !removed_dirs.is_empty() {
        // Drops the rows whose directory is gone.
        index.list()?;
    }

    let keep_since = records
        .iter()
        .filter(|record| record.status == RunStatus::Running)
        .filter_map(|record| parse_rfc3339(&record.started_at))
        .min()
        .unwrap_or(now)
        .min(now);
    let referenced = referenced_blobs(root, &removed_dirs)?;
    collect_blobs(root, &referenced, keep_since, options.dry_run, &mut report)?;
    Ok(report)
}

/// The ids of the runs to collect: finished with a terminal status before `cutoff`,
/// not locked, and not the child of a run that stays.
fn runs_to_collect(records: &[RunRecord], cutoff: SystemTime) -> BTreeSet<String> {
    let mut doomed: BTreeSet<String> = records
        .iter()
        .filter(|record| {
            matches!(
                record.status,
                RunStatus::Success | RunStatus::PartialSuccess | RunStatus::Fail
            )
        })
        .filter(|record| {
            let ended = record.finished_at.as_deref().unwrap_or(&record.started_at);
            parse_rfc3339(ended).is_some_and(|ended| ended <= cutoff)
        })
        .filter(|record| !RunLock::is_held(&record.run_dir))
        .map(|record| record.run_id.clone())
        .collect();
    let parents: HashMap<&str, &str> = records
        .iter()
        .filter_map(|record| Some((record.run_id.as_str(), record.parent_run_id.as_deref()?)))
        .collect();
    let known: BTreeSet<&str> = records
        .iter()
        .map(|record| record.run_id.as_str())
        .collect();
    loop {
        let kept_children: Vec<String> = doomed
            .iter()
            .filter(|run_id| {
                parents
                    .get(run_id.as_str())
                    .is_some_and(|parent| known.contains(parent) && !doomed.contains(*parent))
            })
            .cloned()
            .collect();
        if kept_children.is_empty() {
            return doomed;
        }
        for run_id in kept_children {
            doomed.remove(&run_id);
        }
    }
}

/// Deletes (or lists, in a dry run) the run's refs and worktree registrations in the
/// repository its manifest names; problems become warnings.
fn clean_repository(
    record: &RunRecord,
    dry_run: bool,
    collected: &mut CollectedRun,
    warnings: &mut Vec<String>,
) {
    let Some(repo) = run_repository(record) else {
        return;
    };
    let run_id = &record.run_id;
    let run_dir = &record.run_dir;
    let canonical_run_dir = run_dir.canonicalize().ok();
    let registration = format!("fabro-run-{run_id}");
    if let Ok(names) = repo.worktrees() {
        for name in names.iter().flatten() {
            let Ok(worktree) = repo.find_worktree(name) else {
                continue;
            };
            let inside = worktree.path().starts_with(run_dir)
                || canonical_run_dir
                    .as_ref()
                    .is_some_and(|canonical| worktree.path().starts_with(canonical));
            if name != registration && !inside {
                continue;
            }
            if !dry_run {
                let mut options = WorktreePruneOptions::new();
                options.valid(true).locked(false).working_tree(false);
                if let Err(error) = worktree.prune(Some(&mut options)) {
                    warnings.push(format!(
                        "run {run_id}: cannot prune worktree {name}: {}",
                        error.message()
                    ));
                    continue;
                }
            }
            collected.worktrees.push(name.to_owned());
        }
    }
    let exact = [
        format!("refs/heads/fabro/run/{run_id}"),
        format!("refs/fabro/{run_id}"),
        format!("refs/fabro-before/{run_id}"),
    ];
    let parallel = format!("refs/heads/fabro/parallel/{run_id}/");
    let rewound = format!("refs/fabro-rewound/{run_id}/");
    let mut names: Vec<String> = Vec::new();
    if let Ok(references) = repo.references() {
        for reference in references.flatten() {
            if let Some(name) = reference.name() {
                if exact.iter().any(|exact| exact == name)
                    || name.starts_with(&parallel)
                    || name.starts_with(&rewound)
                {
                    names.push(name.to_owned());
                }
            }
        }
    }
    names.sort();
    for name in names {
        if !dry_run {
            let deleted = repo
                .find_reference(&name)
                .and_then(|mut reference| reference.delete());
            if let Err(error) = deleted {
                warnings.push(format!(
                    "run {run_id}: cannot delete {name}: {}",
                    error.message()
                ));
                continue;
            }
        }
        collected.refs.push(name);
    }
}

/// The repository of a run: the one its manifest names, else (runs in place, without
/// checkpoints) the one around its working directory.
fn run_repository(record: &RunRecord) -> Option<Repository> {
    let manifest = read_manifest(&record.run_dir).ok()?;
    if let Some(repo_root) = manifest.repo_root {
        return Repository::open(repo_root).ok();
    }
    let text = fs_err::read_to_string(record.run_dir.join(crate::run_dir::CHECKPOINT_FILE)).ok()?;
    let checkpoint: serde_json::Value = serde_json::from_str(&text).ok()?;
    let work_dir = checkpoint
        .get("context_values")
        .or_else(|| checkpoint.get("context"))?
        .get("internal.work_dir")?
        .as_str()?
        .to_owned();
    Repository::discover(work_dir).ok()
}

/// Directories under `{root}/scratch` that no index row names, that have no
/// `manifest.json`, that no process locks, and that were last modified before `cutoff`.
fn leftovers(
    root: &Path,
    indexed: &BTreeSet<&Path>,
    cutoff: SystemTime,
) -> Result<Vec<PathBuf>, GcError> {
    let scratch = crate::run_dir::scratch_dir(root);
    let entries = match fs_err::read_dir(&scratch) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(io_error("list", &scratch)(error)),
    };
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            path.is_dir()
                && !indexed.contains(path.as_path())
                && !path.join(crate::run_dir::MANIFEST_FILE).exists()
                && !RunLock::is_held(path)
                && fs_err::symlink_metadata(path)
                    .and_then(|metadata| metadata.modified())
                    .is_ok_and(|modified| modified <= cutoff)
        })
        .collect();
    found.sort();
    Ok(found)
}

/// The hex digests of every blob mentioned by the run directories under `scratch/`,
/// except `removed` ones.
fn referenced_blobs(root: &Path, removed: &[PathBuf]) -> Result<BTreeSet<String>, GcError> {
    let scratch = crate::run_dir::scratch_dir(root);
    let mut references = BTreeSet::new();
    let entries = match fs_err::read_dir(&scratch) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
        Err(error) => return Err(io_error("list", &scratch)(error)),
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() && !removed.contains(&path) {
            scan_run_dir(&path, &path, &mut references)?;
        }
    }
    Ok(references
        .into_iter()
        .filter_map(|reference| reference.strip_prefix(BLOB_PREFIX).map(str::to_owned))
        .collect())
}

/// Directories of a run directory that hold the workflow's files, never fabro's records.
fn is_work_tree(run_dir: &Path, directory: &Path) -> bool {
    ["worktree", "branches", "cache"]
        .iter()
        .any(|name| directory == run_dir.join(name))
        || directory == run_dir.join("artifacts").join("files")
}

/// Adds the blob refs of the records under `directory` (part of `run_dir`).
fn scan_run_dir(
    run_dir: &Path,
    directory: &Path,
    references: &mut BTreeSet<String>,
) -> Result<(), GcError> {
    let entries = match fs_err::read_dir(directory) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(io_error("list", directory)(error)),
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(file_type) = entry.file_type() else {
            continue;
        };
        if file_type.is_dir() {
            if !is_work_tree(run_dir, &path) {
                scan_run_dir(run_dir, &path, references)?;
            }
            continue;
        }
        if !file_type.is_file() {
            continue;
        }
        let name = entry.file_name();
        let name = name.to_string_lossy();
        // Materialised blobs are named after their digest.
        if let Some(hex) = name.strip_suffix(".json") {
            if hex.len() == 64 && hex.bytes().all(|byte| byte.is_ascii_hexdigit()) {
                references.insert(format!("{BLOB_PREFIX}{}", hex.to_ascii_lowercase()));
            }
        }
        if name.ends_with(".json") || name.ends_with(".jsonl") {
            scan_file(&path, references)?;
        }
    }
    Ok(())
}

/// Adds the blob refs in the file at `path`, read in chunks so that large event logs
/// need little memory.
fn scan_file(path: &Path, references: &mut BTreeSet<String>) -> Result<(), GcError> {
    // A ref that starts in the last bytes of one chunk is found whole in the next.
    const OVERLAP: usize = BLOB_PREFIX.len() + 64 - 1;
    const CHUNK: usize = 1 << 20;
    let mut file = match fs_err::File::open(path) {
        Ok(file) => file,
        // A file removed while we scan (a finished stage's temporary) holds nothing.
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(io_error("read", path)(error)),
    };
    let mut buffer: Vec<u8> = Vec::with_capacity(CHUNK + OVERLAP);
    let mut chunk = vec![0; CHUNK];
    loop {
        let read = match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(io_error("read", path)(error)),
        };
        buffer.extend_from_slice(&chunk[..read]);
        let mut found = BTreeSet::new();
        crate::dump::collect_references(&buffer, &mut found);
        references.extend(found.into_iter().map(crate::id::BlobRef::into_string));
        let keep = buffer.len().saturating_sub(OVERLAP);
        buffer.drain(..keep);
    }
    Ok(())
}

/// Deletes (or counts) the blobs of `{root}/blobs/sha256` outside `referenced` that were
/// written before `keep_since`, with temporary files left by interrupted writes.
fn collect_blobs(
    root: &Path,
    referenced: &BTreeSet<String>,
    keep_since: SystemTime,
    dry_run: bool,
    report: &mut GcReport,
) -> Result<(), GcError> {
    let store = root.join("blobs").join("sha256");
    let shards = match fs_err::read_dir(&store) {
        Ok(shards) => shards,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(io_error("list", &store)(error)),
    };
    let mut shards: Vec<PathBuf> = shards
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.is_dir())
        .collect();
    shards.sort();
    for shard in shards {
        let entries = fs_err::read_dir(&shard).map_err(io_error("list", &shard))?;
        let mut remaining = 0usize;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let is_blob = name.len() == 64 && name.bytes().all(|byte| byte.is_ascii_hexdigit());
            let is_temporary = name.starts_with('.') && name.ends_with(".tmp");
            let Ok(metadata) = entry.metadata() else {
                remaining += 1;
                continue;
            };
            let old_enough = metadata
                .modified()
                .is_ok_and(|modified| modified < keep_since);
            let garbage =
                old_enough && ((is_blob && !referenced.contains(name.as_ref())) || is_temporary);
            if !garbage {
                remaining += 1;
                continue;
            }
            if !dry_run {
                fs_err::remove_file(entry.path()).map_err(io_error("remove", &entry.path()))?;
            }
            if is_blob {
                report.blobs += 1;
            }
            report.blob_bytes = report.blob_bytes.saturating_add(metadata.len());
        }
        if remaining == 0 && !dry_run {
            // Another writer may have just created a file in it: then it stays.
            let _ = fs_err::remove_dir(&shard);
        }
    }
    Ok(())
}

/// Bytes of the files under `path` (symlinks counted as themselves, never followed).
fn tree_size(path: &Path) -> u64 {
    let Ok(metadata) = fs_err::symlink_metadata(path) else {
        return 0;
    };
    if !metadata.is_dir() {
        return metadata.len();
    }
    let Ok(entries) = fs_err::read_dir(path) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| tree_size(&entry.path()))
        .fold(0, u64::saturating_add)
}

fn remove_tree(path: &Path) -> Result<(), GcError> {
    match fs_err::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(io_error("remove", path)(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(run_id: &str, status: RunStatus, ended: &str, parent: Option<&str>) -> RunRecord {
        RunRecord {
            run_id: run_id.to_owned(),
            workflow_name: "w".to_owned(),
            workflow_path: "w.fabro".to_owned(),
            goal: String::new(),
            status,
            started_at: "2020-01-01T00:00:00.000Z".to_owned(),
            finished_at: Some(ended.to_owned()),
            run_dir: PathBuf::from(format!("/nonexistent/{run_id}")),
            parent_run_id: parent.map(str::to_owned),
            reason: None,
            worker: None,
        }
    }

    #[test]
    fn only_old_terminal_runs_are_collected_and_children_follow_their_parents() {
        let old = "2020-01-02T00:00:00.000Z";
        let new = "2030-01-01T00:00:00.000Z";
        let cutoff = parse_rfc3339("2025-01-01T00:00:00.000Z").expect("time");
        let records = vec![
            record("ok", RunStatus::Success, old, None),
            record("partial", RunStatus::PartialSuccess, old, None),
            record("failed", RunStatus::Fail, old, None),
            record("canceled", RunStatus::Canceled, old, None),
            record("interrupted", RunStatus::Interrupted, old, None),
            record("running", RunStatus::Running, old, None),
            record("recent", RunStatus::Success, new, None),
            record("garbled", RunStatus::Success, "yesterday", None),
            // A finished child of a resumable parent stays; of a collected one, goes.
            record(
                "child-of-canceled",
                RunStatus::Success,
                old,
                Some("canceled"),
            ),
            record("child-of-ok", RunStatus::Success, old, Some("ok")),
            record(
                "grandchild",
                RunStatus::Success,
                old,
                Some("child-of-canceled"),
            ),
            record("orphan", RunStatus::Success, old, Some("gone")),
        ];
        let doomed = runs_to_collect(&records, cutoff);
        assert_eq!(
            doomed.into_iter().collect::<Vec<_>>(),
            ["child-of-ok", "failed", "ok", "orphan", "partial"]
        );
    }

    #[test]
    fn references_are_found_across_chunk_boundaries_and_in_blob_file_names() {
        let root = tempfile::tempdir().expect("tempdir");
        let run_dir = root.path().join("scratch/R");
        let first = "a".repeat(64);
        let second = "b".repeat(64);
        let third = "c".repeat(64);
        let ignored = "d".repeat(64);
        fs_err::create_dir_all(run_dir.join("runtime/blobs")).expect("mkdir");
        fs_err::create_dir_all(run_dir.join("worktree")).expect("mkdir");
        // The second ref straddles the first 1 MiB chunk boundary.
        let padding = "x".repeat((1 << 20) - 20);
        fs_err::write(
            run_dir.join("events.jsonl"),
            format!("\"{BLOB_PREFIX}{first}\"{padding}\"{BLOB_PREFIX}{second}\"\n"),
        )
        .expect("write");
        fs_err::write(run_dir.join(format!("runtime/blobs/{third}.json")), "1").expect("write");
        fs_err::write(
            run_dir.join("worktree/data.json"),
            format!("\"{BLOB_PREFIX}{ignored}\""),
        )
        .expect("write");
        let found = referenced_blobs(root.path(), &[]).expect("scans");
        assert_eq!(found, BTreeSet::from([first, second, third]));
        assert!(referenced_blobs(root.path(), &[run_dir])
            .expect("scans")
            .is_empty());
    }

    #[test]
    fn blobs_written_since_a_running_run_started_are_kept() {
        let root = tempfile::tempdir().expect("tempdir");
        let shard = root.path().join("blobs/sha256/ab");
        fs_err::create_dir_all(&shard).expect("mkdir");
        let kept = format!("ab{}", "0".repeat(62));
        let referenced = format!("ab{}", "1".repeat(62));
        let garbage = format!("ab{}", "2".repeat(62));
        for name in [&kept, &referenced, &garbage] {
            fs_err::write(shard.join(name), "\"x\"").expect("write");
        }
        fs_err::write(shard.join(".tmp-leftover.1.2.tmp"), "x").expect("write");
        let old = UNIX_EPOCH + Duration::from_secs(1_000_000);
        for name in [&referenced, &garbage, &".tmp-leftover.1.2.tmp".to_owned()] {
            fs_err::OpenOptions::new()
                .write(true)
                .open(shard.join(name))
                .expect("open")
                .file()
                .set_modified(old)
                .expect("set mtime");
        }
        let keep_since = UNIX_EPOCH + Duration::from_secs(2_000_000);
        let references = BTreeSet::from([referenced.clone()]);
        let mut report = GcReport::default();
        collect_blobs(root.path(), &references, keep_since, true, &mut report).expect("dry run");
        assert_eq!((report.blobs, report.blob_bytes), (1, 4));
        assert!(shard.join(&garbage).exists());
        let mut report = GcReport::default();
        collect_blobs(root.path(), &references, keep_since, false, &mut report).expect("collects");
        assert_eq!(report.blobs, 1);
        assert!(!shard.join(&garbage).exists());
        assert!(shard.join(&kept).exists() && shard.join(&referenced).exists());
        assert!(!shard.join(".tmp-leftover.1.2.tmp").exists());
    }
}
