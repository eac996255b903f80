//! Hostile input (SPEC 14.4 guarantee 3): random JSON bodies and random path parameters
//! on every route get an answer below 500, never a panic.

use axum::http::Method;
use proptest::prelude::*;
use serde_json::{json, Value};

use crate::support::{chain, Auth, Fixture, TOKEN};

const ROUTES: [(&str, &str); 18] = [
    ("GET", "/api/v1/runs?status={a}&limit={b}&before={a}"),
    ("POST", "/api/v1/runs"),
    ("GET", "/api/v1/runs/{a}"),
    ("POST", "/api/v1/runs/{a}/cancel"),
    ("POST", "/api/v1/runs/{a}/resume"),
    ("POST", "/api/v1/runs/{a}/fork"),
    ("POST", "/api/v1/runs/{a}/rewind"),
    ("POST", "/api/v1/runs/{a}/steer"),
    ("GET", "/api/v1/runs/{a}/events?after={b}&limit={b}"),
    ("GET", "/api/v1/runs/{a}/graph.svg"),
    ("GET", "/api/v1/runs/{a}/stages"),
    ("GET", "/api/v1/runs/{a}/stages/{b}/files/{a}"),
    ("GET", "/api/v1/runs/{a}/stages/{b}/diff"),
    ("GET", "/api/v1/runs/{a}/artifacts"),
    ("GET", "/api/v1/runs/{a}/artifacts/{a}/{b}"),
    ("GET", "/api/v1/runs/{a}/questions"),
    ("POST", "/api/v1/runs/{a}/questions/{b}/answer"),
    ("GET", "/api/v1/workflows"),
];

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        "[ -~]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("workflow".to_owned()),
                    Just("source".to_owned()),
                    Just("work_dir".to_owned()),
                    Just("run_id".to_owned()),
                    Just("answers".to_owned()),
                    Just("vars".to_owned()),
                    Just("key".to_owned()),
                    Just("label".to_owned()),
                    Just("text".to_owned()),
                    "[a-z_]{1,8}",
                ],
                inner,
                0..4
            )
            .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// Path segments: printable text, percent escapes, dots and slashes.
fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z0-9._~-]{0,12}",
        "(%[0-9A-Fa-f]{2}|%|\\.\\.|[a-z]){1,8}",
        Just("..".to_owned()),
        Just("%2e%2e%2f%2e%2e".to_owned()),
        Just("hostile-run".to_owned()),
        Just("1".to_owned()),
    ]
}

#[test]
fn random_bodies_and_path_parameters_never_get_a_5xx() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let fixture = Fixture::new(2);
    runtime.block_on(async {
        fixture
            .start(json!({"source": chain(1), "run_id": "hostile-run"}))
            .await;
        fixture.wait_status("hostile-run", &["success"]).await;
    });
    let config = ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(route in 0..ROUTES.len(), a in segment(), b in segment(), body in json_value(), raw in any::<bool>())| {
        let (method, path) = ROUTES[route];
        let uri = path.replace("{a}", &a).replace("{b}", &b);
        let Ok(uri) = uri.parse::<axum::http::Uri>() else { return Ok(()) };
        let method = if method == "POST" { Method::POST } else { Method::GET };
        let bytes = if raw { body.to_string().into_bytes().into_iter().rev().collect() } else { body.to_string().into_bytes() };
        let reply = runtime.block_on(fixture.send(method.clone(), &uri.to_string(), Some(bytes), Auth::Bearer(TOKEN)));
        prop_assert!(reply.status.as_u16() < 500, "{method} {uri}: {} {}", reply.status, reply.text());
    });
    // Whatever was sent, the finished run is untouched.
    runtime.block_on(async {
        let document = fixture.get("/api/v1/runs/hostile-run").await.json();
        assert_eq!(document["status"], "success");
    });
}

/// What schemathesis found (issue 18 acceptance 3): each answer is a documented 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_as_workflow_and_bad_resume_bodies_are_400() {
    let fixture = Fixture::new(2);
    // `""` names the working directory itself: not a workflow file (was 500).
    let reply = fixture.post("/api/v1/runs", json!({"workflow": ""})).await;
    assert_eq!(reply.status.as_u16(), 400, "{}", reply.text());
    assert_eq!(reply.json()["error"]["code"], "bad_request");
    fixture
        .start(json!({"source": chain(1), "run_id": "done-run"}))
        .await;
    fixture.wait_status("done-run", &["success"]).await;
    for body in [
        // An unknown field (was 422 from the JSON extractor).
        json!({"answers": {}, "auto_approve": false, "unknown": 42}),
        // An answer for a gate the stored workflow lacks (was 422 invalid_workflow).
        json!({"answers": {"": ""}, "auto_approve": false}),
    ] {
        let reply = fixture.post("/api/v1/runs/done-run/resume", body).await;
        assert_eq!(reply.status.as_u16(), 400, "{}", reply.text());
        assert_eq!(reply.json()["error"]["code"], "bad_request");
    }
}
