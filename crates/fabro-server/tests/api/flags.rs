//! The flags of `fabro run` and `fabro resume` as request fields (issue 28 item 2): the
//! budget limits, `no_in_place` and a client's `config` text reach the run's
//! configuration as the flags do locally; answers may repeat per node; a limit that is
//! none, a broken `config` and unknown fields are 400.

use axum::http::StatusCode;
use serde_json::json;

use crate::support::{chain, Fixture, GATE};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_fields_and_config_text_reach_the_runs_configuration() {
    let fixture = Fixture::new(2);
    fixture.write("w.fabro", &chain(5));
    // The client's file need not exist on the server: its text is the layer.
    fixture
        .start(json!({
            "workflow": "w.fabro", "run_id": "budget-run",
            "config": {"path": "client-only.toml", "text": "[run]\nmax_stages = 4\nmax_tokens = 99\n"},
            "max_stages": 3, "max_cost_usd": 2.5, "max_duration": "1h", "no_in_place": true,
        }))
        .await;
    let document = fixture.wait_status("budget-run", &["canceled"]).await;
    assert_eq!(document["totals"]["stages"], 3, "{document}");
    let config = fixture.stored_config("budget-run").await;
    assert_eq!(config["run"]["max_stages"], 3, "{config}");
    assert_eq!(config["run"]["max_tokens"], 99, "{config}");
    assert_eq!(config["run"]["max_cost_usd"], 2.5, "{config}");
    assert_eq!(config["run"]["max_duration"], "1h", "{config}");
    assert_eq!(config["run"]["dirty_worktree"], "refuse", "{config}");
    // Resume with more room, and a model flag.
    let reply = fixture
        .post(
            "/api/v1/runs/budget-run/resume",
            json!({"max_stages": 0, "provider": "simulated", "model": "haiku"}),
        )
        .await;
    assert_eq!(reply.status.as_u16(), 202, "{}", reply.text());
    // Unlimited now: the run goes on to its exit.
    let document = fixture.wait_status("budget-run", &["success"]).await;
    assert_eq!(document["totals"]["stages"], 7, "{document}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_repeat_per_node_and_bad_fields_are_400() {
    let fixture = Fixture::new(2);
    fixture.write("gate.fabro", GATE);
    fixture
        .start(json!({"workflow": "gate.fabro", "run_id": "gate-run", "answers": {"review": ["R", "A"]}}))
        .await;
    fixture.wait_status("gate-run", &["success"]).await;
    assert!(fixture.work().join("revised").exists());
    for body in [
        json!({"workflow": "gate.fabro", "max_cost_usd": -1.0}),
        json!({"workflow": "gate.fabro", "max_duration": "soon"}),
        json!({"workflow": "gate.fabro", "config": {"path": "bad.toml", "text": "[run\n"}}),
        json!({"workflow": "gate.fabro", "config": {"path": "bad.toml", "text": "[run]\nmax_stagez = 1\n"}}),
        json!({"workflow": "gate.fabro", "detach": true}),
        json!({"workflow": "gate.fabro", "provider": "nope"}),
    ] {
        let reply = fixture.post("/api/v1/runs", body.clone()).await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{body}: {}",
            reply.text()
        );
    }
    let broken = fixture
        .post(
            "/api/v1/runs",
            json!({"workflow": "gate.fabro", "config": {"path": "bad.toml", "text": "[run\n"}}),
        )
        .await;
    assert!(
        broken.json()["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("bad.toml")),
        "{}",
        broken.text()
    );
    for body in [
        json!({"max_duration": "soon"}),
        json!({"provider": "nope"}),
        json!({"max_stages": 1, "detach": true}),
    ] {
        let reply = fixture
            .post("/api/v1/runs/gate-run/resume", body.clone())
            .await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{body}: {}",
            reply.text()
        );
    }
}
