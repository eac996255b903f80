//! Kernel-enforced isolation (SPEC 16, issue 17): a command node under
//! `command_isolation = "workspace"` and an agent's `shell` call under the default
//! `agent_isolation` write inside the tree and in `TMPDIR` but nowhere else (children
//! included), cannot read `hidden_paths`, and have no network with `network = false`;
//! with `none` all of it succeeds. `require_isolation` on a kernel without Landlock
//! (simulated with `FABRO_TEST_KERNEL_LACKS`) exits 2 naming it. The checks that need a
//! mechanism skip with a message where the kernel lacks it.

use std::net::TcpListener;
use std::path::{Path, PathBuf};

use fabro_engine::{KernelSupport, Mechanism};
use fabro_test_support::{skip, TestEnv};
use fabro_twin::{Reply, Turn, Twin};
use serde_json::Value;

use crate::{code, stderr};

/// Tries everything isolation forbids; `$1` names the caller. Prints its `TMPDIR`,
/// `in tmp`, `sees command-tmp` when the command's file is in its `TMPDIR`, and a line
/// per forbidden thing that worked.
const PROBE: &str = r#"T=${TMPDIR:-$PWD}
echo "tmpdir=[$T]"
echo in > "$1-inside.txt" && echo tmp > "$T/$1-tmp.txt" && echo "in tmp"
test -f "$T/command-tmp.txt" && echo "sees command-tmp"
echo x > "$OUT/$1-direct.txt" 2>/dev/null && echo WROTE-DIRECT
sh -c "echo x > '$OUT/$1-nested.txt'" 2>/dev/null && echo WROTE-NESTED
cat "$HIDDEN/secret.txt" 2>/dev/null
bash -c "exec 3<>/dev/tcp/127.0.0.1/$PORT" 2>/dev/null && echo CONNECTED
echo END
"#;

const WORKFLOW: &str = r#"digraph isolated {
  graph [goal="Probe the sandbox"]
  start [shape=Mdiamond]
  exit [shape=Msquare]
  probe [shape=parallelogram, script="sh probe.sh command"]
  agent [prompt="Probe the sandbox", model=sonnet]
  start -> probe -> agent -> exit
}
"#;

/// One probing run: the test's directories, the listener and the twin.
struct Probe {
    env: TestEnv,
    outside: PathBuf,
    hidden: PathBuf,
    _listener: TcpListener,
    port: u16,
}

impl Probe {
    fn new(name: &str) -> Probe {
        let env = TestEnv::new(name);
        let root = env
            .work_dir()
            .parent()
            .expect("the test root")
            .to_path_buf();
        let (outside, hidden) = (root.join("outside"), root.join("hidden"));
        fs_err::create_dir_all(&outside).expect("outside dir");
        fs_err::create_dir_all(&hidden).expect("hidden dir");
        fs_err::write(hidden.join("secret.txt"), "S3CRET").expect("secret");
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
        let port = listener.local_addr().expect("bound").port();
        env.write("probe.sh", PROBE);
        env.write("w.fabro", WORKFLOW);
        Probe {
            env,
            outside,
            hidden,
            _listener: listener,
            port,
        }
    }

    /// Runs the workflow with `sandbox` as the `[sandbox]` table; returns the exit code,
    /// the command's stdout and the agent's tool output.
    fn run(&self, sandbox: &str) -> (i32, String, String) {
        let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
        let twin = runtime.block_on(Twin::start()).expect("the twin starts");
        let arguments = serde_json::json!({ "command": "sh probe.sh agent" }).to_string();
        twin.enqueue([
            Reply::Turn(Turn::text("").with_tool_call("toolu_1", "shell", &arguments)),
            Reply::text("Probed."),
        ]);
        twin.set_fallback(Reply::bad_request());
        let hidden = self.hidden.display();
        self.env.write(
            "run.toml",
            &format!("graph = \"w.fabro\"\n[sandbox]\nhidden_paths = [\"{hidden}\"]\n{sandbox}"),
        );
        let output = self
            .env
            .command(env!("CARGO_BIN_EXE_fabro"))
            .args(["run", "run.toml", "--run-id", "r1"])
            .env("ANTHROPIC_API_KEY", "sk-ant-test")
            .env("ANTHROPIC_BASE_URL", twin.base_url())
            .env("OUT", &self.outside)
            .env("HIDDEN", &self.hidden)
            .env("PORT", self.port.to_string())
            .output()
            .expect("fabro runs");
        let requests = twin.requests();
        assert_eq!(code(&output), 0, "{}", stderr(&output));
        let command = fs_err::read_to_string(self.run_dir().join("stages/002-probe@1/stdout.log"))
            .expect("the probe's stdout.log");
        assert_eq!(requests.len(), 2, "a tool call, then the answer");
        let agent = requests[1].body.to_string();
        (code(&output), command, agent)
    }

    fn run_dir(&self) -> PathBuf {
        self.env.fabro_home().join("scratch/r1")
    }

    fn events(&self, name: &str) -> Vec<Value> {
        fs_err::read_to_string(self.run_dir().join("events.jsonl"))
            .expect("events.jsonl")
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|event| event["event"] == name)
            .collect()
    }

    fn exists(&self, name: &str) -> bool {
        self.outside.join(name).exists()
    }
}

