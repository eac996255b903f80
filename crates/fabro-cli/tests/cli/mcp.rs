//! MCP servers (SPEC 19.1, issue 34 acceptance 1 and 2) against real servers nobody
//! here wrote: `@modelcontextprotocol/server-everything` over stdio and Streamable HTTP
//! and `@modelcontextprotocol/server-filesystem` over stdio, installed by `.ci/run` into
//! `target/mcp` (with `CI` set, a missing install fails). The twin scripts the model's
//! tool calls; the next request to it must carry the tool's result. Every test gives
//! its servers an argument naming its own temporary directory, so the scan of `/proc`
//! for leftover processes sees only its own.

use std::path::{Path, PathBuf};
use std::process::Output;

use fabro_test_support::TestEnv;
use fabro_twin::{Recorded, Reply, Turn, Twin};
use serde_json::Value;

use crate::backends::{events, events_named, git, json, stage_dir};
use crate::{code, stderr};

const KEY: &str = "sk-ant-FAKE-mcp-tests-5512";

/// `target/mcp/node_modules/.bin/{name}`, or a skip (a failure where `CI` is set).
pub(crate) fn installed(test: &str, name: &str) -> Option<PathBuf> {
    let path = fabro_test_support::workspace_root()
        .join("target/mcp/node_modules/.bin")
        .join(name);
    if path.exists() {
        Some(path)
    } else {
        fabro_test_support::skip(
            test,
            &format!(
                "{} is missing: run .ci/run to install the MCP servers",
                path.display()
            ),
        );
        None
    }
}

/// One agent node `work` on the twin's Anthropic wire.
pub(crate) const WORKFLOW: &str = r#"digraph w {
    graph [default_model="sonnet"]
    start [shape=Mdiamond]
    exit [shape=Msquare]
    work [shape=box, prompt="Use the tools"]
    start -> work -> exit
}
"#;

/// A repository holding `workflow`, `run.toml` and `notes.txt`.
pub(crate) fn repository(env: &TestEnv, workflow: &str, run_toml: &str) {
    git(env, &["init", "-q", "-b", "main"]);
    env.write("w.fabro", workflow);
    env.write("run.toml", run_toml);
    env.write("notes.txt", "the notes of the worktree\n");
    git(env, &["add", "."]);
    git(env, &["commit", "-q", "-m", "init"]);
}

/// A twin answering `turns` in order, then a 400.
pub(crate) fn twin(runtime: &tokio::runtime::Runtime, turns: Vec<Reply>) -> Twin {
    let twin = runtime.block_on(Twin::start()).expect("the twin starts");
    twin.enqueue(turns);
    twin.set_fallback(Reply::bad_request());
    twin
}

/// A turn calling `tool` with `arguments`.
pub(crate) fn call(id: &str, tool: &str, arguments: &Value) -> Reply {
    Reply::Turn(Turn::text("").with_tool_call(id, tool, &arguments.to_string()))
}

/// `fabro run w.fabro --run-id r1` against `twin`, with `vars`.
pub(crate) fn run(env: &TestEnv, twin: &Twin, vars: &[(&str, &str)]) -> Output {
    let mut command = env.command(env!("CARGO_BIN_EXE_fabro"));
    command
        .args(["run", "w.fabro", "--run-id", "r1"])
        .env("ANTHROPIC_API_KEY", KEY)
        .env("ANTHROPIC_BASE_URL", twin.base_url());
    for (name, value) in vars {
        command.env(name, value);
    }
    command.output().expect("fabro runs")
}

