//! Steering messages kept by a shared store (SPEC 18.2, 20.1): the seam that carries
//! them from the server a person steers through to the worker that executes the run. A
//! store that has one answers [`RunStore::steering`](super::RunStore::steering); the
//! local store has none (a run's steering is kept in its run directory).
//!
//! A message moves through three states, each change one conditional write, so that
//! exactly one side wins every race: *posted* by a sender, *queued* when the run
//! accepts it (or withdrawn by the sender that gave up waiting, never both), and
//! *delivered* just before the agent reads it (so never twice, even across a takeover).

use fabro_agent::SteeringMessage;
use serde::{Deserialize, Serialize};

use super::StoreError;
use crate::id::RunId;

/// An agent stage that runs, as its run publishes it (`active.json` in the run
/// directory, a shared store's row).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningAgentStage {
    /// The stage's node.
    pub node_id: String,
    /// `api`, `acp` or `cli`.
    pub backend: String,
}

impl RunningAgentStage {
    /// Whether its agent takes steering (every backend but `cli`).
    pub fn steerable(&self) -> bool {
        self.backend != "cli"
    }
}

/// A message's key, unique in its run.
pub type MessageId = i64;

/// The steering messages and running agent stages of a shared store's runs.
pub trait SteeringStore: Send + Sync {
    /// Posts `message` for run `run_id` to accept, and wakes its executor.
    fn post_steering(
        &self,
        run_id: &RunId,
        message: &SteeringMessage,
    ) -> Result<MessageId, StoreError>;

    /// Whether posted message `id` still waits for the run.
    fn steering_posted(&self, run_id: &RunId, id: MessageId) -> Result<bool, StoreError>;

    /// Withdraws posted message `id`: `false` when the run accepted it first.
    fn withdraw_steering(&self, run_id: &RunId, id: MessageId) -> Result<bool, StoreError>;

    /// Stores `message` as accepted by the run itself.
    fn queue_steering(
        &self,
        run_id: &RunId,
        message: &SteeringMessage,
    ) -> Result<MessageId, StoreError>;

    /// Accepts every posted message of the run, oldest first.
    fn accept_steering(
        &self,
        run_id: &RunId,
    ) -> Result<Vec<(MessageId, SteeringMessage)>, StoreError>;

    /// The accepted messages not delivered yet, oldest first (after a takeover).
    fn queued_steering(
        &self,
        run_id: &RunId,
    ) -> Result<Vec<(MessageId, SteeringMessage)>, StoreError>;

    /// Marks accepted message `id` delivered: whether this call did.
    fn deliver_steering(&self, run_id: &RunId, id: MessageId) -> Result<bool, StoreError>;

    /// Records the agent stages the run runs now.
    fn publish_agent_stages(
        &self,
        run_id: &RunId,
        running: &[RunningAgentStage],
    ) -> Result<(), StoreError>;

    /// The agent stages the run runs now; `None` when the run does not run.
    fn running_agent_stages(
        &self,
        run_id: &RunId,
    ) -> Result<Option<Vec<RunningAgentStage>>, StoreError>;
}
