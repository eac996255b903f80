//! Steering a run's agent (SPEC 20.1): the body of `POST /api/v1/runs/{id}/steer` and
//! its answer.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The body of `POST /api/v1/runs/{id}/steer`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SteerRequest {
    /// The guidance; the agent reads `[Steering from api] {text}`.
    pub text: String,
    /// When no agent stage runs, queue it for the next one (`fabro steer --next`);
    /// otherwise that is a 409.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub next: bool,
}

/// The answer to `POST /api/v1/runs/{id}/steer` (202): the message was accepted
/// (`SteeringQueued`) and is delivered before the agent's next LLM call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SteerAccepted {
    /// The run id.
    pub run_id: String,
    /// The running agent stage's node that receives it; null when it waits for the
    /// next agent stage.
    pub node_id: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_is_optional_and_unknown_fields_are_refused() {
        let request: SteerRequest = serde_json::from_str(r#"{"text": "use v2"}"#).unwrap();
        assert_eq!(
            request,
            SteerRequest {
                text: "use v2".to_owned(),
                next: false
            }
        );
        assert_eq!(
            serde_json::to_string(&request).unwrap(),
            r#"{"text":"use v2"}"#
        );
        assert!(serde_json::from_str::<SteerRequest>(r#"{"text": "x", "nope": 1}"#).is_err());
    }
}
