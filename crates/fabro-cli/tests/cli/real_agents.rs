//! The real agent programs as `cli` backends (issue 29), installed by `.ci/run` into
//! `target/agents` and pointed at the twin through their documented base-URL
//! settings, with telemetry and update checks off. Each test runs `fabro run` with
//! fabro's default settings (`agent_isolation = "workspace"`): the scripted model calls
//! a tool that writes a file, then answers. With `CI` set, a missing install fails.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fabro_test_support::TestEnv;
use fabro_twin::{Reply, Turn, Twin};
use serde_json::Value;

use crate::backends::{git, json, read, repository_with, run_dir, stage_dir};
use crate::code;

/// The key the programs send to the twin; it must appear nowhere fabro writes.
pub(crate) const KEY: &str = "sk-real-agent-key-5f2c9e0b7d41a3";

/// Longest a real program's run may take before the test fails (never hangs).
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// `target/agents/node_modules/.bin/{name}`, or a skip (a failure under `CI`).
pub(crate) fn installed(test: &str, name: &str) -> Option<PathBuf> {
    let path = fabro_test_support::workspace_root()
        .join("target/agents/node_modules/.bin")
        .join(name);
    if path.exists() {
        Some(path)
    } else {
        fabro_test_support::skip(
            test,
            &format!(
                "{} is missing: run .ci/run to install the agents",
                path.display()
            ),
        );
        None
    }
}

/// `fabro run w.fabro --run-id r1` with `program`'s directory first on `PATH`, the
/// extra variables, and a time limit.
pub(crate) fn run_fabro(
    env: &TestEnv,
    program: &Path,
    vars: &[(&str, String)],
) -> std::process::Output {
    let bin = program.parent().expect("bin directory");
    let host = std::env::var("PATH").unwrap_or_default();
    let mut command = env.command(env!("CARGO_BIN_EXE_fabro"));
    command
        .args(["run", "w.fabro", "--run-id", "r1"])
        .env("PATH", format!("{}:{host}", bin.display()));
    for (name, value) in vars {
        command.env(name, value);
    }
    let child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("fabro starts");
    let id = child.id();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(child.wait_with_output());
    });
    match receiver.recv_timeout(RUN_LIMIT) {
        Ok(output) => output.expect("fabro ran"),
        Err(_) => {
            // SIGKILL to fabro; its stage processes die with their group.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(i32::try_from(id).unwrap_or(i32::MAX)),
                nix::sys::signal::Signal::SIGKILL,
            );
            panic!("fabro did not finish within {RUN_LIMIT:?}");
        }
    }
}

/// Every file under `dir`, recursively (the run directory and the repository).
fn files_under(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = fs_err::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files_under(&path, found);
        } else {
            found.push(path);
        }
    }
}

/// Acceptance 1: the stage succeeded, `file` is on the run branch and in
/// `files_touched`, the recorded model is `model`, and the key is nowhere.
pub(crate) fn assert_wrote(
    env: &TestEnv,
    output: &std::process::Output,
    file: &str,
    model: &str,
) -> Value {
    let stage = stage_dir(env, "work");
    let stderr = fs_err::read_to_string(stage.join("stderr.log")).unwrap_or_default();
    assert_eq!(
        code(output),
        0,
        "stdout: {}\nstderr: {}\nstderr.log: {stderr}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let status = json(&stage.join("status.json"));
    assert_eq!(
        status["status"], "success",
        "{status}\nstderr.log: {stderr}"
    );
    assert_eq!(
        status["files_touched"],
        serde_json::json!([file]),
        "{status}"
    );
    assert_eq!(status["model"], model, "{status}");
    assert!(!git(env, &["show", &format!("fabro/run/r1:{file}")]).is_empty());
    let mut files = Vec::new();
    files_under(&run_dir(env), &mut files);
    files_under(&env.work_dir().join(".git"), &mut files);
    for path in files {
        let bytes = fs_err::read(&path).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(KEY),
            "the key leaked into {}",
            path.display()
        );
    }
    // Git objects are compressed: every commit of every ref, messages and contents.
    let history = git(env, &["log", "--all", "-p", "--format=%B"]);
    assert!(!history.is_empty());
    assert!(!history.contains(KEY), "the key leaked into a commit");
    status
}

