//! `fabro-bench shared [ROUNDS]` (issue 31, acceptance 5): `fabro server` on the shared
//! store (PostgreSQL on 127.0.0.1:5432, blobs in a `file://` directory) side by side
//! with `fabro server` on the local store, on the same machine, in one invocation.
//!
//! (1) Per-stage cost: W1 (1,002 stages) and W5 (102) started with `POST /api/v1/runs`
//! and followed to the terminal event on the local server and on a shared one,
//! alternating, ROUNDS times each; the medians, their ratio and the difference per
//! stage. (2) Event delivery through PostgreSQL: the gated W1 of `fabro-bench server`
//! (b) executed by one shared server and followed by 100 event streams on a second
//! shared server, which learns of each append from `LISTEN/NOTIFY` and reads the events
//! from the table; the same run followed on the local server for comparison. (3)
//! `GET /api/v1/runs` (first page) with 10,000 runs in each store, 1 and 50 keep-alive
//! clients: the local store filled with W0 runs by `fabro run`, the shared one with
//! copies of one W0 run made in SQL (`INSERT … SELECT` over `generate_series`, each
//! copy with its own id and start time), which the listing cannot tell from runs.
//!
//! A database of its own is created with `psql` and dropped at the end.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;
use tokio::runtime::Runtime;

use crate::server::{
    client, event_latency, fill_store, get_json, load, median, percentile, prepare, run_over_http,
    start_run, Endpoint, Latency, Server, CLIENTS,
};

type Result<T> = std::result::Result<T, String>;

/// Runs in each store for (3).
const LISTED_RUNS: usize = 10_000;

/// Runs the benchmark; returns the Markdown for `docs/benchmarks.md`.
/// Runs the parts named in `parts` (digits of `123`).
pub(crate) fn shared_benchmark(fabro: &Path, rounds: usize, parts: &str) -> Result<String> {
    if !fabro.exists() {
        return Err(format!(
            "{} not found: run `cargo build --release -p fabro-cli -p fabro-bench` first",
            fabro.display()
        ));
    }
    let directory = std::env::temp_dir().join(format!("fabro-shared-bench-{}", std::process::id()));
    let database = Database::create()?;
    let result = benchmark_in(fabro, &directory, &database, rounds, parts);
    drop(database);
    let _ = fs_err::remove_dir_all(&directory);
    result
}

/// A database of the benchmark's own, dropped with it.
pub(crate) struct Database {
    name: String,
}

impl Database {
    pub(crate) fn create() -> Result<Database> {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let next = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let name = format!("fabro_bench_{}_{next}", std::process::id());
        psql("postgres", &format!("CREATE DATABASE {name}"))?;
        Ok(Database { name })
    }

