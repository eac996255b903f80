//! [`PgRunStore`] behaves as the engine's other run stores (the engine's
//! `store/tests.rs`), through the [`RunStore`] trait only, on a database of each
//! test's own; a run's lock is a session of its own.

use fabro_engine::backend::{ChangeHint, Emitter};
use fabro_engine::configuration::RunConfig;
use fabro_engine::gate::Question;
use fabro_engine::local::RunPaths;
use fabro_engine::{Event, FiledAnswer, StoredEvent};
use fabro_test_support::TestDatabase;

use super::*;

fn manifest(run_id: &str, started_at: &str) -> Manifest {
    serde_json::from_value(serde_json::json!({
        "run_id": run_id,
        "workflow_name": "w",
        "workflow_path": "w.fabro",
        "goal": "g",
        "node_count": 3,
        "edge_count": 2,
        "base_sha": null,
        "run_branch": null,
        "started_at": started_at,
        "fabro_version": "0",
        "dry_run": false,
        "parent_run_id": null,
        "vars": {},
        "simulated_llm": true,
    }))
    .expect("a manifest")
}

fn checkpoint(run_id: &str, completed: &[&str], next: Option<&str>) -> Checkpoint {
    Checkpoint {
        version: 1,
        run_id: RunId::from(run_id),
        timestamp: "t".to_owned(),
        current_node: completed.last().map(|node| (*node).to_owned()),
        next_node_id: next.map(str::to_owned),
        completed_nodes: completed.iter().map(|node| (*node).to_owned()).collect(),
        node_retries: Default::default(),
        node_visits: Default::default(),
        epoch_node_visits: Default::default(),
        node_outcomes: Default::default(),
        context_values: Default::default(),
        logs: Vec::new(),
        git_commit_sha: None,
        loop_failure_signatures: Default::default(),
        restart_failure_signatures: Default::default(),
        restart_count: 0,
        stage_rank: u32::try_from(completed.len()).unwrap_or(u32::MAX),
        simulated_cursors: Default::default(),
        llm_tokens: 0,
        llm_cost_usd: 0.0,
        run_status: RunStatus::Running,
    }
}

/// A migrated store on a fresh database; `None` where PostgreSQL is missing (which
/// fails the test where `CI` is set).
fn store(test: &str) -> Option<(TestDatabase, PgRunStore)> {
    let database = TestDatabase::create(test)?;
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let store = runtime.block_on(async {
        let store = PgStore::connect(&database.url()).await.expect("connects");
        store.migrate().await.expect("migrates");
        store
    });
    Some((database, PgRunStore::new(&store).expect("a run store")))
}

#[test]
fn records_checkpoints_and_the_index_round_trip() {
    let Some((_database, store)) = store("pg_records_checkpoints_and_the_index_round_trip") else {
        return;
    };
    let run = RunId::from("r1");
    let config = RunConfig::default();
    let manifest = manifest("r1", "2026-01-01T00:00:00Z");
    store
        .write_records(
            &run,
            &RunRecords {
                graph: "digraph w {}",
                children: &[("child.fabro".to_owned(), "digraph c {}".to_owned())],
                config: &config,
                manifest: &manifest,
                run_dir: None,
            },
        )
        .expect("records");
    assert_eq!(store.read_manifest(&run).expect("manifest"), manifest);
    assert_eq!(store.read_config(&run).expect("config"), config);
    let workflow = store.read_workflow(&run).expect("workflow");
    assert_eq!(workflow.graph, "digraph w {}");
    assert_eq!(
        workflow.children,
        vec![("child.fabro".to_owned(), "digraph c {}".to_owned())]
    );
    assert!(store.load_checkpoint(&run).expect("loads").is_none());
    assert!(matches!(
        store.read_manifest(&RunId::from("nope")),
        Err(StoreError::Missing { .. })
    ));

    let mut log = store.open_checkpoints(&run, Opening::New).expect("opens");
    let first = checkpoint("r1", &["start"], Some("a"));
    log.write(&first.view(), &ChangeHint::everything())
        .expect("writes");
    let second = checkpoint("r1", &["start", "a"], Some("b"));
    let bytes = log
        .write(&second.view(), &ChangeHint::everything())
        .expect("writes")
        .to_vec();
    assert_eq!(
        serde_json::from_slice::<Checkpoint>(&bytes).expect("json"),
        second
    );
    drop(log);
    assert_eq!(
        store.load_checkpoint(&run).expect("loads"),
        Some(second.clone())
    );
    let resumed = store
        .open_checkpoints(&run, Opening::Resume)
        .expect("opens");
    assert_eq!(resumed.last(), Some(&second));

    let lease = store.lock(&run).expect("locks");
    assert!(store.is_active(&run));
    assert!(
        matches!(store.lock(&run), Err(StoreError::Locked { .. })),
        "a second execution is refused"
    );
    store
        .register_start(&manifest, Path::new("/scratch/r1"))
        .expect("registers");
    let listed = store.list_runs().expect("lists");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].status, RunStatus::Running);
    assert_eq!(listed[0].run_dir, Path::new("/scratch/r1"));
    store
        .register_end(&run, RunStatus::Success)
        .expect("registers");
    drop(lease);
    assert!(!store.is_active(&run));
    let listed = store.list_runs().expect("lists");
    assert_eq!(
        (listed[0].run_id.as_str(), listed[0].status),
        ("r1", RunStatus::Success)
    );
    assert!(listed[0]
        .finished_at
        .as_deref()
        .is_some_and(|time| time.ends_with('Z')));
}

