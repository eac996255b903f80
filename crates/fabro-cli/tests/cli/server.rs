//! `fabro server` as a process (SPEC 14): started on port 0 in a temporary root, driven
//! over HTTP on loopback; runs started over HTTP have the records of CLI runs, SIGTERM
//! cancels running runs resumably and exits 0, a SIGKILLed server's runs are resumed by
//! the next one with `resume_interrupted`, and provider keys never leak. With
//! `FABRO_TEST_STORE=postgres` the servers keep their runs in PostgreSQL (see
//! [`ServerStore`]), and the tests read them through the API or `--server`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Output;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabro_test_support::{Record, ServerProcess, ServerStore, TestEnv};
use serde_json::{json, Value};

use crate::test_store::{fabro_reading, record_json, Reader};
use crate::{code, fabro, stderr, stdout};

/// A running `fabro server`, killed when dropped.
pub(crate) struct Server {
    process: ServerProcess,
    store: Arc<ServerStore>,
}

impl std::ops::Deref for Server {
    type Target = ServerProcess;

    fn deref(&self) -> &ServerProcess {
        &self.process
    }
}

impl Server {
    /// A server on the store `FABRO_TEST_STORE` names (see [`ServerStore::for_test`]).
    pub(crate) fn start(env: &TestEnv, extra_env: &[(&str, &str)]) -> Server {
        Server::start_on(env, extra_env, ServerStore::for_test(env))
    }

    /// A server on the files of the home (or on the store its `server.toml` or
    /// `extra_env` names) whatever `FABRO_TEST_STORE` says, for the tests of what only
    /// the local store has and those that choose their store themselves.
    pub(crate) fn start_local(env: &TestEnv, extra_env: &[(&str, &str)]) -> Server {
        Server::start_on(env, extra_env, ServerStore::local())
    }

    /// A server on `store` (e.g. the store of a server that stopped).
    pub(crate) fn start_on(
        env: &TestEnv,
        extra_env: &[(&str, &str)],
        store: Arc<ServerStore>,
    ) -> Server {
        Server::start_with(env, &[], extra_env, store)
    }

    /// A server on `store` started with `args` after `server --bind 127.0.0.1:0`.
    pub(crate) fn start_with(
        env: &TestEnv,
        args: &[&str],
        extra_env: &[(&str, &str)],
        store: Arc<ServerStore>,
    ) -> Server {
        let mut command = env.command(env!("CARGO_BIN_EXE_fabro"));
        command
            .args(["server", "--bind", "127.0.0.1:0"])
            .args(args)
            .envs(store.server_env())
            .envs(extra_env.iter().copied());
        Server {
            process: ServerProcess::spawn(command),
            store,
        }
    }

    /// `http://{address}`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The store the server keeps its runs in.
    pub(crate) fn store(&self) -> Arc<ServerStore> {
        Arc::clone(&self.store)
    }

    /// `fabro` with `args`, reading this server's runs: a local command when they are
    /// in the home, else one with `--server`.
    pub(crate) fn read(&self, env: &TestEnv, args: &[&str]) -> Output {
        fabro_reading(env, args, (!self.store.is_home()).then_some(self))
    }

    /// The stored events of `run_id`, read through the API page by page, each as the
    /// exact text the store holds.
    pub(crate) fn stored_events(&self, run_id: &str) -> Vec<String> {
        #[derive(serde::Deserialize)]
        struct Page<'a> {
            #[serde(borrow)]
            events: Vec<&'a serde_json::value::RawValue>,
            next_after: u64,
        }
        let (mut lines, mut after) = (Vec::new(), 0);
        loop {
            let path = format!("/api/v1/runs/{run_id}/events?after={after}");
            let (status, body) = self.request("GET", &path, None);
            assert_eq!(status, 200, "GET {path}: {body}");
            let page: Page<'_> = serde_json::from_str(&body).expect("a page of events");
            if page.events.is_empty() {
                return lines;
            }
            lines.extend(page.events.iter().map(|event| event.get().to_owned()));
            after = page.next_after;
        }
    }

    /// One request; returns the status and the body.
    pub(crate) fn request(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, String) {
        request(&self.address, method, path, Some(&self.token), body)
    }

    fn get(&self, path: &str) -> Value {
        let (status, body) = self.request("GET", path, None);
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap_or(Value::Null)
    }

    pub(crate) fn wait_status(&self, run_id: &str, statuses: &[&str]) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (_, body) = self.request("GET", &format!("/api/v1/runs/{run_id}"), None);
            let document: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            if statuses.iter().any(|status| document["status"] == *status) {
                return document;
            }
            assert!(Instant::now() < deadline, "run {run_id}: {body}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.pid()).expect("pid"));
        nix::sys::signal::kill(pid, signal).expect("signal the server");
    }

    /// Waits (at most `limit`) for the server to exit; returns its code.
    pub(crate) fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let status = self.process.exit_within(limit);
        assert!(status.is_some(), "the server did not exit within {limit:?}");
        status.and_then(|status| status.code())
    }
}

