//! The `cli` and `acp` agent backends through the binary (SPEC 5.2.2, 5.2.3): fake
//! `claude` and `codex` scripts first on `PATH` and a fake ACP agent, runs without any
//! API key in the environment, and `full` fidelity degrading to `summary:high` with a
//! warning because external agents cannot continue a thread.

use std::path::{Path, PathBuf};
use std::process::Output;

use fabro_test_support::TestEnv;
use serde_json::Value;

use crate::{code, stderr, stdout};

/// A directory for fake programs and what they record, outside the working directory
/// (so nothing they write there counts as touched or untracked).
pub(crate) fn side_dir(env: &TestEnv, name: &str) -> PathBuf {
    let dir = env
        .work_dir()
        .parent()
        .expect("the working directory has a parent")
        .join(name);
    fs_err::create_dir_all(&dir).expect("side directory");
    dir
}

/// Writes an executable `#!/bin/sh` script `name` into `bin`.
pub(crate) fn fake_program(bin: &Path, name: &str, body: &str) {
    let path = bin.join(name);
    fs_err::write(&path, format!("#!/bin/sh\n{body}")).expect("script written");
    let mut permissions = fs_err::metadata(&path).expect("metadata").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    fs_err::set_permissions(&path, permissions).expect("script made executable");
}

/// `{bin}:` followed by the test process's own `PATH` (git and sh stay reachable).
pub(crate) fn path_with(bin: &Path) -> String {
    let host = std::env::var("PATH").unwrap_or_default();
    format!("{}:{host}", bin.display())
}

pub(crate) fn git(env: &TestEnv, args: &[&str]) -> String {
    let output = env.command("git").args(args).output().expect("git runs");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A clean repository holding only `w.fabro`, so git checkpointing is active and
/// `files_touched` comes from git snapshots (SPEC 7.6).
pub(crate) fn repository_with(env: &TestEnv, workflow: &str) {
    git(env, &["init", "-q", "-b", "main"]);
    env.write("w.fabro", workflow);
    git(env, &["add", "w.fabro"]);
    git(env, &["commit", "-q", "-m", "init"]);
}

/// The fake agents record into the side directory `log`, outside the working tree:
/// `agent_isolation` (SPEC 16) must let them, as `writable_paths` in `settings.toml`.
pub(crate) fn allow_side_log(env: &TestEnv) {
    let log = side_dir(env, "log");
    fs_err::write(
        env.fabro_home().join("settings.toml"),
        format!("[sandbox]\nwritable_paths = [\"{}\"]\n", log.display()),
    )
    .expect("settings.toml");
}

/// `fabro run w.fabro --run-id r1` with `PATH` = `path` and no API key anywhere.
pub(crate) fn run(env: &TestEnv, path: &str) -> Output {
    allow_side_log(env);
    env.command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro", "--run-id", "r1"])
        .env("PATH", path)
        .output()
        .expect("fabro runs")
}

pub(crate) fn run_dir(env: &TestEnv) -> PathBuf {
    env.fabro_home().join("scratch/r1")
}

/// The stage directory of `node_id`'s first visit.
pub(crate) fn stage_dir(env: &TestEnv, node_id: &str) -> PathBuf {
    let stages = run_dir(env).join("stages");
    let suffix = format!("-{node_id}@1");
    fs_err::read_dir(&stages)
        .expect("stages directory")
        .map(|entry| entry.expect("entry").path())
        .find(|path| path.to_string_lossy().ends_with(&suffix))
        .unwrap_or_else(|| panic!("no stage directory for {node_id}"))
}

pub(crate) fn read(path: &Path) -> String {
    fs_err::read_to_string(path).unwrap_or_else(|error| panic!("{error}"))
}

pub(crate) fn json(path: &Path) -> Value {
    serde_json::from_str(&read(path)).expect("valid JSON")
}

pub(crate) fn events(env: &TestEnv) -> Vec<Value> {
    read(&run_dir(env).join("events.jsonl"))
        .lines()
        .map(|line| serde_json::from_str(line).expect("event line"))
        .collect()
}

pub(crate) fn events_named<'a>(events: &'a [Value], name: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|event| event["event"] == name)
        .collect()
}

const CLAUDE_WORKFLOW: &str = r#"digraph cli {
    graph [goal="Greet the world"]
    start [shape=Mdiamond]
    exit [shape=Msquare]
    work [shape=box, backend="cli", provider="anthropic", model="sonnet", prompt="Write hello.txt for: $goal"]
    start -> work -> exit
}
"#;

