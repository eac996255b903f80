//! `fabro-bench server` (issue 18, acceptance 5): `fabro server` measured over loopback
//! HTTP from this process (tokio and reqwest, keep-alive clients).
//!
//! (a) W1 and W5 started with `POST /api/v1/runs` and followed over the event stream up
//! to the terminal event, against the same workflow run by `fabro run` as a process, the
//! two alternating, medians and their ratio. (b) Event delivery latency: a gated W1 (a
//! command stage waits for a file, then 1,000 conditional nodes) followed by 100 event
//! streams; once every stream has caught up with the stored events the gate opens, and
//! for each later event the latency is the client's receipt time minus the event's own
//! `ts` (SPEC 11.3: RFC 3339 with milliseconds, stamped before the append, so each figure
//! is an upper bound, by up to 1 ms). (c) `GET /api/v1/runs/{id}` of that run and
//! `GET /api/v1/runs` with 1,000 runs in the store, 50 keep-alive clients for a fixed
//! duration. (d) Peak resident memory (`VmHWM`) of an idle server and of a server with
//! 20 runs in flight.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};
use tokio::runtime::Runtime;

use crate::engine::workload;
use crate::sse::{unix_seconds, EventScanner, Received};

/// Concurrent event streams of (b).
pub(crate) const STREAMS: usize = 100;
/// Concurrent clients of (c).
pub(crate) const CLIENTS: usize = 50;
/// How long each load of (c) lasts.
const LOAD_DURATION: Duration = Duration::from_secs(5);
/// Runs in the store for `GET /api/v1/runs`.
const STORED_RUNS: usize = 1000;
/// Runs in flight for (d).
const IN_FLIGHT: usize = 20;
/// The gate of (b) and (d): it signals that it runs, then waits for `go`.
const GATE: &str = "while [ ! -e go ]; do sleep 0.01; done";

type Result<T> = std::result::Result<T, String>;

/// Runs the parts named in `parts` (letters of `abcd`); returns the Markdown for
/// `docs/benchmarks.md`.
pub(crate) fn server_benchmark(fabro: &Path, rounds: usize, parts: &str) -> Result<String> {
    if !fabro.exists() {
        return Err(format!(
            "{} not found: run `cargo build --release -p fabro-cli -p fabro-bench` first",
            fabro.display()
        ));
    }
    let directory = std::env::temp_dir().join(format!("fabro-server-bench-{}", std::process::id()));
    let result = benchmark_in(fabro, &directory, rounds, parts);
    let _ = fs_err::remove_dir_all(&directory);
    result
}

fn benchmark_in(fabro: &Path, directory: &Path, rounds: usize, parts: &str) -> Result<String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start tokio: {error}"))?;
    let home = directory.join("home");
    let work = directory.join("work");
    prepare(&home, &work)?;
    let mut out = String::new();
    let server = Server::start(fabro, &home, &work, 4)?;
    crate::report(&format!("server pid {}", server.pid()));
    let endpoint = server.endpoint.clone();
    let client = client()?;
    if parts.contains('a') {
        out.push_str("(a) Runs started over HTTP (`POST /api/v1/runs`, then the event stream up to the terminal event) against `fabro run` as a process, alternating, same `FABRO_HOME`:\n\n");
        out.push_str(&http_against_cli(
            &runtime, &client, fabro, &endpoint, &home, &work, rounds,
        )?);
        crate::report(&out);
    }
    if parts.contains('b') || parts.contains('c') {
        let latency = event_latency(&runtime, &endpoint, &work)?;
        let _ = writeln!(
            out,
            "\n(b) Event delivery, {STREAMS} event streams on a run of {} stages ({} events after the gate, {} samples; run {:.3} s from the gate): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (receipt minus the event's `ts`, millisecond `ts`: upper bounds, up to 1 ms high).",
            latency.stages,
            latency.events,
            latency.samples.len(),
            latency.run_seconds,
            percentile(&latency.samples, 0.50),
            percentile(&latency.samples, 0.99),
            percentile(&latency.samples, 1.0),
        );
        crate::report(&out);
        if parts.contains('c') {
            out.push_str(&get_latency(
                fabro, &home, &work, &runtime, &client, &endpoint, &latency,
            )?);
        }
    }
    drop(server);
    if parts.contains('d') {
        out.push_str(&memory(fabro, directory)?);
    }
    Ok(out)
}

