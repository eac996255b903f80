//! Every flag of `fabro run` and `fabro resume` with `--server` (issue 28 item 2, SPEC
//! 14.2): the same command run locally and against a real `fabro server` prints the same
//! lines and exits with the same code; what the flag changes in the run's records (the
//! stages, the goal, the models, a stage's output) is the same too.

use std::process::Output;

use fabro_test_support::TestEnv;
use fabro_twin::{Reply, Turn, Twin};

use crate::budget::{llm_loop, COMMAND_LOOP};
use crate::server::{normalized, Server};
use crate::{code, fabro, stderr, stdout};

const GATE: &str = "digraph gate {\n  graph [goal=\"Decide\"]\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  review [shape=hexagon, label=\"Ship it?\"]\n  ship [shape=parallelogram, script=\"echo shipped\"]\n  revise [shape=parallelogram, script=\"echo revised\"]\n  start -> review\n  review -> ship [label=\"[A] Approve\"]\n  review -> revise [label=\"[R] Revise\"]\n  ship -> exit\n  revise -> exit\n}\n";

const ECHO: &str = "digraph echo {\n  graph [goal=\"Echo\"]\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  say [shape=parallelogram, script=\"echo tag=$TAG\"]\n  think [prompt=\"Say the goal: $goal\"]\n  start -> say -> think -> exit\n}\n";

/// The local run's id for `name` and the remote one's: the same length, so that the
/// two runs' texts (prompts, token counts) differ only in the id.
fn ids(name: &str) -> (String, String) {
    (format!("L-{name}"), format!("R-{name}"))
}

/// `fabro` with `args` and `extra` environment variables.
fn fabro_with(env: &TestEnv, args: &[&str], extra: &[(&str, &str)]) -> Output {
    env.command(env!("CARGO_BIN_EXE_fabro"))
        .args(args)
        .envs(extra.iter().copied())
        .output()
        .expect("the fabro binary runs")
}

/// Checks that `remote` printed what `local` printed (run ids, numbers and durations
/// aside) and exited with the same code; `with_stderr` compares stderr too (progress
/// lines, warnings, errors). Returns the exit code.
fn assert_same(
    what: &str,
    (local, local_id): (&Output, &str),
    (remote, remote_id): (&Output, &str),
    with_stderr: bool,
) -> i32 {
    assert_eq!(
        code(remote),
        code(local),
        "{what}: local {}{} / remote {}{}",
        stdout(local),
        stderr(local),
        stdout(remote),
        stderr(remote)
    );
    assert_eq!(
        normalized(&stdout(remote), remote_id),
        normalized(&stdout(local), local_id),
        "{what}: stdout; stderr local {} / remote {}",
        stderr(local),
        stderr(remote)
    );
    if with_stderr {
        assert_eq!(
            normalized(&stderr(remote), remote_id),
            normalized(&stderr(local), local_id),
            "{what}: stderr"
        );
    }
    code(local)
}

/// `fabro run {args} --run-id L-{name}` and the same with `R-{name}` and `--server`;
/// asserts the same output and exit code and returns the exit code.
fn run_both(
    env: &TestEnv,
    server: &Server,
    name: &str,
    args: &[&str],
    extra: &[(&str, &str)],
    with_stderr: bool,
) -> i32 {
    let (local_id, remote_id) = ids(name);
    let url = format!("http://{}", server.address);
    let mut local_args = vec!["run"];
    local_args.extend(args);
    local_args.extend(["--run-id", &local_id]);
    let mut remote_args = local_args.clone();
    *remote_args.last_mut().expect("the id") = &remote_id;
    remote_args.extend(["--server", &url]);
    let local = fabro_with(env, &local_args, extra);
    let remote = fabro_with(env, &remote_args, extra);
    assert_same(
        &format!("run {args:?}"),
        (&local, &local_id),
        (&remote, &remote_id),
        with_stderr,
    )
}

/// `fabro resume L-{name} {args}` and `fabro resume R-{name} {args} --server`.
fn resume_both(
    env: &TestEnv,
    server: &Server,
    name: &str,
    args: &[&str],
    extra: &[(&str, &str)],
    with_stderr: bool,
) -> i32 {
    let (local_id, remote_id) = ids(name);
    let url = format!("http://{}", server.address);
    let mut local_args = vec!["resume", local_id.as_str()];
    local_args.extend(args);
    let mut remote_args = vec!["resume", remote_id.as_str()];
    remote_args.extend(args);
    remote_args.extend(["--server", &url]);
    let local = fabro_with(env, &local_args, extra);
    let remote = fabro_with(env, &remote_args, extra);
    assert_same(
        &format!("resume {args:?}"),
        (&local, &local_id),
        (&remote, &remote_id),
        with_stderr,
    )
}

