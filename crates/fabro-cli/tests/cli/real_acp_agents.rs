//! The real ACP adapters as `acp` backends (issue 29): claude-code-acp, codex-acp and
//! `gemini --acp`, installed by `.ci/run` into `target/agents` and pointed at the twin
//! like the programs of `real_agents`. Each test runs `fabro run` with fabro's default
//! settings (`agent_isolation = "workspace"`): the scripted model writes a plan that
//! says `{"outcome": "fail"}`, calls a tool that writes a file, then answers `DONE`
//! (decision 67: only the final turn is the response).

use fabro_test_support::TestEnv;
use fabro_twin::{Reply, Twin};

use crate::backends::{read, repository_with, stage_dir};
use crate::real_agents::{
    assert_escape_refused, assert_wrote, claude_vars, codex_vars, gemini_vars, installed,
    plan_then_tool, run_fabro, script_escape,
};

/// The workflow: one `acp` agent node running `command`, without retries; `model` is
/// the node's own attribute (recorded when the agent names no model, decision 69).
fn workflow(provider: &str, model: &str, command: &str) -> String {
    format!(
        r#"digraph real {{
    start [shape=Mdiamond]
    exit [shape=Msquare]
    work [shape=box, backend="acp", provider="{provider}", model="{model}", acp_command="{command}", max_retries=0, prompt="Write hello.txt"]
    start -> work -> exit
}}
"#
    )
}

/// claude-code-acp's environment: claude's, with Claude Code's side requests (its guess
/// at the important files) sent to a small model the twin answers outside the script.
fn claude_code_acp_vars(twin: &Twin) -> Vec<(&'static str, String)> {
    twin.answer_model("claude-haiku-twin", Reply::text("hello.txt"));
    let mut vars = claude_vars(twin);
    vars.push((
        "ANTHROPIC_DEFAULT_HAIKU_MODEL",
        "claude-haiku-twin".to_owned(),
    ));
    vars.push(("ANTHROPIC_SMALL_FAST_MODEL", "claude-haiku-twin".to_owned()));
    vars
}

/// The final turn is the response: `DONE`, not the plan; the plan is kept in the
/// stage's events (SPEC 5.2.3).
fn assert_done(env: &TestEnv) {
    let response = read(&stage_dir(env, "work").join("response.md"));
    assert!(response.starts_with("DONE"), "{response}");
    let events = read(&crate::backends::run_dir(env).join("events.jsonl"));
    assert!(
        events
            .lines()
            .any(|line| line.contains("\"Agent.AssistantMessage\"")
                && line.contains("Plan: write the file.")),
        "the plan is an event"
    );
}

/// The model claude-code-acp 0.16.2 runs as `default` (its session names no other).
const CLAUDE_CODE_ACP_MODEL: &str = "claude-sonnet-4-5-20250929";

#[test]
fn claude_code_acp_writes_a_file_through_the_acp_backend() {
    let test = "claude_code_acp_writes_a_file_through_the_acp_backend";
    let Some(adapter) = installed(test, "claude-code-acp") else {
        return;
    };
    let env = TestEnv::new(test);
    repository_with(
        &env,
        &workflow("anthropic", CLAUDE_CODE_ACP_MODEL, "claude-code-acp"),
    );
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = runtime.block_on(Twin::start()).expect("the twin starts");
    let write = serde_json::json!({"command": "echo hello > hello.txt", "description": "write"});
    plan_then_tool(&twin, "call_1", "Bash", &write);
    let vars = claude_code_acp_vars(&twin);
    let output = run_fabro(&env, &adapter, &vars);
    assert_wrote(&env, &output, "hello.txt", CLAUDE_CODE_ACP_MODEL);
    assert_done(&env);
    // The model recorded (the node's: the adapter names only `default`) is the one
    // Claude Code used for its turns.
    assert!(twin
        .requests()
        .iter()
        .any(|request| request.body["model"] == CLAUDE_CODE_ACP_MODEL));
}

#[test]
fn codex_acp_writes_a_file_through_the_acp_backend() {
    let test = "codex_acp_writes_a_file_through_the_acp_backend";
    let Some(adapter) = installed(test, "codex-acp") else {
        return;
    };
    let env = TestEnv::new(test);
    repository_with(&env, &workflow("openai", "gpt-5.1-codex", "codex-acp"));
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = runtime.block_on(Twin::start()).expect("the twin starts");
    let write = serde_json::json!({"cmd": "echo hello > hello.txt", "yield_time_ms": 5000});
    plan_then_tool(&twin, "call_1", "exec_command", &write);
    let vars = codex_vars(&env, &twin);
    let output = run_fabro(&env, &adapter, &vars);
    assert_wrote(&env, &output, "hello.txt", "gpt-5.1-codex");
    assert_done(&env);
    assert!(twin
        .requests()
        .iter()
        .all(|request| request.body["model"] == "gpt-5.1-codex"));
}