/// A minimal HTTP/1.1 client over loopback (`Connection: close`).
fn request(
    address: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> (u16, String) {
    let (status, _, body) = exchange(address, method, path, token, body);
    (status, body)
}

/// [`request`], with the response's head (status line and headers) too.
pub(crate) fn exchange(
    address: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> (u16, String, String) {
    let mut stream = TcpStream::connect(address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    if let Some(token) = token {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    if !body.is_empty() {
        head.push_str("Content-Type: application/json\r\n");
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).expect("write");
    stream.write_all(body.as_bytes()).expect("write");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).expect("read");
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete response");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("a status");
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    (status, head.to_owned(), body)
}

fn dechunk(mut text: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = text.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        text = rest[size..].trim_start_matches("\r\n");
    }
    out
}

pub(crate) const TWO_STAGES: &str = "digraph two {
  graph [goal=\"two stages\"]
  start [shape=Mdiamond]
  exit [shape=Msquare]
  first [shape=parallelogram, script=\"echo first\"]
  second [shape=parallelogram, script=\"echo second\"]
  start -> first -> second -> exit
}
";

fn sleepy(marker: &str) -> String {
    format!(
        "digraph sleepy {{\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  nap [shape=parallelogram, script=\"if [ -f {marker} ]; then exit 0; fi; touch {marker}; sleep 20\"]\n  start -> nap -> exit\n}}\n"
    )
}

/// `(event, node_id)` of each envelope in `lines`.
fn names(lines: &[String]) -> Vec<(String, Option<String>)> {
    lines
        .iter()
        .map(|line| {
            let event: Value = serde_json::from_str(line).expect("an envelope");
            (
                event["event"].as_str().unwrap_or_default().to_owned(),
                event["node_id"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

/// `(node_id, status, visit)` of each stage of a run document.
fn stage_rows(document: &Value) -> Vec<(Value, Value, Value)> {
    document["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .map(|stage| {
            (
                stage["node_id"].clone(),
                stage["status"].clone(),
                stage["visit"].clone(),
            )
        })
        .collect()
}

fn file_json(path: std::path::PathBuf) -> Value {
    serde_json::from_str(&fs_err::read_to_string(path).expect("file")).expect("JSON")
}

fn wait_for_file(path: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        assert!(Instant::now() < deadline, "no {}", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The stored events of a run a server executed, once its terminal event is stored:
/// the final checkpoint (which the status reads) is written before that event.
fn finished_events(server: &Server, run_id: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let lines = server.stored_events(run_id);
        if lines
            .last()
            .is_some_and(|line| line.contains("\"event\":\"WorkflowRunCompleted\""))
        {
            return lines;
        }
        assert!(Instant::now() < deadline, "no terminal event of {run_id}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_run_started_over_http_has_the_records_of_a_cli_run() {
    let env = TestEnv::new("server-records");
    env.write("w.fabro", TWO_STAGES);
    let local = fabro(&env, &["run", "w.fabro", "--run-id", "local-run"]);
    assert_eq!(code(&local), 0, "{}", stderr(&local));
    let server = Server::start(&env, &[]);
    assert_eq!(
        request(&server.address, "GET", "/api/v1/runs", None, None).0,
        401
    );
    assert_eq!(
        request(&server.address, "GET", "/api/v1/runs", Some("wrong"), None).0,
        401
    );
    assert_eq!(
        request(&server.address, "GET", "/api/v1/health", None, None).0,
        200
    );
    let (status, body) = server.request(
        "POST",
        "/api/v1/runs",
        Some(&json!({"workflow": "w.fabro", "run_id": "server-run"})),
    );
    assert_eq!(status, 201, "{body}");
    let remote = server.wait_status("server-run", &["success"]);
    let remote_events = finished_events(&server, "server-run");
    // The CLI's run as the CLI reads it: its events file and `inspect --json`.
    let inspected = fabro(&env, &["inspect", "local-run", "--json"]);
    assert_eq!(code(&inspected), 0, "{}", stderr(&inspected));
    let local_doc: Value = serde_json::from_str(&stdout(&inspected)).expect("inspect --json");
    let local_dir = std::path::PathBuf::from(local_doc["run_dir"].as_str().expect("run_dir"));
    let local_events: Vec<String> = fs_err::read_to_string(local_dir.join("events.jsonl"))
        .expect("events")
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(names(&remote_events), names(&local_events));
    assert_eq!(stage_rows(&remote), stage_rows(&local_doc));
    let remote_dir = std::path::PathBuf::from(remote["run_dir"].as_str().expect("run_dir"));
    let store = server.store();
    let (remote_checkpoint, local_checkpoint) = (
        record_json(&store, &remote_dir, "server-run", Record::Checkpoint),
        file_json(local_dir.join("checkpoint.json")),
    );
    for key in [
        "completed_nodes",
        "node_visits",
        "run_status",
        "next_node_id",
    ] {
        assert_eq!(remote_checkpoint[key], local_checkpoint[key], "{key}");
    }
    assert_eq!(
        record_json(&store, &remote_dir, "server-run", Record::Manifest)["origin"],
        "server"
    );
    assert_eq!(file_json(local_dir.join("manifest.json"))["origin"], "cli");
}

/// Only the local store is one home for the CLI and the server: each lists and reads the
/// other's runs (on the shared store the CLI's runs stay in its home).
#[test]
fn the_cli_and_a_server_on_one_home_see_each_others_runs() {
    let env = TestEnv::new("server-one-home");
    env.write("w.fabro", TWO_STAGES);
    let local = fabro(&env, &["run", "w.fabro", "--run-id", "local-run"]);
    assert_eq!(code(&local), 0, "{}", stderr(&local));
    let server = Server::start_local(&env, &[]);
    let (status, body) = server.request(
        "POST",
        "/api/v1/runs",
        Some(&json!({"workflow": "w.fabro", "run_id": "server-run"})),
    );
    assert_eq!(status, 201, "{body}");
    server.wait_status("server-run", &["success"]);
    finished_events(&server, "server-run");
    assert_eq!(server.get("/api/v1/runs/local-run")["status"], "success");
    let runs = fabro(&env, &["runs", "--json"]);
    let listed: Value = serde_json::from_str(&stdout(&runs)).expect("runs --json");
    assert_eq!(listed.as_array().expect("array").len(), 2);
    let inspect = fabro(&env, &["inspect", "server-run"]);
    assert_eq!(code(&inspect), 0);
    assert!(stdout(&inspect).contains("status: success"));
    let list = server.get("/api/v1/runs");
    assert_eq!(list["runs"].as_array().expect("runs").len(), 2);
}

#[test]
fn sigterm_cancels_running_runs_resumably_and_exits_zero() {
    let env = TestEnv::new("server-sigterm");
    env.write("sleepy.fabro", &sleepy("napped"));
    let mut server = Server::start(&env, &[]);
    let (status, body) = server.request(
        "POST",
        "/api/v1/runs",
        Some(&json!({"workflow": "sleepy.fabro", "run_id": "nap-run"})),
    );
    assert_eq!(status, 201, "{body}");
    wait_for_file(&env.work_dir().join("napped"));
    let started = Instant::now();
    server.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(server.wait_exit(Duration::from_secs(10)), Some(0));
    assert!(started.elapsed() < Duration::from_secs(10));
    // Read (and resumed) by the CLI in the home, through the next server on PostgreSQL.
    let reader = Reader::new(&server.store(), &env);
    let inspect = reader.fabro(&env, &["inspect", "nap-run", "--json"]);
    let document: Value = serde_json::from_str(&stdout(&inspect)).expect("inspect --json");
    assert_eq!(document["status"], "canceled");
    let resumed = reader.fabro(&env, &["resume", "nap-run"]);
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
    assert!(stdout(&resumed).contains("status: success"));
}

#[test]
fn a_sigkilled_server_leaves_runs_interrupted_and_the_next_one_resumes_them() {
    let env = TestEnv::new("server-sigkill");
    env.write("sleepy.fabro", &sleepy("napped"));
    // On PostgreSQL the embedded worker holds the run under a lease (SPEC 18.2).
    fs_err::write(
        env.fabro_home().join("worker.toml"),
        "[worker]\nlease_ttl = \"2s\"\n",
    )
    .expect("worker.toml");
    let mut server = Server::start(&env, &[]);
    let (status, body) = server.request(
        "POST",
        "/api/v1/runs",
        Some(&json!({"workflow": "sleepy.fabro", "run_id": "killed-run"})),
    );
    assert_eq!(status, 201, "{body}");
    wait_for_file(&env.work_dir().join("napped"));
    server.signal(nix::sys::signal::Signal::SIGKILL);
    server.wait_exit(Duration::from_secs(10));
    // The stage's sleep outlives its killed parent; it holds no run lock. On PostgreSQL
    // the listing comes from a server that resumes nothing: the `server.toml` that asks
    // the next one to is written after it stopped.
    let store = server.store();
    if store.is_home() {
        let reader = Reader::new(&store, &env);
        let runs = reader.fabro(&env, &["runs", "--json"]);
        assert!(
            stdout(&runs).contains("\"status\": \"interrupted\""),
            "{}",
            stdout(&runs)
        );
    } else {
        // On PostgreSQL its lease runs out, and the next server's embedded worker takes
        // the run over from its newest checkpoint, asked by nobody.
        let next = Server::start_on(&env, &[], store);
        let document = next.wait_status("killed-run", &["success"]);
        assert_eq!(document["status"], "success");
        return;
    }
    fs_err::write(
        env.fabro_home().join("server.toml"),
        "[server]\nresume_interrupted = true\n",
    )
    .expect("server.toml");
    let next = Server::start_on(&env, &[], store);
    let document = next.wait_status("killed-run", &["success"]);
    assert_eq!(document["status"], "success");
    assert!(next
        .stderr_lines()
        .iter()
        .any(|line| line == "resumed interrupted run killed-run"));
}

#[test]
fn provider_keys_in_the_environment_never_appear_in_responses_logs_or_files() {
    const KEYS: [(&str, &str); 2] = [
        ("ANTHROPIC_API_KEY", "sk-ant-server-secret-0123456789"),
        ("OPENAI_API_KEY", "sk-openai-server-secret-9876543210"),
    ];
    let env = TestEnv::new("server-secrets");
    env.write("w.fabro", "digraph w {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  leak [shape=parallelogram, script=\"echo $ANTHROPIC_API_KEY; env\"]\n  start -> leak -> exit\n}\n");
    let mut with_log: Vec<(&str, &str)> = KEYS.to_vec();
    with_log.push(("RUST_LOG", "info"));
    let mut server = Server::start(&env, &with_log);
    let (status, body) = server.request(
        "POST",
        "/api/v1/runs",
        Some(&json!({"workflow": "w.fabro", "run_id": "secret-run"})),
    );
    assert_eq!(status, 201, "{body}");
    server.wait_status("secret-run", &["success", "fail"]);
    let mut bodies = Vec::new();
    for path in [
        "/api/v1/health",
        "/api/v1/openapi.json",
        "/api/v1/runs",
        "/api/v1/workflows",
        "/api/v1/runs/secret-run",
        "/api/v1/runs/secret-run/events",
        "/api/v1/runs/secret-run/stages",
        "/api/v1/runs/secret-run/graph.svg",
        "/api/v1/runs/secret-run/artifacts",
        "/api/v1/runs/secret-run/questions",
        "/api/v1/runs/secret-run/stages/1/files/stdout.log",
        "/api/v1/runs/secret-run/stages/1/files/stderr.log",
        "/api/v1/runs/secret-run/stages/1/files/status.json",
        "/api/v1/runs/nope",
        "/",
    ] {
        bodies.push(server.request("GET", path, None).1);
    }
    // The browser login carries the token in its query: it must not reach the log.
    let (status, _) = server.request("GET", &format!("/?token={}", server.token), None);
    assert_eq!(status, 303);
    bodies.push(
        server
            .request("POST", "/api/v1/runs/secret-run/cancel", Some(&json!({})))
            .1,
    );
    bodies.push(
        server
            .request(
                "POST",
                "/api/v1/runs",
                Some(&json!({"workflow": "missing.fabro"})),
            )
            .1,
    );
    server.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(server.wait_exit(Duration::from_secs(10)), Some(0));
    let logs = server.stderr_lines().join("\n");
    // One line per request, the token in none of them but the start-up line.
    assert!(
        logs.contains("GET /api/v1/runs/secret-run/events 200"),
        "{logs}"
    );
    assert_eq!(logs.matches(server.token.as_str()).count(), 1, "{logs}");
    let mut files = Vec::new();
    let store = server.store();
    let mut pending = vec![env.fabro_home(), env.work_dir()];
    pending.extend(
        store
            .blob_dir()
            .filter(|blobs| blobs.exists())
            .map(std::path::Path::to_path_buf),
    );
    while let Some(directory) = pending.pop() {
        for entry in fs_err::read_dir(&directory).expect("readable").flatten() {
            let path = entry.path();
            if entry.file_type().expect("type").is_dir() {
                pending.push(path);
            } else if let Ok(bytes) = fs_err::read(&path) {
                files.push((path, String::from_utf8_lossy(&bytes).into_owned()));
            }
        }
    }
    assert!(files.len() > 5);
    // The rows of the shared store, when the server kept its runs there.
    if let Some(rows) = store.dump() {
        assert!(rows.contains("secret-run"), "{rows}");
        files.push(("the store's rows".into(), rows));
    }
    for (_, key) in KEYS {
        for body in &bodies {
            assert!(!body.contains(key), "a response holds a key: {body}");
        }
        assert!(!logs.contains(key), "the log holds a key");
        for (path, text) in &files {
            assert!(!text.contains(key), "{} holds a key", path.display());
        }
    }
}

/// `text` with the run id replaced and every number, with the unit of a duration
/// after it (`850ms`, `1.2s`), as `#`: timings differ between two runs, and a stage may
/// take 999ms in one and 1.0s in the other.
pub(crate) fn normalized(text: &str, run_id: &str) -> String {
    let text = without_worker(text).replace(run_id, "RUN");
    let mut normalized = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(first) = rest.chars().next() {
        if !first.is_ascii_digit() {
            normalized.push(first);
            rest = &rest[first.len_utf8()..];
            continue;
        }
        rest = rest.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.');
        rest = after_unit(rest, "ms")
            .or_else(|| after_unit(rest, "s"))
            .unwrap_or(rest);
        normalized.push('#');
    }
    normalized
}

/// `text` without the worker a shared store names (SPEC 18.2: the `worker` of
/// `WorkflowRunStarted` and of `fabro runs --json`, the `WORKER` column of `fabro runs`),
/// which the local store has none of: the rest must read the same.
fn without_worker(text: &str) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut column = false;
    for line in text.lines() {
        if line.starts_with("RUN ID") && line.ends_with(" WORKER") {
            column = true;
        }
        let trimmed = line.trim_start();
        if trimmed.starts_with("\"worker\": ") {
            // The last field of a pretty-printed object: the one before loses its comma.
            if let Some(previous) = lines.last_mut() {
                if previous.ends_with(',') {
                    previous.pop();
                }
            }
            continue;
        }
        let mut line = compact_worker_removed(line);
        if column {
            // The last column; a worker's name has no spaces.
            let trimmed = line.trim_end();
            line = trimmed
                .rsplit_once(' ')
                .map_or(trimmed, |(rest, _)| rest)
                .trim_end()
                .to_owned();
        }
        lines.push(line);
    }
    let mut joined = lines.join("\n");
    if text.ends_with('\n') {
        joined.push('\n');
    }
    joined
}

/// `line` without a compact JSON `"worker":"…"` field or a `worker=…` property of
/// `fabro events`.
fn compact_worker_removed(line: &str) -> String {
    if let Some(start) = line.find(" worker=") {
        let rest = &line[start + 1..];
        let end = rest.find(' ').map_or(line.len(), |end| start + 1 + end);
        return format!("{}{}", &line[..start], &line[end..]);
    }
    let Some(start) = line.find("\"worker\":\"") else {
        return line.to_owned();
    };
    let value = start + "\"worker\":\"".len();
    let Some(length) = line[value..].find('"') else {
        return line.to_owned();
    };
    let end = value + length + 1;
    if line[end..].starts_with(',') {
        format!("{}{}", &line[..start], &line[end + 1..])
    } else if line[..start].ends_with(',') {
        format!("{}{}", &line[..start - 1], &line[end..])
    } else {
        line.to_owned()
    }
}

/// What follows `unit` at the start of `rest`, when `unit` is a whole word there.
fn after_unit<'a>(rest: &'a str, unit: &str) -> Option<&'a str> {
    rest.strip_prefix(unit)
        .filter(|after| !after.starts_with(|c: char| c.is_alphanumeric()))
}

#[test]
fn normalized_output_leaves_out_the_worker_of_a_shared_store() {
    assert_eq!(
        normalized(
            "{\"run_id\":\"r\",\"worker\":\"vm-7\",\"workflow_name\":\"w\"}\n",
            "r"
        ),
        normalized("{\"run_id\":\"r\",\"workflow_name\":\"w\"}\n", "r")
    );
    assert_eq!(
        normalized(
            "RUN ID  STATUS   WORKER\nr1      success  vm-7\nr2      fail     -\n",
            "x"
        ),
        normalized("RUN ID  STATUS\nr1      success\nr2      fail\n", "x")
    );
    assert_eq!(
        normalized(
            "[\n  {\n    \"a\": 1,\n    \"worker\": \"vm\"\n  }\n]\n",
            "x"
        ),
        normalized("[\n  {\n    \"a\": 1\n  }\n]\n", "x")
    );
}

#[test]
fn normalized_output_hides_numbers_and_duration_units() {
    assert_eq!(
        normalized("✓ a success (999ms)\n1 stage in 1.2s; r-1 stages", "r-1"),
        normalized("✓ a success (1.0s)\n1 stage in 38ms; r-1 stages", "r-1"),
    );
    assert_eq!(normalized("2 stages in 3s", "x"), "# stages in #");
    assert_ne!(normalized("a (1ms)", "x"), normalized("b (1ms)", "x"));
}

#[test]
fn fabro_run_against_a_server_prints_the_same_lines_and_exit_codes() {
    let env = TestEnv::new("server-cli");
    let server = Server::start(&env, &[]);
    let frame = "digraph w {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n";
    let cases = [
        (
            "success",
            format!(
                "{frame}  a [shape=parallelogram, script=\"echo a\"]\n  start -> a -> exit\n}}\n"
            ),
            0,
        ),
        (
            "fail",
            format!(
                "{frame}  a [shape=parallelogram, script=\"exit 1\", goal_gate=true]\n  start -> a -> exit\n}}\n"
            ),
            1,
        ),
        (
            "partial",
            format!(
                "{frame}  t [shape=parallelogram, script=\"exit 4\"]\n  start -> t -> exit\n}}\n"
            ),
            3,
        ),
    ];
    for (name, workflow, expected) in cases {
        let file = format!("{name}.fabro");
        env.write(&file, &workflow);
        let local_id = format!("local-{name}");
        let remote_id = format!("remote-{name}");
        let local = fabro(&env, &["run", &file, "--run-id", &local_id]);
        let remote = env
            .command(env!("CARGO_BIN_EXE_fabro"))
            .args(["run", &file, "--run-id", &remote_id])
            .env("FABRO_SERVER", format!("http://{}", server.address))
            .output()
            .expect("fabro runs");
        assert_eq!(code(&local), expected, "{name}: {}", stderr(&local));
        assert_eq!(code(&remote), expected, "{name}: {}", stderr(&remote));
        assert_eq!(
            normalized(&stdout(&remote), &remote_id),
            normalized(&stdout(&local), &local_id),
            "{name}"
        );
        assert_eq!(
            normalized(&stderr(&remote), &remote_id),
            normalized(&stderr(&local), &local_id),
            "{name}"
        );
        let document = server.get(&format!("/api/v1/runs/{remote_id}"));
        let run_dir = std::path::PathBuf::from(document["run_dir"].as_str().expect("run_dir"));
        let manifest = record_json(&server.store(), &run_dir, &remote_id, Record::Manifest);
        assert_eq!(manifest["origin"], "server");
    }
    // --server wins over a wrong FABRO_SERVER; an unreachable server exits 2.
    let unreachable = fabro(
        &env,
        &["run", "success.fabro", "--server", "http://127.0.0.1:9"],
    );
    assert_eq!(code(&unreachable), 2, "{}", stderr(&unreachable));
}

#[test]
fn fabro_answer_and_fabro_cancel_against_a_server() {
    let env = TestEnv::new("server-answer");
    let server = Server::start(&env, &[]);
    let url = format!("http://{}", server.address);
    env.write("gate.fabro", "digraph gate {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  review [shape=hexagon, label=\"Ship it?\"]\n  ship [shape=parallelogram, script=\"touch shipped\"]\n  revise [shape=parallelogram, script=\"touch revised\"]\n  start -> review\n  review -> ship [label=\"[A] Approve\"]\n  review -> revise [label=\"[R] Revise\"]\n  ship -> exit\n  revise -> exit\n}\n");
    let (status, body) = server.request(
        "POST",
        "/api/v1/runs",
        Some(&json!({"workflow": "gate.fabro", "run_id": "gate-run"})),
    );
    assert_eq!(status, 201, "{body}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.get("/api/v1/runs/gate-run/questions")["questions"]
        .as_array()
        .is_none_or(Vec::is_empty)
    {
        assert!(Instant::now() < deadline, "no question");
        std::thread::sleep(Duration::from_millis(20));
    }
    let wrong = fabro(&env, &["answer", "gate-run", "Maybe", "--server", &url]);
    assert_eq!(code(&wrong), 2, "{}", stderr(&wrong));
    let answered = fabro(&env, &["answer", "gate-run", "A", "--server", &url]);
    assert_eq!(code(&answered), 0, "{}", stderr(&answered));
    assert_eq!(stdout(&answered), "review → [A] Approve\n");
    server.wait_status("gate-run", &["success"]);
    let none = fabro(&env, &["answer", "gate-run", "A", "--server", &url]);
    assert_eq!(code(&none), 2);
    env.write("sleepy.fabro", &sleepy("napped"));
    let (status, body) = server.request(
        "POST",
        "/api/v1/runs",
        Some(&json!({"workflow": "sleepy.fabro", "run_id": "nap-run"})),
    );
    assert_eq!(status, 201, "{body}");
    wait_for_file(&env.work_dir().join("napped"));
    let cancel = fabro(&env, &["cancel", "nap-run", "--server", &url]);
    assert_eq!(code(&cancel), 0, "{}", stderr(&cancel));
    assert_eq!(stdout(&cancel), "canceled run nap-run\n");
    let again = fabro(&env, &["cancel", "nap-run", "--server", &url]);
    assert_eq!(code(&again), 2);
    let unknown = fabro(&env, &["cancel", "nope-nope", "--server", &url]);
    assert_eq!(code(&unknown), 2);
}

/// The homes of a local-versus-server comparison: the CLI's and the server's. One home
/// when the server keeps its runs in it; else the CLI has one of its own, where the
/// same runs are made locally (in the server's, its run directories would take the
/// ids). Paths are compared with each home's root as `ROOT`.
struct Homes {
    server: TestEnv,
    cli: Option<TestEnv>,
}

impl Homes {
    fn cli(&self) -> &TestEnv {
        self.cli.as_ref().unwrap_or(&self.server)
    }

    /// `text` of a command in `env`, normalized (see [`normalized`]) with its root as
    /// `ROOT`; with two homes, whose runs took their own times, with runs of spaces (table
    /// columns sized to durations) as one.
    fn compared(&self, env: &TestEnv, text: &str) -> String {
        let root = env
            .fabro_home()
            .parent()
            .map(|root| root.display().to_string());
        let text = normalized(&text.replace(&root.unwrap_or_default(), "ROOT"), "-");
        if self.cli.is_none() {
            return text;
        }
        text.split(' ')
            .filter(|word| !word.is_empty())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// `args` run locally and with `--server`: the same stdout (ages and durations
    /// aside) and the same exit code.
    fn same_with_and_without_server(&self, url: &str, args: &[&str]) -> i32 {
        let local = fabro(self.cli(), args);
        let mut remote_args = args.to_vec();
        remote_args.extend(["--server", url]);
        let remote = fabro(&self.server, &remote_args);
        assert_eq!(
            code(&remote),
            code(&local),
            "{args:?}: local {} / remote {}",
            stderr(&local),
            stderr(&remote)
        );
        assert_eq!(
            self.compared(&self.server, &stdout(&remote)),
            self.compared(self.cli(), &stdout(&local)),
            "{args:?}: {}",
            stderr(&remote)
        );
        code(&local)
    }

    /// `fabro run {workflow} --run-id {run_id}` in the CLI's home and, when it is not
    /// the server's, through the server too; returns the exit code (the same for both).
    /// A server run records its workflow's absolute path: with two homes, so does the
    /// local one.
    fn run(&self, server: &Server, workflow: &str, run_id: &str) -> i32 {
        if self.cli.is_none() {
            return code(&fabro(&self.server, &["run", workflow, "--run-id", run_id]));
        }
        let path = self.cli().work_dir().join(workflow).display().to_string();
        let local = fabro(self.cli(), &["run", &path, "--run-id", run_id]);
        let args = ["run", workflow, "--run-id", run_id];
        let remote = fabro_reading(&self.server, &args, Some(server));
        assert_eq!(code(&remote), code(&local), "{}", stderr(&remote));
        code(&local)
    }
}

#[test]
fn runs_inspect_events_and_resume_against_a_server_print_what_they_print_locally() {
    let env = TestEnv::new("server-read");
    let server = Server::start(&env, &[]);
    let url = format!("http://{}", server.address);
    // Names of one length: the roots' paths are as long in both homes.
    let homes = Homes {
        cli: (!server.store().is_home()).then(|| TestEnv::new("cli-home-01")),
        server: env,
    };
    let frame = "digraph w {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n";
    for home in [&homes.server, homes.cli()] {
        home.write(
            "ok.fabro",
            &format!(
                "{frame}  a [shape=parallelogram, script=\"echo a\"]\n  start -> a -> exit\n}}\n"
            ),
        );
        home.write(
            "bad.fabro",
            &format!("{frame}  a [shape=parallelogram, script=\"exit 1\", goal_gate=true]\n  start -> a -> exit\n}}\n"),
        );
    }
    assert_eq!(homes.run(&server, "ok.fabro", "ok-run"), 0);
    assert_eq!(homes.run(&server, "bad.fabro", "bad-run"), 1);
    for args in [
        &["runs"][..],
        &["runs", "--json"],
        &["runs", "--status", "fail"],
        &["runs", "--limit", "1", "--json"],
        &["inspect", "ok-run"],
        &["inspect", "bad-run", "--json"],
        &["events", "ok-run"],
        &["events", "bad-run", "--json"],
        &["events", "ok-run", "--follow"],
    ] {
        assert_eq!(
            homes.same_with_and_without_server(&url, args),
            0,
            "{args:?}"
        );
    }
    for args in [
        &["inspect", "nope-nope"][..],
        &["events", "nope-nope"],
        &["resume", "nope-nope"],
    ] {
        assert_ne!(
            homes.same_with_and_without_server(&url, args),
            0,
            "{args:?}"
        );
    }
    homes.same_with_and_without_server(&url, &["resume", "ok-run"]);
    homes.same_with_and_without_server(&url, &["resume", "bad-run"]);
}

#[test]
fn resume_against_a_server_continues_a_canceled_run_as_a_local_resume_does() {
    let env = TestEnv::new("server-resume");
    let server = Server::start(&env, &[]);
    let url = format!("http://{}", server.address);
    // The local resume's run is started and canceled by a server on the home: on
    // PostgreSQL, a second server, on the files of the home.
    let home_server = (!server.store().is_home()).then(|| Server::start_local(&env, &[]));
    for (run_id, marker) in [
        ("nap-local", "napped-local"),
        ("nap-remote", "napped-remote"),
    ] {
        let server = match (&home_server, run_id) {
            (Some(home_server), "nap-local") => home_server,
            _ => &server,
        };
        let file = format!("{run_id}.fabro");
        env.write(&file, &sleepy(marker));
        let (status, body) = server.request(
            "POST",
            "/api/v1/runs",
            Some(&json!({"workflow": file, "run_id": run_id})),
        );
        assert_eq!(status, 201, "{body}");
        wait_for_file(&env.work_dir().join(marker));
        let (status, body) = server.request("POST", &format!("/api/v1/runs/{run_id}/cancel"), None);
        assert_eq!(status, 202, "{body}");
        server.wait_status(run_id, &["canceled"]);
    }
    let local = fabro(&env, &["resume", "nap-local"]);
    let remote = fabro(&env, &["resume", "nap-remote", "--server", &url]);
    assert_eq!(code(&local), 0, "{}", stderr(&local));
    assert_eq!(code(&remote), 0, "{}", stderr(&remote));
    assert_eq!(
        normalized(&stdout(&remote), "nap-remote"),
        normalized(&stdout(&local), "nap-local")
    );
    assert_eq!(
        normalized(&stderr(&remote), "nap-remote"),
        normalized(&stderr(&local), "nap-local")
    );
    assert_eq!(server.get("/api/v1/runs/nap-remote")["status"], "success");
}

/// The status of `run_id` in the output of `fabro runs --json`.
fn listed_status(runs: &Output, run_id: &str) -> Value {
    let listed: Value = serde_json::from_str(&stdout(runs))
        .unwrap_or_else(|_| panic!("runs --json: {}{}", stdout(runs), stderr(runs)));
    listed
        .as_array()
        .and_then(|runs| runs.iter().find(|run| run["run_id"] == run_id))
        .map_or(Value::Null, |run| run["status"].clone())
}

#[test]
fn a_queued_run_is_stored_queued_survives_sigterm_and_the_next_server_starts_it() {
    let env = TestEnv::new("server-queue");
    fs_err::write(
        env.fabro_home().join("server.toml"),
        "[server]\nmax_concurrent_runs = 1\n",
    )
    .expect("server.toml");
    env.write("sleepy.fabro", &sleepy("napped"));
    env.write("w.fabro", TWO_STAGES);
    let mut server = Server::start(&env, &[]);
    let (status, body) = server.request(
        "POST",
        "/api/v1/runs",
        Some(&json!({"workflow": "sleepy.fabro", "run_id": "first-run"})),
    );
    assert_eq!(status, 201, "{body}");
    wait_for_file(&env.work_dir().join("napped"));
    let (status, body) = server.request(
        "POST",
        "/api/v1/runs",
        Some(&json!({"workflow": "w.fabro", "run_id": "waiting-run"})),
    );
    assert_eq!(status, 201, "{body}");
    assert!(body.contains("\"status\":\"queued\""), "{body}");
    let listed = server.get("/api/v1/runs?status=queued");
    assert_eq!(listed["runs"][0]["run_id"], "waiting-run", "{listed}");
    let runs = server.read(&env, &["runs", "--json"]);
    assert_eq!(listed_status(&runs, "waiting-run"), "queued");
    server.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(server.wait_exit(Duration::from_secs(10)), Some(0));
    // The running run was canceled, in the store; the queued one is still queued: in the
    // files of the server's home, which the CLI reads, or on PostgreSQL in the store's
    // queue. The store is read by a server of another home, which has no queued run of
    // its own to start (on PostgreSQL, `Reader` serves without executing).
    let store = server.store();
    let elsewhere = TestEnv::new("server-queue-reader");
    let reader = Reader::serving_only(&store, &elsewhere);
    let runs = reader.fabro(&env, &["runs", "--json"]);
    assert_eq!(listed_status(&runs, "first-run"), "canceled");
    if !store.is_home() {
        // SPEC 18.2: on a shared store it waits in the store's queue, for any worker.
        assert_eq!(listed_status(&runs, "waiting-run"), "queued");
    } else {
        let runs = fabro(&env, &["runs", "--json"]);
        assert_eq!(listed_status(&runs, "waiting-run"), "queued");
    }
    drop(reader);
    let next = Server::start_on(&env, &[], store);
    let document = next.wait_status("waiting-run", &["success", "fail", "canceled"]);
    assert_eq!(document["status"], "success", "{document}");
    let run_dir = std::path::PathBuf::from(document["run_dir"].as_str().expect("run_dir"));
    assert_eq!(
        record_json(&next.store(), &run_dir, "waiting-run", Record::Manifest)["origin"],
        "server"
    );
    let runs = next.read(&env, &["runs", "--json"]);
    assert_eq!(listed_status(&runs, "first-run"), "canceled");
}
