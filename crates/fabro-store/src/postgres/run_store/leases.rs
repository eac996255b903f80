//! The queue and the leases of SPEC 18.2 on the shared store's database.
//!
//! A claim is one short statement: it takes the first queued run (priority, then age)
//! or a run whose lease ran out, skipping rows another claim holds (`FOR UPDATE SKIP
//! LOCKED`), sets its owner, increments its `lease_epoch` and sets when the lease runs
//! out. The store then renews the lease every `ttl / 3` on its bridge, and every write
//! of the run through this store carries the epoch: the writer's batches, the records,
//! the start and the end are refused by the database once another claim moved the
//! epoch on, and by this store as soon as the lease is lost, which is when a renewal is
//! refused or when `ttl` passed since the last renewal that was sent (a process that
//! was paused finds its lease gone when it continues, before it writes). A lost lease
//! fires the token the run's [`RunLease::lost`] gives, which stops the run.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use fabro_engine::backend::RunLease;
use fabro_engine::{Claim, QueuedStart, RunId, RunQueue, StoreError, WorkerEntry};
use sqlx::postgres::PgPool;
use tokio_util::sync::CancellationToken;

use super::listing::RUNS_CHANNEL;
use super::{backend, PgRunStore};

/// The channel a queued or handed-back run is announced on.
pub(super) const QUEUE_CHANNEL: &str = "fabro_queue";

/// Claims a run whose lease ran out (taken over first: it started before any queued
/// run), else the first queued run whose claim, if any, ran out.
const CLAIM: &str = "WITH next AS (SELECT run_id FROM runs \
     WHERE (owner IS NOT NULL AND status = 'running' AND lease_expires_at < now()) \
     OR (status = 'queued' AND (lease_expires_at IS NULL OR lease_expires_at < now())) \
     ORDER BY (status = 'running') DESC, priority DESC, created_at, run_id \
     LIMIT 1 FOR UPDATE SKIP LOCKED), \
     claimed AS (UPDATE runs r SET owner = $1, lease_epoch = r.lease_epoch + 1, \
     lease_expires_at = now() + $2 * interval '1 millisecond', \
     claimed_at = clock_timestamp(), revision = r.revision + 1 FROM next WHERE r.run_id = next.run_id \
     RETURNING r.run_id, r.lease_epoch, r.request, r.resume_request, \
     EXISTS (SELECT 1 FROM run_checkpoints c WHERE c.run_id = r.run_id) AS started, \
     r.manifest IS NOT NULL AS recorded) \
     SELECT run_id, lease_epoch, request, resume_request, started, recorded, \
     pg_notify($3, run_id) FROM claimed";

/// Forgets what a run that never reached its first checkpoint stored (its worker died
/// on the way): the worker that claimed it starts it anew from its request.
const RESET: &str = "WITH events AS (DELETE FROM run_events WHERE run_id = $1), \
     stages AS (DELETE FROM run_stages WHERE run_id = $1), \
     files AS (DELETE FROM stage_files WHERE run_id = $1), \
     journal AS (DELETE FROM run_journal WHERE run_id = $1), \
     asked AS (DELETE FROM questions WHERE run_id = $1), \
     children AS (DELETE FROM run_children WHERE run_id = $1) \
     UPDATE runs SET manifest = NULL, config = NULL, graph = NULL, status = 'queued' \
     WHERE run_id = $1 AND lease_epoch = $2 \
     AND NOT EXISTS (SELECT 1 FROM run_checkpoints WHERE run_id = $1)";

/// A lease this store holds for a run it claimed.
#[derive(Debug)]
pub(super) struct Held {
    run_id: String,
    worker: String,
    epoch: i64,
    ttl: Duration,
    /// When the newest renewal that succeeded was sent (the claim's at first).
    renewed: Mutex<Instant>,
    /// Fired when the lease is lost.
    lost: CancellationToken,
    /// Fired when the lease is released or handed back: renewals stop.
    ended: CancellationToken,
}

