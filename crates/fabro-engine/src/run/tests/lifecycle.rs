//! [`start`] and [`resume`], the clients' way into a run: a new run in memory, the
//! refusals of a resume (no run, a held lock, a finished run) with their error kinds,
//! and resumes from the newest checkpoint of a file-checkpointed and of a
//! git-checkpointed run.

use std::path::Path;

use super::*;
use crate::git::test_repo::TestRepo;
use crate::record::RunOrigin;

/// A start request for `source`, written to `dir/workflow.fabro`, run in `dir` with the
/// simulated provider whatever the environment says.
fn request<'a>(
    home: &Path,
    dir: &Path,
    source: &str,
    interviewer: Option<Arc<dyn Interviewer>>,
) -> StartRequest<'a> {
    let workflow_path = dir.join("workflow.fabro");
    fs_err::write(&workflow_path, source).expect("workflow written");
    StartRequest {
        fabro_home: home.to_path_buf(),
        workflow_path,
        loader: &FsLoader,
        config: RunConfig::default(),
        goal: None,
        vars: BTreeMap::new(),
        dry_run: false,
        run_id: Some("run-1".to_owned()),
        work_dir: Some(dir.to_path_buf()),
        detached_worker: false,
        origin: RunOrigin::Server,
        repository: None,
        overrides: Overrides {
            provider: Some("simulated".to_owned()),
            interviewer,
            ..Overrides::default()
        },
    }
}

/// A resume request of the simulated provider, approving every gate.
fn approving<'a>(home: &Path, history: Option<&'a crate::git::RunHistory>) -> ResumeRequest<'a> {
    ResumeRequest {
        fabro_home: home.to_path_buf(),
        history,
        repository: None,
        overrides: Overrides {
            provider: Some("simulated".to_owned()),
            auto_approve: true,
            ..Overrides::default()
        },
    }
}

async fn execute(prepared: PreparedRun, cancel: CancellationToken) -> RunReport {
    prepared
        .execute(cancel, Vec::new())
        .await
        .expect("executes")
}

/// Runs GATED in `dir` until its gate, where the run is cancelled.
async fn cancelled_at_the_gate(stores: &Stores, home: &Path, dir: &Path) -> RunReport {
    let cancel = CancellationToken::new();
    let interviewer: Arc<dyn Interviewer> = Arc::new(CancelWhenAsked(cancel.clone()));
    let prepared =
        start(stores.clone(), request(home, dir, GATED, Some(interviewer))).expect("starts");
    let report = execute(prepared, cancel).await;
    assert_eq!(report.status, RunStatus::Canceled);
    report
}

#[tokio::test]
async fn start_runs_a_new_run_with_its_records_in_the_stores() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("home");
    let runs = MemoryRunStore::new();
    let stores = Stores {
        runs: Arc::new(runs.clone()),
        blobs: Arc::new(crate::blob::MemoryBlobStore::new()),
    };
    let mut request = request(&home, dir.path(), THREE, None);
    request.vars.insert("extra".to_owned(), "1".to_owned());
    request.overrides.limits.max_stages = Some(40);
    let prepared = start(stores.clone(), request).expect("starts");
    let report = execute(prepared, CancellationToken::new()).await;
    assert_eq!(report.status, RunStatus::Success);
    let stored = runs.run(&RunId::from("run-1")).expect("stored");
    let manifest = stored.manifest.expect("manifest");
    assert_eq!(manifest.origin, Some(RunOrigin::Server));
    // The limits are part of the recorded configuration.
    let config = stores
        .runs
        .read_config(&RunId::from("run-1"))
        .expect("config");
    assert_eq!(config.run.max_stages, Some(40));

    // A second start of the same id is refused as a conflict.
    let again = start(stores, self::request(&home, dir.path(), THREE, None));
    match again {
        Err(error) => assert_eq!(error.kind(), ErrorKind::Conflict, "{error}"),
        Ok(_) => panic!("a run id was started twice"),
    }
}

