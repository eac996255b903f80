//! A run's steering messages in `steering_messages` and its running agent stages in
//! `runs.agent_stages` (SPEC 18.2, 20.1): a server posts a message and notifies
//! [`STEER_CHANNEL`] in one transaction; the worker that executes the run accepts it on
//! the notice. Every change of state is one conditional update, so that a sender's
//! withdrawal and the run's acceptance, or two deliveries, never both win.

use fabro_engine::{
    MessageId, RunId, RunStore, RunningAgentStage, SteeringMessage, SteeringSource, SteeringStore,
    StoreError,
};

use super::{backend, stored, PgRunStore};

/// The channel of posted steering messages, with the run id as payload.
pub(super) const STEER_CHANNEL: &str = "fabro_steer";

/// A row's id, source and text.
type MessageRow = (i64, String, String);

impl PgRunStore {
    /// Inserts `message` in `state`, notifying the run's executor when it is posted.
    fn insert_steering(
        &self,
        run_id: &RunId,
        message: &SteeringMessage,
        state: &'static str,
    ) -> Result<MessageId, StoreError> {
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let (source, text) = (message.source.as_str().to_owned(), message.text.clone());
        let action = format!("cannot store a steering message of run {run_id}");
        self.run(&action.clone(), async move {
            let mut transaction = pool.begin().await.map_err(backend(&action))?;
            let message_id: i64 = sqlx::query_scalar(
                "INSERT INTO steering_messages (run_id, source, text, state) \
                 VALUES ($1, $2, $3, $4) RETURNING message_id",
            )
            .bind(&id)
            .bind(&source)
            .bind(&text)
            .bind(state)
            .fetch_one(&mut *transaction)
            .await
            .map_err(backend(&action))?;
            if state == "posted" {
                sqlx::query("SELECT pg_notify($1, $2)")
                    .bind(STEER_CHANNEL)
                    .bind(&id)
                    .execute(&mut *transaction)
                    .await
                    .map_err(backend(&action))?;
            }
            transaction.commit().await.map_err(backend(&action))?;
            Ok(message_id)
        })
    }

    /// Moves the run's messages in state `from` to `to` (every one when `only` is
    /// `None`), returning those it moved, oldest first.
    fn move_steering(
        &self,
        run_id: &RunId,
        from: &'static str,
        to: &'static str,
        only: Option<MessageId>,
    ) -> Result<Vec<(MessageId, SteeringMessage)>, StoreError> {
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let action = format!("cannot update the steering messages of run {run_id}");
        let mut rows: Vec<MessageRow> = self.run(&action.clone(), async move {
            sqlx::query_as(
                "UPDATE steering_messages SET state = $3 WHERE run_id = $1 AND state = $2 \
                 AND ($4::bigint IS NULL OR message_id = $4) RETURNING message_id, source, text",
            )
            .bind(&id)
            .bind(from)
            .bind(to)
            .bind(only)
            .fetch_all(&pool)
            .await
            .map_err(backend(&action))
        })?;
        rows.sort_by_key(|(message_id, _, _)| *message_id);
        Ok(rows.into_iter().filter_map(message).collect())
    }
}

/// A row as a message; a source this binary does not know is skipped (and logged).
fn message((message_id, source, text): MessageRow) -> Option<(MessageId, SteeringMessage)> {
    let Some(source) = SteeringSource::parse(&source) else {
        tracing::warn!(
            message_id,
            source,
            "ignored a steering message of an unknown source"
        );
        return None;
    };
    Some((message_id, SteeringMessage { source, text }))
}

impl SteeringStore for PgRunStore {
    fn post_steering(
        &self,
        run_id: &RunId,
        message: &SteeringMessage,
    ) -> Result<MessageId, StoreError> {
        self.insert_steering(run_id, message, "posted")
    }

    fn steering_posted(&self, run_id: &RunId, message_id: MessageId) -> Result<bool, StoreError> {
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let action = format!("cannot read a steering message of run {run_id}");
        self.run(&action.clone(), async move {
            sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM steering_messages WHERE run_id = $1 \
                 AND message_id = $2 AND state = 'posted')",
            )
            .bind(&id)
            .bind(message_id)
            .fetch_one(&pool)
            .await
            .map_err(backend(&action))
        })
    }

    fn withdraw_steering(&self, run_id: &RunId, message_id: MessageId) -> Result<bool, StoreError> {
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let action = format!("cannot withdraw a steering message of run {run_id}");
        let withdrawn = self.run(&action.clone(), async move {
            sqlx::query(
                "DELETE FROM steering_messages WHERE run_id = $1 AND message_id = $2 \
                 AND state = 'posted'",
            )
            .bind(&id)
            .bind(message_id)
            .execute(&pool)
            .await
            .map(|done| done.rows_affected())
            .map_err(backend(&action))
        })?;
        Ok(withdrawn > 0)
    }

    fn queue_steering(
        &self,
        run_id: &RunId,
        message: &SteeringMessage,
    ) -> Result<MessageId, StoreError> {
        self.insert_steering(run_id, message, "queued")
    }

    fn accept_steering(
        &self,
        run_id: &RunId,
    ) -> Result<Vec<(MessageId, SteeringMessage)>, StoreError> {
        self.move_steering(run_id, "posted", "queued", None)
    }

    fn queued_steering(
        &self,
        run_id: &RunId,
    ) -> Result<Vec<(MessageId, SteeringMessage)>, StoreError> {
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let action = format!("cannot read the steering messages of run {run_id}");
        let rows: Vec<MessageRow> = self.run(&action.clone(), async move {
            sqlx::query_as(
                "SELECT message_id, source, text FROM steering_messages WHERE run_id = $1 \
                 AND state = 'queued' ORDER BY message_id",
            )
            .bind(&id)
            .fetch_all(&pool)
            .await
            .map_err(backend(&action))
        })?;
        Ok(rows.into_iter().filter_map(message).collect())
    }

    fn deliver_steering(&self, run_id: &RunId, message_id: MessageId) -> Result<bool, StoreError> {
        let moved = self.move_steering(run_id, "queued", "delivered", Some(message_id))?;
        Ok(!moved.is_empty())
    }

    fn publish_agent_stages(
        &self,
        run_id: &RunId,
        running: &[RunningAgentStage],
    ) -> Result<(), StoreError> {
        let action = format!("cannot publish the agent stages of run {run_id}");
        let text = if running.is_empty() {
            None
        } else {
            Some(
                serde_json::to_string(running)
                    .map_err(|error| StoreError::backend(action.clone(), error))?,
            )
        };
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        self.run(&action.clone(), async move {
            sqlx::query("UPDATE runs SET agent_stages = $2 WHERE run_id = $1")
                .bind(&id)
                .bind(text)
                .execute(&pool)
                .await
                .map(drop)
                .map_err(backend(&action))
        })
    }

    fn running_agent_stages(
        &self,
        run_id: &RunId,
    ) -> Result<Option<Vec<RunningAgentStage>>, StoreError> {
        if !self.is_active(run_id) {
            return Ok(None);
        }
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let action = format!("cannot read the agent stages of run {run_id}");
        let text: Option<Option<String>> = self.run(&action.clone(), async move {
            sqlx::query_scalar("SELECT agent_stages FROM runs WHERE run_id = $1")
                .bind(&id)
                .fetch_optional(&pool)
                .await
                .map_err(backend(&action))
        })?;
        match text.flatten() {
            None => Ok(Some(Vec::new())),
            Some(text) => stored(&text, format!("the agent stages of run {run_id}")).map(Some),
        }
    }
}
