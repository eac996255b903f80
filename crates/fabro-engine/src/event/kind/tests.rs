//! Event JSON shapes: one snapshot per event, keys in the order the files always had,
//! and events of other versions kept byte for byte.

use serde_json::{json, Value};

use super::*;
use crate::event::EventEnvelope;
use crate::id::{NodeId, RunId};

fn text(value: &str) -> String {
    value.to_owned()
}

fn usage() -> EventUsage {
    EventUsage {
        cache_read_tokens: 1,
        cache_write_tokens: 2,
        cost_usd: Some(0.25),
        input_tokens: 100,
        output_tokens: 20,
        reasoning_tokens: 5,
    }
}

/// One event of every kind, with every optional property present, plus the variants
/// whose shape changes when an optional property is absent.
fn samples() -> Vec<(Option<&'static str>, EventKind)> {
    vec![
        (
            None,
            WorkflowRunStarted {
                base_sha: Some(text("0123456789abcdef0123456789abcdef01234567")),
                dry_run: false,
                goal: text("Ship it"),
                next_node_id: text("start"),
                resumed: true,
                run_branch: Some(text("fabro/run/r1")),
                run_dir: text("/home/u/.fabro/scratch/r1"),
                worker: Some(text("worker-1")),
                workflow_name: text("quickstart"),
            }
            .into(),
        ),
        (
            None,
            WorkflowRunCompleted {
                artifact_count: 3,
                asset_count: 1,
                completed_count: 7,
                cost_usd: Some(0.5),
                duration_ms: 1234,
                status: RunStatus::Success,
                usage: usage(),
            }
            .into(),
        ),
        (
            None,
            WorkflowRunFailed {
                duration_ms: 99,
                failure_class: text("deterministic"),
                node_id: Some(text("test")),
                reason: text("tests failed"),
            }
            .into(),
        ),
        (
            Some("plan"),
            StageStarted {
                attempt: 1,
                branch: Some(text("style")),
                handler: text("agent"),
                isolation: Some(StageIsolation {
                    enforced: vec![text("landlock"), text("network_namespace")],
                    mode: text("workspace"),
                    network: false,
                }),
                rank: 2,
                visit: 1,
            }
            .into(),
        ),
        (
            Some("plan"),
            StageStarted {
                attempt: 1,
                branch: None,
                handler: text("agent"),
                isolation: None,
                rank: 2,
                visit: 1,
            }
            .into(),
        ),
        (
            Some("plan"),
            StageCompleted {
                attempts: 2,
                duration_ms: 420,
                failure_class: Some(text("transient_infra")),
                failure_reason: Some(text("connection reset")),
                files_touched: vec![text("src/main.rs")],
                model: Some(text("claude-sonnet-4-5")),
                outcome: text("fail"),
                provider: Some(text("anthropic")),
                rank: 2,
                status: StageStatus::Fail,
                usage: Some(usage()),
                visit: 1,
            }
            .into(),
        ),
        (
            Some("plan"),
            StageRetrying {
                attempt: 1,
                delay_ms: 200,
                failure_class: text("transient_infra"),
                failure_reason: text("connection reset"),
                next_attempt: 2,
            }
            .into(),
        ),
        (
            Some("plan"),
            StageOutputRepair {
                attempt: 1,
                errors: vec![text("/status: missing")],
                max: 2,
            }
            .into(),
        ),
        (
            Some("gate"),
            EdgeSelected {
                from: text("gate"),
                label: text("pass"),
                loop_restart: false,
                reason: text("condition"),
                to: text("exit"),
            }
            .into(),
        ),
        (
            Some("plan"),
            CheckpointCompleted {
                git_commit_sha: Some(text("1111111111111111111111111111111111111111")),
                metadata_sha: Some(text("2222222222222222222222222222222222222222")),
                next_node_id: Some(text("implement")),
            }
            .into(),
        ),
        (
            Some("test"),
            CommandStarted {
                language: text("shell"),
                script: text("cargo test"),
                timeout_ms: 600_000,
            }
            .into(),
        ),
        (
            Some("test"),
            CommandCompleted {
                duration_ms: 52,
                exit_code: Some(0),
                stderr_ref: BlobRef::parse(&format!("blob://sha256/{}", "a".repeat(64))),
                stdout_ref: BlobRef::parse(&format!("blob://sha256/{}", "b".repeat(64))),
                timed_out: false,
            }
            .into(),
        ),
        (
            Some("approve"),
            HumanQuestion {
                allow_freeform: false,
                default_choice: Some(text("yes")),
                options: vec![HumanOption {
                    key: text("Y"),
                    label: text("[Y] yes"),
                    target: text("exit"),
                }],
                question_id: text("approve-1-1"),
                question_type: text("yes_no"),
                text: text("Ship it?"),
                timeout_ms: Some(60_000),
            }
            .into(),
        ),
        (
            Some("approve"),
            HumanAnswer {
                label: text("[Y] yes"),
                question_id: text("approve-1-1"),
                selected_key: text("Y"),
                source: text("auto_approve"),
                text: String::new(),
            }
            .into(),
        ),
        (
            Some("review"),
            ParallelStarted {
                branch_count: 3,
                join_node: text("pick"),
                join_policy: text("wait_all"),
                max_parallel: 4,
            }
            .into(),
        ),
        (
            Some("style"),
            ParallelBranchStarted {
                branch: text("style"),
                index: 0,
            }
            .into(),
        ),
        (
            Some("style"),
            ParallelBranchCompleted {
                duration_ms: 80,
                head_sha: Some(text("3333333333333333333333333333333333333333")),
                status: StageStatus::Success,
            }
            .into(),
        ),
        (
            Some("review"),
            ParallelCompleted {
                failure_count: 1,
                success_count: 2,
            }
            .into(),
        ),
        (
            Some("pick"),
            FanInSelected {
                best_head_sha: Some(text("3333333333333333333333333333333333333333")),
                best_id: text("style"),
                best_outcome: text("success"),
                method: text("heuristic"),
            }
            .into(),
        ),
        (
            Some("child"),
            SubWorkflowStarted {
                child_run_id: text("r2"),
            }
            .into(),
        ),
        (
            Some("child"),
            SubWorkflowCompleted {
                child_run_id: text("r2"),
                status: RunStatus::Success,
            }
            .into(),
        ),
        (
            Some("plan"),
            AgentSessionStarted {
                backend: text("api"),
                model: text("claude-sonnet-4-5"),
                provider: text("anthropic"),
                thread_id: Some(text("work")),
            }
            .into(),
        ),
        (
            Some("plan"),
            AgentAssistantMessage {
                agent_id: Some(text("agent-1")),
                text: text("Done."),
                tool_call_count: 1,
                usage: usage(),
            }
            .into(),
        ),
        (
            Some("plan"),
            AgentToolCallStarted {
                agent_id: None,
                arguments: json!({"path": "a.txt", "content": "x"}),
                call_id: text("call-1"),
                server: None,
                tool: text("write_file"),
            }
            .into(),
        ),
        (
            Some("plan"),
            AgentToolCallCompleted {
                agent_id: Some(text("agent-1")),
                call_id: text("call-1"),
                duration_ms: 3,
                is_error: false,
                output: text("wrote a.txt"),
                server: None,
                tool: text("write_file"),
            }
            .into(),
        ),
        (
            Some("plan"),
            AgentLlmRetry {
                attempt: 1,
                delay_ms: 200,
                error_kind: text("rate_limit"),
                status_code: Some(429),
            }
            .into(),
        ),
        (
            Some("plan"),
            AgentFailover {
                error_kind: text("server"),
                from_model: text("claude-sonnet-4-5"),
                from_provider: text("anthropic"),
                to_model: text("gpt-5.2"),
                to_provider: text("openai"),
            }
            .into(),
        ),
        (
            Some("plan"),
            AgentLoopDetected {
                agent_id: None,
                pattern_length: 2,
            }
            .into(),
        ),
        (
            Some("plan"),
            AgentContextWindowWarning {
                agent_id: None,
                context_window_size: 1000,
                estimated_tokens: 850,
                usage_percent: 85.0,
            }
            .into(),
        ),
        (
            Some("plan"),
            AgentCompactionStarted {
                agent_id: None,
                context_window_size: 1000,
                estimated_tokens: 900,
            }
            .into(),
        ),
        (
            Some("plan"),
            AgentCompactionCompleted {
                agent_id: None,
                original_turn_count: 40,
                preserved_turn_count: 6,
                summary_token_estimate: 300,
                tracked_file_count: 2,
            }
            .into(),
        ),
        (
            Some("plan"),
            AgentError {
                agent_id: None,
                message: text("summary failed"),
            }
            .into(),
        ),
        (
            Some("implement"),
            AgentSteeringDelivered {
                agent_id: None,
                count: 2,
            }
            .into(),
        ),
        (
            Some("implement"),
            SteeringQueued {
                source: text("cli"),
                text: text("Use the v2 API"),
            }
            .into(),
        ),
        (
            None,
            GoalGateUnsatisfied {
                gate_node: text("implement"),
                retry_target: text("plan"),
            }
            .into(),
        ),
        (
            Some("implement"),
            LoopRestart {
                from: text("implement"),
                restart_count: 1,
                to: text("plan"),
            }
            .into(),
        ),
        (
            Some("test"),
            CircuitBreakerTripped {
                count: 3,
                limit: 3,
                scope: text("loop"),
                signature: text("test|deterministic|tests failed"),
            }
            .into(),
        ),
        (
            None,
            WatchdogTimeout {
                last_event_id: 41,
                stall_timeout_s: 1800,
            }
            .into(),
        ),
        (
            None,
            BudgetExhausted {
                kind: "stages".to_owned(),
                limit: "1000".to_owned(),
                used: "1000".to_owned(),
            }
            .into(),
        ),
        (
            Some("plan"),
            Warning::new("custom_outcome", "node plan reported custom outcome 'x'").into(),
        ),
        (
            Some("deploy"),
            Warning {
                event: Some(text("stage_complete")),
                reason: Some(text("timed out after 1s")),
                ..Warning::new(
                    "hook_failed",
                    "stage_complete hook 2 failed: timed out after 1s",
                )
            }
            .into(),
        ),
        (
            Some("deploy"),
            HookStarted {
                blocking: true,
                event: text("stage_start"),
                hook: 1,
                target: text("./scripts/check-deploy.sh"),
                timeout_ms: 30_000,
                kind: text("command"),
            }
            .into(),
        ),
        (
            Some("deploy"),
            HookCompleted {
                duration_ms: 12,
                event: text("stage_start"),
                exit_code: Some(1),
                hook: 1,
                reason: Some(text("deploy window closed")),
                status: text("fail"),
                status_code: None,
                timed_out: false,
            }
            .into(),
        ),
        (
            None,
            HookCompleted {
                duration_ms: 40,
                event: text("run_complete"),
                exit_code: None,
                hook: 2,
                reason: None,
                status: text("success"),
                status_code: Some(204),
                timed_out: false,
            }
            .into(),
        ),
        (None, RunRewound { k: 2, to_rank: 3 }.into()),
    ]
}

