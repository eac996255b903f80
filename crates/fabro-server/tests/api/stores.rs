//! Issue 30: the server reads run records through the engine's `RunStore` only, so the
//! same API works on every store: the files of the storage root, memory, and PostgreSQL
//! (a database of the test's own on 127.0.0.1:5432; with `CI` set, an unreachable
//! server fails the test). One scenario runs on each: a run that waits at a gate is
//! listed, inspected, its stages and stage files read, its question answered; once it
//! ends, its graph is drawn with the stages' statuses and its events are paged and
//! streamed from a `Last-Event-ID`; and what the API shows is the same on all three.

use std::collections::BTreeMap;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use fabro_engine::{FsBlobStore, MemoryRunStore, RunId, Stores};
use fabro_store::{PgRunStore, PgStore};
use fabro_test_support::TestDatabase;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::support::{Fixture, TOKEN};

/// A command stage, then a gate choosing between two command stages.
const WORKFLOW: &str = "digraph gated {
  graph [goal=\"ship it\"]
  start [shape=Mdiamond]
  exit [shape=Msquare]
  build [shape=parallelogram, script=\"echo built\"]
  review [shape=hexagon, label=\"Ship it?\"]
  ship [shape=parallelogram, script=\"echo shipped\"]
  revise [shape=parallelogram, script=\"echo revised\"]
  start -> build -> review
  review -> ship [label=\"[A] Approve\"]
  review -> revise [label=\"[R] Revise\"]
  ship -> exit
  revise -> exit
}
";

/// What the API showed of the run, without what differs between stores by nature (run
/// directories, times, ids of questions).
#[derive(Debug, PartialEq)]
struct Seen {
    listed_waiting: Vec<String>,
    stages_while_waiting: Vec<(String, String)>,
    build_stdout: String,
    answered: Value,
    final_status: String,
    stages: Vec<(String, String, Vec<String>)>,
    totals_stages: u64,
    ship_stdout: String,
    graph_shows_ship_done: bool,
    event_names: Vec<String>,
    streamed_after: Vec<(u64, String)>,
    answer_again: StatusCode,
    unknown_question: StatusCode,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_reads_runs_alike_on_files_memory_and_postgresql() {
    let files = scenario(Fixture::new(2)).await;
    assert_eq!(files.listed_waiting, ["gated-run"]);
    assert_eq!(
        files.stages_while_waiting,
        [
            ("start", "success"),
            ("build", "success"),
            ("review", "running")
        ]
        .map(|(node, status)| (node.to_owned(), status.to_owned()))
    );
    assert_eq!(files.build_stdout, "built\n");
    assert_eq!(
        files.answered,
        json!({"selected_key": "A", "label": "[A] Approve"})
    );
    assert_eq!(files.final_status, "success");
    assert_eq!(
        files
            .stages
            .iter()
            .map(|(node, status, _)| (node.as_str(), status.as_str()))
            .collect::<Vec<_>>(),
        [
            ("start", "success"),
            ("build", "success"),
            ("review", "success"),
            ("ship", "success"),
            ("exit", "success")
        ]
    );
    assert!(
        files.stages[1].2.contains(&"stdout.log".to_owned()),
        "{:?}",
        files.stages
    );
    assert_eq!(files.totals_stages, 5);
    assert_eq!(files.ship_stdout, "shipped\n");
    assert!(files.graph_shows_ship_done);
    assert_eq!(
        files.event_names.first().map(String::as_str),
        Some("WorkflowRunStarted")
    );
    assert_eq!(
        files
            .streamed_after
            .iter()
            .map(|(id, _)| *id)
            .collect::<Vec<_>>(),
        (files.event_names.len() as u64 - 2..=files.event_names.len() as u64).collect::<Vec<_>>()
    );
    assert_eq!(
        files.streamed_after.last().map(|(_, name)| name.as_str()),
        Some("WorkflowRunCompleted")
    );
    assert_eq!(files.answer_again, StatusCode::CONFLICT);
    assert_eq!(files.unknown_question, StatusCode::NOT_FOUND);
    let memory = scenario(Fixture::with_stores(2, |root| {
        Some(Stores {
            runs: std::sync::Arc::new(MemoryRunStore::new()),
            blobs: std::sync::Arc::new(FsBlobStore::new(root)),
        })
    }))
    .await;
    assert_eq!(memory, files, "memory store");
    let Some(database) = TestDatabase::create("the_api_reads_runs_alike_on_postgresql") else {
        return;
    };
    let store = PgStore::connect(&database.url()).await.expect("connects");
    store.migrate().await.expect("migrates");
    let runs = PgRunStore::new(&store).expect("a run store");
    let postgres = scenario(Fixture::with_stores(2, move |root| {
        Some(Stores {
            runs: std::sync::Arc::new(runs),
            blobs: std::sync::Arc::new(FsBlobStore::new(root)),
        })
    }))
    .await;
    assert_eq!(postgres, files, "PostgreSQL store");
    assert_eq!(
        database.query("SELECT count(*) FROM run_stages"),
        files.stages.len().to_string(),
        "the stages are rows of the database"
    );
}

/// Runs the scenario on `fixture`'s server and returns what it saw.
async fn scenario(fixture: Fixture) -> Seen {
    fixture.write("gated.fabro", WORKFLOW);
    let run_id = fixture
        .start(json!({"workflow": "gated.fabro", "run_id": "gated-run"}))
        .await;
    let question = fixture.wait_question(&run_id).await;
    let question_id = question["question_id"].as_str().expect("an id").to_owned();
    // The run's interviewer publishes its question in the store (a moment after it
    // opened it in the handle the API lists).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let published = loop {
        let store = fixture.state.clone();
        let id = RunId::from(run_id.as_str());
        let found = tokio::task::spawn_blocking(move || store.run_store().pending_question(&id))
            .await
            .expect("joined")
            .expect("the store answers");
        if let Some(question) = found {
            break question;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the question is never published"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(published.id(), question_id);

    let waiting = fixture.get("/api/v1/runs?status=waiting").await;
    assert_eq!(waiting.status, StatusCode::OK, "{}", waiting.text());
    let listed_waiting = ids_of(&waiting.json()["runs"]);
    let document = fixture.get(&format!("/api/v1/runs/{run_id}")).await.json();
    assert_eq!(document["status"], "running");
    assert_eq!(
        document["pending_question"]["question_id"],
        question_id.as_str()
    );
    assert_eq!(document["goal"], "ship it");
    let stages_while_waiting = stage_statuses(&fixture, &run_id).await;
    let build_rank = rank_of(&fixture, &run_id, "build").await;
    let build_stdout = fixture
        .get(&format!(
            "/api/v1/runs/{run_id}/stages/{build_rank}/files/stdout.log"
        ))
        .await
        .text();

    let answer = fixture
        .post(
            &format!("/api/v1/runs/{run_id}/questions/{question_id}/answer"),
            json!({"key": "A"}),
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
    let done = fixture.wait_status(&run_id, &["success"]).await;
    let listed = fixture.get("/api/v1/runs?status=success").await.json();
    assert_eq!(ids_of(&listed["runs"]), std::slice::from_ref(&run_id));
    assert_eq!(listed["runs"][0]["goal"], "ship it");
    let stages = fixture
        .get(&format!("/api/v1/runs/{run_id}/stages"))
        .await
        .json();
    let stages: Vec<(String, String, Vec<String>)> = stages["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .map(|stage| {
            (
                text(&stage["node_id"]),
                text(&stage["status"]),
                stage["files"]
                    .as_array()
                    .expect("files")
                    .iter()
                    .map(text)
                    .collect(),
            )
        })
        .collect();
    let ship_rank = rank_of(&fixture, &run_id, "ship").await;
    let ship_stdout = fixture
        .get(&format!(
            "/api/v1/runs/{run_id}/stages/{ship_rank}/files/stdout.log"
        ))
        .await
        .text();
    assert_eq!(
        fixture
            .get(&format!(
                "/api/v1/runs/{run_id}/stages/{ship_rank}/files/manifest.json"
            ))
            .await
            .status,
        StatusCode::NOT_FOUND
    );

    let graph = fixture
        .get(&format!("/api/v1/runs/{run_id}/graph.svg"))
        .await;
    let graph_shows_ship_done = graph.status == StatusCode::OK
        && graph
            .text()
            .contains("class=\"node status-success\" data-visits=\"1\" id=\"node-ship\"");

    let page = fixture
        .get(&format!("/api/v1/runs/{run_id}/events"))
        .await
        .json();
    let events = page["events"].as_array().expect("events").clone();
    let ids: Vec<u64> = events
        .iter()
        .map(|event| event["id"].as_u64().expect("an id"))
        .collect();
    assert_eq!(ids, (1..=ids.len() as u64).collect::<Vec<_>>());
    let event_names: Vec<String> = events.iter().map(|event| text(&event["event"])).collect();
    let after = ids.len() as u64 - 3;
    let paged = fixture
        .get(&format!(
            "/api/v1/runs/{run_id}/events?after={after}&limit=2"
        ))
        .await
        .json();
    assert_eq!(paged["next_after"], after + 2);
    let streamed_after = stream_after(&fixture, &run_id, after).await;

    let answer_again = fixture
        .post(
            &format!("/api/v1/runs/{run_id}/questions/{question_id}/answer"),
            json!({"key": "A"}),
        )
        .await
        .status;
    let unknown_question = fixture
        .post(
            &format!("/api/v1/runs/{run_id}/questions/nope-1-x/answer"),
            json!({"key": "A"}),
        )
        .await
        .status;
    Seen {
        listed_waiting,
        stages_while_waiting,
        build_stdout,
        answered: answer.json(),
        final_status: text(&done["status"]),
        stages,
        totals_stages: done["totals"]["stages"].as_u64().unwrap_or_default(),
        ship_stdout,
        graph_shows_ship_done,
        event_names,
        streamed_after,
        answer_again,
        unknown_question,
    }
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_owned()
}

fn ids_of(runs: &Value) -> Vec<String> {
    runs.as_array()
        .expect("runs")
        .iter()
        .map(|run| text(&run["run_id"]))
        .collect()
}

/// `(node, status)` of each stage.
async fn stage_statuses(fixture: &Fixture, run_id: &str) -> Vec<(String, String)> {
    let stages = fixture
        .get(&format!("/api/v1/runs/{run_id}/stages"))
        .await
        .json();
    stages["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .map(|stage| (text(&stage["node_id"]), text(&stage["status"])))
        .collect()
}

/// The rank of `node`'s stage.
async fn rank_of(fixture: &Fixture, run_id: &str, node: &str) -> u64 {
    let stages = fixture
        .get(&format!("/api/v1/runs/{run_id}/stages"))
        .await
        .json();
    stages["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .find(|stage| stage["node_id"] == node)
        .and_then(|stage| stage["rank"].as_u64())
        .unwrap_or_else(|| panic!("no stage of {node}: {stages}"))
}

/// The events streamed after `Last-Event-ID: after`, to the end of the stream, as
/// `(id, event)`.
async fn stream_after(fixture: &Fixture, run_id: &str, after: u64) -> Vec<(u64, String)> {
    let request = Request::get(format!("/api/v1/runs/{run_id}/events"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("accept", "text/event-stream")
        .header("last-event-id", after.to_string())
        .body(Body::empty())
        .expect("a request");
    let response = fixture
        .app
        .clone()
        .oneshot(request)
        .await
        .expect("a response");
    assert_eq!(response.status(), StatusCode::OK);
    let body = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        response.into_body().collect(),
    )
    .await
    .expect("the stream of a finished run ends")
    .expect("a body")
    .to_bytes();
    String::from_utf8_lossy(&body)
        .split("\n\n")
        .filter_map(|block| {
            let fields: BTreeMap<&str, &str> = block
                .lines()
                .filter_map(|line| line.split_once(": "))
                .collect();
            Some((
                fields.get("id")?.parse().ok()?,
                (*fields.get("event")?).to_owned(),
            ))
        })
        .collect()
}
