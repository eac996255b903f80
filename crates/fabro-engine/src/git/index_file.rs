//! A worktree's index: libgit2's copy in memory, and the file git reads written by fabro in
//! git's split-index format, so a stage's checkpoint writes what it changed rather than the
//! whole index.
//!
//! libgit2 rewrites (and checksums) every entry of the index whenever one changes, and first
//! re-examines every entry against the working tree; in a tree of 100,000 files that is most
//! of a stage's checkpoint. Here libgit2 keeps working on a private copy of the index
//! (`{git_dir}/fabro-index`, loaded once and set as the repository's index, never written by
//! fabro, so libgit2 never reloads it), and [`WorktreeIndex::write`] writes `{git_dir}/index`
//! for the stages' own `git` commands and the user:
//!
//! - while the index has fewer than [`SPLIT_MIN_ENTRIES`] entries, as a plain index;
//! - otherwise as a split index (git's `link` extension, read by git since 2.1): a shared
//!   index `sharedindex.{checksum}` with every entry, written when the split part would grow
//!   past a fifth of it (git's own default), and an `index` holding only the entries changed
//!   since, plus bitmaps of the shared entries they replace or delete.
//!
//! Both are index version 2 (3 when an entry has extended flags) without extensions. Entries
//! whose file changed again within the file-system timestamp granularity of being staged are
//! not smudged as libgit2 would: fabro's next stage finds them through its change feed, and
//! only a `git status` run in between could take them for clean.
//!
//! libgit2 itself does not read split indexes: [`crate::git::inspect`] falls back to the tree
//! of `HEAD` for a worktree whose index it cannot read.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use git2::{Index, IndexEntry, Repository};
use sha1::{Digest, Sha1};

use super::GitError;

/// Below this many entries the index is written whole (a split index would save little).
pub(crate) const SPLIT_MIN_ENTRIES: usize = 4096;

/// The name of libgit2's private copy of the index in the worktree's git directory.
const PRIVATE_INDEX: &str = "fabro-index";

/// One worktree's index; see the module documentation.
pub(crate) struct WorktreeIndex {
    /// The worktree's own git directory (`{common_dir}/worktrees/{name}`).
    git_dir: PathBuf,
    /// The shared index the on-disk `index` links to; `None`: write everything next time.
    shared: Option<SharedIndex>,
    /// Paths whose entries may differ from the shared index (or from the last plain write).
    dirty: BTreeSet<Vec<u8>>,
    /// Their parent directories, where a file entry may have been removed.
    dirty_parents: BTreeSet<Vec<u8>>,
    /// [`SPLIT_MIN_ENTRIES`], lowered by tests.
    split_min_entries: usize,
    /// libgit2 changed the index wholesale: write a new shared index next time.
    rebase_next: bool,
}

impl std::fmt::Debug for WorktreeIndex {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("WorktreeIndex")
            .field("git_dir", &self.git_dir)
            .field("dirty", &self.dirty.len())
            .finish_non_exhaustive()
    }
}

/// A shared index written by fabro.
struct SharedIndex {
    path: PathBuf,
    checksum: [u8; 20],
    /// Its entries' paths and stages, in index order.
    keys: Vec<(Vec<u8>, u16)>,
}

