//! What the processes on one database tell each other (SPEC 18.1, 18.2): every event
//! append, cancel request and posted steering message is followed by a `NOTIFY` in its
//! own transaction;
//! one `LISTEN` connection per [`PgRunStore`] turns them into the engine's [`Notice`]s.
//! The tables stay the source of truth: a notice only wakes a reader, and a connection
//! lost and found again is told as [`Notice::Missed`].

use std::sync::Arc;
use std::time::Duration;

use fabro_engine::{Notice, RunId, StoreError};
use sqlx::postgres::{PgListener, PgPool};
use tokio::sync::broadcast;

use super::leases::QUEUE_CHANNEL;
use super::listing::{Listings, RUNS_CHANNEL};
use super::steering::STEER_CHANNEL;
use super::{backend, PgRunStore, EVENTS_CHANNEL};

/// The channel of cancel requests, with the run id as payload.
pub(super) const CANCEL_CHANNEL: &str = "fabro_cancel";

/// Notices a slow receiver may fall behind before it is told it lagged.
const CAPACITY: usize = 4096;

/// The longest wait between two attempts to listen again.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

impl PgRunStore {
    /// A receiver of the database's notices; the first call starts the listening
    /// connection on the store's bridge.
    pub(super) fn subscribe(&self) -> Option<broadcast::Receiver<Notice>> {
        let sender = self.notices.get_or_init(|| {
            let (sender, _) = broadcast::channel(CAPACITY);
            let (pool, listening) = (self.pool.clone(), sender.clone());
            let listings = std::sync::Arc::clone(&self.listings);
            // The task lives on the bridge's runtime, and ends with it.
            let _ = self.bridge.run(async move {
                tokio::spawn(listen(pool, listening, listings));
            });
            sender
        });
        Some(sender.subscribe())
    }

    /// Records a cancel request of `run_id` and notifies it, in one transaction:
    /// `false` when the store has no such run.
    pub(super) fn record_cancel_request(&self, run_id: &RunId) -> Result<bool, StoreError> {
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let action = format!("cannot request the cancel of run {run_id}");
        self.run(&action.clone(), async move {
            let mut transaction = pool.begin().await.map_err(backend(&action))?;
            let updated = sqlx::query("UPDATE runs SET cancel_requested = true WHERE run_id = $1")
                .bind(&id)
                .execute(&mut *transaction)
                .await
                .map_err(backend(&action))?
                .rows_affected();
            if updated > 0 {
                sqlx::query("SELECT pg_notify($1, $2)")
                    .bind(CANCEL_CHANNEL)
                    .bind(&id)
                    .execute(&mut *transaction)
                    .await
                    .map_err(backend(&action))?;
            }
            transaction.commit().await.map_err(backend(&action))?;
            Ok(updated > 0)
        })
    }

    /// Whether a cancel of `run_id` is requested.
    pub(super) fn read_cancel_request(&self, run_id: &RunId) -> Result<bool, StoreError> {
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let action = format!("cannot read the cancel request of run {run_id}");
        self.run(&action.clone(), async move {
            let requested: Option<bool> =
                sqlx::query_scalar("SELECT cancel_requested FROM runs WHERE run_id = $1")
                    .bind(&id)
                    .fetch_optional(&pool)
                    .await
                    .map_err(backend(&action))?;
            Ok(requested.unwrap_or(false))
        })
    }
}

/// Listens on the store's channels and sends what it hears, until the pool is closed;
/// a lost connection is listened on again with a growing pause.
async fn listen(pool: PgPool, sender: broadcast::Sender<Notice>, listings: Arc<Listings>) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let listened = listen_once(&pool, &sender, &listings).await;
        listings.set_listening(false);
        match listened {
            Err(sqlx::Error::PoolClosed) => return,
            Err(error) => {
                tracing::warn!(%error, "cannot listen to the store's notices; trying again");
            }
            Ok(()) => backoff = Duration::from_millis(100),
        }
        // Whatever was notified meanwhile is lost: readers ask the store.
        let _ = sender.send(Notice::Missed);
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One listening connection, until it fails.
async fn listen_once(
    pool: &PgPool,
    sender: &broadcast::Sender<Notice>,
    listings: &Listings,
) -> Result<(), sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener
        .listen_all([
            EVENTS_CHANNEL,
            CANCEL_CHANNEL,
            RUNS_CHANNEL,
            QUEUE_CHANNEL,
            STEER_CHANNEL,
        ])
        .await?;
    // Listening from now on; anything before was not heard.
    listings.set_listening(true);
    let _ = sender.send(Notice::Missed);
    loop {
        let Some(notification) = listener.try_recv().await? else {
            // The connection was lost: notices were missed (said by the caller), and a
            // new one listens.
            return Ok(());
        };
        let run_id = RunId::from(notification.payload());
        let notice = match notification.channel() {
            EVENTS_CHANNEL => Notice::Appended(run_id),
            CANCEL_CHANNEL => Notice::CancelRequested(run_id),
            QUEUE_CHANNEL => Notice::Queued(run_id),
            STEER_CHANNEL => Notice::Steered(run_id),
            RUNS_CHANNEL => {
                listings.changed();
                continue;
            }
            _ => continue,
        };
        // No receiver is no error: nobody waits now.
        let _ = sender.send(notice);
    }
}
