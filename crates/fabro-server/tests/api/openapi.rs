//! The OpenAPI document (SPEC 14.3) describes every route, and every route answers with
//! a status the document lists for it.

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::{chain, Auth, Fixture, TOKEN};

/// Routes of SPEC 14.3, as the document must list them.
const ROUTES: [(&str, &str); 21] = [
    ("get", "/api/v1/health"),
    ("get", "/api/v1/openapi.json"),
    ("get", "/api/v1/runs"),
    ("post", "/api/v1/runs"),
    ("get", "/api/v1/runs/{id}"),
    ("post", "/api/v1/runs/{id}/cancel"),
    ("post", "/api/v1/runs/{id}/resume"),
    ("post", "/api/v1/runs/{id}/fork"),
    ("post", "/api/v1/runs/{id}/rewind"),
    ("post", "/api/v1/runs/{id}/steer"),
    ("get", "/api/v1/runs/{id}/events"),
    ("get", "/api/v1/runs/{id}/graph.svg"),
    ("get", "/api/v1/runs/{id}/stages"),
    ("get", "/api/v1/runs/{id}/stages/{rank}/files/{name}"),
    ("get", "/api/v1/runs/{id}/stages/{rank}/diff"),
    ("get", "/api/v1/runs/{id}/artifacts"),
    ("get", "/api/v1/runs/{id}/artifacts/{path}"),
    ("get", "/api/v1/runs/{id}/questions"),
    ("post", "/api/v1/runs/{id}/questions/{question_id}/answer"),
    ("get", "/api/v1/workflows"),
    ("get", "/api/v1/workers"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_as_documented() {
    let fixture = Fixture::new(2);
    let document = fixture
        .send(Method::GET, "/api/v1/openapi.json", None, Auth::None)
        .await
        .json();
    assert_eq!(document["openapi"], "3.1.0");
    let paths = document["paths"].as_object().unwrap();
    let mut documented: Vec<(String, String)> = paths
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .keys()
                .map(move |method| (method.clone(), path.clone()))
        })
        .collect();
    documented.sort();
    let mut expected: Vec<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    expected.sort();
    assert_eq!(documented, expected);
    let run_id = fixture.start(json!({"source": chain(1)})).await;
    let record = fixture.wait_status(&run_id, &["success"]).await;
    let run_dir = std::path::PathBuf::from(record["run_dir"].as_str().unwrap());
    fs_err::create_dir_all(run_dir.join("artifacts/files/s0/retry_1")).unwrap();
    fs_err::write(run_dir.join("artifacts/files/s0/retry_1/a.txt"), "a").unwrap();
    for (run, rank, name, artifact) in [
        (run_id.as_str(), "1", "stdout.log", "s0/retry_1/a.txt"),
        ("nope", "x", "other", "../x"),
    ] {
        for (method, path) in ROUTES {
            let uri = path
                .replace("{id}", run)
                .replace("{rank}", rank)
                .replace("{name}", name)
                .replace("{path}", artifact)
                .replace("{question_id}", "q-1");
            let (method, body) = match (method, path) {
                ("post", "/api/v1/runs") => (Method::POST, Some(json!({"source": chain(1)}))),
                ("post", p) if p.ends_with("/answer") => (Method::POST, Some(json!({"key": "A"}))),
                ("post", _) => (Method::POST, Some(json!({}))),
                _ => (Method::GET, None),
            };
            for auth in [Auth::Bearer(TOKEN), Auth::None] {
                let reply = fixture
                    .send(
                        method.clone(),
                        &uri,
                        body.as_ref().map(|body| body.to_string().into_bytes()),
                        auth,
                    )
                    .await;
                let responses = &paths[path][method.as_str().to_lowercase()]["responses"];
                let status = reply.status.as_u16().to_string();
                assert!(
                    responses.get(&status).is_some(),
                    "{method} {uri} answered {status}, documented: {:?}: {}",
                    responses.as_object().unwrap().keys().collect::<Vec<_>>(),
                    reply.text()
                );
                let content = &responses[&status]["content"];
                if content.get("application/json").is_some() {
                    assert!(
                        serde_json::from_slice::<Value>(&reply.body).is_ok(),
                        "{method} {uri}: {}",
                        reply.text()
                    );
                }
                assert!(reply.status != StatusCode::INTERNAL_SERVER_ERROR);
            }
        }
    }
}
