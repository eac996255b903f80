//! The OpenAPI document describes every response body with its properties (issue 30,
//! acceptance 3), and real answers of the server match the schemas it documents for
//! them, errors included.

use std::collections::BTreeSet;

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::{chain, sleepy, Auth, Fixture, Reply, GATE, TOKEN};

/// The content types of raw answers: text files, diffs, the SVG graph, artifact
/// downloads and the event stream, each documented as a string.
const RAW: [&str; 5] = [
    "text/plain",
    "text/x-diff",
    "image/svg+xml",
    "application/octet-stream",
    "text/event-stream",
];

/// The schema `reference` names (`#/components/schemas/{name}`).
fn component<'a>(document: &'a Value, reference: &str) -> Option<&'a Value> {
    let name = reference.strip_prefix("#/components/schemas/")?;
    document["components"]["schemas"].get(name)
}

/// Why `schema` does not describe an object with its properties, if it does not: a
/// `$ref` must name a component that does, `allOf` parts and `oneOf`/`anyOf`
/// alternatives (other than `null`) must each do so.
fn undescribed(document: &Value, schema: &Value, seen: &mut BTreeSet<String>) -> Option<String> {
    if let Some(reference) = schema["$ref"].as_str() {
        if !seen.insert(reference.to_owned()) {
            return None;
        }
        let Some(target) = component(document, reference) else {
            return Some(format!("{reference} names no component"));
        };
        return undescribed(document, target, seen)
            .map(|problem| format!("{reference}: {problem}"));
    }
    for combinator in ["allOf", "oneOf", "anyOf"] {
        if let Some(parts) = schema[combinator].as_array() {
            return parts
                .iter()
                .filter(|part| part["type"] != "null")
                .find_map(|part| undescribed(document, part, seen));
        }
    }
    match schema["properties"].as_object() {
        Some(properties) if !properties.is_empty() => None,
        _ => Some(format!("no properties: {schema}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_body_is_documented_with_its_properties() {
    let fixture = Fixture::new(1);
    let document = fixture.get("/api/v1/openapi.json").await.json();
    let mut problems = Vec::new();
    let mut bodies = 0;
    for (path, item) in document["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("operations") {
            for (status, response) in operation["responses"].as_object().expect("responses") {
                let Some(content) = response["content"].as_object() else {
                    problems.push(format!("{method} {path} {status}: no content"));
                    continue;
                };
                for (content_type, media) in content {
                    bodies += 1;
                    let schema = &media["schema"];
                    let problem = if RAW.contains(&content_type.as_str()) {
                        (schema["type"] != "string")
                            .then(|| format!("a raw body that is no string: {schema}"))
                    } else {
                        undescribed(&document, schema, &mut BTreeSet::new())
                    };
                    if let Some(problem) = problem {
                        problems.push(format!(
                            "{method} {path} {status} {content_type}: {problem}"
                        ));
                    }
                }
            }
        }
    }
    assert!(bodies > 50, "only {bodies} response bodies documented");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_bare_object_body_is_found() {
    let document = json!({"components": {"schemas": {
        "Described": {"type": "object", "properties": {"a": {"type": "string"}}},
        "Bare": {"type": "object"},
        "Either": {"oneOf": [{"type": "null"}, {"$ref": "#/components/schemas/Bare"}]},
    }}});
    let check = |schema: Value| undescribed(&document, &schema, &mut BTreeSet::new());
    assert_eq!(
        check(json!({"$ref": "#/components/schemas/Described"})),
        None
    );
    assert!(check(json!({"type": "object"})).is_some());
    assert!(check(json!({"$ref": "#/components/schemas/Bare"})).is_some());
    assert!(check(json!({"$ref": "#/components/schemas/Either"})).is_some());
    assert!(check(json!({"$ref": "#/components/schemas/Missing"})).is_some());
    assert!(check(json!({"allOf": [
        {"$ref": "#/components/schemas/Described"}, {"type": "object"}
    ]}))
    .is_some());
}

/// The document's schemas, and the answers checked against them.
struct Contract {
    document: Value,
    checked: BTreeSet<(String, String, u16)>,
}

impl Contract {
    async fn load(fixture: &Fixture) -> Contract {
        Contract {
            document: fixture.get("/api/v1/openapi.json").await.json(),
            checked: BTreeSet::new(),
        }
    }

    /// Asserts that `reply`, the answer to `method` on the route `route` (as the
    /// document spells it), has a documented status and, for JSON, a body that matches
    /// the documented schema; returns the body.
    fn check(&mut self, method: &str, route: &str, reply: &Reply) -> Value {
        let status = reply.status.as_u16();
        let response = &self.document["paths"][route][method]["responses"][status.to_string()];
        assert!(
            response.is_object(),
            "{method} {route} answered {status}, which the document does not list: {}",
            reply.text()
        );
        let body = reply.json();
        let schema = &response["content"]["application/json"]["schema"];
        assert!(
            schema.is_object(),
            "{method} {route} {status}: no JSON schema"
        );
        let errors = violations(&self.document, schema, &body);
        assert!(
            errors.is_empty(),
            "{method} {route} {status}: the body does not match its schema:\n{}\n{body:#}",
            errors.join("\n")
        );
        self.checked
            .insert((method.to_owned(), route.to_owned(), status));
        body
    }
}

/// How `body` breaks `schema`, a schema of `document` (its `$ref`s resolved there).
fn violations(document: &Value, schema: &Value, body: &Value) -> Vec<String> {
    let root = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "components": document["components"],
        "allOf": [schema],
    });
    let validator = jsonschema::validator_for(&root).expect("the schema compiles");
    validator
        .iter_errors(body)
        .map(|error| format!("{} at {}", error, error.instance_path()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_breaks_its_schema_is_found() {
    let fixture = Fixture::new(1);
    let document = fixture.get("/api/v1/openapi.json").await.json();
    let list = json!({"$ref": "#/components/schemas/RunList"});
    assert!(violations(&document, &list, &json!({"runs": [], "next": null})).is_empty());
    for bad in [
        json!({"runs": 5, "next": null}),
        json!({"runs": [{"run_id": "r"}], "next": null}),
        json!({"next": null}),
    ] {
        assert!(!violations(&document, &list, &bad).is_empty(), "{bad}");
    }
    let run = json!({"$ref": "#/components/schemas/RunDocument"});
    assert!(!violations(&document, &run, &json!({"run_id": "r", "status": 1})).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_answers_match_their_documented_schemas() {
    let fixture = Fixture::new(1);
    let mut contract = Contract::load(&fixture).await;
    fixture.write("gate.fabro", GATE);
    fixture.write("chain.fabro", &chain(2));
    fixture.write("broken.fabro", "digraph broken { start -> }\n");
    fixture.write("sleepy.fabro", &sleepy(30, "napped"));

    let reply = fixture.get("/api/v1/health").await;
    contract.check("get", "/api/v1/health", &reply);
    let reply = fixture
        .send(Method::GET, "/api/v1/openapi.json", None, Auth::None)
        .await;
    contract.check("get", "/api/v1/openapi.json", &reply);
    let reply = fixture.get("/api/v1/workflows").await;
    let workflows = contract.check("get", "/api/v1/workflows", &reply);
    assert!(workflows["workflows"]
        .as_array()
        .is_some_and(|list| list.len() == 4));

    // A run waiting for a human: its summary, its document and its question.
    let reply = fixture
        .post("/api/v1/runs", json!({"workflow": "gate.fabro"}))
        .await;
    let started = contract.check("post", "/api/v1/runs", &reply);
    let gate = started["run_id"].as_str().expect("run id").to_owned();
    let question = fixture.wait_question(&gate).await;
    let reply = fixture.get(&format!("/api/v1/runs/{gate}/questions")).await;
    contract.check("get", "/api/v1/runs/{id}/questions", &reply);
    let reply = fixture.get("/api/v1/runs?status=waiting").await;
    let listed = contract.check("get", "/api/v1/runs", &reply);
    assert!(
        listed["runs"][0]["pending_question"].is_object(),
        "{listed}"
    );
    let reply = fixture.get(&format!("/api/v1/runs/{gate}")).await;
    let document = contract.check("get", "/api/v1/runs/{id}", &reply);
    assert!(document["pending_question"].is_object(), "{document}");
    // While it runs, a second run waits in the queue.
    let reply = fixture
        .post("/api/v1/runs", json!({"workflow": "chain.fabro"}))
        .await;
    let queued = contract.check("post", "/api/v1/runs", &reply)["run_id"]
        .as_str()
        .expect("run id")
        .to_owned();
    let reply = fixture.get(&format!("/api/v1/runs/{queued}")).await;
    let document = contract.check("get", "/api/v1/runs/{id}", &reply);
    assert_eq!(document["status"], "queued", "{document}");
    let reply = fixture.get("/api/v1/runs").await;
    contract.check("get", "/api/v1/runs", &reply);
    let id = question["question_id"].as_str().expect("question id");
    let answer = format!("/api/v1/runs/{gate}/questions/{id}/answer");
    let route = "/api/v1/runs/{id}/questions/{question_id}/answer";
    let reply = fixture.post(&answer, json!({"label": "Maybe"})).await;
    contract.check("post", route, &reply);
    let reply = fixture.post(&answer, json!({"key": "A"})).await;
    contract.check("post", route, &reply);
    fixture.wait_status(&gate, &["success"]).await;
    let reply = fixture.post(&answer, json!({"key": "A"})).await;
    contract.check("post", route, &reply);
    fixture.wait_status(&queued, &["success"]).await;

    // A finished run's records.
    let reply = fixture.get(&format!("/api/v1/runs/{queued}")).await;
    let document = contract.check("get", "/api/v1/runs/{id}", &reply);
    let run_dir = std::path::PathBuf::from(document["run_dir"].as_str().expect("run dir"));
    fs_err::create_dir_all(run_dir.join("artifacts/files/s0/retry_1")).expect("set-up");
    fs_err::write(run_dir.join("artifacts/files/s0/retry_1/a.txt"), "a").expect("set-up");
    for (route, uri) in [
        (
            "/api/v1/runs/{id}/stages",
            format!("/api/v1/runs/{queued}/stages"),
        ),
        (
            "/api/v1/runs/{id}/artifacts",
            format!("/api/v1/runs/{queued}/artifacts"),
        ),
        (
            "/api/v1/runs/{id}/events",
            format!("/api/v1/runs/{queued}/events?limit=3"),
        ),
        (
            "/api/v1/runs/{id}/questions",
            format!("/api/v1/runs/{queued}/questions"),
        ),
    ] {
        let reply = fixture.get(&uri).await;
        let body = contract.check("get", route, &reply);
        assert!(body.as_object().is_some_and(|members| !members.is_empty()));
    }
    let reply = fixture.get("/api/v1/runs?limit=1").await;
    let page = contract.check("get", "/api/v1/runs", &reply);
    assert!(page["next"].is_string(), "{page}");

    // Cancel and resume.
    let reply = fixture
        .post("/api/v1/runs", json!({"workflow": "sleepy.fabro"}))
        .await;
    let sleepy_run = contract.check("post", "/api/v1/runs", &reply)["run_id"]
        .as_str()
        .expect("run id")
        .to_owned();
    // Cancelled once its stage sleeps (as `cancel_then_resume_over_http` does).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !fixture.work().join("napped").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the stage never started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let reply = fixture
        .post(&format!("/api/v1/runs/{sleepy_run}/cancel"), json!({}))
        .await;
    contract.check("post", "/api/v1/runs/{id}/cancel", &reply);
    fixture.wait_status(&sleepy_run, &["canceled"]).await;
    let reply = fixture
        .post(&format!("/api/v1/runs/{sleepy_run}/cancel"), json!({}))
        .await;
    contract.check("post", "/api/v1/runs/{id}/cancel", &reply);
    let reply = fixture
        .post(&format!("/api/v1/runs/{sleepy_run}/resume"), json!({}))
        .await;
    contract.check("post", "/api/v1/runs/{id}/resume", &reply);
    fixture.wait_status(&sleepy_run, &["success"]).await;

    // Errors: an invalid workflow with its diagnostics, an unknown run, a bad body.
    let reply = fixture
        .post("/api/v1/runs", json!({"workflow": "broken.fabro"}))
        .await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        reply.text()
    );
    let error = contract.check("post", "/api/v1/runs", &reply);
    assert!(error["error"]["diagnostics"].is_array(), "{error}");
    let reply = fixture.post("/api/v1/runs", json!({"nope": 1})).await;
    contract.check("post", "/api/v1/runs", &reply);
    let reply = fixture.get("/api/v1/runs/nope").await;
    contract.check("get", "/api/v1/runs/{id}", &reply);
    let reply = fixture.get("/api/v1/runs?status=nope").await;
    contract.check("get", "/api/v1/runs", &reply);
    let reply = fixture
        .send(Method::GET, "/api/v1/runs", None, Auth::None)
        .await;
    contract.check("get", "/api/v1/runs", &reply);
    let reply = fixture
        .send(Method::GET, "/api/v1/runs", None, Auth::Bearer(TOKEN))
        .await;
    contract.check("get", "/api/v1/runs", &reply);

    let routes: BTreeSet<&str> = contract
        .checked
        .iter()
        .map(|(_, route, _)| route.as_str())
        .collect();
    assert_eq!(routes.len(), 12, "{routes:?}");
}
