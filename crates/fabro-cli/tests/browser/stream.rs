//! Acceptance 4 of issue 19, the live stream: the run page keeps up with a run writing
//! 200 events a second (each event listed within a second of being written), and after
//! the event stream drops (the server restarted on its port, answering 503 meanwhile)
//! the page catches up with every event exactly once.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fabro_test_support::TestEnv;
use serde_json::{json, Value};

use crate::support::{cli_run, git_init, sign_in, Browser, Server, PATIENCE};

/// A run of `nodes` command nodes that sits in its first one long enough for the test
/// to write its events.
fn waiting_workflow(nodes: usize) -> String {
    let mut dot = String::from(
        "digraph waiting {\n  goal=\"Stream events\"\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  work [shape=parallelogram, script=\"sleep 60\"]\n  start -> work\n",
    );
    let mut previous = "work".to_owned();
    for index in 1..nodes {
        dot.push_str(&format!(
            "  step{index} [shape=parallelogram, script=\"true\"]\n  {previous} -> step{index}\n"
        ));
        previous = format!("step{index}");
    }
    dot.push_str(&format!("  {previous} -> exit\n}}\n"));
    dot
}

/// A run of short commands that keeps writing events for a few seconds.
const STEADY: &str = r#"digraph steady {
  goal="Keep going"
  start [shape=Mdiamond]
  one [shape=parallelogram, script="sleep 0.7"]
  two [shape=parallelogram, script="sleep 0.7"]
  three [shape=parallelogram, script="sleep 0.7"]
  four [shape=parallelogram, script="sleep 0.7"]
  five [shape=parallelogram, script="sleep 0.7"]
  six [shape=parallelogram, script="sleep 0.7"]
  seven [shape=parallelogram, script="sleep 0.7"]
  exit [shape=Msquare]
  start -> one -> two -> three -> four -> five -> six -> seven -> exit
}
"#;

/// Records, in the page, when each event's log line appeared (`window.__shown[id]`,
/// milliseconds since the epoch) and every live state the page went through.
const OBSERVE: &str = "window.__shown = {}; window.__states = [document.body.dataset.live];\
    new MutationObserver(function (records) {\
      var now = Date.now();\
      records.forEach(function (record) {\
        record.addedNodes.forEach(function (node) {\
          if (node.dataset && node.dataset.id && !(node.dataset.id in window.__shown)) { window.__shown[node.dataset.id] = now; }\
        });\
      });\
    }).observe(document.getElementById('events'), { childList: true });\
    new MutationObserver(function () { window.__states.push(document.body.dataset.live); })\
      .observe(document.body, { attributes: true, attributeFilter: ['data-live'] });\
    return true;";

/// Nodes of the graph the 200-events-a-second page shows (the page restyles them).
const GRAPH_NODES: usize = 400;

fn epoch_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |elapsed| elapsed.as_secs_f64() * 1000.0)
}