    pub(crate) fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:5432/{}", self.name)
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let _ = psql(
            "postgres",
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}

/// Runs `sql` in `database` with `psql`; returns its unaligned output.
pub(crate) fn psql(database: &str, sql: &str) -> Result<String> {
    let output = Command::new("psql")
        .args(["-h", "127.0.0.1", "-U", "postgres", "-d", database])
        .args(["-v", "ON_ERROR_STOP=1", "-qtAc", sql])
        .stdin(Stdio::null())
        .output()
        .map_err(|error| format!("psql: {error}"))?;
    if !output.status.success() {
        return Err(format!(
            "psql: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

fn benchmark_in(
    fabro: &Path,
    directory: &Path,
    database: &Database,
    rounds: usize,
    parts: &str,
) -> Result<String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start tokio: {error}"))?;
    let work = directory.join("work");
    let (local_home, first_home, second_home) = (
        directory.join("local"),
        directory.join("first"),
        directory.join("second"),
    );
    for home in [&local_home, &first_home, &second_home] {
        prepare(home, &work)?;
    }
    let shared = [
        ("FABRO_STORE", database.url()),
        (
            "FABRO_BLOBS",
            format!("file://{}", directory.join("blobs").display()),
        ),
    ];
    let local = Server::start_with(fabro, &local_home, &work, 4, &[])?;
    let first = Server::start_with(fabro, &first_home, &work, 4, &shared)?;
    let second = Server::start_with(fabro, &second_home, &work, 4, &shared)?;
    let mut out = String::new();
    if parts.contains('1') {
        out.push_str(&per_stage(
            &runtime,
            &local.endpoint,
            &first.endpoint,
            rounds,
        )?);
        crate::report(&out);
    }
    if parts.contains('2') {
        out.push_str(&delivery(
            &runtime,
            &local.endpoint,
            &first.endpoint,
            &second.endpoint,
            &work,
        )?);
        crate::report(&out);
    }
    if parts.contains('3') {
        out.push_str(&listing(
            fabro,
            &runtime,
            &local_home,
            &work,
            &local.endpoint,
            &first.endpoint,
            database,
        )?);
    }
    Ok(out)
}

/// (1): a table row per workload.
fn per_stage(
    runtime: &Runtime,
    local: &Endpoint,
    shared: &Endpoint,
    rounds: usize,
) -> Result<String> {
    let client = client()?;
    let mut table = String::from(
        "(1) W1 and W5 over HTTP (`POST /api/v1/runs`, then the event stream to the terminal event), the local and the shared server alternating:\n\n| workload | stages | local (median) | shared (median) | shared / local | per stage, shared − local |\n|---|---:|---:|---:|---:|---:|\n",
    );
    for (name, file, stages) in [
        ("W1 1,000 conditional nodes", "w1.fabro", 1002.0),
        ("W5 100 prompt nodes (simulated LLM)", "w5.fabro", 102.0),
    ] {
        let timed = |server: &Endpoint| -> Result<f64> {
            let (seconds, last) = runtime.block_on(run_over_http(&client, server, file))?;
            if last != "WorkflowRunCompleted" {
                return Err(format!("{file} ended with {last}"));
            }
            Ok(seconds)
        };
        // One of each first, untimed: the page cache and each server's first run.
        timed(local)?;
        timed(shared)?;
        let (mut on_local, mut on_shared) = (Vec::new(), Vec::new());
        for round in 0..rounds.max(1) {
            if round % 2 == 0 {
                on_local.push(timed(local)?);
                on_shared.push(timed(shared)?);
            } else {
                on_shared.push(timed(shared)?);
                on_local.push(timed(local)?);
            }
        }
        let range = |samples: &[f64]| {
            let low = samples.iter().copied().fold(f64::INFINITY, f64::min);
            let high = samples.iter().copied().fold(0.0, f64::max);
            format!("{low:.3}–{high:.3}")
        };
        let (local_range, shared_range) = (range(&on_local), range(&on_shared));
        let (local_median, shared_median) = (median(&mut on_local), median(&mut on_shared));
        let _ = writeln!(
            table,
            "| {name} | {stages} | {local_median:.3} s ({local_range}) | {shared_median:.3} s ({shared_range}) | {:.2}x | {:+.2} ms |",
            shared_median / local_median,
            (shared_median - local_median) * 1000.0 / stages
        );
    }
    Ok(table)
}

/// (2): the gated run followed by 100 streams, on the local server, then executed by
/// one shared server and followed on the other.
fn delivery(
    runtime: &Runtime,
    local: &Endpoint,
    first: &Endpoint,
    second: &Endpoint,
    work: &Path,
) -> Result<String> {
    let mut out = String::from(
        "\n(2) Event delivery to 100 event streams, a run of 1,001 stages after a gate (receipt minus the event's `ts`, millisecond `ts`: upper bounds, up to 1 ms high):\n\n| executed by | followed on | events | samples | p50 | p99 | max |\n|---|---|---:|---:|---:|---:|---:|\n",
    );
    let row = |executed: &str, followed: &str, latency: &Latency| {
        format!(
            "| {executed} | {followed} | {} | {} | {:.2} ms | {:.2} ms | {:.2} ms |\n",
            latency.events,
            latency.samples.len(),
            percentile(&latency.samples, 0.50),
            percentile(&latency.samples, 0.99),
            percentile(&latency.samples, 1.0),
        )
    };
    let on_local = event_latency(runtime, local, work)?;
    out.push_str(&row("the local server", "the same server", &on_local));
    let through = event_latency_between(runtime, first, second, work)?;
    out.push_str(&row(
        "a shared server",
        "another shared server (PostgreSQL `LISTEN/NOTIFY`)",
        &through,
    ));
    Ok(out)
}

/// The gated run started on `executing`, followed by the streams on `following`.
fn event_latency_between(
    runtime: &Runtime,
    executing: &Endpoint,
    following: &Endpoint,
    work: &Path,
) -> Result<Latency> {
    let client = client()?;
    for marker in ["ready", "go"] {
        let _ = fs_err::remove_file(work.join(marker));
    }
    let run_id = runtime.block_on(start_run(
        &client,
        executing,
        json!({ "workflow": "gated.fabro" }),
    ))?;
    crate::server::wait_for(&work.join("ready"))?;
    // The gate's own events are stored before its command runs.
    std::thread::sleep(Duration::from_millis(200));
    let page = runtime.block_on(get_json(
        &client,
        following,
        &format!("/api/v1/runs/{run_id}/events?after=0&limit=1000"),
    ))?;
    let before = page["next_after"].as_u64().ok_or("no next_after")?;
    crate::server::follow_gated(runtime, following, &run_id, before, work)
}

/// (3): the first page of the run list with [`LISTED_RUNS`] runs in each store.
fn listing(
    fabro: &Path,
    runtime: &Runtime,
    local_home: &Path,
    work: &Path,
    local: &Endpoint,
    shared: &Endpoint,
    database: &Database,
) -> Result<String> {
    let client = client()?;
    let mut out = format!(
        "\n(3) `GET /api/v1/runs` (first page, 50) with {LISTED_RUNS} runs in the store, keep-alive clients each sending one request after another for 5 s:\n\n| request | store | clients | requests | requests/s | p50 | p99 | max |\n|---|---|---:|---:|---:|---:|---:|---:|\n"
    );
    let stored = fill_store(
        fabro,
        local_home,
        work,
        runtime,
        &client,
        local,
        LISTED_RUNS,
    )?;
    crate::report(&format!("local store: {stored} runs"));
    let template = runtime.block_on(start_run(
        &client,
        shared,
        json!({ "workflow": "w0.fabro" }),
    ))?;
    wait_finished(runtime, &client, shared, &template)?;
    copy_run(database, &template, LISTED_RUNS - 1)?;
    let count = psql(&database.name, "SELECT count(*) FROM runs")?;
    crate::report(&format!("shared store: {count} runs"));
    for (store, endpoint) in [("local", local), ("shared (PostgreSQL)", shared)] {
        for clients in [1, CLIENTS] {
            let measured = runtime.block_on(load(endpoint, "/api/v1/runs", clients))?;
            out.push_str(&measured.row("`GET /api/v1/runs` (first page, 50)", store, clients));
            crate::report(&out);
        }
    }
    Ok(out)
}

/// Waits (at most 60 s) until run `run_id` has ended.
fn wait_finished(
    runtime: &Runtime,
    client: &reqwest::Client,
    server: &Endpoint,
    run_id: &str,
) -> Result<()> {
    for _ in 0..3000 {
        let document =
            runtime.block_on(get_json(client, server, &format!("/api/v1/runs/{run_id}")))?;
        match document["status"].as_str() {
            Some("success") => return Ok(()),
            Some("running" | "queued") | None => std::thread::sleep(Duration::from_millis(20)),
            Some(other) => return Err(format!("the template run ended {other}")),
        }
    }
    Err("the template run never ended".to_owned())
}

/// Copies run `template` `copies` times in SQL, in one transaction: each copy
/// `{template}-{n}`, started `n` seconds before it, with its records, checkpoint,
/// stages and events.
fn copy_run(database: &Database, template: &str, copies: usize) -> Result<()> {
    if template.contains('\'') {
        return Err(format!("unexpected run id {template}"));
    }
    let id = format!("'{template}' || '-' || n");
    let from = |table: &str| {
        format!("FROM {table}, generate_series(1, {copies}) AS n WHERE run_id = '{template}'")
    };
    let sql = format!(
        "INSERT INTO runs (run_id, workflow_name, workflow_path, goal, parent_run_id, status, \
         created_at, started_at, finished_at, run_dir, manifest, config, graph) \
         SELECT {id}, workflow_name, workflow_path, goal, parent_run_id, status, \
         created_at - n * interval '1 second', \
         to_char((started_at::timestamptz - n * interval '1 second') AT TIME ZONE 'UTC', \
         'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), finished_at, run_dir || '-' || n, \
         replace(manifest, '{template}', {id}), config, graph {runs}; \
         INSERT INTO run_checkpoints (run_id, checkpoint, seq) \
         SELECT {id}, replace(checkpoint, '{template}', {id}), seq {checkpoints}; \
         INSERT INTO run_stages (run_id, rank, node_id, visit, status, files) \
         SELECT {id}, rank, node_id, visit, status, files {stages}; \
         INSERT INTO run_events (run_id, id, envelope) \
         SELECT {id}, id, replace(envelope, '{template}', {id}) {events};",
        runs = from("runs"),
        checkpoints = from("run_checkpoints"),
        stages = from("run_stages"),
        events = from("run_events"),
    );
    psql(&database.name, &sql).map(|_| ())
}
