//! The two run stores behave alike: records, checkpoint logs, event logs, locks and the
//! index, through the [`RunStore`] trait only.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::event::{Emitter, Event};
use crate::journal::ChangeHint;
use crate::run_stages::StageDir;

fn manifest(run_id: &str, started_at: &str) -> Manifest {
    Manifest {
        run_id: run_id.to_owned(),
        workflow_name: "w".to_owned(),
        workflow_path: "w.fabro".to_owned(),
        goal: "g".to_owned(),
        node_count: 3,
        edge_count: 2,
        base_sha: None,
        run_branch: None,
        started_at: started_at.to_owned(),
        fabro_version: "0".to_owned(),
        dry_run: false,
        parent_run_id: None,
        vars: Default::default(),
        simulated_llm: true,
        repo_root: None,
        work_dir_relative: None,
        origin: None,
        forked_from: None,
        repository_url: None,
    }
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
        stage_rank: completed.len() as u32,
        simulated_cursors: Default::default(),
        llm_tokens: 0,
        llm_cost_usd: 0.0,
        run_status: RunStatus::Running,
    }
}

/// Writes the records of a run of the empty workflow `w` with `manifest`.
fn write_records(store: &dyn RunStore, run: &RunId, manifest: &Manifest) {
    store
        .write_records(
            run,
            &RunRecords {
                graph: "digraph w {}",
                children: &[],
                config: &RunConfig::default(),
                manifest,
                run_dir: None,
            },
        )
        .expect("records");
}

/// Runs `check` against a file-system store in a fresh root and an in-memory store.
fn with_each_store(check: impl Fn(Arc<dyn RunStore>, &Path)) {
    let root = tempfile::tempdir().expect("temp dir");
    let fs_store = FsRunStore::new(root.path());
    fs_err::create_dir_all(fs_store.paths(&RunId::from("r1")).run_dir()).expect("run dir");
    fs_err::create_dir_all(fs_store.paths(&RunId::from("r2")).run_dir()).expect("run dir");
    check(Arc::new(fs_store), root.path());
    check(Arc::new(MemoryRunStore::new()), root.path());
}

#[test]
fn records_checkpoints_and_the_index_round_trip() {
    with_each_store(|store, root| {
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
        assert_eq!(
            store.read_workflow(&run).expect("workflow"),
            StoredWorkflow {
                graph: "digraph w {}".to_owned(),
                children: vec![("child.fabro".to_owned(), "digraph c {}".to_owned())],
            }
        );
        assert!(store.load_checkpoint(&run).expect("loads").is_none());

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
        assert!(store.lock(&run).is_err(), "a second execution is refused");
        store
            .register_start(&manifest, &root.join("scratch/r1"))
            .expect("registers");
        let listed = store.list_runs().expect("lists");
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].status, RunStatus::Running);
        store
            .register_end(&run, RunStatus::Success)
            .expect("registers");
        drop(lease);
        assert!(crate::run_index::lock::released_soon(
            &root.join("scratch/r1")
        ));
        assert!(!store.is_active(&run));
        let listed = store.list_runs().expect("lists");
        assert_eq!(
            (listed[0].run_id.as_str(), listed[0].status),
            ("r1", RunStatus::Success)
        );
        assert!(listed[0].finished_at.is_some());
    });
}

/// SPEC 20.2, 20.3: every checkpoint comes back in order, and a rewind's record is kept
/// until it is cleared.
#[test]
fn checkpoints_replay_in_order_and_a_pending_rewind_is_kept_until_cleared() {
    with_each_store(|store, _| {
        let run = RunId::from("r2");
        let mut seen = Vec::new();
        store
            .replay_checkpoints(&run, &mut |checkpoint| seen.push(checkpoint.clone()))
            .expect("replays nothing");
        assert!(seen.is_empty());
        let written = [
            checkpoint("r2", &["start"], Some("a")),
            checkpoint("r2", &["start", "a"], Some("b")),
            checkpoint("r2", &["start"], Some("a")),
        ];
        let mut log = store.open_checkpoints(&run, Opening::New).expect("opens");
        for state in &written {
            log.write(&state.view(), &ChangeHint::everything())
                .expect("writes");
        }
        drop(log);
        store
            .replay_checkpoints(&run, &mut |checkpoint| seen.push(checkpoint.clone()))
            .expect("replays");
        assert_eq!(seen, written);

        assert_eq!(store.pending_rewind(&run).expect("reads"), None);
        let pending = crate::record::PendingRewind {
            k: 2,
            to_rank: 1,
            node_id: "start".to_owned(),
            visit: 1,
            old_head: Some("0123".to_owned()),
            checkpoint: written[0].clone(),
        };
        store
            .set_pending_rewind(&run, Some(&pending))
            .expect("records");
        assert_eq!(store.pending_rewind(&run).expect("reads"), Some(pending));
        store.set_pending_rewind(&run, None).expect("clears");
        store.set_pending_rewind(&run, None).expect("clears again");
        assert_eq!(store.pending_rewind(&run).expect("reads"), None);
    });
}

