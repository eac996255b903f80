//! `fabro run` against a real provider client pointed at the twin (`fabro-twin`): the
//! call goes over HTTP with the key in its header, and the key appears in no file the
//! run wrote, no event and no output (SPEC 13.1); and issue 6's plan → implement →
//! review workflow over the real Anthropic client, tool calls and all.

use std::path::Path;

use fabro_test_support::TestEnv;
use fabro_twin::{Reply, Twin};

use crate::{code, stderr, stdout};

const KEY: &str = "sk-ant-blackbox-FAKE-KEY-42424242";

const WORKFLOW: &str = r#"digraph keys {
    graph [goal="Check the keys"]
    start [shape=Mdiamond]
    ask [prompt="Say something about $goal", model=sonnet]
    exit [shape=Msquare]
    start -> ask -> exit
}
"#;

/// Runs the workflow with Anthropic pointed at a twin answering `reply`; returns the
/// output, the requests the twin saw and the environment.
fn run_against_twin(
    name: &str,
    reply: Reply,
) -> (std::process::Output, Vec<fabro_twin::Recorded>, TestEnv) {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = runtime.block_on(Twin::start()).expect("the twin starts");
    twin.set_fallback(reply);
    let env = TestEnv::new(name);
    env.write("w.fabro", WORKFLOW);
    let output = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro", "--run-id", "r1", "--json"])
        .env("ANTHROPIC_API_KEY", KEY)
        .env("ANTHROPIC_BASE_URL", twin.base_url())
        .env("FABRO_LOG", "debug")
        .output()
        .expect("fabro runs");
    let requests = twin.requests();
    drop(twin);
    (output, requests, env)
}

/// Every file under `dir` whose bytes contain `needle`.
pub(crate) fn files_containing(dir: &Path, needle: &[u8]) -> (Vec<String>, usize) {
    let mut hits = Vec::new();
    let mut count = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            for entry in fs_err::read_dir(&path).expect("readable dir") {
                stack.push(entry.expect("dir entry").path());
            }
        } else if let Ok(bytes) = fs_err::read(&path) {
            count += 1;
            if bytes.windows(needle.len()).any(|window| window == needle) {
                hits.push(path.display().to_string());
            }
        }
    }
    (hits, count)
}

#[test]
fn api_keys_never_reach_run_files_events_or_output() {
    let (output, requests, env) = run_against_twin(
        "api_keys_never_reach_run_files_events_or_output",
        Reply::text("All keys accounted for."),
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    // The real client made the call, with the key in its header.
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/v1/messages");
    assert_eq!(requests[0].header("x-api-key"), Some(KEY));
    assert_eq!(requests[0].body["model"], "claude-sonnet-4-6");
    let run_dir = env.fabro_home().join("scratch/r1");
    let response =
        fs_err::read_to_string(find_file(&run_dir, "response.md")).expect("response.md written");
    assert_eq!(response, "All keys accounted for.");
    let (hits, files) = files_containing(&env.fabro_home(), KEY.as_bytes());
    assert!(files >= 5, "the run wrote its files ({files})");
    assert!(hits.is_empty(), "key found in {hits:?}");
    assert!(!stdout(&output).contains(KEY));
    assert!(!stderr(&output).contains(KEY));
    assert!(
        stdout(&output).contains("WorkflowRunCompleted"),
        "events on stdout"
    );
}

#[test]
fn a_provider_echoing_the_key_in_an_error_leaks_nothing() {
    let (output, requests, env) = run_against_twin(
        "a_provider_echoing_the_key_in_an_error_leaks_nothing",
        Reply::unauthorized(),
    );
    // The failed stage routes to exit over its unconditional edge: exit 3 (SPEC 4.7).
    assert_eq!(code(&output), 3, "{}", stderr(&output));
    assert_eq!(requests.len(), 1, "401 is not retried");
    let events = fs_err::read_to_string(env.fabro_home().join("scratch/r1/events.jsonl"))
        .expect("events written");
    assert!(
        events.contains("[REDACTED]"),
        "the echoed key was scrubbed: {events}"
    );
    assert!(
        events.contains("\"failure_class\":\"deterministic\""),
        "{events}"
    );
    let (hits, _) = files_containing(&env.fabro_home(), KEY.as_bytes());
    assert!(hits.is_empty(), "key found in {hits:?}");
    assert!(!stdout(&output).contains(KEY));
    assert!(!stderr(&output).contains(KEY));
}

fn find_file(dir: &Path, name: &str) -> std::path::PathBuf {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            for entry in fs_err::read_dir(&path).expect("readable dir") {
                stack.push(entry.expect("dir entry").path());
            }
        } else if path.file_name().is_some_and(|file| file == name) {
            return path;
        }
    }
    dir.join(name)
}

