//! An imported run reads back through [`PgRunStore`] as it reads through the local
//! store, a running run is left out, a second import skips what the first copied, and
//! blobs are copied byte for byte (a damaged one is reported, not copied).

use fabro_engine::backend::{ChangeHint, Checkpoint, Emitter, Opening, RunRecords};
use fabro_engine::configuration::RunConfig;
use fabro_engine::local::StageDir;
use fabro_engine::{BlobStore, Event, FsBlobStore, FsRunStore};
use fabro_test_support::TestDatabase;

use super::*;
use crate::PgRunStore;

fn manifest(run_id: &str, started_at: &str) -> Manifest {
    serde_json::from_value(serde_json::json!({
        "run_id": run_id, "workflow_name": "w", "workflow_path": "w.fabro", "goal": "g",
        "node_count": 3, "edge_count": 2, "base_sha": null, "run_branch": null,
        "started_at": started_at, "fabro_version": "0", "dry_run": false,
        "parent_run_id": null, "vars": {"who": "me"}, "simulated_llm": true,
    }))
    .expect("a manifest")
}

fn checkpoint(run_id: &str, completed: &[&str], timestamp: &str) -> Checkpoint {
    serde_json::from_value(serde_json::json!({
        "version": 1, "run_id": run_id, "timestamp": timestamp,
        "current_node": completed.last(), "next_node_id": null,
        "completed_nodes": completed, "node_retries": {}, "node_visits": {},
        "epoch_node_visits": {}, "node_outcomes": {}, "context_values": {"k": "v"},
        "logs": [], "git_commit_sha": null, "loop_failure_signatures": {},
        "restart_failure_signatures": {}, "restart_count": 0,
        "stage_rank": completed.len(), "simulated_cursors": {}, "run_status": "success",
    }))
    .expect("a checkpoint")
}

const STATUS: &str = r#"{"node_id": "work", "visit": 1, "rank": 1, "attempt": 1, "handler": "command",
  "status": "success", "outcome": "success", "failure_reason": null, "failure_class": null,
  "failure_signature": null, "preferred_next_label": null, "suggested_next_ids": [],
  "context_updates": {}, "notes": null, "files_touched": [], "model": null, "provider": null,
  "usage": null, "started_at": "2026-01-01T00:00:00Z", "finished_at": "2026-01-01T00:00:01Z",
  "duration_ms": 1000}"#;

/// Records a run in `home` as an execution would: records, two checkpoints, three
/// events, one stage with its files; `ended` registers its end and releases its lock,
/// else the lock is returned, held (a running run).
fn local_run(
    store: &FsRunStore,
    run_id: &str,
    started_at: &str,
    ended: Option<RunStatus>,
) -> Option<Box<dyn fabro_engine::backend::RunLease>> {
    let run = RunId::from(run_id);
    let run_dir = store.paths(&run).run_dir().to_path_buf();
    fs_err::create_dir_all(&run_dir).expect("run dir");
    let manifest = manifest(run_id, started_at);
    store
        .write_records(
            &run,
            &RunRecords {
                graph: "digraph w { start -> work -> exit }",
                children: &[("sub/child.fabro".to_owned(), "digraph c {}".to_owned())],
                config: &RunConfig::default(),
                manifest: &manifest,
                run_dir: None,
            },
        )
        .expect("records");
    let lease = store.lock(&run).expect("locks");
    store.register_start(&manifest, &run_dir).expect("starts");
    let mut log = store.open_checkpoints(&run, Opening::New).expect("opens");
    for (completed, time) in [
        (&["start"][..], "2026-01-01T00:00:01Z"),
        (&["start", "work"][..], "2026-01-01T00:00:02Z"),
    ] {
        log.write(
            &checkpoint(run_id, completed, time).view(),
            &ChangeHint::everything(),
        )
        .expect("writes");
    }
    drop(log);
    let opened = store.open_events(&run, Opening::New).expect("opens");
    let emitter = Emitter::with_log(run_id, opened.log, opened.next_id, Vec::new());
    for code in ["one", "two", "three"] {
        emitter.emit(Event::warning(None, code, "m"));
    }
    drop(emitter);
    let stage = StageDir {
        rank: 1,
        node_id: "work".to_owned(),
        visit: 1,
        path: run_dir.join("stages/001-work@1"),
    };
    fs_err::create_dir_all(&stage.path).expect("stage dir");
    fs_err::write(stage.path.join("status.json"), STATUS).expect("writes");
    fs_err::write(stage.path.join("stdout.log"), [0xff, b'o', b'k']).expect("writes");
    store.save_stage(&run, &stage).expect("saves");
    match ended {
        Some(status) => {
            store.register_end(&run, status).expect("ends");
            None
        }
        None => Some(lease),
    }
}

/// Everything a reader of `store` sees of `run`.
fn readings(store: &dyn RunStore, run: &str) -> String {
    let run = RunId::from(run);
    let mut journal = Vec::new();
    store
        .replay_checkpoints(&run, &mut |checkpoint| journal.push(checkpoint.clone()))
        .expect("replays");
    let stages = store.stages(&run).expect("stages");
    let files: Vec<_> = stages
        .iter()
        .flat_map(|stage| {
            STAGE_FILES.iter().map(|name| {
                (
                    stage.rank,
                    *name,
                    store.stage_file(&run, stage.rank, name).expect("reads"),
                )
            })
        })
        .collect();
    let lines: Vec<String> = store
        .event_reader(&run, 0)
        .read_new()
        .expect("events")
        .into_iter()
        .map(|event| event.line)
        .collect();
    let record = store.resolve(run.as_str()).expect("listed");
    let mut parts = store.record_parts(&record).expect("parts");
    // The document lists no files; the file store leaves them out, others need not.
    for stage in &mut parts.stages {
        stage.files.clear();
    }
    format!(
        "{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{journal:?}\n{:?}\n{stages:?}\n{files:?}\n{lines:?}\n{:?}\n{:?}",
        store.read_manifest(&run).expect("manifest"),
        store.read_config(&run).expect("config"),
        store.read_workflow(&run).expect("workflow"),
        store.load_checkpoint(&run).expect("checkpoint"),
        store.pending_rewind(&run).expect("rewind"),
        store.read_events(&run, 2).expect("events"),
        record,
        parts,
    )
}

