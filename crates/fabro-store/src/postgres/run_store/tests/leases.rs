//! The queue and the leases of SPEC 18.2: claims by priority then age, each run once;
//! a lease that ran out is claimed again, and every write of its former holder is
//! refused from then on.

use std::time::Duration;

use fabro_engine::{QueuedStart, RunQueue};

use super::*;

fn queued(run_id: &str, priority: i32) -> QueuedStart {
    QueuedStart {
        run_id: RunId::from(run_id),
        workflow_name: "w".to_owned(),
        workflow_path: "w.fabro".to_owned(),
        goal: "g".to_owned(),
        priority,
        request: format!("{{\"run_id\": \"{run_id}\"}}"),
    }
}

/// A second store of the same database: another worker.
fn second(database: &TestDatabase) -> PgRunStore {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let store = PgStore::connect(&database.url()).await.expect("connects");
        PgRunStore::new(&store).expect("a run store")
    })
}

const TTL: Duration = Duration::from_secs(30);

#[test]
fn two_workers_claim_each_run_once_by_priority_then_age() {
    let Some((database, first)) = store("pg_claims_by_priority_then_age") else {
        return;
    };
    let other = second(&database);
    for (run_id, priority) in [("a", 0), ("b", 5), ("c", 0), ("d", 5), ("e", -1)] {
        assert!(first.enqueue(&queued(run_id, priority)).expect("queued"));
    }
    assert!(
        !first.enqueue(&queued("a", 9)).expect("answers"),
        "a run id is queued once"
    );
    assert_eq!(
        database.query("SELECT string_agg(status, ',') FROM runs"),
        "queued,queued,queued,queued,queued"
    );
    let mut order = Vec::new();
    for turn in 0.. {
        let worker: &PgRunStore = if turn % 2 == 0 { &first } else { &other };
        let Some(claim) = worker
            .claim(&format!("w{}", turn % 2), TTL)
            .expect("claims")
        else {
            break;
        };
        assert_eq!(claim.epoch, 1);
        assert!(!claim.started);
        assert_eq!(
            claim.request.as_deref(),
            Some(format!("{{\"run_id\": \"{}\"}}", claim.run_id).as_str()),
            "a run that never started comes with its request"
        );
        order.push(claim.run_id.as_str().to_owned());
    }
    assert_eq!(order, ["b", "d", "a", "c", "e"]);
    assert_eq!(
        database.query("SELECT string_agg(run_id || '=' || owner, ',' ORDER BY run_id) FROM runs"),
        "a=w0,b=w0,c=w1,d=w1,e=w0"
    );
    // Concurrent claims skip the rows another holds rather than wait or share them.
    for index in 0..40 {
        first
            .enqueue(&queued(&format!("q{index:02}"), 0))
            .expect("queued");
    }
    let workers = [&first, &other, &first, &other];
    let claims = std::thread::scope(|scope| {
        let handles: Vec<_> = workers
            .iter()
            .enumerate()
            .map(|(index, worker)| {
                scope.spawn(move || {
                    let mut mine = Vec::new();
                    while let Some(claim) = worker.claim(&format!("t{index}"), TTL).expect("claims")
                    {
                        mine.push(claim.run_id.as_str().to_owned());
                    }
                    mine
                })
            })
            .collect();
        let mut all: Vec<String> = handles
            .into_iter()
            .flat_map(|handle| handle.join().expect("claims"))
            .collect();
        all.sort();
        all
    });
    let expected: Vec<String> = (0..40).map(|index| format!("q{index:02}")).collect();
    assert_eq!(claims, expected, "each queued run claimed exactly once");
}