/// A stage costs its journal record, not the run's whole state: the whole checkpoint
/// is stored with the first record, every `RECORDS_PER_WHOLE` records after it and at
/// the run's end; readers get the newest checkpoint by replaying the records after it,
/// also after a resume.
#[test]
fn the_whole_checkpoint_is_stored_every_so_many_records_and_read_with_those_after_it() {
    let Some((database, store)) = store("pg_the_whole_checkpoint_every_so_many_records") else {
        return;
    };
    let run = RunId::from("long");
    let names: Vec<String> = (0..150).map(|node| format!("node{node:03}")).collect();
    let state = |count: usize| {
        let completed: Vec<&str> = names[..count].iter().map(String::as_str).collect();
        checkpoint("long", &completed, Some("next"))
    };
    let stored_seq = || database.query("SELECT seq FROM run_checkpoints WHERE run_id = 'long'");
    let mut log = store.open_checkpoints(&run, Opening::New).expect("opens");
    let per_whole = usize::try_from(logs::RECORDS_PER_WHOLE).expect("small");
    for count in 1..=100 {
        let bytes = log
            .write(&state(count).view(), &ChangeHint::everything())
            .expect("writes")
            .to_vec();
        assert_eq!(
            serde_json::from_slice::<Checkpoint>(&bytes).expect("json"),
            state(count),
            "the bytes of checkpoint {count}"
        );
        if count == 1 || count == per_whole || count == per_whole + 1 || count == 100 {
            assert_eq!(
                store.load_checkpoint(&run).expect("loads"),
                Some(state(count)),
                "checkpoint {count}"
            );
        }
    }
    // Stored whole at the first record and at record 1 + RECORDS_PER_WHOLE.
    assert_eq!(stored_seq(), (1 + per_whole).to_string());
    drop(log);

    // A resumed run's log stores its first checkpoint whole.
    let mut log = store
        .open_checkpoints(&run, Opening::Resume)
        .expect("opens");
    assert_eq!(log.last(), Some(&state(100)));
    log.write(&state(101).view(), &ChangeHint::everything())
        .expect("writes");
    assert_eq!(stored_seq(), "101");
    for count in 102..=110 {
        log.write(&state(count).view(), &ChangeHint::everything())
            .expect("writes");
    }
    assert_eq!(stored_seq(), "101");
    assert_eq!(
        store.load_checkpoint(&run).expect("loads"),
        Some(state(110))
    );

    // The run's end is stored whole (the listing reads its status from it).
    let mut ended = state(111);
    ended.run_status = RunStatus::Success;
    log.write(&ended.view(), &ChangeHint::everything())
        .expect("writes");
    assert_eq!(stored_seq(), "111");
    assert_eq!(
        store.load_checkpoint(&run).expect("loads"),
        Some(ended.clone())
    );
    let mut replayed = Vec::new();
    store
        .replay_checkpoints(&run, &mut |checkpoint| replayed.push(checkpoint.clone()))
        .expect("replays");
    assert_eq!(replayed.len(), 111);
    assert_eq!(replayed.last(), Some(&ended));
}

