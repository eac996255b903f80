//! Hooks on their own: the envelope on standard input, `hooks.log`, the hook events,
//! blocking gates, node filters, timeouts with `hook_failed`, and HTTP hooks against a
//! loopback server.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::event::kind::StageStarted;
use crate::event::{read_events, EventKind};

/// A run directory with an emitter and a working directory.
struct Fixture {
    dir: tempfile::TempDir,
    emitter: Arc<Emitter>,
    tmpdir: PrivateTmpDir,
    work: PathBuf,
    stage: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let emitter =
            Emitter::open("run1", &dir.path().join("events.jsonl"), 1, Vec::new()).unwrap();
        let (work, stage) = (dir.path().join("work"), dir.path().join("stage"));
        fs_err::create_dir_all(&work).unwrap();
        fs_err::create_dir_all(&stage).unwrap();
        let tmpdir = PrivateTmpDir::new(dir.path().join("tmp"));
        Fixture {
            dir,
            emitter: Arc::new(emitter),
            tmpdir,
            work,
            stage,
        }
    }

    fn hooks(&self, hooks: Vec<HookConfig>) -> Hooks {
        let env = SandboxEnv::new(std::env::vars_os(), &[], &BTreeMap::new());
        Hooks::new(&hooks, &self.emitter, &env, &CancellationToken::new())
    }

    fn place(&self) -> HookPlace<'_> {
        HookPlace {
            work_dir: self.work_dir(),
            tmpdir: &self.tmpdir,
            log_dir: self.stage_dir(),
        }
    }

    fn work_dir(&self) -> &Path {
        &self.work
    }

    fn stage_dir(&self) -> &Path {
        &self.stage
    }

    /// `StageStarted` of `node`, as emitted.
    fn stage_started(&self, node: &str) -> EventEnvelope {
        self.emitter.emit(Event::node(
            node,
            StageStarted {
                attempt: 1,
                branch: None,
                handler: "command".to_owned(),
                isolation: None,
                rank: 2,
                visit: 1,
            },
        ))
    }

    fn events(&self) -> Vec<EventEnvelope> {
        read_events(&fs_err::read_to_string(self.dir.path().join("events.jsonl")).unwrap())
    }

    fn log(&self) -> String {
        fs_err::read_to_string(self.stage_dir().join("hooks.log")).unwrap_or_default()
    }
}

fn command_hook(event: HookEvent, command: &str) -> HookConfig {
    HookConfig {
        event,
        nodes: None,
        kind: HookKind::Command,
        command: Some(command.to_owned()),
        url: None,
        headers: BTreeMap::new(),
        blocking: None,
        timeout_secs: Some(5),
    }
}

fn names(events: &[EventEnvelope]) -> Vec<&str> {
    events.iter().map(EventEnvelope::name).collect()
}

