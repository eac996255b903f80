//! Server-Sent Events (SPEC 14.3, 14.4): a client that disconnects every few events and
//! reconnects with `Last-Event-ID` gets every event exactly once, stored then live.

use std::collections::BTreeMap;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::json;
use tower::ServiceExt;

use crate::support::{chain, Fixture, TOKEN};

/// One parsed SSE event: id, event name, data.
type SseEvent = (u64, String, String);

/// Opens the stream after `last` and reads until `count` events or the stream's end.
/// Returns the events and whether the stream ended.
async fn read_some(
    fixture: &Fixture,
    run_id: &str,
    last: Option<u64>,
    count: usize,
) -> (Vec<SseEvent>, bool) {
    let mut request = Request::get(format!("/api/v1/runs/{run_id}/events"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("accept", "text/event-stream");
    if let Some(last) = last {
        request = request.header("last-event-id", last.to_string());
    }
    let response = fixture
        .app
        .clone()
        .oneshot(request.body(Body::empty()).expect("SSE reading"))
        .await
        .expect("SSE reading");
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers()["content-type"]
        .to_str()
        .expect("SSE reading")
        .starts_with("text/event-stream"));
    let mut body = response.into_body();
    let mut text = String::new();
    let mut events = Vec::new();
    while events.len() < count {
        let Some(frame) = body.frame().await else {
            return (events, true);
        };
        if let Ok(data) = frame.expect("SSE reading").into_data() {
            text.push_str(std::str::from_utf8(&data).expect("SSE reading"));
        }
        // At most `count` events a connection, however many a frame brings: the rest are
        // sent again after the last one taken.
        while events.len() < count {
            let Some(end) = text.find("\n\n") else {
                break;
            };
            let block: String = text.drain(..end + 2).collect();
            let mut fields: BTreeMap<&str, String> = BTreeMap::new();
            for line in block.lines() {
                if let Some((name, value)) = line.split_once(": ") {
                    fields.insert(name, value.to_owned());
                }
            }
            if let Some(id) = fields.get("id") {
                events.push((
                    id.parse().expect("SSE reading"),
                    fields["event"].clone(),
                    fields["data"].clone(),
                ));
            }
        }
    }
    // Dropping the body disconnects.
    (events, false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnecting_with_last_event_id_misses_nothing_and_repeats_nothing() {
    let fixture = Fixture::new(1);
    fixture.write("w.fabro", &chain(40));
    let run_id = fixture.start(json!({"workflow": "w.fabro"})).await;
    let mut seen: Vec<SseEvent> = Vec::new();
    let mut reconnects = 0;
    loop {
        let last = seen.last().map(|event| event.0);
        let (events, ended) = read_some(&fixture, &run_id, last, 7).await;
        seen.extend(events);
        if ended {
            break;
        }
        reconnects += 1;
        assert!(reconnects < 1000, "the stream never ended");
    }
    assert!(reconnects >= 20, "only {reconnects} reconnects");
    let ids: Vec<u64> = seen.iter().map(|event| event.0).collect();
    let expected: Vec<u64> = (1..=ids.len() as u64).collect();
    assert_eq!(ids, expected, "a gap or a duplicate");
    assert_eq!(seen.last().unwrap().1, "WorkflowRunCompleted");
    // Each data line is the stored envelope, byte for byte.
    fixture.wait_status(&run_id, &["success"]).await;
    let lines = fixture.stored_events(&run_id).await;
    assert_eq!(lines.len(), seen.len());
    for (line, event) in lines.iter().zip(&seen) {
        assert_eq!(*line, event.2);
    }
    // A finished run's stream ends at once; after the last id it sends nothing.
    let (replay, ended) = read_some(&fixture, &run_id, Some(ids.len() as u64 - 2), 100).await;
    assert!(ended);
    assert_eq!(replay.len(), 2);
    let (nothing, ended) = read_some(&fixture, &run_id, Some(ids.len() as u64), 100).await;
    assert!(ended && nothing.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_run_under_the_same_root_is_followed_through_events_jsonl() {
    let fixture = Fixture::local(1);
    // A run that another process executes: its events appear in the file only.
    let run_id = fixture.start(json!({"source": chain(2)})).await;
    let document = fixture.wait_status(&run_id, &["success"]).await;
    let run_dir = std::path::PathBuf::from(document["run_dir"].as_str().unwrap());
    let events = fs_err::read_to_string(run_dir.join("events.jsonl")).unwrap();
    let lines: Vec<&str> = events.lines().collect();
    // Pretend the run is still being written: keep half, hold the run lock from here.
    fs_err::write(run_dir.join("events.jsonl"), lines[..4].join("\n") + "\n").unwrap();
    let lock = fabro_engine::local::RunLock::acquire(&run_dir).unwrap();
    let follower = {
        let app = fixture.app.clone();
        let run_id = run_id.clone();
        tokio::spawn(async move {
            let request = Request::get(format!("/api/v1/runs/{run_id}/events"))
                .header("authorization", format!("Bearer {TOKEN}"))
                .header("accept", "text/event-stream")
                .body(Body::empty())
                .unwrap();
            let response = app.oneshot(request).await.unwrap();
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            String::from_utf8(bytes.to_vec()).unwrap()
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let mut file = fs_err::OpenOptions::new()
        .append(true)
        .open(run_dir.join("events.jsonl"))
        .unwrap();
    for line in &lines[4..] {
        std::io::Write::write_all(&mut file, format!("{line}\n").as_bytes()).unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    drop(lock);
    let text = tokio::time::timeout(std::time::Duration::from_secs(10), follower)
        .await
        .unwrap()
        .unwrap();
    let ids: Vec<u64> = text
        .lines()
        .filter_map(|line| line.strip_prefix("id: "))
        .map(|id| id.parse().unwrap())
        .collect();
    assert_eq!(ids, (1..=lines.len() as u64).collect::<Vec<_>>());
}
