//! Hooks (SPEC 20.4; issue 35, point 4): a `stage_complete` command hook gets every
//! stage's event on standard input, a blocking `stage_start` hook that fails fails its
//! stage with its last stderr line before the handler runs, an HTTP hook POSTs to a
//! loopback server, a hook that hangs is stopped at its timeout with `hook_failed` while
//! the run goes on, `run_start`, `human_question` and `run_failed` hooks run on their
//! events, dry runs run no hooks, and an invalid entry is a configuration error naming
//! its key.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fabro_test_support::TestEnv;
use serde_json::Value;

use crate::{code, fabro, stderr, stdout};

/// Two command stages between start and exit.
const TWO_STAGES: &str = r#"digraph w {
  graph [goal="Build and test"]
  start [shape=Mdiamond]
  exit [shape=Msquare]
  build [shape=parallelogram, script="echo built"]
  test [shape=parallelogram, script="echo tested"]
  start -> build -> test -> exit
}
"#;

/// One request a [`HookServer`] received.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    /// The request line, e.g. `POST /hook HTTP/1.1`.
    pub(crate) line: String,
    /// Header names (lowercase) and values.
    pub(crate) headers: Vec<(String, String)>,
    /// The body.
    pub(crate) body: String,
}

impl Received {
    /// The value of header `name` (lowercase).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(header, _)| header == name)
            .map(|(_, value)| value.as_str())
    }
}

/// A tiny HTTP server on `127.0.0.1:0` that answers every request `200 ok` and keeps it.
pub(crate) struct HookServer {
    url: String,
    received: Arc<Mutex<Vec<Received>>>,
}

impl HookServer {
    pub(crate) fn start() -> HookServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let url = format!("http://{}/hook", listener.local_addr().expect("bound"));
        let received = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&received);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                if let Some(request) = answer(stream) {
                    kept.lock().expect("test lock").push(request);
                }
            }
        });
        HookServer { url, received }
    }

    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    pub(crate) fn received(&self) -> Vec<Received> {
        self.received.lock().expect("test lock").clone()
    }
}

/// Reads one request from `stream` and answers `200 ok`.
fn answer(mut stream: std::net::TcpStream) -> Option<Received> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let length: usize = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    stream
        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
        .ok()?;
    Some(Received {
        line: line.trim_end().to_owned(),
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

pub(crate) fn events(run_dir: &Path) -> Vec<Value> {
    fs_err::read_to_string(run_dir.join("events.jsonl"))
        .expect("events")
        .lines()
        .map(|line| serde_json::from_str(line).expect("event JSON"))
        .collect()
}

fn named<'a>(events: &'a [Value], name: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|event| event["event"] == name)
        .collect()
}

/// Runs `w.fabro` with `TWO_STAGES` (or `workflow`) and `hooks` as its `workflow.toml`.
fn run_with_hooks(env: &TestEnv, workflow: &str, hooks: &str) -> std::process::Output {
    env.write("w.fabro", workflow);
    env.write("workflow.toml", hooks);
    fabro(env, &["run", "w.fabro", "--run-id", "h1"])
}

#[test]
fn a_stage_complete_hook_sees_every_stage_s_event_on_stdin() {
    let env = TestEnv::new("hooks_stage_complete");
    let output = run_with_hooks(
        &env,
        TWO_STAGES,
        "[[hooks]]\nevent = \"stage_complete\"\ncommand = \"cat\"\n",
    );
    assert_eq!(code(&output), 0, "{}{}", stdout(&output), stderr(&output));
    let run_dir = env.fabro_home().join("scratch/h1");
    let events = events(&run_dir);
    let completed = named(&events, "StageCompleted");
    assert_eq!(completed.len(), 4, "start, build, test, exit");
    for stage in ["001-start@1", "002-build@1", "003-test@1", "004-exit@1"] {
        let log = fs_err::read_to_string(run_dir.join("stages").join(stage).join("hooks.log"))
            .unwrap_or_else(|error| panic!("{stage}: {error}"));
        let seen = log
            .split_once("--- stdout ---\n")
            .and_then(|(_, rest)| rest.lines().next())
            .unwrap_or_else(|| panic!("{stage}: {log}"));
        let seen: Value = serde_json::from_str(seen).expect("the envelope as JSON");
        let node = stage
            .split_once('-')
            .map(|(_, rest)| rest.trim_end_matches("@1"));
        let written = completed
            .iter()
            .find(|event| event["node_id"].as_str() == node)
            .expect("its StageCompleted");
        assert_eq!(&seen, *written, "{stage}: the envelope as written");
    }
    let started = named(&events, "HookStarted");
    let finished = named(&events, "HookCompleted");
    assert_eq!((started.len(), finished.len()), (4, 4));
    for event in finished {
        assert_eq!(event["properties"]["status"], "success", "{event}");
        assert_eq!(event["properties"]["event"], "stage_complete");
    }
    // The run's last event is still its terminal one.
    assert_eq!(
        events.last().expect("events")["event"],
        "WorkflowRunCompleted"
    );
}

