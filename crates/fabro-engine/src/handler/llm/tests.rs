//! Tests of agent and prompt stages: routing sources, repairs, schemas, threads, loop
//! detection, compaction events, write scope and the cli and acp backends.

use std::sync::Arc;

use fabro_language::Workflow;
use fabro_llm::simulated::{Script, SimulatedClient};
use serde_json::json;

use super::*;
use crate::context::Context;
use crate::handler::test_support::{workflow, TestRun};
use crate::llm_target::{LlmDefaults, LlmSetup};
use crate::sandbox::SandboxEnv;

/// Resolves `workflow`'s nodes against a simulated client running `script`.
fn script(run: &mut TestRun, workflow: &Workflow, script: serde_json::Value) {
    let script = Script::parse(&script.to_string()).expect("script parses");
    run.services.llm = LlmSetup::resolve(
        workflow,
        &LlmDefaults::default(),
        Arc::new(SimulatedClient::new(script)),
        false,
    )
    .expect("simulated setup");
}

/// A context whose stage runs in thread `key` under `full` fidelity.
fn in_thread(key: &str) -> Context {
    let mut context = Context::new();
    context.set("internal.fidelity", "full");
    context.set("internal.thread_id", key);
    context
}

fn event_names(run: &TestRun) -> Vec<String> {
    run.events()
        .into_iter()
        .map(|event| event.name().to_owned())
        .collect()
}

fn write_call(path: &str, content: &str) -> serde_json::Value {
    json!({"tool_calls": [{"name": "write_file", "arguments": {"file_path": path, "content": content}}]})
}

