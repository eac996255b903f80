//! The run directory layout (SPEC 11.1) and atomic file replacement (SPEC 13.2).
//!
//! The names of the run record files live here and nowhere else: the store
//! ([`crate::store`]) and the layers it is built on (the run index, the checkpoint log)
//! use these constants and [`RunPaths`]; other code asks the store. A tidy test
//! (`crates/fabro-test-support/tests/tidy.rs`) keeps the names out of other modules.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The directory of run directories under the storage root.
pub(crate) const SCRATCH_DIR: &str = "scratch";
/// A run's manifest: a run directory with one is a complete run.
pub const MANIFEST_FILE: &str = "manifest.json";
/// A run's newest checkpoint, as readers see it.
pub(crate) const CHECKPOINT_FILE: &str = "checkpoint.json";
/// A run's checkpoint journal, ahead of [`CHECKPOINT_FILE`] between copies.
pub(crate) const JOURNAL_FILE: &str = "journal.jsonl";
/// A run's events, one envelope a line (SPEC 11.3).
pub(crate) const EVENTS_FILE: &str = "events.jsonl";
/// A rewind of the run that has begun and not finished (SPEC 20.3).
pub(crate) const REWIND_FILE: &str = "rewind.json";
/// Where a rewind moves the stage directories after the stage it goes back to:
/// `rewound/{k}/stages/` (SPEC 20.3).
pub(crate) const REWOUND_DIR: &str = "rewound";

/// `{root}/scratch`: where the run directories of storage root `root` live.
pub(crate) fn scratch_dir(root: &Path) -> PathBuf {
    root.join(SCRATCH_DIR)
}

/// Paths of one run.
#[derive(Debug, Clone)]
pub struct RunPaths {
    root: PathBuf,
    run_dir: PathBuf,
}

impl RunPaths {
    /// The run `run_id` under storage root `root` (`$FABRO_HOME`).
    pub fn new(root: &Path, run_id: &str) -> RunPaths {
        RunPaths {
            root: root.to_path_buf(),
            run_dir: scratch_dir(root).join(run_id),
        }
    }

    /// `$FABRO_HOME`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `{root}/scratch/{run_id}`.
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// `manifest.json`.
    pub fn manifest(&self) -> PathBuf {
        self.run_dir.join(MANIFEST_FILE)
    }

    /// `checkpoint.json`.
    pub fn checkpoint(&self) -> PathBuf {
        self.run_dir.join(CHECKPOINT_FILE)
    }

    /// `events.jsonl`.
    pub fn events(&self) -> PathBuf {
        self.run_dir.join(EVENTS_FILE)
    }

    /// `journal.jsonl`.
    pub fn journal(&self) -> PathBuf {
        self.run_dir.join(JOURNAL_FILE)
    }

    /// `graph.fabro`.
    pub fn graph(&self) -> PathBuf {
        self.run_dir.join("graph.fabro")
    }

    /// `config.json`.
    pub fn config(&self) -> PathBuf {
        self.run_dir.join("config.json")
    }

    /// `rewound/{k}/stages`: the stage directories rewind `k` moved away (SPEC 20.3).
    pub fn rewound_stages(&self, k: u32) -> PathBuf {
        self.run_dir
            .join(REWOUND_DIR)
            .join(k.to_string())
            .join("stages")
    }

    /// `stages/{rank:03}-{node_id}@{visit}` (SPEC 7.5).
    pub fn stage_dir(&self, rank: u32, node_id: &str, visit: u32) -> PathBuf {
        RunPaths::stage_dir_in(&self.run_dir, rank, node_id, visit)
    }

    /// [`RunPaths::stage_dir`] of the run directory `run_dir`.
    pub fn stage_dir_in(run_dir: &Path, rank: u32, node_id: &str, visit: u32) -> PathBuf {
        run_dir
            .join("stages")
            .join(format!("{rank:03}-{node_id}@{visit}"))
    }
}