/// SPEC 20.2, 20.3: every checkpoint comes back in order, and a rewind's record is kept
/// until it is cleared.
#[test]
fn checkpoints_replay_in_order_and_a_pending_rewind_is_kept_until_cleared() {
    let Some((_database, store)) = store("pg_checkpoints_replay_and_a_pending_rewind") else {
        return;
    };
    let run = RunId::from("r1");
    let config = RunConfig::default();
    let manifest = manifest("r1", "2026-01-01T00:00:00Z");
    let pending = |checkpoint: Checkpoint| PendingRewind {
        k: 1,
        to_rank: 1,
        node_id: "start".to_owned(),
        visit: 1,
        old_head: None,
        checkpoint,
    };
    assert!(matches!(
        store.set_pending_rewind(&run, Some(&pending(checkpoint("r1", &[], None)))),
        Err(StoreError::Missing { .. })
    ));
    store
        .write_records(
            &run,
            &RunRecords {
                graph: "digraph w {}",
                children: &[],
                config: &config,
                manifest: &manifest,
                run_dir: None,
            },
        )
        .expect("records");
    let written = [
        checkpoint("r1", &["start"], Some("a")),
        checkpoint("r1", &["start", "a"], Some("b")),
        checkpoint("r1", &["start"], Some("a")),
    ];
    let mut log = store.open_checkpoints(&run, Opening::New).expect("opens");
    for state in &written {
        log.write(&state.view(), &ChangeHint::everything())
            .expect("writes");
    }
    drop(log);
    let mut seen = Vec::new();
    store
        .replay_checkpoints(&run, &mut |checkpoint| seen.push(checkpoint.clone()))
        .expect("replays");
    assert_eq!(seen, written);
    assert_eq!(store.pending_rewind(&run).expect("reads"), None);
    let record = pending(written[0].clone());
    store
        .set_pending_rewind(&run, Some(&record))
        .expect("records");
    assert_eq!(store.pending_rewind(&run).expect("reads"), Some(record));
    store.set_pending_rewind(&run, None).expect("clears");
    assert_eq!(store.pending_rewind(&run).expect("reads"), None);
}

#[test]
fn a_running_run_without_a_lock_holder_is_interrupted() {
    let Some((_database, store)) = store("pg_a_running_run_without_a_lock_holder") else {
        return;
    };
    let run = RunId::from("r3");
    let manifest = manifest("r3", "2026-01-02T00:00:00Z");
    store
        .write_records(
            &run,
            &RunRecords {
                graph: "digraph w {}",
                children: &[],
                config: &RunConfig::default(),
                manifest: &manifest,
                run_dir: None,
            },
        )
        .expect("records");
    {
        let _lease = store.lock(&run).expect("locks");
        store
            .register_start(&manifest, Path::new("/scratch/r3"))
            .expect("registers");
        assert_eq!(
            store.list_runs().expect("lists")[0].status,
            RunStatus::Running
        );
    }
    // The holder went away without registering an end (a killed process).
    assert_eq!(
        store.list_runs().expect("lists")[0].status,
        RunStatus::Interrupted
    );
    // And the lock is free for the next execution.
    drop(store.lock(&run).expect("locks again"));
}

