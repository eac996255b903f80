//! Secret canaries (SPEC 13.1, 13.5; issue 14 item 5): with provider keys and a
//! `MY_TOKEN` in fabro's environment, a command and an agent's `shell` tool that look
//! everywhere (`env`, `/proc/$PPID/environ`, `/proc/self/environ`, the variables
//! themselves) find no secret, and no file under `FABRO_HOME`, no git object, no
//! request body and no output holds one. Hooks (SPEC 20.4; issue 35) included: a
//! command hook that prints a secret leaves it in no `hooks.log` and no hook event, and
//! an HTTP hook's `${MY_TOKEN}` header reaches its server only. A `--detach` worker
//! still gets its key.

use std::time::{Duration, Instant};

use fabro_test_support::TestEnv;
use fabro_twin::{Reply, Turn, Twin};

use crate::{code, stderr, stdout};

const ANTHROPIC: &str = "sk-ant-canary-AAAA1111aaaa";
const OPENAI: &str = "sk-openai-canary-BBBB2222bbbb";
const TOKEN: &str = "my-token-canary-CCCC3333cccc";
const CANARIES: [&str; 3] = [ANTHROPIC, OPENAI, TOKEN];

/// Everything a child process can see of fabro's secrets, written to `$1` and printed.
const PROBE: &str = r#"{ env; echo ---; tr '\\0' '\\n' < /proc/$PPID/environ; echo ---; tr '\\0' '\\n' < /proc/self/environ; echo ---; echo \"A=$ANTHROPIC_API_KEY O=$OPENAI_API_KEY T=$MY_TOKEN\"; }"#;

fn workflow() -> String {
    format!(
        r#"digraph canary {{
  graph [goal="Look for secrets"]
  start [shape=Mdiamond]
  exit [shape=Msquare]
  probe [shape=parallelogram, script="{PROBE} > seen-by-command.txt 2>&1; cat seen-by-command.txt"]
  leak [shape=parallelogram, script="{PROBE} >&2; exit 1"]
  agent [prompt="Look around; the note says $note", model=sonnet]
  start -> probe -> leak -> agent -> exit
}}
"#
    )
}

fn shell_turn(id: &str, command: &str) -> Reply {
    let arguments = serde_json::json!({ "command": command }).to_string();
    Reply::Turn(Turn::text("").with_tool_call(id, "shell", &arguments))
}

/// `(hits, count)`: the files under `dir` holding a canary, and how many files there are.
fn files_with_canaries(dir: &std::path::Path) -> (Vec<String>, usize) {
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
            for canary in CANARIES {
                if contains(&bytes, canary) {
                    hits.push(format!("{canary} in {}", path.display()));
                }
            }
        }
    }
    (hits, count)
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