/// The names of the tools a request offered.
pub(crate) fn offered(request: &Recorded) -> Vec<String> {
    request.body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|tool| tool["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The `Agent.ToolCallCompleted` events.
fn completed(env: &TestEnv) -> Vec<Value> {
    events_named(&events(env), "Agent.ToolCallCompleted")
        .into_iter()
        .map(|event| event["properties"].clone())
        .collect()
}

/// The pids of processes whose command line contains `marker` (a path unique to the
/// test), other than this test process.
fn processes_with(marker: &str) -> Vec<String> {
    let own = std::process::id().to_string();
    let mut found = Vec::new();
    for entry in fs_err::read_dir("/proc").expect("/proc").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.chars().all(|c| c.is_ascii_digit()) || name == own {
            continue;
        }
        let Ok(bytes) = fs_err::read(entry.path().join("cmdline")) else {
            continue;
        };
        if String::from_utf8_lossy(&bytes).contains(marker) {
            found.push(format!(
                "{name}: {}",
                String::from_utf8_lossy(&bytes).replace('\0', " ")
            ));
        }
    }
    found
}

/// A marker naming the test's directory, passed to its servers as an extra argument.
fn marker(env: &TestEnv) -> String {
    env.work_dir().display().to_string()
}

fn assert_succeeded(output: &Output) {
    assert_eq!(code(output), 0, "{}", stderr(output));
}

/// Acceptance 1 (stdio): `mcp__everything__echo` runs and its result is in the next
/// request; the events name the server.
#[test]
fn a_stdio_server_tool_result_reaches_the_model() {
    let Some(server) = installed("mcp_stdio_echo", "mcp-server-everything") else {
        return;
    };
    let env = TestEnv::new("mcp_stdio_echo");
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = twin(
        &runtime,
        vec![
            call(
                "toolu_1",
                "mcp__everything__echo",
                &serde_json::json!({"message": "hello from the model"}),
            ),
            Reply::text("Echoed."),
        ],
    );
    repository(
        &env,
        WORKFLOW,
        &format!(
            "[mcp_servers.everything]\ncommand = [\"{}\", \"stdio\", \"{}\"]\n",
            server.display(),
            marker(&env)
        ),
    );
    let output = run(&env, &twin, &[]);
    assert_succeeded(&output);
    let requests = twin.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        offered(&requests[0]).contains(&"mcp__everything__echo".to_owned()),
        "{:?}",
        offered(&requests[0])
    );
    let next = requests[1].body.to_string();
    assert!(next.contains("Echo: hello from the model"), "{next}");
    let completed = completed(&env);
    assert_eq!(completed[0]["server"], "everything");
    assert_eq!(completed[0]["is_error"], false);
    assert!(
        processes_with(&marker(&env)).is_empty(),
        "server left behind"
    );
}

/// Acceptance 1 (filesystem): the filesystem server reads a file of the run's
/// worktree; a missing file is an `isError` result the model sees, and the stage goes on.
#[test]
fn the_filesystem_server_reads_the_worktree_and_reports_errors() {
    let Some(server) = installed("mcp_filesystem", "mcp-server-filesystem") else {
        return;
    };
    let env = TestEnv::new("mcp_filesystem");
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = twin(
        &runtime,
        vec![
            call(
                "toolu_1",
                "mcp__files__read_text_file",
                &serde_json::json!({"path": "notes.txt"}),
            ),
            call(
                "toolu_2",
                "mcp__files__read_text_file",
                &serde_json::json!({"path": "missing.txt"}),
            ),
            Reply::text("Read."),
        ],
    );
    repository(
        &env,
        WORKFLOW,
        &format!(
            "[mcp_servers.files]\ncommand = [\"{}\", \".\", \"{}\"]\n",
            server.display(),
            marker(&env)
        ),
    );
    let output = run(&env, &twin, &[]);
    assert_succeeded(&output);
    let requests = twin.requests();
    assert_eq!(requests.len(), 3);
    let second = requests[1].body.to_string();
    assert!(second.contains("the notes of the worktree"), "{second}");
    let completed = completed(&env);
    assert_eq!(completed[0]["is_error"], false);
    assert_eq!(completed[1]["is_error"], true, "{}", completed[1]);
    let third = requests[2].body.to_string();
    assert!(third.contains("missing.txt"), "{third}");
    assert_eq!(
        json(&stage_dir(&env, "work").join("status.json"))["status"],
        "success"
    );
}

