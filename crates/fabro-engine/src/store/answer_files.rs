//! The answer files of a run directory (SPEC 17.4): how [`FsRunStore`](super::FsRunStore)
//! keeps a run's open question and the answers filed for it, so that `fabro answer` and
//! a server reach a detached run from another process.
//!
//! The protocol, all within `{run_dir}/answers/`:
//! - `pending.json` (a [`Question`]) exists while a question is open; one question is
//!   open at a time, like on a console. It is removed when the question closes
//!   (answered, timed out, cancelled).
//! - An answer is filed as `{question}.json` (a [`FiledAnswer`]) with an exclusive hard
//!   link, so only one answer per question is ever written.
//! - The run takes a filed answer by renaming it to `{question}.taken`, so either the run
//!   takes it or its author withdraws it (when the question closed first), never both.

use std::path::{Path, PathBuf};

use super::{FiledAnswer, StoreError};
use crate::interviewer::Question;
use crate::run_dir::write_json_atomic;

/// The directory of a run's answer files.
const ANSWERS_DIR: &str = "answers";
/// The open question.
const PENDING: &str = "pending.json";

/// `action` on `path` failed.
fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = path.to_path_buf();
    move |source| StoreError::Io {
        action,
        path,
        source,
    }
}

/// Writes `question` as the run's `pending.json`, or (`None`) removes it.
pub(crate) fn publish(run_dir: &Path, question: Option<&Question>) -> Result<(), StoreError> {
    let directory = run_dir.join(ANSWERS_DIR);
    let path = directory.join(PENDING);
    match question {
        Some(question) => {
            fs_err::create_dir_all(&directory).map_err(io("cannot create", &directory))?;
            write_json_atomic(&path, question).map_err(io("cannot write", &path))
        }
        None => match fs_err::remove_file(&path) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                Err(io("cannot remove", &path)(error))
            }
            Ok(()) | Err(_) => Ok(()),
        },
    }
}

/// The run's `pending.json`, if it has one.
pub(crate) fn pending(run_dir: &Path) -> Result<Option<Question>, StoreError> {
    let path = run_dir.join(ANSWERS_DIR).join(PENDING);
    let bytes = match fs_err::read(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(io("cannot read", &path)(error)),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| StoreError::Invalid { path, source })
}

/// Creates the answer file of `answer`, failing with [`StoreError::AnswerFiled`] when
/// one exists already.
pub(crate) fn file(run_dir: &Path, run_id: &str, answer: &FiledAnswer) -> Result<(), StoreError> {
    let directory = run_dir.join(ANSWERS_DIR);
    let path = answer_path(run_dir, &answer.question_id);
    let temporary = directory.join(format!(
        ".{}.{}.tmp",
        request_file_name(&answer.question_id),
        std::process::id()
    ));
    let bytes = serde_json::to_vec(answer).map_err(|source| StoreError::Invalid {
        path: path.clone(),
        source,
    })?;
    fs_err::create_dir_all(&directory).map_err(io("cannot create", &directory))?;
    fs_err::write(&temporary, bytes).map_err(io("cannot write", &temporary))?;
    let linked = fs_err::hard_link(&temporary, &path);
    let _ = fs_err::remove_file(&temporary);
    match linked {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
            Err(StoreError::AnswerFiled {
                run_id: crate::RunId::from(run_id),
                question_id: answer.question_id.clone(),
            })
        }
        Err(source) => Err(io("cannot write", &path)(source)),
    }
}

/// Takes the answer filed for `question_id`: renames it to `.taken`, reads it and
/// removes it. `None` when none is filed; an unreadable one is dropped with a warning.
pub(crate) fn take(run_dir: &Path, question_id: &str) -> Result<Option<FiledAnswer>, StoreError> {
    let request = answer_path(run_dir, question_id);
    let taken = request.with_extension("taken");
    match fs_err::rename(&request, &taken) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(io("cannot take", &request)(error)),
    }
    let read = fs_err::read(&taken)
        .map_err(|error| error.to_string())
        .and_then(|bytes| {
            serde_json::from_slice::<FiledAnswer>(&bytes).map_err(|error| error.to_string())
        });
    if let Err(error) = fs_err::remove_file(&taken) {
        tracing::warn!(%error, "cannot remove a taken answer file");
    }
    match read {
        Ok(answer) => Ok(Some(answer)),
        Err(error) => {
            tracing::warn!(%error, path = %taken.display(), "ignored an answer file");
            Ok(None)
        }
    }
}

/// Removes the answer filed for `question_id` unless the run took it: `true` when it was
/// removed here.
pub(crate) fn withdraw(run_dir: &Path, question_id: &str) -> Result<bool, StoreError> {
    let path = answer_path(run_dir, question_id);
    match fs_err::remove_file(&path) {
        Ok(()) => Ok(true),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(io("cannot withdraw", &path)(error)),
    }
}

/// Whether an answer filed for `question_id` waits to be taken.
pub(crate) fn waiting(run_dir: &Path, question_id: &str) -> bool {
    answer_path(run_dir, question_id).exists()
}

/// `{run_dir}/answers/{question}.json`.
fn answer_path(run_dir: &Path, question_id: &str) -> PathBuf {
    run_dir
        .join(ANSWERS_DIR)
        .join(request_file_name(question_id))
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