/// (c): one client and [`CLIENTS`] on the run of (b), then on the run list once the
/// store holds [`STORED_RUNS`] runs.
fn get_latency(
    fabro: &Path,
    home: &Path,
    work: &Path,
    runtime: &Runtime,
    client: &reqwest::Client,
    endpoint: &Endpoint,
    latency: &Latency,
) -> Result<String> {
    let mut out = format!(
        "\n(c) Keep-alive clients each sending one request after another for {} s (closed loop; with one client the figure is the service time):\n\n",
        LOAD_DURATION.as_secs()
    );
    out.push_str("| request | store | clients | requests | requests/s | p50 | p99 | max |\n|---|---|---:|---:|---:|---:|---:|---:|\n");
    let one = format!("/api/v1/runs/{}", latency.run_id);
    for clients in [1, CLIENTS] {
        let measured = runtime.block_on(load(endpoint, &one, clients))?;
        out.push_str(&measured.row(
            "`GET /api/v1/runs/{id}`",
            &format!("the run of (b), {} stages", latency.stages),
            clients,
        ));
        crate::report(&out);
    }
    let stored = fill_store(fabro, home, work, runtime, client, endpoint, STORED_RUNS)?;
    for clients in [1, CLIENTS] {
        let measured = runtime.block_on(load(endpoint, "/api/v1/runs", clients))?;
        out.push_str(&measured.row(
            "`GET /api/v1/runs` (first page, 50)",
            &format!("{stored} runs"),
            clients,
        ));
        crate::report(&out);
    }
    Ok(out)
}

/// `{home}/settings.toml` lifts the stage budget (W1 has 1,002 stages, SPEC 17.1) for the
/// CLI and the server alike; `{work}` holds the workflows.
pub(crate) fn prepare(home: &Path, work: &Path) -> Result<()> {
    fs_err::create_dir_all(home).map_err(|error| error.to_string())?;
    fs_err::create_dir_all(work).map_err(|error| error.to_string())?;
    fs_err::write(home.join("settings.toml"), "[run]\nmax_stages = 0\n")
        .map_err(|error| error.to_string())?;
    for name in ["w0", "w1", "w5"] {
        let text = workload(name).ok_or_else(|| format!("unknown workload {name}"))?;
        fs_err::write(work.join(format!("{name}.fabro")), text)
            .map_err(|error| error.to_string())?;
    }
    fs_err::write(work.join("gated.fabro"), gated("ready")).map_err(|error| error.to_string())?;
    Ok(())
}

/// W1 behind a gate: a command stage creates `ready`, then waits for `go`.
fn gated(ready: &str) -> String {
    workload("w1").unwrap_or_default().replace(
        "  start -> n1\n",
        &format!("  gate [shape=parallelogram, script=\"touch {ready}; {GATE}\"]\n  start -> gate -> n1\n"),
    )
}

/// A `fabro server` process on a loopback port of its own.
pub(crate) struct Server {
    child: Child,
    pub(crate) endpoint: Endpoint,
}

/// Where a server listens and its token.
#[derive(Clone)]
pub(crate) struct Endpoint {
    base: String,
    token: String,
}

impl Endpoint {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

impl Server {
    fn start(fabro: &Path, home: &Path, work: &Path, max_concurrent: usize) -> Result<Server> {
        Server::start_with(fabro, home, work, max_concurrent, &[])
    }

    /// [`Server::start`] with `envs` added (e.g. `FABRO_STORE`, `FABRO_BLOBS`).
    pub(crate) fn start_with(
        fabro: &Path,
        home: &Path,
        work: &Path,
        max_concurrent: usize,
        envs: &[(&str, String)],
    ) -> Result<Server> {
        let mut child = Command::new(fabro)
            .args(["server", "--bind", "127.0.0.1:0", "--max-concurrent-runs"])
            .arg(max_concurrent.to_string())
            .env("FABRO_HOME", home)
            .envs(envs.iter().map(|(name, value)| (*name, value.as_str())))
            .current_dir(work)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|error| format!("cannot start {}: {error}", fabro.display()))?;
        let pipe = child
            .stderr
            .take()
            .ok_or("the server's stderr is not piped")?;
        let (sender, receiver) = std::sync::mpsc::channel();
        // Drained to the end: a full pipe would stall the server's request log.
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(|line| line.ok()) {
                if let Some(url) = line.strip_prefix("fabro server listening on http://") {
                    let _ = sender.send(url.to_owned());
                }
            }
        });
        let mut server = Server {
            child,
            endpoint: Endpoint {
                base: String::new(),
                token: String::new(),
            },
        };
        let url = receiver
            .recv_timeout(Duration::from_secs(30))
            .map_err(|_| "the server printed no address".to_owned())?;
        let (address, token) = url
            .split_once("/?token=")
            .ok_or_else(|| format!("unexpected start-up line: {url}"))?;
        server.endpoint.base = format!("http://{address}");
        token.clone_into(&mut server.endpoint.token);
        Ok(server)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn client() -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .build()
        .map_err(|error| format!("cannot build an HTTP client: {error}"))
}