/// A fake `claude` (SPEC 5.2.2 stream-json): records its arguments, stdin and whether
/// it saw an Anthropic key into `log`, writes `hello.txt` in its working directory and
/// prints a stream ending in a `result` record with usage.
fn fake_claude(bin: &Path, log: &Path) {
    let log = log.display();
    fake_program(
        bin,
        "claude",
        &format!(
            r#"printf '%s\n' "$@" > '{log}/args.txt'
cat > '{log}/stdin.txt'
printf '%s' "${{ANTHROPIC_API_KEY:-none}}" > '{log}/key.txt'
echo 'hello from the fake claude' > hello.txt
echo '{{"type":"system","subtype":"init","session_id":"s-1"}}'
echo '{{"type":"assistant","message":{{"content":[{{"type":"text","text":"Writing the file"}}]}}}}'
echo '{{"type":"result","subtype":"success","result":"Wrote hello.txt","usage":{{"input_tokens":1200,"output_tokens":34,"cache_read_input_tokens":5}},"total_cost_usd":0.0123}}'
"#
        ),
    );
}

#[test]
fn claude_cli_backend_runs_without_an_api_key() {
    let env = TestEnv::new("claude_cli_backend_runs_without_an_api_key");
    repository_with(&env, CLAUDE_WORKFLOW);
    let bin = side_dir(&env, "bin");
    let log = side_dir(&env, "log");
    fake_claude(&bin, &log);
    let output = run(&env, &path_with(&bin));
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        !stderr(&output).contains("no LLM credentials"),
        "a cli agent is no simulated run: {}",
        stderr(&output)
    );
    let manifest = json(&run_dir(&env).join("manifest.json"));
    assert_eq!(manifest["simulated_llm"], false);

    // The SPEC 5.2.2 command line with `--model` appended; the prompt on stdin.
    let args: Vec<String> = read(&log.join("args.txt"))
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        args,
        [
            "-p",
            "--verbose",
            "--output-format",
            "stream-json",
            "--dangerously-skip-permissions",
            "--model",
            "claude-sonnet-4-6"
        ]
    );
    let stage = stage_dir(&env, "work");
    let prompt = read(&stage.join("prompt.md"));
    assert!(
        prompt.ends_with("Write hello.txt for: Greet the world"),
        "{prompt}"
    );
    assert_eq!(read(&log.join("stdin.txt")), prompt);
    assert_eq!(read(&log.join("key.txt")), "none");

    // The result record's text, usage, files from git snapshots.
    assert_eq!(read(&stage.join("response.md")), "Wrote hello.txt");
    let status = json(&stage.join("status.json"));
    assert_eq!(status["status"], "success");
    assert_eq!(status["provider"], "anthropic");
    assert_eq!(status["model"], "claude-sonnet-4-6");
    assert_eq!(status["files_touched"], serde_json::json!(["hello.txt"]));
    assert_eq!(status["usage"]["input_tokens"], 1200);
    assert_eq!(status["usage"]["output_tokens"], 34);
    assert_eq!(status["usage"]["cache_read_tokens"], 5);
    let events = events(&env);
    let started = events_named(&events, "Agent.SessionStarted");
    assert_eq!(started.len(), 1);
    assert_eq!(started[0]["properties"]["backend"], "cli");
    assert_eq!(started[0]["properties"]["provider"], "anthropic");
    let completed = events_named(&events, "StageCompleted")
        .into_iter()
        .find(|event| event["node_id"] == "work")
        .expect("work completed");
    assert_eq!(
        completed["properties"]["files_touched"],
        serde_json::json!(["hello.txt"])
    );
    // The run branch holds the file the CLI wrote.
    assert_eq!(
        git(&env, &["show", "fabro/run/r1:hello.txt"]),
        "hello from the fake claude\n"
    );
}

