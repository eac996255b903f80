//! [`PackStore`]: writes each checkpoint cycle's objects as one pack (`.pack` and `.idx`,
//! version 2) in `objects/pack`, instead of one loose file per object.
//!
//! File creation is the dominant cost of a checkpoint on slow file systems, and a cycle makes
//! about eight objects (blobs, the metadata trees, two commits), so one pack per cycle saves
//! most of them. To keep the number of packs (which every object lookup walks) small, the store
//! merges them like a log-structured tree: whenever the newest [`MERGE_WIDTH`] packs have the
//! same tier they become one pack of the next tier. Merging copies the packs' entries byte for
//! byte (no decompression), so a run of `n` cycles keeps `O(log n)` packs and copies each
//! object `O(log n)` times. A merge that would exceed [`SEAL_BYTES`] is not made: its packs are
//! sealed and never rewritten, so long runs with large checkpoints do not copy megabytes per
//! cycle (they end with one sealed pack per few megabytes).
//!
//! Crash safety follows git's own rule: the `.pack` is complete and renamed into place before
//! its `.idx`, and readers only use packs that have an index. With `durable`, both files and
//! the directory are synced before the caller moves a ref to the new objects.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use flate2::write::ZlibEncoder;
use flate2::Compression;
use git2::Oid;
use sha1::{Digest, Sha1};

use super::object::{oid_from_digest, RawObject};

/// How many packs of one tier are merged into one of the next.
const MERGE_WIDTH: usize = 4;
/// Packs are not merged into one larger than this.
const SEAL_BYTES: u64 = 4 * 1024 * 1024;
/// The tier of sealed packs, which never merge again.
const SEALED: u32 = u32::MAX;
/// Size of the pack header: `PACK`, version, object count.
const HEADER_BYTES: u64 = 12;

/// Packs written by one process into one repository's `objects/pack`.
#[derive(Debug)]
pub(crate) struct PackStore {
    directory: PathBuf,
    durable: bool,
    packs: Vec<WrittenPack>,
    written: HashSet<Oid>,
    counter: u64,
    removed: usize,
}

/// A pack this store wrote and has not merged away yet.
#[derive(Debug)]
struct WrittenPack {
    /// `objects/pack/pack-{checksum}`, without extension.
    stem: PathBuf,
    tier: u32,
    /// Bytes of the entries (the pack without header and trailer).
    region: u64,
    entries: Vec<IndexEntry>,
}

#[derive(Debug, Clone, Copy)]
struct IndexEntry {
    oid: Oid,
    crc: u32,
    offset: u64,
}

impl PackStore {
    /// A store writing into `{objects_dir}/pack`; `durable` syncs every pack to disk.
    pub(crate) fn new(objects_dir: &Path, durable: bool) -> PackStore {
        PackStore {
            directory: objects_dir.join("pack"),
            durable,
            packs: Vec::new(),
            written: HashSet::new(),
            counter: 0,
            removed: 0,
        }
    }

    /// How many packs merging has removed since the last call. Readers that opened them
    /// (libgit2 keeps every pack it has seen mapped and open) should be reopened now and then.
    pub(crate) fn take_removed(&mut self) -> usize {
        std::mem::take(&mut self.removed)
    }

    /// How many packs this store currently keeps.
    #[cfg(test)]
    pub(crate) fn pack_count(&self) -> usize {
        self.packs.len()
    }

    /// Writes `objects` (those this store has not written before) as one pack, then merges
    /// packs as the tiers fill up.
    pub(crate) fn write(&mut self, objects: &[RawObject]) -> io::Result<()> {
        let mut body = Vec::new();
        let mut entries = Vec::with_capacity(objects.len());
        let mut batch = HashSet::new();
        for object in objects {
            if self.written.contains(&object.oid) || !batch.insert(object.oid) {
                continue;
            }
            let start = body.len();
            push_entry_header(&mut body, object.kind.pack_type(), object.data.len() as u64);
            let mut encoder = ZlibEncoder::new(&mut body, Compression::fast());
            encoder.write_all(&object.data)?;
            encoder.finish()?;
            entries.push(IndexEntry {
                oid: object.oid,
                crc: crc32fast::hash(&body[start..]),
                offset: HEADER_BYTES + start as u64,
            });
        }
        if entries.is_empty() {
            return Ok(());
        }
        let stem = self.write_pack(&entries, |out| out.write_all(&body))?;
        self.written.extend(entries.iter().map(|entry| entry.oid));
        self.packs.push(WrittenPack {
            stem,
            tier: 0,
            region: body.len() as u64,
            entries,
        });
        self.merge_full_tiers()
    }

