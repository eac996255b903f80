//! `fabro-bench workers [RUNS]` (issue 32): workers on the shared store (PostgreSQL on
//! 127.0.0.1:5432, blobs in a `file://` directory), in one invocation.
//!
//! (1) Claim latency: 1,000 runs queued through the store's queue, then claimed one by
//! one by one worker, each claim timed (a statement and its round trip); p50 and p99.
//! (2) Drain throughput: RUNS runs (default 24) of three stages that each sleep 200 ms,
//! queued before any worker starts, drained by 1, 2 and 4 `fabro worker` processes of
//! concurrency 1; the time from the first claim to the last end (the database's clocks)
//! and the speed-up over one worker. Sleeping stages do not compete for the cores, so
//! near-linear is the goal. (3) Failover: a run whose stage sleeps is killed with its
//! worker (SIGKILL) while a second worker waits; the time from the kill to the run's
//! first event from the new worker (its resumed `WorkflowRunStarted`), five times, with
//! leases of 2 s.
//!
//! A database of its own is created with `psql` and dropped at the end.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use fabro_engine::{QueuedStart, RunId, RunQueue};

use crate::server::{median, percentile};
use crate::shared::{psql, Database};

type Result<T> = std::result::Result<T, String>;

/// Runs queued for (1).
const CLAIMED_RUNS: usize = 1_000;

/// The lease of the workers of (2) and (3).
const LEASE_TTL: &str = "2s";

/// Runs the benchmark; returns the Markdown for `docs/benchmarks.md`.
pub(crate) fn workers_benchmark(fabro: &Path, runs: usize) -> Result<String> {
    if !fabro.exists() {
        return Err(format!(
            "{} not found: run `cargo build --release -p fabro-cli -p fabro-bench` first",
            fabro.display()
        ));
    }
    let directory =
        std::env::temp_dir().join(format!("fabro-workers-bench-{}", std::process::id()));
    fs_err::create_dir_all(directory.join("work")).map_err(|error| error.to_string())?;
    let result = (|| {
        let mut out = claim_latency()?;
        crate::report(&out);
        out.push_str(&drain(fabro, &directory, runs)?);
        crate::report(&out);
        out.push_str(&failover(fabro, &directory)?);
        Ok(out)
    })();
    let _ = fs_err::remove_dir_all(&directory);
    result
}

/// A store on `database`, migrated.
pub(crate) fn store(database: &Database) -> Result<fabro_store::PgRunStore> {
    let runtime = tokio::runtime::Runtime::new().map_err(|error| error.to_string())?;
    let url = database.url();
    let connected = runtime.block_on(async move {
        let store = fabro_store::PgStore::connect(&url)
            .await
            .map_err(|error| error.to_string())?;
        store.migrate().await.map_err(|error| error.to_string())?;
        Ok::<_, String>(store)
    })?;
    fabro_store::PgRunStore::new(&connected).map_err(|error| error.to_string())
}

/// A queued run of `workflow` (a path under `work`) with id `run_id`.
fn queued(run_id: &str, workflow: &Path, work: &Path) -> QueuedStart {
    let request = serde_json::json!({
        "workflow": workflow.display().to_string(),
        "work_dir": work.display().to_string(),
        "run_id": run_id,
        "auto_approve": true,
    });
    QueuedStart {
        run_id: RunId::from(run_id),
        workflow_name: "bench".to_owned(),
        workflow_path: workflow.display().to_string(),
        goal: String::new(),
        priority: 0,
        request: request.to_string(),
    }
}

/// (1).
fn claim_latency() -> Result<String> {
    let database = Database::create()?;
    let store = store(&database)?;
    let work = Path::new("/nonexistent");
    for index in 0..CLAIMED_RUNS {
        store
            .enqueue(&queued(&format!("c{index:05}"), work, work))
            .map_err(|error| error.to_string())?;
    }
    let mut samples = Vec::with_capacity(CLAIMED_RUNS);
    let mut claimed = Vec::with_capacity(CLAIMED_RUNS);
    for _ in 0..CLAIMED_RUNS {
        let started = Instant::now();
        let claim = store
            .claim("bench", Duration::from_secs(300))
            .map_err(|error| error.to_string())?
            .ok_or("the queue ran dry early")?;
        samples.push(started.elapsed().as_secs_f64() * 1000.0);
        claimed.push(claim.run_id);
    }
    for run_id in &claimed {
        store.release(run_id).map_err(|error| error.to_string())?;
    }
    samples.sort_by(f64::total_cmp);
    Ok(format!(
        "(1) Claim latency, {CLAIMED_RUNS} queued runs claimed one at a time by one worker (`FOR UPDATE SKIP LOCKED`, one statement): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms.\n\n",
        percentile(&samples, 0.5),
        percentile(&samples, 0.99),
        samples.last().copied().unwrap_or(f64::NAN)
    ))
}

/// A `fabro worker` process, killed when dropped.
pub(crate) struct Worker(Child);

