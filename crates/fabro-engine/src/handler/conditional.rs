//! The conditional handler (SPEC 5.6): a pass-through routing point that copies the
//! status, custom outcome and failure of the most recently completed stage, so that its
//! edge conditions route on that stage's result.

use super::StageInput;
use crate::outcome::Outcome;

pub(super) fn execute(input: &StageInput<'_>) -> Outcome {
    let mut outcome = match input.previous {
        Some(previous) => {
            let mut copied = Outcome::new(previous.status);
            copied.custom_outcome = previous.custom_outcome.clone();
            copied.failure = previous.failure.clone();
            copied
        }
        None => Outcome::success(),
    };
    outcome.notes = Some(format!("Conditional node evaluated: {}", input.node.id));
    outcome
}