#[test]
fn codex_cli_backend_reads_the_last_agent_message() {
    let env = TestEnv::new("codex_cli_backend_reads_the_last_agent_message");
    repository_with(
        &env,
        r#"digraph cli {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    fix [shape=box, backend="cli", model="gpt-5.4", prompt="Fix the bug"]
    done [shape=parallelogram, script="echo routed"]
    start -> fix
    fix -> done [label="Ship"]
    fix -> exit [label="Stop"]
    done -> exit
}
"#,
    );
    let bin = side_dir(&env, "bin");
    let log = side_dir(&env, "log");
    let log_path = log.display();
    fake_program(
        &bin,
        "codex",
        &format!(
            r#"printf '%s\n' "$@" > '{log_path}/args.txt'
cat > '{log_path}/stdin.txt'
mkdir -p src && echo 'fn main() {{}}' > src/main.rs
echo '{{"type":"thread.started","thread_id":"t-1"}}'
echo '{{"type":"item.completed","item":{{"id":"i0","type":"agent_message","text":"Looking"}}}}'
echo '{{"type":"item.completed","item":{{"id":"i1","type":"agent_message","text":"Fixed. {{\"preferred_next_label\": \"Ship\"}}"}}}}'
echo '{{"type":"turn.completed","usage":{{"input_tokens":900,"cached_input_tokens":100,"output_tokens":40}}}}'
"#
        ),
    );
    let output = run(&env, &path_with(&bin));
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let args = read(&log.join("args.txt"));
    // Decision 68: under `agent_isolation = "workspace"` fabro is codex's sandbox.
    assert_eq!(
        args,
        "exec\n--json\n--sandbox\ndanger-full-access\n--model\ngpt-5.4\n"
    );
    assert!(read(&log.join("stdin.txt")).ends_with("Fix the bug"));
    let stage = stage_dir(&env, "fix");
    assert_eq!(
        read(&stage.join("response.md")),
        "Fixed. {\"preferred_next_label\": \"Ship\"}"
    );
    let status = json(&stage.join("status.json"));
    assert_eq!(status["provider"], "openai");
    assert_eq!(status["files_touched"], serde_json::json!(["src/main.rs"]));
    assert_eq!(status["usage"]["input_tokens"], 900);
    assert_eq!(status["usage"]["cache_read_tokens"], 100);
    // codex reports no cost: the catalog prices the reported tokens (SPEC 10.1.4).
    assert!(
        status["usage"]["cost_usd"]
            .as_f64()
            .is_some_and(|cost| cost > 0.0),
        "{status}"
    );
    // The directive in the last agent message routed the run.
    assert!(run_dir(&env).join("stages").exists());
    let events = events(&env);
    assert!(
        events_named(&events, "StageStarted")
            .iter()
            .any(|event| event["node_id"] == "done"),
        "preferred_next_label chose the Ship edge"
    );
}

#[test]
fn a_missing_cli_fails_the_stage_as_deterministic() {
    let env = TestEnv::new("a_missing_cli_fails_the_stage_as_deterministic");
    env.write("w.fabro", CLAUDE_WORKFLOW);
    // Only an empty directory on PATH: no `claude` anywhere.
    let bin = side_dir(&env, "bin");
    let output = run(&env, &bin.display().to_string());
    // The failed stage reaches exit over its unconditional edge (SPEC 4.7).
    assert_eq!(code(&output), 3, "{}", stderr(&output));
    let status = json(&stage_dir(&env, "work").join("status.json"));
    assert_eq!(status["status"], "fail");
    assert_eq!(
        status["failure_reason"],
        "cli backend requires 'claude' on PATH"
    );
    assert_eq!(status["failure_class"], "deterministic");
}

#[test]
fn an_api_agent_without_its_key_is_refused_before_the_first_stage() {
    let env = TestEnv::new("an_api_agent_without_its_key_is_refused_before_the_first_stage");
    env.write(
        "w.fabro",
        &CLAUDE_WORKFLOW.replace("backend=\"cli\"", "backend=\"api\""),
    );
    let bin = side_dir(&env, "bin");
    fake_claude(&bin, &side_dir(&env, "log"));
    let output = run(&env, &path_with(&bin));
    // Decision 25: the run fails before its first stage.
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    let message = "missing credentials for provider anthropic (set ANTHROPIC_API_KEY)";
    assert!(
        stdout(&output).contains(&format!("reason: {message}")),
        "{}",
        stdout(&output)
    );
    let events = events(&env);
    let failed = events_named(&events, "WorkflowRunFailed");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["properties"]["reason"], message);
    assert_eq!(failed[0]["properties"]["failure_class"], "deterministic");
    assert!(events_named(&events, "StageStarted").is_empty());
}

/// `prep` (a command) then `work` under `full` fidelity in thread `main`.
fn full_fidelity_workflow(work_attributes: &str) -> String {
    format!(
        r#"digraph full {{
    graph [goal="Keep going"]
    start [shape=Mdiamond]
    exit [shape=Msquare]
    prep [shape=parallelogram, script="echo prepared"]
    work [shape=box, fidelity="full", thread_id="main", prompt="Continue the work", {work_attributes}]
    start -> prep -> work -> exit
}}
"#
    )
}

