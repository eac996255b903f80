//! Human gates answered through the run store (SPEC 5.5, 14.3, 17.4): a
//! [`StoreInterviewer`] publishes the question it waits on in the run's
//! [`RunStore`] and takes the answers filed there, so that any process that reaches the
//! store answers it ([`answer_pending`]: `fabro answer`, a server's questions API);
//! answers given in the same process go through its [`AnswerHandle`] as well.
//!
//! Every question is open in the handle at once (a server lists all of them); the store
//! holds one open question at a time, like a console, in the order they were asked.

use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{RunStore, StoreError};
use crate::id::RunId;
use crate::interviewer::{
    Answer, AnswerHandle, BoxFuture, ChannelInterviewer, Interviewer, Matching, Question, Reply,
    Unanswered,
};

/// How often a waiting run looks for a filed answer, and [`answer_pending`] for its
/// taking.
const POLL: Duration = Duration::from_millis(50);

/// An answer filed in the store for one question (SPEC 17.4): the format of a run
/// directory's `answers/{question}.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FiledAnswer {
    /// The question answered.
    pub question_id: String,
    /// Matched like `--answer`, or naming the freeform edge when `text` is given.
    pub label: String,
    /// Free text (`--text`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// Why [`answer_pending`] did not answer.
#[derive(Debug, thiserror::Error)]
pub enum AnswerFileError {
    /// No question is open (none asked, or the run is not running).
    #[error("no pending human question")]
    NoQuestion,
    /// The value does not fit the question (SPEC 5.5 matching).
    #[error("{}", .reason.reason(.node_id))]
    Rejected {
        /// The gate.
        node_id: String,
        /// Why.
        reason: Unanswered,
    },
    /// Another answer to the same question came first.
    #[error("the question of gate {node_id} has been answered already")]
    AlreadyAnswered {
        /// The gate.
        node_id: String,
    },
    /// The question closed (timeout, cancellation) before the run took the answer.
    #[error("the question of gate {node_id} closed before the run took the answer")]
    Closed {
        /// The gate.
        node_id: String,
    },
    /// The run did not take the answer in time; the answer was withdrawn.
    #[error("the run did not take the answer within {}s", .waited.as_secs())]
    NotTaken {
        /// How long the caller waited.
        waited: Duration,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Waits for answers filed in the run store or given through its [`AnswerHandle`].
pub struct StoreInterviewer {
    store: Arc<dyn RunStore>,
    run_id: OnceLock<RunId>,
    channel: ChannelInterviewer,
    handle: AnswerHandle,
    /// One question at a time in the store: answers are filed for "the" pending one.
    turn: tokio::sync::Mutex<()>,
}

impl StoreInterviewer {
    /// An interviewer for run `run_id` of `store`.
    pub fn new(store: Arc<dyn RunStore>, run_id: &RunId) -> StoreInterviewer {
        let interviewer = StoreInterviewer::unbound(store);
        interviewer.bind(run_id);
        interviewer
    }

    /// An interviewer for a run whose id is known later ([`StoreInterviewer::bind`]);
    /// until then it waits on its handle alone.
    pub fn unbound(store: Arc<dyn RunStore>) -> StoreInterviewer {
        let (channel, handle) = ChannelInterviewer::new();
        StoreInterviewer {
            store,
            run_id: OnceLock::new(),
            channel,
            handle,
            turn: tokio::sync::Mutex::new(()),
        }
    }

    /// Names the run whose questions go to the store; the first call wins.
    pub fn bind(&self, run_id: &RunId) {
        let _ = self.run_id.set(run_id.clone());
    }

    /// Answers the open questions from this process.
    pub fn handle(&self) -> AnswerHandle {
        self.handle.clone()
    }

    /// Publishes `question` in the store when its turn comes (again and again while the
    /// store fails, so that a question asked while a shared store's connection is lost
    /// is published once it is back), and feeds the answers filed for it to the channel
    /// until dropped (which unpublishes it).
    async fn publish_and_watch(&self, run_id: &RunId, question: &Question) -> Infallible {
        let _turn = self.turn.lock().await;
        let mut published = None;
        let mut failing = false;
        loop {
            if published.is_none() {
                match self.store.set_pending_question(run_id, Some(question)) {
                    Ok(()) => {
                        if failing {
                            tracing::info!("published the pending question");
                        }
                        published = Some(Unpublish {
                            store: self.store.as_ref(),
                            run_id,
                        });
                    }
                    Err(error) if !failing => {
                        failing = true;
                        tracing::warn!(error = %crate::error_chain(&error), "cannot publish the pending question; trying again");
                    }
                    Err(_) => {}
                }
            }
            if published.is_some() {
                match self.store.take_answer(run_id, question.id()) {
                    Ok(Some(filed)) => self.deliver(&filed),
                    Ok(None) => {}
                    Err(error) => {
                        tracing::warn!(error = %crate::error_chain(&error), "cannot take a filed answer");
                    }
                }
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Gives `filed` to the waiting question.
    fn deliver(&self, filed: &FiledAnswer) {
        let delivered = match &filed.text {
            Some(text) => self
                .handle
                .answer_text(&filed.question_id, &filed.label, text),
            None => self.handle.answer(&filed.question_id, &filed.label),
        };
        if let Err(error) = delivered {
            tracing::warn!(%error, "ignored a filed answer");
        }
    }
}

/// Closes the run's published question when dropped.
struct Unpublish<'a> {
    store: &'a dyn RunStore,
    run_id: &'a RunId,
}

impl Drop for Unpublish<'_> {
    fn drop(&mut self) {
        if let Err(error) = self.store.set_pending_question(self.run_id, None) {
            tracing::warn!(error = %crate::error_chain(&error), "cannot remove the pending question");
        }
    }
}

impl Interviewer for StoreInterviewer {
    fn ask<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Reply> {
        // Open in the handle at once; in the store when its turn comes.
        let reply = self.channel.ask(question);
        Box::pin(async move {
            let Some(run_id) = self.run_id.get() else {
                return reply.await;
            };
            tokio::select! {
                reply = reply => reply,
                never = self.publish_and_watch(run_id, question) => match never {},
            }
        })
    }
}

impl std::fmt::Debug for StoreInterviewer {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("StoreInterviewer")
            .field("run_id", &self.run_id.get())
            .finish_non_exhaustive()
    }
}

/// Answers the pending question of run `run_id` with `label` (matched like `--answer`),
/// or with free `text` for the freeform edge `label` names, and waits at most `patience`
/// for the run to take it (SPEC 17.4 `fabro answer`, SPEC 14.3 for a run another process
/// executes). Blocks.
pub fn answer_pending(
    store: &dyn RunStore,
    run_id: &RunId,
    label: &str,
    text: Option<&str>,
    patience: Duration,
) -> Result<(Question, Answer), AnswerFileError> {
    let question = store
        .pending_question(run_id)?
        .ok_or(AnswerFileError::NoQuestion)?;
    let node_id = question.node_id().to_owned();
    let answer = match text {
        Some(text) => question.resolve_text(label, text),
        None => question.resolve(label, Matching::Answer),
    }
    .map_err(|reason| AnswerFileError::Rejected {
        node_id: node_id.clone(),
        reason,
    })?;
    let filed = FiledAnswer {
        question_id: question.id().to_owned(),
        label: label.to_owned(),
        text: text.map(str::to_owned),
    };
    match store.file_answer(run_id, &filed) {
        Ok(()) => {}
        Err(StoreError::AnswerFiled { .. }) => {
            return Err(AnswerFileError::AlreadyAnswered { node_id })
        }
        Err(error) => return Err(error.into()),
    }
    let deadline = Instant::now() + patience;
    loop {
        if !store.answer_waiting(run_id, question.id())? {
            return Ok((question, answer));
        }
        let still_open = store
            .pending_question(run_id)
            .ok()
            .flatten()
            .is_some_and(|open| open.id() == question.id());
        if !still_open || Instant::now() >= deadline {
            // Withdraw the answer, unless the run took it meanwhile.
            return match store.withdraw_answer(run_id, question.id())? {
                false => Ok((question, answer)),
                true if still_open => Err(AnswerFileError::NotTaken { waited: patience }),
                true => Err(AnswerFileError::Closed { node_id }),
            };
        }
        std::thread::sleep(POLL);
    }
}
