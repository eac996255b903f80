//! Helpers of the in-process API tests: a server state over a temporary root, requests
//! sent straight to the router, and workflows that need no LLM.

#![allow(dead_code, unreachable_pub, missing_docs)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use axum::Router;
use fabro_server::{AppState, EngineBridge, ServerSettings, SettingsFlags, Token};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

pub const TOKEN: &str = "test-token-0123456789";

/// One server over its own temporary root and working directory.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub state: AppState,
    pub app: Router,
    /// The database of the shared store, when the tests run on it (dropped with it).
    pub database: Option<fabro_test_support::TestDatabase>,
}

/// With `FABRO_TEST_STORE=postgres`, every fixture of the default stores keeps its runs in
/// a PostgreSQL database of its own instead (issue 31: the API behaves alike on both).
fn on_postgres() -> bool {
    std::env::var("FABRO_TEST_STORE").is_ok_and(|store| store == "postgres")
}

/// The shared store's stores on a fresh database, blobs under `root`. Connected on a
/// thread of its own: the fixture is made inside the test's runtime.
fn postgres_stores(
    root: &std::path::Path,
) -> (fabro_test_support::TestDatabase, fabro_engine::Stores) {
    let database = fabro_test_support::TestDatabase::create("api_fixture")
        .expect("FABRO_TEST_STORE=postgres needs PostgreSQL on 127.0.0.1:5432");
    let url = database.url();
    let runs = std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        runtime.block_on(async {
            let store = fabro_store::PgStore::connect(&url).await.expect("connects");
            store.migrate().await.expect("migrates");
            fabro_store::PgRunStore::new(&store).expect("a run store")
        })
    })
    .join()
    .expect("connected");
    let stores = fabro_engine::Stores {
        runs: std::sync::Arc::new(runs),
        blobs: std::sync::Arc::new(fabro_engine::FsBlobStore::new(root)),
    };
    (database, stores)
}

