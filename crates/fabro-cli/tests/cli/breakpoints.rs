//! SPEC 10.8, issue 33 acceptance 2: no request carries more than four Anthropic
//! breakpoints after compaction, after failover, and across `full`-fidelity threads.
//! Each scenario runs `fabro run` against twins that apply Anthropic's caching rules
//! (a request with a fifth breakpoint is answered 400, so the run would fail) and then
//! counts the markers of every request the twins received.

use fabro_test_support::TestEnv;
use fabro_twin::{Recorded, Reply, Turn, Twin};

use crate::{code, stderr};

const KEY: &str = "sk-ant-FAKE-breakpoints-1234";

/// A tool turn writing `content` to `notes/{id}.txt`.
fn write_turn(id: &str, content: &str) -> Reply {
    let arguments =
        serde_json::json!({"file_path": format!("notes/{id}.txt"), "content": content}).to_string();
    Reply::Turn(Turn::text("").with_tool_call(id, "write_file", &arguments))
}

/// The instructions of a compaction summary call: a one-off request, not a prefix
/// anything reuses, so it carries no breakpoint.
const SUMMARY_CALL: &str = "You summarise the earlier part";

/// Asserts that every turn of the conversation carries between one and four
/// breakpoints (and a summary call none); returns how many requests there were.
fn assert_breakpoints(requests: &[Recorded], what: &str) -> usize {
    for (index, request) in requests.iter().enumerate() {
        let body = request.body.to_string();
        let markers = body.matches("cache_control").count();
        let allowed = if body.contains(SUMMARY_CALL) {
            0..=0
        } else {
            1..=4
        };
        assert!(
            allowed.contains(&markers),
            "{what}: request {index} carries {markers} breakpoints"
        );
    }
    requests.len()
}

fn events(env: &TestEnv, run_id: &str) -> String {
    fs_err::read_to_string(
        env.fabro_home()
            .join("scratch")
            .join(run_id)
            .join("events.jsonl"),
    )
    .expect("the run's events")
}

fn caching_twin(runtime: &tokio::runtime::Runtime) -> Twin {
    let twin = runtime.block_on(Twin::start()).expect("the twin starts");
    twin.apply_prompt_caching();
    twin
}

/// Compaction (SPEC 6.8) replaces the older history with a summary: the next request
/// starts a new prefix, with breakpoints placed afresh. The window is the configured
/// model table's `context_window` (SPEC 10.7), which the agent session compacts before.
#[test]
fn compaction_keeps_at_most_four_breakpoints() {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = caching_twin(&runtime);
    let content = "compaction filler line\n".repeat(300);
    twin.enqueue((1..=12).map(|turn| write_turn(&format!("toolu_{turn}"), &content)));
    twin.enqueue([Reply::text("Wrote twelve files.")]);
    twin.answer_containing(
        SUMMARY_CALL,
        Reply::text("## Goal\nWrite notes.\n## Progress\nNotes written.\n## Key Decisions\nNone.\n## Failed Approaches\nNone.\n## Open Issues\nNone.\n## Next Steps\nWrite the rest."),
    );
    twin.set_fallback(Reply::bad_request());
    let env = TestEnv::new("breakpoints_compaction");
    env.write(
        "w.fabro",
        r#"digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  work [shape=box, provider="tiny", model="tiny-1", prompt="Write the notes"]
  start -> work -> exit
}
"#,
    );
    env.write(
        "workflow.toml",
        &format!(
            r#"[llm.providers.tiny]
wire = "anthropic"
base_url = "{}"
api_key_env = "TINY_API_KEY"

[llm.providers.tiny.models."tiny-1"]
context_window = 16000
max_output = 2048
"#,
            twin.base_url()
        ),
    );
    let output = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro", "--run-id", "compacted"])
        .env("TINY_API_KEY", KEY)
        .output()
        .expect("fabro runs");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let events = events(&env, "compacted");
    assert!(
        events.contains("Agent.CompactionCompleted"),
        "no compaction:\n{events}"
    );
    assert!(events.contains("\"context_window_size\":16000"), "{events}");
    let requests = twin.requests();
    assert!(assert_breakpoints(&requests, "compaction") > 13);
    // The configured `max_output` caps every request of the stage.
    assert!(requests
        .iter()
        .all(|request| request.body["max_tokens"] == 2048));
}

