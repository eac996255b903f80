//! `--provider simulated` (and `FABRO_PROVIDER=simulated`) applies to every LLM node, also
//! those that pin a provider, a model or an external agent of their own (SPEC 17.3), so any
//! workflow runs offline; stage records keep the model the node would have used.

use fabro_test_support::TestEnv;
use serde_json::Value;

use crate::{code, fabro, stderr};

/// A prompt pinned to Anthropic, an api agent pinned to a Gemini model, a cli agent and an
/// acp agent whose command does not exist.
const PINNED: &str = r#"digraph pinned {
  graph [goal="Run offline"]
  start [shape=Mdiamond]
  exit [shape=Msquare]
  ask [shape=tab, prompt="Say hi", provider="anthropic"]
  code [prompt="Write code", model="gemini-3-flash-preview"]
  cli [prompt="Use the CLI", backend="cli", provider="openai"]
  acp [prompt="Use ACP", backend="acp", acp_command="no-such-acp-agent --stdio"]
  start -> ask -> code -> cli -> acp -> exit
}
"#;

fn stage_records(env: &TestEnv, run_id: &str) -> Vec<(String, Value, Value)> {
    let events = fs_err::read_to_string(
        env.fabro_home()
            .join("scratch")
            .join(run_id)
            .join("events.jsonl"),
    )
    .expect("events");
    events
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["event"] == "StageCompleted")
        .map(|event| {
            (
                event["node_id"].as_str().unwrap_or_default().to_owned(),
                event["properties"]["provider"].clone(),
                event["properties"]["model"].clone(),
            )
        })
        .collect()
}

fn check_offline_run(env: &TestEnv, run_id: &str) {
    let records = stage_records(env, run_id);
    let find = |node: &str| {
        records
            .iter()
            .find(|(id, _, _)| id == node)
            .unwrap_or_else(|| panic!("{node} completed: {records:?}"))
            .clone()
    };
    for (node, model) in [
        ("ask", "claude-sonnet-4-6"),
        ("code", "gemini-3-flash-preview"),
        ("cli", "gpt-5.4"),
    ] {
        let (_, provider, recorded_model) = find(node);
        assert_eq!(provider, "simulated", "{node}: {records:?}");
        assert_eq!(recorded_model, model, "{node}: {records:?}");
    }
    assert_eq!(find("acp").1, "simulated", "{records:?}");
}

#[test]
fn the_simulated_provider_flag_reaches_nodes_that_pin_their_own() {
    let env = TestEnv::new("offline_flag");
    env.write("w.fabro", PINNED);
    let output = fabro(
        &env,
        &[
            "run",
            "w.fabro",
            "--provider",
            "simulated",
            "--run-id",
            "r1",
        ],
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    check_offline_run(&env, "r1");
}

#[test]
fn the_simulated_provider_variable_reaches_nodes_that_pin_their_own() {
    let env = TestEnv::new("offline_env");
    env.write("w.fabro", PINNED);
    let output = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro", "--run-id", "r1"])
        .env("FABRO_PROVIDER", "simulated")
        .output()
        .expect("fabro runs");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    check_offline_run(&env, "r1");
}
