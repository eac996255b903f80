//! `fabro run` against a real provider client pointed at the twin (`fabro-twin`): the
//! call goes over HTTP with the key in its header, and the key appears in no file the
//! run wrote, no event and no output (SPEC 13.1).

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
fn files_containing(dir: &Path, needle: &[u8]) -> (Vec<String>, usize) {
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
