//! Steering (SPEC 20.1, issue 35 acceptance 1) through the binary: an api agent stage
//! talks to the LLM twin and is scripted to call a `shell` tool that waits for a gate
//! file the test creates, so the test decides when the tool ends. `fabro steer` while
//! the tool runs reaches the agent once, in the request after the tool result; two
//! messages arrive in one delivery; `--next` waits for the next agent stage; with no
//! agent stage running (a command stage, a finished run, a `cli` backend) it exits 2.
//! The same through `POST /api/v1/runs/{id}/steer` and `fabro steer --server` against a
//! `fabro server`, and through the shared store to a run a `fabro worker` executes.

use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use fabro_test_support::TestEnv;
use fabro_twin::{Recorded, Reply, Turn, Twin};
use serde_json::{json, Value};

use crate::backends::{fake_program, path_with, side_dir};
use crate::server::Server;
use crate::workers::{post_queued, Shared, Worker};
use crate::{code, fabro, stderr, stdout};

const KEY: &str = "sk-ant-steer-test-key";

/// How long anything the test waits for may take on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(60);

/// An agent stage `work` (api backend, Anthropic through the twin).
const AGENT: &str = r#"digraph steer {
  graph [goal="Fix the parser"]
  start [shape=Mdiamond]
  exit [shape=Msquare]
  work [provider="anthropic", model="sonnet", prompt="Fix the parser"]
  start -> work -> exit
}
"#;

/// A command stage `prep` that waits for the gate `{prep_gate}`, then the agent stage.
fn command_then_agent(prep_gate: &Path) -> String {
    format!(
        r#"digraph steer {{
  graph [goal="Fix the parser"]
  start [shape=Mdiamond]
  exit [shape=Msquare]
  prep [shape=parallelogram, script="{wait}"]
  work [provider="anthropic", model="sonnet", prompt="Fix the parser"]
  start -> prep -> work -> exit
}}
"#,
        wait = wait_for_gate(prep_gate).replace('"', "\\\"")
    )
}

/// A shell script that returns once `gate` exists.
fn wait_for_gate(gate: &Path) -> String {
    format!(
        "while [ ! -f '{}' ]; do sleep 0.05; done; echo released",
        gate.display()
    )
}

/// An assistant turn calling `shell` with a command that waits for `gate`.
fn blocked_shell(call_id: &str, gate: &Path) -> Reply {
    let arguments = json!({"command": wait_for_gate(gate), "timeout_ms": 300_000}).to_string();
    Reply::Turn(Turn::text("").with_tool_call(call_id, "shell", &arguments))
}

/// One test's environment, twin and gate directory.
struct Steering {
    twin: Twin,
    env: TestEnv,
    gates: PathBuf,
    logs: PathBuf,
    // Dropped last: the twin's server runs on it.
    _runtime: tokio::runtime::Runtime,
}

impl Steering {
    /// The test `name` with no workflow yet.
    fn new(name: &str) -> Steering {
        let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
        let twin = runtime.block_on(Twin::start()).expect("the twin starts");
        // A request beyond the script fails the run loudly.
        twin.set_fallback(Reply::bad_request());
        let env = TestEnv::new(name);
        let gates = side_dir(&env, "gates");
        let logs = side_dir(&env, "logs");
        // The gates are outside the working tree; a `cli` agent writes there too.
        fs_err::write(
            env.fabro_home().join("settings.toml"),
            format!("[sandbox]\nwritable_paths = [\"{}\"]\n", gates.display()),
        )
        .expect("settings.toml");
        Steering {
            twin,
            env,
            gates,
            logs,
            _runtime: runtime,
        }
    }

    /// The test `name` running `workflow`.
    fn with(name: &str, workflow: &str) -> Steering {
        let steering = Steering::new(name);
        steering.env.write("w.fabro", workflow);
        steering
    }

    /// The gate file `name` (not created yet).
    fn gate(&self, name: &str) -> PathBuf {
        self.gates.join(name)
    }

    /// Lets whatever waits for gate `name` go on.
    fn open(&self, name: &str) {
        fs_err::write(self.gate(name), "go").expect("the gate is written");
    }