/// Replaces `path` atomically: writes a temporary file in the same directory, then
/// renames it over the target, so readers never see a partial file (SPEC 13.2).
///
/// Secret values are redacted on the way (SPEC 13.1): every record written through here
/// (`manifest.json`, `config.json`, `status.json`, …) is stored without them.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let bytes = &*fabro_llm::redact::redactor().redact_bytes(bytes);
    let directory = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map_or_else(|| "file".into(), |name| name.to_string_lossy().into_owned());
    let temporary = directory.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        crate::blob::next_temporary_id()
    ));
    let mut file = fs_err::File::create(&temporary)?;
    file.write_all(bytes)?;
    file.flush()?;
    drop(file);
    fs_err::rename(&temporary, path)
}

/// Replaces `path` atomically like [`write_atomic`], for a file rewritten many times:
/// the new content goes into the sibling `spare` (created once, then reused), and the
/// two names are exchanged in one step (`renameat2(RENAME_EXCHANGE)`). No inode is
/// created or freed per write, which on ext4 makes each replacement several times
/// cheaper than a fresh temporary file. Where the exchange is unsupported it falls back
/// to a rename. A reader that keeps the old file open for longer than one replacement
/// may see it rewritten; readers here read whole files at once.
///
/// Secret values are redacted on the way, as in [`write_atomic`].
pub(crate) fn replace_via_spare(path: &Path, spare: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let bytes = &*fabro_llm::redact::redactor().redact_bytes(bytes);
    // Overwrite, then cut to length: truncating to zero first would make ext4 flush the
    // file's blocks on close (its `auto_da_alloc` heuristic for replace-by-truncate).
    let mut file = fs_err::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(spare)?;
    file.write_all(bytes)?;
    file.set_len(bytes.len() as u64)?;
    drop(file);
    if path.exists() {
        match nix::fcntl::renameat2(
            nix::fcntl::AT_FDCWD,
            spare,
            nix::fcntl::AT_FDCWD,
            path,
            nix::fcntl::RenameFlags::RENAME_EXCHANGE,
        ) {
            Ok(()) => return Ok(()),
            Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOSYS) => {}
            Err(errno) => return Err(errno.into()),
        }
    }
    fs_err::rename(spare, path)
}

/// Writes `value` as pretty JSON atomically.
pub(crate) fn write_json_atomic(path: &Path, value: &impl serde::Serialize) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_directories_are_ranked_and_visited() {
        let paths = RunPaths::new(Path::new("/h"), "R1");
        assert_eq!(
            paths.stage_dir(7, "plan", 2),
            Path::new("/h/scratch/R1/stages/007-plan@2")
        );
        assert_eq!(
            paths.stage_dir(1234, "x", 1),
            Path::new("/h/scratch/R1/stages/1234-x@1")
        );
    }

    #[test]
    fn atomic_writes_replace_whole_files() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("checkpoint.json");
        write_atomic(&path, b"first").expect("writes");
        write_json_atomic(&path, &serde_json::json!({"a": 1})).expect("writes");
        assert_eq!(
            fs_err::read_to_string(&path).expect("reads"),
            "{\n  \"a\": 1\n}\n"
        );
        let leftovers = fs_err::read_dir(directory.path()).expect("lists").count();
        assert_eq!(leftovers, 1);
    }

    #[test]
    fn replacing_via_a_spare_reuses_two_files() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("checkpoint.json");
        let spare = directory.path().join(".checkpoint.json.spare");
        for round in 0..5 {
            let text = format!("round {round}").repeat(5 - round);
            replace_via_spare(&path, &spare, text.as_bytes()).expect("replaces");
            assert_eq!(fs_err::read_to_string(&path).expect("reads"), text);
        }
        let names: Vec<_> = fs_err::read_dir(directory.path())
            .expect("lists")
            .map(|entry| entry.expect("entry").file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }
}
