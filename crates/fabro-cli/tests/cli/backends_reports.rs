//! What `cli` and `acp` stages record (SPEC 5.2.2, 5.2.3, decision 69), with fake
//! programs: the provider and model the program reports (else the node's attributes,
//! else null), the program's own error as the reason, its stderr in `stderr.log`
//! (redacted), the common timeout message, and a `Warning` when every tool call of the
//! agent failed for a sandbox reason.

use fabro_test_support::TestEnv;
use serde_json::Value;

use crate::backends::{
    allow_side_log, events, events_named, fake_program, json, path_with, read, repository_with,
    run, side_dir, stage_dir,
};
use crate::{code, stderr};

/// A key fabro knows (its own environment), so it is redacted wherever it appears.
const SECRET: &str = "sk-ant-reports-secret-0123456789";

/// `fabro run` with `PATH` = `path` and [`SECRET`] as the Anthropic key.
fn run_with_secret(env: &TestEnv, path: &str) -> std::process::Output {
    allow_side_log(env);
    env.command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro", "--run-id", "r1"])
        .env("PATH", path)
        .env("ANTHROPIC_API_KEY", SECRET)
        .output()
        .expect("fabro runs")
}

/// A fake ACP agent answering `session/new` with `new_result`, writing `name.txt` and a
/// line with [`SECRET`] to stderr.
fn acp_agent(dir: &std::path::Path, name: &str, new_result: &str) -> String {
    let path = dir.join(format!("{name}.sh"));
    fs_err::write(
        &path,
        format!(
            r#"read -r init
echo '{{"jsonrpc":"2.0","id":1,"result":{{"protocolVersion":1}}}}'
read -r new
echo '{{"jsonrpc":"2.0","id":2,"result":{new_result}}}'
read -r prompt
echo "agent {name} says {SECRET}" >&2
echo '{name}' > {name}.txt
echo '{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s","update":{{"sessionUpdate":"agent_message_chunk","content":{{"type":"text","text":"ok"}}}}}}}}'
echo '{{"jsonrpc":"2.0","id":3,"result":{{"stopReason":"end_turn"}}}}'
"#
        ),
    )
    .expect("agent script written");
    format!("/bin/sh {}", path.display())
}

#[test]
fn acp_stages_record_what_ran_not_fabros_pick() {
    let env = TestEnv::new("acp_stages_record_what_ran_not_fabros_pick");
    let bin = side_dir(&env, "bin");
    let plain = acp_agent(&bin, "plain", r#"{"sessionId":"s"}"#);
    let named = acp_agent(
        &bin,
        "named",
        r#"{"sessionId":"s","models":{"currentModelId":"default","availableModels":[]}}"#,
    );
    let reporting = acp_agent(
        &bin,
        "reporting",
        r#"{"sessionId":"s","models":{"currentModelId":"gpt-5.1-codex","availableModels":[{"modelId":"gpt-5.1-codex","name":"GPT-5.1 Codex"}]}}"#,
    );
    repository_with(
        &env,
        &format!(
            r#"digraph acp {{
    start [shape=Mdiamond]
    exit [shape=Msquare]
    a [shape=box, backend="acp", acp_command="{plain}"]
    b [shape=box, backend="acp", provider="openai", model="gpt-5.4", acp_command="{named}"]
    c [shape=box, backend="acp", acp_command="{reporting}"]
    start -> a -> b -> c -> exit
}}
"#
        ),
    );
    // With an Anthropic key set, fabro's own pick for an api node would be anthropic.
    let output = run_with_secret(&env, &path_with(&bin));
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let status = |node: &str| json(&stage_dir(&env, node).join("status.json"));
    // Decision 69: nothing reported, nothing named: null, never fabro's pick or simulated.
    let a = status("a");
    assert_eq!((&a["provider"], &a["model"]), (&Value::Null, &Value::Null));
    // The node's attributes when the agent names no model ("default" names none).
    let b = status("b");
    assert_eq!(b["provider"], "openai");
    assert_eq!(b["model"], "gpt-5.4");
    // The agent's own report wins.
    let c = status("c");
    assert_eq!(c["provider"], "openai");
    assert_eq!(c["model"], "gpt-5.1-codex");
    // SPEC 5.2.3: the agent's stderr is kept, redacted.
    let log = read(&stage_dir(&env, "a").join("stderr.log"));
    assert!(log.contains("agent plain says "), "{log}");
    assert!(!log.contains(SECRET), "{log}");
}