#[test]
fn events_keep_their_ids_and_read_from_an_id() {
    let Some((database, store)) = store("pg_events_keep_their_ids_and_read_from_an_id") else {
        return;
    };
    let run = RunId::from("r2");
    let manifest = manifest("r2", "2026-01-03T00:00:00Z");
    store
        .write_records(
            &run,
            &RunRecords {
                graph: "digraph w {}",
                children: &[],
                config: &RunConfig::default(),
                manifest: &manifest,
                run_dir: None,
            },
        )
        .expect("records");
    let opened = store.open_events(&run, Opening::New).expect("opens");
    assert_eq!(opened.next_id, 1);
    let emitter = Emitter::with_log("r2", opened.log, opened.next_id, Vec::new());
    for code in ["one", "two", "three"] {
        emitter.emit(Event::warning(None, code, "m"));
    }
    drop(emitter);
    let mut opened = store.open_events(&run, Opening::Resume).expect("reopens");
    assert_eq!(opened.next_id, 4, "numbering continues");
    // A torn envelope never reaches the table: the append fails whole.
    assert!(opened.log.append(b"{\"id\":4,\"torn").is_err());
    let emitter = Emitter::with_log("r2", opened.log, opened.next_id, Vec::new());
    emitter.emit(Event::warning(None, "four", "m"));
    drop(emitter);
    // An id stored twice is refused (the table is the source of truth): the append is
    // queued, and its refusal refuses every later write of the run.
    let mut again = store.open_events(&run, Opening::Resume).expect("reopens");
    let _queued = again
        .log
        .append(b"{\"id\":3,\"ts\":\"t\",\"run_id\":\"r2\",\"event\":\"Warning\"}\n");
    let _settled = store.read_events(&run, 1);
    assert!(again
        .log
        .append(b"{\"id\":5,\"ts\":\"t\",\"run_id\":\"r2\",\"event\":\"Warning\"}\n")
        .is_err());
    drop(again);
    let ids: Vec<u64> = store
        .read_events(&run, 3)
        .expect("reads")
        .iter()
        .map(|event| event.id)
        .collect();
    assert_eq!(ids, [3, 4]);
    // Stored as written: the envelope's bytes, one row per id.
    assert_eq!(
        database.query("SELECT string_agg(id::text, ',' ORDER BY id) FROM run_events"),
        "1,2,3,4"
    );
    // A damaged row is an error that names the run, never an event passed over.
    database.query("UPDATE run_events SET envelope = '{not json' WHERE id = 4");
    let damaged = store.read_events(&run, 1);
    assert!(
        matches!(&damaged, Err(error) if error.to_string().contains("an event of run r2")),
        "{damaged:?}"
    );
}

/// A new run's first checkpoint is written before its records (SPEC 8.6's initial
/// checkpoint): it is stored, and the run is listed only once its records are.
#[test]
fn a_checkpoint_before_the_records_is_kept_and_the_run_unlisted_until_they_come() {
    let Some((_database, store)) = store("pg_checkpoint_before_the_records") else {
        return;
    };
    let run = RunId::from("early");
    let mut log = store.open_checkpoints(&run, Opening::New).expect("opens");
    let first = checkpoint("early", &[], Some("start"));
    log.write(&first.view(), &ChangeHint::everything())
        .expect("the first checkpoint is stored");
    assert_eq!(store.load_checkpoint(&run).expect("loads"), Some(first));
    assert!(store.list_runs().expect("lists").is_empty());
    with_records(&store, "early", "2026-01-01T00:00:00Z");
    assert_eq!(store.list_runs().expect("lists").len(), 1);
}

/// Writes the records of run `run_id`, so that rows referring to it can be stored.
fn with_records(store: &PgRunStore, run_id: &str, started_at: &str) -> RunId {
    let run = RunId::from(run_id);
    store
        .write_records(
            &run,
            &RunRecords {
                graph: "digraph w {}",
                children: &[],
                config: &RunConfig::default(),
                manifest: &manifest(run_id, started_at),
                run_dir: None,
            },
        )
        .expect("records");
    run
}