/// The run's id and directory, once the server lists it as running.
fn running_run(server: &Server) -> (String, PathBuf) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let list = server.api("/api/v1/runs");
        if let Some(run) = list["runs"].as_array().and_then(|runs| runs.first()) {
            let run_id = run["run_id"].as_str().unwrap_or_default().to_owned();
            if run["status"] == "running" {
                let document = server.api(&format!("/api/v1/runs/{run_id}"));
                let run_dir = PathBuf::from(document["run_dir"].as_str().unwrap_or_default());
                return (run_id, run_dir);
            }
        }
        assert!(Instant::now() < deadline, "no running run: {list}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn stored_events(run_dir: &std::path::Path) -> Vec<Value> {
    fs_err::read_to_string(run_dir.join("events.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// Appends `count` events after `last` to the run's events.jsonl at `per_second`, as
/// one writer would; returns when each was written (ms since the epoch) by id.
fn write_events(
    run_dir: &std::path::Path,
    last: &Value,
    count: u64,
    per_second: u64,
) -> Vec<(u64, f64)> {
    let mut file = fs_err::OpenOptions::new()
        .append(true)
        .open(run_dir.join("events.jsonl"))
        .expect("events.jsonl opens for appending");
    let first_id = last["id"].as_u64().unwrap_or(0) + 1;
    let kinds = [
        ("StageStarted", json!({"visit": 1})),
        ("Agent.ToolCallStarted", json!({"tool": "read_file"})),
        ("Agent.ToolCallCompleted", json!({"tool": "read_file"})),
        ("Agent.AssistantMessage", json!({"text": "reading"})),
        ("StageCompleted", json!({"status": "success", "visit": 1})),
    ];
    let started = Instant::now();
    let mut written = Vec::new();
    for offset in 0..count {
        let due = started + Duration::from_secs_f64(offset as f64 / per_second as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let (event, properties) = &kinds[usize::try_from(offset).unwrap_or(0) % kinds.len()];
        let mut envelope = last.clone();
        envelope["id"] = json!(first_id + offset);
        envelope["event"] = json!(event);
        // Stage events walk the graph, as a fast run of many stages would.
        let step = 1 + (offset / 5) % (GRAPH_NODES as u64 - 1);
        envelope["node_id"] = json!(format!("step{step}"));
        envelope["properties"] = properties.clone();
        let line = format!("{envelope}\n");
        file.write_all(line.as_bytes())
            .expect("an event is appended");
        written.push((first_id + offset, epoch_ms()));
    }
    written
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_page_keeps_up_with_two_hundred_events_a_second() {
    let test = "the_run_page_keeps_up_with_two_hundred_events_a_second";
    let Some(browser) = Browser::start(test).await else {
        return;
    };
    let env = TestEnv::new("ui-stream");
    env.write("waiting.fabro", &waiting_workflow(GRAPH_NODES));
    git_init(&env);
    // On the local store whatever `FABRO_TEST_STORE` says: the test appends events to
    // the run's `events.jsonl` by hand, as another writer of the home would.
    let server = Server::start_local_at(&env, "127.0.0.1:0", &[]);
    sign_in(&browser, &server).await;
    let mut child = cli_run(&env, &server, &["waiting.fabro"], &[]);
    let (run_id, run_dir) = running_run(&server);
    // The command `work` is running: nothing else writes to the file for a minute.
    let deadline = Instant::now() + PATIENCE;
    while !stored_events(&run_dir)
        .iter()
        .any(|event| event["event"] == "CommandStarted")
    {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    browser.goto(&server.url(&format!("/runs/{run_id}"))).await;
    browser
        .wait_js(
            "the page lists the stored events",
            "return document.body.dataset.live === 'connected' && !!document.querySelector('#events li[data-event=CommandStarted]');",
        )
        .await;
    browser.eval(OBSERVE).await;
    let last = stored_events(&run_dir)
        .pop()
        .expect("the run has stored events");
    let directory = run_dir.clone();
    let written = tokio::task::spawn_blocking(move || write_events(&directory, &last, 600, 200))
        .await
        .expect("the writer finishes");
    let (last_id, last_written) = *written.last().expect("events were written");
    browser
        .wait_js(
            "the last event is listed",
            &format!("return !!window.__shown['{last_id}'];"),
        )
        .await;
    let shown = browser.eval("return window.__shown;").await;
    let _ = child.kill();
    let _ = child.wait();
    let mut delays = Vec::new();
    for (id, at) in &written {
        let listed = shown[id.to_string()].as_f64();
        assert!(listed.is_some(), "event {id} was never listed");
        delays.push(listed.unwrap_or(f64::MAX) - at);
    }
    let last_delay = shown[last_id.to_string()].as_f64().unwrap_or(f64::MAX) - last_written;
    let slowest = delays.iter().copied().fold(0.0, f64::max);
    let span = written.last().map_or(0.0, |(_, at)| at - written[0].1);
    eprintln!(
        "{} events written in {span:.0} ms; the last listed {last_delay:.0} ms after it was written, the slowest {slowest:.0} ms",
        written.len()
    );
    assert!(
        last_delay < 1000.0,
        "the last event took {last_delay:.0} ms"
    );
    assert!(slowest < 1000.0, "an event took {slowest:.0} ms");
    browser.close().await;
}

/// Answers every request on `address` with 503 until one asked for an event stream
/// (`true`), or for at most 15 s (`false`).
fn refuse_until_a_stream_is_refused(address: &str) -> bool {
    let listener = TcpListener::bind(address).expect("the server's port is free again");
    listener
        .set_nonblocking(true)
        .expect("a non-blocking listener");
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        let Ok((mut stream, _)) = listener.accept() else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let mut head = Vec::new();
        let mut byte = [0_u8; 1];
        while !head.ends_with(b"\r\n\r\n") && matches!(stream.read(&mut byte), Ok(1)) {
            head.push(byte[0]);
        }
        let _ = stream.write_all(
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
        let request = String::from_utf8_lossy(&head);
        if request.starts_with("GET /api/v1/runs/") && request.contains("/events") {
            return true;
        }
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_stream_drops_the_run_page_catches_up_without_gaps_or_duplicates() {
    let test = "after_the_stream_drops_the_run_page_catches_up_without_gaps_or_duplicates";
    let Some(browser) = Browser::start(test).await else {
        return;
    };
    let env = TestEnv::new("ui-reconnect");
    env.write("steady.fabro", STEADY);
    git_init(&env);
    // On the local store whatever `FABRO_TEST_STORE` says: the run must go on while no
    // server runs, so a CLI process executes it in the home the server reads.
    let server = Server::start_local_at(&env, "127.0.0.1:0", &[]);
    let address = server.address.clone();
    sign_in(&browser, &server).await;
    let mut child = cli_run(&env, &server, &["steady.fabro"], &[]);
    let (run_id, run_dir) = running_run(&server);
    browser.goto(&server.url(&format!("/runs/{run_id}"))).await;
    browser
        .wait_js(
            "the page is connected",
            "return document.body.dataset.live === 'connected' && !!document.querySelector('#events li[data-event=StageStarted]');",
        )
        .await;
    browser.eval(OBSERVE).await;
    // The server goes away mid-run (its streams end); while it restarts, something on
    // its port answers 503 (as a proxy in front of it would), so the browser gives the
    // stream up; then the server is back on the same port. The run, a CLI process,
    // keeps writing events all along.
    drop(server);
    let seen_before = browser
        .eval("return document.querySelectorAll('#events li').length;")
        .await
        .as_u64()
        .unwrap_or(0);
    let refused = {
        let address = address.clone();
        tokio::task::spawn_blocking(move || refuse_until_a_stream_is_refused(&address))
    }
    .await
    .expect("the stand-in ends");
    assert!(
        refused,
        "the browser never asked the stand-in for the stream"
    );
    let server = Server::start_local_at(&env, &address, &[]);
    assert!(child.wait().expect("fabro run ends").success());
    let stored = stored_events(&run_dir);
    let expected: Vec<u64> = stored
        .iter()
        .filter_map(|event| event["id"].as_u64())
        .collect();
    assert!(
        expected.len() as u64 > seen_before,
        "the run wrote nothing while the server was away"
    );
    browser
        .wait_js(
            "the page caught up and closed the stream",
            &format!(
                "return document.body.dataset.live === 'closed' && document.body.dataset.lastEvent === '{}';",
                expected.last().copied().unwrap_or(0)
            ),
        )
        .await;
    let listed: Vec<u64> = browser
        .eval("return Array.prototype.map.call(document.querySelectorAll('#events li'), function (li) { return Number(li.dataset.id); });")
        .await
        .as_array()
        .map(|ids| ids.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    assert_eq!(listed, expected, "the page's event log is the stored one");
    let states = browser.eval("return window.__states;").await;
    assert!(
        states
            .as_array()
            .is_some_and(|states| states.iter().any(|state| state == "reconnecting")),
        "the page never saw the stream drop: {states}"
    );
    drop(server);
    browser.close().await;
}