const PLAN_IMPLEMENT_REVIEW: &str = r#"digraph w {
  graph [goal="Add a greeting module", default_model="sonnet"]
  start [shape=Mdiamond]
  exit [shape=Msquare]
  plan [shape=tab, prompt="Plan: $goal"]
  implement [shape=box, prompt="Implement the plan"]
  review [shape=tab, prompt="Review the change"]
  start -> plan -> implement -> review
  review -> implement [label="revise"]
  review -> exit [label="approve"]
}
"#;

fn write_turn(id: &str, path: &str, content: &str) -> Reply {
    let arguments = serde_json::json!({"file_path": path, "content": content}).to_string();
    Reply::Turn(fabro_twin::Turn::text("").with_tool_call(id, "write_file", &arguments))
}

/// Issue 6, acceptance 1: plan → implement → review over the real Anthropic client
/// against the twin. The agent writes a file through a tool call, review sends the run
/// back once with `preferred_next_label` JSON inside prose, and the run branch holds
/// the written file.
#[test]
fn plan_implement_review_against_the_twin() {
    if !crate::git::git_available("plan_implement_review_against_the_twin") {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = runtime.block_on(Twin::start()).expect("the twin starts");
    twin.enqueue([
        Reply::text("1. Write src/greet.rs"),
        write_turn("toolu_1", "src/greet.rs", "pub fn greet() {}\n"),
        Reply::text("Implemented greet."),
        Reply::text(
            "The function lacks docs.\n\nVerdict: {\"preferred_next_label\": \"revise\"} Please fix.",
        ),
        write_turn("toolu_2", "src/greet.rs", "/// Greets.\npub fn greet() {}\n"),
        Reply::text("Documented greet."),
        Reply::text("Looks good now. {\"preferred_next_label\": \"approve\"}"),
    ]);
    twin.set_fallback(Reply::bad_request());
    let env = TestEnv::new("plan_implement_review_against_the_twin");
    let git = |args: &[&str]| {
        let output = env.command("git").args(args).output().expect("git runs");
        assert!(output.status.success(), "git {args:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    env.write("w.fabro", PLAN_IMPLEMENT_REVIEW);
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "w.fabro"]);
    git(&["commit", "-q", "-m", "init"]);
    let output = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro", "--run-id", "r1"])
        .env("ANTHROPIC_API_KEY", KEY)
        .env("ANTHROPIC_BASE_URL", twin.base_url())
        .output()
        .expect("fabro runs");
    let requests = twin.requests();
    drop(twin);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(requests.len(), 7, "every queued reply was used once");
    assert!(requests
        .iter()
        .all(|request| request.path == "/v1/messages" && request.header("x-api-key") == Some(KEY)));
    // The agent's second call carries the tool result of the first (SPEC 10.1.1).
    let messages = requests[2].body["messages"].as_array().expect("messages");
    let results = messages
        .last()
        .and_then(|message| message["content"].as_array())
        .expect("a tool-result turn");
    assert_eq!(results[0]["type"], "tool_result");
    assert_eq!(results[0]["tool_use_id"], "toolu_1");
    let run_dir = env.fabro_home().join("scratch/r1");
    for stage in [
        "001-start@1",
        "002-plan@1",
        "003-implement@1",
        "004-review@1",
        "005-implement@2",
        "006-review@2",
    ] {
        let dir = run_dir.join("stages").join(stage);
        assert!(dir.join("status.json").is_file(), "{stage}");
        if !stage.contains("start") {
            assert!(dir.join("prompt.md").is_file(), "{stage}");
            assert!(dir.join("response.md").is_file(), "{stage}");
        }
    }
    assert_eq!(
        fs_err::read_to_string(run_dir.join("stages/005-implement@2/response.md"))
            .expect("response"),
        "Documented greet."
    );
    let status: serde_json::Value = serde_json::from_str(
        &fs_err::read_to_string(run_dir.join("stages/003-implement@1/status.json"))
            .expect("status"),
    )
    .expect("JSON");
    assert_eq!(status["files_touched"], serde_json::json!(["src/greet.rs"]));
    assert_eq!(status["provider"], "anthropic");
    assert_eq!(
        git(&["show", "fabro/run/r1:src/greet.rs"]),
        "/// Greets.\npub fn greet() {}\n"
    );
    assert!(
        !env.work_dir().join("src").exists(),
        "the user's tree is untouched"
    );
}

/// The stage's usage from its `status.json`: (input, cache reads, cache writes).
fn stage_usage(run_dir: &Path, stage: &str) -> (u64, u64, u64) {
    let status: serde_json::Value = serde_json::from_str(
        &fs_err::read_to_string(run_dir.join("stages").join(stage).join("status.json"))
            .expect("status"),
    )
    .expect("JSON");
    let number = |key: &str| status["usage"][key].as_u64().unwrap_or(0);
    (
        number("input_tokens"),
        number("cache_read_tokens"),
        number("cache_write_tokens"),
    )
}

/// SPEC 10.8, issue 33 acceptance 1 and 2: a 30-turn agent stage against a twin that
/// applies Anthropic's caching rules is billed at most 0.35x its uncached input price
/// (reads at 0.1x, writes at 1.25x), no request carries more than four breakpoints (the
/// twin answers 400 to more), and `[llm] prompt_caching = false` sends no marker.
#[test]
fn a_thirty_turn_agent_stage_reads_its_prefix_from_the_cache() {
    const AGENT: &str = r#"digraph w {
  graph [goal="Write thirty files", default_model="sonnet"]
  start [shape=Mdiamond]
  exit [shape=Msquare]
  work [shape=box, prompt="Write the files"]
  start -> work -> exit
}
"#;
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let env = TestEnv::new("prompt_caching");
    env.write("w.fabro", AGENT);
    env.write("off.toml", "[llm]\nprompt_caching = false\n");
    let mut billed = Vec::new();
    for (run_id, extra) in [
        ("cached", &[][..]),
        ("uncached", &["--config", "off.toml"][..]),
    ] {
        let twin = runtime.block_on(Twin::start()).expect("the twin starts");
        twin.apply_prompt_caching();
        twin.enqueue((1..30).map(|turn| {
            write_turn(
                &format!("toolu_{turn}"),
                &format!("notes/{turn}.txt"),
                &format!("note {turn}\n"),
            )
        }));
        twin.enqueue([Reply::text("Wrote thirty files.")]);
        twin.set_fallback(Reply::bad_request());
        let output = env
            .command(env!("CARGO_BIN_EXE_fabro"))
            .args(["run", "w.fabro", "--run-id", run_id])
            .args(extra)
            .env("ANTHROPIC_API_KEY", KEY)
            .env("ANTHROPIC_BASE_URL", twin.base_url())
            .output()
            .expect("fabro runs");
        assert_eq!(code(&output), 0, "{run_id}: {}", stderr(&output));
        let requests = twin.requests();
        assert_eq!(requests.len(), 30, "{run_id}");
        for request in &requests {
            let markers = request.body.to_string().matches("cache_control").count();
            if run_id == "cached" {
                assert!((1..=4).contains(&markers), "{markers} breakpoints");
            } else {
                assert_eq!(markers, 0);
            }
        }
        let (input, read, written) =
            stage_usage(&env.fabro_home().join("scratch").join(run_id), "002-work@1");
        let uncached = input - read - written;
        billed.push((uncached as f64 + 0.1 * read as f64 + 1.25 * written as f64) / input as f64);
    }
    assert!(
        billed[0] <= 0.35,
        "billed {:.3}x the uncached price",
        billed[0]
    );
    assert!(
        (billed[1] - 1.0).abs() < 1e-9,
        "uncached: {:.3}x",
        billed[1]
    );
    // `fabro inspect` shows the cached share of each stage's input.
    for (run_id, expected) in [("cached", None), ("uncached", Some("0%"))] {
        let inspect = crate::fabro(&env, &["inspect", run_id]);
        assert_eq!(code(&inspect), 0, "{}", stderr(&inspect));
        let text = stdout(&inspect);
        assert!(text.contains(" CACHED "), "{text}");
        let row = text
            .lines()
            .find(|line| line.split_whitespace().nth(1) == Some("work"))
            .expect("a row for the agent stage");
        let share = row
            .split_whitespace()
            .find(|cell| cell.ends_with('%'))
            .expect("a cached share");
        match expected {
            Some(expected) => assert_eq!(share, expected, "{row}"),
            None => {
                let percent: u64 = share.trim_end_matches('%').parse().expect("a number");
                assert!(percent >= 80, "{row}");
            }
        }
    }
}