/// Issue 30: readers follow the events from an id on or from the end, as the file and
/// memory stores' readers do.
#[test]
fn event_readers_start_after_an_id_or_at_the_end_and_follow_appends() {
    let Some((_database, store)) = store("pg_event_readers_follow_appends") else {
        return;
    };
    let run = with_records(&store, "r1", "2026-01-01T00:00:00Z");
    assert_eq!(store.last_event_id(&run), 0);
    let opened = store.open_events(&run, Opening::New).expect("opens");
    let emitter = Emitter::with_log("r1", opened.log, opened.next_id, Vec::new());
    for code in ["one", "two", "three"] {
        emitter.emit(Event::warning(None, code, "m"));
    }
    let ids = |events: Vec<StoredEvent>| events.iter().map(|event| event.id).collect::<Vec<_>>();
    let mut from_start = store.event_reader(&run, 0);
    let mut after_two = store.event_reader(&run, 2);
    let mut tail = store.event_tail(&run);
    assert_eq!(ids(from_start.read_new().expect("reads")), [1, 2, 3]);
    assert_eq!(ids(after_two.read_new().expect("reads")), [3]);
    assert!(tail.read_new().expect("reads").is_empty());
    assert_eq!(store.last_event_id(&run), 3);
    emitter.emit(Event::warning(None, "four", "m"));
    for reader in [&mut from_start, &mut after_two, &mut tail] {
        let events = reader.read_new().expect("reads");
        assert_eq!(ids(events.clone()), [4]);
        assert_eq!(events[0].name, "Warning");
    }
    assert!(from_start.read_new().expect("reads").is_empty());
}

/// Issue 30: a stage saved by the engine reads back by rank with its files; a later save
/// of the same rank replaces the row and its files.
#[test]
fn saved_stages_and_their_files_read_back_by_rank() {
    let Some((database, store)) = store("pg_saved_stages_read_back") else {
        return;
    };
    let run = with_records(&store, "r1", "2026-01-01T00:00:00Z");
    let directory = tempfile::tempdir().expect("temp dir");
    let stage = |rank: u32, node: &str| {
        let path = directory.path().join(format!("{rank:03}-{node}@1"));
        fs_err::create_dir_all(&path).expect("stage directory");
        StageDir {
            rank,
            node_id: node.to_owned(),
            visit: 1,
            path,
        }
    };
    assert!(store.stages(&run).expect("reads").is_empty());
    let plan = stage(2, "plan");
    fs_err::write(plan.path.join("prompt.md"), "Plan it").expect("writes");
    fs_err::write(plan.path.join("stdout.log"), "noise").expect("writes");
    store.save_stage(&run, &plan).expect("saves");
    store.save_stage(&run, &stage(1, "start")).expect("saves");
    let stages = store.stages(&run).expect("reads");
    assert_eq!(
        stages
            .iter()
            .map(|stage| (stage.rank, stage.node_id.as_str(), stage.status.is_some()))
            .collect::<Vec<_>>(),
        [(1, "start", false), (2, "plan", false)]
    );
    assert_eq!(stages[1].files, ["prompt.md", "stdout.log"]);
    let status = serde_json::json!({
        "node_id": "plan", "visit": 1, "rank": 2, "attempt": 1, "handler": "llm",
        "status": "success", "outcome": "success", "failure_reason": null,
        "failure_class": null, "failure_signature": null, "preferred_next_label": null,
        "suggested_next_ids": [], "context_updates": {}, "notes": null,
        "files_touched": [], "model": null, "provider": null, "usage": null,
        "started_at": "2026-01-01T00:00:00Z", "finished_at": "2026-01-01T00:00:01Z",
        "duration_ms": 1000
    });
    fs_err::write(plan.path.join("status.json"), status.to_string()).expect("writes");
    fs_err::write(plan.path.join("response.md"), "Done").expect("writes");
    fs_err::remove_file(plan.path.join("stdout.log")).expect("removes");
    store.save_stage(&run, &plan).expect("saves again");
    let stages = store.stages(&run).expect("reads");
    assert_eq!(stages[1].files, ["prompt.md", "response.md", "status.json"]);
    assert_eq!(
        stages[1].status.as_ref().map(|status| status.duration_ms),
        Some(1000)
    );
    assert_eq!(
        store.stage_file(&run, 2, "response.md").expect("reads"),
        Some(b"Done".to_vec())
    );
    assert_eq!(
        store.stage_file(&run, 2, "stdout.log").expect("reads"),
        None
    );
    assert_eq!(store.stage_file(&run, 3, "prompt.md").expect("reads"), None);
    assert_eq!(
        database.query("SELECT count(*) FROM stage_files WHERE path LIKE '2/%'"),
        "3"
    );
    // Inspected through the store: the stage rows and the checkpoint.
    let record = store.resolve("r1").expect("resolves");
    let view = fabro_engine::inspect_in(&store, &record).expect("inspects");
    assert_eq!(view.stages.len(), 2);
    assert_eq!(view.stages[1].status, "success");
    assert_eq!(view.totals.duration_ms, 1000);
    assert!(matches!(
        store.resolve("nope"),
        Err(StoreError::Index(ref error))
            if error.kind() == fabro_engine::local::RunIndexErrorKind::NoSuchRun
    ));

    // SPEC 20.3: a rewind to rank 1 keeps the later stage, with its files, under its
    // number; done again, it changes nothing; the rank is free for the new line.
    store.rewind_stages(&run, 1, 1).expect("rewinds");
    store.rewind_stages(&run, 1, 1).expect("rewinds again");
    let kept = store.stages(&run).expect("reads");
    assert_eq!(kept.len(), 1);
    let rewound = store.rewound_stages(&run).expect("reads");
    assert_eq!(rewound.len(), 1);
    assert_eq!(rewound[0].0, 1);
    assert_eq!(
        rewound[0]
            .1
            .iter()
            .map(|stage| (stage.rank, stage.node_id.as_str()))
            .collect::<Vec<_>>(),
        [(2, "plan")]
    );
    assert_eq!(
        store.stage_file(&run, 2, "response.md").expect("reads"),
        None
    );
    assert_eq!(
        database.query("SELECT count(*) FROM stage_files WHERE path LIKE 'rewound/1/2/%'"),
        "3"
    );
    store.save_stage(&run, &stage(2, "build")).expect("saves");
    let record = store.resolve("r1").expect("resolves");
    let parts = store.record_parts(&record).expect("parts");
    assert_eq!(parts.stages.len(), 2);
    assert_eq!(parts.rewound.len(), 1);
}