#[test]
fn no_child_sees_a_secret_and_nothing_stored_holds_one() {
    if !crate::git::git_available("no_child_sees_a_secret_and_nothing_stored_holds_one") {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = runtime.block_on(Twin::start()).expect("the twin starts");
    let agent_probe = PROBE.replace("\\\\", "\\").replace("\\\"", "\"");
    twin.enqueue([
        shell_turn(
            "toolu_1",
            &format!("{agent_probe} > seen-by-agent.txt 2>&1; cat seen-by-agent.txt"),
        ),
        Reply::text("Looked everywhere."),
    ]);
    twin.set_fallback(Reply::bad_request());
    let hook_server = crate::hooks::HookServer::start();
    let env = TestEnv::new("secret_canaries");
    let git = |args: &[&str]| {
        let output = env.command("git").args(args).output().expect("git runs");
        assert!(output.status.success(), "git {args:?}");
        output.stdout
    };
    env.write("w.fabro", &workflow());
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "w.fabro"]);
    git(&["commit", "-q", "-m", "init"]);
    // Hooks in a run config that stays out of git: one prints the secret it was
    // written with, one sends it in a header.
    env.write(
        "workflow.toml",
        &format!(
            r#"[[hooks]]
event = "stage_complete"
command = "cat; echo {TOKEN}; echo {TOKEN} >&2"

[[hooks]]
event = "run_complete"
type = "http"
url = "{}"
headers = {{ Authorization = "Bearer ${{MY_TOKEN}}" }}
"#,
            hook_server.url()
        ),
    );
    let note = format!("note={TOKEN}");
    let output = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro", "--run-id", "r1", "--json", "--var", &note])
        .env("ANTHROPIC_API_KEY", ANTHROPIC)
        .env("ANTHROPIC_BASE_URL", twin.base_url())
        .env("OPENAI_API_KEY", OPENAI)
        .env("MY_TOKEN", TOKEN)
        .env("FABRO_LOG", "debug")
        .output()
        .expect("fabro runs");
    let requests = twin.requests();
    drop(twin);
    // `leak` fails and the run goes on over its unconditional edge: partial success.
    assert_eq!(code(&output), 3, "{}", stderr(&output));

    // The probes ran and saw an environment.
    let run_dir = env.fabro_home().join("scratch/r1");
    let log = fs_err::read_to_string(run_dir.join("stages/002-probe@1/stdout.log"))
        .expect("the probe's stdout.log");
    assert!(log.contains("PATH="), "{log}");
    assert_eq!(requests.len(), 2, "a tool call, then the final answer");
    assert_eq!(requests[0].header("x-api-key"), Some(ANTHROPIC));
    let second = requests[1].body.to_string();
    assert!(
        second.contains("PATH="),
        "the tool result came back: {second}"
    );
    for request in &requests {
        let body = request.body.to_string();
        for canary in CANARIES {
            assert!(
                !body.contains(canary),
                "{canary} sent to the provider: {body}"
            );
        }
    }

    // The hooks ran: the command hook's output is in hooks.log, redacted, and the HTTP
    // hook's header carried the secret to its server.
    let hooks_log = fs_err::read_to_string(run_dir.join("stages/002-probe@1/hooks.log"))
        .expect("the probe's hooks.log");
    assert!(
        hooks_log.contains("\"event\":\"StageCompleted\"") && hooks_log.contains("[REDACTED]"),
        "{hooks_log}"
    );
    let hook_events = crate::hooks::events(&run_dir);
    let started: Vec<_> = hook_events
        .iter()
        .filter(|event| event["event"] == "HookStarted")
        .collect();
    assert!(
        started.len() >= 6,
        "a hook per stage and the run's: {started:?}"
    );
    assert!(started[0]["properties"]["target"]
        .as_str()
        .is_some_and(|target| target.contains("[REDACTED]")));
    let received = hook_server.received();
    assert_eq!(received.len(), 1, "{received:?}");
    let bearer = format!("Bearer {TOKEN}");
    assert_eq!(received[0].header("authorization"), Some(bearer.as_str()));

    // No file fabro wrote holds a secret.
    let (hits, files) = files_with_canaries(&env.fabro_home());
    assert!(files >= 10, "the run wrote its files ({files})");
    assert!(hits.is_empty(), "{hits:#?}");

    // Neither does any git object: what the probes wrote into the worktree (committed
    // on the run branch) and the metadata commits.
    let objects = git(&["cat-file", "--batch-all-objects", "--batch"]);
    assert!(
        contains(&objects, "seen-by-command.txt") && contains(&objects, "seen-by-agent.txt"),
        "the probes' files were committed"
    );
    for canary in CANARIES {
        assert!(!contains(&objects, canary), "{canary} in a git object");
    }
    for canary in CANARIES {
        assert!(!stdout(&output).contains(canary), "{canary} on stdout");
        assert!(!stderr(&output).contains(canary), "{canary} on stderr");
    }
}

/// The parent removes the keys from its own environment at start-up, so it hands them
/// to the background worker explicitly.
#[test]
fn a_detached_worker_still_gets_its_provider_key() {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = runtime.block_on(Twin::start()).expect("the twin starts");
    twin.set_fallback(Reply::text("Detached and keyed."));
    let env = TestEnv::new("secret_detached_key");
    env.write(
        "w.fabro",
        r#"digraph w {
  graph [goal="Answer"]
  start [shape=Mdiamond]
  exit [shape=Msquare]
  ask [prompt="Say something", model=sonnet]
  start -> ask -> exit
}
"#,
    );
    let output = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro", "--detach", "--run-id", "d1"])
        .env("ANTHROPIC_API_KEY", ANTHROPIC)
        .env("ANTHROPIC_BASE_URL", twin.base_url())
        .output()
        .expect("fabro runs");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let run_dir = env.fabro_home().join("scratch/d1");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = fs_err::read_to_string(run_dir.join("worker.log")).unwrap_or_default();
        if log.contains("status: ") {
            assert!(log.contains("status: success"), "{log}");
            break;
        }
        assert!(Instant::now() < deadline, "{log}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let requests = twin.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].header("x-api-key"), Some(ANTHROPIC));
    let (hits, _) = files_with_canaries(&env.fabro_home());
    assert!(hits.is_empty(), "{hits:#?}");
}