/// Acceptance 1 (Streamable HTTP): server-everything listening on a loopback port;
/// the `${VAR}` header's value is sent and never recorded.
#[test]
fn an_http_server_tool_result_reaches_the_model() {
    let Some(server) = installed("mcp_http_echo", "mcp-server-everything") else {
        return;
    };
    let env = TestEnv::new("mcp_http_echo");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let mut http = std::process::Command::new(&server)
        .args(["streamableHttp", &marker(&env)])
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the HTTP server starts");
    wait_for_listening(&mut http);
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = twin(
        &runtime,
        vec![
            call(
                "toolu_1",
                "mcp__remote__echo",
                &serde_json::json!({"message": "over http"}),
            ),
            Reply::text("Echoed."),
        ],
    );
    let token = "mcp-header-secret-83461";
    repository(
        &env,
        WORKFLOW,
        &format!(
            "[mcp_servers.remote]\ntype = \"http\"\nurl = \"http://127.0.0.1:{port}/mcp\"\nheaders = {{ Authorization = \"Bearer ${{MCP_REMOTE_TOKEN}}\" }}\n"
        ),
    );
    let output = run(&env, &twin, &[("MCP_REMOTE_TOKEN", token)]);
    let _ = http.kill();
    let _ = http.wait();
    assert_succeeded(&output);
    let requests = twin.requests();
    assert_eq!(requests.len(), 2);
    let next = requests[1].body.to_string();
    assert!(next.contains("Echo: over http"), "{next}");
    let run_dir = env.fabro_home().join("scratch/r1");
    let recorded = fs_err::read_to_string(run_dir.join("events.jsonl")).expect("events")
        + &fs_err::read_to_string(run_dir.join("config.json")).unwrap_or_default();
    assert!(!recorded.contains(token), "the header value was recorded");
}

/// Waits until the HTTP server says it listens (its first stderr line).
fn wait_for_listening(child: &mut std::process::Child) {
    use std::io::BufRead;
    let stderr = child.stderr.take().expect("piped stderr");
    let mut line = String::new();
    std::io::BufReader::new(stderr)
        .read_line(&mut line)
        .expect("the server writes a line");
    assert!(line.contains("listening"), "{line}");
}

/// Acceptance 2: a server that cannot start is `mcp_unavailable` and the stage runs
/// without its tools; one that never answers its handshake ends at
/// `startup_timeout_secs` the same way; no process is left.
#[test]
fn unavailable_servers_are_warnings_and_the_stage_runs_without_them() {
    let env = TestEnv::new("mcp_unavailable");
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = twin(&runtime, vec![Reply::text("Done without them.")]);
    let marker = marker(&env);
    repository(
        &env,
        WORKFLOW,
        &format!(
            "[mcp_servers.missing]\ncommand = [\"{marker}/no-such-server\"]\n\n[mcp_servers.silent]\ncommand = [\"sh\", \"-c\", \"sleep 30\", \"{marker}\"]\nstartup_timeout_secs = 1\n"
        ),
    );
    let started = std::time::Instant::now();
    let output = run(&env, &twin, &[]);
    assert_succeeded(&output);
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    let events = events(&env);
    let warnings: Vec<&Value> = events_named(&events, "Warning")
        .into_iter()
        .filter(|event| event["properties"]["code"] == "mcp_unavailable")
        .collect();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert_eq!(warnings[0]["properties"]["server"], "missing");
    assert_eq!(warnings[1]["properties"]["server"], "silent");
    let reason = warnings[1]["properties"]["reason"]
        .as_str()
        .unwrap_or_default();
    assert!(
        reason.contains("no answer to the handshake within 1s"),
        "{reason}"
    );
    let requests = twin.requests();
    assert!(offered(&requests[0])
        .iter()
        .all(|tool| !tool.starts_with("mcp__")));
    assert!(
        processes_with(&marker).is_empty(),
        "{:?}",
        processes_with(&marker)
    );
}

/// Acceptance 2: with `required = true`, a server that exits during the handshake
/// fails the stage `deterministic` (routed on to exit: a `partial_success` run, exit 3).
#[test]
fn a_required_server_that_exits_fails_the_stage() {
    let env = TestEnv::new("mcp_required");
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = twin(&runtime, vec![Reply::text("never asked")]);
    let marker = marker(&env);
    repository(
        &env,
        WORKFLOW,
        &format!(
            "[mcp_servers.tracker]\ncommand = [\"sh\", \"-c\", \"echo going away >&2; exit 1\", \"{marker}\"]\nrequired = true\n"
        ),
    );
    let output = run(&env, &twin, &[]);
    assert_eq!(code(&output), 3, "{}", stderr(&output));
    let status = json(&stage_dir(&env, "work").join("status.json"));
    assert_eq!(status["status"], "fail");
    assert_eq!(status["failure_class"], "deterministic", "{status}");
    let reason = status["failure_reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("MCP server 'tracker' is unavailable"),
        "{reason}"
    );
    assert!(reason.contains("going away"), "{reason}");
    assert!(twin.requests().is_empty());
    assert!(processes_with(&marker).is_empty());
}

