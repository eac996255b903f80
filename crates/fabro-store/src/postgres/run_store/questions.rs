//! A run's human questions and the answers filed for them in `questions` (SPEC 5.5,
//! 17.4): one open question at a time, an answer waiting until the run takes it
//! (`taken_at`) or its author withdraws it (the answer cleared).

use fabro_engine::gate::Question;
use fabro_engine::{FiledAnswer, RunId, RunStore, StoreError};

use super::{backend, stored, PgRunStore};

impl PgRunStore {
    /// Opens `question` in `questions` (closing any other open one), or closes the open
    /// one.
    pub(super) fn record_question(
        &self,
        run_id: &RunId,
        question: Option<&Question>,
    ) -> Result<(), StoreError> {
        let action = format!("cannot record the question of run {run_id}");
        let opened = question
            .map(|question| {
                serde_json::to_string(question)
                    .map(|text| (question.id().to_owned(), text))
                    .map_err(|error| StoreError::backend(action.clone(), error))
            })
            .transpose()?;
        // SPEC 18.2: a worker's question writes carry its lease's epoch.
        let epoch = self.leases.fence(run_id)?;
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let written = self.run(&action.clone(), async move {
            let mut transaction = pool.begin().await.map_err(backend(&action))?;
            let held: Option<i32> = sqlx::query_scalar(
                "SELECT 1 FROM runs WHERE run_id = $1 AND lease_epoch = $2 FOR SHARE",
            )
            .bind(&id)
            .bind(epoch)
            .fetch_optional(&mut *transaction)
            .await
            .map_err(backend(&action))?;
            if epoch.is_some() && held.is_none() {
                // Another claim moved the epoch on: nothing is written.
                return Ok(0);
            }
            let open_id = opened.as_ref().map(|(question_id, _)| question_id.clone());
            sqlx::query(
                "UPDATE questions SET closed_at = now() WHERE run_id = $1 \
                 AND closed_at IS NULL AND question_id IS DISTINCT FROM $2",
            )
            .bind(&id)
            .bind(&open_id)
            .execute(&mut *transaction)
            .await
            .map_err(backend(&action))?;
            if let Some((question_id, text)) = &opened {
                sqlx::query(
                    "INSERT INTO questions (run_id, question_id, question) VALUES ($1, $2, $3) \
                     ON CONFLICT (run_id, question_id) DO UPDATE SET question = $3, \
                     closed_at = NULL",
                )
                .bind(&id)
                .bind(question_id)
                .bind(text)
                .execute(&mut *transaction)
                .await
                .map_err(backend(&action))?;
            }
            transaction.commit().await.map_err(backend(&action))?;
            Ok(1)
        })?;
        self.fenced(run_id, epoch, written)
    }

    /// The newest open question, while the run's lock is held.
    pub(super) fn open_question(&self, run_id: &RunId) -> Result<Option<Question>, StoreError> {
        if !self.is_active(run_id) {
            return Ok(None);
        }
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let action = format!("cannot read the question of run {run_id}");
        let text: Option<String> = self.run(&action.clone(), async move {
            sqlx::query_scalar(
                "SELECT question FROM questions WHERE run_id = $1 AND closed_at IS NULL \
                 ORDER BY asked_at DESC LIMIT 1",
            )
            .bind(&id)
            .fetch_optional(&pool)
            .await
            .map_err(backend(&action))
        })?;
        text.map(|text| stored(&text, format!("the pending question of run {run_id}")))
            .transpose()
    }

    /// Sets the question's answer unless one waits to be taken.
    pub(super) fn record_answer(
        &self,
        run_id: &RunId,
        answer: &FiledAnswer,
    ) -> Result<(), StoreError> {
        let action = format!("cannot file an answer in run {run_id}");
        let text = serde_json::to_string(answer)
            .map_err(|error| StoreError::backend(action.clone(), error))?;
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let question_id = answer.question_id.clone();
        let filed = self.run(&action.clone(), async move {
            sqlx::query(
                "INSERT INTO questions (run_id, question_id, question, answer, answered_at) \
                 VALUES ($1, $2, '', $3, now()) ON CONFLICT (run_id, question_id) DO UPDATE \
                 SET answer = $3, answered_at = now(), taken_at = NULL \
                 WHERE questions.answer IS NULL OR questions.taken_at IS NOT NULL",
            )
            .bind(&id)
            .bind(&question_id)
            .bind(&text)
            .execute(&pool)
            .await
            .map(|done| done.rows_affected())
            .map_err(backend(&action))
        })?;
        if filed == 0 {
            return Err(StoreError::AnswerFiled {
                run_id: run_id.clone(),
                question_id: answer.question_id.clone(),
            });
        }
        Ok(())
    }

    pub(super) fn taken_answer(
        &self,
        run_id: &RunId,
        question_id: &str,
    ) -> Result<Option<FiledAnswer>, StoreError> {
        // A worker that lost the run takes no answer: it stays for the new holder.
        let epoch = self.leases.fence(run_id)?;
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let question = question_id.to_owned();
        let action = format!("cannot take an answer in run {run_id}");
        let text: Option<Option<String>> = self.run(&action.clone(), async move {
            sqlx::query_scalar(
                "UPDATE questions SET taken_at = now() WHERE run_id = $1 AND question_id = $2 \
                 AND answer IS NOT NULL AND taken_at IS NULL AND ($3::bigint IS NULL OR \
                 EXISTS (SELECT 1 FROM runs WHERE run_id = $1 AND lease_epoch = $3)) \
                 RETURNING answer",
            )
            .bind(&id)
            .bind(&question)
            .bind(epoch)
            .fetch_optional(&pool)
            .await
            .map_err(backend(&action))
        })?;
        // Taken either way: one that is not valid is reported once, then gone.
        text.flatten()
            .map(|text| stored(&text, format!("an answer filed in run {run_id}")))
            .transpose()
    }

    pub(super) fn withdrawn_answer(
        &self,
        run_id: &RunId,
        question_id: &str,
    ) -> Result<bool, StoreError> {
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let question = question_id.to_owned();
        let action = format!("cannot withdraw an answer in run {run_id}");
        let withdrawn = self.run(&action.clone(), async move {
            sqlx::query(
                "UPDATE questions SET answer = NULL, answered_at = NULL WHERE run_id = $1 \
                 AND question_id = $2 AND answer IS NOT NULL AND taken_at IS NULL",
            )
            .bind(&id)
            .bind(&question)
            .execute(&pool)
            .await
            .map(|done| done.rows_affected())
            .map_err(backend(&action))
        })?;
        Ok(withdrawn > 0)
    }

    pub(super) fn waiting_answer(
        &self,
        run_id: &RunId,
        question_id: &str,
    ) -> Result<bool, StoreError> {
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let question = question_id.to_owned();
        let action = format!("cannot read the answers of run {run_id}");
        self.run(&action.clone(), async move {
            sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM questions WHERE run_id = $1 AND question_id = $2 \
                 AND answer IS NOT NULL AND taken_at IS NULL)",
            )
            .bind(&id)
            .bind(&question)
            .fetch_one(&pool)
            .await
            .map_err(backend(&action))
        })
    }
}
