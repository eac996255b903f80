//! Where human gates get their answers (SPEC 5.5): the [`Interviewer`] seam and the
//! interviewers the engine ships.
//!
//! A human gate builds a [`Question`] and asks the run's interviewer, which is a
//! [`FirstApplicable`] list: `--answer` values ([`AnswerFlags`]), `--auto-approve`
//! ([`AutoApprove`]), then whatever interactive source the embedder supplies: the
//! console of `fabro-cli`, or the store's
//! [`StoreInterviewer`](crate::store::StoreInterviewer) in a detached run or a server
//! (answered through the run store, by `fabro answer` or the server's questions API, and
//! through its [`AnswerHandle`] in the same process). An interviewer that does not apply [declines](Reply::Declined) and
//! the next one is asked; when every one declines the gate fails closed. The gate's
//! `timeout`, its default choice and cancellation are applied around the whole list by
//! the gate, so every waiting interviewer honours them alike.

mod channel;
mod question;

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

pub use channel::{AnswerError, AnswerHandle, ChannelInterviewer};
pub use question::{Answer, GateOption, Matching, Question, QuestionType, Unanswered};

/// A boxed future that can cross threads, the return type of [`Interviewer::ask`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One source of human answers (SPEC 5.5), passed as `Arc<dyn Interviewer>`.
pub trait Interviewer: Send + Sync {
    /// Asks `question`. The future may wait for a person; the gate drops it when the
    /// gate's timeout passes or the run is cancelled, so it must stop asking when
    /// dropped.
    fn ask<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Reply>;
}

/// What an interviewer made of a question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// This source does not apply; the next one is asked.
    Declined,
    /// An answer, and the source it came from.
    Answered(Answer, AnswerSource),
    /// The source applied but got no usable answer (the gate fails with its reason).
    Unanswered(Unanswered),
}

/// Which source answered (`HumanAnswer.source`, SPEC 5.5 and 14.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerSource {
    /// `--answer NODE=LABEL`.
    AnswerFlag,
    /// `--auto-approve` (and a dry run).
    AutoApprove,
    /// The console.
    Console,
    /// The gate's timeout passed and its default choice was used.
    TimeoutDefault,
    /// `fabro answer`, the API or the web UI.
    Api,
}

impl AnswerSource {
    /// The value of `HumanAnswer.source`.
    pub fn as_str(self) -> &'static str {
        match self {
            AnswerSource::AnswerFlag => "answer_flag",
            AnswerSource::AutoApprove => "auto_approve",
            AnswerSource::Console => "console",
            AnswerSource::TimeoutDefault => "timeout_default",
            AnswerSource::Api => "api",
        }
    }
}

/// Interviewers asked in order; the first that does not decline answers (SPEC 5.5).
pub(crate) struct FirstApplicable {
    sources: Vec<Arc<dyn Interviewer>>,
}

impl FirstApplicable {
    /// The sources, in the order they are asked.
    pub(crate) fn new(sources: Vec<Arc<dyn Interviewer>>) -> FirstApplicable {
        FirstApplicable { sources }
    }
}

impl Interviewer for FirstApplicable {
    fn ask<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Reply> {
        Box::pin(async move {
            for source in &self.sources {
                match source.ask(question).await {
                    Reply::Declined => continue,
                    reply => return reply,
                }
            }
            Reply::Declined
        })
    }
}

/// `--answer NODE=LABEL` values: one per visit of the node, in command-line order; a
/// node with none left declines.
#[derive(Debug, Default)]
pub(crate) struct AnswerFlags {
    by_node: Mutex<BTreeMap<String, VecDeque<String>>>,
}

impl AnswerFlags {
    /// The values of `--answer`, as `(node, label)` in command-line order.
    pub(crate) fn new(answers: &[(String, String)]) -> AnswerFlags {
        let mut by_node: BTreeMap<String, VecDeque<String>> = BTreeMap::new();
        for (node, answer) in answers {
            by_node
                .entry(node.clone())
                .or_default()
                .push_back(answer.clone());
        }
        AnswerFlags {
            by_node: Mutex::new(by_node),
        }
    }

    /// Takes the next value for `node_id`, if one is left.
    fn next(&self, node_id: &str) -> Option<String> {
        self.by_node
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(node_id)
            .and_then(VecDeque::pop_front)
    }
}

impl Interviewer for AnswerFlags {
    fn ask<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Reply> {
        let reply = match self.next(question.node_id()) {
            None => Reply::Declined,
            Some(value) => match question.resolve(&value, Matching::Answer) {
                Ok(answer) => Reply::Answered(answer, AnswerSource::AnswerFlag),
                Err(unanswered) => Reply::Unanswered(unanswered),
            },
        };
        Box::pin(std::future::ready(reply))
    }
}

/// `--auto-approve`: the default choice, else the first option, else `auto-approved`.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct AutoApprove;

impl Interviewer for AutoApprove {
    fn ask<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Reply> {
        Box::pin(std::future::ready(automatic_reply(question)))
    }
}

/// The `--auto-approve` reply to `question` (also a dry run's, SPEC 4.9).
pub(crate) fn automatic_reply(question: &Question) -> Reply {
    match question.automatic_answer() {
        Ok(answer) => Reply::Answered(answer, AnswerSource::AutoApprove),
        Err(unanswered) => Reply::Unanswered(unanswered),
    }
}

#[cfg(test)]
pub(crate) mod test_support;
#[cfg(test)]
mod tests;