/// Issue 30: a run's open question and the answers filed for it, as the file protocol
/// of SPEC 17.4 keeps them: one open question, one waiting answer per question, taken
/// once or withdrawn.
#[test]
fn questions_and_filed_answers_round_trip() {
    let Some((_database, store)) = store("pg_questions_and_filed_answers") else {
        return;
    };
    let run = with_records(&store, "r1", "2026-01-01T00:00:00Z");
    let question: Question = serde_json::from_value(serde_json::json!({
        "question_id": "gate-1-x", "node_id": "gate", "text": "Ship it?",
        "question_type": "multiple_choice",
        "options": [{"key": "A", "label": "Approve", "edge_label": "[A] Approve", "target": "exit"}],
        "freeform": null, "default_choice": null, "timeout_ms": null
    }))
    .expect("a question");
    store
        .set_pending_question(&run, Some(&question))
        .expect("publishes");
    assert_eq!(
        store.pending_question(&run).expect("reads"),
        None,
        "no execution holds the run"
    );
    let lease = store.lock(&run).expect("locks");
    assert_eq!(store.pending_question(&run).expect("reads"), Some(question));
    let filed = FiledAnswer {
        question_id: "gate-1-x".to_owned(),
        label: "A".to_owned(),
        text: None,
    };
    assert!(!store.answer_waiting(&run, "gate-1-x").expect("reads"));
    store.file_answer(&run, &filed).expect("files");
    assert!(matches!(
        store.file_answer(&run, &filed),
        Err(StoreError::AnswerFiled { .. })
    ));
    assert!(store.answer_waiting(&run, "gate-1-x").expect("reads"));
    assert!(store.withdraw_answer(&run, "gate-1-x").expect("withdraws"));
    assert!(!store.withdraw_answer(&run, "gate-1-x").expect("withdraws"));
    store.file_answer(&run, &filed).expect("files again");
    assert_eq!(
        store.take_answer(&run, "gate-1-x").expect("takes"),
        Some(filed)
    );
    assert_eq!(store.take_answer(&run, "gate-1-x").expect("takes"), None);
    assert!(!store.withdraw_answer(&run, "gate-1-x").expect("withdraws"));
    store.set_pending_question(&run, None).expect("closes");
    assert_eq!(store.pending_question(&run).expect("reads"), None);
    drop(lease);
}