#[tokio::test]
async fn prompt_nodes_capture_the_response_and_route_from_prose() {
    let mut run = TestRun::new();
    let workflow = workflow(r#"digraph { review [shape=tab, prompt="Review $thing"] }"#);
    let long = "x".repeat(250);
    let text = format!("{long} I think {{\"preferred_next_label\": \"fix\", \"context_updates\": {{\"score\": 4}}}} overall.");
    script(
        &mut run,
        &workflow,
        json!({"nodes": {"review": [{"text": text}]}}),
    );
    let input = StageInput {
        preamble: "Goal: ship\n",
        ..run.input(&workflow, "review")
    };
    let outcome = execute(&input).await;
    assert_eq!(outcome.status, StageStatus::Success);
    assert_eq!(outcome.preferred_label.as_deref(), Some("fix"));
    assert_eq!(outcome.context_updates["score"], 4);
    assert_eq!(outcome.context_updates["last_stage"], "review");
    assert_eq!(
        outcome.context_updates["last_response"],
        json!("x".repeat(200))
    );
    assert_eq!(outcome.context_updates["response.review"], json!(text));
    assert_eq!(outcome.model.as_deref(), Some("simulated"));
    assert_eq!(
        fs_err::read_to_string(run.stage_dir.join("prompt.md")).unwrap(),
        "Goal: ship\n\nReview $thing"
    );
    assert_eq!(
        fs_err::read_to_string(run.stage_dir.join("response.md")).unwrap(),
        text
    );
}

/// Issue 14 item 6: a stage file fabro cannot write is its own storage failing, which
/// stops the run (resumable) instead of failing the stage.
#[tokio::test]
async fn unwritable_stage_files_are_engine_errors() {
    let run = TestRun::new();
    let workflow = workflow(r#"digraph { review [shape=tab, prompt="Review"] }"#);
    let missing = run.stage_dir.join("missing");
    let outcome = execute(&StageInput {
        stage_dir: &missing,
        ..run.input(&workflow, "review")
    })
    .await;
    assert!(outcome.engine_error, "{outcome:?}");
    assert!(
        outcome.failure_reason().starts_with("engine error: "),
        "{outcome:?}"
    );

    // prompt.md is written, response.md cannot be (a directory stands there).
    fs_err::create_dir_all(run.stage_dir.join("response.md")).unwrap();
    let outcome = execute(&run.input(&workflow, "review")).await;
    assert!(outcome.engine_error, "{outcome:?}");
    assert!(run.stage_dir.join("prompt.md").is_file());
}

#[tokio::test]
async fn agents_write_files_through_tools_and_report_agent_events() {
    let mut run = TestRun::new();
    let workflow = workflow(r#"digraph { implement [shape=box, prompt="Build it"] }"#);
    script(
        &mut run,
        &workflow,
        json!({"nodes": {"implement": [write_call("src/hello.txt", "hi"), {"text": "Wrote it"}]}}),
    );
    let outcome = execute(&run.input(&workflow, "implement")).await;
    assert_eq!(outcome.status, StageStatus::Success, "{outcome:?}");
    assert_eq!(outcome.files_touched, ["src/hello.txt"]);
    assert_eq!(
        fs_err::read_to_string(run.work_dir.join("src/hello.txt")).unwrap(),
        "hi"
    );
    assert_eq!(outcome.context_updates["response.implement"], "Wrote it");
    let events = run.events();
    let names: Vec<&str> = events.iter().map(|event| event.name()).collect();
    assert_eq!(
        names,
        [
            "Agent.SessionStarted",
            "Agent.AssistantMessage",
            "Agent.ToolCallStarted",
            "Agent.ToolCallCompleted",
            "Agent.AssistantMessage"
        ]
    );
    assert!(events
        .iter()
        .all(|event| event.node_id.as_deref() == Some("implement")));
    assert_eq!(events[2].properties()["tool"], "write_file");
    assert_eq!(events[0].properties()["backend"], "api");
}

#[tokio::test]
async fn status_json_written_during_the_stage_is_the_second_source() {
    let mut run = TestRun::new();
    let workflow = workflow(r#"digraph { implement [shape=box] }"#);
    let status = json!({"status": "fail", "failure_reason": "tests broken", "failure_class": "transient_infra"});
    script(
        &mut run,
        &workflow,
        json!({"nodes": {"implement": [
            write_call("status.json", &status.to_string()),
            write_call("notes.txt", "no directive here"),
            {"text": "Finished."}
        ]}}),
    );
    let outcome = execute(&run.input(&workflow, "implement")).await;
    assert_eq!(outcome.status, StageStatus::Fail);
    assert_eq!(outcome.failure_reason(), "tests broken");
    // Only an agent-written status.json may name the failure class.
    assert_eq!(outcome.failure_class(), Some(FailureClass::TransientInfra));
}

#[tokio::test]
async fn a_status_json_older_than_the_stage_is_ignored() {
    let mut run = TestRun::new();
    let workflow = workflow(r#"digraph { implement [shape=box] }"#);
    fs_err::write(run.work_dir.join("status.json"), r#"{"outcome": "fail"}"#).unwrap();
    script(
        &mut run,
        &workflow,
        json!({"nodes": {"implement": [{"text": "Nothing to do."}]}}),
    );
    let outcome = execute(&run.input(&workflow, "implement")).await;
    assert_eq!(outcome.status, StageStatus::Success);
}

#[tokio::test]
async fn the_last_touched_file_is_the_third_source_and_reserved_keys_are_refused() {
    let mut run = TestRun::new();
    let workflow = workflow(r#"digraph { review [shape=box] }"#);
    let verdict = json!({"preferred_next_label": "approve", "context_updates": {"score": 3, "outcome": "hacked"}});
    script(
        &mut run,
        &workflow,
        json!({"nodes": {"review": [
            write_call("first.json", r#"{"preferred_next_label": "reject"}"#),
            write_call("review/verdict.json", &verdict.to_string()),
            {"text": "Verdict written."}
        ]}}),
    );
    let outcome = execute(&run.input(&workflow, "review")).await;
    assert_eq!(outcome.preferred_label.as_deref(), Some("approve"));
    assert_eq!(outcome.context_updates["score"], 3);
    assert!(!outcome.context_updates.contains_key("outcome"));
    let warnings: Vec<_> = run
        .events()
        .into_iter()
        .filter(|event| event.name() == "Warning")
        .collect();
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].properties()["code"], "reserved_context_key");
}

#[tokio::test]
async fn the_response_text_wins_over_files_and_prompt_nodes_have_no_fallbacks() {
    let mut run = TestRun::new();
    let workflow = workflow(r#"digraph { a [shape=box] p [shape=tab] }"#);
    script(
        &mut run,
        &workflow,
        json!({"nodes": {
            "a": [write_call("r.json", r#"{"preferred_next_label": "file"}"#), {"text": "{\"preferred_next_label\": \"text\"}"}],
            "p": [{"text": "plain"}]
        }}),
    );
    let outcome = execute(&run.input(&workflow, "a")).await;
    assert_eq!(outcome.preferred_label.as_deref(), Some("text"));
    fs_err::write(
        run.work_dir.join("status.json"),
        r#"{"preferred_next_label": "x"}"#,
    )
    .unwrap();
    let outcome = execute(&run.input(&workflow, "p")).await;
    assert_eq!(outcome.preferred_label, None);
}

#[tokio::test]
async fn a_malformed_routing_object_triggers_a_repair_turn() {
    let mut run = TestRun::new();
    let workflow = workflow(r#"digraph { gate [shape=tab, output_schema="routing"] }"#);
    script(
        &mut run,
        &workflow,
        json!({"nodes": {"gate": [
            {"text": "Result: {\"outcome\": \"success\", \"preferred_next_label\": \"ship\",}"},
            {"text": "Fixed: {\"outcome\": \"success\", \"preferred_next_label\": \"ship\"}"}
        ]}}),
    );
    run.context = in_thread("gate-thread");
    let outcome = execute(&run.input(&workflow, "gate")).await;
    assert_eq!(outcome.status, StageStatus::Success, "{outcome:?}");
    assert_eq!(outcome.preferred_label.as_deref(), Some("ship"));
    let repairs: Vec<_> = run
        .events()
        .into_iter()
        .filter(|event| event.name() == "StageOutputRepair")
        .collect();
    assert_eq!(repairs.len(), 1);
    assert_eq!(repairs[0].properties()["attempt"], 1);
    assert_eq!(repairs[0].properties()["max"], 2);
    assert!(fs_err::read_to_string(run.stage_dir.join("response.md"))
        .unwrap()
        .starts_with("Fixed:"));
    // The repair went into the same message list: prompt, rejected answer, correction,
    // corrected answer.
    let messages = run.services.threads.messages("gate-thread");
    assert_eq!(messages.len(), 4);
    assert!(messages[2]
        .text
        .starts_with("Your previous response did not match the required output format: the routing object is not valid JSON"));
}

#[tokio::test]
async fn wrongly_typed_routing_fields_are_repaired_too() {
    let mut run = TestRun::new();
    let workflow = workflow(r#"digraph { gate [shape=tab, output_schema="routing"] }"#);
    script(
        &mut run,
        &workflow,
        json!({"nodes": {"gate": [
            {"text": "{\"outcome\": \"maybe\"}"},
            {"text": "{\"outcome\": \"fail\", \"failure_reason\": \"no\"}"}
        ]}}),
    );
    let outcome = execute(&run.input(&workflow, "gate")).await;
    assert_eq!(outcome.status, StageStatus::Fail);
    assert_eq!(outcome.failure_reason(), "no");
    assert_eq!(outcome.failure_class(), Some(FailureClass::Deterministic));
}

const SCORE_SCHEMA: &str = r#"output_schema="{\"type\":\"object\",\"required\":[\"score\"],\"properties\":{\"score\":{\"type\":\"integer\"}}}""#;

#[tokio::test]
async fn a_custom_schema_stores_the_object_and_skips_routing() {
    let mut run = TestRun::new();
    let workflow = workflow(&format!("digraph {{ judge [shape=box, {SCORE_SCHEMA}] }}"));
    script(
        &mut run,
        &workflow,
        json!({"nodes": {"judge": [
            {"text": "{\"score\": \"high\"}"},
            {"text": "Here: {\"outcome\": \"fail\"} and {\"score\": 8, \"outcome\": \"fail\"}"}
        ]}}),
    );
    run.context = in_thread("judge-thread");
    let outcome = execute(&run.input(&workflow, "judge")).await;
    assert_eq!(outcome.status, StageStatus::Success, "{outcome:?}");
    assert_eq!(outcome.context_updates["output.judge"]["score"], 8);
    assert!(outcome.context_updates["response.judge"]
        .as_str()
        .unwrap()
        .starts_with("Here:"));
    // The api agent's repair continued the same live session.
    let live = run
        .services
        .threads
        .session("judge-thread")
        .expect("session");
    let messages = live.lock().await.session.messages();
    let users: Vec<&str> = messages
        .iter()
        .filter(|message| message.role == fabro_llm::Role::User)
        .map(|message| message.text.as_str())
        .collect();
    assert_eq!(users.len(), 2, "{users:?}");
    assert!(users[1].contains("/score"), "{users:?}");
}

#[tokio::test]
async fn running_out_of_repairs_fails_with_the_exact_message() {
    let mut run = TestRun::new();
    let workflow = workflow(&format!(
        "digraph {{ judge [shape=tab, output_retries=1, {SCORE_SCHEMA}] }}"
    ));
    script(
        &mut run,
        &workflow,
        json!({"nodes": {"judge": [{"text": "no json at all"}]}}),
    );
    let outcome = execute(&run.input(&workflow, "judge")).await;
    assert_eq!(outcome.status, StageStatus::Fail);
    assert_eq!(
        outcome.failure_reason(),
        "output schema validation failed after 1 repair attempt(s)"
    );
    assert_eq!(outcome.failure_class(), Some(FailureClass::Deterministic));
    assert!(!outcome.context_updates.contains_key("output.judge"));
    let names = event_names(&run);
    assert_eq!(
        names
            .iter()
            .filter(|name| *name == "StageOutputRepair")
            .count(),
        1
    );
}

#[tokio::test]
async fn full_fidelity_threads_share_prompt_lists_and_agent_sessions() {
    let mut run = TestRun::new();
    let workflow = workflow(
        r#"digraph { p1 [shape=tab, prompt="first"] p2 [shape=tab, prompt="second"]
                     a1 [shape=box, prompt="build"] a2 [shape=box, prompt="polish"] }"#,
    );
    script(&mut run, &workflow, json!({}));
    run.context = in_thread("talk");
    execute(&run.input(&workflow, "p1")).await;
    execute(&run.input(&workflow, "p2")).await;
    let messages = run.services.threads.messages("talk");
    let texts: Vec<&str> = messages
        .iter()
        .map(|message| message.text.as_str())
        .collect();
    assert_eq!(
        texts,
        [
            "first",
            "[Simulated] Response for stage: p1",
            "second",
            "[Simulated] Response for stage: p2"
        ]
    );
    run.context = in_thread("work");
    execute(&run.input(&workflow, "a1")).await;
    execute(&run.input(&workflow, "a2")).await;
    let live = run.services.threads.session("work").expect("session");
    let users: Vec<String> = live
        .lock()
        .await
        .session
        .messages()
        .into_iter()
        .filter(|message| message.role == fabro_llm::Role::User)
        .map(|message| message.text)
        .collect();
    assert_eq!(users, ["build", "polish"]);
    let started: Vec<_> = run
        .events()
        .into_iter()
        .filter(|event| event.name() == "Agent.SessionStarted")
        .collect();
    assert_eq!(started.len(), 1, "one session for the thread");
    assert_eq!(started[0].properties()["thread_id"], "work");
    // The second node's events carry its own id.
    let last = run.events().pop().expect("events");
    assert_eq!(last.node_id.as_deref(), Some("a2"));
    // Without a thread every stage starts fresh.
    run.context = Context::new();
    execute(&run.input(&workflow, "p1")).await;
    assert_eq!(run.services.threads.messages("talk").len(), 4);
}

#[tokio::test]
async fn loop_detection_injects_the_steering_text() {
    let mut run = TestRun::new();
    let workflow = workflow(r#"digraph { spin [shape=box, max_turns=12] }"#);
    fs_err::write(run.work_dir.join("a.txt"), "same").unwrap();
    script(
        &mut run,
        &workflow,
        json!({"nodes": {"spin": [{"tool_calls": [{"name": "read_file", "arguments": {"file_path": "a.txt"}}]}]}}),
    );
    run.context = in_thread("spin");
    let outcome = execute(&run.input(&workflow, "spin")).await;
    assert_eq!(outcome.failure_class(), Some(FailureClass::BudgetExhausted));
    let detected: Vec<_> = run
        .events()
        .into_iter()
        .filter(|event| event.name() == "Agent.LoopDetected")
        .collect();
    assert_eq!(detected.len(), 1);
    assert_eq!(detected[0].properties()["pattern_length"], 1);
    let live = run.services.threads.session("spin").expect("session");
    let messages = live.lock().await.session.messages();
    assert!(messages
        .iter()
        .any(|message| message.text == fabro_agent::LOOP_STEERING_MESSAGE));
}

#[tokio::test]
async fn refused_writes_go_back_to_the_model_and_the_stage_continues() {
    let mut run = TestRun::new();
    let workflow = workflow(r#"digraph { rogue [shape=box, write_scope="src/**"] }"#);
    script(
        &mut run,
        &workflow,
        json!({"nodes": {"rogue": [
            write_call("../x.txt", "escape"),
            write_call("docs/a.md", "out of scope"),
            write_call("src/ok.rs", "fine"),
            {"text": "done"}
        ]}}),
    );
    let outcome = execute(&run.input(&workflow, "rogue")).await;
    assert_eq!(outcome.status, StageStatus::Success, "{outcome:?}");
    assert_eq!(outcome.context_updates["response.rogue"], "done");
    assert_eq!(outcome.files_touched, ["src/ok.rs"]);
    assert!(!run.path().join("x.txt").exists());
    assert!(!run.work_dir.join("docs/a.md").exists());
    // The refusals are tool errors the model received (SPEC 13.4).
    let refusals: Vec<(bool, String)> = run
        .events()
        .into_iter()
        .filter(|event| event.name() == "Agent.ToolCallCompleted")
        .map(|event| {
            (
                event.properties()["is_error"] == true,
                event.properties()["output"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(refusals.len(), 3);
    for ((is_error, output), path) in refusals.iter().zip(["../x.txt", "docs/a.md"]) {
        assert!(is_error, "{output}");
        assert!(
            output.contains(&format!(
                "write scope violation: {path} is outside the allowed scope"
            )),
            "{output}"
        );
    }
    assert!(!refusals[2].0);
}

/// Makes `dir` a git repository with one commit, isolated from user configuration.
fn git_repository(dir: &std::path::Path) {
    fs_err::write(dir.join("README.md"), "hello\n").unwrap();
    for arguments in [
        &["init", "-q", "-b", "main"][..],
        &["add", "-A"],
        &["commit", "-q", "-m", "initial"],
    ] {
        let status = std::process::Command::new("git")
            .args(arguments)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .env_remove("GIT_INDEX_FILE")
            .output()
            .unwrap()
            .status;
        assert!(status.success(), "git {arguments:?}");
    }
}

#[tokio::test]
async fn a_change_outside_write_scope_made_through_the_shell_fails_as_structural() {
    let mut run = TestRun::new();
    git_repository(&run.work_dir);
    let workflow = workflow(r#"digraph { rogue [shape=box, write_scope="src/**"] }"#);
    script(
        &mut run,
        &workflow,
        json!({"nodes": {"rogue": [
            {"tool_calls": [{"name": "shell", "arguments": {"command": "echo x > outside.txt; mkdir -p src; echo y > src/in.rs"}}]},
            {"text": "done"}
        ]}}),
    );
    let outcome = execute(&run.input(&workflow, "rogue")).await;
    assert_eq!(outcome.status, StageStatus::Fail);
    assert_eq!(outcome.failure_class(), Some(FailureClass::Structural));
    assert_eq!(
        outcome.failure_reason(),
        "write scope violation: outside.txt"
    );
}

/// Makes `program` (a shell script) available on the sandbox PATH.
fn fake_program(run: &mut TestRun, name: &str, body: &str) {
    let bin = run.path().join("bin");
    fs_err::create_dir_all(&bin).unwrap();
    let path = bin.join(name);
    fs_err::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    let mut permissions = fs_err::metadata(&path).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    fs_err::set_permissions(&path, permissions).unwrap();
    let path_var = format!("{}:/usr/bin:/bin", bin.display());
    run.services.sandbox_env = SandboxEnv::new(
        [("PATH".into(), path_var.into())],
        &[],
        &std::collections::BTreeMap::new(),
    );
}

/// An anthropic target for `node` (the client is never called by the cli backend).
fn anthropic(run: &TestRun, workflow: &Workflow, node: &str) -> LlmTarget {
    let node = workflow.node(workflow.find(node).expect("node"));
    let mut target = run.services.llm.target_for(node);
    target.provider = fabro_llm::Provider::Anthropic;
    target.name = "anthropic".to_owned();
    target.model = "claude-sonnet-4-6".to_owned();
    target
}

#[tokio::test]
async fn the_cli_backend_runs_the_provider_cli_in_the_working_directory() {
    let mut run = TestRun::new();
    let workflow = workflow(r#"digraph { ext [shape=box, backend="cli", prompt="do it"] }"#);
    fake_program(
        &mut run,
        "claude",
        r#"prompt=$(cat)
printf '%s' "$prompt" > seen.txt
echo "{\"type\":\"system\",\"args\":\"$*\"}"
echo '{"type":"result","result":"Done {\"preferred_next_label\":\"next\"}","usage":{"input_tokens":7,"output_tokens":3}}'
"#,
    );
    let input = run.input(&workflow, "ext");
    let outcome = execute_with(&input, anthropic(&run, &workflow, "ext"), "do it").await;
    assert_eq!(outcome.status, StageStatus::Success, "{outcome:?}");
    assert_eq!(outcome.preferred_label.as_deref(), Some("next"));
    assert_eq!(outcome.usage.map(|usage| usage.input_tokens), Some(7));
    assert_eq!(outcome.provider.as_deref(), Some("anthropic"));
    assert_eq!(
        fs_err::read_to_string(run.work_dir.join("seen.txt")).unwrap(),
        "do it"
    );
    let started = run
        .events()
        .into_iter()
        .find(|event| event.name() == "Agent.SessionStarted")
        .expect("session event");
    assert_eq!(started.properties()["backend"], "cli");
}

#[tokio::test]
async fn a_missing_cli_fails_deterministically_with_the_spec_message() {
    let mut run = TestRun::new();
    let workflow = workflow(r#"digraph { ext [shape=box, backend="cli"] }"#);
    fake_program(&mut run, "other", "true");
    let input = run.input(&workflow, "ext");
    let outcome = execute_with(&input, anthropic(&run, &workflow, "ext"), "x").await;
    assert_eq!(
        outcome.failure_reason(),
        "cli backend requires 'claude' on PATH"
    );
    assert_eq!(outcome.failure_class(), Some(FailureClass::Deterministic));
}

#[tokio::test]
async fn the_acp_backend_talks_to_the_configured_agent() {
    let run = TestRun::new();
    let agent = run.path().join("acp-agent.sh");
    fs_err::write(
        &agent,
        r#"read -r init
echo '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1,"agentCapabilities":{}}}'
read -r new
echo '{"jsonrpc":"2.0","id":2,"result":{"sessionId":"s-1"}}'
read -r prompt
case "$prompt" in *'implement the thing'*) ;; *) exit 1;; esac
echo '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Done. "}}}}'
echo '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"{\"outcome\":\"partial_success\"}"}}}}'
echo '{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}'
"#,
    )
    .unwrap();
    let workflow = workflow(&format!(
        r#"digraph {{ acp [shape=box, backend="acp", prompt="implement the thing", acp_command="/bin/sh {}"] }}"#,
        agent.display()
    ));
    let outcome = execute(&run.input(&workflow, "acp")).await;
    assert_eq!(outcome.status, StageStatus::PartialSuccess, "{outcome:?}");
    assert_eq!(
        outcome.context_updates["response.acp"],
        "Done. {\"outcome\":\"partial_success\"}"
    );
    // Without a command the stage fails before starting anything.
    let workflow = workflow_without_command();
    let outcome = execute(&run.input(&workflow, "acp")).await;
    assert_eq!(
        outcome.failure_reason(),
        "acp backend requires acp_command or [agent.acp] command"
    );
}

fn workflow_without_command() -> Workflow {
    workflow(r#"digraph { acp [shape=box, backend="acp"] }"#)
}

#[tokio::test]
async fn compaction_events_reach_the_run_with_the_node_id() {
    let mut run = TestRun::new();
    let workflow = workflow(r#"digraph { big [shape=box] }"#);
    for name in ["a", "b", "c", "d"] {
        fs_err::write(run.work_dir.join(format!("{name}.txt")), name).unwrap();
    }
    let read = |path: &str| json!({"tool_calls": [{"name": "read_file", "arguments": {"file_path": path}}]});
    script(
        &mut run,
        &workflow,
        json!({"context_window": 1000, "nodes": {"big": [
            read("a.txt"), read("b.txt"), read("c.txt"), read("d.txt"),
            {"text": "## Goal\nsummary"}, {"text": "done"}
        ]}}),
    );
    let long_prompt = "context ".repeat(600);
    let input = StageInput {
        preamble: &long_prompt,
        ..run.input(&workflow, "big")
    };
    let outcome = execute(&input).await;
    assert_eq!(outcome.status, StageStatus::Success, "{outcome:?}");
    let events = run.events();
    for name in [
        "Agent.ContextWindowWarning",
        "Agent.CompactionStarted",
        "Agent.CompactionCompleted",
    ] {
        let event = events
            .iter()
            .find(|event| event.name() == name)
            .unwrap_or_else(|| panic!("no {name} event"));
        assert_eq!(event.node_id.as_deref(), Some("big"));
    }
    let warning = events
        .iter()
        .find(|event| event.name() == "Agent.ContextWindowWarning")
        .expect("warning");
    assert_eq!(warning.properties()["context_window_size"], 1000);
}

#[tokio::test]
async fn cli_repairs_start_a_new_process_with_the_rejected_response() {
    let mut run = TestRun::new();
    let workflow = workflow(&format!(
        "digraph {{ ext [shape=box, backend=\"cli\", prompt=\"score it\", {SCORE_SCHEMA}] }}"
    ));
    fake_program(
        &mut run,
        "claude",
        r#"prompt=$(cat)
if [ -f first-done ]; then
  printf '%s' "$prompt" > repair-prompt.txt
  echo '{"type":"result","result":"{\"score\": 5}"}'
else
  touch first-done
  echo '{"type":"result","result":"{\"score\": \"five\"}"}'
fi
"#,
    );
    let input = run.input(&workflow, "ext");
    let outcome = execute_with(&input, anthropic(&run, &workflow, "ext"), "score it").await;
    assert_eq!(outcome.status, StageStatus::Success, "{outcome:?}");
    assert_eq!(outcome.context_updates["output.ext"]["score"], 5);
    let repair = fs_err::read_to_string(run.work_dir.join("repair-prompt.txt")).unwrap();
    assert!(repair.starts_with("score it\n\n"), "{repair}");
    assert!(repair.contains("{\"score\": \"five\"}"), "{repair}");
    assert!(
        repair.ends_with("Reply again with a corrected JSON object."),
        "{repair}"
    );
}

#[test]
fn external_agents_degrade_full_fidelity_with_a_warning_per_backend() {
    use crate::handler::{handles_own_timeout, stage_fidelity};
    use fabro_language::model::Fidelity;
    let mut run = TestRun::new();
    let workflow = workflow(
        r#"digraph {
            cli [shape=box, backend="cli", provider="anthropic"]
            sim [shape=box, backend="cli", provider="simulated"]
            acp [shape=box, backend="acp", acp_command="agent"]
            api [shape=box, provider="simulated"]
            ask [shape=tab, backend="cli", provider="simulated"]
        }"#,
    );
    run.services.llm = LlmSetup::resolve(&workflow, &LlmDefaults::default(), Arc::default(), false)
        .expect("external agents need no key");
    let node = |id: &str| workflow.node(workflow.find(id).expect("node"));
    let fidelity =
        |id: &str, fidelity, run: &TestRun| stage_fidelity(node(id), fidelity, &run.services);
    assert_eq!(fidelity("cli", Fidelity::Full, &run), Fidelity::SummaryHigh);
    assert_eq!(fidelity("acp", Fidelity::Full, &run), Fidelity::SummaryHigh);
    // A cli agent on the simulated provider runs like api, threads included.
    assert_eq!(fidelity("sim", Fidelity::Full, &run), Fidelity::Full);
    assert_eq!(fidelity("api", Fidelity::Full, &run), Fidelity::Full);
    assert_eq!(fidelity("ask", Fidelity::Full, &run), Fidelity::Full);
    assert_eq!(fidelity("cli", Fidelity::Compact, &run), Fidelity::Compact);
    let warnings: Vec<(Option<String>, serde_json::Value)> = run
        .events()
        .into_iter()
        .filter(|event| event.name() == "Warning")
        .map(|event| {
            (
                event.node_id.clone().map(String::from),
                event.properties()["code"].clone(),
            )
        })
        .collect();
    assert_eq!(
        warnings,
        [
            (Some("cli".to_owned()), json!("cli_no_threads")),
            (Some("acp".to_owned()), json!("acp_no_threads")),
        ]
    );
    // A dry run simulates every handler, so nothing degrades.
    run.services.dry_run = true;
    assert_eq!(fidelity("acp", Fidelity::Full, &run), Fidelity::Full);
    // Only acp agents (of the LLM nodes) enforce the node timeout themselves.
    assert!(handles_own_timeout(node("acp")));
    assert!(handles_own_timeout(node("cli")));
    assert!(!handles_own_timeout(node("api")));
}

mod effort;