#[test]
fn resume_refuses_an_unknown_run_a_held_lock_and_a_run_without_checkpoint() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("home");
    let stores = Stores::in_memory();
    let run_id = RunId::from("run-1");
    let refusal = |stores: &Stores| match resume(stores.clone(), &run_id, approving(&home, None)) {
        Err(error) => error,
        Ok(_) => panic!("resumed"),
    };
    let unknown = refusal(&stores);
    assert!(matches!(unknown, RunError::NoRunDir { .. }), "{unknown}");
    assert_eq!(unknown.kind(), ErrorKind::NotFound);

    fs_err::create_dir_all(home.join("scratch").join("run-1")).expect("scratch");
    let lease = stores.runs.lock(&run_id).expect("locks");
    let locked = refusal(&stores);
    assert_eq!(
        locked.to_string(),
        "run run-1 is being resumed by another process"
    );
    assert_eq!(locked.kind(), ErrorKind::Conflict);
    drop(lease);

    // Without a manifest the run cannot be resumed, and the lock is let go again.
    let unrecorded = refusal(&stores);
    assert!(
        matches!(
            unrecorded,
            RunError::Resume {
                source: ResumeError::Records {
                    record: "manifest",
                    ..
                },
                ..
            }
        ),
        "{unrecorded}"
    );
    assert_eq!(unrecorded.kind(), ErrorKind::Conflict);
    assert!(!stores.runs.is_active(&run_id));
}

#[tokio::test]
async fn resume_continues_a_file_checkpointed_run_and_refuses_it_finished() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("home");
    let stores = Stores::local(&home);
    cancelled_at_the_gate(&stores, &home, dir.path()).await;
    let run_id = RunId::from("run-1");
    let prepared = resume(stores.clone(), &run_id, approving(&home, None)).expect("resumes");
    let checkpoint = prepared.start().checkpoint().expect("a checkpoint");
    assert_eq!(checkpoint.next_node_id.as_deref(), Some("review"));
    assert_eq!(
        prepared.options.work_dir.as_deref(),
        Some(dir.path()),
        "the working directory of the run's checkpoint"
    );
    let report = execute(prepared, CancellationToken::new()).await;
    assert_eq!(report.status, RunStatus::Success);

    let finished = match resume(stores, &run_id, approving(&home, None)) {
        Err(error) => error,
        Ok(_) => panic!("a finished run was resumed"),
    };
    assert!(
        matches!(finished, RunError::AlreadyFinished { .. }),
        "{finished}"
    );
    assert_eq!(finished.kind(), ErrorKind::Conflict);
}

#[tokio::test]
async fn resume_continues_a_git_checkpointed_run_from_its_metadata_history() {
    let Some(repo) = TestRepo::new() else {
        return;
    };
    let home = repo.outside("home");
    let stores = Stores::local(&home);
    let report = cancelled_at_the_gate(&stores, &home, &repo.path()).await;
    let run_id = RunId::from("run-1");
    let manifest = stores.runs.read_manifest(&run_id).expect("manifest");
    assert!(manifest.run_branch.is_some(), "the run checkpoints to git");
    // The store reads the newest checkpoint from the metadata history, not from the
    // run directory's files (gone here): it names the run-branch commit of the last
    // completed stage.
    let paths = RunPaths::new(&home, "run-1");
    fs_err::remove_file(crate::checkpoint::journal_path(&report.run_dir)).expect("journal");
    fs_err::remove_file(paths.checkpoint()).expect("checkpoint file");
    let loaded = stores
        .runs
        .load_checkpoint(&run_id)
        .expect("loads")
        .expect("a checkpoint");
    let plan_commit = repo.git(&["rev-parse", "fabro/run/run-1"]);
    assert_eq!(loaded.git_commit_sha.as_deref(), Some(plan_commit.as_str()));
    assert_eq!(loaded.completed_nodes, ["start", "plan"]);

    let prepared = resume(stores.clone(), &run_id, approving(&home, None)).expect("resumes");
    assert_eq!(
        prepared
            .start()
            .checkpoint()
            .and_then(|checkpoint| checkpoint.git_commit_sha.as_deref()),
        Some(plan_commit.as_str())
    );
    let report = execute(prepared, CancellationToken::new()).await;
    assert_eq!(report.status, RunStatus::Success);
    let events = stores.runs.read_events(&run_id, 1).expect("events");
    let resumed_from = events
        .iter()
        .rposition(|event| event.name() == "WorkflowRunStarted")
        .expect("a resumed start");
    assert_eq!(
        started_stages(&events[resumed_from..], 0),
        ["review", "build", "exit"]
    );
}