#[test]
fn gemini_acp_writes_a_file_through_the_acp_backend() {
    let test = "gemini_acp_writes_a_file_through_the_acp_backend";
    let Some(gemini) = installed(test, "gemini") else {
        return;
    };
    let env = TestEnv::new(test);
    repository_with(
        &env,
        &workflow(
            "gemini",
            "gemini-2.5-flash",
            "gemini --acp --model gemini-2.5-flash",
        ),
    );
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = runtime.block_on(Twin::start()).expect("the twin starts");
    let write = serde_json::json!({"file_path": "hello.txt", "content": "hello\n"});
    plan_then_tool(&twin, "call_1", "write_file", &write);
    let vars = gemini_vars(&env, &twin);
    let output = run_fabro(&env, &gemini, &vars);
    assert_wrote(&env, &output, "hello.txt", "gemini-2.5-flash");
    assert_done(&env);
}

/// Issue 29 acceptance 4: an overloaded provider behind a real ACP adapter is
/// `transient_infra` (SPEC 9.1 on the JSON-RPC error) and retried per the node's policy,
/// and the reason carries the adapter's own message.
#[test]
fn a_rate_limited_claude_code_acp_stage_is_transient_and_retried() {
    let test = "a_rate_limited_claude_code_acp_stage_is_transient_and_retried";
    let Some(adapter) = installed(test, "claude-code-acp") else {
        return;
    };
    let env = TestEnv::new(test);
    let workflow = workflow("anthropic", CLAUDE_CODE_ACP_MODEL, "claude-code-acp")
        .replace("max_retries=0", "max_retries=1");
    repository_with(&env, &workflow);
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = runtime.block_on(Twin::start()).expect("the twin starts");
    twin.set_fallback(Reply::rate_limited(Some("0")));
    let vars = claude_code_acp_vars(&twin);
    let output = run_fabro(&env, &adapter, &vars);
    assert_ne!(
        crate::code(&output),
        0,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stage = stage_dir(&env, "work");
    let status = crate::backends::json(&stage.join("status.json"));
    assert_eq!(status["failure_class"], "transient_infra", "{status}");
    assert_eq!(status["attempt"], 2, "retried once: {status}");
    let reason = status["failure_reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("429") || reason.contains("rate"),
        "{reason}"
    );
}

/// Issue 29 acceptance 2 through `acp`: a shell command of each real adapter that writes
/// outside the run's worktree gets the kernel's `Permission denied`, which reaches the
/// model, and the file does not exist.
#[test]
fn confined_acp_adapters_cannot_write_outside_their_worktree() {
    let test = "confined_acp_adapters_cannot_write_outside_their_worktree";
    let (Some(claude), Some(codex), Some(gemini)) = (
        installed(test, "claude-code-acp"),
        installed(test, "codex-acp"),
        installed(test, "gemini"),
    ) else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let cases = [
        (
            &claude,
            "anthropic",
            CLAUDE_CODE_ACP_MODEL,
            "claude-code-acp",
            "Bash",
        ),
        (
            &codex,
            "openai",
            "gpt-5.1-codex",
            "codex-acp",
            "exec_command",
        ),
        (
            &gemini,
            "gemini",
            "gemini-2.5-flash",
            "gemini --acp --model gemini-2.5-flash",
            "run_shell_command",
        ),
    ];
    for (program, provider, model, command, tool) in cases {
        let env = TestEnv::new(&format!("{test}_{provider}"));
        repository_with(&env, &workflow(provider, model, command));
        let twin = runtime.block_on(Twin::start()).expect("the twin starts");
        let outside = script_escape(&env, &twin, tool);
        let vars = match provider {
            "anthropic" => claude_code_acp_vars(&twin),
            "openai" => codex_vars(&env, &twin),
            _ => gemini_vars(&env, &twin),
        };
        let output = run_fabro(&env, program, &vars);
        assert_escape_refused(command, &output, &outside, &twin);
    }
}

/// Issue 29 acceptance 4 for every adapter: a 500 from the provider behind codex-acp
/// and `gemini --acp` (claude-code-acp: a 429, above) is `transient_infra` and retried
/// per the node's policy.
#[test]
fn codex_acp_and_gemini_acp_provider_errors_are_transient_and_retried() {
    let test = "codex_acp_and_gemini_acp_provider_errors_are_transient_and_retried";
    let (Some(codex), Some(gemini)) = (installed(test, "codex-acp"), installed(test, "gemini"))
    else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let cases = [
        (&codex, "openai", "gpt-5.1-codex", "codex-acp"),
        (
            &gemini,
            "gemini",
            "gemini-2.5-flash",
            "gemini --acp --model gemini-2.5-flash",
        ),
    ];
    for (program, provider, model, command) in cases {
        let env = TestEnv::new(&format!("{test}_{provider}"));
        let workflow = workflow(provider, model, command).replace("max_retries=0", "max_retries=1");
        repository_with(&env, &workflow);
        let twin = runtime.block_on(Twin::start()).expect("the twin starts");
        twin.set_fallback(Reply::server_error());
        let vars = if provider == "openai" {
            codex_vars(&env, &twin)
        } else {
            gemini_vars(&env, &twin)
        };
        let output = run_fabro(&env, program, &vars);
        assert_ne!(crate::code(&output), 0, "{command}");
        let status = crate::backends::json(&stage_dir(&env, "work").join("status.json"));
        assert_eq!(
            status["failure_class"], "transient_infra",
            "{command}: {status}"
        );
        assert_eq!(status["attempt"], 2, "{command}: retried once: {status}");
    }
}
