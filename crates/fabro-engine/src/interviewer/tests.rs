//! Unit tests of the shipped interviewers: `--answer` values, auto-approve, the
//! first-applicable list, the channel and the answer files of detached runs.

use std::sync::Arc;
use std::time::Duration;

use super::test_support::Scripted;
use super::*;
use crate::handler::test_support::workflow;
use crate::store::{answer_pending, AnswerFileError, FiledAnswer, StoreInterviewer};

fn question(node: &str, edges: &str, attributes: &str) -> Question {
    let workflow = workflow(&format!(
        "digraph t {{\n start [shape=Mdiamond]\n exit [shape=Msquare]\n {node} [shape=hexagon, label=\"Ship it?\"{attributes}]\n start -> {node}\n {edges}\n}}"
    ));
    let gate = workflow.find(node).expect("gate node");
    Question::of_gate(
        &workflow,
        gate,
        format!("{node}-1-{}", ulid::Ulid::new()),
        "",
    )
    .expect("a question")
}

const MENU: &str = "gate -> exit [label=\"[A] Approve\"]\n gate -> fix [label=\"[R] Retry\"]";
const WITH_FREEFORM: &str =
    "gate -> exit [label=\"[A] Approve\"]\n gate -> notes [label=\"Comment\", freeform=true]";

fn answered(index: usize, source: AnswerSource) -> Reply {
    Reply::Answered(Answer::Option(index), source)
}

#[tokio::test]
async fn answer_flags_are_consumed_per_node_then_decline() {
    let flags = AnswerFlags::new(&[
        ("other".to_owned(), "a".to_owned()),
        ("gate".to_owned(), "r".to_owned()),
        ("gate".to_owned(), "nope".to_owned()),
    ]);
    let question = question("gate", MENU, "");
    assert_eq!(
        flags.ask(&question).await,
        answered(1, AnswerSource::AnswerFlag)
    );
    assert_eq!(
        flags.ask(&question).await,
        Reply::Unanswered(Unanswered::NoMatch("nope".to_owned()))
    );
    assert_eq!(flags.ask(&question).await, Reply::Declined);
}

#[tokio::test]
async fn auto_approve_takes_the_default_choice() {
    let question = question("gate", MENU, ", human.default_choice=fix");
    assert_eq!(
        AutoApprove.ask(&question).await,
        answered(1, AnswerSource::AutoApprove)
    );
}

#[tokio::test]
async fn first_applicable_asks_in_order_until_one_applies() {
    let question = question("gate", MENU, "");
    let declining = Arc::new(Scripted::new([Reply::Declined]));
    let answering = Arc::new(Scripted::new([answered(0, AnswerSource::Console)]));
    let never_asked = Arc::new(Scripted::silent());
    let list = FirstApplicable::new(vec![
        declining.clone(),
        answering.clone(),
        never_asked.clone(),
    ]);
    assert_eq!(
        list.ask(&question).await,
        answered(0, AnswerSource::Console)
    );
    assert_eq!(declining.asked().len(), 1);
    assert_eq!(answering.asked().len(), 1);
    assert!(never_asked.asked().is_empty());
    assert_eq!(
        FirstApplicable::new(Vec::new()).ask(&question).await,
        Reply::Declined
    );
}

