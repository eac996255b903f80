//! Issue 17 acceptance 2 (SPEC 16): a package build works under the default isolation.
//! An agent's `shell` call runs `cargo build --offline` on a tiny crate in the working
//! tree. A test binary of its own: the compiler's memory would otherwise count in the
//! peak memory of children that `cli::blobs` measures for the whole `cli` binary.

use std::path::{Path, PathBuf};

use fabro_engine::{KernelSupport, Mechanism};
use fabro_test_support::{skip, TestEnv};
use fabro_twin::{Reply, Turn, Twin};

/// Where `rustup` keeps its toolchains for this test process (`RUSTUP_HOME`, else
/// `~/.rustup`).
fn rustup_home() -> Option<PathBuf> {
    std::env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".rustup")))
        .filter(|path| path.is_dir())
}

#[test]
fn an_agent_builds_a_crate_offline_under_the_defaults() {
    const TEST: &str = "an_agent_builds_a_crate_offline_under_the_defaults";
    if !KernelSupport::detect().supports(Mechanism::Landlock) {
        skip(TEST, "this kernel lacks landlock");
        return;
    }
    let Some(rustup_home) = rustup_home() else {
        skip(TEST, "no rustup home with a toolchain");
        return;
    };
    let env = TestEnv::new("isolation_cargo");
    env.write(
        "tiny/Cargo.toml",
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    );
    env.write(
        "tiny/src/main.rs",
        "fn main() {\n    println!(\"tiny\");\n}\n",
    );
    env.write(
        "w.fabro",
        r#"digraph build {
  graph [goal="Build it"]
  start [shape=Mdiamond]
  exit [shape=Msquare]
  build [prompt="Build the crate", model=sonnet]
  start -> build -> exit
}
"#,
    );
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = runtime.block_on(Twin::start()).expect("the twin starts");
    let arguments = serde_json::json!({
        "command": "cd tiny && cargo build --offline 2>&1 && ./target/debug/tiny && echo BUILT",
        "timeout_ms": 300_000
    })
    .to_string();
    twin.enqueue([
        Reply::Turn(Turn::text("").with_tool_call("toolu_1", "shell", &arguments)),
        Reply::text("Built."),
    ]);
    twin.set_fallback(Reply::bad_request());
    let output = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro", "--run-id", "r1"])
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .env("ANTHROPIC_BASE_URL", twin.base_url())
        .env("RUSTUP_HOME", &rustup_home)
        .output()
        .expect("fabro runs");
    let requests = twin.requests();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(requests.len(), 2, "a tool call, then the answer");
    let result = requests[1].body.to_string();
    assert!(result.contains("tiny\\nBUILT"), "{result}");
    assert!(env.work_dir().join("tiny/target/debug/tiny").exists());
    // It ran confined.
    let events = fs_err::read_to_string(env.fabro_home().join("scratch/r1/events.jsonl"))
        .expect("events.jsonl");
    let started = events
        .lines()
        .find(|line| line.contains(r#""event":"StageStarted","node_id":"build""#))
        .expect("the build stage started");
    assert!(
        started.contains(r#""isolation":{"enforced":["landlock""#)
            && started.contains(r#""mode":"workspace""#),
        "{started}"
    );
}
