//! [`PgStore`]: the PostgreSQL database of a shared store (SPEC 18.1) and its schema.
//!
//! The schema is created and upgraded by the versioned migrations under `migrations/`
//! (sqlx's migrator, which records what it applied in `_sqlx_migrations`). A database
//! whose schema is newer than this binary's migrations is refused before anything is
//! touched, so an old binary never writes into a schema it does not know.

use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions};
use sqlx::Connection;

use crate::url::redact_url;

/// The migrations this binary knows, embedded at build time.
static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// How long connecting to the store may take before it counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The options of the store's pools: at most `connections` connections, each with
/// `TCP_NODELAY` set ([`nodelay`]); with `asynchronous`, their commits return before
/// their WAL is flushed (`synchronous_commit = off`; see `PgRunStore`'s event pool).
/// A process keeps at most 20 connections to the store (4 of the `PgStore`, 12 + 4 of
/// its run store), so that several servers fit in PostgreSQL's default 100.
fn pool_options(
    options: &sqlx::postgres::PgConnectOptions,
    connections: u32,
    asynchronous: bool,
) -> PgPoolOptions {
    let port = options.get_port();
    PgPoolOptions::new()
        .max_connections(connections)
        .after_connect(move |connection, _meta| {
            Box::pin(async move {
                nodelay::set_on_connections_to(port);
                if asynchronous {
                    sqlx::query("SET synchronous_commit = off")
                        .execute(&mut *connection)
                        .await?;
                }
                Ok(())
            })
        })
}

/// Why the shared store failed. Messages show URLs with their passwords redacted.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store cannot be reached (SPEC 18.1: exit 2 at start).
    #[error("cannot reach the store {url}: {cause}")]
    Unreachable {
        /// The store's URL, password redacted.
        url: String,
        /// Why, with the URL's password redacted as well.
        cause: String,
    },
    /// The store's schema is newer than this binary's migrations (SPEC 18.1).
    #[error("the store's schema is version {found}; this fabro knows up to {known}")]
    SchemaTooNew {
        /// The newest migration applied to the store.
        found: i64,
        /// The newest migration this binary has.
        known: i64,
    },
    /// A migration failed.
    #[error("cannot migrate the store: {0}")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    /// A query failed.
    #[error("the store failed: {0}")]
    Query(#[source] sqlx::Error),
}

/// A connection pool to the shared store's database.
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
}

impl PgStore {
    /// Connects to `url` (`postgres://…`; credentials by the URL, `PGPASSWORD` or
    /// `.pgpass`). Does not touch the schema: see [`PgStore::migrate`] and
    /// [`PgStore::check_schema`].
    pub async fn connect(url: &str) -> Result<PgStore, StoreError> {
        PgStore::connect_within(url, CONNECT_TIMEOUT).await
    }

    /// [`PgStore::connect`], giving up after `timeout` when the server does not answer.
    pub async fn connect_within(url: &str, timeout: Duration) -> Result<PgStore, StoreError> {
        let unreachable = |cause: &dyn std::fmt::Display| {
            let mut cause = cause.to_string();
            // A driver message may quote the URL it was given.
            if cause.contains(url) {
                cause = cause.replace(url, &redact_url(url));
            }
            StoreError::Unreachable {
                url: redact_url(url),
                cause,
            }
        };
        let options: sqlx::postgres::PgConnectOptions =
            url.parse().map_err(|error| unreachable(&error))?;
        // One connection first, so that a refused or failing connection is reported at
        // once rather than retried until the pool's timeout.
        let probe = tokio::time::timeout(timeout, PgConnection::connect_with(&options))
            .await
            .map_err(|_| unreachable(&format!("no answer within {timeout:?}")))?
            .map_err(|error| unreachable(&error))?;
        // Closing the probe is best effort: the pool opens its own connections.
        let _ = probe.close().await;
        let pool = pool_options(&options, 4, false)
            .acquire_timeout(timeout)
            .connect_lazy_with(options);
        Ok(PgStore { pool })
    }

    /// The connection pool, for the store's own writers (the import of local runs).
    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The newest migration this binary knows.
    pub fn known_version() -> i64 {
        MIGRATOR
            .iter()
            .map(|migration| migration.version)
            .max()
            .unwrap_or(0)
    }

    /// The newest migration applied to the store, `None` for an empty database.
    pub async fn schema_version(&self) -> Result<Option<i64>, StoreError> {
        let exists: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
            .fetch_one(&self.pool)
            .await
            .map_err(StoreError::Query)?;
        if !exists {
            return Ok(None);
        }
        sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations WHERE success")
            .fetch_one(&self.pool)
            .await
            .map_err(StoreError::Query)
    }

    /// Refuses a store whose schema is newer than this binary's migrations.
    pub async fn check_schema(&self) -> Result<Option<i64>, StoreError> {
        let found = self.schema_version().await?;
        let known = PgStore::known_version();
        match found {
            Some(found) if found > known => Err(StoreError::SchemaTooNew { found, known }),
            _ => Ok(found),
        }
    }

    /// Applies the migrations the store lacks (after [`PgStore::check_schema`]) and
    /// returns the schema version. Concurrent callers are serialised by the migrator's
    /// advisory lock.
    pub async fn migrate(&self) -> Result<i64, StoreError> {
        self.check_schema().await?;
        MIGRATOR
            .run(&self.pool)
            .await
            .map_err(StoreError::Migrate)?;
        Ok(PgStore::known_version())
    }
}

mod nodelay;
mod retry;
mod run_store;

pub use run_store::{PgRunStore, EVENTS_CHANNEL, RUNS_CHANNEL};

#[cfg(test)]
mod tests;