/// The workflow: one `cli` agent node of `provider` with `model`.
/// Queues the text-then-tool scenario (decision 67): a plan that says fail with `tool`
/// called as `id` with `arguments`, then `DONE`; text before the tool call is not the
/// response.
pub(crate) fn plan_then_tool(twin: &Twin, id: &str, tool: &str, arguments: &Value) {
    twin.enqueue([
        Reply::Turn(
            Turn::text("Plan: write the file. {\"outcome\": \"fail\"}").with_tool_call(
                id,
                tool,
                &arguments.to_string(),
            ),
        ),
        Reply::text("DONE {\"outcome\": \"success\"}"),
    ]);
    twin.set_fallback(Reply::text("DONE"));
}

fn workflow(provider: &str, model: &str) -> String {
    format!(
        r#"digraph real {{
    start [shape=Mdiamond]
    exit [shape=Msquare]
    work [shape=box, backend="cli", provider="{provider}", model="{model}", max_retries=0, prompt="Write hello.txt"]
    start -> work -> exit
}}
"#
    )
}

/// The environment of a real claude: the twin as its API, no telemetry, no update
/// check, no retries (the faults must reach fabro at once).
pub(crate) fn claude_vars(twin: &Twin) -> Vec<(&'static str, String)> {
    vec![
        ("ANTHROPIC_BASE_URL", twin.base_url()),
        ("ANTHROPIC_API_KEY", KEY.to_owned()),
        ("DISABLE_TELEMETRY", "1".to_owned()),
        ("DISABLE_AUTOUPDATER", "1".to_owned()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
        ("CLAUDE_CODE_MAX_RETRIES", "0".to_owned()),
    ]
}

#[test]
fn claude_writes_a_file_through_the_cli_backend() {
    let test = "claude_writes_a_file_through_the_cli_backend";
    let Some(claude) = installed(test, "claude") else {
        return;
    };
    let env = TestEnv::new(test);
    repository_with(&env, &workflow("anthropic", "claude-sonnet-4-5"));
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = runtime.block_on(Twin::start()).expect("the twin starts");
    let write = serde_json::json!({"command": "echo hello > hello.txt", "description": "write"});
    // Decision 67: text before the tool call is not the response.
    plan_then_tool(&twin, "toolu_1", "Bash", &write);
    let output = run_fabro(&env, &claude, &claude_vars(&twin));
    assert_wrote(&env, &output, "hello.txt", "claude-sonnet-4-5");
    let stage = stage_dir(&env, "work");
    assert!(read(&stage.join("response.md")).starts_with("DONE"));
    let requests = twin.requests();
    assert!(
        requests
            .iter()
            .all(|request| request.header("x-api-key") == Some(KEY)),
        "claude used the key fabro gave it"
    );
}

#[test]
fn a_claude_that_meets_a_500_reports_its_own_error() {
    let test = "a_claude_that_meets_a_500_reports_its_own_error";
    let Some(claude) = installed(test, "claude") else {
        return;
    };
    let env = TestEnv::new(test);
    repository_with(&env, &workflow("anthropic", "claude-sonnet-4-5"));
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = runtime.block_on(Twin::start()).expect("the twin starts");
    twin.set_fallback(Reply::server_error());
    let output = run_fabro(&env, &claude, &claude_vars(&twin));
    assert_eq!(
        code(&output),
        3,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let status = json(&stage_dir(&env, "work").join("status.json"));
    let reason = status["failure_reason"].as_str().unwrap_or_default();
    // Claude's own words, from its result record (it prints nothing on stderr).
    assert!(
        reason.starts_with("claude exited with code 1: API Error: 500"),
        "{reason}"
    );
    assert_eq!(status["failure_class"], "deterministic");
    assert_eq!(status["usage"], Value::Null);
}

/// Issue 29 acceptance 4: a 429 reaches fabro as claude's own words too (claude writes
/// its errors to stdout; what it writes on stderr, if anything, is kept redacted).
#[test]
fn a_rate_limited_claude_reports_its_own_error() {
    let test = "a_rate_limited_claude_reports_its_own_error";
    let Some(claude) = installed(test, "claude") else {
        return;
    };
    let env = TestEnv::new(test);
    repository_with(&env, &workflow("anthropic", "claude-sonnet-4-5"));
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = runtime.block_on(Twin::start()).expect("the twin starts");
    twin.set_fallback(Reply::rate_limited(Some("0")));
    let output = run_fabro(&env, &claude, &claude_vars(&twin));
    assert_eq!(
        code(&output),
        3,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stage = stage_dir(&env, "work");
    let status = json(&stage.join("status.json"));
    let reason = status["failure_reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("claude exited with code 1: API Error: ")
            && reason.contains("(429)")
            && reason.contains("rate limited, slow down"),
        "{reason}"
    );
    // Whatever claude wrote on stderr (nothing, here) is kept redacted.
    let stderr_log = stage.join("stderr.log");
    assert!(!stderr_log.exists() || !read(&stderr_log).contains(KEY));
}

/// A real codex's configuration: `~/.codex/config.toml` (its default `CODEX_HOME`,
/// writable under fabro's defaults) with the twin as a Responses provider, no retries
/// and no analytics; its key comes from `OPENAI_API_KEY`. For codex-acp, which fabro
/// cannot give `--model` or `--sandbox`, the model and codex's own sandbox off
/// (decision 68: fabro is its sandbox; codex's bubblewrap cannot start inside it).
pub(crate) fn codex_vars(env: &TestEnv, twin: &Twin) -> Vec<(&'static str, String)> {
    let home = env.work_dir().parent().expect("root").join("home/.codex");
    fs_err::create_dir_all(&home).expect("codex home");
    fs_err::write(
        home.join("config.toml"),
        format!(
            r#"model_provider = "twin"
model = "gpt-5.1-codex"
sandbox_mode = "danger-full-access"
[model_providers.twin]
name = "twin"
base_url = "{}/v1"
wire_api = "responses"
env_key = "OPENAI_API_KEY"
request_max_retries = 0
stream_max_retries = 0
[analytics]
enabled = false
"#,
            twin.base_url()
        ),
    )
    .expect("codex config");
    vec![("OPENAI_API_KEY", KEY.to_owned())]
}

#[test]
fn codex_writes_a_file_through_the_cli_backend() {
    let test = "codex_writes_a_file_through_the_cli_backend";
    let Some(codex) = installed(test, "codex") else {
        return;
    };
    let env = TestEnv::new(test);
    repository_with(&env, &workflow("openai", "gpt-5.1-codex"));
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = runtime.block_on(Twin::start()).expect("the twin starts");
    // codex 0.171's shell tool: `exec_command {cmd}`.
    let write = serde_json::json!({"cmd": "echo hello > hello.txt", "yield_time_ms": 5000});
    plan_then_tool(&twin, "call_1", "exec_command", &write);
    let vars = codex_vars(&env, &twin);
    let output = run_fabro(&env, &codex, &vars);
    assert_wrote(&env, &output, "hello.txt", "gpt-5.1-codex");
    assert!(read(&stage_dir(&env, "work").join("response.md")).starts_with("DONE"));
}

/// A real gemini's configuration: `~/.gemini/settings.json` choosing the API key as its
/// auth method (else it exits 41) with one attempt per request (the faults must reach
/// fabro at once), the twin as `GOOGLE_GEMINI_BASE_URL` and the key in
/// `GEMINI_API_KEY`.
pub(crate) fn gemini_vars(env: &TestEnv, twin: &Twin) -> Vec<(&'static str, String)> {
    let home = env.work_dir().parent().expect("root").join("home/.gemini");
    fs_err::create_dir_all(&home).expect("gemini home");
    fs_err::write(
        home.join("settings.json"),
        r#"{"security": {"auth": {"selectedType": "gemini-api-key"}},
            "general": {"maxAttempts": 1, "disableAutoUpdate": true, "disableUpdateNag": true},
            "privacy": {"usageStatisticsEnabled": false},
            "telemetry": {"enabled": false}}"#,
    )
    .expect("gemini settings");
    vec![
        ("GOOGLE_GEMINI_BASE_URL", twin.base_url()),
        ("GEMINI_API_KEY", KEY.to_owned()),
    ]
}

#[test]
fn gemini_writes_a_file_through_the_cli_backend() {
    let test = "gemini_writes_a_file_through_the_cli_backend";
    let Some(gemini) = installed(test, "gemini") else {
        return;
    };
    let env = TestEnv::new(test);
    repository_with(&env, &workflow("gemini", "gemini-2.5-flash"));
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = runtime.block_on(Twin::start()).expect("the twin starts");
    let write = serde_json::json!({"file_path": "hello.txt", "content": "hello\n"});
    plan_then_tool(&twin, "call_1", "write_file", &write);
    let vars = gemini_vars(&env, &twin);
    let output = run_fabro(&env, &gemini, &vars);
    assert_wrote(&env, &output, "hello.txt", "gemini-2.5-flash");
    assert!(read(&stage_dir(&env, "work").join("response.md")).starts_with("DONE"));
    assert!(
        twin.requests()
            .iter()
            .all(|request| request.header("x-goog-api-key") == Some(KEY)),
        "gemini used the key fabro gave it"
    );
}

/// Issue 29 acceptance 2: under the default `workspace` isolation a real claude, codex
/// or gemini cannot write outside the run's worktree: its shell gets the kernel's
/// `Permission denied`, which reaches the model, and the file does not exist.
#[test]
fn confined_cli_agents_cannot_write_outside_their_worktree() {
    let test = "confined_cli_agents_cannot_write_outside_their_worktree";
    let (Some(claude), Some(codex), Some(gemini)) = (
        installed(test, "claude"),
        installed(test, "codex"),
        installed(test, "gemini"),
    ) else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    for (program, provider, model, tool) in [
        (&claude, "anthropic", "claude-sonnet-4-5", "Bash"),
        (&codex, "openai", "gpt-5.1-codex", "exec_command"),
        (&gemini, "gemini", "gemini-2.5-flash", "run_shell_command"),
    ] {
        let env = TestEnv::new(&format!("{test}_{provider}"));
        repository_with(&env, &workflow(provider, model));
        let twin = runtime.block_on(Twin::start()).expect("the twin starts");
        let outside = script_escape(&env, &twin, tool);
        let vars = match provider {
            "anthropic" => claude_vars(&twin),
            "openai" => codex_vars(&env, &twin),
            _ => gemini_vars(&env, &twin),
        };
        let output = run_fabro(&env, program, &vars);
        assert_escape_refused(provider, &output, &outside, &twin);
    }
}

/// Scripts the program's shell `tool` to write into the user's checkout (outside the
/// run's worktree: fabro works in its own), then `DONE`; returns the path it writes.
pub(crate) fn script_escape(env: &TestEnv, twin: &Twin, tool: &str) -> PathBuf {
    let outside = env.work_dir().join("escaped.txt");
    let command = format!("echo escaped > {}", outside.display());
    let arguments = match tool {
        "exec_command" => serde_json::json!({"cmd": command, "yield_time_ms": 5000}),
        _ => serde_json::json!({"command": command, "description": "write outside"}),
    };
    twin.enqueue([
        Reply::Turn(Turn::text("").with_tool_call("call_1", tool, &arguments.to_string())),
        Reply::text("DONE"),
    ]);
    twin.set_fallback(Reply::text("DONE"));
    outside
}

/// The write of [`script_escape`] was refused: the run went on and succeeded, the file
/// does not exist, and the model saw the shell's own `Permission denied`.
pub(crate) fn assert_escape_refused(
    what: &str,
    output: &std::process::Output,
    outside: &Path,
    twin: &Twin,
) {
    assert_eq!(
        code(output),
        0,
        "{what}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!outside.exists(), "{what}: the write was refused");
    let answered = twin
        .requests()
        .iter()
        .any(|request| request.body.to_string().contains("Permission denied"));
    assert!(answered, "{what}: the model saw the shell's own error");
}

/// Issue 29 acceptance 4 for codex and gemini through `cli`: a 429 and a 500 from the
/// provider end the stage with the program's own report of it in the reason.
#[test]
fn codex_and_gemini_report_provider_errors_in_their_own_words() {
    let test = "codex_and_gemini_report_provider_errors_in_their_own_words";
    let (Some(codex), Some(gemini)) = (installed(test, "codex"), installed(test, "gemini")) else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    for (program, name, provider, model) in [
        (&codex, "codex", "openai", "gpt-5.1-codex"),
        (&gemini, "gemini", "gemini", "gemini-2.5-flash"),
    ] {
        for (fault, status) in [
            (Reply::rate_limited(Some("0")), "429"),
            (Reply::server_error(), "500"),
        ] {
            let env = TestEnv::new(&format!("{test}_{name}_{status}"));
            repository_with(&env, &workflow(provider, model));
            let twin = runtime.block_on(Twin::start()).expect("the twin starts");
            twin.set_fallback(fault);
            let vars = if provider == "openai" {
                codex_vars(&env, &twin)
            } else {
                gemini_vars(&env, &twin)
            };
            let output = run_fabro(&env, program, &vars);
            assert_ne!(
                code(&output),
                0,
                "{name} {status}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            let stage = stage_dir(&env, "work");
            let status_file = json(&stage.join("status.json"));
            let reason = status_file["failure_reason"].as_str().unwrap_or_default();
            assert!(
                reason.starts_with(&format!("{name} exited with code")),
                "{name} {status}: {reason}"
            );
            // The program's own report follows the colon (codex answers a 500 with "We're
            // currently experiencing high demand…").
            let report = reason.split_once(": ").map_or("", |(_, report)| report);
            assert!(
                !report.trim().is_empty(),
                "{name} {status}: the program's own report: {reason}"
            );
            let stderr_log = stage.join("stderr.log");
            assert!(!stderr_log.exists() || !read(&stderr_log).contains(KEY));
        }
    }
}