impl Worker {
    pub(crate) fn start(
        fabro: &Path,
        directory: &Path,
        database: &Database,
        name: &str,
    ) -> Result<Worker> {
        let home = directory.join(format!("home-{name}"));
        fs_err::create_dir_all(&home).map_err(|error| error.to_string())?;
        let child = Command::new(fabro)
            .args(["worker", "--name", name, "--concurrency", "1"])
            .args(["--lease-ttl", LEASE_TTL])
            .env("FABRO_HOME", &home)
            .env("FABRO_STORE", database.url())
            .env(
                "FABRO_BLOBS",
                format!("file://{}", directory.join("blobs").display()),
            )
            .current_dir(directory.join("work"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|error| format!("cannot start fabro worker: {error}"))?;
        Ok(Worker(child))
    }

    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits (at most `limit`) until `sql` answers `expected` in `database`.
pub(crate) fn wait_for(
    database: &Database,
    sql: &str,
    expected: &str,
    limit: Duration,
) -> Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        let answer = psql(database.name(), sql)?;
        if answer == expected {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("{sql} answered {answer}, not {expected}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// (2).
fn drain(fabro: &Path, directory: &Path, runs: usize) -> Result<String> {
    let work = directory.join("work");
    let workflow = work.join("sleepy.fabro");
    fs_err::write(
        &workflow,
        "digraph sleepy {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  a [shape=parallelogram, script=\"sleep 0.2\"]\n  b [shape=parallelogram, script=\"sleep 0.2\"]\n  c [shape=parallelogram, script=\"sleep 0.2\"]\n  start -> a -> b -> c -> exit\n}\n",
    )
    .map_err(|error| error.to_string())?;
    let mut table = format!(
        "(2) Drain throughput: {runs} queued runs of three stages that sleep 200 ms each, workers of concurrency 1, from the first claim to the last end:\n\n| workers | drained in | runs/s | speed-up over 1 |\n|---:|---:|---:|---:|\n"
    );
    let mut one = f64::NAN;
    for count in [1_usize, 2, 4] {
        let database = Database::create()?;
        let store = store(&database)?;
        for index in 0..runs {
            store
                .enqueue(&queued(&format!("d{index:04}"), &workflow, &work))
                .map_err(|error| error.to_string())?;
        }
        let workers: Vec<Worker> = (0..count)
            .map(|number| Worker::start(fabro, directory, &database, &format!("w{count}-{number}")))
            .collect::<Result<_>>()?;
        wait_for(
            &database,
            "SELECT count(*) FROM runs WHERE status = 'success'",
            &runs.to_string(),
            Duration::from_secs(600),
        )?;
        let seconds: f64 = psql(
            database.name(),
            "SELECT extract(epoch FROM max(finished_at::timestamptz) - min(claimed_at)) FROM runs",
        )?
        .parse()
        .map_err(|error| format!("a duration: {error}"))?;
        drop(workers);
        if count == 1 {
            one = seconds;
        }
        let _ = writeln!(
            table,
            "| {count} | {seconds:.2} s | {:.1} | {:.2}x |",
            runs as f64 / seconds,
            one / seconds
        );
    }
    table.push('\n');
    Ok(table)
}

/// (3).
fn failover(fabro: &Path, directory: &Path) -> Result<String> {
    let work = directory.join("work");
    let workflow = work.join("long.fabro");
    fs_err::write(
        &workflow,
        "digraph long {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  long [shape=parallelogram, script=\"sleep 600\"]\n  start -> long -> exit\n}\n",
    )
    .map_err(|error| error.to_string())?;
    let mut samples = Vec::new();
    for round in 0..5 {
        // A database of its own: the round before left a run that sleeps.
        let database = Database::create()?;
        let store = store(&database)?;
        let run_id = format!("f{round}");
        let mut first = Worker::start(fabro, directory, &database, &format!("first-{round}"))?;
        store
            .enqueue(&queued(&run_id, &workflow, &work))
            .map_err(|error| error.to_string())?;
        wait_for(
            &database,
            &format!(
                "SELECT count(*) FROM run_events WHERE run_id = '{run_id}' AND envelope::jsonb ->> 'event' = 'StageStarted' AND envelope::jsonb ->> 'node_id' = 'long'"
            ),
            "1",
            Duration::from_secs(60),
        )?;
        let second = Worker::start(fabro, directory, &database, &format!("second-{round}"))?;
        // The second worker is up (it registers before it claims).
        wait_for(
            &database,
            &format!("SELECT count(*) FROM workers WHERE name = 'second-{round}'"),
            "1",
            Duration::from_secs(30),
        )?;
        let killed = SystemTime::now();
        first.kill();
        let resumed = format!(
            "SELECT count(*) FROM run_events WHERE run_id = '{run_id}' AND envelope::jsonb ->> 'event' = 'WorkflowRunStarted' AND (envelope::jsonb -> 'properties' ->> 'resumed')::boolean"
        );
        wait_for(&database, &resumed, "1", Duration::from_secs(60))?;
        let at: f64 = psql(
            database.name(),
            &format!(
                "SELECT extract(epoch FROM (envelope::jsonb ->> 'ts')::timestamptz) FROM run_events WHERE run_id = '{run_id}' AND envelope::jsonb ->> 'event' = 'WorkflowRunStarted' AND (envelope::jsonb -> 'properties' ->> 'resumed')::boolean"
            ),
        )?
        .parse()
        .map_err(|error| format!("a time: {error}"))?;
        let killed_at = killed
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_err(|error| error.to_string())?
            .as_secs_f64();
        samples.push(at - killed_at);
        drop(second);
    }
    let mut sorted = samples.clone();
    let middle = median(&mut sorted);
    Ok(format!(
        "(3) Failover, lease {LEASE_TTL}: from SIGKILL of the worker to the run's first event from the other worker: median {middle:.2} s, max {:.2} s (goal: at most the lease + 2 s); samples {}.\n",
        sorted.last().copied().unwrap_or(f64::NAN),
        samples
            .iter()
            .map(|sample| format!("{sample:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}
