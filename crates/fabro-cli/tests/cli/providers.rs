//! Presets and configured providers (SPEC 10.7): a provider configured by name runs an
//! agent stage with tool calls over each of the four wires against the twin; a preset
//! with its `{NAME}_BASE_URL` at the twin reports OpenRouter's cost; failover from a
//! configured provider to a built-in one; a missing `api_key_env` fails before the
//! first stage; validation knows preset and configured names.

use fabro_test_support::TestEnv;
use fabro_twin::{Reply, Turn, Twin};

use crate::{code, stderr, stdout};

const KEY: &str = "gw-secret-key-FAKE-77777777";

fn agent_workflow(provider: &str, model: &str) -> String {
    format!(
        r#"digraph w {{
  start [shape=Mdiamond]
  exit [shape=Msquare]
  work [shape=box, provider="{provider}", model="{model}", prompt="Write the file"]
  start -> work -> exit
}}
"#
    )
}

fn write_turn(id: &str) -> Reply {
    let arguments = serde_json::json!({"file_path": "out.txt", "content": "hi"}).to_string();
    Reply::Turn(Turn::text("").with_tool_call(id, "write_file", &arguments))
}

/// Runs `workflow` with `config` as `workflow.toml` and `vars` set; returns the output,
/// the twin's requests and the environment.
fn run(
    name: &str,
    twin: &Twin,
    workflow: &str,
    config: &str,
    vars: &[(&str, String)],
) -> (std::process::Output, Vec<fabro_twin::Recorded>, TestEnv) {
    let env = TestEnv::new(name);
    env.write("w.fabro", workflow);
    env.write("workflow.toml", config);
    let mut command = env.command(env!("CARGO_BIN_EXE_fabro"));
    command.args(["run", "w.fabro", "--run-id", "r1", "--json"]);
    for (variable, value) in vars {
        command.env(variable, value);
    }
    let output = command.output().expect("fabro runs");
    (output, twin.requests(), env)
}

fn twin_with_agent_turns() -> (tokio::runtime::Runtime, Twin) {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = runtime.block_on(Twin::start()).expect("the twin starts");
    twin.enqueue([write_turn("call_1"), Reply::text("Wrote it.")]);
    twin.set_fallback(Reply::bad_request());
    (runtime, twin)
}

#[test]
fn a_configured_provider_runs_an_agent_stage_over_each_wire() {
    for (wire, suffix, path) in [
        ("chat", "/v1", "/v1/chat/completions"),
        ("responses", "/v1", "/v1/responses"),
        ("anthropic", "", "/v1/messages"),
        (
            "gemini",
            "",
            "/v1beta/models/house-model:streamGenerateContent",
        ),
    ] {
        let (_runtime, twin) = twin_with_agent_turns();
        let config = format!(
            r#"[llm.providers.gateway]
wire = "{wire}"
base_url = "{}{suffix}"
api_key_env = "GATEWAY_API_KEY"
headers = {{ "X-Team" = "infra" }}

[llm.providers.gateway.models."house-model"]
input_price = 1
output_price = 2
"#,
            twin.base_url()
        );
        let (output, requests, env) = run(
            &format!("configured_{wire}"),
            &twin,
            &agent_workflow("gateway", "house-model"),
            &config,
            &[("GATEWAY_API_KEY", KEY.to_owned())],
        );
        assert_eq!(code(&output), 0, "{wire}: {}", stderr(&output));
        assert_eq!(requests.len(), 2, "{wire}: a tool call, then the answer");
        assert!(
            requests[0].path.starts_with(path),
            "{wire}: {}",
            requests[0].path
        );
        assert_eq!(requests[0].header("x-team"), Some("infra"), "{wire}");
        let headers = format!("{:?}", requests[0].headers);
        assert!(headers.contains(KEY), "{wire}: the key is sent");
        let events = fs_err::read_to_string(env.fabro_home().join("scratch/r1/events.jsonl"))
            .expect("events");
        assert!(
            events.contains("\"provider\":\"gateway\""),
            "{wire}: {events}"
        );
        assert!(events.contains("Agent.ToolCallCompleted"), "{wire}");
        let (hits, _) = crate::llm::files_containing(&env.fabro_home(), KEY.as_bytes());
        assert!(hits.is_empty(), "{wire}: key found in {hits:?}");
        assert!(!stdout(&output).contains(KEY) && !stderr(&output).contains(KEY));
    }
}

