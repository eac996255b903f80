//! Human questions (SPEC 5.5, 11.3) as `GET /api/v1/runs/{id}/questions` lists them, and
//! the answer to answering one.

use fabro_engine::gate::Question;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `GET /api/v1/runs/{id}/questions`: the run's pending questions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct QuestionList {
    /// Pending questions (a run has at most one).
    pub questions: Vec<HumanQuestion>,
}

/// The `HumanQuestion` properties of a pending question (SPEC 11.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HumanQuestion {
    /// The id answers name.
    pub question_id: String,
    /// The human gate's node.
    pub node_id: String,
    /// The question's text.
    pub text: String,
    /// `multiple_choice`, `yes_no`, `confirmation` or `freeform`.
    pub question_type: String,
    /// The options, in the order of the node's outgoing edges.
    pub options: Vec<QuestionOption>,
    /// Whether free text is accepted.
    pub allow_freeform: bool,
    /// The node's `human.default_choice`, if it has one (SPEC 5.5).
    pub default_choice: Option<String>,
    /// How long the gate waits, in milliseconds; null: forever.
    pub timeout_ms: Option<u64>,
}

/// One option of a [`HumanQuestion`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QuestionOption {
    /// The accelerator key.
    pub key: String,
    /// The edge label, accelerator marks included.
    pub label: String,
    /// The label as shown, accelerator marks removed.
    pub display_label: String,
    /// The node the option leads to.
    pub target: String,
}

impl From<&Question> for HumanQuestion {
    fn from(question: &Question) -> HumanQuestion {
        HumanQuestion {
            question_id: question.id().to_owned(),
            node_id: question.node_id().to_owned(),
            text: question.text().to_owned(),
            question_type: question.question_type().as_str().to_owned(),
            options: question
                .options()
                .iter()
                .map(|option| QuestionOption {
                    key: option.key().to_owned(),
                    label: option.label().to_owned(),
                    display_label: option.display_label().to_owned(),
                    target: option.target().to_owned(),
                })
                .collect(),
            allow_freeform: question.allows_freeform(),
            default_choice: question.default_choice().map(str::to_owned),
            timeout_ms: question
                .timeout()
                .map(|limit| u64::try_from(limit.as_millis()).unwrap_or(u64::MAX)),
        }
    }
}

/// The answer to `POST /api/v1/runs/{id}/questions/{question_id}/answer`: what was
/// chosen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Answered {
    /// The chosen option's key (`freeform` for free text).
    pub selected_key: String,
    /// The chosen option's label.
    pub label: String,
}