    fn merge_full_tiers(&mut self) -> io::Result<()> {
        while self.packs.len() >= MERGE_WIDTH {
            let start = self.packs.len() - MERGE_WIDTH;
            let tier = self.packs[start].tier;
            if tier == SEALED || self.packs[start..].iter().any(|pack| pack.tier != tier) {
                break;
            }
            let total: u64 = self.packs[start..].iter().map(|pack| pack.region).sum();
            if total > SEAL_BYTES {
                for pack in &mut self.packs[start..] {
                    pack.tier = SEALED;
                }
                break;
            }
            let group = self.packs.split_off(start);
            let mut entries = Vec::new();
            let mut regions = Vec::with_capacity(group.len());
            let mut base = HEADER_BYTES;
            for pack in &group {
                entries.extend(pack.entries.iter().map(|entry| IndexEntry {
                    offset: entry.offset - HEADER_BYTES + base,
                    ..*entry
                }));
                regions.push((pack.stem.with_extension("pack"), pack.region));
                base += pack.region;
            }
            let stem = self.write_pack(&entries, |out| {
                for (path, region) in &regions {
                    let mut file = fs_err::File::open(path)?;
                    file.seek(SeekFrom::Start(HEADER_BYTES))?;
                    let copied = io::copy(&mut BufReader::new(file).take(*region), out)?;
                    if copied != *region {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            format!("{} is shorter than it was written", path.display()),
                        ));
                    }
                }
                Ok(())
            })?;
            self.removed += group.len();
            for pack in &group {
                // The index goes first, so no reader ever sees an index without its pack.
                for extension in ["idx", "pack"] {
                    if let Err(error) = fs_err::remove_file(pack.stem.with_extension(extension)) {
                        tracing::warn!(%error, "cannot remove a merged pack");
                    }
                }
            }
            self.packs.push(WrittenPack {
                stem,
                tier: tier + 1,
                region: total,
                entries,
            });
        }
        Ok(())
    }

    /// Writes a pack of `entries` whose entry bytes `body` produces, then its index; returns
    /// the stem of both files.
    fn write_pack(
        &mut self,
        entries: &[IndexEntry],
        body: impl FnOnce(&mut HashingWriter<File>) -> io::Result<()>,
    ) -> io::Result<PathBuf> {
        if self.counter == 0 {
            // `git init` makes it, but a repository need not have one yet.
            fs_err::create_dir_all(&self.directory)?;
        }
        self.counter += 1;
        // Unique in the process: the runs of a server or worker on one repository share
        // its objects directory.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let number = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let temporary = |kind: &str| {
            self.directory
                .join(format!("tmp_fabro_{kind}_{}_{number}", std::process::id()))
        };
        let pack_temporary = temporary("pack");
        let index_temporary = temporary("idx");
        let count = u32::try_from(entries.len())
            .map_err(|_| io::Error::other("too many objects for one pack"))?;
        let mut out = HashingWriter::new(create_new(&pack_temporary)?);
        out.write_all(b"PACK")?;
        out.write_all(&2u32.to_be_bytes())?;
        out.write_all(&count.to_be_bytes())?;
        body(&mut out)?;
        let (mut file, checksum) = out.finish();
        file.write_all(&checksum)?;
        if self.durable {
            file.sync_data()?;
        }
        drop(file);
        let index = index_data(entries, &checksum);
        let mut file = create_new(&index_temporary)?;
        file.write_all(&index)?;
        if self.durable {
            file.sync_data()?;
        }
        drop(file);
        let stem = self
            .directory
            .join(format!("pack-{}", oid_from_digest(&checksum)));
        fs_err::rename(&pack_temporary, stem.with_extension("pack"))?;
        fs_err::rename(&index_temporary, stem.with_extension("idx"))?;
        if self.durable {
            fs_err::File::open(&self.directory)?.sync_all()?;
        }
        Ok(stem)
    }
}