#[test]
fn a_blocking_stage_start_hook_that_fails_fails_its_stage_with_its_stderr_line() {
    let env = TestEnv::new("hooks_blocking");
    let workflow = r#"digraph w {
  graph [goal="Deploy"]
  start [shape=Mdiamond]
  exit [shape=Msquare]
  build [shape=parallelogram, script="echo built"]
  deploy [shape=parallelogram, script="touch deployed"]
  start -> build -> deploy -> exit
}
"#;
    let output = run_with_hooks(
        &env,
        workflow,
        r#"[[hooks]]
event = "stage_start"
nodes = ["deploy"]
command = "echo checking >&2; echo 'deploy window closed' >&2; exit 1"
blocking = true
timeout_secs = 10
"#,
    );
    // The failed stage follows its unconditional edge: partial success (exit 3).
    assert_eq!(code(&output), 3, "{}{}", stdout(&output), stderr(&output));
    assert!(!env.work_dir().join("deployed").exists(), "the handler ran");
    let events = events(&env.fabro_home().join("scratch/h1"));
    let deploy = named(&events, "StageCompleted")
        .into_iter()
        .find(|event| event["node_id"] == "deploy")
        .expect("deploy completed");
    assert_eq!(deploy["properties"]["status"], "fail");
    assert_eq!(
        deploy["properties"]["failure_reason"],
        "deploy window closed"
    );
    assert_eq!(deploy["properties"]["failure_class"], "deterministic");
    let commands: Vec<_> = named(&events, "CommandStarted")
        .iter()
        .map(|event| event["node_id"].clone())
        .collect();
    assert_eq!(commands, ["build"]);
    // Only deploy's stage ran the hook, and a blocking failure is no warning.
    let hooks = named(&events, "HookCompleted");
    assert_eq!(hooks.len(), 1);
    assert_eq!(hooks[0]["node_id"], "deploy");
    assert_eq!(hooks[0]["properties"]["exit_code"], 1);
    assert!(named(&events, "Warning").is_empty());
}

#[test]
fn an_http_hook_posts_the_event_to_a_loopback_server() {
    let server = HookServer::start();
    let env = TestEnv::new("hooks_http");
    let hooks = format!(
        "[[hooks]]\nevent = \"run_complete\"\ntype = \"http\"\nurl = \"{}\"\nheaders = {{ X-Fabro-Run = \"${{HOOK_RUN_LABEL}}\" }}\n",
        server.url()
    );
    env.write("w.fabro", TWO_STAGES);
    env.write("workflow.toml", &hooks);
    let output = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro", "--run-id", "h1"])
        .env("HOOK_RUN_LABEL", "nightly")
        .output()
        .expect("fabro runs");
    assert_eq!(code(&output), 0, "{}{}", stdout(&output), stderr(&output));
    let received = server.received();
    assert_eq!(received.len(), 1, "{received:?}");
    let request = &received[0];
    assert_eq!(request.line, "POST /hook HTTP/1.1");
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(request.header("x-fabro-run"), Some("nightly"));
    let body: Value = serde_json::from_str(&request.body).expect("JSON body");
    assert_eq!(body["event"], "WorkflowRunCompleted");
    assert_eq!(body["run_id"], "h1");
    assert_eq!(body["properties"]["status"], "success");
    let run_dir = env.fabro_home().join("scratch/h1");
    let events = events(&run_dir);
    let last = events.last().expect("events");
    assert_eq!(last["event"], "WorkflowRunCompleted");
    assert_eq!(last["properties"], body["properties"]);
    let completed = named(&events, "HookCompleted");
    assert_eq!(completed.len(), 1);
    assert_eq!(completed[0]["properties"]["status_code"], 200);
    assert!(completed[0].get("node_id").is_none(), "a run-level event");
    let log = fs_err::read_to_string(run_dir.join("hooks.log")).expect("the run's hooks.log");
    assert!(
        log.contains("run_complete hook 1 (http): http://127.0.0.1:"),
        "{log}"
    );
    assert!(log.contains("HTTP 200\n--- response ---\nok\n"), "{log}");
}

