//! Two `fabro server` processes on one shared store (SPEC 18.1, issue 31 acceptance 1):
//! each with a storage root of its own, as on two machines, on one PostgreSQL database
//! of the test's own and one blob directory; the first names them in the `[store]`
//! table of its `server.toml`, the second in `FABRO_STORE` and `FABRO_BLOBS`. A run started through the first is listed,
//! inspected, answered at its gate and cancelled through the second; its event stream,
//! begun on the first and resumed on the second with `Last-Event-ID` in the middle of
//! the run, receives every stored event exactly once.

use std::path::Path;
use std::time::{Duration, Instant};

use fabro_test_support::{TestDatabase, TestEnv};
use serde_json::{json, Value};

use crate::server::Server;
use crate::server_stream::{connect, SseEvent};
use crate::{code, fabro, stderr, stdout};

/// A command stage, a gate, then a stage that runs until it is cancelled.
fn workflow(ready: &Path) -> String {
    format!(
        "digraph shared {{
  graph [goal=\"ship it\"]
  start [shape=Mdiamond]
  exit [shape=Msquare]
  build [shape=parallelogram, script=\"echo built\"]
  review [shape=hexagon, label=\"Ship it?\"]
  ship [shape=parallelogram, script=\"touch {ready}; sleep 600\"]
  start -> build -> review
  review -> ship [label=\"[A] Approve\"]
  ship -> exit
}}
",
        ready = ready.display()
    )
}

/// A server on the shared store, with a storage root of its own: the store named in
/// its `server.toml` (beside a run configuration layer) or in its environment.
fn shared_server(env: &TestEnv, database: &TestDatabase, blobs: &Path, in_toml: bool) -> Server {
    let blobs = format!("file://{}", blobs.display());
    if in_toml {
        fs_err::write(
            env.fabro_home().join("server.toml"),
            format!(
                "[server]\nmax_concurrent_runs = 2\n\n[store]\nurl = \"{}\"\nblobs = \"{blobs}\"\n\n[run]\nmax_stages = 50\n",
                database.url()
            ),
        )
        .expect("server.toml is written");
        return Server::start_local(env, &[]);
    }
    // `start_local`: the store is the one named here, whatever `FABRO_TEST_STORE` says.
    Server::start_local(
        env,
        &[("FABRO_STORE", &database.url()), ("FABRO_BLOBS", &blobs)],
    )
}

fn get(server: &Server, path: &str) -> Value {
    let (status, body) = server.request("GET", path, None);
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).expect("JSON")
}

/// Waits (at most 60 s) until `ready` holds of the answer to `GET path`. The other
/// server knows a run once its records are stored, a moment after the start was
/// accepted: until then, any answer counts as not ready.
fn wait_for(server: &Server, path: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = server.request("GET", path, None);
        let document: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        if status == 200 && ready(&document) {
            return document;
        }
        assert!(Instant::now() < deadline, "GET {path}: {status} {body}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_run_of_one_server_is_followed_answered_and_cancelled_through_another() {
    let Some(database) = TestDatabase::create("two_servers_share_one_store") else {
        return;
    };
    let first_env = TestEnv::new("two-servers-first");
    let second_env = TestEnv::new("two-servers-second");
    let blobs = first_env.work_dir().join("shared-blobs");
    let ready = first_env.work_dir().join("shipping");
    first_env.write("shared.fabro", &workflow(&ready));
    let first = shared_server(&first_env, &database, &blobs, true);
    let second = shared_server(&second_env, &database, &blobs, false);

    let (status, body) = first.request(
        "POST",
        "/api/v1/runs",
        Some(&json!({"workflow": "shared.fabro", "run_id": "shared-run"})),
    );
    assert_eq!(status, 201, "{body}");

    // The second server sees the run wait at its gate: listed, inspected, its question.
    let questions = wait_for(&second, "/api/v1/runs/shared-run/questions", |document| {
        document["questions"]
            .as_array()
            .is_some_and(|questions| !questions.is_empty())
    });
    assert_eq!(questions["questions"][0]["text"], "Ship it?", "{questions}");
    let listed = get(&second, "/api/v1/runs?status=waiting");
    let runs = listed["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1, "{listed}");
    assert_eq!(runs[0]["run_id"], "shared-run");
    assert_eq!(runs[0]["status"], "running", "{listed}");
    assert_eq!(runs[0]["pending_question"]["text"], "Ship it?", "{listed}");
    let inspected = get(&second, "/api/v1/runs/shared-run");
    assert_eq!(inspected["status"], "running", "{inspected}");
    assert_eq!(inspected["workflow_name"], "shared", "{inspected}");
    let stages = get(&second, "/api/v1/runs/shared-run/stages");
    let build_rank = stages["stages"]
        .as_array()
        .and_then(|stages| stages.iter().find(|stage| stage["node_id"] == "build"))
        .map(|stage| stage["rank"].clone())
        .unwrap_or_else(|| panic!("no build stage: {stages}"));
    let (status, stdout_log) = second.request(
        "GET",
        &format!("/api/v1/runs/shared-run/stages/{build_rank}/files/stdout.log"),
        None,
    );
    assert_eq!((status, stdout_log.as_str()), (200, "built\n"));

    // The stream begins on the first server and, the run still waiting, goes on from the
    // second with the id of the last event it received.
    let (begun, ended) = connect(&first, "shared-run", None, 3);
    assert!(!ended, "the run is still waiting");
    let last = begun.last().map(|event| event.0);
    let (received, cancel_answer) = std::thread::scope(|scope| {
        let resumed = scope.spawn(|| connect(&second, "shared-run", last, usize::MAX));
        let url = format!("http://{}", second.address);
        let answered = fabro(
            &second_env,
            &["answer", "shared-run", "A", "--server", &url],
        );
        assert_eq!(code(&answered), 0, "{}", stderr(&answered));
        assert_eq!(stdout(&answered), "review → [A] Approve\n");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ready.exists() {
            assert!(Instant::now() < deadline, "the ship stage did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        let running = get(&second, "/api/v1/runs/shared-run");
        assert_eq!(running["status"], "running", "{running}");
        let cancel_answer = second.request("POST", "/api/v1/runs/shared-run/cancel", None);
        let (events, ended) = resumed.join().expect("the stream's thread");
        assert!(
            ended,
            "the second server ended the stream after the run's end"
        );
        (events, cancel_answer)
    });
    assert_eq!(cancel_answer.0, 202, "{}", cancel_answer.1);
    let canceled = wait_for(&first, "/api/v1/runs/shared-run", |document| {
        document["status"] != "running"
    });
    assert_eq!(canceled["status"], "canceled", "{canceled}");
    assert_eq!(
        get(&second, "/api/v1/runs/shared-run")["status"],
        "canceled"
    );

    // Every stored event once, in order, across the two connections.
    let streamed: Vec<SseEvent> = begun.into_iter().chain(received).collect();
    let page = get(&second, "/api/v1/runs/shared-run/events");
    let stored: Vec<(u64, String)> = page["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|event| {
            (
                event["id"].as_u64().expect("an id"),
                event["event"].as_str().expect("a name").to_owned(),
            )
        })
        .collect();
    assert_eq!(
        streamed
            .iter()
            .map(|(id, name, _)| (*id, name.clone()))
            .collect::<Vec<_>>(),
        stored
    );
    assert_eq!(
        stored.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        (1..=stored.len() as u64).collect::<Vec<_>>()
    );
    assert_eq!(
        stored.last().map(|(_, name)| name.as_str()),
        Some("WorkflowRunFailed"),
        "a canceled run ends with WorkflowRunFailed (SPEC 11.3)"
    );
}