/// Checks that `work` ran with the `summary:high` preamble, outside any thread, and
/// that a `Warning` with `code` named it; returns the prompt.
fn assert_degraded_to_summary_high(env: &TestEnv, code: &str) -> String {
    let events = events(env);
    let warnings: Vec<_> = events_named(&events, "Warning")
        .into_iter()
        .filter(|event| event["properties"]["code"] == code)
        .collect();
    assert_eq!(warnings.len(), 1, "{events:?}");
    assert_eq!(warnings[0]["node_id"], "work");
    assert!(
        warnings[0]["properties"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("full fidelity runs as summary:high")),
        "{:?}",
        warnings[0]
    );
    let started = events_named(&events, "Agent.SessionStarted");
    assert_eq!(started.len(), 1);
    assert_eq!(started[0]["properties"]["thread_id"], Value::Null);
    let prompt = read(&stage_dir(env, "work").join("prompt.md"));
    // SPEC 6.6: `summary:high` has one `## Stage:` section per stage; `full` has none.
    assert!(prompt.starts_with("Goal: Keep going\n"), "{prompt}");
    assert!(
        prompt.contains("## Stage: prep\n- Status: success"),
        "{prompt}"
    );
    assert!(prompt.ends_with("\n\nContinue the work"), "{prompt}");
    prompt
}

#[test]
fn cli_agents_under_full_fidelity_run_with_summary_high() {
    let env = TestEnv::new("cli_agents_under_full_fidelity_run_with_summary_high");
    env.write(
        "w.fabro",
        &full_fidelity_workflow(r#"backend="cli", provider="anthropic""#),
    );
    let bin = side_dir(&env, "bin");
    let log = side_dir(&env, "log");
    fake_claude(&bin, &log);
    let output = run(&env, &path_with(&bin));
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let prompt = assert_degraded_to_summary_high(&env, "cli_no_threads");
    assert_eq!(read(&log.join("stdin.txt")), prompt);
}

/// A fake ACP agent (SPEC 5.2.3): answers `initialize`, `session/new` and
/// `session/prompt`, saves the prompt request into `log`, writes `acp.txt` and streams
/// two message chunks.
fn fake_acp_agent(dir: &Path, log: &Path) -> PathBuf {
    let path = dir.join("acp-agent.sh");
    let log = log.display();
    fs_err::write(
        &path,
        format!(
            r#"read -r init
case "$init" in *'"method":"initialize"'*) ;; *) exit 1;; esac
echo '{{"jsonrpc":"2.0","id":1,"result":{{"protocolVersion":1,"agentCapabilities":{{}}}}}}'
read -r new
case "$new" in *'"method":"session/new"'*) ;; *) exit 1;; esac
echo '{{"jsonrpc":"2.0","id":2,"result":{{"sessionId":"s-1"}}}}'
read -r prompt
printf '%s' "$prompt" > '{log}/prompt.json'
echo 'from the acp agent' > acp.txt
echo '{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s-1","update":{{"sessionUpdate":"agent_message_chunk","content":{{"type":"text","text":"Done "}}}}}}}}'
echo '{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s-1","update":{{"sessionUpdate":"agent_message_chunk","content":{{"type":"text","text":"here."}}}}}}}}'
echo '{{"jsonrpc":"2.0","id":3,"result":{{"stopReason":"end_turn"}}}}'
"#
        ),
    )
    .expect("agent script written");
    path
}

#[test]
fn acp_agents_under_full_fidelity_run_with_summary_high() {
    let env = TestEnv::new("acp_agents_under_full_fidelity_run_with_summary_high");
    let bin = side_dir(&env, "bin");
    let log = side_dir(&env, "log");
    let agent = fake_acp_agent(&bin, &log);
    repository_with(
        &env,
        &full_fidelity_workflow(&format!(
            r#"backend="acp", acp_command="/bin/sh {}""#,
            agent.display()
        )),
    );
    let output = run(&env, &path_with(&bin));
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    // No key and no provider: still no simulated run, the ACP agent did the work.
    assert!(
        !stderr(&output).contains("no LLM credentials"),
        "{}",
        stderr(&output)
    );
    let prompt = assert_degraded_to_summary_high(&env, "acp_no_threads");
    let request: Value = serde_json::from_str(&read(&log.join("prompt.json"))).expect("JSON-RPC");
    assert_eq!(request["method"], "session/prompt");
    assert_eq!(request["params"]["prompt"][0]["text"], prompt.as_str());
    let stage = stage_dir(&env, "work");
    assert_eq!(read(&stage.join("response.md")), "Done here.");
    let status = json(&stage.join("status.json"));
    assert_eq!(status["status"], "success");
    assert_eq!(status["files_touched"], serde_json::json!(["acp.txt"]));
    // ACP reports no usage, so none is recorded (rather than zeros).
    assert_eq!(status["usage"], Value::Null);
}

