//! The object store lost while workers execute runs (SPEC 18.4.4, issue 32 test 4): the
//! S3 server (moto, real, on loopback) sits behind a [`Gate`] that the test closes, so
//! that it keeps what it stored. The runs stop `canceled` as engine errors of their
//! storage and finish when resumed through the queue after the store is back.

use std::path::Path;
use std::time::Duration;

use fabro_test_support::{Gate, S3Server, TestEnv};
use serde_json::{json, Value};

use crate::workers::{events_of, post_queued, wait_for, Shared, Worker};

/// `first` stores its output; `wait` says it runs (`{run}.ready`), waits for
/// `{run}.go`, then ends, so that its output is stored while the store is gone.
fn workflow(dir: &Path) -> String {
    format!(
        r#"digraph faults {{
    start [shape=Mdiamond]
    exit [shape=Msquare]
    first [shape=parallelogram, script="echo one"]
    wait [shape=parallelogram, script="touch {dir}/$mark.ready; while [ ! -e {dir}/$mark.go ]; do sleep 0.05; done; echo two"]
    start -> first -> wait -> exit
}}
"#,
        dir = dir.display()
    )
}

/// SPEC 18.4.4: runs whose object store becomes unreachable stop `canceled` with an
/// `engine error: …` reason; resumed once it is back, they finish on a worker, and
/// nothing stored before the fault is lost or rewritten.
#[test]
fn runs_whose_object_store_is_lost_stop_canceled_and_finish_when_resumed() {
    const RUNS: [&str; 2] = ["lost-a", "lost-b"];
    let test = "worker_faults_object_store";
    let env = TestEnv::new("worker-faults");
    let Some(s3) = S3Server::start(test, "fabro-worker-faults") else {
        return;
    };
    let gate = Gate::start(
        s3.endpoint()
            .trim_start_matches("http://")
            .parse()
            .expect("an S3 endpoint on loopback"),
    );
    let blobs = vec![
        ("FABRO_BLOBS", format!("s3://{}/team", s3.bucket())),
        ("AWS_ENDPOINT_URL", format!("http://{}", gate.address())),
        ("AWS_REGION", "us-east-1".to_owned()),
        ("AWS_ACCESS_KEY_ID", "testing".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "testing-FAKE-secret".to_owned()),
    ];
    let Some(shared) = Shared::with_blobs(test, blobs) else {
        return;
    };
    let signals = env.work_dir().join("signals");
    fs_err::create_dir_all(&signals).expect("a directory for the signals");
    env.write("faults.fabro", &workflow(&signals));
    let server = shared.queueing_server(&env);
    let worker = Worker::start(&env, &shared, "w1", 2);
    for run_id in RUNS {
        post_queued(
            &server,
            &json!({"workflow": "faults.fabro", "run_id": run_id, "vars": {"mark": run_id}}),
        );
    }
    for run_id in RUNS {
        let ready = signals.join(format!("{run_id}.ready"));
        worker.wait_until(Duration::from_secs(60), "a stage never started", || {
            ready.exists()
        });
    }
    gate.close();
    for run_id in RUNS {
        fs_err::write(signals.join(format!("{run_id}.go")), "").expect("the signal");
    }
    // The object store's requests are retried for 30 s before they are errors.
    wait_for(
        &shared,
        "SELECT string_agg(status, ' ' ORDER BY run_id) FROM runs",
        "canceled canceled",
        Duration::from_secs(90),
        &[&worker],
    );
    let mut before = Vec::new();
    for run_id in RUNS {
        let events = events_of(&shared, run_id);
        let end = events.last().expect("events");
        assert_eq!(end["event"], "WorkflowRunFailed", "{end}");
        assert_eq!(end["properties"]["failure_class"], "canceled", "{end}");
        let reason = end["properties"]["reason"].as_str().unwrap_or_default();
        assert!(reason.starts_with("engine error: "), "{reason}");
        assert!(
            events
                .iter()
                .any(|event| event["event"] == "StageCompleted" && event["node_id"] == "first"),
            "{events:?}"
        );
        before.push(events);
    }
    gate.open();
    for run_id in RUNS {
        let (status, body) = server.request(
            "POST",
            &format!("/api/v1/runs/{run_id}/resume"),
            Some(&json!({})),
        );
        assert!((200..300).contains(&status), "{status} {body}");
    }
    wait_for(
        &shared,
        "SELECT string_agg(status, ' ' ORDER BY run_id) FROM runs",
        "success success",
        Duration::from_secs(60),
        &[&worker],
    );
    for (run_id, before) in RUNS.iter().zip(before) {
        let after: Vec<Value> = events_of(&shared, run_id);
        for (index, event) in after.iter().enumerate() {
            assert_eq!(event["id"], index + 1, "run {run_id}: ids have no gap");
        }
        assert_eq!(
            &after[..before.len()],
            &before[..],
            "run {run_id}: nothing stored before the fault was lost or rewritten"
        );
    }
    // `fabro runs` and the board name the worker of each run.
    let listed = crate::fabro(&env, &["runs", "--server", &server.url()]);
    assert_eq!(crate::code(&listed), 0, "{}", crate::stderr(&listed));
    let table = crate::stdout(&listed);
    assert!(
        table
            .lines()
            .next()
            .is_some_and(|header| header.ends_with("WORKER")),
        "{table}"
    );
    for run_id in RUNS {
        assert!(
            table
                .lines()
                .any(|line| line.starts_with(run_id) && line.trim_end().ends_with(" w1")),
            "{table}"
        );
    }
    let (status, board) = server.request("GET", "/", None);
    assert_eq!(status, 200, "{board}");
    assert!(
        board.contains("<th>Worker</th>") && board.contains("<td class=\"worker\">w1</td>"),
        "{board}"
    );
}

/// `fabro run --priority N` goes with `--server` into the queue's order (SPEC 18.2);
/// without a server it is refused with exit 2.
#[test]
fn the_priority_flag_orders_a_servers_queue_and_needs_a_server() {
    let env = TestEnv::new("worker-priority");
    env.write("hello.fabro", crate::HELLO);
    let local = crate::fabro(&env, &["run", "hello.fabro", "--priority", "3"]);
    assert_eq!(crate::code(&local), 2, "{}", crate::stderr(&local));
    assert!(
        crate::stderr(&local).contains("--priority"),
        "{}",
        crate::stderr(&local)
    );
    let Some(shared) = Shared::create("worker_priority", &env) else {
        return;
    };
    let server = shared.queueing_server(&env);
    let url = server.url();
    let queued = crate::fabro(
        &env,
        &[
            "run",
            "hello.fabro",
            "--run-id",
            "urgent",
            "--priority",
            "-2",
            "--detach",
            "--server",
            &url,
        ],
    );
    assert_eq!(crate::code(&queued), 0, "{}", crate::stderr(&queued));
    assert_eq!(
        shared.query("SELECT priority FROM runs WHERE run_id = 'urgent'"),
        "-2"
    );
}