#[test]
fn openrouter_reports_its_cost() {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = runtime.block_on(Twin::start()).expect("the twin starts");
    twin.set_fallback(Reply::Turn(Turn::text("Routed.").with_cost(0.0421)));
    let workflow = r#"digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  ask [shape=tab, provider="openrouter", model="moonshotai/kimi-k2", prompt="Say hi"]
  start -> ask -> exit
}
"#;
    let (output, requests, env) = run(
        "openrouter_reports_its_cost",
        &twin,
        workflow,
        "",
        &[
            ("OPENROUTER_API_KEY", "sk-or-FAKE-12345678".to_owned()),
            ("OPENROUTER_BASE_URL", format!("{}/v1", twin.base_url())),
        ],
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(
        requests[0].header("authorization"),
        Some("Bearer sk-or-FAKE-12345678")
    );
    let events =
        fs_err::read_to_string(env.fabro_home().join("scratch/r1/events.jsonl")).expect("events");
    assert!(events.contains("\"provider\":\"openrouter\""), "{events}");
    assert!(
        events.contains("0.0421"),
        "usage.cost is the cost: {events}"
    );
}

#[test]
fn a_configured_provider_fails_over_to_a_built_in_one() {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let gateway = runtime.block_on(Twin::start()).expect("the twin starts");
    let anthropic = runtime.block_on(Twin::start()).expect("the twin starts");
    gateway.set_fallback(Reply::quota());
    anthropic.set_fallback(Reply::text("From anthropic."));
    let config = format!(
        r#"[llm.providers.gateway]
wire = "chat"
base_url = "{}/v1"
api_key_env = "GATEWAY_API_KEY"

[llm.fallbacks]
gateway = ["anthropic"]
"#,
        gateway.base_url()
    );
    let workflow = r#"digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  ask [shape=tab, provider="gateway", model="house-model", prompt="Say hi"]
  start -> ask -> exit
}
"#;
    let (output, _, env) = run(
        "a_configured_provider_fails_over_to_a_built_in_one",
        &gateway,
        workflow,
        &config,
        &[
            ("GATEWAY_API_KEY", KEY.to_owned()),
            ("ANTHROPIC_API_KEY", "sk-ant-FAKE-87654321".to_owned()),
            ("ANTHROPIC_BASE_URL", anthropic.base_url()),
        ],
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(anthropic.request_count(), 1);
    let events =
        fs_err::read_to_string(env.fabro_home().join("scratch/r1/events.jsonl")).expect("events");
    assert!(
        events.contains("\"from_provider\":\"gateway\"")
            && events.contains("\"to_provider\":\"anthropic\""),
        "{events}"
    );
}

#[test]
fn a_missing_key_variable_fails_before_the_first_stage() {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = runtime.block_on(Twin::start()).expect("the twin starts");
    let config = format!(
        "[llm.providers.gateway]\nwire = \"chat\"\nbase_url = \"{}/v1\"\napi_key_env = \"GATEWAY_API_KEY\"\n",
        twin.base_url()
    );
    let (output, requests, _) = run(
        "a_missing_key_variable_fails_before_the_first_stage",
        &twin,
        &agent_workflow("gateway", "house-model"),
        &config,
        &[],
    );
    assert_ne!(code(&output), 0);
    let text = format!("{}{}", stdout(&output), stderr(&output));
    assert!(
        text.contains("missing credentials for provider gateway (set GATEWAY_API_KEY)"),
        "{text}"
    );
    assert!(requests.is_empty());
    assert!(!text.contains("StageStarted"), "{text}");
}

#[test]
fn a_configuration_without_wire_or_base_url_exits_2_naming_the_key() {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = runtime.block_on(Twin::start()).expect("the twin starts");
    for (config, key) in [
        (
            "[llm.providers.gw]\nwire = \"grpc\"\nbase_url = \"http://x/v1\"\n",
            "llm.providers.gw.wire",
        ),
        (
            "[llm.providers.gw]\nwire = \"chat\"\n",
            "llm.providers.gw.base_url",
        ),
    ] {
        let (output, _, _) = run(
            "config_errors",
            &twin,
            &agent_workflow("gw", "m"),
            config,
            &[],
        );
        assert_eq!(code(&output), 2, "{}", stderr(&output));
        assert!(stderr(&output).contains(key), "{}", stderr(&output));
    }
}