#[test]
fn a_lease_that_ran_out_is_claimed_again_and_its_former_holder_writes_nothing() {
    let Some((database, old)) = store("pg_a_lease_that_ran_out_is_claimed_again") else {
        return;
    };
    let new = second(&database);
    old.enqueue(&queued("r1", 0)).expect("queued");
    let claim = old.claim("old", TTL).expect("claims").expect("a run");
    let run = claim.run_id;
    let lease = old.lock(&run).expect("the lease is the lock");
    let lost = lease.lost().expect("a worker's lease can be lost");
    with_records(&old, "r1", "2026-01-01T00:00:00Z");
    old.register_start(&manifest("r1", "2026-01-01T00:00:00Z"), Path::new("/s/r1"))
        .expect("starts");
    let opened = old.open_events(&run, Opening::New).expect("opens");
    let emitter = Emitter::with_log("r1", opened.log, opened.next_id, Vec::new());
    let mut checkpoints = old.open_checkpoints(&run, Opening::New).expect("opens");
    emitter.emit(Event::warning(None, "one", "m"));
    checkpoints
        .write(
            &checkpoint("r1", &["start"], Some("a")).view(),
            &ChangeHint::everything(),
        )
        .expect("the holder writes");
    checkpoints
        .still_held()
        .expect("the holder may push its refs");
    assert!(
        new.claim("new", TTL).expect("claims").is_none(),
        "the lease is live"
    );

    // The old holder stops answering (paused, cut off) and its lease runs out.
    database.query("UPDATE runs SET lease_expires_at = now() - interval '1 second'");
    let taken = new
        .claim("new", TTL)
        .expect("claims")
        .expect("the run is taken over");
    assert_eq!(
        (
            taken.run_id.as_str(),
            taken.epoch,
            taken.started,
            taken.request
        ),
        ("r1", 2, true, None)
    );
    assert_eq!(database.query("SELECT owner FROM runs"), "new");

    // Its questions are refused (and so is its taking of an answer, which stays for the
    // new holder), before its own clock tells it the lease is gone.
    let question: fabro_engine::gate::Question = serde_json::from_value(serde_json::json!({
        "question_id": "gate-1-x", "node_id": "gate", "text": "Ship it?",
        "question_type": "multiple_choice",
        "options": [{"key": "A", "label": "Approve", "edge_label": "[A] Approve", "target": "exit"}],
        "freeform": null, "default_choice": null, "timeout_ms": null
    }))
    .expect("a question");
    assert!(matches!(
        old.set_pending_question(&run, Some(&question)),
        Err(StoreError::LostLease { .. })
    ));
    assert_eq!(database.query("SELECT count(*) FROM questions"), "0");
    assert!(matches!(
        old.take_answer(&run, "gate-1-x"),
        Err(StoreError::LostLease { .. })
    ));

    emitter.emit(Event::warning(None, "two", "m"));
    let refused = checkpoints
        .write(
            &checkpoint("r1", &["start", "a"], None).view(),
            &ChangeHint::everything(),
        )
        .expect_err("a checkpoint of the old holder is refused");
    let refused = fabro_engine::error_chain(&refused);
    assert!(refused.contains("lost the lease of run r1"), "{refused}");
    assert!(lost.is_cancelled(), "the old holder's run is told to stop");
    assert!(
        checkpoints.still_held().is_err(),
        "the old holder pushes no refs either"
    );
    assert!(matches!(
        old.register_end(&run, RunStatus::Success),
        Err(StoreError::LostLease { .. })
    ));
    assert!(matches!(
        old.release(&run),
        Ok(()) | Err(StoreError::LostLease { .. })
    ));
    assert_eq!(
        database.query("SELECT count(*) || ' ' || max(id) FROM run_events"),
        "1 1",
        "nothing the old holder wrote after the takeover is stored"
    );
    assert_eq!(database.query("SELECT count(*) FROM run_journal"), "1");
    assert_eq!(database.query("SELECT status FROM runs"), "running");

    // The new holder resumes: its lease is the run's lock, and its writes are stored.
    let resumed = new.lock(&run).expect("the new lease is the lock");
    let opened = new.open_events(&run, Opening::Resume).expect("opens");
    assert_eq!(opened.next_id, 2);
    let emitter = Emitter::with_log("r1", opened.log, opened.next_id, Vec::new());
    emitter.emit(Event::warning(None, "two", "m"));
    let mut checkpoints = new.open_checkpoints(&run, Opening::Resume).expect("opens");
    checkpoints
        .write(
            &checkpoint("r1", &["start", "a"], None).view(),
            &ChangeHint::everything(),
        )
        .expect("the new holder writes");
    new.register_end(&run, RunStatus::Success).expect("ends");
    new.release(&run).expect("released");
    drop(resumed);
    assert_eq!(
        database
            .query("SELECT status || ' ' || owner || ' ' || (lease_expires_at IS NULL) FROM runs"),
        "success new true"
    );
    assert!(
        new.claim("new", TTL).expect("claims").is_none(),
        "an ended run is not claimed"
    );
}

#[test]
fn a_run_handed_back_is_claimed_again_at_once_and_resumed() {
    let Some((database, first)) = store("pg_a_run_handed_back_is_claimed_again") else {
        return;
    };
    first.enqueue(&queued("r1", 0)).expect("queued");
    let claim = first.claim("one", TTL).expect("claims").expect("a run");
    with_records(&first, "r1", "2026-01-01T00:00:00Z");
    let mut checkpoints = first
        .open_checkpoints(&claim.run_id, Opening::New)
        .expect("opens");
    checkpoints
        .write(
            &checkpoint("r1", &["start"], Some("a")).view(),
            &ChangeHint::everything(),
        )
        .expect("checkpointed");
    drop(checkpoints);
    first.hand_back(&claim.run_id).expect("handed back");
    assert_eq!(
        database.query("SELECT status || ' ' || coalesce(owner, '-') FROM runs"),
        "queued -"
    );
    let other = second(&database);
    let again = other
        .claim("two", TTL)
        .expect("claims")
        .expect("claimed again");
    assert_eq!(
        (again.epoch, again.started, again.request),
        (2, true, None),
        "a started run resumes"
    );
    other
        .register_worker("two", "host-b", 3)
        .expect("registers");
    let workers = other.workers().expect("workers");
    assert_eq!(workers.len(), 1);
    assert_eq!(
        (
            workers[0].name.as_str(),
            workers[0].host.as_str(),
            workers[0].concurrency
        ),
        ("two", "host-b", 3)
    );
    assert_eq!(workers[0].runs, ["r1"]);
    // A run that stopped is queued again for its resume, with the resume's request.
    other
        .register_end(&again.run_id, RunStatus::Canceled)
        .expect("ends");
    other.release(&again.run_id).expect("released");
    assert!(!first.requeue(&RunId::from("nope"), "{}").expect("answers"));
    assert!(first
        .requeue(&again.run_id, "{\"model\": \"m\"}")
        .expect("queued"));
    assert!(
        !first.requeue(&again.run_id, "{}").expect("answers"),
        "a queued run is not queued twice"
    );
    let resumed = first.claim("one", TTL).expect("claims").expect("claimed");
    assert_eq!(
        (resumed.started, resumed.request.as_deref()),
        (true, Some("{\"model\": \"m\"}"))
    );
}

