//! The content-addressed blob store shared by all runs under `{root}` (SPEC 11.2).
//!
//! Blobs are stored once under `blobs/sha256/{hex[0..2]}/{hex}`: written to a temporary
//! file in the same directory, synced and renamed, never rewritten. A ref is
//! `blob://sha256/{hex}`, where hex is the SHA-256 of exactly the stored bytes.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The blob ref prefix.
pub const BLOB_PREFIX: &str = "blob://sha256/";

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
    /// The ref is not of the form `blob://sha256/{64 hex}`.
    #[error("malformed blob ref '{0}'")]
    MalformedRef(String),
    /// The store lacks the blob.
    #[error("missing blob {0}")]
    Missing(String),
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

/// A blob store rooted at `{root}/blobs`.
#[derive(Debug, Clone)]
pub struct BlobStore {
    root: PathBuf,
}

impl BlobStore {
    /// The store under `fabro_root` (`$FABRO_HOME`).
    pub fn new(fabro_root: &Path) -> BlobStore {
        BlobStore {
            root: fabro_root.join("blobs").join("sha256"),
        }
    }

    /// Whether `text` looks like a blob ref.
    pub fn is_ref(text: &str) -> bool {
        text.strip_prefix(BLOB_PREFIX)
            .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
    }

    /// Stores `bytes` (once) and returns the ref and whether it was new.
    pub fn put(&self, bytes: &[u8]) -> Result<(String, bool), BlobError> {
        let hex = hex_digest(bytes);
        let path = self.path_of(&hex);
        let reference = format!("{BLOB_PREFIX}{hex}");
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

    /// Stores a JSON value as its compact serialisation.
    pub fn put_value(&self, value: &serde_json::Value) -> Result<(String, bool), BlobError> {
        let bytes = serde_json::to_vec(value).map_err(|source| BlobError::NotJson {
            reference: String::new(),
            source,
        })?;
        self.put(&bytes)
    }

    /// Reads the bytes of `reference`.
    pub fn read(&self, reference: &str) -> Result<Vec<u8>, BlobError> {
        let path = self.path_of_ref(reference)?;
        match fs_err::read(&path) {
            Ok(bytes) => Ok(bytes),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                Err(BlobError::Missing(reference.to_owned()))
            }
            Err(source) => Err(BlobError::Io { path, source }),
        }
    }

    /// Reads `reference` as the JSON value it stores.
    pub fn read_value(&self, reference: &str) -> Result<serde_json::Value, BlobError> {
        let bytes = self.read(reference)?;
        serde_json::from_slice(&bytes).map_err(|source| BlobError::NotJson {
            reference: reference.to_owned(),
            source,
        })
    }

    /// The file holding `reference`.
    pub fn path_of_ref(&self, reference: &str) -> Result<PathBuf, BlobError> {
        if !BlobStore::is_ref(reference) {
            return Err(BlobError::MalformedRef(reference.to_owned()));
        }
        Ok(self.path_of(&reference[BLOB_PREFIX.len()..].to_ascii_lowercase()))
    }

    fn path_of(&self, hex: &str) -> PathBuf {
        self.root.join(&hex[..2]).join(hex)
    }
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

    #[test]
    fn blobs_are_stored_once_and_read_back() {
        let directory = tempfile::tempdir().expect("tempdir");
        let store = BlobStore::new(directory.path());
        let (reference, new) = store
            .put_value(&serde_json::json!("hello"))
            .expect("stored");
        assert!(new);
        assert!(BlobStore::is_ref(&reference));
        assert_eq!(
            reference,
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
        let missing = format!("{BLOB_PREFIX}{}", "0".repeat(64));
        assert!(matches!(store.read(&missing), Err(BlobError::Missing(_))));
        assert!(matches!(
            store.read("blob://sha256/xyz"),
            Err(BlobError::MalformedRef(_))
        ));
    }
}