/// The next notice `receiver` gets that `wanted` accepts, waiting at most 10 s.
fn next_notice(
    runtime: &tokio::runtime::Runtime,
    receiver: &mut tokio::sync::broadcast::Receiver<Notice>,
    wanted: impl Fn(&Notice) -> bool,
) -> Notice {
    runtime.block_on(async {
        tokio::time::timeout(std::time::Duration::from_secs(10), async {
            loop {
                let notice = receiver.recv().await.expect("the store's notices go on");
                if wanted(&notice) {
                    return notice;
                }
            }
        })
        .await
        .expect("the notice arrives")
    })
}

/// SPEC 18.2: a cancel written to the store by one process reaches another process's
/// store as a notice at once, and lasts until the run next starts; every event append
/// is noticed as well.
#[test]
fn cancel_requests_and_appends_reach_the_other_processes_as_notices() {
    let Some((database, writer)) = store("pg_cancel_requests_and_appends_are_noticed") else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let reader = runtime.block_on(async {
        let store = PgStore::connect(&database.url()).await.expect("connects");
        PgRunStore::new(&store).expect("a run store")
    });
    let mut notices = reader.notices().expect("the database has notices");
    // The first notice says that the listening connection is up.
    next_notice(&runtime, &mut notices, |notice| *notice == Notice::Missed);

    let run = with_records(&writer, "r1", "2026-01-01T00:00:00Z");
    assert!(!reader.cancel_requested(&run).expect("answers"));
    assert!(writer.request_cancel(&run).expect("requests"));
    assert_eq!(
        next_notice(&runtime, &mut notices, |notice| *notice != Notice::Missed),
        Notice::CancelRequested(run.clone())
    );
    assert!(reader.cancel_requested(&run).expect("answers"));
    assert!(
        !writer
            .request_cancel(&RunId::from("nope"))
            .expect("answers"),
        "no such run"
    );

    let opened = writer.open_events(&run, Opening::New).expect("opens");
    let emitter = Emitter::with_log("r1", opened.log, opened.next_id, Vec::new());
    emitter.emit(Event::warning(None, "one", "m"));
    assert_eq!(
        next_notice(&runtime, &mut notices, |notice| *notice != Notice::Missed),
        Notice::Appended(run.clone())
    );

    // A resume starts the run again, without the request of the execution before.
    writer
        .register_start(
            &manifest("r1", "2026-01-01T00:00:00Z"),
            Path::new("/scratch/r1"),
        )
        .expect("registers");
    assert!(!reader.cancel_requested(&run).expect("answers"));
}