/// A run whose worker died before its first checkpoint has nothing to resume from: the
/// worker that claims it finds what it stored forgotten and starts it anew.
#[test]
fn a_run_claimed_before_its_first_checkpoint_starts_anew() {
    let Some((database, first)) = store("pg_a_run_without_checkpoint_starts_anew") else {
        return;
    };
    first.enqueue(&queued("r1", 0)).expect("queued");
    let claim = first.claim("one", TTL).expect("claims").expect("a run");
    let run = with_records(&first, "r1", "2026-01-01T00:00:00Z");
    let opened = first.open_events(&run, Opening::New).expect("opens");
    let emitter = Emitter::with_log("r1", opened.log, opened.next_id, Vec::new());
    emitter.emit(Event::warning(None, "one", "m"));
    drop(emitter);
    assert_eq!(database.query("SELECT count(*) FROM run_events"), "1");
    database.query("UPDATE runs SET lease_expires_at = now() - interval '1 second'");
    let other = second(&database);
    let again = other.claim("two", TTL).expect("claims").expect("claimed");
    assert_eq!(
        (again.epoch, again.started, again.request.is_some()),
        (claim.epoch + 1, false, true),
        "started anew from its request"
    );
    assert_eq!(
        database.query(
            "SELECT (SELECT count(*) FROM run_events) || ' ' || (manifest IS NULL) FROM runs"
        ),
        "0 true"
    );
}

/// A server's embedded worker (SPEC 18.2) holds the run it accepts from the start, and
/// claims the resume of a stopped run before preparing it: no other worker claims
/// either while the lease lives; a run that is held is not claimed for a resume.
#[test]
fn runs_queued_or_resumed_already_claimed_are_claimed_by_no_one_else() {
    let Some((database, server)) = store("pg_runs_queued_already_claimed") else {
        return;
    };
    let worker = second(&database);
    let claim = server
        .enqueue_claimed(&queued("here", 9), "server-1", TTL)
        .expect("queued")
        .expect("a new run");
    assert_eq!((claim.epoch, claim.started), (1, false));
    assert_eq!(
        claim.request.as_deref(),
        Some("{\"run_id\": \"here\"}"),
        "the request, for a takeover before the first checkpoint"
    );
    assert!(server
        .enqueue_claimed(&queued("here", 0), "server-1", TTL)
        .expect("answers")
        .is_none());
    assert_eq!(
        database.query("SELECT status || ',' || owner || ',' || lease_epoch FROM runs"),
        "queued,server-1,1"
    );
    assert!(worker.claim("w", TTL).expect("claims").is_none(), "held");
    // A run that stopped: its resume is claimed with a new epoch, and its status stays
    // until the resume starts; while that lease lives nobody claims it again.
    let held = with_records(&server, "held", "2026-01-01T00:00:00Z");
    database.query("UPDATE runs SET status = 'fail' WHERE run_id = 'held'");
    let resumed = server
        .resume_claimed(&held, "{\"model\": \"m\"}", "server-1", TTL)
        .expect("claims")
        .expect("a stopped run");
    assert!(resumed.started);
    assert_eq!(resumed.request.as_deref(), Some("{\"model\": \"m\"}"));
    assert_eq!(
        database.query("SELECT status || ',' || owner FROM runs WHERE run_id = 'held'"),
        "fail,server-1"
    );
    assert!(worker.claim("w", TTL).expect("claims").is_none(), "held");
    assert!(server
        .resume_claimed(&held, "{}", "server-2", TTL)
        .expect("answers")
        .is_none());
    // A run left `running` by an executor that died without a lease (interrupted).
    let interrupted = with_records(&server, "gone", "2026-01-01T00:00:00Z");
    assert!(server
        .resume_claimed(&interrupted, "{}", "server-1", TTL)
        .expect("claims")
        .is_some());
    server.release(&interrupted).expect("released");
    server.release(&held).expect("released");
    server.release(&claim.run_id).expect("released");
}