fn envelope(node_id: Option<&str>, kind: EventKind) -> EventEnvelope {
    EventEnvelope {
        id: 17,
        ts: text("2026-05-05T09:54:22.123Z"),
        run_id: RunId::from("01JTESTRUN"),
        node_id: node_id.map(NodeId::from),
        kind,
    }
}

fn line(envelope: &EventEnvelope) -> String {
    serde_json::to_string(envelope).expect("events serialise")
}

#[test]
fn every_event_has_a_sample() {
    let sampled: std::collections::BTreeSet<String> = samples()
        .iter()
        .map(|(_, kind)| kind.name().to_owned())
        .collect();
    let names: std::collections::BTreeSet<String> = EventKind::NAMES
        .iter()
        .map(|name| (*name).to_owned())
        .collect();
    assert_eq!(sampled, names);
}

/// One snapshot per event: a renamed, retyped or reordered property fails here.
#[test]
fn event_json_shapes() {
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    for (node_id, kind) in samples() {
        let count = seen.entry(kind.name().to_owned()).or_insert(0);
        *count += 1;
        let snapshot = format!("{}_{count}", kind.name().replace('.', "_"));
        insta::assert_snapshot!(snapshot, line(&envelope(node_id, kind)));
    }
}

/// Properties were JSON maps, whose keys serde_json writes sorted: the structs must
/// declare their fields in that order for the files to stay byte-identical.
#[test]
fn properties_keep_their_keys_sorted() {
    for (node_id, kind) in samples() {
        let written = line(&envelope(node_id, kind));
        let parsed: Value = serde_json::from_str(&written).expect("valid JSON");
        let sorted = serde_json::to_string(&parsed["properties"]).expect("serialises");
        let properties = written
            .split_once(r#""properties":"#)
            .map(|(_, rest)| &rest[..rest.len() - 1])
            .expect("properties last");
        assert_eq!(properties, sorted, "{written}");
    }
}

#[test]
fn events_read_back_typed_and_unchanged() {
    for (node_id, kind) in samples() {
        let original = envelope(node_id, kind);
        let written = line(&original);
        let read: EventEnvelope = serde_json::from_str(&written).expect("reads back");
        assert!(
            !matches!(read.kind, EventKind::Other(_)),
            "{} was not read as its type",
            read.name()
        );
        assert_eq!(read, original);
        assert_eq!(line(&read), written);
    }
}

#[test]
fn the_envelope_omits_the_node_of_run_level_events() {
    let (node_id, kind) = samples().remove(0);
    assert_eq!(node_id, None);
    let written = line(&envelope(node_id, kind));
    assert!(
        written.starts_with(
            r#"{"id":17,"ts":"2026-05-05T09:54:22.123Z","run_id":"01JTESTRUN","event":"WorkflowRunStarted","properties":{"#
        ),
        "{written}"
    );
}

/// Events of other fabro versions (unknown names, extra or missing properties) are kept
/// as read, and written again byte for byte.
#[test]
fn foreign_events_are_kept_raw() {
    let lines = [
        r#"{"id":3,"ts":"2026-05-05T09:54:22.123Z","run_id":"r","event":"BudgetExhausted","properties":{"kind":"stages","limit":10,"used":10}}"#,
        r#"{"id":4,"ts":"2026-05-05T09:54:22.123Z","run_id":"r","event":"StageStarted","node_id":"plan","properties":{"attempt":1,"handler":"agent","rank":2,"shiny":true,"visit":1}}"#,
        r#"{"id":5,"ts":"2026-05-05T09:54:22.123Z","run_id":"r","event":"Warning","properties":{"code":"x"}}"#,
    ];
    for written in lines {
        let read: EventEnvelope = serde_json::from_str(written).expect("reads");
        let EventKind::Other(raw) = &read.kind else {
            panic!("{written} was typed: {read:?}");
        };
        assert_eq!(raw.name, read.name());
        assert_eq!(line(&read), written);
    }
}

#[test]
fn sub_agent_events_carry_the_outermost_agent_id() {
    use fabro_agent::AgentEvent;
    let inner = AgentEvent::Error {
        message: text("boom"),
    };
    let nested = AgentEvent::SubAgent {
        agent_id: text("outer"),
        event: Box::new(AgentEvent::SubAgent {
            agent_id: text("inner"),
            event: Box::new(inner.clone()),
        }),
    };
    assert_eq!(
        EventKind::from(&nested),
        EventKind::AgentError(AgentError {
            agent_id: Some(text("outer")),
            message: text("boom"),
        })
    );
    assert_eq!(
        EventKind::from(&inner),
        EventKind::AgentError(AgentError {
            agent_id: None,
            message: text("boom"),
        })
    );
}