#[tokio::test]
async fn the_channel_publishes_questions_and_takes_answers_through_its_handle() {
    let (interviewer, handle) = ChannelInterviewer::new();
    let question = question("gate", WITH_FREEFORM, "");
    assert!(handle.pending().is_empty());
    let asking = interviewer.ask(&question);
    tokio::pin!(asking);
    // Asking publishes the question; nothing is answered yet.
    assert!(futures_poll(&mut asking).is_none());
    assert_eq!(handle.pending(), std::slice::from_ref(&question));
    assert_eq!(
        handle.answer("other-id", "a"),
        Err(AnswerError::NotPending {
            question_id: "other-id".to_owned()
        })
    );
    // A rejected answer keeps the question open.
    assert_eq!(
        handle.answer_text(question.id(), "a", "text"),
        Err(AnswerError::Rejected {
            node_id: "gate".to_owned(),
            reason: Unanswered::NoMatch("a".to_owned())
        })
    );
    let (answered_question, answer) = handle
        .answer_text(question.id(), "comment", "ship it")
        .expect("accepted");
    assert_eq!(answered_question.id(), question.id());
    assert_eq!(answer, Answer::Freeform("ship it".to_owned()));
    assert_eq!(
        asking.await,
        Reply::Answered(Answer::Freeform("ship it".to_owned()), AnswerSource::Api)
    );
    assert!(handle.pending().is_empty());
    assert!(matches!(
        handle.answer(question.id(), "a"),
        Err(AnswerError::NotPending { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_channel_question_is_withdrawn() {
    let (interviewer, handle) = ChannelInterviewer::new();
    let question = question("gate", MENU, "");
    let timed_out = tokio::time::timeout(Duration::from_secs(1), interviewer.ask(&question)).await;
    assert!(timed_out.is_err());
    assert!(handle.pending().is_empty());
    assert!(matches!(
        handle.answer(question.id(), "a"),
        Err(AnswerError::NotPending { .. })
    ));
}

/// Polls `future` once.
fn futures_poll<F: std::future::Future + Unpin>(future: &mut F) -> Option<F::Output> {
    let waker = std::task::Waker::noop();
    let mut context = std::task::Context::from_waker(waker);
    match std::pin::Pin::new(future).poll(&mut context) {
        std::task::Poll::Ready(output) => Some(output),
        std::task::Poll::Pending => None,
    }
}

/// Answers filed in the run store reach a waiting [`StoreInterviewer`], in the file
/// store (a detached run's answer files) and in memory alike.
#[tokio::test]
async fn detached_runs_take_answers_filed_in_the_store() {
    let root = tempfile::tempdir().expect("root");
    let run_id = crate::RunId::from("r");
    let run_dir = crate::run_dir::RunPaths::new(root.path(), "r")
        .run_dir()
        .to_path_buf();
    fs_err::create_dir_all(&run_dir).expect("run directory");
    let stores: [Arc<dyn crate::RunStore>; 2] = [
        Arc::new(crate::FsRunStore::new(root.path())),
        Arc::new(crate::MemoryRunStore::new()),
    ];
    for store in stores {
        // The run holds its lock, as an executing run does.
        let lease = store.lock(&run_id).expect("run lock");
        let interviewer = Arc::new(StoreInterviewer::new(Arc::clone(&store), &run_id));
        let question = question("gate", MENU, "");
        assert!(store.pending_question(&run_id).expect("readable").is_none());
        let asking = tokio::spawn({
            let interviewer = Arc::clone(&interviewer);
            let question = question.clone();
            async move { interviewer.ask(&question).await }
        });
        let pending = loop {
            if let Some(pending) = store.pending_question(&run_id).expect("readable") {
                break pending;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        assert_eq!(pending, question);
        let answer = |label: &'static str| {
            let (store, run_id) = (Arc::clone(&store), run_id.clone());
            tokio::task::spawn_blocking(move || {
                answer_pending(
                    store.as_ref(),
                    &run_id,
                    label,
                    None,
                    Duration::from_secs(10),
                )
            })
        };
        let rejected = answer("later").await.expect("joined");
        assert_eq!(
            rejected.map_err(|error| error.to_string()).err().as_deref(),
            Some("answer 'later' matches no option of gate gate")
        );
        let (_, answer) = answer("retry").await.expect("joined").expect("answered");
        assert_eq!(answer, Answer::Option(1));
        assert_eq!(
            asking.await.expect("joined"),
            answered(1, AnswerSource::Api)
        );
        assert!(store.pending_question(&run_id).expect("readable").is_none());
        assert!(!store
            .answer_waiting(&run_id, question.id())
            .expect("readable"));
        assert!(matches!(
            answer_pending(store.as_ref(), &run_id, "a", None, Duration::from_secs(1)),
            Err(AnswerFileError::NoQuestion)
        ));
        drop(lease);
    }
    let leftovers: Vec<_> = fs_err::read_dir(run_dir.join("answers"))
        .expect("answers directory")
        .map(|entry| entry.expect("entry").file_name())
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// Questions are open in the handle at once, and in the store one at a time; a filed
/// answer is taken once, and a second filing of the same question is refused.
#[tokio::test]
async fn the_store_holds_one_question_at_a_time_and_one_answer_per_question() {
    let store: Arc<dyn crate::RunStore> = Arc::new(crate::MemoryRunStore::new());
    let run_id = crate::RunId::from("r");
    let _lease = store.lock(&run_id).expect("run lock");
    let interviewer = Arc::new(StoreInterviewer::new(Arc::clone(&store), &run_id));
    let first = question("gate", MENU, "");
    let second = question("other", &MENU.replace("gate", "other"), "");
    let asking: Vec<_> = [first.clone(), second.clone()]
        .into_iter()
        .map(|question| {
            let interviewer = Arc::clone(&interviewer);
            tokio::spawn(async move { interviewer.ask(&question).await })
        })
        .collect();
    let handle = interviewer.handle();
    while handle.pending().len() < 2 || store.pending_question(&run_id).expect("reads").is_none() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let published = store
        .pending_question(&run_id)
        .expect("reads")
        .expect("one question");
    let filed = FiledAnswer {
        question_id: published.id().to_owned(),
        label: "A".to_owned(),
        text: None,
    };
    store.file_answer(&run_id, &filed).expect("files");
    assert!(matches!(
        store.file_answer(&run_id, &filed),
        Err(crate::store::StoreError::AnswerFiled { .. })
    ));
    assert!(store
        .withdraw_answer(&run_id, published.id())
        .expect("withdraws"));
    assert!(!store
        .withdraw_answer(&run_id, published.id())
        .expect("withdraws"));
    store.file_answer(&run_id, &filed).expect("files again");
    // The run takes it, and the other question is published.
    let other = loop {
        match store.pending_question(&run_id).expect("reads") {
            Some(open) if open.id() != published.id() => break open,
            _ => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    };
    assert_eq!(handle.pending(), std::slice::from_ref(&other));
    handle.answer(other.id(), "R").expect("answered in process");
    for task in asking {
        assert!(matches!(
            task.await.expect("joined"),
            Reply::Answered(_, AnswerSource::Api)
        ));
    }
    assert!(store.pending_question(&run_id).expect("reads").is_none());
    assert!([first.id(), second.id()].contains(&published.id()));
}

#[tokio::test]
async fn unreadable_answer_files_are_taken_and_ignored() {
    let root = tempfile::tempdir().expect("root");
    let run_dir = crate::run_dir::RunPaths::new(root.path(), "r")
        .run_dir()
        .to_path_buf();
    fs_err::create_dir_all(&run_dir).expect("run directory");
    let store: Arc<dyn crate::RunStore> = Arc::new(crate::FsRunStore::new(root.path()));
    let run_id = crate::RunId::from("r");
    let _lock = store.lock(&run_id).expect("run lock");
    let interviewer = Arc::new(StoreInterviewer::new(Arc::clone(&store), &run_id));
    let question = question("gate", MENU, "");
    let asking = tokio::spawn({
        let interviewer = Arc::clone(&interviewer);
        let question = question.clone();
        async move { tokio::time::timeout(Duration::from_millis(300), interviewer.ask(&question)).await }
    });
    while store.pending_question(&run_id).expect("readable").is_none() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Written by hand: the run takes it, ignores it and keeps waiting until its timeout.
    let answers = run_dir.join("answers");
    let request = answers.join(format!("{}.json", question.id()));
    fs_err::write(&request, "not JSON").expect("request");
    assert!(
        asking.await.expect("joined").is_err(),
        "still waiting at the timeout"
    );
    assert!(store.pending_question(&run_id).expect("readable").is_none());
    assert!(!request.exists());
}

/// A question asked while the store cannot publish it (a shared store's connection
/// lost a moment, here an `answers` path that is a file) is published once the store
/// works again, and answered through it.
#[tokio::test]
async fn a_question_the_store_cannot_publish_is_published_once_it_can() {
    let root = tempfile::tempdir().expect("root");
    let run_id = crate::RunId::from("r");
    let run_dir = crate::run_dir::RunPaths::new(root.path(), "r")
        .run_dir()
        .to_path_buf();
    fs_err::create_dir_all(&run_dir).expect("run directory");
    fs_err::write(run_dir.join("answers"), "in the way").expect("a file");
    let store: Arc<dyn crate::RunStore> = Arc::new(crate::FsRunStore::new(root.path()));
    let _lease = store.lock(&run_id).expect("run lock");
    let interviewer = Arc::new(StoreInterviewer::new(Arc::clone(&store), &run_id));
    let question = question("gate", MENU, "");
    let asking = tokio::spawn({
        let interviewer = Arc::clone(&interviewer);
        let question = question.clone();
        async move { interviewer.ask(&question).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!run_dir.join("answers").is_dir(), "nothing published");
    fs_err::remove_file(run_dir.join("answers")).expect("removed");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while store.pending_question(&run_id).expect("readable").is_none() {
        assert!(std::time::Instant::now() < deadline, "never published");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let answered_in_store = tokio::task::spawn_blocking({
        let (store, run_id) = (Arc::clone(&store), run_id.clone());
        move || {
            answer_pending(
                store.as_ref(),
                &run_id,
                "retry",
                None,
                Duration::from_secs(10),
            )
        }
    })
    .await
    .expect("joined");
    assert_eq!(answered_in_store.expect("answered").1, Answer::Option(1));
    assert_eq!(
        asking.await.expect("joined"),
        answered(1, AnswerSource::Api)
    );
}