fn create_new(path: &Path) -> io::Result<File> {
    File::options()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|error| io::Error::new(error.kind(), format!("{}: {error}", path.display())))
}

/// The type-and-size header of a pack entry.
fn push_entry_header(out: &mut Vec<u8>, kind: u8, mut size: u64) {
    let mut byte = (kind << 4) | (size & 0x0f) as u8;
    size >>= 4;
    while size != 0 {
        out.push(byte | 0x80);
        byte = (size & 0x7f) as u8;
        size >>= 7;
    }
    out.push(byte);
}

/// A version 2 pack index of `entries` for the pack with trailer `checksum`.
fn index_data(entries: &[IndexEntry], checksum: &[u8]) -> Vec<u8> {
    let mut sorted = entries.to_vec();
    sorted.sort_by(|a, b| a.oid.as_bytes().cmp(b.oid.as_bytes()));
    let mut data = Vec::with_capacity(1072 + sorted.len() * 28);
    data.extend_from_slice(&[0xff, b't', b'O', b'c']);
    data.extend_from_slice(&2u32.to_be_bytes());
    let mut fanout = [0u32; 256];
    for entry in &sorted {
        fanout[usize::from(entry.oid.as_bytes()[0])] += 1;
    }
    let mut total = 0u32;
    for count in fanout {
        total += count;
        data.extend_from_slice(&total.to_be_bytes());
    }
    for entry in &sorted {
        data.extend_from_slice(entry.oid.as_bytes());
    }
    for entry in &sorted {
        data.extend_from_slice(&entry.crc.to_be_bytes());
    }
    let mut large = Vec::new();
    for entry in &sorted {
        let small = match u32::try_from(entry.offset) {
            Ok(offset) if offset < 0x8000_0000 => offset,
            _ => {
                let position = u32::try_from(large.len()).unwrap_or(u32::MAX) & 0x7fff_ffff;
                large.push(entry.offset);
                0x8000_0000 | position
            }
        };
        data.extend_from_slice(&small.to_be_bytes());
    }
    for offset in large {
        data.extend_from_slice(&offset.to_be_bytes());
    }
    data.extend_from_slice(checksum);
    let digest = Sha1::digest(&data);
    data.extend_from_slice(&digest);
    data
}

/// A writer that hashes everything written through it (the pack trailer).
struct HashingWriter<W> {
    inner: W,
    hasher: Sha1,
}

impl<W: Write> HashingWriter<W> {
    fn new(inner: W) -> HashingWriter<W> {
        HashingWriter {
            inner,
            hasher: Sha1::new(),
        }
    }