impl Held {
    /// The epoch writes carry, or the error that refuses them.
    pub(super) fn epoch(&self) -> Result<i64, StoreError> {
        let renewed = *self.renewed.lock().unwrap_or_else(PoisonError::into_inner);
        if !self.lost.is_cancelled() && renewed.elapsed() >= self.ttl {
            self.lose("it ran out before it was renewed");
        }
        if self.lost.is_cancelled() {
            return Err(StoreError::LostLease {
                run_id: RunId::from(self.run_id.as_str()),
            });
        }
        Ok(self.epoch)
    }

    /// Marks the lease lost, once, and says so.
    pub(super) fn lose(&self, why: &str) {
        if !self.lost.is_cancelled() {
            tracing::error!(
                run_id = %self.run_id,
                worker = %self.worker,
                "lost the lease of run {}: {why}",
                self.run_id
            );
            self.lost.cancel();
        }
    }
}

/// The leases this store holds, by run id.
#[derive(Debug, Default, Clone)]
pub(super) struct Leases {
    held: Arc<Mutex<HashMap<String, Arc<Held>>>>,
}

impl Leases {
    /// The lease held for `run_id`, if this store claimed it.
    pub(super) fn get(&self, run_id: &str) -> Option<Arc<Held>> {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(run_id)
            .cloned()
    }

    /// The epoch a write of `run_id` carries: `None` for a run this store did not
    /// claim (a run of a server without workers, a CLI), an error once it is lost.
    pub(super) fn fence(&self, run_id: &RunId) -> Result<Option<i64>, StoreError> {
        self.get(run_id.as_str())
            .map(|held| held.epoch())
            .transpose()
    }

    fn remove(&self, run_id: &str) -> Option<Arc<Held>> {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(run_id)
    }
}

/// The run's right to execute while this store holds its lease.
#[derive(Debug)]
pub(super) struct LeasedRun(pub(super) Arc<Held>);

impl RunLease for LeasedRun {
    fn lost(&self) -> Option<CancellationToken> {
        Some(self.0.lost.clone())
    }
}

