//! What one turn of an agent or prompt conversation produced ([`Reply`]), shared by the
//! conversation driver (`llm.rs`) and its backends (`prompt.rs`, `agent.rs`).

use fabro_language::model::ReasoningEffort;
use fabro_llm::Usage;

use crate::failure::FailureClass;
use crate::outcome::Failure;

/// What one turn of a conversation produced.
#[derive(Debug, Default)]
pub(super) struct Reply {
    /// The response text.
    pub(super) text: String,
    /// Usage of the turn, when known.
    pub(super) usage: Option<Usage>,
    /// The model an external agent said it used (decision 69).
    pub(super) model: Option<String>,
    /// Files the turn changed (SPEC 7.6).
    pub(super) files_touched: Vec<String>,
    /// The "last touched" file for routing fallbacks.
    pub(super) last_touched: Option<String>,
    /// Why the turn failed.
    pub(super) failure: Option<Failure>,
}

impl Reply {
    /// A failed turn.
    pub(super) fn failed(reason: impl Into<String>, class: FailureClass) -> Reply {
        Reply {
            failure: Some(Failure {
                reason: reason.into(),
                class,
            }),
            ..Reply::default()
        }
    }
}

/// The node's `reasoning_effort` (default `high`) for [`fabro_llm::Request`]; the
/// provider adapters send it only to models with reasoning (SPEC 2.10, 10.1 item 2).
pub(crate) fn reasoning_effort(node: &fabro_language::Node) -> fabro_llm::ReasoningEffort {
    match node.llm.reasoning_effort {
        ReasoningEffort::Low => fabro_llm::ReasoningEffort::Low,
        ReasoningEffort::Medium => fabro_llm::ReasoningEffort::Medium,
        ReasoningEffort::High => fabro_llm::ReasoningEffort::High,
    }
}