/// `text` normalized (see [`normalized`]), with runs of spaces (table columns sized to
/// their durations) as one and without the `workflow:` line of `inspect` (a local run
/// records the path as typed, a server run the absolute one).
fn records_text(text: &str, run_id: &str) -> String {
    normalized(text, run_id)
        .lines()
        .filter(|line| !line.starts_with("workflow: "))
        .map(|line| {
            line.split(' ')
                .filter(|word| !word.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `fabro {command} L-{name} {args}` and the same for `R-{name}`, the second as it reads
/// the server's runs (locally on the home, else with `--server`): the two runs' records
/// read the same (e.g. `inspect`, `logs`).
fn same_records(env: &TestEnv, server: &Server, name: &str, command: &str, args: &[&str]) {
    let (local_id, remote_id) = ids(name);
    let mut local_args = vec![command, local_id.as_str()];
    local_args.extend(args);
    let mut remote_args = vec![command, remote_id.as_str()];
    remote_args.extend(args);
    let local = fabro(env, &local_args);
    assert_eq!(code(&local), 0, "{local_args:?}: {}", stderr(&local));
    let mut local_text = records_text(&stdout(&local), &local_id);
    if command == "logs" && !server.store().is_home() {
        // `logs` has no `--server`: the stage's files through the API.
        let remote_text = records_text(&served_output(server, &remote_id, args[0]), &remote_id);
        assert_eq!(remote_text, local_text, "{command} {args:?}");
        return;
    }
    let remote = server.read(env, &remote_args);
    assert_eq!(code(&remote), 0, "{remote_args:?}: {}", stderr(&remote));
    let mut remote_text = records_text(&stdout(&remote), &remote_id);
    if args.contains(&"--json") {
        // `inspect --json`: the same document apart from the workflow's path.
        let document = |output: &Output, run_id: &str| {
            let mut document: serde_json::Value =
                serde_json::from_str(&stdout(output)).expect("JSON");
            document["workflow_path"] = serde_json::Value::Null;
            normalized(&document.to_string(), run_id)
        };
        local_text = document(&local, &local_id);
        remote_text = document(&remote, &remote_id);
    }
    assert_eq!(remote_text, local_text, "{command} {args:?}");
}

/// What `fabro logs {run_id} {node_id}` prints, from the files of the node's last stage
/// that the server serves: a command's stdout then stderr, an agent's response ending
/// in a newline.
fn served_output(server: &Server, run_id: &str, node_id: &str) -> String {
    let (status, body) = server.request("GET", &format!("/api/v1/runs/{run_id}/stages"), None);
    assert_eq!(status, 200, "{body}");
    let stages: serde_json::Value = serde_json::from_str(&body).expect("the stages");
    let stage = stages["stages"]
        .as_array()
        .and_then(|stages| {
            stages
                .iter()
                .rev()
                .find(|stage| stage["node_id"] == node_id)
        })
        .unwrap_or_else(|| panic!("no stage of {node_id}: {stages}"))
        .clone();
    let file = |name: &str| {
        let path = format!(
            "/api/v1/runs/{run_id}/stages/{}/files/{name}",
            stage["rank"]
        );
        match server.request("GET", &path, None) {
            (200, text) => text,
            (404, _) => String::new(),
            (status, text) => panic!("GET {path}: {status} {text}"),
        }
    };
    if stage["handler"] == "command" {
        return file("stdout.log") + &file("stderr.log");
    }
    let mut response = file("response.md");
    if !response.ends_with('\n') {
        response.push('\n');
    }
    response
}

#[test]
fn budget_flags_stop_a_server_run_as_they_stop_a_local_one() {
    let env = TestEnv::new("server-flags-budget");
    let server = Server::start(&env, &[]);
    env.write("loop.fabro", COMMAND_LOOP);
    env.write("think.fabro", &llm_loop("sonnet"));
    env.write(
        "slow.fabro",
        "digraph slow {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  nap [shape=parallelogram, script=\"sleep 5\"]\n  start -> nap -> exit\n}\n",
    );
    // A budget stop is status canceled with exit 1, not the 130 of a user cancellation.
    let stopped = run_both(
        &env,
        &server,
        "stages",
        &["loop.fabro", "--max-stages", "5"],
        &[],
        true,
    );
    assert_eq!(stopped, 1);
    same_records(&env, &server, "stages", "inspect", &[]);
    let stopped = run_both(
        &env,
        &server,
        "tokens",
        &[
            "think.fabro",
            "--provider",
            "simulated",
            "--max-tokens",
            "300",
        ],
        &[],
        true,
    );
    assert_eq!(stopped, 1);
    same_records(&env, &server, "tokens", "inspect", &[]);
    let stopped = run_both(
        &env,
        &server,
        "time",
        &["slow.fabro", "--max-duration", "1s"],
        &[],
        true,
    );
    assert_eq!(stopped, 1);
    // The budget flags of resume: more room, then the same stop again.
    assert_eq!(
        resume_both(&env, &server, "stages", &["--max-stages", "9"], &[], true),
        1
    );
    same_records(&env, &server, "stages", "inspect", &[]);
    assert_eq!(
        resume_both(
            &env,
            &server,
            "tokens",
            &[
                "--provider",
                "simulated",
                "--model",
                "haiku",
                "--max-tokens",
                "600"
            ],
            &[],
            true
        ),
        1
    );
    same_records(&env, &server, "tokens", "inspect", &[]);
    assert_eq!(
        resume_both(
            &env,
            &server,
            "time",
            &["--max-duration", "1m", "--json"],
            &[],
            false
        ),
        0
    );
    same_records(&env, &server, "time", "inspect", &[]);
}

#[test]
fn max_cost_stops_a_server_run_as_it_stops_a_local_one() {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let twin = runtime.block_on(Twin::start()).expect("the twin starts");
    // 100,000 input tokens of claude-sonnet-4-6 at 3 $ per million: 0.30 $ a call.
    twin.set_fallback(Reply::Turn(Turn {
        input_tokens: 100_000,
        output_tokens: 0,
        ..Turn::text("Still thinking.")
    }));
    let env = TestEnv::new("server-flags-cost");
    let base_url = twin.base_url();
    let credentials = [
        ("ANTHROPIC_API_KEY", "sk-ant-test-key"),
        ("ANTHROPIC_BASE_URL", base_url.as_str()),
    ];
    let server = Server::start(&env, &credentials);
    env.write("w.fabro", &llm_loop("claude-sonnet-4-6"));
    let stopped = run_both(
        &env,
        &server,
        "cost",
        &["w.fabro", "--max-cost", "1"],
        &credentials,
        true,
    );
    assert_eq!(stopped, 1);
    let resumed = resume_both(
        &env,
        &server,
        "cost",
        &["--max-cost", "1.4"],
        &credentials,
        true,
    );
    assert_eq!(resumed, 1);
    same_records(&env, &server, "cost", "inspect", &[]);
}

#[test]
fn config_and_run_flags_act_on_a_server_run_as_on_a_local_one() {
    let env = TestEnv::new("server-flags-run");
    let server = Server::start(&env, &[]);
    env.write("loop.fabro", COMMAND_LOOP);
    env.write("gate.fabro", GATE);
    env.write("echo.fabro", ECHO);
    env.write("three.toml", "[run]\nmax_stages = 3\n");
    env.write("broken.toml", "[run\nmax_stages = 3\n");
    env.write("unknown.toml", "[run]\nmax_stagez = 3\n");
    // `--config`: the file's layer applies; a broken or missing file is exit 2 with the
    // local message.
    assert_eq!(
        run_both(
            &env,
            &server,
            "config",
            &["loop.fabro", "--config", "three.toml"],
            &[],
            true
        ),
        1
    );
    same_records(&env, &server, "config", "inspect", &[]);
    for (name, file) in [
        ("broken", "broken.toml"),
        ("unknown", "unknown.toml"),
        ("missing", "missing.toml"),
    ] {
        assert_eq!(
            run_both(
                &env,
                &server,
                name,
                &["loop.fabro", "--config", file],
                &[],
                true
            ),
            2,
            "{file}"
        );
    }
    // `--var`, `--goal`, `--model`, `--provider`: the stage output and the records.
    assert_eq!(
        run_both(
            &env,
            &server,
            "vars",
            &[
                "echo.fabro",
                "--var",
                "TAG=from-cli",
                "--goal",
                "Say ✓ twice",
                "--provider",
                "simulated",
                "--model",
                "haiku",
            ],
            &[],
            true
        ),
        0
    );
    same_records(&env, &server, "vars", "inspect", &["--json"]);
    same_records(&env, &server, "vars", "logs", &["say"]);
    same_records(&env, &server, "vars", "logs", &["think"]);
    assert_eq!(
        run_both(
            &env,
            &server,
            "badvar",
            &["echo.fabro", "--var", "novalue"],
            &[],
            true
        ),
        2
    );
    // `--answer` (twice for one node: consumed in order) and `--auto-approve`.
    assert_eq!(
        run_both(
            &env,
            &server,
            "answer",
            &["gate.fabro", "--answer", "review=R", "--answer", "review=A"],
            &[],
            true
        ),
        0
    );
    same_records(&env, &server, "answer", "inspect", &[]);
    assert_eq!(
        run_both(
            &env,
            &server,
            "approve",
            &["gate.fabro", "--auto-approve"],
            &[],
            true
        ),
        0
    );
    same_records(&env, &server, "approve", "inspect", &[]);
    run_both(
        &env,
        &server,
        "noanswer",
        &["gate.fabro", "--answer", "nobody=A"],
        &[],
        true,
    );
    // `--dry-run` and `--json`.
    assert_eq!(
        run_both(
            &env,
            &server,
            "dry",
            &["echo.fabro", "--dry-run", "--var", "TAG=x"],
            &[],
            true
        ),
        0
    );
    same_records(&env, &server, "dry", "inspect", &["--json"]);
    assert_eq!(
        run_both(
            &env,
            &server,
            "json",
            &["loop.fabro", "--max-stages", "4", "--json"],
            &[],
            true
        ),
        1
    );
    // `--run-id` of an existing run: refused, exit 2.
    let url = format!("http://{}", server.address);
    let local = fabro(
        &env,
        &[
            "run",
            "gate.fabro",
            "--run-id",
            "L-answer",
            "--auto-approve",
        ],
    );
    let remote = fabro(
        &env,
        &[
            "run",
            "gate.fabro",
            "--run-id",
            "R-answer",
            "--auto-approve",
            "--server",
            &url,
        ],
    );
    assert_same(
        "existing run id",
        (&local, "L-answer"),
        (&remote, "R-answer"),
        true,
    );
    assert_eq!(code(&local), 2);
    // The worker flag of `--detach` is no flag for a server run: refused, naming it.
    let worker = fabro(
        &env,
        &["run", "gate.fabro", "--detached-worker", "--server", &url],
    );
    assert_eq!(code(&worker), 2, "{}", stderr(&worker));
    assert!(
        stderr(&worker).contains("--detached-worker"),
        "{}",
        stderr(&worker)
    );
}

#[test]
fn answer_and_auto_approve_of_resume_act_on_a_server_run_as_on_a_local_one() {
    let env = TestEnv::new("server-flags-resume");
    let server = Server::start(&env, &[]);
    // One command stage, then a gate: `--max-stages 2` stops the run at the gate.
    env.write(
        "w.fabro",
        "digraph w {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  prep [shape=parallelogram, script=\"echo prep\"]\n  review [shape=hexagon, label=\"Ship it?\"]\n  ship [shape=parallelogram, script=\"echo shipped\"]\n  revise [shape=parallelogram, script=\"echo revised\"]\n  start -> prep -> review\n  review -> ship [label=\"[A] Approve\"]\n  review -> revise [label=\"[R] Revise\"]\n  ship -> exit\n  revise -> exit\n}\n",
    );
    for name in ["answer", "approve"] {
        assert_eq!(
            run_both(
                &env,
                &server,
                name,
                &["w.fabro", "--max-stages", "2"],
                &[],
                true
            ),
            1
        );
    }
    assert_eq!(
        resume_both(
            &env,
            &server,
            "answer",
            &["--answer", "review=R", "--max-stages", "0"],
            &[],
            true
        ),
        0
    );
    same_records(&env, &server, "answer", "inspect", &[]);
    assert_eq!(
        resume_both(
            &env,
            &server,
            "approve",
            &["--auto-approve", "--max-stages", "0"],
            &[],
            true
        ),
        0
    );
    same_records(&env, &server, "approve", "inspect", &[]);
    let url = format!("http://{}", server.address);
    let worker = fabro(
        &env,
        &["resume", "R-answer", "--detached-worker", "--server", &url],
    );
    assert_eq!(code(&worker), 2, "{}", stderr(&worker));
    assert!(
        stderr(&worker).contains("--detached-worker"),
        "{}",
        stderr(&worker)
    );
}

/// Waits (at most 60 s) until `inspect` shows the run `run_id` (`L-…` in the home,
/// `R-…` as it reads the server's runs) canceled with at least `stages` stages.
fn wait_until_canceled(env: &TestEnv, server: &Server, run_id: &str, stages: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let args = ["inspect", run_id, "--json"];
        let inspected = if run_id.starts_with("R-") {
            server.read(env, &args)
        } else {
            fabro(env, &args)
        };
        let document: serde_json::Value =
            serde_json::from_str(&stdout(&inspected)).unwrap_or_default();
        if document["status"] == "canceled"
            && document["stages"].as_array().map_or(0, Vec::len) >= stages
        {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{run_id}: {document}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn detach_starts_a_server_run_and_exits_as_a_local_detach_does() {
    let env = TestEnv::new("server-flags-detach");
    let server = Server::start(&env, &[]);
    env.write("loop.fabro", COMMAND_LOOP);
    assert_eq!(
        run_both(
            &env,
            &server,
            "detach",
            &["loop.fabro", "--max-stages", "3", "--detach"],
            &[],
            true
        ),
        0
    );
    let (local_id, remote_id) = ids("detach");
    wait_until_canceled(&env, &server, &local_id, 0);
    wait_until_canceled(&env, &server, &remote_id, 0);
    same_records(&env, &server, "detach", "inspect", &[]);
    assert_eq!(
        resume_both(
            &env,
            &server,
            "detach",
            &["--max-stages", "6", "--detach"],
            &[],
            true
        ),
        0
    );
    // The resumed runs stop again at their new limit.
    wait_until_canceled(&env, &server, &local_id, 6);
    wait_until_canceled(&env, &server, &remote_id, 6);
    same_records(&env, &server, "detach", "inspect", &[]);
}

#[test]
fn no_in_place_refuses_a_dirty_tree_on_a_server_as_locally() {
    let env = TestEnv::new("server-flags-in-place");
    let git = |args: &[&str]| {
        let output = env.command("git").args(args).output().expect("git runs");
        assert!(
            output.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    git(&["init", "-q", "-b", "main"]);
    env.write("w.fabro", "digraph w {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  a [shape=parallelogram, script=\"echo a\"]\n  start -> a -> exit\n}\n");
    git(&["add", "."]);
    git(&["commit", "-q", "-m", "init"]);
    env.write("w.fabro", "digraph w {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  a [shape=parallelogram, script=\"echo edited\"]\n  start -> a -> exit\n}\n");
    let server = Server::start(&env, &[]);
    assert_eq!(
        run_both(
            &env,
            &server,
            "refuse",
            &["w.fabro", "--no-in-place"],
            &[],
            true
        ),
        2
    );
    let scratch = env.fabro_home().join("scratch");
    assert_eq!(fs_err::read_dir(&scratch).map_or(0, Iterator::count), 0);
}

#[test]
fn ctrl_c_cancels_a_server_run_and_exits_130_as_locally() {
    let env = TestEnv::new("server-flags-ctrl-c");
    let server = Server::start(&env, &[]);
    let url = format!("http://{}", server.address);
    let mut outputs = Vec::new();
    for (run_id, remote) in [("L-nap", false), ("R-nap", true)] {
        let marker = env.work_dir().join(format!("{run_id}.started"));
        env.write(
            "nap.fabro",
            &format!(
                "digraph nap {{\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  nap [shape=parallelogram, script=\"touch {}; sleep 30\"]\n  start -> nap -> exit\n}}\n",
                marker.display()
            ),
        );
        let mut command = env.command(env!("CARGO_BIN_EXE_fabro"));
        command.args(["run", "nap.fabro", "--run-id", run_id]);
        if remote {
            command.args(["--server", &url]);
        }
        let child = command
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("fabro starts");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !marker.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "the stage never started"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("SIGINT");
        outputs.push((child.wait_with_output().expect("fabro exits"), run_id));
    }
    let ((local, local_id), (remote, remote_id)) = (&outputs[0], &outputs[1]);
    let canceled = assert_same("Ctrl-C", (local, *local_id), (remote, *remote_id), false);
    assert_eq!(canceled, 130, "{}", stderr(local));
    assert!(
        stdout(remote).contains("status: canceled\nreason: canceled\n"),
        "{}",
        stdout(remote)
    );
}