/// Renews `held` every `ttl / 3` until it ends or is lost.
async fn renew(pool: PgPool, held: Arc<Held>) {
    let every = held.ttl / 3;
    loop {
        tokio::select! {
            () = held.ended.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        // A process paused past its lease finds it gone before it asks.
        if held.epoch().is_err() {
            return;
        }
        let sent = Instant::now();
        let renewal = sqlx::query(
            "UPDATE runs SET lease_expires_at = now() + $3 * interval '1 millisecond' \
             WHERE run_id = $1 AND lease_epoch = $2",
        )
        .bind(&held.run_id)
        .bind(held.epoch)
        .bind(millis(held.ttl))
        .execute(&pool);
        match tokio::time::timeout(every, renewal).await {
            Ok(Ok(done)) if done.rows_affected() == 1 => {
                *held.renewed.lock().unwrap_or_else(PoisonError::into_inner) = sent;
            }
            Ok(Ok(_)) => {
                held.lose("another worker claimed it");
                return;
            }
            // The database did not answer in time: the next round tries again, and the
            // lease is lost when `ttl` passes without a renewal.
            Ok(Err(error)) => tracing::warn!(run_id = %held.run_id, %error, "cannot renew a lease"),
            Err(_) => tracing::warn!(run_id = %held.run_id, "a lease renewal timed out"),
        }
    }
}

/// A duration in whole milliseconds, as the statements take it.
fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

impl PgRunStore {
    /// Stops renewing the lease of `run_id` and runs `statement` (binding the run id, the
    /// epoch held and the queue's and the run list's channels), refused when no row
    /// matched: another claim took the run. Nothing for a run this store does not hold.
    fn end_lease(
        &self,
        run_id: &RunId,
        statement: &'static str,
        action: String,
    ) -> Result<(), StoreError> {
        let Some(held) = self.leases.remove(run_id.as_str()) else {
            return Ok(());
        };
        held.ended.cancel();
        let epoch = held.epoch()?;
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let updated = self.run(&action.clone(), async move {
            sqlx::query(statement)
                .bind(&id)
                .bind(epoch)
                .bind(QUEUE_CHANNEL)
                .bind(RUNS_CHANNEL)
                .execute(&pool)
                .await
                .map(|done| done.rows_affected())
                .map_err(backend(&action))
        })?;
        self.listings.changed();
        if updated == 0 {
            held.lose("another worker claimed it");
            return Err(StoreError::LostLease {
                run_id: run_id.clone(),
            });
        }
        Ok(())
    }
}

impl PgRunStore {
    /// Refuses a write of a run this store holds (`epoch`) that matched no row:
    /// another claim took the run, and its lease is lost.
    pub(super) fn fenced(
        &self,
        run_id: &RunId,
        epoch: Option<i64>,
        updated: u64,
    ) -> Result<(), StoreError> {
        if epoch.is_some() && updated == 0 {
            if let Some(held) = self.leases.get(run_id.as_str()) {
                held.lose("another worker claimed it");
            }
            return Err(StoreError::LostLease {
                run_id: run_id.clone(),
            });
        }
        Ok(())
    }
}

impl PgRunStore {
    /// Holds the lease of `claim` that `worker` got at `sent` (epoch `epoch`): its
    /// writes carry the epoch, and it is renewed every `ttl / 3` until it ends. The
    /// claim, with its epoch.
    fn hold(
        &self,
        mut claim: Claim,
        worker: &str,
        epoch: i64,
        ttl: Duration,
        sent: Instant,
    ) -> Claim {
        self.listings.changed();
        let run_id = claim.run_id.as_str();
        claim.epoch = u64::try_from(epoch).unwrap_or(0);
        let held = Arc::new(Held {
            run_id: run_id.to_owned(),
            worker: worker.to_owned(),
            epoch,
            ttl,
            renewed: Mutex::new(sent),
            lost: CancellationToken::new(),
            ended: CancellationToken::new(),
        });
        self.leases
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(run_id.to_owned(), Arc::clone(&held));
        self.bridge.spawn(renew(self.pool.clone(), held));
        claim
    }
}

impl RunQueue for PgRunStore {
    fn enqueue(&self, run: &QueuedStart) -> Result<bool, StoreError> {
        let pool = self.pool.clone();
        let run = run.clone();
        let action = format!("cannot queue run {}", run.run_id);
        let queued = self.run(&action.clone(), async move {
            sqlx::query(
                "WITH queued AS (INSERT INTO runs (run_id, workflow_name, workflow_path, \
                 status, priority, goal, request) VALUES ($1, $2, $3, 'queued', $4, $5, $6) \
                 ON CONFLICT (run_id) DO NOTHING RETURNING run_id) \
                 SELECT pg_notify($7, run_id), pg_notify($8, run_id) FROM queued",
            )
            .bind(run.run_id.as_str())
            .bind(&run.workflow_name)
            .bind(&run.workflow_path)
            .bind(run.priority)
            .bind(&run.goal)
            .bind(&run.request)
            .bind(QUEUE_CHANNEL)
            .bind(RUNS_CHANNEL)
            .execute(&pool)
            .await
            .map(|done| done.rows_affected() == 1)
            .map_err(backend(&action))
        })?;
        self.listings.changed();
        Ok(queued)
    }

    fn claim(&self, worker: &str, ttl: Duration) -> Result<Option<Claim>, StoreError> {
        let pool = self.pool.clone();
        let owner = worker.to_owned();
        let action = format!("worker {worker} cannot claim a run");
        let sent = Instant::now();
        type Claimed = (String, i64, Option<String>, Option<String>, bool, bool);
        let claimed: Option<Claimed> = self.run(&action.clone(), async move {
            let claimed: Option<Claimed> = sqlx::query_as(CLAIM)
                .bind(&owner)
                .bind(millis(ttl))
                .bind(RUNS_CHANNEL)
                .fetch_optional(&pool)
                .await
                .map_err(backend(&action))?;
            if let Some((run_id, epoch, _, _, false, true)) = &claimed {
                sqlx::query(RESET)
                    .bind(run_id)
                    .bind(epoch)
                    .execute(&pool)
                    .await
                    .map_err(backend(&action))?;
            }
            Ok(claimed)
        })?;
        let Some((run_id, epoch, request, resume_request, started, _)) = claimed else {
            return Ok(None);
        };
        let claim = Claim {
            run_id: RunId::from(run_id.as_str()),
            epoch: 0,
            started,
            request: if started { resume_request } else { request },
        };
        Ok(Some(self.hold(claim, worker, epoch, ttl, sent)))
    }

    fn release(&self, run_id: &RunId) -> Result<(), StoreError> {
        self.end_lease(
            run_id,
            "WITH released AS (UPDATE runs SET lease_expires_at = NULL, revision = revision + 1 \
             WHERE run_id = $1 AND lease_epoch = $2 RETURNING run_id) \
             SELECT pg_notify($4, run_id) FROM released WHERE $3::text IS NOT NULL",
            format!("cannot release the lease of run {run_id}"),
        )
    }

    fn hand_back(&self, run_id: &RunId) -> Result<(), StoreError> {
        self.end_lease(
            run_id,
            "WITH back AS (UPDATE runs SET status = 'queued', owner = NULL, \
             lease_expires_at = NULL, resume_request = NULL, revision = revision + 1 \
             WHERE run_id = $1 AND lease_epoch = $2 RETURNING run_id) \
             SELECT pg_notify($3, run_id), pg_notify($4, run_id) FROM back",
            format!("cannot hand back run {run_id}"),
        )
    }

    fn requeue(&self, run_id: &RunId, request: &str) -> Result<bool, StoreError> {
        let pool = self.pool.clone();
        let (id, request) = (run_id.as_str().to_owned(), request.to_owned());
        let action = format!("cannot queue the resume of run {run_id}");
        let queued = self.run(&action.clone(), async move {
            sqlx::query(
                "WITH queued AS (UPDATE runs SET status = 'queued', owner = NULL, \
                 lease_expires_at = NULL, cancel_requested = false, resume_request = $2, \
                 revision = revision + 1 WHERE run_id = $1 AND manifest IS NOT NULL \
                 AND status NOT IN ('queued', 'running') RETURNING run_id) \
                 SELECT pg_notify($3, run_id), pg_notify($4, run_id) FROM queued",
            )
            .bind(&id)
            .bind(&request)
            .bind(QUEUE_CHANNEL)
            .bind(RUNS_CHANNEL)
            .execute(&pool)
            .await
            .map(|done| done.rows_affected() == 1)
            .map_err(backend(&action))
        })?;
        self.listings.changed();
        Ok(queued)
    }

    fn enqueue_claimed(
        &self,
        run: &QueuedStart,
        worker: &str,
        ttl: Duration,
    ) -> Result<Option<Claim>, StoreError> {
        let pool = self.pool.clone();
        let (queued, owner) = (run.clone(), worker.to_owned());
        let action = format!("cannot start run {}", run.run_id);
        let sent = Instant::now();
        let epoch: Option<i64> = self.run(&action.clone(), async move {
            sqlx::query_scalar(
                "WITH queued AS (INSERT INTO runs (run_id, workflow_name, workflow_path, \
                 status, priority, goal, request, owner, lease_epoch, lease_expires_at, \
                 claimed_at) VALUES ($1, $2, $3, 'queued', $4, $5, $6, $7, 1, \
                 now() + $8 * interval '1 millisecond', clock_timestamp()) \
                 ON CONFLICT (run_id) DO NOTHING RETURNING run_id, lease_epoch) \
                 SELECT lease_epoch FROM queued, pg_notify($9, run_id)",
            )
            .bind(queued.run_id.as_str())
            .bind(&queued.workflow_name)
            .bind(&queued.workflow_path)
            .bind(queued.priority)
            .bind(&queued.goal)
            .bind(&queued.request)
            .bind(&owner)
            .bind(millis(ttl))
            .bind(RUNS_CHANNEL)
            .fetch_optional(&pool)
            .await
            .map_err(backend(&action))
        })?;
        let claim = Claim {
            run_id: run.run_id.clone(),
            epoch: 0,
            started: false,
            request: Some(run.request.clone()),
        };
        Ok(epoch.map(|epoch| self.hold(claim, worker, epoch, ttl, sent)))
    }

    fn resume_claimed(
        &self,
        run_id: &RunId,
        request: &str,
        worker: &str,
        ttl: Duration,
    ) -> Result<Option<Claim>, StoreError> {
        let pool = self.pool.clone();
        let (id, text, owner) = (
            run_id.as_str().to_owned(),
            request.to_owned(),
            worker.to_owned(),
        );
        let action = format!("cannot resume run {run_id}");
        let sent = Instant::now();
        let epoch: Option<i64> = self.run(&action.clone(), async move {
            sqlx::query_scalar(
                "WITH claimed AS (UPDATE runs SET owner = $3, lease_epoch = lease_epoch + 1, \
                 lease_expires_at = now() + $4 * interval '1 millisecond', \
                 claimed_at = clock_timestamp(), cancel_requested = false, \
                 resume_request = $2, revision = revision + 1 WHERE run_id = $1 \
                 AND manifest IS NOT NULL AND status <> 'queued' \
                 AND (lease_expires_at IS NULL OR lease_expires_at < now()) \
                 RETURNING run_id, lease_epoch) \
                 SELECT lease_epoch FROM claimed, pg_notify($5, run_id)",
            )
            .bind(&id)
            .bind(&text)
            .bind(&owner)
            .bind(millis(ttl))
            .bind(RUNS_CHANNEL)
            .fetch_optional(&pool)
            .await
            .map_err(backend(&action))
        })?;
        let claim = Claim {
            run_id: run_id.clone(),
            epoch: 0,
            started: true,
            request: Some(request.to_owned()),
        };
        Ok(epoch.map(|epoch| self.hold(claim, worker, epoch, ttl, sent)))
    }

    fn register_worker(
        &self,
        worker: &str,
        host: &str,
        concurrency: u32,
    ) -> Result<(), StoreError> {
        let pool = self.pool.clone();
        let (name, host) = (worker.to_owned(), host.to_owned());
        let concurrency = i32::try_from(concurrency).unwrap_or(i32::MAX);
        let action = format!("cannot register worker {worker}");
        self.run(&action.clone(), async move {
            sqlx::query(
                "INSERT INTO workers (name, host, concurrency) VALUES ($1, $2, $3) \
                 ON CONFLICT (name) DO UPDATE SET host = $2, concurrency = $3, last_renewal = now()",
            )
            .bind(&name)
            .bind(&host)
            .bind(concurrency)
            .execute(&pool)
            .await
            .map(|_| ())
            .map_err(backend(&action))
        })
    }

    fn workers(&self) -> Result<Vec<WorkerEntry>, StoreError> {
        let pool = self.pool.clone();
        let action = "cannot read the workers".to_owned();
        let rows: Vec<(String, String, i32, Vec<String>, String)> =
            self.run(&action.clone(), async move {
                sqlx::query_as(
                    "SELECT w.name, w.host, w.concurrency, \
                     ARRAY(SELECT r.run_id FROM runs r WHERE r.owner = w.name \
                     AND r.lease_expires_at > now() ORDER BY r.run_id), \
                     to_char(w.last_renewal AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') \
                     FROM workers w ORDER BY w.name",
                )
                .fetch_all(&pool)
                .await
                .map_err(backend(&action))
            })?;
        Ok(rows
            .into_iter()
            .map(
                |(name, host, concurrency, runs, last_renewal)| WorkerEntry {
                    name,
                    host,
                    concurrency: u32::try_from(concurrency).unwrap_or(0),
                    runs,
                    last_renewal,
                },
            )
            .collect())
    }
}