#[test]
fn events_continue_after_a_torn_line_and_read_from_an_id() {
    with_each_store(|store, _| {
        let run = RunId::from("r2");
        let opened = store.open_events(&run, Opening::New).expect("opens");
        assert_eq!(opened.next_id, 1);
        let emitter = Emitter::with_log("r2", opened.log, opened.next_id, Vec::new());
        for code in ["one", "two", "three"] {
            emitter.emit(Event::warning(None, code, "m"));
        }
        drop(emitter);
        let mut opened = store.open_events(&run, Opening::Resume).expect("reopens");
        opened.log.append(b"{\"id\":4,\"torn").expect("appends");
        drop(opened);
        let opened = store.open_events(&run, Opening::Resume).expect("reopens");
        assert_eq!(opened.next_id, 4, "numbering continues after the torn line");
        let emitter = Emitter::with_log("r2", opened.log, opened.next_id, Vec::new());
        emitter.emit(Event::warning(None, "four", "m"));
        let ids: Vec<u64> = store
            .read_events(&run, 3)
            .expect("reads")
            .iter()
            .map(|event| event.id)
            .collect();
        assert_eq!(ids, [3, 4]);
    });
}

#[tokio::test]
async fn a_follower_returns_new_events_until_the_run_ends() {
    let store = Arc::new(MemoryRunStore::new());
    let run = RunId::from("r");
    let lease = store.lock(&run).expect("locks");
    let opened = store.open_events(&run, Opening::New).expect("opens");
    let emitter = Arc::new(Emitter::with_log("r", opened.log, 1, Vec::new()));
    emitter.emit(Event::warning(None, "one", "m"));
    let mut follower = EventFollower::new(store.clone(), run, 1, Duration::from_millis(5));
    let first = follower.next_batch().await.expect("reads").expect("events");
    assert_eq!(first.len(), 1);
    let writer = {
        let emitter = Arc::clone(&emitter);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            emitter.emit(Event::warning(None, "two", "m"));
            drop(lease);
        })
    };
    let second = follower.next_batch().await.expect("reads").expect("events");
    assert_eq!(second.iter().map(|event| event.id).collect::<Vec<_>>(), [2]);
    writer.await.expect("writer");
    assert!(follower.next_batch().await.expect("reads").is_none());
    assert_eq!(follower.next_id(), 3);
}

/// Issue 30: a reader follows the events from an id on, a tail from the end; the last
/// id is the newest complete event's.
#[test]
fn event_readers_start_after_an_id_or_at_the_end_and_follow_appends() {
    with_each_store(|store, _| {
        let run = RunId::from("r1");
        assert_eq!(store.last_event_id(&run), 0);
        assert!(store
            .event_reader(&run, 0)
            .read_new()
            .expect("reads")
            .is_empty());
        let opened = store.open_events(&run, Opening::New).expect("opens");
        let emitter = Emitter::with_log("r1", opened.log, opened.next_id, Vec::new());
        for code in ["one", "two", "three"] {
            emitter.emit(Event::warning(None, code, "m"));
        }
        let ids =
            |events: Vec<StoredEvent>| events.iter().map(|event| event.id).collect::<Vec<_>>();
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
            assert!(events[0].line.contains("\"four\""), "{}", events[0].line);
        }
        assert!(from_start.read_new().expect("reads").is_empty());
        assert_eq!(store.last_event_id(&run), 4);
    });
}

