//! The two run stores behave alike: records, checkpoint logs, event logs, locks and the
//! index, through the [`RunStore`] trait only.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::event::{Emitter, Event};
use crate::journal::ChangeHint;

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