/// A response.
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// How a request authenticates.
#[derive(Clone, Copy)]
pub enum Auth<'a> {
    None,
    Bearer(&'a str),
    Cookie(&'a str),
}

impl Fixture {
    pub fn new(max_concurrent_runs: usize) -> Fixture {
        Fixture::with_stores(max_concurrent_runs, |_| None)
    }

    /// A server whose runs keep their records in the stores `stores` makes from the
    /// storage root (`None`: the file stores of the root).
    pub fn with_stores(
        max_concurrent_runs: usize,
        stores: impl FnOnce(&std::path::Path) -> Option<fabro_engine::Stores>,
    ) -> Fixture {
        let dir = tempfile::tempdir().expect("test set-up");
        let root = dir.path().join("home");
        let work = dir.path().join("work");
        fs_err::create_dir_all(&root).expect("test set-up");
        fs_err::create_dir_all(&work).expect("test set-up");
        let flags = SettingsFlags {
            bind: Some("127.0.0.1:0".parse().expect("test set-up")),
            max_concurrent_runs: Some(max_concurrent_runs),
        };
        let settings = ServerSettings::load(&root, &flags, &work).expect("test set-up");
        let mut database = None;
        let chosen = stores(&root).or_else(|| {
            on_postgres().then(|| {
                let (created, stores) = postgres_stores(&root);
                database = Some(created);
                stores
            })
        });
        let mut bridge = EngineBridge::new(root, settings.roots.clone());
        if let Some(stores) = chosen {
            bridge = bridge.with_stores(stores);
        }
        let state = AppState::new(bridge, Token::new(TOKEN.to_owned()), settings);
        let app = fabro_server::router(state.clone());
        Fixture {
            dir,
            state,
            app,
            database,
        }
    }

    /// A server on the files of its storage root whatever `FABRO_TEST_STORE` says, for
    /// the tests of what only the local store has (run directories changed by hand, a
    /// run another process executes under the same root).
    pub fn local(max_concurrent_runs: usize) -> Fixture {
        Fixture::with_stores(max_concurrent_runs, |root| {
            Some(fabro_engine::Stores::local(root))
        })
    }

    /// The run's manifest as JSON, read through the server's run store.
    pub async fn stored_manifest(&self, run_id: &str) -> Value {
        let (state, id) = (self.state.clone(), fabro_engine::RunId::from(run_id));
        let manifest = tokio::task::spawn_blocking(move || state.run_store().read_manifest(&id))
            .await
            .expect("joined")
            .expect("the manifest");
        serde_json::to_value(manifest).expect("JSON")
    }

    /// The run's configuration (`config.json`) as JSON, read through the run store.
    pub async fn stored_config(&self, run_id: &str) -> Value {
        let (state, id) = (self.state.clone(), fabro_engine::RunId::from(run_id));
        let config = tokio::task::spawn_blocking(move || state.run_store().read_config(&id))
            .await
            .expect("joined")
            .expect("the configuration");
        serde_json::to_value(config).expect("JSON")
    }

    /// The run's stored event envelopes, each as its stored line.
    pub async fn stored_events(&self, run_id: &str) -> Vec<String> {
        let (state, id) = (self.state.clone(), fabro_engine::RunId::from(run_id));
        tokio::task::spawn_blocking(move || state.run_store().event_reader(&id, 0).read_new())
            .await
            .expect("joined")
            .expect("the events")
            .into_iter()
            .map(|event| event.line)
            .collect()
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    pub fn work(&self) -> PathBuf {
        fs_err::canonicalize(self.dir.path().join("work")).expect("test set-up")
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.work().join(name);
        fs_err::write(&path, text).expect("test set-up");
        path
    }

    pub async fn send(
        &self,
        method: Method,
        uri: &str,
        body: Option<Vec<u8>>,
        auth: Auth<'_>,
    ) -> Reply {
        self.send_with(method, uri, body, auth, &[]).await
    }

    pub async fn send_with(
        &self,
        method: Method,
        uri: &str,
        body: Option<Vec<u8>>,
        auth: Auth<'_>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut request = Request::builder().method(method).uri(uri);
        request = match auth {
            Auth::None => request,
            Auth::Bearer(token) => request.header("authorization", format!("Bearer {token}")),
            Auth::Cookie(token) => request.header("cookie", format!("fabro_session={token}")),
        };
        if body.is_some() {
            request = request.header("content-type", "application/json");
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(body.map_or_else(Body::empty, Body::from))
            .expect("test set-up");
        let response = self
            .app
            .clone()
            .oneshot(request)
            .await
            .expect("test set-up");
        let status = response.status();
        let headers = response.headers().clone();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("test set-up")
            .to_bytes()
            .to_vec();
        Reply {
            status,
            headers,
            body,
        }
    }

    pub async fn get(&self, uri: &str) -> Reply {
        self.send(Method::GET, uri, None, Auth::Bearer(TOKEN)).await
    }

    pub async fn post(&self, uri: &str, body: Value) -> Reply {
        self.send(
            Method::POST,
            uri,
            Some(body.to_string().into_bytes()),
            Auth::Bearer(TOKEN),
        )
        .await
    }

    /// Starts `workflow` (a file name under the working directory); returns the run id.
    pub async fn start(&self, body: Value) -> String {
        let reply = self.post("/api/v1/runs", body).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text());
        reply.json()["run_id"]
            .as_str()
            .expect("test set-up")
            .to_owned()
    }

    /// Waits (at most 30 s) until the run's status is one of `statuses`.
    pub async fn wait_status(&self, run_id: &str, statuses: &[&str]) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let reply = self.get(&format!("/api/v1/runs/{run_id}")).await;
            let document = reply.json();
            let status = document["status"].as_str().unwrap_or_default().to_owned();
            if statuses.contains(&status.as_str()) {
                return document;
            }
            assert!(
                Instant::now() < deadline,
                "run {run_id} stayed {status}: {}",
                reply.text()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the run has a pending question; returns it.
    pub async fn wait_question(&self, run_id: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let reply = self.get(&format!("/api/v1/runs/{run_id}/questions")).await;
            if let Some(question) = reply.json()["questions"].get(0) {
                return question.clone();
            }
            assert!(Instant::now() < deadline, "no question: {}", reply.text());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// `n` command stages in a chain.
pub fn chain(n: usize) -> String {
    let mut text = String::from("digraph chain {\n  graph [goal=\"count\"]\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n");
    for index in 0..n {
        text.push_str(&format!(
            "  s{index} [shape=parallelogram, script=\"echo {index}\"]\n"
        ));
    }
    text.push_str("  start");
    for index in 0..n {
        text.push_str(&format!(" -> s{index}"));
    }
    text.push_str(" -> exit\n}\n");
    text
}

/// A command stage that sleeps `seconds` the first time it runs and succeeds at once on
/// a resume (it leaves a marker file).
pub fn sleepy(seconds: u32, marker: &str) -> String {
    format!(
        "digraph sleepy {{\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  nap [shape=parallelogram, script=\"if [ -f {marker} ]; then exit 0; fi; touch {marker}; sleep {seconds}\"]\n  start -> nap -> exit\n}}\n"
    )
}

/// A gate `review` choosing between `ship` and `revise`.
pub const GATE: &str = "digraph gate {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  review [shape=hexagon, label=\"Ship it?\"]
  ship [shape=parallelogram, script=\"touch shipped\"]
  revise [shape=parallelogram, script=\"touch revised\"]
  start -> review
  review -> ship [label=\"[A] Approve\"]
  review -> revise [label=\"[R] Revise\"]
  ship -> exit
  revise -> exit
}
";