impl WorktreeIndex {
    /// Takes over the index of the worktree `repo` was opened at: copies `{git_dir}/index`
    /// (a plain index, as libgit2 wrote it when adding the worktree) to the private copy and
    /// makes that the repository's index. The next [`write`](WorktreeIndex::write) writes
    /// the whole index.
    pub(crate) fn open(repo: &Repository) -> Result<WorktreeIndex, GitError> {
        let git_dir = repo.path().to_path_buf();
        let private = git_dir.join(PRIVATE_INDEX);
        let source = git_dir.join("index");
        match fs_err::copy(&source, &private) {
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let _ = fs_err::remove_file(&private);
            }
            Err(error) => return Err(GitError::io("copy", source)(error)),
        }
        let mut index = Index::open(&private).map_err(GitError::git("read the worktree index"))?;
        repo.set_index(&mut index)
            .map_err(GitError::git("use the worktree index"))?;
        Ok(WorktreeIndex {
            git_dir,
            shared: None,
            dirty: BTreeSet::new(),
            dirty_parents: BTreeSet::new(),
            split_min_entries: SPLIT_MIN_ENTRIES,
            rebase_next: false,
        })
    }

    /// Writes the shared index now, when the worktree is set up, if the index is large
    /// enough to be split: the first stage then writes only its own changes (at 100,000
    /// entries the shared index is 9 MB, hashed with SHA-1).
    pub(crate) fn split_now(&mut self, repo: &Repository) -> Result<(), GitError> {
        let entries = repo
            .index()
            .map_err(GitError::git("read the worktree index"))?
            .len();
        if entries >= self.split_min_entries {
            self.write(repo)?;
        }
        Ok(())
    }

    /// Test hook: split from `entries` entries on.
    #[cfg(test)]
    pub(crate) fn with_split_min(mut self, entries: usize) -> WorktreeIndex {
        self.split_min_entries = entries;
        self
    }

    /// Replaces `repo` by `fresh`, a new handle on the same worktree, which gets the index of
    /// `repo` (set once `repo` is gone: dropping a repository detaches its index).
    pub(crate) fn reopen(repo: &mut Repository, fresh: Repository) -> Result<(), GitError> {
        let mut index = repo
            .index()
            .map_err(GitError::git("read the worktree index"))?;
        *repo = fresh;
        repo.set_index(&mut index)
            .map_err(GitError::git("use the worktree index"))
    }

    /// Records that the entry of `path` (relative to the worktree root) was added, changed
    /// or removed. Its parent directories are recorded too: libgit2 removes a file entry in
    /// the way of a new entry below it.
    pub(crate) fn touched(&mut self, path: &str) {
        for (position, byte) in path.bytes().enumerate() {
            if byte == b'/' && position > 0 {
                self.dirty_parents
                    .insert(path.as_bytes()[..position].to_vec());
            }
        }
        self.dirty.insert(path.as_bytes().to_vec());
    }

    /// Records that libgit2 changed the index wholesale (a checkout): the next
    /// [`write`](WorktreeIndex::write) writes every entry.
    pub(crate) fn changed_wholesale(&mut self) {
        self.rebase_next = true;
    }

    /// Writes `{git_dir}/index` from libgit2's index of `repo` (the worktree's): the entries
    /// changed since the shared index, or everything (see the module documentation).
    pub(crate) fn write(&mut self, repo: &Repository) -> Result<(), GitError> {
        let index = repo
            .index()
            .map_err(GitError::git("read the worktree index"))?;
        let count = index.len();
        let split_too_big = std::mem::take(&mut self.rebase_next)
            || self.shared.as_ref().is_none_or(|shared| {
                (self.dirty.len() + self.dirty_parents.len()) * 5 > shared.keys.len()
            });
        if count < self.split_min_entries {
            self.remove_shared();
            let entries: Vec<IndexEntry> = index.iter().collect();
            let bytes = encode_index(entries.iter().map(|entry| (entry, false)), None);
            self.replace_file("index", &bytes)?;
        } else if split_too_big {
            let entries: Vec<IndexEntry> = index.iter().collect();
            let bytes = encode_index(entries.iter().map(|entry| (entry, false)), None);
            let mut checksum = [0u8; 20];
            checksum.copy_from_slice(&bytes[bytes.len() - 20..]);
            let name = format!("sharedindex.{}", hex(&checksum));
            self.replace_file(&name, &bytes)?;
            let path = self.git_dir.join(name);
            if self
                .shared
                .as_ref()
                .is_some_and(|shared| shared.path != path)
            {
                self.remove_shared();
            }
            self.shared = Some(SharedIndex {
                path,
                checksum,
                keys: entries
                    .into_iter()
                    .map(|entry| (entry.path, stage(entry.flags)))
                    .collect(),
            });
            self.dirty.clear();
            self.dirty_parents.clear();
            self.write_split(&index)?;
        } else {
            self.write_split(&index)?;
        }
        if self.shared.is_none() {
            self.dirty.clear();
            self.dirty_parents.clear();
        }
        Ok(())
    }

    /// Writes `index` as the dirty entries over the shared index.
    fn write_split(&self, index: &Index) -> Result<(), GitError> {
        let Some(shared) = &self.shared else {
            return Ok(());
        };
        let positions = |path: &[u8]| {
            shared
                .keys
                .binary_search_by(|(key, stage)| key.as_slice().cmp(path).then(stage.cmp(&0)))
                .ok()
        };
        // Shared entries below a dirty path: a file that replaced a directory removed them.
        let mut paths: BTreeSet<&[u8]> = self
            .dirty
            .iter()
            .chain(&self.dirty_parents)
            .map(Vec::as_slice)
            .collect();
        for path in &self.dirty {
            let mut prefix = path.clone();
            prefix.push(b'/');
            let start = shared
                .keys
                .partition_point(|(key, _)| key.as_slice() < prefix.as_slice());
            for (key, _) in shared.keys[start..]
                .iter()
                .take_while(|(key, _)| key.starts_with(&prefix))
            {
                paths.insert(key.as_slice());
            }
        }
        let words = shared.keys.len().div_ceil(64);
        let mut deleted = vec![0u64; words];
        let mut replaced_bits = vec![0u64; words];
        let mut replaced: Vec<(usize, IndexEntry)> = Vec::new();
        let mut added: Vec<IndexEntry> = Vec::new();
        for path in paths {
            let current = index.get_path(Path::new(std::ffi::OsStr::from_bytes(path)), 0);
            match (positions(path), current) {
                (Some(position), Some(entry)) => {
                    replaced_bits[position / 64] |= 1 << (position % 64);
                    replaced.push((position, entry));
                }
                (Some(position), None) => deleted[position / 64] |= 1 << (position % 64),
                (None, Some(entry)) => added.push(entry),
                (None, None) => {}
            }
        }
        replaced.sort_by_key(|(position, _)| *position);
        let mut link = Vec::with_capacity(64);
        link.extend_from_slice(&shared.checksum);
        encode_ewah(&mut link, shared.keys.len(), &deleted);
        encode_ewah(&mut link, shared.keys.len(), &replaced_bits);
        let entries = replaced
            .iter()
            .map(|(_, entry)| (entry, true))
            .chain(added.iter().map(|entry| (entry, false)));
        let bytes = encode_index(entries, Some(&link));
        self.replace_file("index", &bytes)
    }

    /// Deletes the shared index fabro wrote last, if any.
    fn remove_shared(&mut self) {
        if let Some(shared) = self.shared.take() {
            let _ = fs_err::remove_file(shared.path);
        }
    }

    /// Writes `{git_dir}/{name}` through `{name}.lock` (git's lock protocol: the write
    /// fails while another process holds the lock).
    fn replace_file(&self, name: &str, bytes: &[u8]) -> Result<(), GitError> {
        let path = self.git_dir.join(name);
        let lock = self.git_dir.join(format!("{name}.lock"));
        let mut file = fs_err::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&lock)
            .map_err(GitError::io("create", lock.clone()))?;
        if let Err(error) = file.write_all(bytes) {
            let _ = fs_err::remove_file(&lock);
            return Err(GitError::io("write", lock)(error));
        }
        drop(file);
        fs_err::rename(&lock, &path).map_err(GitError::io("replace", path))
    }
}

