//! The channel-backed interviewer: a question is published, and an answer is delivered
//! later, from another task or thread, through an [`AnswerHandle`] (a server's API, the
//! answer files of a detached run). The gate's timeout and cancellation drop the
//! waiting question, which withdraws it.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

use super::{Answer, AnswerSource, BoxFuture, Interviewer, Matching, Question, Reply, Unanswered};

/// Waits for answers given through its [`AnswerHandle`]; every question it is asked
/// stays open until answered or dropped.
pub struct ChannelInterviewer {
    shared: Arc<Shared>,
}

/// Gives answers to the questions a [`ChannelInterviewer`] has open.
#[derive(Clone)]
pub struct AnswerHandle {
    shared: Arc<Shared>,
}

/// Why an answer was not delivered.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AnswerError {
    /// No open question has this id (never asked, answered already, or withdrawn).
    #[error("question {question_id} is not pending")]
    NotPending {
        /// The id asked for.
        question_id: String,
    },
    /// The answer does not fit the question; the question stays open.
    #[error("{}", .reason.reason(.node_id))]
    Rejected {
        /// The gate.
        node_id: String,
        /// Why.
        reason: Unanswered,
    },
}

#[derive(Default)]
struct Shared {
    /// Open questions, in the order they were asked.
    open: Mutex<Vec<Open>>,
}

struct Open {
    question: Question,
    reply: oneshot::Sender<Answer>,
}

impl ChannelInterviewer {
    /// An interviewer and the handle that answers it.
    pub fn new() -> (ChannelInterviewer, AnswerHandle) {
        let shared = Arc::new(Shared::default());
        let handle = AnswerHandle {
            shared: Arc::clone(&shared),
        };
        (ChannelInterviewer { shared }, handle)
    }
}

impl Interviewer for ChannelInterviewer {
    fn ask<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Reply> {
        let (sender, receiver) = oneshot::channel();
        self.shared.lock().push(Open {
            question: question.clone(),
            reply: sender,
        });
        let withdraw = Withdraw {
            shared: &self.shared,
            question_id: question.id(),
        };
        Box::pin(async move {
            let _withdraw = withdraw;
            match receiver.await {
                Ok(answer) => Reply::Answered(answer, AnswerSource::Api),
                // The sender went away unanswered: only a withdrawn question loses it.
                Err(_) => Reply::Unanswered(Unanswered::Unavailable),
            }
        })
    }
}

impl AnswerHandle {
    /// The open questions, oldest first.
    pub fn pending(&self) -> Vec<Question> {
        self.shared
            .lock()
            .iter()
            .map(|open| open.question.clone())
            .collect()
    }

    /// Answers question `question_id` with `value`, matched like `--answer` (SPEC 5.5);
    /// returns the question and the accepted answer.
    pub fn answer(
        &self,
        question_id: &str,
        value: &str,
    ) -> Result<(Question, Answer), AnswerError> {
        self.deliver(question_id, |question| {
            question.resolve(value, Matching::Answer)
        })
    }

    /// Answers question `question_id` with free `text` for the freeform edge `label`
    /// names.
    pub fn answer_text(
        &self,
        question_id: &str,
        label: &str,
        text: &str,
    ) -> Result<(Question, Answer), AnswerError> {
        self.deliver(question_id, |question| question.resolve_text(label, text))
    }

    fn deliver(
        &self,
        question_id: &str,
        resolve: impl FnOnce(&Question) -> Result<Answer, Unanswered>,
    ) -> Result<(Question, Answer), AnswerError> {
        let not_pending = || AnswerError::NotPending {
            question_id: question_id.to_owned(),
        };
        let mut open = self.shared.lock();
        let index = open
            .iter()
            .position(|open| open.question.id() == question_id)
            .ok_or_else(not_pending)?;
        let answer = resolve(&open[index].question).map_err(|reason| AnswerError::Rejected {
            node_id: open[index].question.node_id().to_owned(),
            reason,
        })?;
        let Open { question, reply } = open.remove(index);
        reply.send(answer.clone()).map_err(|_| not_pending())?;
        Ok((question, answer))
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Open>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Removes a question from the open list when its asking ends, however it ends.
struct Withdraw<'a> {
    shared: &'a Shared,
    question_id: &'a str,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        self.shared
            .lock()
            .retain(|open| open.question.id() != self.question_id);
    }
}

impl std::fmt::Debug for ChannelInterviewer {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ChannelInterviewer")
            .field("open", &self.shared.lock().len())
            .finish()
    }
}

impl std::fmt::Debug for AnswerHandle {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("AnswerHandle")
            .field("open", &self.shared.lock().len())
            .finish()
    }
}