#[tokio::test]
async fn a_command_hook_reads_the_envelope_and_is_recorded() {
    let fixture = Fixture::new();
    let hooks = fixture.hooks(vec![command_hook(
        HookEvent::StageStart,
        "cat > seen.json; echo out; echo err >&2",
    )]);
    let started = fixture.stage_started("build");
    let place = fixture.place();
    assert_eq!(hooks.stage_start(&started, place).await, Gate::Open);
    hooks.finish(HookEvent::RunComplete, &started, place).await;
    let seen: serde_json::Value = serde_json::from_str(
        &fs_err::read_to_string(fixture.work_dir().join("seen.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(seen, serde_json::to_value(&started).unwrap());
    let events = fixture.events();
    assert_eq!(
        names(&events),
        ["StageStarted", "HookStarted", "HookCompleted"]
    );
    let EventKind::HookCompleted(completed) = &events[2].kind else {
        panic!("{events:?}");
    };
    assert_eq!(
        (completed.status.as_str(), completed.exit_code),
        ("success", Some(0))
    );
    assert_eq!(events[2].node_id.as_deref(), Some("build"));
    let log = fixture.log();
    assert!(
        log.contains("stage_start hook 1 (command): cat > seen.json"),
        "{log}"
    );
    assert!(
        log.contains("exit code 0\n--- stdout ---\nout\n--- stderr ---\nerr\n"),
        "{log}"
    );
}

#[tokio::test]
async fn a_failing_blocking_hook_closes_the_gate_with_its_last_stderr_line() {
    let fixture = Fixture::new();
    let mut blocking = command_hook(
        HookEvent::StageStart,
        "echo checking >&2; echo 'deploy window closed' >&2; exit 1",
    );
    blocking.blocking = Some(true);
    blocking.nodes = Some(vec!["deploy".to_owned()]);
    let hooks = fixture.hooks(vec![blocking]);
    let other = fixture.stage_started("build");
    assert_eq!(hooks.stage_start(&other, fixture.place()).await, Gate::Open);
    let deploy = fixture.stage_started("deploy");
    assert_eq!(
        hooks.stage_start(&deploy, fixture.place()).await,
        Gate::Failed("deploy window closed".to_owned())
    );
    // A blocking hook's failure is the stage's, not a warning.
    assert_eq!(
        names(&fixture.events()),
        [
            "StageStarted",
            "StageStarted",
            "HookStarted",
            "HookCompleted"
        ]
    );
}

#[tokio::test]
async fn a_blocking_hook_that_times_out_closes_the_gate() {
    let fixture = Fixture::new();
    let mut blocking = command_hook(HookEvent::StageStart, "exec sleep 30");
    blocking.blocking = Some(true);
    blocking.timeout_secs = Some(1);
    let hooks = fixture.hooks(vec![blocking]);
    let started = fixture.stage_started("deploy");
    assert_eq!(
        hooks.stage_start(&started, fixture.place()).await,
        Gate::Failed("timed out after 1s".to_owned())
    );
    let events = fixture.events();
    let EventKind::HookCompleted(completed) = &events[2].kind else {
        panic!("{events:?}");
    };
    assert!(completed.timed_out);
}

#[tokio::test]
async fn a_hanging_hook_is_stopped_at_its_timeout_and_warns() {
    let fixture = Fixture::new();
    let mut hanging = command_hook(HookEvent::StageComplete, "echo $$ > pid; exec sleep 30");
    hanging.timeout_secs = Some(1);
    let hooks = fixture.hooks(vec![hanging]);
    let started = fixture.stage_started("build");
    let clock = Instant::now();
    hooks.fire(HookEvent::StageComplete, &started, fixture.place());
    hooks
        .finish(HookEvent::RunComplete, &started, fixture.place())
        .await;
    assert!(clock.elapsed() < Duration::from_secs(10));
    let events = fixture.events();
    assert_eq!(
        names(&events),
        ["StageStarted", "HookStarted", "HookCompleted", "Warning"]
    );
    let EventKind::Warning(warning) = &events[3].kind else {
        panic!("{events:?}");
    };
    assert_eq!(warning.code, "hook_failed");
    assert_eq!(warning.event.as_deref(), Some("stage_complete"));
    assert_eq!(warning.reason.as_deref(), Some("timed out after 1s"));
    let pid = fs_err::read_to_string(fixture.work_dir().join("pid")).unwrap();
    assert!(
        !Path::new(&format!("/proc/{}", pid.trim())).exists(),
        "sleep survived its timeout"
    );
}

#[tokio::test]
async fn an_http_hook_posts_the_envelope_with_its_headers() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = Vec::new();
        let mut buffer = [0; 4096];
        loop {
            let read = socket.read(&mut buffer).await.unwrap();
            request.extend_from_slice(&buffer[..read]);
            let text = String::from_utf8_lossy(&request);
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length: usize = head
                    .lines()
                    .find_map(|line| {
                        line.to_ascii_lowercase()
                            .strip_prefix("content-length: ")
                            .map(str::to_owned)
                    })
                    .and_then(|value| value.trim().parse().ok())
                    .unwrap_or(0);
                if body.len() >= length {
                    break;
                }
            }
        }
        socket
            .write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\n\r\nbusy")
            .await
            .unwrap();
        String::from_utf8_lossy(&request).into_owned()
    });
    let fixture = Fixture::new();
    let hooks = fixture.hooks(vec![HookConfig {
        kind: HookKind::Http,
        command: None,
        url: Some(format!("http://{address}/hook")),
        headers: BTreeMap::from([("X-Team".to_owned(), "core".to_owned())]),
        ..command_hook(HookEvent::StageComplete, "")
    }]);
    let started = fixture.stage_started("build");
    hooks.fire(HookEvent::StageComplete, &started, fixture.place());
    hooks
        .finish(HookEvent::RunComplete, &started, fixture.place())
        .await;
    let request = server.await.unwrap();
    assert!(request.starts_with("POST /hook HTTP/1.1\r\n"), "{request}");
    assert!(
        request.to_ascii_lowercase().contains("x-team: core\r\n"),
        "{request}"
    );
    let body = request.split_once("\r\n\r\n").unwrap().1;
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(body).unwrap(),
        serde_json::to_value(&started).unwrap()
    );
    let events = fixture.events();
    let EventKind::HookCompleted(completed) = &events[2].kind else {
        panic!("{events:?}");
    };
    assert_eq!(completed.status_code, Some(503));
    assert_eq!(
        completed.reason.as_deref(),
        Some("HTTP 503 Service Unavailable")
    );
    assert!(
        fixture.log().contains("HTTP 503\n--- response ---\nbusy\n"),
        "{}",
        fixture.log()
    );
}

#[test]
fn no_hooks_means_no_runner() {
    let fixture = Fixture::new();
    assert!(fixture.hooks(Vec::new()).is_empty());
    assert!(!fixture
        .hooks(vec![command_hook(HookEvent::RunStart, "true")])
        .is_empty());
}