/// Polls `done` every 20 ms for at most 10 s.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// SPEC 18.1 (issue 31): a store keeps its run list between calls while nothing changes
/// it; a change made by another process reaches it as a notice, a run made a moment ago
/// elsewhere is found before the notice, and a run whose holder died shows interrupted
/// within a second, without any notice.
#[test]
fn a_listing_is_kept_until_a_process_changes_a_run() {
    let Some((database, writer)) = store("pg_a_listing_is_kept") else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let reader = runtime.block_on(async {
        let store = PgStore::connect(&database.url()).await.expect("connects");
        PgRunStore::new(&store).expect("a run store")
    });
    with_records(&writer, "r1", "2026-01-01T00:00:00Z");
    assert_eq!(reader.listing().expect("lists").len(), 1);
    // Kept once the reader listens.
    eventually("the listing is kept", || {
        reader.listing().expect("lists");
        reader.cached_listing().is_some()
    });
    let stamps = reader.record_stamps(&RunId::from("r1")).expect("stamps");

    // A row written without a notice is not seen: the listing is what was kept...
    database.query(
        "INSERT INTO runs (run_id, workflow_name, status, started_at, manifest) \
         SELECT 'quiet', workflow_name, 'success', '2026-01-03T00:00:00Z', manifest \
         FROM runs WHERE run_id = 'r1'",
    );
    assert_eq!(reader.listing().expect("lists").len(), 1);
    // ...but resolving it reads the store.
    assert_eq!(reader.resolve("quie").expect("resolves").run_id, "quiet");
    // A notice makes the next listing read again.
    database.query("SELECT pg_notify('fabro_runs', 'quiet')");
    eventually("the notice is heard", || {
        reader.listing().expect("lists").len() == 2
    });

    // Another process's write is noticed: a new run, the end of one (its stamps change).
    with_records(&writer, "r2", "2026-01-02T00:00:00Z");
    eventually("the new run is listed", || {
        reader.listing().expect("lists").len() == 3
    });
    writer
        .register_end(&RunId::from("r1"), RunStatus::Success)
        .expect("ends");
    eventually("the end is listed", || {
        let listing = reader.listing().expect("lists");
        listing.find("r1").expect("listed").status == RunStatus::Success
    });
    assert_ne!(reader.record_stamps(&RunId::from("r1")), Some(stamps));

    // A running run whose holder goes away without an end.
    let run = RunId::from("r2");
    {
        let _lease = writer.lock(&run).expect("locks");
        writer
            .register_start(
                &manifest("r2", "2026-01-02T00:00:00Z"),
                Path::new("/scratch/r2"),
            )
            .expect("registers");
        eventually("the start is listed", || {
            reader
                .listing()
                .expect("lists")
                .find("r2")
                .expect("listed")
                .status
                == RunStatus::Running
        });
    }
    eventually("the run shows interrupted", || {
        reader
            .listing()
            .expect("lists")
            .find("r2")
            .expect("listed")
            .status
            == RunStatus::Interrupted
    });
}

/// SPEC 7.5 on a shared store: a running stage's files are read where they grow on the
/// machine that executes it (a command's live output); once the stage has its status,
/// what was stored.
#[test]
fn a_running_stage_file_is_read_live_on_the_executing_machine() {
    let Some((_database, store)) = store("pg_a_running_stage_file_is_read_live") else {
        return;
    };
    let scratch = tempfile::tempdir().expect("temp dir");
    let run = RunId::from("live");
    store
        .write_records(
            &run,
            &RunRecords {
                graph: "digraph w {}",
                children: &[],
                config: &RunConfig::default(),
                manifest: &manifest("live", "2026-01-01T00:00:00Z"),
                run_dir: Some(scratch.path()),
            },
        )
        .expect("records");
    let path = RunPaths::stage_dir_in(scratch.path(), 1, "build", 1);
    fs_err::create_dir_all(&path).expect("stage directory");
    let stage = StageDir {
        rank: 1,
        node_id: "build".to_owned(),
        visit: 1,
        path: path.clone(),
    };
    fs_err::write(path.join("stdout.log"), "one\n").expect("writes");
    store.save_stage(&run, &stage).expect("saves");
    fs_err::write(path.join("stdout.log"), "one\ntwo\n").expect("writes");
    assert_eq!(
        store.stage_file(&run, 1, "stdout.log").expect("reads"),
        Some(b"one\ntwo\n".to_vec())
    );
    fs_err::write(path.join("status.json"), "{}").expect("writes");
    store.save_stage(&run, &stage).expect("saves");
    fs_err::write(path.join("stdout.log"), "changed on disk").expect("writes");
    assert_eq!(
        store.stage_file(&run, 1, "stdout.log").expect("reads"),
        Some(b"one\ntwo\n".to_vec())
    );
    // A running stage whose directory is not on this machine: what was stored.
    let path = RunPaths::stage_dir_in(scratch.path(), 2, "deploy", 1);
    fs_err::create_dir_all(&path).expect("stage directory");
    fs_err::write(path.join("stdout.log"), "started").expect("writes");
    let deploy = StageDir {
        rank: 2,
        node_id: "deploy".to_owned(),
        visit: 1,
        path: path.clone(),
    };
    store.save_stage(&run, &deploy).expect("saves");
    fs_err::remove_dir_all(&path).expect("removes");
    assert_eq!(
        store.stage_file(&run, 2, "stdout.log").expect("reads"),
        Some(b"started".to_vec())
    );
}

mod leases;
mod queued;
mod steering;