#[test]
fn preset_and_configured_names_validate() {
    let env = TestEnv::new("preset_and_configured_names_validate");
    env.write("kimi.fabro", &agent_workflow("kimi", "kimi-k2"));
    let output = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["validate", "kimi.fabro"])
        .output()
        .expect("fabro runs");
    assert_eq!(code(&output), 0, "{}{}", stdout(&output), stderr(&output));
    env.write("typo.fabro", &agent_workflow("antropic", "m"));
    let output = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["validate", "typo.fabro"])
        .output()
        .expect("fabro runs");
    assert_ne!(code(&output), 0);
    assert!(format!("{}{}", stdout(&output), stderr(&output)).contains("did you mean 'anthropic'?"));
}

const GATEWAY_PROJECT: &str = r#"[llm.providers.gateway]
wire = "chat"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "GATEWAY_API_KEY"

[llm.providers.gateway.models."qwen3-coder"]
context_window = 262144
max_output = 32768
input_price = 0.4
output_price = 1.6
reasoning = false
"#;

#[test]
fn validate_knows_the_providers_and_models_of_the_configuration_layers() {
    let env = TestEnv::new("validate_knows_configured_providers");
    env.write("gateway.fabro", &agent_workflow("gateway", "qwen3-coder"));
    let validate = || {
        env.command(env!("CARGO_BIN_EXE_fabro"))
            .args(["validate", "gateway.fabro"])
            .output()
            .expect("fabro runs")
    };
    let output = validate();
    assert_ne!(code(&output), 0, "unconfigured: {}", stdout(&output));
    assert!(
        stdout(&output).contains("provider_known"),
        "{}",
        stdout(&output)
    );

    env.write(".fabro/project.toml", GATEWAY_PROJECT);
    let output = validate();
    assert_eq!(code(&output), 0, "{}{}", stdout(&output), stderr(&output));
    assert!(
        !stdout(&output).contains("model_known"),
        "{}",
        stdout(&output)
    );

    env.write(".fabro/project.toml", "[llm.providers.gateway]\nwire = 3\n");
    let output = validate();
    assert_eq!(code(&output), 2, "{}{}", stdout(&output), stderr(&output));
    assert!(
        stderr(&output).contains("project.toml"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn model_list_shows_the_configured_providers_models() {
    let env = TestEnv::new("model_list_configured");
    env.write(".fabro/project.toml", GATEWAY_PROJECT);
    let list = |json: bool| {
        let mut command = env.command(env!("CARGO_BIN_EXE_fabro"));
        command.args(["model", "list"]);
        if json {
            command.arg("--json");
        }
        command.output().expect("fabro runs")
    };
    let output = list(false);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let text = stdout(&output);
    let row = text
        .lines()
        .find(|line| line.starts_with("qwen3-coder "))
        .unwrap_or_else(|| panic!("no configured row:\n{text}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells,
        [
            "qwen3-coder",
            "gateway",
            "262144",
            "32768",
            "-",
            "-",
            "no",
            "0.40",
            "1.60"
        ]
    );
    assert!(text
        .lines()
        .any(|line| line.starts_with("claude-sonnet-4-6 ")));

    let output = list(true);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let models: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let qwen = models
        .as_array()
        .expect("array")
        .iter()
        .find(|model| model["id"] == "qwen3-coder")
        .expect("configured model");
    assert_eq!(qwen["provider"], "gateway");
    assert_eq!(qwen["context_window"], 262144);
    assert_eq!(qwen["tools"], serde_json::Value::Null);
    assert_eq!(qwen["input_price_per_million"], 0.4);
}

/// SPEC 10.7's own example names its key variable `GATEWAY_KEY`, a name without a
/// credential suffix: the configuration marks it as one, so its value (and a `${VAR}`
/// header's) is sent to the provider, redacted in every record and kept out of the
/// environment of commands (SPEC 13.1, 13.5).
#[test]
fn a_key_variable_named_only_by_the_configuration_is_a_secret() {
    const AUTH: &str = "gw-auth-header-FAKE-31415926";
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = runtime.block_on(Twin::start()).expect("the twin starts");
    twin.enqueue([Reply::text(&format!("The key is {KEY}."))]);
    twin.set_fallback(Reply::bad_request());
    let config = format!(
        r#"[llm.providers.gateway]
wire = "chat"
base_url = "{}/v1"
api_key_env = "GATEWAY_KEY"
headers = {{ "X-Auth" = "${{GW_AUTH}}" }}
"#,
        twin.base_url()
    );
    let workflow = r#"digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  ask [shape=tab, provider="gateway", model="house-model", prompt="Say hi"]
  show [shape=parallelogram, script="echo key=[$GATEWAY_KEY] auth=[$GW_AUTH]"]
  start -> ask -> show -> exit
}
"#;
    let (output, requests, env) = run(
        "a_key_variable_named_only_by_the_configuration_is_a_secret",
        &twin,
        workflow,
        &config,
        &[
            ("GATEWAY_KEY", KEY.to_owned()),
            ("GW_AUTH", AUTH.to_owned()),
        ],
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].header("x-auth"), Some(AUTH));
    assert!(
        format!("{:?}", requests[0].headers).contains(KEY),
        "the key is sent"
    );
    let stages = env.fabro_home().join("scratch/r1/stages");
    let show = fs_err::read_dir(&stages)
        .expect("stages")
        .flatten()
        .find(|entry| entry.file_name().to_string_lossy().contains("-show@"))
        .expect("the command's stage");
    let printed = fs_err::read_to_string(show.path().join("stdout.log")).expect("stdout.log");
    assert_eq!(printed.trim(), "key=[] auth=[]");
    for secret in [KEY, AUTH] {
        let (hits, _) = crate::llm::files_containing(&env.fabro_home(), secret.as_bytes());
        assert!(hits.is_empty(), "{secret} found in {hits:?}");
        assert!(!stdout(&output).contains(secret) && !stderr(&output).contains(secret));
    }
    let ask = fs_err::read_dir(&stages)
        .expect("stages")
        .flatten()
        .find(|entry| entry.file_name().to_string_lossy().contains("-ask@"))
        .expect("the prompt's stage");
    let response = fs_err::read_to_string(ask.path().join("response.md")).expect("response.md");
    assert_eq!(response.trim(), "The key is [REDACTED].");
}

/// SPEC 10.7: a preset or configured provider is a provider "exactly like a built-in
/// one", so `--provider` takes its name, locally and through a server; an unknown name
/// is still refused with exit 2, and the server answers 400.
#[test]
fn the_provider_flag_takes_presets_and_configured_providers() {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = runtime.block_on(Twin::start()).expect("the twin starts");
    twin.set_fallback(Reply::text("From the preset."));
    let env = TestEnv::new("provider_flag_named");
    env.write(
        "w.fabro",
        "digraph w {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  ask [shape=tab, model=\"kimi-k2\", prompt=\"Say hi\"]\n  start -> ask -> exit\n}\n",
    );
    let run = |run_id: &str, provider: &str| {
        env.command(env!("CARGO_BIN_EXE_fabro"))
            .args(["run", "w.fabro", "--run-id", run_id, "--provider", provider])
            .env("KIMI_API_KEY", KEY)
            .env("KIMI_BASE_URL", format!("{}/v1", twin.base_url()))
            .env("GATEWAY_API_KEY", KEY)
            .output()
            .expect("fabro runs")
    };
    let output = run("preset", "kimi");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(twin.request_count(), 1);
    env.write(
        "workflow.toml",
        &format!(
            "[llm.providers.gateway]\nwire = \"chat\"\nbase_url = \"{}/v1\"\napi_key_env = \"GATEWAY_API_KEY\"\n",
            twin.base_url()
        ),
    );
    let output = run("configured", "gateway");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(twin.request_count(), 2);
    let output = run("unknown", "kimmi");
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("unknown provider 'kimmi' for --provider; expected one of: anthropic, openai, gemini, openai_compatible, simulated, kimi,"),
        "{}",
        stderr(&output)
    );
    assert!(stderr(&output).contains(", gateway"), "{}", stderr(&output));

    // Through a server, whose environment holds the preset's key and address.
    let base_url = format!("{}/v1", twin.base_url());
    let server = crate::server::Server::start(
        &env,
        &[("KIMI_API_KEY", KEY), ("KIMI_BASE_URL", base_url.as_str())],
    );
    let remote = |run_id: &str, provider: &str| {
        env.command(env!("CARGO_BIN_EXE_fabro"))
            .args(["run", "w.fabro", "--run-id", run_id, "--provider", provider])
            .args(["--server", &format!("http://{}", server.address)])
            .output()
            .expect("fabro runs")
    };
    let output = remote("remote-preset", "kimi");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(twin.request_count(), 3);
    let output = remote("remote-unknown", "kimmi");
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("unknown provider 'kimmi'"),
        "{}",
        stderr(&output)
    );
}