/// Failover (SPEC 9.4) sends the whole conversation to the next provider: a new prefix
/// there, with breakpoints placed afresh.
#[test]
fn failover_keeps_at_most_four_breakpoints() {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let primary = caching_twin(&runtime);
    let backup = caching_twin(&runtime);
    let content = "failover filler line\n".repeat(100);
    primary.enqueue((1..=3).map(|turn| write_turn(&format!("toolu_{turn}"), &content)));
    primary.set_fallback(Reply::quota());
    backup.enqueue((4..=6).map(|turn| write_turn(&format!("toolu_{turn}"), &content)));
    backup.enqueue([Reply::text("Wrote six files.")]);
    backup.set_fallback(Reply::bad_request());
    let env = TestEnv::new("breakpoints_failover");
    env.write(
        "w.fabro",
        r#"digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  work [shape=box, provider="anthropic", model="claude-sonnet-4-6", prompt="Write the notes"]
  start -> work -> exit
}
"#,
    );
    env.write(
        "workflow.toml",
        &format!(
            r#"[llm.providers.backup]
wire = "anthropic"
base_url = "{}"
api_key_env = "BACKUP_API_KEY"

[llm.providers.backup.models."claude-sonnet-4-6"]
context_window = 200000

[llm.fallbacks]
anthropic = ["backup"]
"#,
            backup.base_url()
        ),
    );
    let output = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro", "--run-id", "failed-over"])
        .env("ANTHROPIC_API_KEY", KEY)
        .env("ANTHROPIC_BASE_URL", primary.base_url())
        .env("BACKUP_API_KEY", KEY)
        .output()
        .expect("fabro runs");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let events = events(&env, "failed-over");
    assert!(
        events.contains("\"from_provider\":\"anthropic\"")
            && events.contains("\"to_provider\":\"backup\""),
        "no failover:\n{events}"
    );
    let primary_requests = primary.requests();
    let backup_requests = backup.requests();
    assert_eq!(assert_breakpoints(&primary_requests, "primary"), 4);
    assert_eq!(assert_breakpoints(&backup_requests, "backup"), 4);
    // The backup received the whole conversation: the first turns' tool results too.
    let first = backup_requests[0].body.to_string();
    assert!(
        first.contains("toolu_3") && first.contains("toolu_1"),
        "{first}"
    );
}

/// A `full`-fidelity thread carries one agent session across stages: the second
/// stage's requests extend the first stage's conversation, still with at most four
/// breakpoints.
#[test]
fn a_full_fidelity_thread_keeps_at_most_four_breakpoints() {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = caching_twin(&runtime);
    let content = "thread filler line\n".repeat(100);
    twin.enqueue((1..=4).map(|turn| write_turn(&format!("toolu_{turn}"), &content)));
    twin.enqueue([Reply::text("First part written.")]);
    twin.enqueue((5..=8).map(|turn| write_turn(&format!("toolu_{turn}"), &content)));
    twin.enqueue([Reply::text("Second part written.")]);
    twin.set_fallback(Reply::bad_request());
    let env = TestEnv::new("breakpoints_thread");
    env.write(
        "w.fabro",
        r#"digraph w {
  graph [default_model="sonnet"]
  start [shape=Mdiamond]
  exit [shape=Msquare]
  first [shape=box, fidelity="full", thread_id="main", prompt="Write the first notes"]
  second [shape=box, fidelity="full", thread_id="main", prompt="Write the other notes"]
  start -> first -> second -> exit
}
"#,
    );
    let output = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro", "--run-id", "threaded"])
        .env("ANTHROPIC_API_KEY", KEY)
        .env("ANTHROPIC_BASE_URL", twin.base_url())
        .output()
        .expect("fabro runs");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let requests = twin.requests();
    assert_eq!(assert_breakpoints(&requests, "thread"), 10);
    // The second stage continued the first stage's conversation.
    let sixth = requests[5].body.to_string();
    assert!(
        sixth.contains("toolu_4") && sixth.contains("Write the other notes"),
        "{sixth}"
    );
}