fn kernel_has(test: &str, mechanisms: &[Mechanism]) -> bool {
    let support = KernelSupport::detect();
    let missing: Vec<&str> = mechanisms
        .iter()
        .filter(|mechanism| !support.supports(**mechanism))
        .map(|mechanism| mechanism.as_str())
        .collect();
    if !missing.is_empty() {
        skip(test, &format!("this kernel lacks {}", missing.join(", ")));
    }
    missing.is_empty()
}

#[test]
fn workspace_confines_commands_and_agent_shells() {
    if !kernel_has(
        "workspace_confines_commands_and_agent_shells",
        &Mechanism::ALL,
    ) || !Path::new("/bin/bash").exists()
    {
        return;
    }
    let probe = Probe::new("isolation_workspace");
    let (_, command, agent) = probe.run("command_isolation = \"workspace\"\nnetwork = false\n");
    for (who, output) in [("command", &command), ("agent", &agent)] {
        assert!(output.contains("in tmp"), "{who}: {output}");
        assert!(output.contains("END"), "{who}: {output}");
        for forbidden in ["WROTE-DIRECT", "WROTE-NESTED", "S3CRET", "CONNECTED"] {
            assert!(
                !output.contains(forbidden),
                "{who} did {forbidden}: {output}"
            );
        }
        assert!(!probe.exists(&format!("{who}-direct.txt")), "{who}");
        assert!(!probe.exists(&format!("{who}-nested.txt")), "{who}");
        assert!(probe
            .env
            .work_dir()
            .join(format!("{who}-inside.txt"))
            .exists());
    }
    // One private TMPDIR for the run, under the run directory (decision 63): the agent
    // stage sees what the command stage left there; it is gone after the run.
    let tmp = probe.run_dir().join("cache/tmp");
    let run_tmp = format!("tmpdir=[{}]", tmp.join("run").display());
    assert!(command.contains(&run_tmp), "{command}");
    assert!(agent.contains(&run_tmp), "{agent}");
    assert!(agent.contains("sees command-tmp"), "{agent}");
    assert!(!tmp.exists(), "the run's TMPDIR outlived the run");
    let started = probe.events("StageStarted");
    let isolation = |node: &str| {
        started
            .iter()
            .find(|event| event["node_id"] == node)
            .map(|event| event["properties"]["isolation"].clone())
    };
    let all = serde_json::json!({
        "mode": "workspace",
        "network": false,
        "enforced": ["landlock", "mount_namespace", "network_namespace"]
    });
    assert_eq!(isolation("probe"), Some(all.clone()));
    assert_eq!(isolation("agent"), Some(all));
    assert_eq!(isolation("start"), Some(Value::Null));
    assert!(probe.events("Warning").is_empty());
}

#[test]
fn none_confines_nothing() {
    if !Path::new("/bin/bash").exists() {
        skip("none_confines_nothing", "no /bin/bash for /dev/tcp");
        return;
    }
    let probe = Probe::new("isolation_none");
    let (_, command, agent) = probe.run("agent_isolation = \"none\"\nnetwork = false\n");
    for (who, output) in [("command", &command), ("agent", &agent)] {
        for allowed in [
            "in tmp",
            "WROTE-DIRECT",
            "WROTE-NESTED",
            "S3CRET",
            "CONNECTED",
        ] {
            assert!(
                output.contains(allowed),
                "{who} could not do {allowed}: {output}"
            );
        }
        assert!(probe.exists(&format!("{who}-direct.txt")), "{who}");
        assert!(probe.exists(&format!("{who}-nested.txt")), "{who}");
    }
    let none = serde_json::json!({"mode": "none", "network": true, "enforced": []});
    for event in probe.events("StageStarted") {
        if event["node_id"] == "probe" || event["node_id"] == "agent" {
            assert_eq!(event["properties"]["isolation"], none);
        }
    }
}

#[test]
fn a_kernel_lacking_mechanisms_gives_one_warning_naming_them() {
    let probe = Probe::new("isolation_unavailable");
    let output = probe
        .env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro", "--run-id", "r1", "--dry-run"])
        .env("FABRO_TEST_KERNEL_LACKS", "landlock,mount_namespace")
        .output()
        .expect("fabro runs");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let warnings = probe.events("Warning");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let properties = &warnings[0]["properties"];
    assert_eq!(properties["code"], "isolation_unavailable");
    let message = properties["message"].as_str().unwrap_or_default();
    assert!(message.contains("landlock, mount_namespace"), "{message}");
}

#[test]
fn require_isolation_on_a_kernel_without_landlock_exits_2_naming_it() {
    let env = TestEnv::new("isolation_required");
    env.write("w.fabro", crate::HELLO);
    env.write(
        "run.toml",
        "graph = \"w.fabro\"\n[sandbox]\nrequire_isolation = true\n",
    );
    let output = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "run.toml", "--dry-run"])
        .env("FABRO_TEST_KERNEL_LACKS", "landlock")
        .output()
        .expect("fabro runs");
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert_eq!(
        stderr(&output).trim(),
        "error: [sandbox] require_isolation is set but this system cannot enforce isolation: it lacks landlock"
    );
    // Without the requirement the same kernel only warns.
    env.write("run.toml", "graph = \"w.fabro\"\n");
    let output = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "run.toml", "--dry-run"])
        .env("FABRO_TEST_KERNEL_LACKS", "landlock")
        .output()
        .expect("fabro runs");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
}