    /// The provider variables that point Anthropic at the twin.
    fn credentials(&self) -> [(&'static str, String); 2] {
        [
            ("ANTHROPIC_API_KEY", KEY.to_owned()),
            ("ANTHROPIC_BASE_URL", self.twin.base_url()),
        ]
    }

    /// Starts `fabro run w.fabro --run-id {run_id}` in the background (stderr kept in a
    /// file, so a full pipe can never stall it).
    fn start(&self, run_id: &str, extra_env: &[(&str, &str)]) -> Running {
        let log = self.logs.join(format!("{run_id}.stderr"));
        let mut command = self.env.command(env!("CARGO_BIN_EXE_fabro"));
        command
            .args(["run", "w.fabro", "--run-id", run_id])
            .envs(self.credentials())
            .envs(extra_env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                fs_err::File::create(&log)
                    .expect("the log file is created")
                    .into_parts()
                    .0,
            );
        Running {
            child: command.spawn().expect("fabro run starts"),
            log,
        }
    }

    fn run_dir(&self, run_id: &str) -> PathBuf {
        self.env.fabro_home().join("scratch").join(run_id)
    }

    fn steer(&self, args: &[&str]) -> Output {
        let mut all = vec!["steer"];
        all.extend_from_slice(args);
        fabro(&self.env, &all)
    }
}

/// A `fabro run` in the background.
struct Running {
    child: Child,
    log: PathBuf,
}

impl Running {
    /// Waits for the run to end; returns its exit code and stderr.
    fn finish(mut self) -> (i32, String) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().expect("the run can be waited for") {
                let log = fs_err::read_to_string(&self.log).unwrap_or_default();
                return (status.code().unwrap_or(-1), log);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "the run did not end within {PATIENCE:?}: {}",
                    fs_err::read_to_string(&self.log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // A failed assertion must not leave the run behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A run whose events a test reads: its run directory (`events.jsonl`), or a run of a
/// server, read through its API (the server may keep its runs in PostgreSQL).
trait RunEvents {
    /// The run's events so far.
    fn events(&self) -> Vec<Value>;
}

impl RunEvents for PathBuf {
    fn events(&self) -> Vec<Value> {
        fs_err::read_to_string(self.join("events.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }
}

/// A run of a server.
struct ServedRun<'a> {
    server: &'a Server,
    run_id: &'a str,
}

impl RunEvents for ServedRun<'_> {
    fn events(&self) -> Vec<Value> {
        self.server
            .stored_events(self.run_id)
            .iter()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }
}

/// The events of `run` so far.
fn events(run: &impl RunEvents) -> Vec<Value> {
    run.events()
}

fn named(run: &impl RunEvents, name: &str) -> Vec<Value> {
    events(run)
        .into_iter()
        .filter(|event| event["event"] == name)
        .collect()
}

/// Waits until `run` has emitted an event `name` that `matches`.
fn wait_event(run: &impl RunEvents, name: &str, matches: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(event) = named(run, name).into_iter().find(|event| matches(event)) {
            return event;
        }
        assert!(
            Instant::now() < deadline,
            "no {name} event: {:#?}",
            events(run)
                .iter()
                .map(|event| event["event"].clone())
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the agent of stage `work` has started tool call `call_id`.
fn wait_tool_started(run: &impl RunEvents, call_id: &str) {
    wait_event(run, "Agent.ToolCallStarted", |event| {
        event["node_id"] == "work" && event["properties"]["call_id"] == call_id
    });
}

/// Waits until a stage of `node_id` has started.
fn wait_stage_started(run: &impl RunEvents, node_id: &str) {
    wait_event(run, "StageStarted", |event| event["node_id"] == node_id);
}

/// Every content block of a Messages request, with the role of its message, in order.
fn blocks(request: &Recorded) -> Vec<(String, Value)> {
    request.body["messages"]
        .as_array()
        .expect("a Messages request")
        .iter()
        .flat_map(|message| {
            let role = message["role"].as_str().unwrap_or_default().to_owned();
            message["content"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |block| (role.clone(), block))
        })
        .collect()
}

/// How often `text` occurs anywhere in a request's body.
fn occurrences(request: &Recorded, text: &str) -> usize {
    request.body.to_string().matches(text).count()
}

/// Asserts that `request` ends with the result of tool call `call_id` followed by one
/// user text block, `delivery`, which occurs nowhere else in the request.
fn assert_delivered_after_tool(request: &Recorded, call_id: &str, delivery: &str) {
    let blocks = blocks(request);
    let [.., (result_role, result), (text_role, text)] = blocks.as_slice() else {
        panic!("too few blocks: {blocks:#?}");
    };
    assert_eq!(result_role, "user", "{blocks:#?}");
    assert_eq!(result["type"], "tool_result", "{blocks:#?}");
    assert_eq!(result["tool_use_id"], call_id, "{blocks:#?}");
    assert!(
        result["content"]
            .as_str()
            .is_some_and(|output| output.contains("released")),
        "{result}"
    );
    assert_eq!(text_role, "user", "{blocks:#?}");
    assert_eq!(text["type"], "text", "{blocks:#?}");
    assert_eq!(text["text"], delivery, "{blocks:#?}");
    assert_eq!(
        occurrences(request, &serde_json::to_string(delivery).expect("text")),
        1,
        "{}",
        request.body
    );
}

/// The stage directory of `node_id`'s first visit in `run_dir`.
fn stage_dir(run_dir: &Path, node_id: &str) -> PathBuf {
    let suffix = format!("-{node_id}@1");
    fs_err::read_dir(run_dir.join("stages"))
        .expect("the stages directory")
        .map(|entry| entry.expect("an entry").path())
        .find(|path| path.to_string_lossy().ends_with(&suffix))
        .unwrap_or_else(|| panic!("no stage directory for {node_id}"))
}

#[test]
fn steering_reaches_the_agent_once_in_the_request_after_the_running_tool() {
    let steering = Steering::with("steer_once", AGENT);
    let gate = steering.gate("tool");
    steering
        .twin
        .enqueue([blocked_shell("toolu_1", &gate), Reply::text("Fixed.")]);
    let run = steering.start("s1", &[]);
    let run_dir = steering.run_dir("s1");
    wait_tool_started(&run_dir, "toolu_1");

    let output = steering.steer(&["s1", "Use the v2 API"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(stdout(&output), "queued for agent stage work of run s1\n");
    let queued = wait_event(&run_dir, "SteeringQueued", |_| true);
    assert_eq!(queued["node_id"], "work", "{queued}");
    assert_eq!(
        queued["properties"],
        json!({"source": "cli", "text": "Use the v2 API"}),
        "{queued}"
    );
    // The tool still runs: nothing was delivered, no request was sent meanwhile.
    assert_eq!(steering.twin.request_count(), 1);
    assert!(named(&run_dir, "Agent.SteeringDelivered").is_empty());

    steering.open("tool");
    let (status, log) = run.finish();
    assert_eq!(status, 0, "{log}");
    let requests = steering.twin.requests();
    assert_eq!(requests.len(), 2, "the tool call, then the answer");
    assert_eq!(occurrences(&requests[0], "Steering from"), 0);
    assert_delivered_after_tool(
        &requests[1],
        "toolu_1",
        "[Steering from cli] Use the v2 API",
    );

    let delivered = named(&run_dir, "Agent.SteeringDelivered");
    assert_eq!(delivered.len(), 1, "{delivered:#?}");
    assert_eq!(delivered[0]["node_id"], "work");
    assert_eq!(delivered[0]["properties"]["count"], 1);
    let position = |name: &str| {
        events(&run_dir)
            .iter()
            .position(|event| event["event"] == name)
            .unwrap_or_else(|| panic!("no {name}"))
    };
    assert!(position("Agent.ToolCallCompleted") < position("Agent.SteeringDelivered"));
    assert!(position("SteeringQueued") < position("Agent.ToolCallCompleted"));
    // The delivered text is in the stage's records like any prompt.
    let prompt =
        fs_err::read_to_string(stage_dir(&run_dir, "work").join("prompt.md")).expect("prompt.md");
    assert!(
        prompt.ends_with("\n\n[Steering from cli] Use the v2 API\n"),
        "{prompt}"
    );
}

#[test]
fn two_messages_sent_while_the_tool_runs_arrive_in_one_delivery() {
    let steering = Steering::with("steer_two", AGENT);
    let gate = steering.gate("tool");
    steering
        .twin
        .enqueue([blocked_shell("toolu_1", &gate), Reply::text("Fixed.")]);
    let run = steering.start("s2", &[]);
    let run_dir = steering.run_dir("s2");
    wait_tool_started(&run_dir, "toolu_1");
    for text in ["Use the v2 API", "and keep the tests"] {
        let output = steering.steer(&["s2", text]);
        assert_eq!(code(&output), 0, "{}", stderr(&output));
    }
    let deadline = Instant::now() + PATIENCE;
    while named(&run_dir, "SteeringQueued").len() < 2 {
        assert!(Instant::now() < deadline, "{:#?}", events(&run_dir));
        std::thread::sleep(Duration::from_millis(20));
    }
    steering.open("tool");
    let (status, log) = run.finish();
    assert_eq!(status, 0, "{log}");

    let queued: Vec<Value> = named(&run_dir, "SteeringQueued")
        .iter()
        .map(|event| event["properties"]["text"].clone())
        .collect();
    assert_eq!(
        queued,
        [json!("Use the v2 API"), json!("and keep the tests")]
    );
    let requests = steering.twin.requests();
    assert_eq!(requests.len(), 2);
    assert_delivered_after_tool(
        &requests[1],
        "toolu_1",
        "[Steering from cli] Use the v2 API\n\n[Steering from cli] and keep the tests",
    );
    let delivered = named(&run_dir, "Agent.SteeringDelivered");
    assert_eq!(delivered.len(), 1, "{delivered:#?}");
    assert_eq!(delivered[0]["properties"]["count"], 2);
}

/// `--next` while a command stage runs waits for the agent stage after it, which reads
/// the message in its first request; without `--next` the command exits 2, and once
/// the run has ended both forms do. The run is detached, as most steered runs are.
#[test]
fn next_waits_for_the_next_agent_stage_and_no_agent_stage_exits_2() {
    let steering = Steering::new("steer_next");
    steering
        .env
        .write("w.fabro", &command_then_agent(&steering.gate("prep")));
    steering.twin.enqueue([Reply::text("Fixed.")]);
    let credentials = steering.credentials();
    let output = steering
        .env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro", "--detach", "--run-id", "n1"])
        .envs(credentials)
        .output()
        .expect("fabro runs");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let run_dir = steering.run_dir("n1");
    wait_stage_started(&run_dir, "prep");

    let refused = steering.steer(&["n1", "Keep the public names"]);
    assert_eq!(code(&refused), 2, "{}", stderr(&refused));
    assert_eq!(
        stderr(&refused),
        "error: no agent stage is running in run n1\n"
    );
    assert_eq!(stdout(&refused), "");
    assert!(named(&run_dir, "SteeringQueued").is_empty());

    let next = steering.steer(&["n1", "Keep the public names", "--next"]);
    assert_eq!(code(&next), 0, "{}", stderr(&next));
    assert_eq!(stdout(&next), "queued for the next agent stage of run n1\n");
    let queued = wait_event(&run_dir, "SteeringQueued", |_| true);
    assert_eq!(queued["node_id"], Value::Null, "{queued}");
    assert_eq!(queued["properties"]["source"], "cli");
    assert_eq!(steering.twin.request_count(), 0);

    steering.open("prep");
    let follow = fabro(&steering.env, &["events", "n1", "--follow"]);
    assert_eq!(code(&follow), 0, "{}", stderr(&follow));
    wait_event(&run_dir, "WorkflowRunCompleted", |_| true);
    let requests = steering.twin.requests();
    assert_eq!(requests.len(), 1, "one answer");
    let blocks = blocks(&requests[0]);
    let texts: Vec<&Value> = blocks.iter().map(|(_, block)| &block["text"]).collect();
    assert!(
        texts
            .first()
            .and_then(|text| text.as_str())
            .is_some_and(|text| text.contains("Fix the parser")),
        "{blocks:#?}"
    );
    assert_eq!(
        texts.last(),
        Some(&&json!("[Steering from cli] Keep the public names")),
        "{blocks:#?}"
    );
    assert!(blocks.iter().all(|(role, _)| role == "user"), "{blocks:#?}");
    assert_eq!(occurrences(&requests[0], "Steering from"), 1);
    let delivered = named(&run_dir, "Agent.SteeringDelivered");
    assert_eq!(delivered.len(), 1, "{delivered:#?}");
    assert_eq!(delivered[0]["node_id"], "work");
    assert_eq!(delivered[0]["properties"]["count"], 1);

    // The run has ended: nothing runs, and no next agent stage will come.
    let late = steering.steer(&["n1", "Too late"]);
    assert_eq!(code(&late), 2, "{}", stderr(&late));
    assert_eq!(
        stderr(&late),
        "error: no agent stage is running in run n1\n"
    );
    let late_next = steering.steer(&["n1", "Too late", "--next"]);
    assert_eq!(code(&late_next), 2, "{}", stderr(&late_next));
    assert_eq!(stderr(&late_next), "error: run n1 is not running\n");
    let unknown = steering.steer(&["nope-nope", "Hello"]);
    assert_eq!(code(&unknown), 2, "{}", stderr(&unknown));
    assert_eq!(named(&run_dir, "SteeringQueued").len(), 1);
}

/// A `cli` agent (a fake `claude` waiting for a gate) cannot be steered: exit 2,
/// naming the stage and its backend; `--next` queues for a later steerable stage.
#[test]
fn a_cli_backend_stage_cannot_be_steered() {
    let workflow = r#"digraph steer {
  graph [goal="Fix the parser"]
  start [shape=Mdiamond]
  exit [shape=Msquare]
  work [backend="cli", provider="anthropic", model="sonnet", prompt="Fix the parser"]
  start -> work -> exit
}
"#;
    let steering = Steering::with("steer_cli_backend", workflow);
    let bin = side_dir(&steering.env, "bin");
    let started = steering.gate("started");
    let gate = steering.gate("claude");
    fake_program(
        &bin,
        "claude",
        &format!(
            r#"cat > /dev/null
touch '{started}'
{wait}
echo '{{"type":"system","subtype":"init","session_id":"s-1"}}'
echo '{{"type":"result","subtype":"success","result":"Fixed.","usage":{{"input_tokens":10,"output_tokens":2}}}}'
"#,
            started = started.display(),
            wait = wait_for_gate(&gate),
        ),
    );
    let path = path_with(&bin);
    let run = steering.start("c1", &[("PATH", &path)]);
    let run_dir = steering.run_dir("c1");
    let deadline = Instant::now() + PATIENCE;
    while !started.exists() {
        assert!(Instant::now() < deadline, "the fake claude never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let refused = steering.steer(&["c1", "Use the v2 API"]);
    assert_eq!(code(&refused), 2, "{}", stderr(&refused));
    assert_eq!(
        stderr(&refused),
        "error: agent stage work of run c1 runs the cli backend, which cannot be steered\n"
    );
    steering.open("claude");
    let (status, log) = run.finish();
    assert_eq!(status, 0, "{log}");
    assert!(named(&run_dir, "SteeringQueued").is_empty());
    assert!(named(&run_dir, "Agent.SteeringDelivered").is_empty());
    assert_eq!(steering.twin.request_count(), 0);
}

/// Over HTTP against a `fabro server`: `{"next": true}` while a command stage runs is
/// read in the agent's first request; `POST /api/v1/runs/{id}/steer` while the agent's
/// tool runs answers 202 and is read after the tool result, as `api`; `fabro steer
/// --server` the same; with no agent stage running 409 (and exit 2), an unknown run 404.
#[test]
fn steering_through_the_api_and_fabro_steer_server() {
    let steering = Steering::new("steer_api");
    steering
        .env
        .write("w.fabro", &command_then_agent(&steering.gate("prep")));
    steering.twin.enqueue([
        blocked_shell("toolu_1", &steering.gate("tool1")),
        blocked_shell("toolu_2", &steering.gate("tool2")),
        Reply::text("Fixed."),
    ]);
    let credentials = steering.credentials();
    let server_env: Vec<(&str, &str)> = credentials
        .iter()
        .map(|(name, value)| (*name, value.as_str()))
        .collect();
    let server = Server::start(&steering.env, &server_env);
    let url = format!("http://{}", server.address);
    let steer = |text: &str, next: bool| {
        let mut body = json!({"text": text});
        if next {
            body["next"] = json!(true);
        }
        server.request("POST", "/api/v1/runs/a1/steer", Some(&body))
    };
    let (status, body) = server.request(
        "POST",
        "/api/v1/runs",
        Some(&json!({"workflow": "w.fabro", "run_id": "a1"})),
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = server.request("GET", "/api/v1/runs/a1", None);
    assert_eq!(status, 200, "{body}");
    let run = ServedRun {
        server: &server,
        run_id: "a1",
    };
    wait_stage_started(&run, "prep");

    // A command stage runs.
    let (status, body) = steer("Too early", false);
    assert_eq!(status, 409, "{body}");
    let error: Value = serde_json::from_str(&body).expect("an error document");
    assert!(
        error
            .to_string()
            .contains("no agent stage is running in run a1"),
        "{body}"
    );
    let remote = fabro(
        &steering.env,
        &["steer", "a1", "Too early", "--server", &url],
    );
    assert_eq!(code(&remote), 2, "{}", stderr(&remote));
    assert_eq!(
        stderr(&remote),
        "error: no agent stage is running in run a1\n"
    );
    let (status, body) = steer("Read the README first", true);
    assert_eq!(status, 202, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("JSON"),
        json!({"run_id": "a1", "node_id": null})
    );
    steering.open("prep");

    // The agent's first tool runs.
    wait_tool_started(&run, "toolu_1");
    let (status, body) = steer("Use the v2 API", false);
    assert_eq!(status, 202, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("JSON"),
        json!({"run_id": "a1", "node_id": "work"})
    );
    steering.open("tool1");

    // Its second tool runs: `fabro steer --server`.
    wait_tool_started(&run, "toolu_2");
    let remote = fabro(
        &steering.env,
        &["steer", "a1", "Keep the tests", "--server", &url],
    );
    assert_eq!(code(&remote), 0, "{}", stderr(&remote));
    assert_eq!(stdout(&remote), "queued for agent stage work of run a1\n");
    steering.open("tool2");

    server.wait_status("a1", &["success"]);
    wait_event(&run, "WorkflowRunCompleted", |_| true);
    let requests = steering.twin.requests();
    assert_eq!(requests.len(), 3, "two tool calls, then the answer");
    let first = blocks(&requests[0]);
    assert_eq!(
        first.last().map(|(_, block)| block["text"].clone()),
        Some(json!("[Steering from api] Read the README first")),
        "{first:#?}"
    );
    assert_eq!(occurrences(&requests[0], "Steering from"), 1);
    assert_delivered_after_tool(
        &requests[1],
        "toolu_1",
        "[Steering from api] Use the v2 API",
    );
    assert_eq!(occurrences(&requests[1], "Steering from"), 2);
    assert_delivered_after_tool(
        &requests[2],
        "toolu_2",
        "[Steering from api] Keep the tests",
    );
    assert_eq!(occurrences(&requests[2], "Steering from"), 3);
    let delivered: Vec<Value> = named(&run, "Agent.SteeringDelivered")
        .iter()
        .map(|event| event["properties"]["count"].clone())
        .collect();
    assert_eq!(delivered, [json!(1), json!(1), json!(1)]);
    let sources: Vec<Value> = named(&run, "SteeringQueued")
        .iter()
        .map(|event| event["properties"]["source"].clone())
        .collect();
    assert_eq!(sources, [json!("api"), json!("api"), json!("api")]);

    // The run has ended.
    let (status, body) = steer("Too late", false);
    assert_eq!(status, 409, "{body}");
    let (status, body) = server.request(
        "POST",
        "/api/v1/runs/nope-nope/steer",
        Some(&json!({"text": "Hello"})),
    );
    assert_eq!(status, 404, "{body}");
}

/// SPEC 18.2: steering reaches the run a worker executes through the store. The server
/// that accepted the run executes nothing and shows it queued until a worker claims it;
/// the message is a row that the worker accepts on its notice, answered 202 naming the
/// stage, and delivered once after the running tool; before the run starts a message
/// for its next agent stage is kept for the worker, any other is refused (409), as it
/// is once the run has ended.
#[test]
fn steering_reaches_a_run_a_worker_executes_through_the_store() {
    let steering = Steering::with("steer_worker", AGENT);
    let Some(shared) = Shared::create("steer_worker", &steering.env) else {
        return;
    };
    steering.twin.enqueue([
        blocked_shell("toolu_1", &steering.gate("tool")),
        Reply::text("Fixed."),
    ]);
    let server = shared.queueing_server(&steering.env);
    post_queued(&server, &json!({"workflow": "w.fabro", "run_id": "sw1"}));
    // Queued and not claimed: listed, inspected, its (no) events read, not steerable.
    let (status, body) = server.request("GET", "/api/v1/runs/sw1", None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("JSON")["status"],
        "queued"
    );
    assert!(server.stored_events("sw1").is_empty());
    let (status, body) = server.request("GET", "/api/v1/runs", None);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"sw1\""), "{body}");
    let (status, body) = server.request(
        "POST",
        "/api/v1/runs/sw1/steer",
        Some(&json!({"text": "Too early"})),
    );
    assert_eq!(status, 409, "{body}");
    // For its next agent stage: kept until a worker starts the run.
    let (status, body) = server.request(
        "POST",
        "/api/v1/runs/sw1/steer",
        Some(&json!({"text": "Read the README first", "next": true})),
    );
    assert_eq!(status, 202, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("JSON"),
        json!({"run_id": "sw1", "node_id": null})
    );

    let run = ServedRun {
        server: &server,
        run_id: "sw1",
    };
    let steer = |text: &str| {
        server.request(
            "POST",
            "/api/v1/runs/sw1/steer",
            Some(&json!({"text": text})),
        )
    };
    let rows = "SELECT string_agg(state || ':' || source || ':' || text, ',' ORDER BY message_id) \
                FROM steering_messages WHERE run_id = 'sw1'";
    let (streamed, ended) = std::thread::scope(|scope| {
        // A stream opened while the run waits for a worker follows it to its end.
        let until = Some(Instant::now() + PATIENCE);
        let server = &server;
        let follower = scope.spawn(move || {
            crate::server_stream::connect_until(server, "sw1", None, usize::MAX, until)
        });
        let _worker = Worker::start_with(&steering.env, &shared, "w1", 1, &steering.credentials());
        server.wait_status("sw1", &["running"]);
        wait_tool_started(&run, "toolu_1");

        let (status, body) = steer("Use the v2 API");
        assert_eq!(status, 202, "{body}");
        assert_eq!(
            serde_json::from_str::<Value>(&body).expect("JSON"),
            json!({"run_id": "sw1", "node_id": "work"})
        );
        assert_eq!(
            shared.query(rows),
            "delivered:api:Read the README first,queued:api:Use the v2 API"
        );
        let queued = wait_event(&run, "SteeringQueued", |event| {
            event["properties"]["text"] == "Use the v2 API"
        });
        assert_eq!(queued["node_id"], "work", "{queued}");
        assert_eq!(steering.twin.request_count(), 1, "the tool still runs");

        steering.open("tool");
        server.wait_status("sw1", &["success"]);
        follower.join().expect("the stream is followed")
    });
    let requests = steering.twin.requests();
    assert_eq!(requests.len(), 2, "the tool call, then the answer");
    let first = blocks(&requests[0]);
    assert_eq!(
        first.last().map(|(_, block)| block["text"].clone()),
        Some(json!("[Steering from api] Read the README first")),
        "{first:#?}"
    );
    assert_delivered_after_tool(
        &requests[1],
        "toolu_1",
        "[Steering from api] Use the v2 API",
    );
    let delivered: Vec<Value> = named(&run, "Agent.SteeringDelivered")
        .iter()
        .map(|event| event["properties"]["count"].clone())
        .collect();
    assert_eq!(delivered, [json!(1), json!(1)]);
    let both = "delivered:api:Read the README first,delivered:api:Use the v2 API";
    assert_eq!(shared.query(rows), both);
    assert!(ended, "{streamed:?}");
    let names: Vec<&str> = streamed.iter().map(|event| event.1.as_str()).collect();
    let stored: Vec<String> = events(&run)
        .iter()
        .map(|event| event["event"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(names, stored, "every event once, in order");
    assert_eq!(names.last(), Some(&"WorkflowRunCompleted"));

    // The worker is listed with the run (SPEC 18.2).
    let listed = fabro(
        &steering.env,
        &["runs", "--server", &server.url(), "--json"],
    );
    assert_eq!(code(&listed), 0, "{}", stderr(&listed));
    let listed: Value = serde_json::from_str(&stdout(&listed)).expect("JSON");
    assert_eq!(listed[0]["run_id"], "sw1", "{listed}");
    assert_eq!(listed[0]["worker"], "w1", "{listed}");

    let (status, body) = steer("Too late");
    assert_eq!(status, 409, "{body}");
    assert!(
        body.contains("no agent stage is running in run sw1"),
        "{body}"
    );
    assert_eq!(shared.query(rows), both);
}
