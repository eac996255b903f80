//! Steering messages through the store (SPEC 18.2, 20.1): posted by one process and
//! noticed by another at once; accepted or withdrawn, never both; delivered once; the
//! running agent stages trusted only while the run is held.

use fabro_engine::{RunningAgentStage, SteeringMessage, SteeringSource, SteeringStore};

use super::*;

fn message(text: &str) -> SteeringMessage {
    SteeringMessage {
        source: SteeringSource::Api,
        text: text.to_owned(),
    }
}

#[test]
fn steering_is_noticed_accepted_or_withdrawn_once_and_delivered_once() {
    let Some((database, server)) = store("pg_steering_messages") else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let worker = runtime.block_on(async {
        let store = PgStore::connect(&database.url()).await.expect("connects");
        PgRunStore::new(&store).expect("a run store")
    });
    let mut notices = worker.notices().expect("the database has notices");
    next_notice(&runtime, &mut notices, |notice| *notice == Notice::Missed);
    let run = with_records(&server, "s1", "2026-01-01T00:00:00Z");
    let (sender, executor) = (
        server.steering().expect("the store keeps steering"),
        worker.steering().expect("the store keeps steering"),
    );

    // Nothing runs: no stages, whatever a dead executor published.
    executor
        .publish_agent_stages(
            &run,
            &[RunningAgentStage {
                node_id: "work".to_owned(),
                backend: "api".to_owned(),
            }],
        )
        .expect("publishes");
    assert_eq!(sender.running_agent_stages(&run).expect("reads"), None);
    let lease = worker.lock(&run).expect("locks");
    let work = RunningAgentStage {
        node_id: "work".to_owned(),
        backend: "api".to_owned(),
    };
    assert_eq!(
        sender.running_agent_stages(&run).expect("reads"),
        Some(vec![work])
    );
    executor.publish_agent_stages(&run, &[]).expect("publishes");
    assert_eq!(
        sender.running_agent_stages(&run).expect("reads"),
        Some(Vec::new())
    );

    let first = sender
        .post_steering(&run, &message("Use the v2 API"))
        .expect("posts");
    assert_eq!(
        next_notice(&runtime, &mut notices, |notice| *notice != Notice::Missed),
        Notice::Steered(run.clone())
    );
    assert!(sender.steering_posted(&run, first).expect("reads"));
    let second = sender
        .post_steering(&run, &message("and keep the tests"))
        .expect("posts");
    // The sender of the second gives up first; the first is accepted.
    assert!(sender.withdraw_steering(&run, second).expect("withdraws"));
    let accepted = executor.accept_steering(&run).expect("accepts");
    assert_eq!(accepted, vec![(first, message("Use the v2 API"))]);
    assert!(!sender.steering_posted(&run, first).expect("reads"));
    assert!(
        !sender.withdraw_steering(&run, first).expect("withdraws"),
        "accepted before"
    );
    assert!(executor.accept_steering(&run).expect("accepts").is_empty());

    let own = executor
        .queue_steering(&run, &message("from the executor"))
        .expect("queues");
    // A takeover finds both undelivered, in order.
    assert_eq!(
        worker.queued_steering(&run).expect("reads"),
        vec![
            (first, message("Use the v2 API")),
            (own, message("from the executor"))
        ]
    );
    assert!(executor.deliver_steering(&run, first).expect("delivers"));
    assert!(
        !executor.deliver_steering(&run, first).expect("delivers"),
        "once"
    );
    assert_eq!(
        executor.queued_steering(&run).expect("reads"),
        vec![(own, message("from the executor"))]
    );
    assert_eq!(
        database.query(
            "SELECT string_agg(state, ',' ORDER BY message_id) FROM steering_messages \
             WHERE run_id = 's1'"
        ),
        "delivered,queued"
    );
    drop(lease);
}
