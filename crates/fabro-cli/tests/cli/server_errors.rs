//! What a `fabro server` process tells clients when something fails: a 500 answers a
//! generic message with a request id while the log line has the full error under the
//! same id; a refused request says why without a path or an OS error's text; every
//! response carries `x-request-id`.

use std::time::{Duration, Instant};

use fabro_test_support::{ServerProcess, TestEnv};
use serde_json::{json, Value};

use crate::server::{exchange, TWO_STAGES};
use crate::{code, fabro, stderr, stdout};

/// The `x-request-id` header of a response head.
fn request_id(head: &str) -> String {
    head.lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("x-request-id")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no x-request-id header in {head}"))
}

/// Texts no response may hold: the test's temporary directory and OS error texts.
fn assert_no_leak(what: &str, body: &str, root: &str) {
    for leak in [root, "os error", "Is a directory", "manifest.json"] {
        assert!(!body.contains(leak), "{what} holds {leak:?}: {body}");
    }
}

/// A server line naming `request_id`, waited for (the log is read from a pipe).
fn log_line(server: &ServerProcess, request_id: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines = server.stderr_lines();
        if let Some(line) = lines.iter().find(|line| line.contains(request_id)) {
            return line.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no log line names {request_id}: {lines:#?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_storage_failure_answers_a_request_id_and_the_log_has_the_full_error() {
    let env = TestEnv::new("server-errors");
    env.write("w.fabro", TWO_STAGES);
    let output = fabro(&env, &["run", "w.fabro", "--run-id", "broken"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let output = fabro(&env, &["inspect", "--json", "broken"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let inspected: Value = serde_json::from_str(&stdout(&output)).expect("inspect --json");
    let run_dir = std::path::PathBuf::from(inspected["run_dir"].as_str().expect("run_dir"));
    // The run's manifest cannot be read, even by root: it is a directory now.
    fs_err::remove_file(run_dir.join("manifest.json")).expect("remove the manifest");
    fs_err::create_dir(run_dir.join("manifest.json")).expect("a directory in its place");
    let root = env
        .fabro_home()
        .parent()
        .expect("the test's directory")
        .display()
        .to_string();

    // Without RUST_LOG: errors are logged all the same. On the local store whatever
    // `FABRO_TEST_STORE` says (no `--store`): the failure is a run directory's manifest
    // broken by hand, which only the local store reads.
    let mut command = env.command(env!("CARGO_BIN_EXE_fabro"));
    command
        .args(["server", "--bind", "127.0.0.1:0"])
        .env_remove("RUST_LOG");
    let server = ServerProcess::spawn(command);
    let get = |path: &str| exchange(&server.address, "GET", path, Some(&server.token), None);

    let (status, head, body) = get("/api/v1/runs/broken");
    assert_eq!(status, 500, "{body}");
    let id = request_id(&head);
    assert_eq!(id.len(), 26, "a ULID: {id}");
    let document: Value = serde_json::from_str(&body).expect("a JSON error body");
    assert_eq!(
        document,
        json!({"error": {
            "code": "internal",
            "message": format!("internal server error (request id {id})"),
            "request_id": id,
        }})
    );
    assert!(!body.contains('/'), "{body}");
    assert_no_leak("the 500", &body, &root);
    let line = log_line(&server, &id);
    assert!(line.contains("ERROR"), "{line}");
    assert!(
        line.contains(&run_dir.join("manifest.json").display().to_string())
            && line.contains("Is a directory"),
        "the log line has the full error: {line}"
    );

    // The run's page fails the same way, in HTML.
    let (status, head, body) = get("/runs/broken");
    assert_eq!(status, 500, "{body}");
    let page_id = request_id(&head);
    assert_ne!(page_id, id);
    assert!(
        body.contains(&format!("internal server error (request id {page_id})")),
        "{body}"
    );
    assert_no_leak("the 500 page", &body, &root);
    log_line(&server, &page_id);

    // Refusing to resume it says why, naming neither a path nor the OS error.
    let (status, head, body) = exchange(
        &server.address,
        "POST",
        "/api/v1/runs/broken/resume",
        Some(&server.token),
        Some(&json!({})),
    );
    assert_eq!(status, 409, "{body}");
    request_id(&head);
    assert_no_leak("the 409", &body, &root);
    assert!(body.contains("broken"), "{body}");

    // A work_dir that does not exist is named as the client gave it, without OS text.
    let (status, _, body) = exchange(
        &server.address,
        "POST",
        "/api/v1/runs",
        Some(&server.token),
        Some(&json!({"workflow": "w.fabro", "work_dir": "no/such/dir"})),
    );
    assert_eq!(status, 400, "{body}");
    assert_no_leak("the 400", &body, &root);

    // Every response has a request id, unauthenticated and unknown routes included.
    for (path, token, expected) in [
        ("/api/v1/health", None, 200),
        ("/api/v1/runs", None, 401),
        ("/api/v1/nope", Some(server.token.as_str()), 404),
    ] {
        let (status, head, _) = exchange(&server.address, "GET", path, token, None);
        assert_eq!(status, expected, "{path}");
        assert_eq!(request_id(&head).len(), 26, "{path}");
    }
}