/// `POST /api/v1/runs`; returns the run id.
pub(crate) async fn start_run(
    client: &reqwest::Client,
    server: &Endpoint,
    body: Value,
) -> Result<String> {
    let response = client
        .post(server.url("/api/v1/runs"))
        .bearer_auth(&server.token)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .map_err(|error| format!("POST /api/v1/runs: {error}"))?;
    let status = response.status();
    let text = response.text().await.map_err(|error| error.to_string())?;
    if status.as_u16() != 201 {
        return Err(format!("POST /api/v1/runs: {status} {text}"));
    }
    let started: Value = serde_json::from_str(&text).map_err(|error| error.to_string())?;
    started["run_id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("no run_id in {text}"))
}

/// `GET` of a JSON document.
pub(crate) async fn get_json(
    client: &reqwest::Client,
    server: &Endpoint,
    path: &str,
) -> Result<Value> {
    let response = client
        .get(server.url(path))
        .bearer_auth(&server.token)
        .send()
        .await
        .map_err(|error| format!("GET {path}: {error}"))?;
    let status = response.status();
    let text = response.text().await.map_err(|error| error.to_string())?;
    if !status.is_success() {
        return Err(format!("GET {path}: {status} {text}"));
    }
    serde_json::from_str(&text).map_err(|error| format!("GET {path}: {error}"))
}

/// Follows a run's event stream to its end, calling `on_event` per event.
pub(crate) async fn follow(
    client: &reqwest::Client,
    server: &Endpoint,
    run_id: &str,
    mut on_event: impl FnMut(Received<'_>),
) -> Result<()> {
    let path = format!("/api/v1/runs/{run_id}/events");
    let mut response = client
        .get(server.url(&path))
        .bearer_auth(&server.token)
        .header("accept", "text/event-stream")
        .send()
        .await
        .map_err(|error| format!("GET {path}: {error}"))?;
    if !response.status().is_success() {
        return Err(format!("GET {path}: {}", response.status()));
    }
    let mut scanner = EventScanner::default();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|error| format!("event stream: {error}"))?
    {
        scanner.scan(&chunk, unix_seconds(SystemTime::now()), &mut on_event);
    }
    Ok(())
}

/// Starts `workflow` over HTTP and follows it to its end; returns the seconds and the
/// last event's name.
pub(crate) async fn run_over_http(
    client: &reqwest::Client,
    server: &Endpoint,
    workflow: &str,
) -> Result<(f64, String)> {
    let started = Instant::now();
    let run_id = start_run(client, server, json!({ "workflow": workflow })).await?;
    let mut last = Vec::new();
    follow(client, server, &run_id, |event| {
        last.clear();
        last.extend_from_slice(event.name);
    })
    .await?;
    Ok((
        started.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&last).into_owned(),
    ))
}

/// `fabro run WORKFLOW` as a process; returns its wall seconds.
fn run_with_cli(fabro: &Path, home: &Path, work: &Path, workflow: &str) -> Result<f64> {
    let started = Instant::now();
    let status = Command::new(fabro)
        .args(["run", workflow])
        .env("FABRO_HOME", home)
        .current_dir(work)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|error| format!("fabro run: {error}"))?;
    let seconds = started.elapsed().as_secs_f64();
    if !status.success() {
        return Err(format!("fabro run {workflow}: {status}"));
    }
    Ok(seconds)
}

