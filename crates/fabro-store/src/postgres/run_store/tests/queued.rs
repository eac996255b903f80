//! The writes of a run that executes through the store are queued (see
//! [`writer`](super::super::writer)): its next checkpoint stores them in its statement.

use super::*;

/// When a checkpoint returns, the events and stage saves queued before it are stored
/// (read here past the store, whose own reads wait for the queue), and two saves of a
/// stage in one statement keep the later.
#[test]
fn a_checkpoint_stores_the_events_and_stage_saves_queued_before_it() {
    let Some((database, store)) = store("pg_checkpoint_stores_what_was_queued") else {
        return;
    };
    let run = with_records(&store, "q1", "2026-01-01T00:00:00Z");
    let directory = tempfile::tempdir().expect("temp dir");
    let path = directory.path().join("001-plan@1");
    fs_err::create_dir_all(&path).expect("stage directory");
    let plan = StageDir {
        rank: 1,
        node_id: "plan".to_owned(),
        visit: 1,
        path,
    };
    let opened = store.open_events(&run, Opening::New).expect("opens");
    let emitter = Emitter::with_log("q1", opened.log, opened.next_id, Vec::new());
    let mut checkpoints = store.open_checkpoints(&run, Opening::New).expect("opens");
    for round in 1..=3 {
        emitter.emit(Event::warning(None, "started", "m"));
        fs_err::write(plan.path.join("prompt.md"), format!("round {round}")).expect("writes");
        store.save_stage(&run, &plan).expect("queued");
        fs_err::write(plan.path.join("response.md"), format!("answer {round}")).expect("writes");
        store.save_stage(&run, &plan).expect("queued");
        emitter.emit(Event::warning(None, "ended", "m"));
        checkpoints
            .write(
                &checkpoint("q1", &["plan"], None).view(),
                &ChangeHint::everything(),
            )
            .expect("stored");
        assert_eq!(
            database.query("SELECT count(*) FROM run_events"),
            (2 * round).to_string()
        );
        assert_eq!(
            database.query(
                "SELECT convert_from(content, 'UTF8') FROM stage_files WHERE path = '1/response.md'"
            ),
            format!("answer {round}")
        );
        assert_eq!(
            database.query("SELECT array_to_string(files, ',') FROM run_stages"),
            "prompt.md,response.md"
        );
        assert_eq!(
            database.query("SELECT count(*) FROM run_journal"),
            round.to_string()
        );
    }
    drop(emitter);
}