#[test]
fn a_failed_claude_names_its_own_error_and_keeps_its_stderr() {
    let env = TestEnv::new("a_failed_claude_names_its_own_error_and_keeps_its_stderr");
    repository_with(
        &env,
        r#"digraph cli {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    work [shape=box, backend="cli", provider="anthropic", model="sonnet", max_retries=0, prompt="Work"]
    start -> work -> exit
}
"#,
    );
    let bin = side_dir(&env, "bin");
    fake_program(
        &bin,
        "claude",
        &format!(
            r#"cat > /dev/null
echo "claude warns about {SECRET}" >&2
echo '{{"type":"system","subtype":"init","model":"claude-sonnet-4-5"}}'
echo '{{"type":"assistant","message":{{"model":"<synthetic>","content":[{{"type":"text","text":"API Error: 500 overloaded upstream"}}]}}}}'
echo '{{"type":"result","is_error":true,"result":"API Error: 500 overloaded upstream","usage":{{"input_tokens":0,"output_tokens":0}},"total_cost_usd":0,"modelUsage":{{}}}}'
exit 1
"#
        ),
    );
    let output = run_with_secret(&env, &path_with(&bin));
    assert_eq!(code(&output), 3, "{}", stderr(&output));
    let stage = stage_dir(&env, "work");
    let status = json(&stage.join("status.json"));
    assert_eq!(
        status["failure_reason"],
        "claude exited with code 1: API Error: 500 overloaded upstream"
    );
    // SPEC 9.1: a CLI's output is never classified.
    assert_eq!(status["failure_class"], "deterministic");
    // Zeros are no report: usage is null. The model is the one claude said it used.
    assert_eq!(status["usage"], Value::Null);
    assert_eq!(status["model"], "claude-sonnet-4-5");
    assert_eq!(status["provider"], "anthropic");
    let log = read(&stage.join("stderr.log"));
    assert!(log.contains("claude warns about "), "{log}");
    assert!(!log.contains(SECRET), "{log}");
}

#[test]
fn a_cli_stage_that_times_out_still_records_its_model() {
    let env = TestEnv::new("a_cli_stage_that_times_out_still_records_its_model");
    repository_with(
        &env,
        r#"digraph cli {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    work [shape=box, backend="cli", provider="anthropic", timeout="500ms", max_retries=0, prompt="Work"]
    start -> work -> exit
}
"#,
    );
    let bin = side_dir(&env, "bin");
    fake_program(&bin, "claude", "cat > /dev/null\nsleep 30\n");
    let started = std::time::Instant::now();
    let output = run_with_secret(&env, &path_with(&bin));
    assert_eq!(code(&output), 3, "{}", stderr(&output));
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    let status = json(&stage_dir(&env, "work").join("status.json"));
    assert_eq!(status["failure_reason"], "stage timed out after 500ms");
    assert_eq!(status["failure_class"], "transient_infra");
    assert_eq!(status["provider"], "anthropic");
    assert_eq!(status["model"], "claude-sonnet-4-6");
}

#[test]
fn every_tool_call_failing_for_a_sandbox_reason_is_a_warning() {
    let env = TestEnv::new("every_tool_call_failing_for_a_sandbox_reason_is_a_warning");
    repository_with(
        &env,
        r#"digraph cli {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    work [shape=box, backend="cli", provider="openai", model="gpt-5.4", prompt="Work"]
    start -> work -> exit
}
"#,
    );
    let bin = side_dir(&env, "bin");
    // `printf '%s'`: the `echo` of dash would turn the JSON's `\n` into a line break.
    fake_program(
        &bin,
        "codex",
        r#"cat > /dev/null
echo '{"type":"thread.started","thread_id":"t"}'
printf '%s\n' '{"type":"item.completed","item":{"id":"i1","type":"command_execution","command":"bash -lc \"echo hi > a.txt\"","aggregated_output":"bwrap: setting up uid map: Permission denied\n","exit_code":1,"status":"failed"}}'
printf '%s\n' '{"type":"item.completed","item":{"id":"i2","type":"command_execution","command":"bash -lc \"touch a.txt\"","aggregated_output":"bwrap: setting up uid map: Permission denied\n","exit_code":1,"status":"failed"}}'
echo '{"type":"item.completed","item":{"id":"i3","type":"agent_message","text":"I could not write the file."}}'
echo '{"type":"turn.completed","usage":{"input_tokens":10,"cached_input_tokens":0,"output_tokens":5}}'
"#,
    );
    let output = run(&env, &path_with(&bin));
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let events = events(&env);
    let warnings: Vec<_> = events_named(&events, "Warning")
        .into_iter()
        .filter(|event| event["properties"]["code"] == "agent_tools_sandboxed")
        .collect();
    assert_eq!(warnings.len(), 1, "{events:?}");
    assert_eq!(warnings[0]["node_id"], "work");
    let message = warnings[0]["properties"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("all 2 tool calls failed") && message.contains("uid map"),
        "{message}"
    );
}
