//! The documents of finished runs are kept between requests, and built again when the
//! run's files change: a change is never served stale. Only the local store tells its
//! changes cheaply (`RunStore::record_stamps`), so only its documents are kept: these
//! tests change run directories by hand, on the local store whatever the tests' store.

use serde_json::{json, Value};

use crate::support::{chain, Fixture};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_run_that_changes_is_not_served_stale() {
    let fixture = Fixture::local(1);
    fixture.write("w.fabro", &chain(2));
    let run_id = fixture.start(json!({"workflow": "w.fabro"})).await;
    let document = fixture.wait_status(&run_id, &["success"]).await;
    assert_eq!(document["totals"]["stages"], 4, "start, s0, s1, exit");
    let uri = format!("/api/v1/runs/{run_id}");
    let first = fixture.get(&uri).await;
    let again = fixture.get(&uri).await;
    assert_eq!(first.body, again.body, "an unchanged run reads the same");
    assert_eq!(again.headers["content-type"], "application/json");
    assert_eq!(again.json()["pending_question"], Value::Null);
    let listed = fixture.get("/api/v1/runs").await.json();
    assert_eq!(listed["runs"][0]["run_id"], run_id.as_str());

    // A new stage, as a resume would write it: its directory, its status file, an event.
    let run_dir = std::path::PathBuf::from(document["run_dir"].as_str().unwrap());
    let stages = run_dir.join("stages");
    let s1 = fs_err::read_dir(&stages)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .find(|name| name.contains("-s1@"))
        .unwrap();
    let extra = s1.replace("-s1@", "-extra@");
    fs_err::create_dir(stages.join(&extra)).unwrap();
    let mut status: Value = serde_json::from_str(
        &fs_err::read_to_string(stages.join(&s1).join("status.json")).unwrap(),
    )
    .unwrap();
    status["node_id"] = json!("extra");
    fs_err::write(
        stages.join(&extra).join("status.json"),
        serde_json::to_string(&status).unwrap(),
    )
    .unwrap();
    let checkpoint_path = run_dir.join("checkpoint.json");
    let mut checkpoint: Value =
        serde_json::from_str(&fs_err::read_to_string(&checkpoint_path).unwrap()).unwrap();
    checkpoint["current_node"] = json!("extra-and-longer");
    fs_err::write(
        &checkpoint_path,
        serde_json::to_string(&checkpoint).unwrap(),
    )
    .unwrap();
    let events = fs_err::read_to_string(run_dir.join("events.jsonl")).unwrap();
    let next_id = events.lines().count() + 1;
    fs_err::write(
        run_dir.join("events.jsonl"),
        format!("{events}{{\"id\":{next_id},\"ts\":\"2026-11-26T00:00:00.000Z\",\"run_id\":\"{run_id}\",\"event\":\"StageCompleted\",\"properties\":{{}}}}\n"),
    )
    .unwrap();

    let changed = fixture.get(&uri).await.json();
    assert_eq!(changed["totals"]["stages"], 5, "{changed}");
    assert!(changed["stages"]
        .as_array()
        .unwrap()
        .iter()
        .any(|stage| stage["node_id"] == "extra"));
    assert_eq!(changed["current_node"], "extra-and-longer");
    let listed = fixture.get("/api/v1/runs").await.json();
    assert_eq!(listed["runs"][0]["current_node"], "extra-and-longer");
}

/// The list keeps a finished run's summary without looking at its files on every
/// request, but a checkpoint rewritten by hand shows within a few seconds (the summary
/// recheck), and a status change in the index at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_summary_follows_its_checkpoint_and_its_index_row() {
    let fixture = Fixture::local(1);
    fixture.write("w.fabro", &chain(2));
    let run_id = fixture.start(json!({"workflow": "w.fabro"})).await;
    let document = fixture.wait_status(&run_id, &["success"]).await;
    let listed = fixture.get("/api/v1/runs").await.json();
    assert_eq!(listed["runs"][0]["status"], "success", "{listed}");
    assert_eq!(listed["runs"][0]["current_node"], document["current_node"]);

    let run_dir = std::path::PathBuf::from(document["run_dir"].as_str().unwrap());
    let checkpoint_path = run_dir.join("checkpoint.json");
    let mut checkpoint: Value =
        serde_json::from_str(&fs_err::read_to_string(&checkpoint_path).unwrap()).unwrap();
    checkpoint["current_node"] = json!("rewritten-by-hand");
    fs_err::write(
        &checkpoint_path,
        serde_json::to_string(&checkpoint).unwrap(),
    )
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let listed = fixture.get("/api/v1/runs").await.json();
        if listed["runs"][0]["current_node"] == "rewritten-by-hand" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{listed}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    // Another process records a new status in the index.
    let root = run_dir
        .parent()
        .and_then(|scratch| scratch.parent())
        .unwrap();
    let index = fabro_engine::local::RunIndex::open(root).unwrap();
    index
        .record_status(
            &run_id,
            fabro_engine::RunStatus::Fail,
            Some("2030-01-01T00:00:00.000Z"),
        )
        .unwrap();
    let listed = fixture.get("/api/v1/runs").await.json();
    assert_eq!(listed["runs"][0]["status"], "fail", "{listed}");
    assert_eq!(
        listed["runs"][0]["finished_at"], "2030-01-01T00:00:00.000Z",
        "{listed}"
    );
    assert_eq!(
        fixture.get(&format!("/api/v1/runs/{run_id}")).await.json()["status"],
        "fail"
    );
}
