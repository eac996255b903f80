//! In-process tests of the API routes (SPEC 14.3): statuses, auth, runs, gates, cancel
//! and resume, the queue, limits and path traversal.

mod support;

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use support::{chain, sleepy, Auth, Fixture, GATE, TOKEN};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_token_cookie_and_public_routes() {
    let fixture = Fixture::new(2);
    let health = fixture
        .send(Method::GET, "/api/v1/health", None, Auth::None)
        .await;
    assert_eq!(health.status, StatusCode::OK);
    assert_eq!(health.json()["status"], "ok");
    assert_eq!(
        health.headers["content-security-policy"],
        "default-src 'self'"
    );
    assert_eq!(health.headers["x-content-type-options"], "nosniff");
    // Decision 64: same-origin, so the UI's own form posts carry their `Origin`; the
    // pages need no `<meta name="referrer">` of their own.
    assert_eq!(health.headers["referrer-policy"], "same-origin");
    assert_eq!(health.headers["x-request-id"].len(), 26);
    let page = fixture.send(Method::GET, "/", None, Auth::None).await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(page.headers["referrer-policy"], "same-origin");
    assert!(
        !page.text().contains("name=\"referrer\""),
        "{}",
        page.text()
    );
    let openapi = fixture
        .send(Method::GET, "/api/v1/openapi.json", None, Auth::None)
        .await;
    assert_eq!(openapi.status, StatusCode::OK);
    assert!(openapi.json()["openapi"]
        .as_str()
        .unwrap()
        .starts_with("3.1"));
    for auth in [
        Auth::None,
        Auth::Bearer("wrong"),
        Auth::Cookie("wrong"),
        Auth::Bearer(""),
    ] {
        let reply = fixture.send(Method::GET, "/api/v1/runs", None, auth).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
        assert_eq!(reply.json()["error"]["code"], "unauthorized");
        assert!(!reply.text().contains(TOKEN));
    }
    let cookie = fixture
        .send(Method::GET, "/api/v1/runs", None, Auth::Cookie(TOKEN))
        .await;
    assert_eq!(cookie.status, StatusCode::OK, "{}", cookie.text());
    // A state change with the cookie needs the same origin.
    let cross = fixture
        .send(
            Method::POST,
            "/api/v1/runs/nope/cancel",
            None,
            Auth::Cookie(TOKEN),
        )
        .await;
    assert_eq!(cross.status, StatusCode::FORBIDDEN);
    let same = fixture
        .send_with(
            Method::POST,
            "/api/v1/runs/nope/cancel",
            None,
            Auth::Cookie(TOKEN),
            &[("host", "example.test"), ("origin", "http://example.test")],
        )
        .await;
    assert_eq!(same.status, StatusCode::NOT_FOUND);
    // The browser login.
    let login = fixture
        .send(Method::GET, &format!("/?token={TOKEN}"), None, Auth::None)
        .await;
    assert_eq!(login.status, StatusCode::SEE_OTHER);
    assert_eq!(login.headers["location"], "/");
    let cookie = login.headers["set-cookie"].to_str().unwrap();
    assert_eq!(
        cookie,
        format!("fabro_session={TOKEN}; HttpOnly; SameSite=Strict; Path=/")
    );
    let page = fixture.send(Method::GET, "/", None, Auth::None).await;
    assert!(page.text().contains("name=\"token\""));
    let wrong = fixture
        .send(Method::GET, "/?token=nope", None, Auth::None)
        .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    let board = fixture
        .send(Method::GET, "/", None, Auth::Cookie(TOKEN))
        .await;
    assert!(board.text().contains("<h1>Runs</h1>"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_routes_wrong_methods_and_bad_requests_get_json_errors() {
    let fixture = Fixture::new(2);
    let missing = fixture.get("/api/v1/nothing").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.json()["error"]["code"], "not_found");
    let method = fixture
        .send(Method::DELETE, "/api/v1/runs", None, Auth::Bearer(TOKEN))
        .await;
    assert_eq!(method.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(method.json()["error"]["code"], "method_not_allowed");
    let bad = fixture
        .send(
            Method::POST,
            "/api/v1/runs",
            Some(b"{not json".to_vec()),
            Auth::Bearer(TOKEN),
        )
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.json()["error"]["code"], "bad_request");
    let unknown_field = fixture
        .post("/api/v1/runs", json!({"workflow": "w.fabro", "bogus": 1}))
        .await;
    assert_eq!(unknown_field.status, StatusCode::BAD_REQUEST);
    let status = fixture.get("/api/v1/runs?status=sleeping").await;
    assert_eq!(status.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        fixture.get("/api/v1/runs/abcd").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        fixture.get("/api/v1/runs/abcd/events").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        fixture
            .post("/api/v1/runs/abcd/cancel", json!({}))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        fixture
            .post("/api/v1/runs/abcd/resume", json!({}))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_errors_invalid_workflow_outside_roots_and_duplicate_ids() {
    let fixture = Fixture::new(2);
    fixture.write("bad.fabro", "digraph bad { start [shape=Mdiamond] }\n");
    let invalid = fixture
        .post("/api/v1/runs", json!({"workflow": "bad.fabro"}))
        .await;
    assert_eq!(
        invalid.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        invalid.text()
    );
    let error = &invalid.json()["error"];
    assert_eq!(error["code"], "invalid_workflow");
    assert!(!error["diagnostics"].as_array().unwrap().is_empty());
    assert!(error["diagnostics"][0]["rule"].is_string());
    let outside = tempfile::tempdir().unwrap();
    fs_err::write(outside.path().join("w.fabro"), chain(1)).unwrap();
    let forbidden = fixture
        .post(
            "/api/v1/runs",
            json!({"workflow": outside.path().join("w.fabro")}),
        )
        .await;
    assert_eq!(
        forbidden.status,
        StatusCode::FORBIDDEN,
        "{}",
        forbidden.text()
    );
    let work_dir = fixture
        .post(
            "/api/v1/runs",
            json!({"source": chain(1), "work_dir": outside.path()}),
        )
        .await;
    assert_eq!(work_dir.status, StatusCode::FORBIDDEN);
    std::os::unix::fs::symlink(
        outside.path().join("w.fabro"),
        fixture.work().join("link.fabro"),
    )
    .unwrap();
    let symlink = fixture
        .post("/api/v1/runs", json!({"workflow": "link.fabro"}))
        .await;
    assert_eq!(symlink.status, StatusCode::FORBIDDEN);
    let neither = fixture.post("/api/v1/runs", json!({})).await;
    assert_eq!(neither.status, StatusCode::BAD_REQUEST);
    let run_id = fixture
        .start(json!({"source": chain(1), "run_id": "fixed-id-1"}))
        .await;
    assert_eq!(run_id, "fixed-id-1");
    fixture.wait_status(&run_id, &["success"]).await;
    let again = fixture
        .post(
            "/api/v1/runs",
            json!({"source": chain(1), "run_id": "fixed-id-1"}),
        )
        .await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.text());
    let sources = fixture.root().join("server/sources");
    assert_eq!(
        fs_err::read_dir(&sources).unwrap().count(),
        0,
        "the sent text is not kept"
    );
    let bad_id = fixture
        .post(
            "/api/v1/runs",
            json!({"source": chain(1), "run_id": "../x"}),
        )
        .await;
    assert_eq!(bad_id.status, StatusCode::BAD_REQUEST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_over_http_finishes_with_its_records() {
    let fixture = Fixture::new(2);
    fixture.write("w.fabro", &chain(3));
    let reply = fixture
        .post(
            "/api/v1/runs",
            json!({"workflow": "w.fabro", "goal": "count"}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text());
    let started = reply.json();
    let run_id = started["run_id"].as_str().unwrap().to_owned();
    assert_eq!(started["url"], format!("/api/v1/runs/{run_id}"));
    let document = fixture.wait_status(&run_id, &["success"]).await;
    assert_eq!(document["totals"]["stages"], 5, "start, s0, s1, s2, exit");
    // SPEC 14.2: the manifest says who started the run.
    let manifest = fixture.stored_manifest(&run_id).await;
    assert_eq!(manifest["origin"], "server");
    assert_eq!(document["pending_question"], Value::Null);
    assert_eq!(document["goal"], "count");
    let list = fixture
        .get("/api/v1/runs?status=success&limit=500")
        .await
        .json();
    assert_eq!(list["runs"][0]["run_id"], run_id.as_str());
    assert_eq!(list["next"], Value::Null);
    let stages = fixture
        .get(&format!("/api/v1/runs/{run_id}/stages"))
        .await
        .json();
    let stages = stages["stages"].as_array().unwrap().clone();
    assert_eq!(stages.len(), 5);
    assert_eq!(stages[1]["node_id"], "s0");
    assert!(stages[1]["files"]
        .as_array()
        .unwrap()
        .contains(&json!("status.json")));
    let rank = stages[1]["rank"].as_u64().unwrap();
    let stdout = fixture
        .get(&format!(
            "/api/v1/runs/{run_id}/stages/{rank}/files/stdout.log"
        ))
        .await;
    assert_eq!(stdout.status, StatusCode::OK);
    assert_eq!(stdout.text(), "0\n");
    let other = fixture
        .get(&format!(
            "/api/v1/runs/{run_id}/stages/{rank}/files/manifest.json"
        ))
        .await;
    assert_eq!(other.status, StatusCode::NOT_FOUND);
    let no_rank = fixture
        .get(&format!(
            "/api/v1/runs/{run_id}/stages/999/files/stdout.log"
        ))
        .await;
    assert_eq!(no_rank.status, StatusCode::NOT_FOUND);
    let diff = fixture
        .get(&format!("/api/v1/runs/{run_id}/stages/{rank}/diff"))
        .await;
    assert_eq!(
        diff.status,
        StatusCode::NOT_FOUND,
        "no git checkpoints outside a repository"
    );
    let svg = fixture
        .get(&format!("/api/v1/runs/{run_id}/graph.svg"))
        .await;
    assert_eq!(svg.status, StatusCode::OK);
    assert!(
        svg.text()
            .contains("class=\"node status-success\" data-visits=\"1\" id=\"node-s0\""),
        "{}",
        svg.text()
    );
    let events = fixture
        .get(&format!("/api/v1/runs/{run_id}/events?after=2&limit=3"))
        .await
        .json();
    let ids: Vec<u64> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|event| event["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [3, 4, 5]);
    assert_eq!(events["next_after"], 5);
    let all = fixture
        .get(&format!("/api/v1/runs/{run_id}/events"))
        .await
        .json();
    assert_eq!(
        all["events"].as_array().unwrap().last().unwrap()["event"],
        "WorkflowRunCompleted"
    );
    let cancel = fixture
        .post(&format!("/api/v1/runs/{run_id}/cancel"), json!({}))
        .await;
    assert_eq!(cancel.status, StatusCode::CONFLICT);
    let resume = fixture
        .post(&format!("/api/v1/runs/{run_id}/resume"), json!({}))
        .await;
    assert_eq!(resume.status, StatusCode::CONFLICT, "{}", resume.text());
    let workflows = fixture.get("/api/v1/workflows").await.json();
    assert_eq!(workflows["workflows"][0]["name"], "w");
    assert_eq!(workflows["workflows"][0]["node_count"], 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_human_gate_is_answered_over_http() {
    let fixture = Fixture::new(2);
    fixture.write("gate.fabro", GATE);
    let run_id = fixture.start(json!({"workflow": "gate.fabro"})).await;
    let question = fixture.wait_question(&run_id).await;
    assert_eq!(question["node_id"], "review");
    assert_eq!(question["options"][0]["key"], "A");
    let listed = fixture.get("/api/v1/runs?status=waiting").await.json();
    assert_eq!(
        listed["runs"][0]["pending_question"]["question_id"],
        question["question_id"]
    );
    let id = question["question_id"].as_str().unwrap();
    let url = format!("/api/v1/runs/{run_id}/questions/{id}/answer");
    let wrong = fixture.post(&url, json!({"label": "Maybe"})).await;
    assert_eq!(
        wrong.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        wrong.text()
    );
    let missing = fixture
        .post(
            &format!("/api/v1/runs/{run_id}/questions/nope/answer"),
            json!({"key": "A"}),
        )
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    let answered = fixture.post(&url, json!({"key": "A"})).await;
    assert_eq!(answered.status, StatusCode::OK, "{}", answered.text());
    assert_eq!(
        answered.json(),
        json!({"selected_key": "A", "label": "[A] Approve"})
    );
    fixture.wait_status(&run_id, &["success"]).await;
    let again = fixture.post(&url, json!({"key": "A"})).await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.text());
    assert!(fixture.work().join("shipped").exists());
    let events = fixture
        .get(&format!("/api/v1/runs/{run_id}/events"))
        .await
        .json();
    let answer = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|event| event["event"] == "HumanAnswer")
        .unwrap()
        .clone();
    assert_eq!(answer["properties"]["source"], "api");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_then_resume_over_http() {
    let fixture = Fixture::new(2);
    fixture.write("sleepy.fabro", &sleepy(30, "napped"));
    let run_id = fixture.start(json!({"workflow": "sleepy.fabro"})).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !fixture.work().join("napped").exists() {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let cancel = fixture
        .post(&format!("/api/v1/runs/{run_id}/cancel"), json!({}))
        .await;
    assert_eq!(cancel.status, StatusCode::ACCEPTED, "{}", cancel.text());
    fixture.wait_status(&run_id, &["canceled"]).await;
    let twice = fixture
        .post(&format!("/api/v1/runs/{run_id}/cancel"), json!({}))
        .await;
    assert_eq!(twice.status, StatusCode::CONFLICT);
    let resume = fixture
        .post(&format!("/api/v1/runs/{run_id}/resume"), json!({}))
        .await;
    assert_eq!(resume.status, StatusCode::ACCEPTED, "{}", resume.text());
    fixture.wait_status(&run_id, &["success"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_beyond_max_concurrent_runs_wait_queued() {
    let fixture = Fixture::new(1);
    fixture.write("sleepy.fabro", &sleepy(30, "first"));
    fixture.write("quick.fabro", &chain(1));
    let first = fixture.start(json!({"workflow": "sleepy.fabro"})).await;
    // The first holds the only slot before the others arrive (on a loaded machine it
    // may still be starting when the next request comes).
    fixture.wait_status(&first, &["running"]).await;
    let reply = fixture
        .post("/api/v1/runs", json!({"workflow": "quick.fabro"}))
        .await;
    assert_eq!(reply.json()["status"], "queued", "{}", reply.text());
    let second = reply.json()["run_id"].as_str().unwrap().to_owned();
    let third = fixture.start(json!({"workflow": "quick.fabro"})).await;
    let queued = fixture.get("/api/v1/runs?status=queued").await.json();
    assert_eq!(queued["runs"].as_array().unwrap().len(), 2, "{queued}");
    assert_eq!(
        fixture.wait_status(&second, &["queued"]).await["status"],
        "queued"
    );
    // A queued run cancelled ends canceled without a stage.
    let cancel = fixture
        .post(&format!("/api/v1/runs/{third}/cancel"), json!({}))
        .await;
    assert_eq!(cancel.status, StatusCode::ACCEPTED);
    let canceled = fixture.wait_status(&third, &["canceled"]).await;
    assert_eq!(canceled["totals"]["stages"], 0);
    fixture
        .post(&format!("/api/v1/runs/{first}/cancel"), json!({}))
        .await;
    fixture.wait_status(&first, &["canceled"]).await;
    fixture.wait_status(&second, &["success"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_the_limits_get_413() {
    let fixture = Fixture::new(1);
    let big = vec![b' '; 2 * 1024 * 1024];
    let answer = fixture
        .send(
            Method::POST,
            "/api/v1/runs/abcd/questions/q/answer",
            Some(big.clone()),
            Auth::Bearer(TOKEN),
        )
        .await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(answer.json()["error"]["code"], "payload_too_large");
    let resume = fixture
        .send(
            Method::POST,
            "/api/v1/runs/abcd/resume",
            Some(big),
            Auth::Bearer(TOKEN),
        )
        .await;
    assert_eq!(resume.status, StatusCode::PAYLOAD_TOO_LARGE);
    let huge = vec![b' '; 6 * 1024 * 1024];
    let start = fixture
        .send(
            Method::POST,
            "/api/v1/runs",
            Some(huge),
            Auth::Bearer(TOKEN),
        )
        .await;
    assert_eq!(start.status, StatusCode::PAYLOAD_TOO_LARGE);
    let source = "x".repeat(4 * 1024 * 1024 + 10);
    let too_much = fixture
        .post("/api/v1/runs", json!({"source": source}))
        .await;
    assert_eq!(too_much.status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifact_paths_that_leave_the_artifacts_directory_are_404() {
    let fixture = Fixture::new(1);
    let run_id = fixture.start(json!({"source": chain(1)})).await;
    let document = fixture.wait_status(&run_id, &["success"]).await;
    let run_dir = std::path::PathBuf::from(document["run_dir"].as_str().unwrap());
    let files = run_dir.join("artifacts/files/s0/retry_1");
    fs_err::create_dir_all(&files).unwrap();
    fs_err::write(files.join("report.txt"), "report").unwrap();
    let secret = fixture.dir.path().join("secret.txt");
    fs_err::write(&secret, "outside").unwrap();
    std::os::unix::fs::symlink(&secret, files.join("link.txt")).unwrap();
    std::os::unix::fs::symlink(fixture.dir.path(), run_dir.join("artifacts/files/dir")).unwrap();
    let list = fixture
        .get(&format!("/api/v1/runs/{run_id}/artifacts"))
        .await
        .json();
    assert_eq!(
        list["artifacts"][0]["path"], "s0/retry_1/report.txt",
        "{list}"
    );
    assert_eq!(list["artifacts"][0]["size"], 6);
    assert_eq!(list["artifacts"][0]["attempt"], 1);
    let good = fixture
        .get(&format!(
            "/api/v1/runs/{run_id}/artifacts/s0/retry_1/report.txt"
        ))
        .await;
    assert_eq!(good.status, StatusCode::OK);
    assert_eq!(good.text(), "report");
    for path in [
        "../manifest.json",
        "../../manifest.json",
        "%2e%2e/%2e%2e/manifest.json",
        "s0/..%2F..%2F..%2Fmanifest.json",
        "/etc/passwd",
        "%2Fetc%2Fpasswd",
        "s0/retry_1/link.txt",
        "dir/secret.txt",
        "s0/retry_1/",
        "s0/retry_1/missing.txt",
    ] {
        let reply = fixture
            .get(&format!("/api/v1/runs/{run_id}/artifacts/{path}"))
            .await;
        assert_eq!(
            reply.status,
            StatusCode::NOT_FOUND,
            "{path}: {}",
            reply.text()
        );
        assert!(!reply.text().contains("outside"));
    }
}

mod branching;
mod contract;
mod openapi;
mod stream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_toml_is_a_configuration_layer_between_project_and_settings() {
    let fixture = Fixture::new(1);
    let root = fixture.root();
    fs_err::write(
        root.join("settings.toml"),
        "[sandbox.env]\nFROM_SETTINGS = \"settings\"\nFROM_SERVER = \"settings\"\nFROM_PROJECT = \"settings\"\n",
    )
    .unwrap();
    fs_err::write(
        root.join("server.toml"),
        "[server]\nmax_concurrent_runs = 3\n[sandbox.env]\nFROM_SERVER = \"server\"\nFROM_PROJECT = \"server\"\n",
    )
    .unwrap();
    fs_err::create_dir_all(fixture.work().join(".fabro")).unwrap();
    fs_err::write(
        fixture.work().join(".fabro/project.toml"),
        "[sandbox.env]\nFROM_PROJECT = \"project\"\n",
    )
    .unwrap();
    fixture.write(
        "env.fabro",
        "digraph env {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  show [shape=parallelogram, script=\"echo $FROM_SETTINGS $FROM_SERVER $FROM_PROJECT\"]\n  start -> show -> exit\n}\n",
    );
    let run_id = fixture.start(json!({"workflow": "env.fabro"})).await;
    fixture.wait_status(&run_id, &["success"]).await;
    let stages = fixture
        .get(&format!("/api/v1/runs/{run_id}/stages"))
        .await
        .json();
    let rank = stages["stages"][1]["rank"].as_u64().unwrap();
    let stdout = fixture
        .get(&format!(
            "/api/v1/runs/{run_id}/stages/{rank}/files/stdout.log"
        ))
        .await;
    assert_eq!(stdout.text(), "settings server project\n");
    fs_err::write(root.join("server.toml"), "[sandbox]\nbogus = 1\n").unwrap();
    let refused = fixture
        .post("/api/v1/runs", json!({"workflow": "env.fabro"}))
        .await;
    assert_eq!(
        refused.status,
        StatusCode::BAD_REQUEST,
        "{}",
        refused.text()
    );
    assert!(refused.text().contains("bogus"));
}
mod cache;
mod flags;
mod hostile;
mod stores;

/// SPEC 10.7: the new-run page offers every provider a run may name: the built-in ones,
/// the presets and those configured in the server's layers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_new_run_page_offers_presets_and_configured_providers() {
    let fixture = Fixture::new(1);
    fs_err::write(
        fixture.root().join("settings.toml"),
        "[llm.providers.gateway]\nwire = \"chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\n",
    )
    .expect("settings");
    let page = fixture
        .send(Method::GET, "/new", None, Auth::Cookie(TOKEN))
        .await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text());
    let text = page.text();
    for provider in [
        "anthropic",
        "simulated",
        "kimi",
        "openrouter",
        "ollama",
        "gateway",
    ] {
        assert!(
            text.contains(&format!("<option value=\"{provider}\">{provider}</option>")),
            "{provider} is not offered: {text}"
        );
    }
    assert!(
        text.contains("<option value=\"\" selected>(default)</option>"),
        "{text}"
    );
}