/// Issue 30: the stages the engine saves come back by rank with their files; a stage
/// saved again (it ended) replaces its row.
#[test]
fn saved_stages_and_their_files_read_back_by_rank() {
    with_each_store(|store, root| {
        let run = RunId::from("r1");
        let paths = crate::run_dir::RunPaths::new(root, "r1");
        let stage = |rank: u32, node: &str| {
            let path = paths.stage_dir(rank, node, 1);
            // The stores of `with_each_store` share the root: each starts afresh.
            let _ = fs_err::remove_dir_all(&path);
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
        store.save_stage(&run, &plan).expect("saves");
        let first = stage(1, "start");
        store.save_stage(&run, &first).expect("saves");
        let stages = store.stages(&run).expect("reads");
        assert_eq!(
            stages
                .iter()
                .map(|stage| (stage.rank, stage.node_id.as_str(), stage.status.is_some()))
                .collect::<Vec<_>>(),
            [(1, "start", false), (2, "plan", false)]
        );
        assert_eq!(stages[1].files, ["prompt.md"]);
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
        store.save_stage(&run, &plan).expect("saves again");
        let stages = store.stages(&run).expect("reads");
        assert_eq!(stages.len(), 2);
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
            store.stage_file(&run, 2, "graph.fabro").expect("reads"),
            None
        );
    });
}

/// Issue 30: runs are found by id or unique prefix, and inspected, through the store.
#[test]
fn runs_resolve_by_prefix_and_inspect_through_the_store() {
    with_each_store(|store, root| {
        for (run_id, started) in [
            ("r1", "2026-01-01T00:00:00Z"),
            ("r2", "2026-01-02T00:00:00Z"),
        ] {
            let run = RunId::from(run_id);
            write_records(store.as_ref(), &run, &manifest(run_id, started));
            store
                .register_start(
                    &manifest(run_id, started),
                    &root.join("scratch").join(run_id),
                )
                .expect("registers");
            store
                .register_end(&run, RunStatus::Success)
                .expect("registers");
        }
        let mut log = store
            .open_checkpoints(&RunId::from("r2"), Opening::New)
            .expect("opens");
        log.write(
            &checkpoint("r2", &["start", "a"], Some("exit")).view(),
            &ChangeHint::everything(),
        )
        .expect("writes");
        drop(log);
        store
            .publish_checkpoint(
                &RunId::from("r2"),
                &checkpoint("r2", &["start", "a"], Some("exit")),
            )
            .expect("publishes");
        let listing = store.listing().expect("lists");
        assert_eq!(
            listing
                .iter()
                .map(|record| record.run_id.clone())
                .collect::<Vec<_>>(),
            ["r2", "r1"]
        );
        let record = store.resolve("r2").expect("resolves");
        assert_eq!(record.status, RunStatus::Success);
        let missing = store.resolve("nope").expect_err("no such run");
        assert!(matches!(
            missing,
            StoreError::Index(ref error)
                if error.kind() == crate::run_index::RunIndexErrorKind::NoSuchRun
        ));
        let view = crate::run_view::inspect_in(store.as_ref(), &record).expect("inspects");
        assert_eq!(view.run_id, "r2");
        assert_eq!(view.current_node.as_deref(), Some("a"));
        assert_eq!(view.next_node_id.as_deref(), Some("exit"));
        assert!(view.simulated_llm);
        assert!(view.stages.is_empty());
    });
}

/// The file store keeps `runs.db` open from a run's start to its end; a file replaced in
/// between is opened anew, so the end is recorded where readers look.
#[test]
fn the_kept_index_follows_a_replaced_file() {
    let root = tempfile::tempdir().expect("temp dir");
    let store = FsRunStore::new(root.path());
    let run = RunId::from("r1");
    let manifest = manifest("r1", "2026-01-01T00:00:00Z");
    let run_dir = store.paths(&run).run_dir().to_path_buf();
    fs_err::create_dir_all(&run_dir).expect("run dir");
    write_records(&store, &run, &manifest);
    for replaced in [false, true] {
        store
            .register_start(&manifest, &run_dir)
            .expect("registers");
        if replaced {
            fs_err::remove_file(root.path().join("runs.db")).expect("removes");
            FsRunStore::new(root.path())
                .register_start(&manifest, &run_dir)
                .expect("another process registers it in a new file");
        }
        store
            .register_end(&run, RunStatus::Fail)
            .expect("registers the end");
        let listed = crate::run_index::RunIndex::open(root.path())
            .expect("opens")
            .list()
            .expect("lists");
        assert_eq!(listed.len(), 1, "replaced: {replaced}");
        assert_eq!(listed[0].status, RunStatus::Fail, "replaced: {replaced}");
    }
}
