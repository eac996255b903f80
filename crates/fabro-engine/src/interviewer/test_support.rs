//! A scripted interviewer for tests: replies from a list, then waits forever like a
//! person who never answers; it records every question it was asked.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::{BoxFuture, Interviewer, Question, Reply};

/// Replies in order; with none left, waits until dropped.
#[derive(Debug, Default)]
pub(crate) struct Scripted {
    replies: Mutex<VecDeque<Reply>>,
    asked: Mutex<Vec<Question>>,
    /// Questions being waited on right now.
    open: Arc<Mutex<usize>>,
}

impl Scripted {
    pub(crate) fn new(replies: impl IntoIterator<Item = Reply>) -> Scripted {
        Scripted {
            replies: Mutex::new(replies.into_iter().collect()),
            ..Scripted::default()
        }
    }

    /// Never answers.
    pub(crate) fn silent() -> Scripted {
        Scripted::default()
    }

    /// The questions asked so far.
    pub(crate) fn asked(&self) -> Vec<Question> {
        self.asked.lock().expect("test lock").clone()
    }

    /// How many questions are waited on now.
    pub(crate) fn open(&self) -> usize {
        *self.open.lock().expect("test lock")
    }
}

impl Interviewer for Scripted {
    fn ask<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Reply> {
        self.asked.lock().expect("test lock").push(question.clone());
        let next = self.replies.lock().expect("test lock").pop_front();
        Box::pin(async move {
            match next {
                Some(reply) => reply,
                None => {
                    let _open = OpenGuard::new(Arc::clone(&self.open));
                    std::future::pending().await
                }
            }
        })
    }
}

/// Counts a waiting question until dropped.
struct OpenGuard(Arc<Mutex<usize>>);

impl OpenGuard {
    fn new(open: Arc<Mutex<usize>>) -> OpenGuard {
        *open.lock().expect("test lock") += 1;
        OpenGuard(open)
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        *self.0.lock().expect("test lock") -= 1;
    }
}