#[tokio::test]
async fn resume_restores_a_lost_run_from_the_repositorys_metadata() {
    let Some(repo) = TestRepo::new() else {
        return;
    };
    let home = repo.outside("home");
    let stores = Stores::local(&home);
    let report = cancelled_at_the_gate(&stores, &home, &repo.path()).await;
    fs_err::remove_dir_all(&report.run_dir).expect("run directory removed");
    let run_id = RunId::from("run-1");
    let lost = match resume(stores.clone(), &run_id, approving(&home, None)) {
        Err(error) => error,
        Ok(_) => panic!("resumed without records"),
    };
    assert!(matches!(lost, RunError::NoRunDir { .. }), "{lost}");

    let history = crate::git::RunHistory::open(&repo.path())
        .expect("opens")
        .expect("a repository");
    let prepared =
        resume(stores.clone(), &run_id, approving(&home, Some(&history))).expect("resumes");
    let report = execute(prepared, CancellationToken::new()).await;
    assert_eq!(report.status, RunStatus::Success);
    let manifest = stores.runs.read_manifest(&run_id).expect("manifest");
    assert_eq!(manifest.goal, "Ship it");
}

/// Asks the store to cancel the run when asked, as a server other than the one executing
/// the run does (SPEC 18.2), and then waits forever.
struct CancelThroughStore(MemoryRunStore);

impl Interviewer for CancelThroughStore {
    fn ask<'a>(&'a self, _question: &'a Question) -> BoxFuture<'a, Reply> {
        Box::pin(async move {
            let requested = self.0.request_cancel(&RunId::from("run-1"));
            assert!(matches!(requested, Ok(true)), "{requested:?}");
            std::future::pending().await
        })
    }
}

#[tokio::test]
async fn a_cancel_requested_through_the_store_cancels_the_run_and_ends_with_its_resume() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("home");
    let runs = MemoryRunStore::new();
    let stores = Stores {
        runs: Arc::new(runs.clone()),
        blobs: Arc::new(crate::blob::MemoryBlobStore::new()),
    };
    let run_id = RunId::from("run-1");
    assert!(
        !stores.runs.cancel_requested(&run_id).expect("answers"),
        "no request before the run"
    );
    let interviewer: Arc<dyn Interviewer> = Arc::new(CancelThroughStore(runs.clone()));
    let prepared = start(
        stores.clone(),
        request(&home, dir.path(), GATED, Some(interviewer)),
    )
    .expect("starts");
    // Nothing cancels the run but the request in the store.
    let report = execute(prepared, CancellationToken::new()).await;
    assert_eq!(report.status, RunStatus::Canceled);
    assert!(stores.runs.cancel_requested(&run_id).expect("answers"));

    // The request was for that execution: the resume starts afresh and finishes.
    let prepared = resume(stores.clone(), &run_id, approving(&home, None)).expect("resumes");
    let report = execute(prepared, CancellationToken::new()).await;
    assert_eq!(report.status, RunStatus::Success);
    assert!(!stores.runs.cancel_requested(&run_id).expect("answers"));
}
