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
use std::time::Duration;

use fabro_engine::backend::{hex_digest, BlobError};
use fabro_engine::{BlobRef, BlobStore};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, PutPayload};

use crate::bridge::Bridge;
use crate::url::redact_url;

/// How long a failing object store request is retried before the write or read is an
/// error (an engine error of the run's storage, SPEC 18.4.4).
const RETRY_TIMEOUT: Duration = Duration::from_secs(30);

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
    /// The store a `--blobs` URL names, configured from the environment.
    pub fn from_url(url: &str) -> Result<ObjectBlobStore, BlobsUrlError> {
        ObjectBlobStore::from_url_with(url, &[], RETRY_TIMEOUT)
    }

    /// [`ObjectBlobStore::from_url`] with S3 settings (`aws_endpoint`, `aws_region`,
    /// `aws_access_key_id`, …) that take precedence over the environment's, and how
    /// long a failing request is retried before it is an error.
    pub fn from_url_with(
        url: &str,
        s3_settings: &[(&str, &str)],
        retry_timeout: Duration,
    ) -> Result<ObjectBlobStore, BlobsUrlError> {
        let configure = |source| BlobsUrlError::Configure {
            url: redact_url(url),
            source,
        };
        let (store, prefix): (Arc<dyn ObjectStore>, &str) = if let Some(rest) =
            url.strip_prefix("s3://")
        {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            let mut builder = object_store::aws::AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .with_retry(object_store::RetryConfig {
                    retry_timeout,
                    ..object_store::RetryConfig::default()
                });
            let mut plain_http =
                std::env::var("AWS_ENDPOINT_URL").is_ok_and(|url| url.starts_with("http://"));
            for (key, value) in s3_settings {
                let key: object_store::aws::AmazonS3ConfigKey = key.parse().map_err(configure)?;
                if key == object_store::aws::AmazonS3ConfigKey::Endpoint {
                    plain_http = value.starts_with("http://");
                }
                builder = builder.with_config(key, *value);
            }
            // A loopback or in-house endpoint without TLS (an S3-compatible service).
            builder = builder.with_allow_http(plain_http);
            (Arc::new(builder.build().map_err(configure)?), prefix)
        } else if let Some(path) = url.strip_prefix("file://") {
            fs_err::create_dir_all(path).map_err(|error| {
                configure(object_store::Error::Generic {
                    store: "LocalFileSystem",
                    source: Box::new(error),
                })
            })?;
            let local =
                object_store::local::LocalFileSystem::new_with_prefix(path).map_err(configure)?;
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

    /// Stores `bytes`, the content of a blob another store keeps under the SHA-256
    /// `hex` (64 lowercase hex digits, checked by the caller), verbatim under the same
    /// key unless this store has it; `true` when it was written. Unlike
    /// [`BlobStore::put`] nothing is redacted: the bytes were redacted when first stored,
    /// and the key must stay the digest of exactly them.
    pub(crate) async fn copy_in(&self, hex: &str, bytes: Vec<u8>) -> Result<bool, BlobError> {
        let key = self.key(hex);
        match self.store.head(&key).await {
            Ok(_) => return Ok(false),
            Err(object_store::Error::NotFound { .. }) => {}
            Err(error) => return Err(self.failure(&key, error)),
        }
        self.store
            .put(&key, PutPayload::from(bytes))
            .await
            .map_err(|error| self.failure(&key, error))?;
        Ok(true)
    }

    fn failure(&self, key: &ObjectPath, source: object_store::Error) -> BlobError {
        BlobError::Remote {
            location: format!("{}/{key}", self.url).into(),
            source: Box::new(source),
        }
    }

    fn gone(&self, key: &ObjectPath) -> BlobError {
        BlobError::Remote {
            location: format!("{}/{key}", self.url).into(),
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

    const S3_SETTINGS: [(&str, &str); 3] = [
        ("aws_region", "us-east-1"),
        ("aws_access_key_id", "testing"),
        ("aws_secret_access_key", "testing-FAKE-secret"),
    ];

    fn s3_store(url: &str, endpoint: &str, retry: Duration) -> ObjectBlobStore {
        let mut settings = S3_SETTINGS.to_vec();
        settings.push(("aws_endpoint", endpoint));
        ObjectBlobStore::from_url_with(url, &settings, retry).expect("an S3 store")
    }

    /// SPEC 18.1: `s3://bucket/prefix` against a real S3-compatible server on loopback.
    #[test]
    fn s3_blobs_round_trip_through_an_s3_server() {
        let Some(server) = fabro_test_support::S3Server::start(
            "s3_blobs_round_trip_through_an_s3_server",
            "fabro-blobs",
        ) else {
            return;
        };
        let url = format!("s3://{}/team/a", server.bucket());
        let store = s3_store(&url, server.endpoint(), RETRY_TIMEOUT);
        let blob: &[u8] = b"{\"stage\":\"plan\"}";
        let (reference, new) = store.put(blob).expect("stored");
        assert!(new);
        assert!(!store.put(blob).expect("stored again").1);
        assert_eq!(store.read(&reference).expect("read back"), blob);
        // Another store on the same bucket and prefix (another machine) reads it.
        let other = s3_store(&url, server.endpoint(), RETRY_TIMEOUT);
        assert_eq!(other.read(&reference).expect("read elsewhere"), blob);
        let missing = BlobRef::of_hex(&hex_digest(b"never stored"));
        assert!(matches!(other.read(&missing), Err(BlobError::Missing(_))));
    }

    /// An unreachable object store is an error naming the store, not a panic or a hang.
    #[test]
    fn an_unreachable_object_store_is_an_error() {
        let store = s3_store(
            "s3://nowhere/x",
            "http://127.0.0.1:9",
            Duration::from_millis(200),
        );
        let error = store.put(b"payload").unwrap_err();
        assert!(matches!(error, BlobError::Remote { .. }), "{error}");
        assert!(error.to_string().contains("s3://nowhere/x"), "{error}");
    }

    #[test]
    fn unknown_schemes_are_refused_without_credentials() {
        let error = ObjectBlobStore::from_url("ftp://user:pw-secret@host/x").unwrap_err();
        assert!(!error.to_string().contains("pw-secret"), "{error}");
    }
}