/// (a): a table row per workload.
fn http_against_cli(
    runtime: &Runtime,
    client: &reqwest::Client,
    fabro: &Path,
    server: &Endpoint,
    home: &Path,
    work: &Path,
    rounds: usize,
) -> Result<String> {
    let mut table = String::from("| workload | `fabro run` (median) | over HTTP (median) | HTTP / CLI |\n|---|---:|---:|---:|\n");
    for (name, file) in [
        ("W1 1,000 conditional nodes", "w1.fabro"),
        ("W5 100 prompt nodes (simulated LLM)", "w5.fabro"),
    ] {
        // One of each first, untimed: the page cache and the server's first run.
        run_with_cli(fabro, home, work, file)?;
        runtime.block_on(run_over_http(client, server, file))?;
        let (mut cli, mut http) = (Vec::new(), Vec::new());
        for round in 0..rounds.max(1) {
            let mut over_http = || -> Result<()> {
                let (seconds, last) = runtime.block_on(run_over_http(client, server, file))?;
                if last != "WorkflowRunCompleted" {
                    return Err(format!("{file} over HTTP ended with {last}"));
                }
                http.push(seconds);
                Ok(())
            };
            if round % 2 == 0 {
                cli.push(run_with_cli(fabro, home, work, file)?);
                over_http()?;
            } else {
                over_http()?;
                cli.push(run_with_cli(fabro, home, work, file)?);
            }
        }
        let (cli, http) = (median(&mut cli), median(&mut http));
        let _ = writeln!(
            table,
            "| {name} | {cli:.3} s | {http:.3} s | {:.2}x |",
            http / cli
        );
    }
    Ok(table)
}

/// What (b) measured.
pub(crate) struct Latency {
    pub(crate) run_id: String,
    pub(crate) stages: usize,
    pub(crate) events: usize,
    pub(crate) run_seconds: f64,
    /// Milliseconds, sorted.
    pub(crate) samples: Vec<f64>,
}