#[test]
fn gemini_cli_backend_gets_its_own_keys_back_and_reports_usage() {
    let env = TestEnv::new("gemini_cli_backend_gets_its_own_keys_back_and_reports_usage");
    env.write(
        "w.fabro",
        r#"digraph cli {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    ask [shape=box, backend="cli", provider="gemini", prompt="Explain"]
    start -> ask -> exit
}
"#,
    );
    let bin = side_dir(&env, "bin");
    let log = side_dir(&env, "log");
    let log_path = log.display();
    fake_program(
        &bin,
        "gemini",
        &format!(
            r#"printf '%s
' "$@" > '{log_path}/args.txt'
cat > /dev/null
printf '%s|%s|%s' "${{GEMINI_API_KEY:-none}}" "${{GOOGLE_API_KEY:-none}}" "${{OPENAI_API_KEY:-none}}" > '{log_path}/keys.txt'
echo '{{"response": "It works.", "stats": {{"models": {{"gemini-3.1-pro-preview": {{"tokens": {{"prompt": 300, "candidates": 20, "cached": 100, "thoughts": 10}}}}}}}}}}'
"#
        ),
    );
    allow_side_log(&env);
    let output = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro", "--run-id", "r1"])
        .env("PATH", path_with(&bin))
        .env("GEMINI_API_KEY", "gm-fake-1")
        .env("GOOGLE_API_KEY", "gg-fake-2")
        .env("OPENAI_API_KEY", "sk-fake-3")
        .output()
        .expect("fabro runs");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(
        read(&log.join("args.txt")),
        "-o\njson\n--yolo\n--model\ngemini-3.1-pro-preview\n"
    );
    // SPEC 13.5: the CLI gets its own provider's keys back, no other key.
    assert_eq!(read(&log.join("keys.txt")), "gm-fake-1|gg-fake-2|none");
    let stage = stage_dir(&env, "ask");
    assert_eq!(read(&stage.join("response.md")), "It works.");
    let status = json(&stage.join("status.json"));
    assert_eq!(status["usage"]["input_tokens"], 300);
    assert_eq!(status["usage"]["output_tokens"], 30);
    assert_eq!(status["usage"]["reasoning_tokens"], 10);
    assert_eq!(status["usage"]["cache_read_tokens"], 100);
}

#[test]
fn an_acp_timeout_cancels_the_session_before_terminating() {
    let env = TestEnv::new("an_acp_timeout_cancels_the_session_before_terminating");
    let bin = side_dir(&env, "bin");
    let log = side_dir(&env, "log");
    let agent = bin.join("slow-acp-agent.sh");
    fs_err::write(
        &agent,
        format!(
            r#"read -r init
echo '{{"jsonrpc":"2.0","id":1,"result":{{"protocolVersion":1}}}}'
read -r new
echo '{{"jsonrpc":"2.0","id":2,"result":{{"sessionId":"s-1"}}}}'
read -r prompt
read -r cancel
printf '%s' "$cancel" > '{}/cancel.json'
echo '{{"jsonrpc":"2.0","id":3,"result":{{"stopReason":"cancelled"}}}}'
"#,
            log.display()
        ),
    )
    .expect("agent script written");
    env.write(
        "w.fabro",
        &format!(
            r#"digraph slow {{
    start [shape=Mdiamond]
    exit [shape=Msquare]
    work [shape=box, backend="acp", acp_command="/bin/sh {}", timeout="500ms", max_retries=0]
    start -> work -> exit
}}
"#,
            agent.display()
        ),
    );
    let output = run(&env, &path_with(&bin));
    assert_eq!(code(&output), 3, "{}", stderr(&output));
    // SPEC 5.2.3: the timeout sends session/cancel (the node timeout does not simply
    // drop the agent).
    let cancel: Value = serde_json::from_str(&read(&log.join("cancel.json"))).expect("JSON-RPC");
    assert_eq!(cancel["method"], "session/cancel");
    assert_eq!(cancel["params"]["sessionId"], "s-1");
    let status = json(&stage_dir(&env, "work").join("status.json"));
    assert_eq!(status["failure_reason"], "stage timed out after 500ms");
    assert_eq!(status["failure_class"], "transient_infra");
}