#[test]
fn a_hanging_hook_is_stopped_at_its_timeout_and_the_run_goes_on() {
    let env = TestEnv::new("hooks_timeout");
    let started = Instant::now();
    let output = run_with_hooks(
        &env,
        TWO_STAGES,
        r#"[[hooks]]
event = "stage_complete"
nodes = ["build"]
command = "echo $$ > hook.pid; exec sleep 30"
timeout_secs = 1
"#,
    );
    assert_eq!(code(&output), 0, "{}{}", stdout(&output), stderr(&output));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "waited for sleep"
    );
    assert!(
        stderr(&output).contains("warning: stage_complete hook 1 failed: timed out after 1s"),
        "{}",
        stderr(&output)
    );
    let events = events(&env.fabro_home().join("scratch/h1"));
    let completed = named(&events, "HookCompleted");
    assert_eq!(completed.len(), 1);
    assert_eq!(completed[0]["properties"]["timed_out"], true);
    let warnings = named(&events, "Warning");
    assert_eq!(warnings.len(), 1);
    let warning = &warnings[0]["properties"];
    assert_eq!(warning["code"], "hook_failed");
    assert_eq!(warning["event"], "stage_complete");
    assert_eq!(warning["reason"], "timed out after 1s");
    // The stages after it ran, and the run ended as usual.
    assert_eq!(named(&events, "StageCompleted").len(), 4);
    assert_eq!(
        events.last().expect("events")["event"],
        "WorkflowRunCompleted"
    );
    // Its process group was killed.
    let pid = fs_err::read_to_string(env.work_dir().join("hook.pid")).expect("the hook ran");
    assert!(
        !Path::new(&format!("/proc/{}", pid.trim())).exists(),
        "sleep {} survived its timeout",
        pid.trim()
    );
}

#[test]
fn an_invalid_hook_is_a_configuration_error_naming_its_key() {
    let env = TestEnv::new("hooks_invalid");
    let output = run_with_hooks(
        &env,
        TWO_STAGES,
        "[[hooks]]\nevent = \"run_complete\"\ntype = \"http\"\n",
    );
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(
        stderr(&output)
            .contains("an http hook needs an http:// or https:// url: key 'hooks[1].url'"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn run_start_human_question_and_run_failed_hooks_run_on_their_events() {
    let env = TestEnv::new("hooks_run_events");
    let workflow = r#"digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  review [shape=hexagon, label="Ship it?"]
  ship [shape=parallelogram, script="echo shipped"]
  start -> review
  review -> ship [label="[A] Approve"]
  review -> exit [label="[S] Stop"]
  ship -> exit
}
"#;
    env.write("w.fabro", workflow);
    env.write(
        "workflow.toml",
        r#"[[hooks]]
event = "run_start"
command = "cat > run-start.json"

[[hooks]]
event = "human_question"
nodes = ["review"]
command = "cat > question.json"

[[hooks]]
event = "run_failed"
command = "cat > run-failed.json"

[[hooks]]
event = "run_complete"
command = "touch run-complete"
"#,
    );
    // Two stages are all the budget allows: the run stops after the gate, `canceled`.
    let output = fabro(
        &env,
        &[
            "run",
            "w.fabro",
            "--run-id",
            "h1",
            "--auto-approve",
            "--max-stages",
            "2",
        ],
    );
    assert_eq!(code(&output), 1, "{}{}", stdout(&output), stderr(&output));
    let read = |name: &str| -> Value {
        let text = fs_err::read_to_string(env.work_dir().join(name))
            .unwrap_or_else(|error| panic!("{name}: {error}"));
        serde_json::from_str(&text).expect("an envelope")
    };
    assert_eq!(read("run-start.json")["event"], "WorkflowRunStarted");
    let question = read("question.json");
    assert_eq!(question["event"], "HumanQuestion");
    assert_eq!(question["node_id"], "review");
    assert_eq!(question["properties"]["text"], "Ship it?");
    let failed = read("run-failed.json");
    assert_eq!(failed["event"], "WorkflowRunFailed");
    assert_eq!(failed["properties"]["failure_class"], "budget_exhausted");
    assert!(!env.work_dir().join("run-complete").exists());
    let run_dir = env.fabro_home().join("scratch/h1");
    let events = events(&run_dir);
    let hook_events: Vec<_> = named(&events, "HookCompleted")
        .iter()
        .map(|event| {
            event["properties"]["event"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(hook_events, ["run_start", "human_question", "run_failed"]);
    assert_eq!(events.last().expect("events")["event"], "WorkflowRunFailed");
    let log = fs_err::read_to_string(run_dir.join("hooks.log")).expect("the run's hooks.log");
    assert!(
        log.contains("run_start hook 1") && log.contains("run_failed hook 3"),
        "{log}"
    );
    assert!(run_dir.join("stages/002-review@1/hooks.log").exists());
}

#[test]
fn a_dry_run_runs_no_hooks() {
    let env = TestEnv::new("hooks_dry_run");
    env.write("w.fabro", TWO_STAGES);
    env.write(
        "workflow.toml",
        "[[hooks]]\nevent = \"stage_start\"\ncommand = \"touch hooked\"\nblocking = true\n",
    );
    let output = fabro(&env, &["run", "w.fabro", "--run-id", "h1", "--dry-run"]);
    assert_eq!(code(&output), 0, "{}{}", stdout(&output), stderr(&output));
    assert!(!env.work_dir().join("hooked").exists());
    let events = events(&env.fabro_home().join("scratch/h1"));
    assert!(named(&events, "HookStarted").is_empty());
}
