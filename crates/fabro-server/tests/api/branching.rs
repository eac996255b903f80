//! Forking and rewinding over HTTP (SPEC 20.2, 20.3), and the stage page's "Fork from
//! here" form.

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::{chain, sleepy, Auth, Fixture, TOKEN};

/// The node ids of the run's stages, by rank.
async fn stage_nodes(fixture: &Fixture, run_id: &str) -> Vec<(u64, String)> {
    let stages = fixture
        .get(&format!("/api/v1/runs/{run_id}/stages"))
        .await
        .json();
    stages["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .map(|stage| {
            (
                stage["rank"].as_u64().expect("rank"),
                stage["node_id"].as_str().expect("node").to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_forked_over_http_and_from_the_stage_page() {
    let fixture = Fixture::new(2);
    let source = fixture
        .start(json!({"source": chain(3), "run_id": "fork-source"}))
        .await;
    fixture.wait_status(&source, &["success"]).await;
    let both = fixture
        .post(
            &format!("/api/v1/runs/{source}/fork"),
            json!({"at": "s1", "at_rank": 3}),
        )
        .await;
    assert_eq!(both.status, StatusCode::BAD_REQUEST, "{}", both.text());
    let unknown = fixture
        .post(
            &format!("/api/v1/runs/{source}/fork"),
            json!({"at": "nowhere"}),
        )
        .await;
    assert_eq!(
        unknown.status,
        StatusCode::BAD_REQUEST,
        "{}",
        unknown.text()
    );
    // s0 is rank 2: the fork runs s1, s2 and exit.
    let reply = fixture
        .post(
            &format!("/api/v1/runs/{source}/fork"),
            json!({"at": "s0", "run_id": "forked"}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text());
    assert_eq!(reply.json()["run_id"], "forked");
    let document = fixture.wait_status("forked", &["success"]).await;
    assert_eq!(
        document["forked_from"],
        json!({"run_id": "fork-source", "rank": 2})
    );
    assert_eq!(document["parent_run_id"], "fork-source");
    assert_eq!(
        stage_nodes(&fixture, "forked").await,
        [
            (3, "s1".to_owned()),
            (4, "s2".to_owned()),
            (5, "exit".to_owned())
        ]
    );
    let again = fixture
        .post(
            &format!("/api/v1/runs/{source}/fork"),
            json!({"run_id": "forked"}),
        )
        .await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.text());
    // The stage page offers the fork; its form is refused across origins and forks at
    // the stage with the same origin.
    let page = fixture
        .send(
            Method::GET,
            &format!("/runs/{source}/stages/4"),
            None,
            Auth::Cookie(TOKEN),
        )
        .await;
    assert!(
        page.text()
            .contains(&format!("action=\"/runs/{source}/stages/4/fork\"")),
        "{}",
        page.text()
    );
    let uri = format!("/runs/{source}/stages/4/fork");
    let cross = fixture
        .send(Method::POST, &uri, None, Auth::Cookie(TOKEN))
        .await;
    assert_eq!(cross.status, StatusCode::FORBIDDEN);
    let posted = fixture
        .send_with(
            Method::POST,
            &uri,
            None,
            Auth::Cookie(TOKEN),
            &[("host", "example.test"), ("origin", "http://example.test")],
        )
        .await;
    assert_eq!(posted.status, StatusCode::SEE_OTHER, "{}", posted.text());
    let location = posted.headers["location"].to_str().expect("location");
    let new_run = location.strip_prefix("/runs/").expect("a run page");
    let document = fixture.wait_status(new_run, &["success"]).await;
    assert_eq!(document["forked_from"]["rank"], 4);
    assert_eq!(
        stage_nodes(&fixture, new_run).await,
        [(5, "exit".to_owned())]
    );
    // The source is as it was.
    let source_document = fixture.get(&format!("/api/v1/runs/{source}")).await.json();
    assert_eq!(source_document["status"], "success");
    assert_eq!(stage_nodes(&fixture, &source).await.len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_run_is_rewound_over_http_and_a_running_one_is_refused() {
    let fixture = Fixture::new(2);
    let run_id = fixture
        .start(json!({"source": chain(3), "run_id": "rewind-me"}))
        .await;
    fixture.wait_status(&run_id, &["success"]).await;
    let uri = format!("/api/v1/runs/{run_id}/rewind");
    let neither = fixture.post(&uri, json!({})).await;
    assert_eq!(
        neither.status,
        StatusCode::BAD_REQUEST,
        "{}",
        neither.text()
    );
    let reply = fixture.post(&uri, json!({"to_rank": 2})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(
        reply.json(),
        json!({"run_id": "rewind-me", "k": 1, "to_rank": 2, "node_id": "s0", "visit": 1})
    );
    let document: Value = fixture.get(&format!("/api/v1/runs/{run_id}")).await.json();
    assert_eq!(document["status"], "interrupted", "{document}");
    assert_eq!(document["rewound"][0]["k"], 1);
    assert_eq!(
        document["rewound"][0]["stages"].as_array().map(Vec::len),
        Some(3)
    );
    assert_eq!(stage_nodes(&fixture, &run_id).await.len(), 2);
    let resume = fixture
        .post(&format!("/api/v1/runs/{run_id}/resume"), json!({}))
        .await;
    assert_eq!(resume.status, StatusCode::ACCEPTED, "{}", resume.text());
    fixture.wait_status(&run_id, &["success"]).await;
    assert_eq!(stage_nodes(&fixture, &run_id).await.len(), 5);
    let second = fixture.post(&uri, json!({"to": "s1"})).await;
    assert_eq!(second.json()["k"], 2, "{}", second.text());

    fixture.write("sleepy.fabro", &sleepy(30, "napped"));
    let sleeping = fixture.start(json!({"workflow": "sleepy.fabro"})).await;
    fixture.wait_status(&sleeping, &["running"]).await;
    let refused = fixture
        .post(
            &format!("/api/v1/runs/{sleeping}/rewind"),
            json!({"to": "start"}),
        )
        .await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.text());
    fixture
        .post(&format!("/api/v1/runs/{sleeping}/cancel"), json!({}))
        .await;
    fixture.wait_status(&sleeping, &["canceled"]).await;
}