fn stage(flags: u16) -> u16 {
    (flags >> 12) & 3
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The extended flags git stores on disk (intent-to-add, skip-worktree).
const EXTENDED_ON_DISK: u16 = 0x2000 | 0x4000;

/// An index file: the header, `entries` (each with whether its name is left out, for a
/// split index's replacements), the `link` extension when given, and the SHA-1 trailer.
fn encode_index<'a>(
    entries: impl Iterator<Item = (&'a IndexEntry, bool)> + Clone,
    link: Option<&[u8]>,
) -> Vec<u8> {
    let extended = entries
        .clone()
        .any(|(entry, _)| entry.flags_extended & EXTENDED_ON_DISK != 0);
    let count = entries.clone().count();
    let mut out = Vec::with_capacity(12 + count * 96 + link.map_or(0, <[u8]>::len) + 28);
    out.extend_from_slice(b"DIRC");
    out.extend_from_slice(&(if extended { 3u32 } else { 2u32 }).to_be_bytes());
    out.extend_from_slice(&(count as u32).to_be_bytes());
    for (entry, strip_name) in entries {
        encode_entry(&mut out, entry, strip_name);
    }
    if let Some(link) = link {
        out.extend_from_slice(b"link");
        out.extend_from_slice(&(link.len() as u32).to_be_bytes());
        out.extend_from_slice(link);
    }
    let checksum = Sha1::digest(&out);
    out.extend_from_slice(&checksum);
    out
}

fn encode_entry(out: &mut Vec<u8>, entry: &IndexEntry, strip_name: bool) {
    let start = out.len();
    for value in [
        entry.ctime.seconds() as u32,
        entry.ctime.nanoseconds(),
        entry.mtime.seconds() as u32,
        entry.mtime.nanoseconds(),
        entry.dev,
        entry.ino,
        entry.mode,
        entry.uid,
        entry.gid,
        entry.file_size,
    ] {
        out.extend_from_slice(&value.to_be_bytes());
    }
    out.extend_from_slice(entry.id.as_bytes());
    let name: &[u8] = if strip_name { &[] } else { &entry.path };
    let extended = entry.flags_extended & EXTENDED_ON_DISK;
    let mut flags = (name.len().min(0xfff) as u16) | (entry.flags & 0x3000);
    if entry.flags & 0x8000 != 0 {
        flags |= 0x8000;
    }
    if extended != 0 {
        flags |= 0x4000;
    }
    out.extend_from_slice(&flags.to_be_bytes());
    if extended != 0 {
        out.extend_from_slice(&extended.to_be_bytes());
    }
    out.extend_from_slice(name);
    // NUL-padded to a multiple of 8 bytes, at least one NUL.
    let length = out.len() - start;
    let padded = (length + 8) & !7;
    out.resize(start + padded, 0);
}

/// A bitmap of `bit_size` bits in git's EWAH serialisation (bit `i` is bit `i % 64` of
/// word `i / 64`): marker words, each counting a run of zero words and then the literal
/// (non-zero) words that follow it, so the few bits of a split index take a few words
/// whatever the number of entries.
fn encode_ewah(out: &mut Vec<u8>, bit_size: usize, words: &[u64]) {
    let mut encoded: Vec<u64> = Vec::new();
    let mut rest = words;
    let last_marker = loop {
        let zeros = rest
            .iter()
            .take_while(|word| **word == 0)
            .count()
            .min(u32::MAX as usize);
        let literals = rest[zeros..]
            .iter()
            .take_while(|word| **word != 0)
            .count()
            .min((1 << 31) - 1);
        let marker = encoded.len();
        encoded.push(((literals as u64) << 33) | ((zeros as u64) << 1));
        encoded.extend_from_slice(&rest[zeros..zeros + literals]);
        rest = &rest[zeros + literals..];
        if rest.is_empty() {
            break marker;
        }
    };
    out.extend_from_slice(&(bit_size as u32).to_be_bytes());
    out.extend_from_slice(&(encoded.len() as u32).to_be_bytes());
    for word in &encoded {
        out.extend_from_slice(&word.to_be_bytes());
    }
    out.extend_from_slice(&(last_marker as u32).to_be_bytes());
}

#[cfg(test)]
mod tests;