/// Acceptance 2: a tool call that hangs ends at `tool_timeout_secs` as a tool error,
/// the stage completes, and the server is gone when the run ends.
#[test]
fn a_hanging_tool_call_ends_at_its_timeout() {
    let Some(server) = installed("mcp_tool_timeout", "mcp-server-everything") else {
        return;
    };
    let env = TestEnv::new("mcp_tool_timeout");
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = twin(
        &runtime,
        vec![
            call(
                "toolu_1",
                "mcp__everything__trigger_long_running_operation",
                &serde_json::json!({"duration": 60, "steps": 1}),
            ),
            Reply::text("Gave up."),
        ],
    );
    let marker = marker(&env);
    repository(
        &env,
        WORKFLOW,
        &format!(
            "[mcp_servers.everything]\ncommand = [\"{}\", \"stdio\", \"{marker}\"]\nstartup_timeout_secs = 20\ntool_timeout_secs = 1\n",
            server.display()
        ),
    );
    let started = std::time::Instant::now();
    let output = run(&env, &twin, &[]);
    assert_succeeded(&output);
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    let completed = completed(&env);
    assert_eq!(completed[0]["is_error"], true);
    let text = completed[0]["output"].as_str().unwrap_or_default();
    assert!(text.contains("timed out after 1s"), "{text}");
    assert!(twin.requests()[1]
        .body
        .to_string()
        .contains("timed out after 1s"));
    assert!(
        processes_with(&marker).is_empty(),
        "{:?}",
        processes_with(&marker)
    );
}

/// Under `agent_isolation = "workspace"` (the default) a stdio server cannot write
/// outside the working tree, even where its own rules allow it.
#[test]
fn a_confined_stdio_server_cannot_write_outside_the_worktree() {
    let Some(server) = installed("mcp_confined", "mcp-server-filesystem") else {
        return;
    };
    let env = TestEnv::new("mcp_confined");
    let outside = crate::backends::side_dir(&env, "outside");
    let target = outside.join("escaped.txt");
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = twin(
        &runtime,
        vec![
            call(
                "toolu_1",
                "mcp__files__write_file",
                &serde_json::json!({"path": target.display().to_string(), "content": "out"}),
            ),
            Reply::text("Tried."),
        ],
    );
    repository(
        &env,
        WORKFLOW,
        &format!(
            "[mcp_servers.files]\ncommand = [\"{}\", \".\", \"{}\"]\n",
            server.display(),
            outside.display()
        ),
    );
    let output = run(&env, &twin, &[]);
    assert_succeeded(&output);
    let completed = completed(&env);
    assert_eq!(completed[0]["is_error"], true, "{}", completed[0]);
    // Refused by the kernel (Landlock), not by the server's own directory rules.
    let text = completed[0]["output"]
        .as_str()
        .unwrap_or_default()
        .to_lowercase();
    assert!(
        text.contains("eacces") || text.contains("permission denied"),
        "{text}"
    );
    assert!(
        !Path::new(&target).exists(),
        "the confined server wrote outside"
    );
}

/// A `${VAR}` header naming an unset variable makes the server unavailable, naming the
/// variable; with `required` the stage fails before any request.
#[test]
fn an_unset_header_variable_makes_the_server_unavailable() {
    let env = TestEnv::new("mcp_unset_header");
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = twin(&runtime, vec![Reply::text("never asked")]);
    repository(
        &env,
        WORKFLOW,
        "[mcp_servers.tracker]\ntype = \"http\"\nurl = \"http://127.0.0.1:9/mcp\"\nheaders = { Authorization = \"Bearer ${MCP_UNSET_TEST_TOKEN}\" }\nrequired = true\n",
    );
    let output = run(&env, &twin, &[]);
    assert_eq!(code(&output), 3, "{}", stderr(&output));
    let events = events(&env);
    let warning = events_named(&events, "Warning")
        .into_iter()
        .find(|event| event["properties"]["code"] == "mcp_unavailable")
        .expect("an mcp_unavailable warning");
    assert_eq!(
        warning["properties"]["reason"],
        "header Authorization needs the unset variable MCP_UNSET_TEST_TOKEN"
    );
    assert!(twin.requests().is_empty());
}
