//! Human gates of detached runs (SPEC 17.4): the run publishes its open question as
//! `{run_dir}/answers/pending.json` and watches `answers/` for an answer file, which
//! `fabro answer` writes from another process.
//!
//! The protocol, all within `{run_dir}/answers/`:
//! - `pending.json` (a [`Question`]) exists while a question is open; one question is
//!   open at a time, like on a console. It is removed when the question closes
//!   (answered, timed out, cancelled).
//! - `fabro answer` checks its value against the question, then creates
//!   `{question}.json` (an answer request) with an exclusive hard link, so only one answer
//!   per question is ever written.
//! - The run takes a request by renaming it to `{question}.taken`, so either the run
//!   takes it or `fabro answer` withdraws it (when the question closed first), never
//!   both; `fabro answer` succeeds once the request is gone.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::channel::{AnswerError, AnswerHandle, ChannelInterviewer};
use super::{Answer, BoxFuture, Interviewer, Matching, Question, Reply, Unanswered};
use crate::run_dir::write_json_atomic;
use crate::run_index::RunLock;

/// The directory of a run's answer files.
const ANSWERS_DIR: &str = "answers";
/// The open question.
const PENDING: &str = "pending.json";
/// How often the run looks for an answer file, and `fabro answer` for its taking.
const POLL: Duration = Duration::from_millis(50);

/// Waits for answers written by `fabro answer` (SPEC 17.4), through a
/// [`ChannelInterviewer`] fed from the answer files.
pub struct FileInterviewer {
    dir: PathBuf,
    channel: ChannelInterviewer,
    handle: AnswerHandle,
    /// One open question at a time: `fabro answer` answers "the" pending question.
    turn: tokio::sync::Mutex<()>,
}

/// Why `fabro answer` did not answer.
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
        /// How long `fabro answer` waited.
        waited: Duration,
    },
    /// An answer file could not be read or written.
    #[error("{action} {}", .path.display())]
    Io {
        /// What was attempted.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// `pending.json` is not a question.
    #[error("{} is not a pending question", .path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
}

/// The content of `{question}.json`: an answer for one question.
#[derive(Debug, Serialize, Deserialize)]
struct AnswerRequest {
    question_id: String,
    /// Matched like `--answer`, or naming the freeform edge when `text` is given.
    label: String,
    /// Free text (`--text`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    text: Option<String>,
}

impl FileInterviewer {
    /// An interviewer for the run in `run_dir`.
    pub fn new(run_dir: &Path) -> FileInterviewer {
        let (channel, handle) = ChannelInterviewer::new();
        FileInterviewer {
            dir: run_dir.join(ANSWERS_DIR),
            channel,
            handle,
            turn: tokio::sync::Mutex::new(()),
        }
    }

