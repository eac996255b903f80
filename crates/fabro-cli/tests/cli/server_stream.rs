//! The event stream of a real `fabro server` under forced reconnects (SPEC 14.4 1,
//! issue 18 acceptance 1): an SSE client that drops its connection every few events,
//! often in the middle of one, and reconnects with `Last-Event-ID` during a 300-stage
//! run receives exactly the run's stored events (its `events.jsonl` on the local store,
//! its rows on PostgreSQL): no gap, no duplicate, byte for byte.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use fabro_test_support::TestEnv;
use serde_json::json;

use crate::server::Server;

/// One received event: id, event name, data.
pub(crate) type SseEvent = (u64, String, String);

/// `n` command stages in a chain; the one in the middle waits until the file `gate`
/// exists, so that the run stays live for as long as a test needs, however fast the
/// store is.
fn chain(n: usize, gate: &std::path::Path) -> String {
    let mut text = String::from("digraph chain {\n  graph [goal=\"count\"]\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n");
    for index in 0..n {
        let script = if index == n / 2 {
            format!("while [ ! -e '{}' ]; do sleep 0.02; done", gate.display())
        } else {
            "true".to_owned()
        };
        text.push_str(&format!(
            "  s{index} [shape=parallelogram, script=\"{script}\"]\n"
        ));
    }
    text.push_str("  start");
    for index in 0..n {
        text.push_str(&format!(" -> s{index}"));
    }
    text.push_str(" -> exit\n}\n");
    text
}

/// How long [`connect`] waits for data before it fails.
const IDLE: Duration = Duration::from_secs(60);

/// One connection to the stream after `last`, dropped once `keep` events have arrived
/// (whatever part of the next one was already read is thrown away, as a client that
/// loses its connection would). HTTP/1.0, so the body is the bare SSE text. Returns the
/// events and whether the server ended the stream.
pub(crate) fn connect(
    server: &Server,
    run_id: &str,
    last: Option<u64>,
    keep: usize,
) -> (Vec<SseEvent>, bool) {
    connect_until(server, run_id, last, keep, None)
}

/// [`connect`], given up (the events so far, not ended) at `deadline`, so that a test
/// that failed elsewhere does not wait for a stream kept open by keep-alives; without
/// one, a minute without data fails the test.
pub(crate) fn connect_until(
    server: &Server,
    run_id: &str,
    last: Option<u64>,
    keep: usize,
    deadline: Option<Instant>,
) -> (Vec<SseEvent>, bool) {
    let mut stream = TcpStream::connect(&server.address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(1)))
        .expect("timeout");
    let mut head = format!(
        "GET /api/v1/runs/{run_id}/events HTTP/1.0\r\nHost: {}\r\nAuthorization: Bearer {}\r\nAccept: text/event-stream\r\n",
        server.address, server.token
    );
    if let Some(last) = last {
        head.push_str(&format!("Last-Event-ID: {last}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).expect("write");
    let mut text = String::new();
    let mut body_at = None;
    let mut events = Vec::new();
    let mut chunk = [0_u8; 4096];
    let mut quiet_since = Instant::now();
    loop {
        let read = match stream.read(&mut chunk) {
            Ok(read) => read,
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                match deadline {
                    Some(deadline) if Instant::now() >= deadline => return (events, false),
                    Some(_) => {}
                    None => assert!(quiet_since.elapsed() < IDLE, "read: no data for {IDLE:?}"),
                }
                continue;
            }
            Err(error) => panic!("read: {error}"),
        };
        quiet_since = Instant::now();
        if read == 0 {
            return (events, true);
        }
        text.push_str(std::str::from_utf8(&chunk[..read]).expect("UTF-8"));
        if body_at.is_none() {
            let Some(end) = text.find("\r\n\r\n") else {
                continue;
            };
            assert!(text.starts_with("HTTP/1.0 200"), "{text}");
            body_at = Some(end + 4);
            text.drain(..end + 4);
        }
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            let field = |name: &str| {
                block
                    .lines()
                    .find_map(|line| line.strip_prefix(name))
                    .map(str::to_owned)
            };
            if let (Some(id), Some(event), Some(data)) =
                (field("id: "), field("event: "), field("data: "))
            {
                events.push((id.parse().expect("a numeric id"), event, data));
                if events.len() == keep {
                    return (events, false);
                }
            }
        }
    }
}

/// Whether the run ended: its status (read from its final checkpoint, which is stored
/// before its terminal event) is no longer `running`.
fn finished(server: &Server, run_id: &str) -> bool {
    let (status, body) = server.request("GET", &format!("/api/v1/runs/{run_id}"), None);
    let document: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    status == 200 && document["status"] != "running"
}

#[test]
fn fifty_forced_reconnects_during_a_300_stage_run_miss_and_repeat_no_event() {
    let env = TestEnv::new("server-stream");
    let gate = env.work_dir().join("reconnected");
    env.write("chain.fabro", &chain(300, &gate));
    let mut server = Server::start(&env, &[]);
    let (status, body) = server.request(
        "POST",
        "/api/v1/runs",
        Some(&json!({"workflow": "chain.fabro", "run_id": "long-run"})),
    );
    assert_eq!(status, 201, "{body}");
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut received: Vec<SseEvent> = Vec::new();
    let (mut reconnects, mut live_reconnects) = (0_usize, 0_usize);
    loop {
        let last = received.last().map(|event| event.0);
        // 1 to 9 events per connection.
        let keep = 1 + (reconnects * 7) % 9;
        let (events, ended) = connect(&server, "long-run", last, keep);
        received.extend(events);
        if ended {
            break;
        }
        reconnects += 1;
        if !finished(&server, "long-run") {
            live_reconnects += 1;
            if live_reconnects == 50 {
                // Enough while the run is live: let it go on to its end.
                fs_err::write(&gate, "").expect("the gate file");
            }
        }
        assert!(Instant::now() < deadline, "the stream never ended");
    }
    assert!(
        live_reconnects >= 50,
        "only {live_reconnects} of {reconnects} reconnects happened while the run was live"
    );
    server.wait_status("long-run", &["success"]);
    let lines = server.stored_events("long-run");
    if server.store().is_home() {
        let file = fs_err::read_to_string(env.fabro_home().join("scratch/long-run/events.jsonl"))
            .expect("events.jsonl");
        assert_eq!(lines, file.lines().collect::<Vec<_>>());
    }
    assert!(lines.len() > 600, "{} events", lines.len());
    let ids: Vec<u64> = received.iter().map(|event| event.0).collect();
    assert_eq!(
        ids,
        (1..=lines.len() as u64).collect::<Vec<_>>(),
        "a gap or a duplicate"
    );
    for (line, (id, event, data)) in lines.iter().zip(&received) {
        assert_eq!(line, data, "event {id}");
        assert!(
            line.contains(&format!("\"event\":\"{event}\"")),
            "event {id}"
        );
    }
    server.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(server.wait_exit(Duration::from_secs(10)), Some(0));
}
