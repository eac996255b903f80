//! Stage outcomes (SPEC 4.4): a status plus routing signals, context updates, failure
//! data, usage and touched files.

use std::collections::BTreeMap;

use fabro_language::StageStatus;
use fabro_llm::Usage;
use serde::{Deserialize, Serialize};

use crate::failure::FailureClass;

/// Failure data of a failed stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// Why it failed.
    pub reason: String,
    /// Its class.
    pub class: FailureClass,
}

/// The result of one attempt or stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Canonical status.
    pub status: StageStatus,
    /// A custom outcome string reported by an LLM node (SPEC 4.4), visible to conditions
    /// instead of the status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_outcome: Option<String>,
    /// Preferred edge label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_label: Option<String>,
    /// Suggested next node ids.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suggested_next_ids: Vec<String>,
    /// Context updates.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub context_updates: BTreeMap<String, serde_json::Value>,
    /// Notes for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    /// Failure data, for `fail` (and exhausted `retry`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    /// LLM usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Files the stage changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files_touched: Vec<String>,
    /// Model of an LLM stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Provider of an LLM stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The stage could not go on because fabro's own storage failed (run directory, blob
    /// store, journal, git objects or refs): the run stops at once as `canceled`, and the
    /// stage runs again on resume. Never persisted.
    #[serde(skip)]
    pub engine_error: bool,
    /// What the stage tells the traversal beyond its status. Never persisted: the records
    /// keep the notes and context keys that go with it.
    #[serde(skip)]
    pub signal: Option<Signal>,
}

/// A typed signal from a stage to the traversal that runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    /// The stage was ended because the `first_success` join of its parallel branch was
    /// satisfied (SPEC 5.7): the branch stops here.
    JoinSatisfied,
    /// A fan-in stage chose the branch whose head is this commit (SPEC 5.8): the line the
    /// traversal commits to moves there.
    FanInHead(String),
}

impl Outcome {
    /// A bare outcome with `status`.
    pub fn new(status: StageStatus) -> Outcome {
        Outcome {
            status,
            custom_outcome: None,
            preferred_label: None,
            suggested_next_ids: Vec::new(),
            context_updates: BTreeMap::new(),
            notes: None,
            failure: None,
            usage: None,
            files_touched: Vec::new(),
            model: None,
            provider: None,
            engine_error: false,
            signal: None,
        }
    }

    /// `success`.
    pub fn success() -> Outcome {
        Outcome::new(StageStatus::Success)
    }

    /// `fail` with a reason and class.
    pub fn fail(reason: impl Into<String>, class: FailureClass) -> Outcome {
        let mut outcome = Outcome::new(StageStatus::Fail);
        outcome.failure = Some(Failure {
            reason: reason.into(),
            class,
        });
        outcome
    }

    /// A failure of fabro's own storage (see [`Outcome::engine_error`]): `fail` with reason
    /// `engine error: {what}` and class `canceled`.
    pub fn engine_error(what: impl std::fmt::Display) -> Outcome {
        let mut outcome = Outcome::fail(format!("engine error: {what}"), FailureClass::Canceled);
        outcome.engine_error = true;
        outcome
    }

    /// `retry` (internal: asks for another attempt) with a reason.
    pub fn retry(reason: impl Into<String>) -> Outcome {
        let mut outcome = Outcome::new(StageStatus::Retry);
        outcome.failure = Some(Failure {
            reason: reason.into(),
            class: FailureClass::TransientInfra,
        });
        outcome
    }

    /// Sets the signal to the traversal.
    pub fn with_signal(mut self, signal: Signal) -> Outcome {
        self.signal = Some(signal);
        self
    }

    /// Sets the notes.
    pub fn with_notes(mut self, notes: impl Into<String>) -> Outcome {
        self.notes = Some(notes.into());
        self
    }

    /// Adds a context update.
    pub fn with_update(mut self, key: impl Into<String>, value: serde_json::Value) -> Outcome {
        self.context_updates.insert(key.into(), value);
        self
    }

    /// The string conditions see as `outcome`: the custom outcome or the status.
    pub fn condition_value(&self) -> &str {
        self.custom_outcome
            .as_deref()
            .unwrap_or_else(|| self.status.as_str())
    }

    /// The failure reason, or "".
    pub fn failure_reason(&self) -> &str {
        self.failure
            .as_ref()
            .map_or("", |failure| failure.reason.as_str())
    }

    /// The failure class, when failed.
    pub fn failure_class(&self) -> Option<FailureClass> {
        self.failure.as_ref().map(|failure| failure.class)
    }

    /// Whether the status is `fail`.
    pub fn is_fail(&self) -> bool {
        self.status == StageStatus::Fail
    }
}

/// Statuses are written in canonical lower case and read through their aliases.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_round_trip_through_json() {
        let outcome = Outcome::fail("boom", FailureClass::Deterministic)
            .with_notes("n")
            .with_update("k", serde_json::json!(1));
        let json = serde_json::to_string(&outcome).expect("serialises");
        assert!(json.contains("\"status\":\"fail\""), "{json}");
        let back: Outcome = serde_json::from_str(&json).expect("parses");
        assert_eq!(back, outcome);
        let alias: Outcome = serde_json::from_str(r#"{"status":"Succeeded"}"#).expect("alias");
        assert_eq!(alias.status, StageStatus::Success);
    }

    #[test]
    fn custom_outcomes_are_what_conditions_see() {
        let mut outcome = Outcome::success();
        assert_eq!(outcome.condition_value(), "success");
        outcome.custom_outcome = Some("needs_dod".to_owned());
        assert_eq!(outcome.condition_value(), "needs_dod");
    }
}
