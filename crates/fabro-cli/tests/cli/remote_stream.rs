//! The CLI's reading of a server's event stream (issue 28 item 3), against a fake server
//! that frames events the way SSE allows but `fabro server` happens not to: CRLF line
//! ends, comment lines, HTTP chunks that split multi-byte characters, and a stream that
//! ends before the terminal event (the client reconnects with `Last-Event-ID`). A
//! server that drops every connection is retried a bounded number of times, with a
//! growing delay.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fabro_test_support::TestEnv;

use crate::{code, fabro, stderr, stdout};

/// A workflow whose events carry multi-byte characters (the goal, a stage's output).
const WORKFLOW: &str = "digraph unicode {\n  graph [goal=\"Grüße, 日本語 ✓ 🚀\"]\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  say [shape=parallelogram, script=\"echo 日本語\"]\n  start -> say -> exit\n}\n";

/// The head of a request: its path and its `Last-Event-ID`, if any.
fn read_head(stream: &TcpStream) -> (String, Option<u64>) {
    let mut reader = BufReader::new(stream);
    let mut path = String::new();
    let mut last = None;
    let mut line = String::new();
    while reader.read_line(&mut line).unwrap_or(0) > 0 {
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            break;
        }
        if path.is_empty() {
            path = trimmed.split(' ').nth(1).unwrap_or_default().to_owned();
        } else if let Some((name, value)) = trimmed.split_once(':') {
            if name.eq_ignore_ascii_case("last-event-id") {
                last = value.trim().parse().ok();
            }
        }
        line.clear();
    }
    (path, last)
}

fn run_document(mut stream: TcpStream, run_id: &str) {
    let body =
        format!("{{\"run_id\":\"{run_id}\",\"status\":\"running\",\"run_dir\":\"/nowhere\"}}");
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// `events` (id, envelope line) as SSE with CRLF line ends and a comment before each
/// event, sent in HTTP chunks of 5 bytes (splitting multi-byte characters).
fn send_events(mut stream: TcpStream, events: &[(u64, String)]) {
    let _ = stream.set_nodelay(true);
    let mut text = String::from(": stream opened\r\n\r\n");
    for (id, line) in events {
        let name: serde_json::Value = serde_json::from_str(line).expect("an envelope");
        text.push_str(&format!(
            ": keep-alive\r\nevent: {}\r\nid: {id}\r\ndata: {line}\r\n\r\n",
            name["event"].as_str().unwrap_or_default()
        ));
    }
    let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
    for chunk in text.as_bytes().chunks(5) {
        let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
        framed.extend_from_slice(chunk);
        framed.extend_from_slice(b"\r\n");
        if stream.write_all(&framed).is_err() {
            return;
        }
        let _ = stream.flush();
    }
    let _ = stream.write_all(b"0\r\n\r\n");
}

#[test]
fn events_split_inside_characters_with_crlf_framing_and_a_reconnect_read_as_locally() {
    let env = TestEnv::new("remote-stream-framing");
    env.write("w.fabro", WORKFLOW);
    let run = fabro(&env, &["run", "w.fabro", "--run-id", "uni-run"]);
    assert_eq!(code(&run), 0, "{}", stderr(&run));
    let lines: Vec<(u64, String)> =
        fs_err::read_to_string(env.fabro_home().join("scratch/uni-run/events.jsonl"))
            .expect("events")
            .lines()
            .map(|line| {
                let envelope: serde_json::Value = serde_json::from_str(line).expect("an envelope");
                (envelope["id"].as_u64().expect("an id"), line.to_owned())
            })
            .collect();
    assert!(lines.len() > 4, "{lines:?}");
    let half = lines[lines.len() / 2].0;
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    let served = lines;
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (path, last) = read_head(&stream);
            if path.starts_with("/api/v1/runs/uni-run/events") {
                // The first connection ends mid-run, after event `half`; a reconnect
                // with that id gets the rest.
                let events: Vec<(u64, String)> = match last {
                    None => served
                        .iter()
                        .filter(|(id, _)| *id <= half)
                        .cloned()
                        .collect(),
                    Some(last) if last == half => served
                        .iter()
                        .filter(|(id, _)| *id > half)
                        .cloned()
                        .collect(),
                    Some(_) => Vec::new(),
                };
                send_events(stream, &events);
            } else {
                run_document(stream, "uni-run");
            }
        }
    });
    let url = format!("http://{address}");
    for json in [true, false] {
        let mut args = vec!["events", "uni-run", "--follow"];
        if json {
            args.push("--json");
        }
        let local = fabro(&env, &args);
        args.extend(["--server", &url]);
        let remote = fabro(&env, &args);
        assert_eq!(code(&remote), 0, "{}", stderr(&remote));
        assert_eq!(stdout(&remote), stdout(&local), "json {json}");
        assert!(stdout(&remote).contains("日本語"), "{}", stdout(&remote));
    }
}

#[test]
fn a_server_that_drops_every_stream_is_retried_a_few_times_with_a_growing_delay() {
    let env = TestEnv::new("remote-stream-backoff");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    let attempts: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let seen = Arc::clone(&attempts);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (path, _) = read_head(&stream);
            if path.starts_with("/api/v1/runs/gone-run/events") {
                seen.lock().expect("attempts").push(Instant::now());
                // Dropped without an answer: the request fails.
                drop(stream);
            } else {
                run_document(stream, "gone-run");
            }
        }
    });
    let started = Instant::now();
    let output = fabro(
        &env,
        &[
            "events",
            "gone-run",
            "--follow",
            "--server",
            &format!("http://{address}"),
        ],
    );
    let elapsed = started.elapsed();
    let attempts = attempts.lock().expect("attempts").clone();
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(stderr(&output).contains("gone-run"), "{}", stderr(&output));
    assert!(
        (3..=12).contains(&attempts.len()),
        "{} attempts in {elapsed:?}",
        attempts.len()
    );
    // Lower bounds only (a loaded machine makes every gap longer, never shorter): the
    // first retry comes after a short delay, the last after a long one.
    let gaps: Vec<Duration> = attempts.windows(2).map(|pair| pair[1] - pair[0]).collect();
    assert!(
        gaps[0] >= Duration::from_millis(40) && gaps[gaps.len() - 1] >= Duration::from_secs(1),
        "the delays do not grow: {gaps:?}"
    );
    assert!(
        elapsed >= Duration::from_secs(4),
        "gave up too soon: {elapsed:?}"
    );
    assert!(elapsed < Duration::from_secs(30), "{elapsed:?}");
}
