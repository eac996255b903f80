//! fabro's shared store (SPEC 18.1): what a team's servers and workers share instead of
//! one machine's `$FABRO_HOME`. [`PgStore`] is the PostgreSQL database that holds every
//! piece of state (runs, records, events, the index, the queue and leases), created and
//! upgraded by the versioned migrations under `migrations/`; [`ObjectBlobStore`] keeps
//! blobs in any store of the `object_store` crate (`s3://`, `file://`, `memory://`).
//!
//! [`import_home`] copies the finished runs of a local `$FABRO_HOME` and its blobs into
//! a shared store (`fabro store import`).
//!
//! Store URLs carry credentials; [`redact_url`] is how every message shows one.

mod blobs;
mod bridge;
mod import;
mod postgres;
mod url;

pub use blobs::{BlobsUrlError, ObjectBlobStore};
pub use import::{import_home, ImportError, ImportNote, ImportSummary, RunOutcome};
pub use postgres::{PgRunStore, PgStore, StoreError, EVENTS_CHANNEL, RUNS_CHANNEL};
pub use url::redact_url;