    /// Feeds answer files for `question_id` to the channel until dropped.
    async fn watch(&self, question_id: &str) -> Infallible {
        let request = self.dir.join(request_file_name(question_id));
        let taken = request.with_extension("taken");
        loop {
            match fs_err::rename(&request, &taken) {
                Ok(()) => self.take(&taken),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => tracing::warn!(%error, "cannot take an answer file"),
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Delivers the answer request in `taken` and removes the file.
    fn take(&self, taken: &Path) {
        let request = fs_err::read(taken)
            .map_err(|error| error.to_string())
            .and_then(|bytes| {
                serde_json::from_slice::<AnswerRequest>(&bytes).map_err(|error| error.to_string())
            });
        if let Err(error) = fs_err::remove_file(taken) {
            tracing::warn!(%error, "cannot remove a taken answer file");
        }
        let delivered = request.and_then(|request| {
            match &request.text {
                Some(text) => self
                    .handle
                    .answer_text(&request.question_id, &request.label, text),
                None => self.handle.answer(&request.question_id, &request.label),
            }
            .map_err(|error: AnswerError| error.to_string())
        });
        if let Err(error) = delivered {
            tracing::warn!(%error, path = %taken.display(), "ignored an answer file");
        }
    }
}

impl Interviewer for FileInterviewer {
    fn ask<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Reply> {
        Box::pin(async move {
            let _turn = self.turn.lock().await;
            let pending = self.dir.join(PENDING);
            let published = fs_err::create_dir_all(&self.dir)
                .and_then(|()| write_json_atomic(&pending, question));
            if let Err(error) = published {
                tracing::warn!(%error, "cannot publish the pending question");
                return Reply::Declined;
            }
            let _unpublish = RemoveOnDrop(pending);
            tokio::select! {
                reply = self.channel.ask(question) => reply,
                never = self.watch(question.id()) => match never {},
            }
        })
    }
}

impl std::fmt::Debug for FileInterviewer {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("FileInterviewer")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// The question the run in `run_dir` waits on, if its process is alive and one is open.
pub fn pending_question(run_dir: &Path) -> Result<Option<Question>, AnswerFileError> {
    if !RunLock::is_held(run_dir) {
        return Ok(None);
    }
    let path = run_dir.join(ANSWERS_DIR).join(PENDING);
    let bytes = match fs_err::read(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(AnswerFileError::Io {
                action: "cannot read",
                path,
                source,
            })
        }
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| AnswerFileError::Format { path, source })
}

/// Answers the pending question of the run in `run_dir` with `label` (matched like
/// `--answer`), or with free `text` for the freeform edge `label` names, and waits at
/// most `patience` for the run to take it (SPEC 17.4 `fabro answer`).
pub fn answer_pending(
    run_dir: &Path,
    label: &str,
    text: Option<&str>,
    patience: Duration,
) -> Result<(Question, Answer), AnswerFileError> {
    let question = pending_question(run_dir)?.ok_or(AnswerFileError::NoQuestion)?;
    let node_id = question.node_id().to_owned();
    let answer = match text {
        Some(text) => question.resolve_text(label, text),
        None => question.resolve(label, Matching::Answer),
    }
    .map_err(|reason| AnswerFileError::Rejected {
        node_id: node_id.clone(),
        reason,
    })?;
    let request = AnswerRequest {
        question_id: question.id().to_owned(),
        label: label.to_owned(),
        text: text.map(str::to_owned),
    };
    let path = write_request(&run_dir.join(ANSWERS_DIR), &request, &node_id)?;
    let deadline = Instant::now() + patience;
    loop {
        if !path.exists() {
            return Ok((question, answer));
        }
        let still_open = pending_question(run_dir)
            .ok()
            .flatten()
            .is_some_and(|open| open.id() == question.id());
        if !still_open || Instant::now() >= deadline {
            // Withdraw the request, unless the run took it meanwhile.
            return match fs_err::remove_file(&path) {
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                    Ok((question, answer))
                }
                Err(source) => Err(AnswerFileError::Io {
                    action: "cannot withdraw",
                    path,
                    source,
                }),
                Ok(()) if still_open => Err(AnswerFileError::NotTaken { waited: patience }),
                Ok(()) => Err(AnswerFileError::Closed { node_id }),
            };
        }
        std::thread::sleep(POLL);
    }
}

/// Creates the request file of `request` in `dir`, failing when one exists already.
fn write_request(
    dir: &Path,
    request: &AnswerRequest,
    node_id: &str,
) -> Result<PathBuf, AnswerFileError> {
    let path = dir.join(request_file_name(&request.question_id));
    let temporary = dir.join(format!(
        ".{}.{}.tmp",
        request_file_name(&request.question_id),
        std::process::id()
    ));
    let io = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| AnswerFileError::Io {
            action,
            path,
            source,
        }
    };
    let bytes = serde_json::to_vec(request).map_err(|source| AnswerFileError::Format {
        path: path.clone(),
        source,
    })?;
    fs_err::write(&temporary, bytes).map_err(io("cannot write", &temporary))?;
    let linked = fs_err::hard_link(&temporary, &path);
    let _ = fs_err::remove_file(&temporary);
    match linked {
        Ok(()) => Ok(path),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
            Err(AnswerFileError::AlreadyAnswered {
                node_id: node_id.to_owned(),
            })
        }
        Err(source) => Err(io("cannot write", &path)(source)),
    }
}

/// `{question}.json`, with every character outside `[A-Za-z0-9_-]` of the question id
/// replaced (node ids may hold any character).
fn request_file_name(question_id: &str) -> String {
    let safe: String = question_id
        .chars()
        .map(|character| {
            if character.is_ascii_alphanumeric() || character == '_' || character == '-' {
                character
            } else {
                '_'
            }
        })
        .collect();
    format!("{safe}.json")
}

/// Removes a file when dropped.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Err(error) = fs_err::remove_file(&self.0) {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(%error, "cannot remove the pending question");
            }
        }
    }
}
