//! The server's run listing against runs a CLI process starts, ends and changes under the
//! same `{root}`: the server keeps the run index open with a snapshot of its listing
//! (`RunCatalog`), and whatever another process does to the store must still show.

use std::process::Stdio;
use std::time::{Duration, Instant};

use fabro_test_support::TestEnv;
use serde_json::Value;

use crate::server::{Server, TWO_STAGES};
use crate::{code, fabro, stderr};

/// A command stage that signals `waiting`, then holds the run until `go` exists.
const GATED: &str = "digraph gated {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  gate [shape=parallelogram, script=\"touch waiting; while [ ! -e go ]; do sleep 0.01; done\"]
  start -> gate -> exit
}
";

/// Longer than the window in which a directory's modification time cannot be trusted:
/// the listings after it come from the snapshot unless something is noticed.
const SETTLE: Duration = Duration::from_millis(300);

fn get(server: &Server, path: &str) -> (u16, Value) {
    let (status, body) = server.request("GET", path, None);
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// `(run_id, status)` of `GET /api/v1/runs`, newest first.
fn listed(server: &Server) -> Vec<(String, String)> {
    let (status, list) = get(server, "/api/v1/runs");
    assert_eq!(status, 200, "{list}");
    list["runs"]
        .as_array()
        .map(|runs| {
            runs.iter()
                .map(|run| {
                    (
                        run["run_id"].as_str().unwrap_or_default().to_owned(),
                        run["status"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(run_id, status)| ((*run_id).to_owned(), (*status).to_owned()))
        .collect()
}

fn cli_run(env: &TestEnv, workflow: &str, run_id: &str) {
    let output = fabro(env, &["run", workflow, "--run-id", run_id]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
}

#[test]
fn runs_a_cli_process_starts_ends_and_changes_show_in_the_server_listing() {
    let env = TestEnv::new("server-catalog");
    env.write("w.fabro", TWO_STAGES);
    env.write("gated.fabro", GATED);
    // The local store whatever `FABRO_TEST_STORE` says: the test is about the files a
    // CLI process writes under the server's home (the CLI never writes to PostgreSQL).
    let server = Server::start_local(&env, &[]);
    assert_eq!(listed(&server), []);

    // A run another process started and ended after the server listed the store.
    cli_run(&env, "w.fabro", "cli-first");
    assert_eq!(listed(&server), pairs(&[("cli-first", "success")]));
    std::thread::sleep(SETTLE);
    assert_eq!(listed(&server), pairs(&[("cli-first", "success")]));

    // A run in progress, then its end.
    let mut child = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "gated.fabro", "--run-id", "cli-gated"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("fabro run starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !env.work_dir().join("waiting").exists() {
        assert!(Instant::now() < deadline, "the gate never ran");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(SETTLE);
    assert_eq!(
        listed(&server),
        pairs(&[("cli-gated", "running"), ("cli-first", "success")])
    );
    assert_eq!(get(&server, "/api/v1/runs/cli-g").1["status"], "running");
    fs_err::write(env.work_dir().join("go"), "").expect("opens the gate");
    assert!(child.wait().expect("fabro run exits").success());
    assert_eq!(
        listed(&server),
        pairs(&[("cli-gated", "success"), ("cli-first", "success")])
    );
    assert_eq!(
        get(&server, "/api/v1/runs/cli-gated").1["status"],
        "success"
    );

    // A manifest damaged by hand shows within the catalog's periodic check.
    std::thread::sleep(SETTLE);
    fs_err::write(
        env.fabro_home().join("scratch/cli-first/manifest.json"),
        "{\"run_id\": \"cli-first\", trunc",
    )
    .expect("damages the manifest");
    let deadline = Instant::now() + Duration::from_secs(10);
    while listed(&server) != pairs(&[("cli-gated", "success"), ("cli-first", "unreadable")]) {
        assert!(Instant::now() < deadline, "{:?}", listed(&server));
        std::thread::sleep(Duration::from_millis(50));
    }

    // A removed run directory is gone at once.
    fs_err::remove_dir_all(env.fabro_home().join("scratch/cli-first")).expect("removes");
    assert_eq!(listed(&server), pairs(&[("cli-gated", "success")]));
    assert_eq!(get(&server, "/api/v1/runs/cli-first").0, 404);

    // The index deleted, then rebuilt by a CLI process that records a new run in it.
    std::thread::sleep(SETTLE);
    fs_err::remove_file(env.fabro_home().join("runs.db")).expect("removes runs.db");
    cli_run(&env, "w.fabro", "cli-third");
    assert_eq!(
        listed(&server),
        pairs(&[("cli-third", "success"), ("cli-gated", "success")])
    );
    assert_eq!(
        get(&server, "/api/v1/runs/cli-third").1["status"],
        "success"
    );
}
