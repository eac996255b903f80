//! Failure classes (SPEC 9.1): the one type every crate records a failed stage with, and
//! the text rules that class an untyped error message ([`classify_message`]).
//!
//! It lives here, the lowest crate that needs it, because SPEC 10.3 maps every
//! [`crate::LlmErrorKind`] to a class ([`crate::LlmErrorKind::failure_class`]); the agent
//! and the engine use the same type.

use serde::{Deserialize, Serialize};

/// Why a stage failed, deciding retries and the circuit breaker (SPEC 9.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// Likely to pass on retry.
    TransientInfra,
    /// Retrying will not help.
    Deterministic,
    /// A limit was reached (turns, tokens, context, quota).
    BudgetExhausted,
    /// A loop was detected.
    CompilationLoop,
    /// Cancellation.
    Canceled,
    /// A write-scope violation (SPEC 13.4).
    Structural,
}

impl FailureClass {
    /// Every class, in SPEC 9.1's order.
    const ALL: [FailureClass; 6] = [
        FailureClass::TransientInfra,
        FailureClass::Deterministic,
        FailureClass::BudgetExhausted,
        FailureClass::CompilationLoop,
        FailureClass::Canceled,
        FailureClass::Structural,
    ];

    /// The class name as written in events, `status.json` and checkpoints.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::TransientInfra => "transient_infra",
            FailureClass::Deterministic => "deterministic",
            FailureClass::BudgetExhausted => "budget_exhausted",
            FailureClass::CompilationLoop => "compilation_loop",
            FailureClass::Canceled => "canceled",
            FailureClass::Structural => "structural",
        }
    }

    /// Parses a class name.
    pub fn parse(text: &str) -> Option<FailureClass> {
        FailureClass::ALL
            .into_iter()
            .find(|class| class.as_str() == text)
    }

    /// Counted by the loop circuit breaker (SPEC 9.8).
    pub fn counts_for_breaker(self) -> bool {
        match self {
            FailureClass::Deterministic | FailureClass::Structural => true,
            FailureClass::TransientInfra
            | FailureClass::BudgetExhausted
            | FailureClass::CompilationLoop
            | FailureClass::Canceled => false,
        }
    }
}

impl std::fmt::Display for FailureClass {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// Classifies the message of an untyped LLM or engine error (SPEC 9.1): lowercased, the
/// first matching row in the order canceled, transient_infra, budget_exhausted,
/// structural wins; otherwise deterministic. Numbers match only as whole words.
pub fn classify_message(message: &str) -> FailureClass {
    let lower = message.to_lowercase();
    const CANCELED: &[&str] = &["cancel", "interrupt"];
    const TRANSIENT: &[&str] = &[
        "timeout",
        "timed out",
        "rate limit",
        "too many requests",
        "connection refused",
        "connection reset",
        "broken pipe",
        "temporarily unavailable",
        "service unavailable",
        "could not resolve host",
        "network is unreachable",
    ];
    const TRANSIENT_CODES: &[&str] = &["500", "502", "503", "504"];
    const BUDGET: &[&str] = &[
        "context length",
        "context window",
        "quota",
        "turn limit",
        "token limit",
        "max turns",
        "budget",
    ];
    if CANCELED.iter().any(|word| lower.contains(word)) {
        FailureClass::Canceled
    } else if TRANSIENT.iter().any(|word| lower.contains(word))
        || TRANSIENT_CODES
            .iter()
            .any(|code| contains_whole_word(&lower, code))
    {
        FailureClass::TransientInfra
    } else if BUDGET.iter().any(|word| lower.contains(word)) {
        FailureClass::BudgetExhausted
    } else if lower.contains("scope violation") {
        FailureClass::Structural
    } else {
        FailureClass::Deterministic
    }
}

/// Whether `needle` occurs in `text` with no letter, digit or `_` on either side.
fn contains_whole_word(text: &str, needle: &str) -> bool {
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(needle).any(|(start, _)| {
        let before = text[..start].chars().next_back();
        let after = text[start + needle.len()..].chars().next();
        !before.is_some_and(is_word) && !after.is_some_and(is_word)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_text_and_serde() {
        for class in FailureClass::ALL {
            assert_eq!(FailureClass::parse(class.as_str()), Some(class));
            assert_eq!(class.to_string(), class.as_str());
            let json = serde_json::to_string(&class).unwrap();
            assert_eq!(json, format!("\"{}\"", class.as_str()));
            assert_eq!(serde_json::from_str::<FailureClass>(&json).unwrap(), class);
        }
        assert_eq!(FailureClass::parse("Deterministic"), None);
        assert_eq!(FailureClass::Structural.as_str(), "structural");
    }

    #[test]
    fn only_deterministic_and_structural_count_for_the_breaker() {
        let counted: Vec<_> = FailureClass::ALL
            .into_iter()
            .filter(|class| class.counts_for_breaker())
            .collect();
        assert_eq!(
            counted,
            [FailureClass::Deterministic, FailureClass::Structural]
        );
    }
}
