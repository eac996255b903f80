//! The content-addressed blob store shared by all runs under `{root}` (SPEC 11.2).
//!
//! Blobs are stored once under `blobs/sha256/{hex[0..2]}/{hex}`: written to a temporary
//! file in the same directory, synced and renamed, never rewritten. A ref is
//! `blob://sha256/{hex}`, where hex is the SHA-256 of exactly the stored bytes.
//!
//! [`BlobStore`] is the seam, passed as `Arc<dyn BlobStore>`: [`FsBlobStore`] is the
//! store under `$FABRO_HOME`, [`MemoryBlobStore`] its in-memory double for tests and
//! embedders that keep nothing on disk.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::id::BlobRef;

pub(crate) use crate::id::BLOB_PREFIX;

/// Errors of the blob store.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// Reading or writing failed.
    #[error("blob store I/O error at {path}")]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The store lacks the blob.
    #[error("missing blob {0}")]
    Missing(String),
    /// A remote blob store (an object store, SPEC 18.1) failed.
    #[error("blob store error at {location}")]
    Remote {
        /// The store and key, credentials redacted.
        location: Box<str>,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The blob is not the JSON value it should be.
    #[error("blob {reference} is not valid JSON")]
    NotJson {
        /// The ref.
        reference: String,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
}

/// Content-addressed storage of stage outputs and large values (SPEC 11.2), shared by
/// the runs of one storage root. Secret values are redacted before anything is stored
/// (SPEC 13.1), so a ref names the redacted content.
pub trait BlobStore: Send + Sync + std::fmt::Debug {
    /// Stores `bytes` (once) and returns the ref and whether it was new.
    fn put(&self, bytes: &[u8]) -> Result<(BlobRef, bool), BlobError>;

    /// Reads the bytes of `reference`.
    fn read(&self, reference: &BlobRef) -> Result<Vec<u8>, BlobError>;

    /// How many distinct refs this store (and its clones) produced, whether or not the
    /// blob was already stored (`artifact_count`, SPEC 7.8).
    fn produced_count(&self) -> usize;

    /// Stores the contents of `source` as a compact JSON string blob, exactly the bytes
    /// `put_value(&Value::String(String::from_utf8_lossy(all bytes)))` would store.
    /// Stores that can should stream, keeping memory bounded whatever the size (SPEC
    /// 7.7, issue 4); this default reads everything first.
    fn put_text_stream(
        &self,
        source: &mut dyn std::io::Read,
    ) -> Result<(BlobRef, bool), BlobError> {
        let mut bytes = Vec::new();
        source
            .read_to_end(&mut bytes)
            .map_err(|source| BlobError::Io {
                path: PathBuf::from("<stream>"),
                source,
            })?;
        self.put_text_bytes(&bytes)
    }

    /// Writes the bytes of `reference` to the file `target`.
    fn copy_to(&self, reference: &BlobRef, target: &Path) -> Result<(), BlobError> {
        let bytes = self.read(reference)?;
        fs_err::write(target, bytes).map_err(|source| BlobError::Io {
            path: target.to_path_buf(),
            source,
        })
    }

    /// Stores a JSON value as its compact serialisation.
    fn put_value(&self, value: &serde_json::Value) -> Result<(BlobRef, bool), BlobError> {
        let bytes = serde_json::to_vec(value).map_err(|source| BlobError::NotJson {
            reference: String::new(),
            source,
        })?;
        self.put(&bytes)
    }

    /// Reads `reference` as the JSON value it stores.
    fn read_value(&self, reference: &BlobRef) -> Result<serde_json::Value, BlobError> {
        let bytes = self.read(reference)?;
        serde_json::from_slice(&bytes).map_err(|source| BlobError::NotJson {
            reference: reference.to_string(),
            source,
        })
    }

    /// [`BlobStore::put_text_stream`] for text already in memory: nothing is written
    /// (or synced) when the blob exists.
    fn put_text_bytes(&self, bytes: &[u8]) -> Result<(BlobRef, bool), BlobError> {
        let mut encoded = Vec::with_capacity(bytes.len() + 2);
        encoded.push(b'"');
        let mut encoder = JsonStringEncoder::default();
        // Writing into a Vec cannot fail.
        let _ = encoder.push(bytes, &mut encoded);
        let _ = encoder.finish(&mut encoded);
        encoded.push(b'"');
        self.put(&encoded)
    }
}

/// A shared store is a store: `&Arc<dyn BlobStore>` goes where `&dyn BlobStore` does.
impl<B: BlobStore + ?Sized> BlobStore for std::sync::Arc<B> {
    fn put(&self, bytes: &[u8]) -> Result<(BlobRef, bool), BlobError> {
        (**self).put(bytes)
    }

    fn read(&self, reference: &BlobRef) -> Result<Vec<u8>, BlobError> {
        (**self).read(reference)
    }

    fn produced_count(&self) -> usize {
        (**self).produced_count()
    }

    fn put_text_stream(
        &self,
        source: &mut dyn std::io::Read,
    ) -> Result<(BlobRef, bool), BlobError> {
        (**self).put_text_stream(source)
    }

    fn copy_to(&self, reference: &BlobRef, target: &Path) -> Result<(), BlobError> {
        (**self).copy_to(reference, target)
    }

    fn put_value(&self, value: &serde_json::Value) -> Result<(BlobRef, bool), BlobError> {
        (**self).put_value(value)
    }

    fn read_value(&self, reference: &BlobRef) -> Result<serde_json::Value, BlobError> {
        (**self).read_value(reference)
    }

    fn put_text_bytes(&self, bytes: &[u8]) -> Result<(BlobRef, bool), BlobError> {
        (**self).put_text_bytes(bytes)
    }
}

/// Whether `text` looks like a blob ref.
pub(crate) fn is_ref(text: &str) -> bool {
    text.strip_prefix(BLOB_PREFIX)
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The distinct refs a store and its clones produced.
#[derive(Debug, Clone, Default)]
struct Produced(std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>);

impl Produced {
    fn count(&self) -> usize {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    fn note(&self, reference: &str) {
        let mut produced = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !produced.contains(reference) {
            produced.insert(reference.to_owned());
        }
    }
}

/// The blob store rooted at `{root}/blobs`. Clones share the record of the refs they
/// produced, so a run counts its distinct blobs (`artifact_count`, SPEC 7.8).
#[derive(Debug, Clone)]
pub struct FsBlobStore {
    root: PathBuf,
    produced: Produced,
}

impl FsBlobStore {
    /// The store under `fabro_root` (`$FABRO_HOME`).
    pub fn new(fabro_root: &Path) -> FsBlobStore {
        FsBlobStore {
            root: fabro_root.join("blobs").join("sha256"),
            produced: Produced::default(),
        }
    }

    /// The file holding `reference`.
    pub fn path_of_ref(&self, reference: &BlobRef) -> PathBuf {
        self.path_of(&reference.hex())
    }

    fn path_of(&self, hex: &str) -> PathBuf {
        self.root.join(&hex[..2]).join(hex)
    }

    fn note_produced(&self, reference: &str) {
        self.produced.note(reference);
    }
}

impl BlobStore for FsBlobStore {
    fn produced_count(&self) -> usize {
        self.produced.count()
    }

    fn put(&self, bytes: &[u8]) -> Result<(BlobRef, bool), BlobError> {
        let bytes = &*fabro_llm::redact::redactor().redact_bytes(bytes);
        let hex = hex_digest(bytes);
        let path = self.path_of(&hex);
        let reference = BlobRef::of_hex(&hex);
        self.note_produced(reference.as_str());
        if path.exists() {
            return Ok((reference, false));
        }
        let directory = path.parent().unwrap_or(&self.root).to_path_buf();
        let io = |source| BlobError::Io {
            path: path.clone(),
            source,
        };
        fs_err::create_dir_all(&directory).map_err(io)?;
        // Unique per write: parallel branches may store the same content at once.
        let temporary = directory.join(format!(
            ".{hex}.{}.{}.tmp",
            std::process::id(),
            next_temporary_id()
        ));
        let mut file = fs_err::File::create(&temporary).map_err(io)?;
        file.write_all(bytes).map_err(io)?;
        file.sync_data().map_err(io)?;
        drop(file);
        match fs_err::rename(&temporary, &path) {
            Ok(()) => Ok((reference, true)),
            // Another writer stored the same content first; blobs are immutable.
            Err(_) if path.exists() => {
                let _ = fs_err::remove_file(&temporary);
                Ok((reference, false))
            }
            Err(error) => Err(io(error)),
        }
    }

    fn read(&self, reference: &BlobRef) -> Result<Vec<u8>, BlobError> {
        let path = self.path_of_ref(reference);
        match fs_err::read(&path) {
            Ok(bytes) => Ok(bytes),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                Err(BlobError::Missing(reference.to_string()))
            }
            Err(source) => Err(BlobError::Io { path, source }),
        }
    }

    /// Streamed: memory stays bounded whatever the size.
    fn put_text_stream(
        &self,
        source: &mut dyn std::io::Read,
    ) -> Result<(BlobRef, bool), BlobError> {
        fs_err::create_dir_all(&self.root).map_err(|error| BlobError::Io {
            path: self.root.clone(),
            source: error,
        })?;
        let temporary = self.root.join(format!(
            ".stream.{}.{}.tmp",
            std::process::id(),
            next_temporary_id()
        ));
        let result = self.write_text_stream(source, &temporary);
        match &result {
            Ok((reference, _)) => self.note_produced(reference.as_str()),
            Err(_) => {
                let _ = fs_err::remove_file(&temporary);
            }
        }
        result
    }

    /// A file copy.
    fn copy_to(&self, reference: &BlobRef, target: &Path) -> Result<(), BlobError> {
        let source = self.path_of_ref(reference);
        match fs_err::copy(&source, target) {
            Ok(_) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound && !source.exists() => {
                Err(BlobError::Missing(reference.to_string()))
            }
            Err(error) => Err(BlobError::Io {
                path: target.to_path_buf(),
                source: error,
            }),
        }
    }
}

/// An in-memory [`BlobStore`]: the test double, and the store of embedders that keep
/// nothing on disk. Clones share the blobs.
#[derive(Debug, Clone, Default)]
pub struct MemoryBlobStore {
    blobs: std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, Vec<u8>>>>,
    produced: Produced,
}

impl MemoryBlobStore {
    /// An empty store.
    pub fn new() -> MemoryBlobStore {
        MemoryBlobStore::default()
    }

    /// How many blobs are stored.
    pub fn len(&self) -> usize {
        self.blobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl BlobStore for MemoryBlobStore {
    fn put(&self, bytes: &[u8]) -> Result<(BlobRef, bool), BlobError> {
        let bytes = fabro_llm::redact::redactor().redact_bytes(bytes);
        let reference = BlobRef::of_hex(&hex_digest(&bytes));
        self.produced.note(reference.as_str());
        let mut blobs = self
            .blobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if blobs.contains_key(reference.as_str()) {
            return Ok((reference, false));
        }
        blobs.insert(reference.as_str().to_owned(), bytes.into_owned());
        Ok((reference, true))
    }

    fn read(&self, reference: &BlobRef) -> Result<Vec<u8>, BlobError> {
        self.blobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(reference.as_str())
            .cloned()
            .ok_or_else(|| BlobError::Missing(reference.to_string()))
    }

    fn produced_count(&self) -> usize {
        self.produced.count()
    }
}

impl FsBlobStore {
    fn write_text_stream(
        &self,
        source: &mut dyn std::io::Read,
        temporary: &Path,
    ) -> Result<(BlobRef, bool), BlobError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| BlobError::Io { path, source }
        };
        let file = fs_err::File::create(temporary).map_err(io(temporary))?;
        let mut sink = HashingWriter {
            inner: std::io::BufWriter::with_capacity(STREAM_CHUNK, file),
            hasher: Sha256::new(),
        };
        let mut encoder = JsonStringEncoder::default();
        // SPEC 13.1: secrets are redacted before the text is encoded and hashed.
        let mut redactor = fabro_llm::redact::redactor().stream();
        let mut redacted = Vec::with_capacity(STREAM_CHUNK);
        let mut buffer = vec![0; STREAM_CHUNK];
        sink.write_all(b"\"").map_err(io(temporary))?;
        loop {
            let read = match source.read(&mut buffer) {
                Ok(0) => break,
                Ok(read) => read,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(io(temporary)(error)),
            };
            redacted.clear();
            redactor.push(&buffer[..read], &mut redacted);
            encoder.push(&redacted, &mut sink).map_err(io(temporary))?;
        }
        redacted.clear();
        redactor.finish(&mut redacted);
        encoder.push(&redacted, &mut sink).map_err(io(temporary))?;
        encoder.finish(&mut sink).map_err(io(temporary))?;
        sink.write_all(b"\"").map_err(io(temporary))?;
        let hex: String = sink
            .hasher
            .finalize()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        let file = sink
            .inner
            .into_inner()
            .map_err(|error| io(temporary)(error.into_error()))?;
        file.sync_data().map_err(io(temporary))?;
        drop(file);
        let path = self.path_of(&hex);
        let reference = BlobRef::of_hex(&hex);
        if path.exists() {
            let _ = fs_err::remove_file(temporary);
            return Ok((reference, false));
        }
        let directory = path.parent().unwrap_or(&self.root).to_path_buf();
        fs_err::create_dir_all(&directory).map_err(io(&directory))?;
        match fs_err::rename(temporary, &path) {
            Ok(()) => Ok((reference, true)),
            Err(_) if path.exists() => {
                let _ = fs_err::remove_file(temporary);
                Ok((reference, false))
            }
            Err(error) => Err(io(&path)(error)),
        }
    }
}

/// Read and write granularity of streamed blobs.
const STREAM_CHUNK: usize = 64 * 1024;

/// A writer that hashes what passes through.
struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let written = self.inner.write(bytes)?;
        self.hasher.update(&bytes[..written]);
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Turns a byte stream into the inside of a JSON string: UTF-8 decoded lossily like
/// `String::from_utf8_lossy` (a sequence split between chunks is decoded whole) and
/// escaped like `serde_json`'s compact serialiser.
#[derive(Debug, Default)]
pub(crate) struct JsonStringEncoder {
    /// Bytes of a sequence cut at the end of the previous chunk (at most 3).
    pending: Vec<u8>,
}

impl JsonStringEncoder {
    /// Encodes `chunk` into `out`.
    pub(crate) fn push(&mut self, chunk: &[u8], out: &mut impl Write) -> std::io::Result<()> {
        if self.pending.is_empty() {
            return self.encode(chunk, out);
        }
        // Rare: a sequence was cut at the end of the previous chunk.
        let mut joined = std::mem::take(&mut self.pending);
        joined.extend_from_slice(chunk);
        self.encode(&joined, out)
    }

    fn encode(&mut self, mut input: &[u8], out: &mut impl Write) -> std::io::Result<()> {
        loop {
            match std::str::from_utf8(input) {
                Ok(text) => return escape_into(text, out),
                Err(error) => {
                    let (valid, rest) = input.split_at(error.valid_up_to());
                    escape_into(std::str::from_utf8(valid).unwrap_or_default(), out)?;
                    match error.error_len() {
                        Some(length) => {
                            out.write_all("\u{fffd}".as_bytes())?;
                            input = &rest[length..];
                        }
                        None => {
                            self.pending = rest.to_vec();
                            return Ok(());
                        }
                    }
                }
            }
        }
    }

    /// Ends the stream: a sequence cut by the end becomes one replacement character.
    pub(crate) fn finish(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.pending.clear();
        out.write_all("\u{fffd}".as_bytes())
    }
}

/// Writes `text` escaped as `serde_json` does inside strings: quote and backslash with a
/// backslash, control characters as short (`\n`) or `\u00XX` escapes, everything else
/// as is.
fn escape_into(text: &str, out: &mut impl Write) -> std::io::Result<()> {
    let bytes = text.as_bytes();
    let mut start = 0;
    for (index, &byte) in bytes.iter().enumerate() {
        let escape: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => {
                out.write_all(&bytes[start..index])?;
                write!(out, "\\u{byte:04x}")?;
                start = index + 1;
                continue;
            }
            _ => continue,
        };
        out.write_all(&bytes[start..index])?;
        out.write_all(escape)?;
        start = index + 1;
    }
    out.write_all(&bytes[start..])
}

/// A process-wide counter for temporary file names.
pub(crate) fn next_temporary_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn hex_digest(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode_in_chunks(bytes: &[u8], chunk: usize) -> Vec<u8> {
        let mut encoder = JsonStringEncoder::default();
        let mut out = b"\"".to_vec();
        for piece in bytes.chunks(chunk.max(1)) {
            encoder.push(piece, &mut out).expect("vec writes");
        }
        encoder.finish(&mut out).expect("vec writes");
        out.push(b'"');
        out
    }

    fn expected(bytes: &[u8]) -> Vec<u8> {
        serde_json::to_vec(&serde_json::Value::String(
            String::from_utf8_lossy(bytes).into_owned(),
        ))
        .expect("serialises")
    }

    #[test]
    fn streamed_text_matches_serde_json_for_tricky_inputs() {
        let cases: Vec<Vec<u8>> = vec![
            b"plain".to_vec(),
            b"quote \" backslash \\ newline \n tab \t nul \x00 bell \x07 del \x7f".to_vec(),
            "h\u{e9}llo w\u{f6}rld \u{1f600} \u{4e2d}\u{6587}"
                .as_bytes()
                .to_vec(),
            vec![0xff, b'a', 0xc3, 0x28, 0xe2, 0x82, b'x', 0xf0, 0x9f, 0x98],
            vec![0xe2, 0x82],
            vec![0xf0, 0x9f, 0x98, 0x80, 0xf0],
        ];
        for bytes in cases {
            for chunk in [1, 2, 3, 5, 64] {
                assert_eq!(
                    encode_in_chunks(&bytes, chunk),
                    expected(&bytes),
                    "{bytes:?} in chunks of {chunk}"
                );
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn streamed_text_matches_serde_json(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            chunk in 1usize..9,
        ) {
            proptest::prop_assert_eq!(encode_in_chunks(&bytes, chunk), expected(&bytes));
        }
    }

    #[test]
    fn streamed_blobs_equal_stored_values_and_are_stored_once() {
        let directory = tempfile::tempdir().expect("tempdir");
        let store = FsBlobStore::new(directory.path());
        let text = "line \u{e9}\n".repeat(30_000);
        let (streamed, new) = store.put_text_stream(&mut text.as_bytes()).expect("stored");
        assert!(new);
        let (whole, new_again) = store
            .put_value(&serde_json::Value::String(text.clone()))
            .expect("stored");
        assert_eq!(streamed, whole);
        assert!(!new_again);
        let (again, new_third) = store.put_text_stream(&mut text.as_bytes()).expect("stored");
        assert_eq!(again, streamed);
        assert!(!new_third);
        assert_eq!(store.produced_count(), 1, "one distinct ref");
        assert_eq!(
            store.read_value(&streamed).expect("reads"),
            serde_json::Value::String(text)
        );
        let leftovers: Vec<_> = fs_err::read_dir(directory.path().join("blobs/sha256"))
            .expect("lists")
            .map(|entry| entry.expect("entry").file_name())
            .filter(|name| name.to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn blobs_are_stored_once_and_read_back() {
        let directory = tempfile::tempdir().expect("tempdir");
        let store = FsBlobStore::new(directory.path());
        let (reference, new) = store
            .put_value(&serde_json::json!("hello"))
            .expect("stored");
        assert!(new);
        assert!(is_ref(reference.as_str()));
        assert_eq!(
            reference.as_str(),
            format!("{BLOB_PREFIX}{}", hex_digest(b"\"hello\""))
        );
        let (again, new_again) = store
            .put_value(&serde_json::json!("hello"))
            .expect("stored");
        assert_eq!(again, reference);
        assert!(!new_again);
        assert_eq!(
            store.read_value(&reference).expect("read"),
            serde_json::json!("hello")
        );
        let missing = BlobRef::parse(&format!("{BLOB_PREFIX}{}", "0".repeat(64))).expect("a ref");
        assert!(matches!(store.read(&missing), Err(BlobError::Missing(_))));
    }
}
