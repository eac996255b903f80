//! [`ObjectBlobStore`]: the engine's [`BlobStore`] over any store of the `object_store`
//! crate (SPEC 18.1): `s3://bucket/prefix` (any S3-compatible service; endpoint,
//! region and credentials from the standard `AWS_*` variables, never stored),
//! `file:///path` (a shared file system) and `memory://` (tests).
//!
//! Keys are `{prefix}/sha256/{hex[0..2]}/{hex}`, as under a local `blobs/` directory.
//! A blob that exists is never written again, so concurrent writers of the same content
//! are harmless. Values are redacted before they are hashed, as by every blob store.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use fabro_engine::blob::{hex_digest, BlobError};
use fabro_engine::{BlobRef, BlobStore};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, PutPayload};

use crate::bridge::Bridge;
use crate::url::redact_url;

/// Why a `--blobs` URL cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BlobsUrlError {
    /// The URL is not one of the supported kinds.
    #[error("unsupported blob store URL {0} (use s3://bucket/prefix, file:///path or memory://)")]
    Unsupported(String),
    /// The object store could not be configured.
    #[error("cannot use the blob store {url}: {source}")]
    Configure {
        /// The URL, redacted.
        url: String,
        /// Why.
        #[source]
        source: object_store::Error,
    },
    /// The store's thread could not start.
    #[error("cannot start the blob store's thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// Blobs in an object store.
#[derive(Clone)]
pub struct ObjectBlobStore {
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    url: String,
    bridge: Bridge,
    produced: Arc<Mutex<BTreeSet<String>>>,
}

impl std::fmt::Debug for ObjectBlobStore {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ObjectBlobStore")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl ObjectBlobStore {
    /// The store a `--blobs` URL names.
    pub fn from_url(url: &str) -> Result<ObjectBlobStore, BlobsUrlError> {
        let configure = |source| BlobsUrlError::Configure {
            url: redact_url(url),
            source,
        };
        let (store, prefix): (Arc<dyn ObjectStore>, &str) =
            if let Some(rest) = url.strip_prefix("s3://") {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                let mut builder =
                    object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
                if std::env::var("AWS_ENDPOINT_URL").is_ok_and(|url| url.starts_with("http://")) {
                    builder = builder.with_allow_http(true);
                }
                (Arc::new(builder.build().map_err(configure)?), prefix)
            } else if let Some(path) = url.strip_prefix("file://") {
                fs_err::create_dir_all(path).map_err(|error| {
                    configure(object_store::Error::Generic {
                        store: "LocalFileSystem",
                        source: Box::new(error),
                    })
                })?;
                let local = object_store::local::LocalFileSystem::new_with_prefix(path)
                    .map_err(configure)?;
                (Arc::new(local), "")
            } else if url == "memory://" || url.starts_with("memory://") {
                (Arc::new(object_store::memory::InMemory::new()), "")
            } else {
                return Err(BlobsUrlError::Unsupported(redact_url(url)));
            };
        ObjectBlobStore::new(store, prefix, &redact_url(url))
    }

    /// Blobs in `store` under `prefix`; `url` names it in messages.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        prefix: &str,
        url: &str,
    ) -> Result<ObjectBlobStore, BlobsUrlError> {
        Ok(ObjectBlobStore {
            store,
            prefix: ObjectPath::from(prefix.trim_matches('/')),
            url: url.to_owned(),
            bridge: Bridge::start("fabro-blobs").map_err(BlobsUrlError::Thread)?,
            produced: Arc::default(),
        })
    }

    /// The key of the blob whose SHA-256 is `hex`.
    fn key(&self, hex: &str) -> ObjectPath {
        let mut key = self.prefix.clone();
        for part in ["sha256", &hex[..2], hex] {
            key = key.child(part);
        }
        key
    }

    fn failure(&self, key: &ObjectPath, source: object_store::Error) -> BlobError {
        BlobError::Remote {
            location: format!("{}/{key}", self.url),
            source: Box::new(source),
        }
    }

    fn gone(&self, key: &ObjectPath) -> BlobError {
        BlobError::Remote {
            location: format!("{}/{key}", self.url),
            source: "the blob store's thread stopped".into(),
        }
    }
}

impl BlobStore for ObjectBlobStore {
    fn put(&self, bytes: &[u8]) -> Result<(BlobRef, bool), BlobError> {
        let bytes = fabro_llm::redact::redactor().redact_bytes(bytes);
        let hex = hex_digest(&bytes);
        let reference = BlobRef::of_hex(&hex);
        self.produced
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(reference.as_str().to_owned());
        let key = self.key(&hex);
        let store = Arc::clone(&self.store);
        let payload = PutPayload::from(bytes.into_owned());
        let target = key.clone();
        let written = self
            .bridge
            .run(async move {
                match store.head(&target).await {
                    Ok(_) => Ok(false),
                    Err(object_store::Error::NotFound { .. }) => {
                        store.put(&target, payload).await.map(|_| true)
                    }
                    Err(error) => Err(error),
                }
            })
            .ok_or_else(|| self.gone(&key))?
            .map_err(|error| self.failure(&key, error))?;
        Ok((reference, written))
    }

    fn read(&self, reference: &BlobRef) -> Result<Vec<u8>, BlobError> {
        let key = self.key(&reference.hex());
        let store = Arc::clone(&self.store);
        let target = key.clone();
        let result = self
            .bridge
            .run(async move {
                let found = store.get(&target).await?;
                found.bytes().await
            })
            .ok_or_else(|| self.gone(&key))?;
        match result {
            Ok(bytes) => Ok(bytes.to_vec()),
            Err(object_store::Error::NotFound { .. }) => {
                Err(BlobError::Missing(reference.to_string()))
            }
            Err(error) => Err(self.failure(&key, error)),
        }
    }

    fn produced_count(&self) -> usize {
        self.produced
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blob_is_stored_once_and_read_back() {
        let store = ObjectBlobStore::from_url("memory://").expect("a memory store");
        let (reference, new) = store.put(b"hello blob").expect("stored");
        assert!(new);
        let (again, new) = store.put(b"hello blob").expect("stored");
        assert_eq!((again.as_str(), new), (reference.as_str(), false));
        assert_eq!(store.read(&reference).expect("read"), b"hello blob");
        assert_eq!(store.produced_count(), 1);
        let missing = BlobRef::of_hex(&hex_digest(b"never stored"));
        assert!(matches!(store.read(&missing), Err(BlobError::Missing(_))));
    }

    #[test]
    fn file_urls_use_the_local_layout() {
        let directory = tempfile::tempdir().expect("a directory");
        let url = format!("file://{}", directory.path().join("shared").display());
        let store = ObjectBlobStore::from_url(&url).expect("a file store");
        let (reference, _) = store.put(b"{\"a\":1}").expect("stored");
        let hex = reference.hex();
        let path = directory
            .path()
            .join("shared/sha256")
            .join(&hex[..2])
            .join(&hex);
        assert_eq!(fs_err::read(path).expect("the blob file"), b"{\"a\":1}");
        // Works from inside async code too, as the engine calls it.
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let read = runtime.block_on(async { store.read(&reference) });
        assert_eq!(read.expect("read"), b"{\"a\":1}");
    }

    #[test]
    fn unknown_schemes_are_refused_without_credentials() {
        let error = ObjectBlobStore::from_url("ftp://user:pw-secret@host/x").unwrap_err();
        assert!(!error.to_string().contains("pw-secret"), "{error}");
    }
}