#[test]
fn imported_runs_read_back_as_they_read_locally_and_are_imported_once() {
    let Some(database) = TestDatabase::create("imported_runs_read_back_as_locally") else {
        return;
    };
    let home = tempfile::tempdir().expect("a home");
    let local = FsRunStore::new(home.path());
    assert!(local_run(
        &local,
        "r1",
        "2026-01-01T00:00:00Z",
        Some(RunStatus::Success)
    )
    .is_none());
    assert!(local_run(
        &local,
        "r2",
        "2026-01-02T00:00:00Z",
        Some(RunStatus::Canceled)
    )
    .is_none());
    let _running = local_run(&local, "r3", "2026-01-03T00:00:00Z", None);
    let broken = local.paths(&RunId::from("r4"));
    fs_err::create_dir_all(broken.run_dir()).expect("run dir");
    fs_err::write(broken.manifest(), "{").expect("writes");
    let blobs = FsBlobStore::new(home.path());
    let (stored, _) = blobs.put(b"\"a stage's output\"").expect("stores");
    let damaged = blobs.path_of_ref(&BlobRef::of_hex(&hex_digest(b"other")));
    fs_err::create_dir_all(damaged.parent().expect("a directory")).expect("mkdir");
    fs_err::write(&damaged, "not what it is named after").expect("writes");

    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let store = runtime.block_on(async {
        let store = PgStore::connect(&database.url()).await.expect("connects");
        store.migrate().await.expect("migrates");
        store
    });
    let target = ObjectBlobStore::from_url("memory://").expect("a blob store");
    let import = || {
        let mut notes = Vec::new();
        let summary = runtime
            .block_on(import_home(
                home.path(),
                &store,
                Some(&target),
                &mut |note| {
                    notes.push(note.clone());
                },
            ))
            .expect("imports");
        (summary, notes)
    };
    let (summary, notes) = import();
    assert_eq!(
        (
            summary.imported,
            summary.unfinished,
            summary.already_there,
            summary.unreadable
        ),
        (2, 1, 0, 1)
    );
    assert_eq!(
        (summary.blobs_copied, summary.blobs_unusable),
        (1, 1),
        "{notes:?}"
    );
    let run_notes = |notes: &[ImportNote]| -> Vec<(String, RunOutcome)> {
        notes
            .iter()
            .filter_map(|note| match note {
                ImportNote::Run { run_id, outcome } => Some((run_id.clone(), outcome.clone())),
                ImportNote::UnusableBlob { .. } => None,
            })
            .collect()
    };
    let mut outcomes = run_notes(&notes);
    let broken_at = outcomes
        .iter()
        .position(|(run_id, _)| run_id == "r4")
        .expect("r4 is reported");
    let (_, unreadable) = outcomes.remove(broken_at);
    assert!(
        matches!(&unreadable, RunOutcome::Unreadable(reason) if reason.contains("manifest.json")),
        "{unreadable:?}"
    );
    assert_eq!(
        outcomes,
        [
            ("r1".to_owned(), RunOutcome::Imported(RunStatus::Success)),
            ("r2".to_owned(), RunOutcome::Imported(RunStatus::Canceled)),
            ("r3".to_owned(), RunOutcome::Unfinished(RunStatus::Running)),
        ]
    );
    assert!(notes.contains(&ImportNote::UnusableBlob {
        path: damaged,
        reason: "its content does not have the digest it is named after".to_owned(),
    }));
    assert_eq!(
        target.read(&stored).expect("copied"),
        b"\"a stage's output\""
    );

    let shared = PgRunStore::new(&store).expect("a run store");
    for run in ["r1", "r2"] {
        assert_eq!(readings(&shared, run), readings(&local, run), "{run}");
    }
    assert!(matches!(
        shared.read_manifest(&RunId::from("r3")),
        Err(fabro_engine::StoreError::Missing { .. })
    ));
    assert_eq!(
        database.query(
            "SELECT string_agg(seq::text, ',' ORDER BY seq) FROM run_journal WHERE run_id = 'r1'"
        ),
        "1,2"
    );
    assert_eq!(
        database.query("SELECT created_at = '2026-01-01T00:00:00Z' FROM runs WHERE run_id = 'r1'"),
        "t"
    );

    let (summary, notes) = import();
    assert_eq!(
        (summary.imported, summary.already_there, summary.unfinished),
        (0, 2, 1)
    );
    assert_eq!((summary.blobs_copied, summary.blobs_present), (0, 1));
    assert!(run_notes(&notes).contains(&("r1".to_owned(), RunOutcome::AlreadyThere)));
}

#[test]
fn a_home_without_runs_or_blobs_imports_nothing() {
    let Some(database) = TestDatabase::create("a_home_without_runs_imports_nothing") else {
        return;
    };
    let home = tempfile::tempdir().expect("a home");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let summary = runtime
        .block_on(async {
            let store = PgStore::connect(&database.url()).await.expect("connects");
            store.migrate().await.expect("migrates");
            let target = ObjectBlobStore::from_url("memory://").expect("a blob store");
            import_home(home.path(), &store, Some(&target), &mut |_| {}).await
        })
        .expect("imports");
    assert_eq!(summary, ImportSummary::default());
}