    fn finish(self) -> (W, [u8; 20]) {
        (self.inner, self.hasher.finalize().into())
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buffer: &[u8]) -> io::Result<usize> {
        let written = self.inner.write(buffer)?;
        self.hasher.update(&buffer[..written]);
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::super::object::ObjectKind;
    use super::*;

    fn blob(text: String) -> RawObject {
        RawObject::new(ObjectKind::Blob, text.into_bytes())
    }

    #[test]
    fn written_objects_are_readable_by_libgit2_and_git_fsck_is_clean() {
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init_bare(dir.path()).unwrap();
        let mut store = PackStore::new(&dir.path().join("objects"), true);
        let mut all = Vec::new();
        for cycle in 0..23 {
            // One large object too, whose size header needs several bytes.
            let mut objects = vec![
                blob(format!("cycle {cycle}\n")),
                blob("shared\n".to_owned()),
                blob("x".repeat(70_000 + cycle)),
            ];
            objects.push(objects[0].clone());
            store.write(&objects).unwrap();
            all.extend(objects);
        }
        // 23 packs merge 4 → 1 by tiers: 23 = 16 + 4 + 3 → one tier-2, one tier-1, three tier-0.
        assert_eq!(store.pack_count(), 5);
        let packs = fs_err::read_dir(dir.path().join("objects/pack"))
            .unwrap()
            .count();
        assert_eq!(packs, 10, "a .pack and an .idx per remaining pack");
        let odb = repo.odb().unwrap();
        for object in &all {
            let read = odb.read(object.oid).unwrap();
            assert_eq!(read.data(), object.data.as_slice());
            assert_eq!(read.kind(), git2::ObjectType::Blob);
        }
        let fsck = std::process::Command::new("git")
            .args(["fsck", "--strict", "--unreachable"])
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(fsck.status.success(), "{fsck:?}");
        let verify = std::process::Command::new("sh")
            .arg("-c")
            .arg("for f in objects/pack/*.idx; do git verify-pack $f || exit 1; done")
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(verify.status.success(), "{verify:?}");
    }

    #[test]
    fn stores_of_two_runs_write_into_one_objects_directory_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init_bare(dir.path()).unwrap();
        let writers: Vec<_> = (0..2)
            .map(|run| {
                let objects = dir.path().join("objects");
                std::thread::spawn(move || {
                    let mut store = PackStore::new(&objects, false);
                    let mut written = Vec::new();
                    for cycle in 0..40 {
                        let object = blob(format!("run {run} cycle {cycle}\n"));
                        store.write(std::slice::from_ref(&object)).unwrap();
                        written.push(object);
                    }
                    written
                })
            })
            .collect();
        let odb = repo.odb().unwrap();
        for writer in writers {
            for object in writer.join().unwrap() {
                assert_eq!(odb.read(object.oid).unwrap().data(), object.data.as_slice());
            }
        }
    }

    #[test]
    fn packs_beyond_the_seal_size_are_never_merged() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = PackStore::new(&dir.path().join("objects"), false);
        // Incompressible 1.5 MB blobs: four of them exceed the seal size together.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut noise = |len: usize| -> Vec<u8> {
            (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect()
        };
        for _ in 0..4 {
            let object = RawObject::new(ObjectKind::Blob, noise(1_500_000));
            store.write(&[object]).unwrap();
        }
        assert_eq!(store.pack_count(), 4, "sealed instead of merged");
        for _ in 0..4 {
            store
                .write(&[RawObject::new(ObjectKind::Blob, noise(10))])
                .unwrap();
        }
        assert_eq!(
            store.pack_count(),
            5,
            "small packs still merge after sealed ones"
        );
    }

    #[test]
    fn entry_headers_encode_type_and_size() {
        let mut out = Vec::new();
        push_entry_header(&mut out, 3, 15);
        assert_eq!(out, [0x3f]);
        out.clear();
        push_entry_header(&mut out, 1, 16);
        assert_eq!(out, [0x90, 0x01]);
        out.clear();
        push_entry_header(&mut out, 2, 70_000);
        assert_eq!(out, [0xa0, 0x97, 0x22]);
    }

    #[test]
    fn large_offsets_use_the_wide_table() {
        let oid = |byte: u8| Oid::from_bytes(&[byte; 20]).unwrap();
        let entries = [
            IndexEntry {
                oid: oid(2),
                crc: 7,
                offset: 12,
            },
            IndexEntry {
                oid: oid(1),
                crc: 9,
                offset: 0x1_0000_0000,
            },
        ];
        let data = index_data(&entries, &[0; 20]);
        let offsets = 8 + 1024 + 2 * 20 + 2 * 4;
        assert_eq!(&data[offsets..offsets + 4], &0x8000_0000u32.to_be_bytes());
        assert_eq!(&data[offsets + 4..offsets + 8], &12u32.to_be_bytes());
        assert_eq!(
            &data[offsets + 8..offsets + 16],
            &0x1_0000_0000u64.to_be_bytes()
        );
        assert_eq!(data.len(), offsets + 16 + 40);
    }
}