/// Waits (at most 60 s) for `path` to exist.
pub(crate) fn wait_for(path: &Path) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        if Instant::now() > deadline {
            return Err(format!("{} never appeared", path.display()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// (b).
pub(crate) fn event_latency(runtime: &Runtime, server: &Endpoint, work: &Path) -> Result<Latency> {
    let client = client()?;
    for marker in ["ready", "go"] {
        let _ = fs_err::remove_file(work.join(marker));
    }
    let run_id = runtime.block_on(start_run(
        &client,
        server,
        json!({ "workflow": "gated.fabro" }),
    ))?;
    wait_for(&work.join("ready"))?;
    let document =
        runtime.block_on(get_json(&client, server, &format!("/api/v1/runs/{run_id}")))?;
    let run_dir = PathBuf::from(document["run_dir"].as_str().ok_or("no run_dir")?);
    // The gate's own events are stored before its command runs; everything after the
    // ones counted here is appended once the gate opens.
    std::thread::sleep(Duration::from_millis(200));
    let before = fs_err::read_to_string(run_dir.join("events.jsonl"))
        .map_err(|error| error.to_string())?
        .lines()
        .count() as u64;
    follow_gated(runtime, server, &run_id, before, work)
}

/// The streams of (b) on `server`, following run `run_id`, which waits at its gate
/// after event `before`: once all have caught up, the gate opens.
pub(crate) fn follow_gated(
    runtime: &Runtime,
    server: &Endpoint,
    run_id: &str,
    before: u64,
    work: &Path,
) -> Result<Latency> {
    let run_id = run_id.to_owned();
    let caught_up = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..STREAMS)
        .map(|_| {
            let caught_up = Arc::clone(&caught_up);
            let server = server.clone();
            let run_id = run_id.clone();
            runtime.spawn(async move { stream_client(server, run_id, before, caught_up).await })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while caught_up.load(Ordering::SeqCst) < STREAMS {
        if Instant::now() > deadline {
            return Err("the event streams never caught up".to_owned());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let opened = Instant::now();
    fs_err::write(work.join("go"), "").map_err(|error| error.to_string())?;
    let mut samples = Vec::new();
    let mut events = 0;
    for task in tasks {
        let latencies = runtime
            .block_on(task)
            .map_err(|error| error.to_string())??;
        events = events.max(latencies.len());
        samples.extend(latencies);
    }
    let run_seconds = opened.elapsed().as_secs_f64();
    samples.sort_by(f64::total_cmp);
    if samples.iter().any(|sample| sample.is_nan()) {
        return Err("an event without a readable ts".to_owned());
    }
    Ok(Latency {
        run_id,
        stages: 1 + 1000,
        events,
        run_seconds,
        samples,
    })
}

/// One stream of (b): latencies in milliseconds of the events after `before`.
pub(crate) async fn stream_client(
    server: Endpoint,
    run_id: String,
    before: u64,
    caught_up: Arc<AtomicUsize>,
) -> Result<Vec<f64>> {
    let client = client()?;
    let mut latencies = Vec::with_capacity(5000);
    let mut counted = false;
    let mut last = Vec::new();
    follow(&client, &server, &run_id, |event| {
        if event.id >= before && !counted {
            counted = true;
            caught_up.fetch_add(1, Ordering::SeqCst);
        }
        if event.id > before {
            latencies.push((event.received - event.ts) * 1000.0);
        }
        last.clear();
        last.extend_from_slice(event.name);
    })
    .await?;
    if last != b"WorkflowRunCompleted" {
        return Err(format!(
            "the gated run ended with {}",
            String::from_utf8_lossy(&last)
        ));
    }
    Ok(latencies)
}

/// What one load of (c) measured.
pub(crate) struct Load {
    /// Milliseconds, sorted.
    samples: Vec<f64>,
    seconds: f64,
}

impl Load {
    pub(crate) fn row(&self, request: &str, store: &str, clients: usize) -> String {
        format!(
            "| {request} | {store} | {clients} | {} | {:.0} | {:.2} ms | {:.2} ms | {:.2} ms |\n",
            self.samples.len(),
            self.samples.len() as f64 / self.seconds,
            percentile(&self.samples, 0.50),
            percentile(&self.samples, 0.99),
            percentile(&self.samples, 1.0),
        )
    }
}

/// (c): `clients` tasks, each with a keep-alive client of its own, send `GET path`
/// one after another for [`LOAD_DURATION`] (after two untimed requests each).
pub(crate) async fn load(server: &Endpoint, path: &str, clients: usize) -> Result<Load> {
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let server = server.clone();
            let path = path.to_owned();
            tokio::spawn(async move { load_client(server, path).await })
        })
        .collect();
    let mut samples = Vec::new();
    for task in tasks {
        samples.extend(task.await.map_err(|error| error.to_string())??);
    }
    let seconds = started.elapsed().as_secs_f64();
    samples.sort_by(f64::total_cmp);
    Ok(Load { samples, seconds })
}

async fn load_client(server: Endpoint, path: String) -> Result<Vec<f64>> {
    let client = client()?;
    let url = server.url(&path);
    // The body is read to its end chunk by chunk and its length checked, not collected
    // into one buffer: a load generator's own copying and allocation (0.2 MB per
    // response for the run document) would otherwise compete with the server for the
    // same 2 cores, as `wrk` and `oha` avoid.
    let get = || async {
        let mut response = client
            .get(&url)
            .bearer_auth(&server.token)
            .send()
            .await
            .map_err(|error| format!("GET {path}: {error}"))?;
        let status = response.status();
        let expected = response.content_length();
        let mut length = 0u64;
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|error| format!("GET {path}: {error}"))?
        {
            length += chunk.len() as u64;
        }
        if !status.is_success()
            || length == 0
            || expected.is_some_and(|expected| expected != length)
        {
            return Err(format!(
                "GET {path}: {status}, {length} bytes of {expected:?}"
            ));
        }
        Ok(())
    };
    for _ in 0..2 {
        get().await?;
    }
    let deadline = Instant::now() + LOAD_DURATION;
    let mut samples = Vec::new();
    while Instant::now() < deadline {
        let started = Instant::now();
        get().await?;
        samples.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(samples)
}

/// Runs W0 with the CLI (four at a time, same `FABRO_HOME`) until the store holds
/// `target` runs; returns how many it holds.
pub(crate) fn fill_store(
    fabro: &Path,
    home: &Path,
    work: &Path,
    runtime: &Runtime,
    client: &reqwest::Client,
    server: &Endpoint,
    target: usize,
) -> Result<usize> {
    let count = |runtime: &Runtime| -> Result<usize> {
        let list = runtime.block_on(get_json(client, server, "/api/v1/runs?limit=200"))?;
        let mut count = list["runs"].as_array().map_or(0, Vec::len);
        let mut next = list["next"].as_str().map(str::to_owned);
        while let Some(before) = next {
            let page = runtime.block_on(get_json(
                client,
                server,
                &format!("/api/v1/runs?limit=200&before={before}"),
            ))?;
            count += page["runs"].as_array().map_or(0, Vec::len);
            next = page["next"].as_str().map(str::to_owned);
        }
        Ok(count)
    };
    let mut missing = target.saturating_sub(count(runtime)?);
    while missing > 0 {
        let batch = missing.min(4);
        let children: Vec<Child> = (0..batch)
            .map(|_| {
                Command::new(fabro)
                    .args(["run", "w0.fabro"])
                    .env("FABRO_HOME", home)
                    .current_dir(work)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .map_err(|error| format!("fabro run: {error}"))
            })
            .collect::<Result<_>>()?;
        for mut child in children {
            let status = child.wait().map_err(|error| error.to_string())?;
            if !status.success() {
                return Err(format!("fabro run w0.fabro: {status}"));
            }
        }
        missing -= batch;
    }
    count(runtime)
}

/// `VmHWM` (peak) and `VmRSS` of a process, in KB.
fn memory_of(pid: u32) -> Result<(u64, u64)> {
    let status =
        fs_err::read_to_string(format!("/proc/{pid}/status")).map_err(|error| error.to_string())?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    Ok((field("VmHWM:"), field("VmRSS:")))
}

/// (d): a fresh server in a fresh `FABRO_HOME`, idle, then with [`IN_FLIGHT`] gated W1
/// runs (each waits at its gate, then all 1,000 stages run at once).
fn memory(fabro: &Path, directory: &Path) -> Result<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start tokio: {error}"))?;
    let home = directory.join("home-memory");
    let work = directory.join("work-memory");
    prepare(&home, &work)?;
    for index in 0..IN_FLIGHT {
        fs_err::write(
            work.join(format!("gated{index}.fabro")),
            gated(&format!("ready{index}")),
        )
        .map_err(|error| error.to_string())?;
    }
    let server = Server::start(fabro, &home, &work, IN_FLIGHT)?;
    let client = client()?;
    runtime.block_on(get_json(&client, &server.endpoint, "/api/v1/runs"))?;
    std::thread::sleep(Duration::from_secs(1));
    let (idle_peak, idle_now) = memory_of(server.pid())?;
    let mut run_ids = Vec::new();
    for index in 0..IN_FLIGHT {
        run_ids.push(runtime.block_on(start_run(
            &client,
            &server.endpoint,
            json!({ "workflow": format!("gated{index}.fabro") }),
        ))?);
    }
    for index in 0..IN_FLIGHT {
        wait_for(&work.join(format!("ready{index}")))?;
    }
    let (_, gated_now) = memory_of(server.pid())?;
    fs_err::write(work.join("go"), "").map_err(|error| error.to_string())?;
    for run_id in &run_ids {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let path = format!("/api/v1/runs/{run_id}");
            let document = runtime.block_on(get_json(&client, &server.endpoint, &path))?;
            match document["status"].as_str() {
                Some("success") => break,
                Some("running" | "queued") if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(200));
                }
                other => return Err(format!("in-flight run {run_id}: {other:?}")),
            }
        }
    }
    let (busy_peak, _) = memory_of(server.pid())?;
    Ok(format!(
        "\n(d) Server memory (`/proc/PID/status`): idle after start and one request, VmHWM {:.1} MB (VmRSS {:.1} MB); {IN_FLIGHT} W1 runs in flight (each parked at its gate: VmRSS {:.1} MB; then all released at once, 1,000 stages each, run to completion: VmHWM {:.1} MB).\n",
        idle_peak as f64 / 1024.0,
        idle_now as f64 / 1024.0,
        gated_now as f64 / 1024.0,
        busy_peak as f64 / 1024.0,
    ))
}

/// The `quantile` of sorted `samples` (nearest rank); NaN when empty.
pub(crate) fn percentile(samples: &[f64], quantile: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let rank = (quantile * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}

pub(crate) fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples.get(samples.len() / 2).copied().unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabro_language::{check, AnyModel, CheckOptions, NoFiles, Variables};

    #[test]
    fn the_gated_workload_is_a_valid_workflow_with_its_gate_first() {
        let variables = Variables::default();
        let options = CheckOptions {
            loader: &NoFiles,
            variables: &variables,
            models: &AnyModel,
        };
        let text = gated("ready3");
        let checked = check("gated.fabro".as_ref(), &text, &options);
        assert!(!checked.has_errors(), "{:#?}", checked.diagnostics);
        assert!(text.contains("start -> gate -> n1"));
        assert!(text.contains("touch ready3;"));
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&samples, 0.5), 50.0);
        assert_eq!(percentile(&samples, 0.99), 99.0);
        assert_eq!(percentile(&samples, 1.0), 100.0);
        assert!(percentile(&[], 0.5).is_nan());
    }
}
