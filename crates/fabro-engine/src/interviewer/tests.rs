//! Unit tests of the shipped interviewers: `--answer` values, auto-approve, the
//! first-applicable list, the channel and the answer files of detached runs.

use std::sync::Arc;
use std::time::Duration;

use super::test_support::Scripted;
use super::*;
use crate::handler::test_support::workflow;

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

#[tokio::test]
async fn detached_runs_take_answers_from_files() {
    let run_dir = tempfile::tempdir().expect("run directory");
    // The run holds its lock, as an executing run does.
    let _lock = crate::run_index::RunLock::acquire(run_dir.path()).expect("run lock");
    let interviewer = Arc::new(FileInterviewer::new(run_dir.path()));
    let question = question("gate", MENU, "");
    assert!(pending_question(run_dir.path())
        .expect("readable")
        .is_none());
    let asking = tokio::spawn({
        let interviewer = Arc::clone(&interviewer);
        let question = question.clone();
        async move { interviewer.ask(&question).await }
    });
    let pending = loop {
        if let Some(pending) = pending_question(run_dir.path()).expect("readable") {
            break pending;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(pending, question);
    let path = run_dir.path().to_path_buf();
    let rejected = tokio::task::spawn_blocking(move || {
        answer_pending(&path, "later", None, Duration::from_secs(10))
    })
    .await
    .expect("joined");
    assert_eq!(
        rejected.map_err(|error| error.to_string()).err().as_deref(),
        Some("answer 'later' matches no option of gate gate")
    );
    let path = run_dir.path().to_path_buf();
    let (_, answer) = tokio::task::spawn_blocking(move || {
        answer_pending(&path, "retry", None, Duration::from_secs(10))
    })
    .await
    .expect("joined")
    .expect("answered");
    assert_eq!(answer, Answer::Option(1));
    assert_eq!(
        asking.await.expect("joined"),
        answered(1, AnswerSource::Api)
    );
    assert!(pending_question(run_dir.path())
        .expect("readable")
        .is_none());
    let leftovers: Vec<_> = fs_err::read_dir(run_dir.path().join("answers"))
        .expect("answers directory")
        .map(|entry| entry.expect("entry").file_name())
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert!(matches!(
        answer_pending(run_dir.path(), "a", None, Duration::from_secs(1)),
        Err(AnswerFileError::NoQuestion)
    ));
}

#[tokio::test]
async fn unreadable_answer_files_are_taken_and_ignored() {
    let run_dir = tempfile::tempdir().expect("run directory");
    let _lock = crate::run_index::RunLock::acquire(run_dir.path()).expect("run lock");
    let interviewer = Arc::new(FileInterviewer::new(run_dir.path()));
    let question = question("gate", MENU, "");
    let asking = tokio::spawn({
        let interviewer = Arc::clone(&interviewer);
        let question = question.clone();
        async move { tokio::time::timeout(Duration::from_millis(300), interviewer.ask(&question)).await }
    });
    while pending_question(run_dir.path())
        .expect("readable")
        .is_none()
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Written by hand: the run takes it, ignores it and keeps waiting until its timeout.
    let answers = run_dir.path().join("answers");
    let request = answers.join(format!("{}.json", question.id()));
    fs_err::write(&request, "not JSON").expect("request");
    assert!(
        asking.await.expect("joined").is_err(),
        "still waiting at the timeout"
    );
    assert!(pending_question(run_dir.path())
        .expect("readable")
        .is_none());
    assert!(!request.exists());
}
