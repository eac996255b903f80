//! Human questions of a run (SPEC 14.3, 5.5): the pending ones, and answering one.
//! Runs of this server are answered through their interviewer's handle; runs another
//! process executes (a detached run, SPEC 17.4) through the run store, where their
//! interviewer publishes its question and takes the answers filed. The answer's source
//! is `api`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::Json;
use fabro_api::{AnswerRequest, Answered, HumanQuestion, QuestionList};

use fabro_engine::RunId;
use fabro_engine::{answer_pending, AnswerFileError};

use crate::engine_bridge::{AnswerError, Question};
use crate::error::{ApiError, ErrorBody, ErrorKind};
use crate::state::AppState;

/// How long a run another process executes may take to pick up a filed answer.
const FILE_PATIENCE: Duration = Duration::from_secs(10);

/// The pending questions of run `run_id`.
pub fn pending(state: &AppState, run_id: &str) -> Vec<HumanQuestion> {
    if let Some(active) = state.active(run_id) {
        return active
            .answers
            .pending()
            .iter()
            .map(HumanQuestion::from)
            .collect();
    }
    state
        .run_store()
        .pending_question(&RunId::from(run_id))
        .ok()
        .flatten()
        .iter()
        .map(HumanQuestion::from)
        .collect()
}

/// Pending human questions.
#[utoipa::path(get, path = "/api/v1/runs/{id}/questions", params(("id" = String, Path, description = "run id or unique prefix")),
    responses((status = 200, body = QuestionList), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn questions(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<QuestionList>, ApiError> {
    let run_id = match super::find_run(&state, &id).await? {
        Some(record) => record.run_id,
        None => state
            .active_by_prefix(&id)
            .map(|active| active.run_id.clone())
            .ok_or_else(|| ApiError::not_found(format!("unknown run '{id}'")))?,
    };
    Ok(Json(QuestionList {
        questions: pending(&state, &run_id),
    }))
}

/// Answers a pending question.
#[utoipa::path(post, path = "/api/v1/runs/{id}/questions/{question_id}/answer",
    params(("id" = String, Path, description = "run id or unique prefix"), ("question_id" = String, Path, description = "question id")),
    request_body = AnswerRequest,
    responses((status = 200, body = Answered), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
    (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn answer(
    State(state): State<AppState>,
    Path((id, question_id)): Path<(String, String)>,
    body: Result<Json<AnswerRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Answered>, ApiError> {
    let Json(request) = body?;
    let value = match (&request.key, &request.label, &request.text) {
        (Some(key), None, None) => key.clone(),
        (None, Some(label), _) => label.clone(),
        (None, None, Some(_)) => String::new(),
        _ => {
            return Err(ApiError::bad_request(
                "give one of 'key' and 'label', with 'text' for free text",
            ))
        }
    };
    let run_id = match state.active_by_prefix(&id) {
        Some(active) => active.run_id.clone(),
        None => super::require_run(&state, &id).await?.run_id,
    };
    let Some(active) = state.active(&run_id) else {
        return answer_stored(&state, &run_id, &question_id, value, request.text).await;
    };
    let answered = match &request.text {
        Some(text) => active.answers.answer_text(&question_id, &value, text),
        None => active.answers.answer(&question_id, &value),
    };
    match answered {
        Ok((question, answer)) => Ok(Json(describe(&question, &answer))),
        Err(AnswerError::NotPending { .. }) => {
            Err(not_pending(&state, &run_id, &question_id).await)
        }
        Err(error @ AnswerError::Rejected { .. }) => {
            Err(ApiError::explained(ErrorKind::NoSuchOption, error))
        }
    }
}

/// Whether run `run_id` asked question `question_id`: a `HumanQuestion` event of the
/// run's stored events names it.
fn asked(state: &AppState, run_id: &str, question_id: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Asked {
        properties: AskedQuestion,
    }
    #[derive(serde::Deserialize)]
    struct AskedQuestion {
        question_id: String,
    }
    let mut reader = state
        .run_store()
        .event_reader(&fabro_engine::RunId::from(run_id), 0);
    super::feed::read_events(reader.as_mut())
        .iter()
        .filter(|event| event.name == "HumanQuestion")
        .filter_map(|event| serde_json::from_str::<Asked>(&event.line).ok())
        .any(|event| event.properties.question_id == question_id)
}

/// 404 for a question never asked, 409 for one answered already (its id is in the
/// run's events).
async fn not_pending(state: &AppState, run_id: &str, question_id: &str) -> ApiError {
    let (store, run, question) = (state.clone(), run_id.to_owned(), question_id.to_owned());
    let asked = tokio::task::spawn_blocking(move || asked(&store, &run, &question))
        .await
        .unwrap_or(false);
    if asked {
        ApiError::conflict(format!("question {question_id} is already answered"))
    } else {
        ApiError::not_found(format!("no question {question_id} in run {run_id}"))
    }
}

/// Files the answer in the store of a run another process executes, and waits for the
/// run to take it.
async fn answer_stored(
    state: &AppState,
    run_id: &str,
    question_id: &str,
    value: String,
    text: Option<String>,
) -> Result<Json<Answered>, ApiError> {
    let id = RunId::from(run_id);
    let pending = state.run_store().pending_question(&id).ok().flatten();
    if pending
        .as_ref()
        .is_none_or(|question| question.id() != question_id)
    {
        return Err(not_pending(state, run_id, question_id).await);
    }
    let store = Arc::clone(&state.stores().runs);
    let answered = tokio::task::spawn_blocking(move || {
        answer_pending(store.as_ref(), &id, &value, text.as_deref(), FILE_PATIENCE)
    })
    .await
    .map_err(ApiError::internal)?;
    match answered {
        Ok((question, answer)) => Ok(Json(describe(&question, &answer))),
        Err(AnswerFileError::NoQuestion) => Err(not_pending(state, run_id, question_id).await),
        Err(AnswerFileError::Store(error)) => Err(ApiError::internal(error)),
        Err(
            error @ (AnswerFileError::Rejected { .. }
            | AnswerFileError::AlreadyAnswered { .. }
            | AnswerFileError::Closed { .. }
            | AnswerFileError::NotTaken { .. }),
        ) => Err(ApiError::explained(ErrorKind::NoSuchOption, error)),
    }
}

fn describe(question: &Question, answer: &fabro_engine::gate::Answer) -> Answered {
    match answer {
        fabro_engine::gate::Answer::Option(index) => {
            let option = question.options().get(*index);
            Answered {
                selected_key: option
                    .map(|option| option.key().to_owned())
                    .unwrap_or_default(),
                label: option
                    .map(|option| option.label().to_owned())
                    .unwrap_or_default(),
            }
        }
        fabro_engine::gate::Answer::Freeform(_) => Answered {
            selected_key: "freeform".to_owned(),
            label: String::new(),
        },
    }
}
