//! A run on the shared store (PostgreSQL and an S3 server, both real, on loopback) whose
//! database or object store goes away in the middle of a stage (SPEC 18.4.4, issue 31
//! acceptance 4): the run stops `canceled` as an engine error, nothing it stored is lost,
//! and a resume after the service is back finishes it with the event ids continuing.
//! The services are lost through a [`Gate`], a proxy the test closes, so that they keep
//! running and keep what they hold.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabro_engine::configuration::RunConfig;
use fabro_engine::{
    resume, start, FsLoader, Overrides, ResumeRequest, RunId, RunOrigin, RunReport, RunStatus,
    StartRequest, Stores,
};
use fabro_store::{ObjectBlobStore, PgRunStore, PgStore};
use fabro_test_support::{Gate, S3Server, TestDatabase};
use tokio_util::sync::CancellationToken;

const RUN_ID: &str = "run-fault";

/// `first` stores its output; `wait` signals that it runs, waits for the test's word,
/// then ends, so its output is stored while the service is gone.
fn workflow(dir: &Path) -> String {
    let ready = dir.join("ready");
    let go = dir.join("go");
    format!(
        r#"digraph faults {{
    graph [goal="survive a lost store"]
    start [shape=Mdiamond]
    exit [shape=Msquare]
    first [shape=parallelogram, script="echo one"]
    wait [shape=parallelogram, script="touch {ready}; while [ ! -e {go} ]; do sleep 0.05; done; echo two"]
    start -> first -> wait -> exit
}}
"#,
        ready = ready.display(),
        go = go.display()
    )
}

/// The services of one test: a database and an S3 bucket, each behind a gate.
struct Shared {
    _database: TestDatabase,
    _s3: S3Server,
    database_gate: Gate,
    blobs_gate: Gate,
    stores: Stores,
}

fn address_of(endpoint: &str) -> SocketAddr {
    endpoint
        .trim_start_matches("http://")
        .parse()
        .expect("an S3 endpoint on loopback")
}

fn shared(test: &str) -> Option<Shared> {
    let database = TestDatabase::create(test)?;
    let s3 = S3Server::start(test, "fabro-faults")?;
    let database_gate = Gate::start("127.0.0.1:5432".parse().expect("an address"));
    let blobs_gate = Gate::start(address_of(s3.endpoint()));
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/{}",
        database_gate.port(),
        database.name()
    );
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let store = runtime.block_on(async {
        let store = PgStore::connect(&url).await.expect("connects");
        store.migrate().await.expect("migrates");
        store
    });
    let runs = PgRunStore::new(&store).expect("a run store");
    let endpoint = format!("http://{}", blobs_gate.address());
    let blobs = ObjectBlobStore::from_url_with(
        &format!("s3://{}/team", s3.bucket()),
        &[
            ("aws_endpoint", endpoint.as_str()),
            ("aws_region", "us-east-1"),
            ("aws_access_key_id", "testing"),
            ("aws_secret_access_key", "testing-FAKE-secret"),
        ],
        Duration::from_millis(500),
    )
    .expect("an S3 blob store");
    Some(Shared {
        _database: database,
        _s3: s3,
        database_gate,
        blobs_gate,
        stores: Stores {
            runs: Arc::new(runs),
            blobs: Arc::new(blobs),
        },
    })
}

fn overrides() -> Overrides {
    Overrides {
        provider: Some("simulated".to_owned()),
        auto_approve: true,
        ..Overrides::default()
    }
}

fn start_request<'a>(home: &Path, dir: &Path) -> StartRequest<'a> {
    let workflow_path = dir.join("faults.fabro");
    fs_err::write(&workflow_path, workflow(dir)).expect("workflow written");
    StartRequest {
        fabro_home: home.to_path_buf(),
        workflow_path,
        loader: &FsLoader,
        config: RunConfig::default(),
        goal: None,
        vars: BTreeMap::new(),
        dry_run: false,
        run_id: Some(RUN_ID.to_owned()),
        work_dir: Some(dir.to_path_buf()),
        detached_worker: false,
        origin: RunOrigin::Server,
        repository: None,
        overrides: overrides(),
    }
}

fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs the workflow until `wait` runs, lets `lose` take a service away, lets `wait` end,
/// and returns the report.
fn run_losing(shared: &Shared, home: &Path, dir: &Path, lose: impl FnOnce()) -> RunReport {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let prepared = start(shared.stores.clone(), start_request(home, dir)).expect("starts");
    let execution = runtime.spawn(async move {
        prepared
            .execute(CancellationToken::new(), Vec::new())
            .await
            .expect("executes")
    });
    wait_for(&dir.join("ready"));
    lose();
    fs_err::write(dir.join("go"), "").expect("the word");
    runtime.block_on(execution).expect("the run's task")
}

fn resumed(shared: &Shared, home: &Path) -> RunReport {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let request = ResumeRequest {
        fabro_home: home.to_path_buf(),
        history: None,
        repository: None,
        overrides: overrides(),
    };
    let prepared = resume(shared.stores.clone(), &RunId::from(RUN_ID), request).expect("resumes");
    runtime.block_on(async {
        prepared
            .execute(CancellationToken::new(), Vec::new())
            .await
            .expect("executes")
    })
}

/// The stored events' ids and kinds.
fn events(shared: &Shared) -> Vec<(u64, String)> {
    shared
        .stores
        .runs
        .read_events(&RunId::from(RUN_ID), 1)
        .expect("events readable")
        .into_iter()
        .map(|envelope| (envelope.id, envelope.name().to_owned()))
        .collect()
}

fn assert_engine_error(report: &RunReport) {
    assert_eq!(report.status, RunStatus::Canceled, "{:?}", report.reason);
    let reason = report.reason.as_deref().unwrap_or_default();
    assert!(reason.starts_with("engine error"), "{reason}");
}

/// Ids 1..=n, each once, in order.
fn assert_gap_free(events: &[(u64, String)]) {
    let ids: Vec<u64> = events.iter().map(|(id, _)| *id).collect();
    let expected: Vec<u64> = (1..=u64::try_from(ids.len()).expect("few events")).collect();
    assert_eq!(ids, expected, "{events:?}");
}

fn dirs(test: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let temp = tempfile::Builder::new()
        .prefix(test)
        .tempdir()
        .expect("temp dir");
    let home = temp.path().join("home");
    let work = temp.path().join("work");
    fs_err::create_dir_all(&work).expect("work dir");
    (temp, home, work)
}

#[test]
fn a_blob_store_that_refuses_writes_cancels_the_run_and_a_resume_finishes_it() {
    let test = "a_blob_store_that_refuses_writes_cancels_the_run_and_a_resume_finishes_it";
    let Some(shared) = shared(test) else { return };
    let (_temp, home, work) = dirs(test);

    let report = run_losing(&shared, &home, &work, || shared.blobs_gate.close());
    assert_engine_error(&report);
    let before = events(&shared);
    assert_gap_free(&before);
    assert!(before.iter().any(|(_, kind)| kind == "StageCompleted"));

    shared.blobs_gate.open();
    let report = resumed(&shared, &home);
    assert_eq!(report.status, RunStatus::Success, "{:?}", report.reason);
    let after = events(&shared);
    assert_gap_free(&after);
    // Nothing stored before the fault was lost or rewritten.
    assert_eq!(&after[..before.len()], &before[..]);
}

#[test]
fn a_database_lost_mid_stage_cancels_the_run_and_a_resume_finishes_it() {
    let test = "a_database_lost_mid_stage_cancels_the_run_and_a_resume_finishes_it";
    let Some(shared) = shared(test) else { return };
    let (_temp, home, work) = dirs(test);

    let mut seen = Vec::new();
    let report = run_losing(&shared, &home, &work, || {
        seen = events(&shared);
        shared.database_gate.close();
    });
    assert_engine_error(&report);

    shared.database_gate.open();
    let before = events(&shared);
    // What was stored before the database went away is all still there.
    assert!(
        before.len() >= seen.len(),
        "{before:?} lost some of {seen:?}"
    );
    assert_eq!(&before[..seen.len()], &seen[..]);
    assert_gap_free(&before);

    let report = resumed(&shared, &home);
    assert_eq!(report.status, RunStatus::Success, "{:?}", report.reason);
    let after = events(&shared);
    assert_gap_free(&after);
    assert_eq!(&after[..before.len()], &before[..]);
    assert_eq!(
        after.last().map(|(_, kind)| kind.as_str()),
        Some("WorkflowRunCompleted")
    );
}
