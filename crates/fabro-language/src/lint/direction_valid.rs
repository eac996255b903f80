//! `direction_valid`: the graph `rankdir` must be TB, LR, BT or RL (SPEC 2.9, 3.2).

use super::Lint;
use crate::diagnostic::{Diagnostic, Rule};
use crate::model::RankDir;

pub(super) fn check(lint: &mut Lint<'_>) {
    let Some(attribute) = lint.workflow.attributes.get("rankdir") else {
        return;
    };
    if RankDir::parse(&attribute.value).is_some() {
        return;
    }
    lint.report(
        Diagnostic::new(
            Rule::DirectionValid,
            format!(
                "rankdir \"{}\" is not a direction; TB is used",
                attribute.value.escape_debug()
            ),
        )
        .at(attribute.key_span)
        .fix("use one of: TB, LR, BT, RL"),
    );
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::Rule;
    use crate::lint::test_support::{assert_fires, frame, position};

    #[test]
    fn known_directions_pass() {
        for direction in ["TB", "LR", "BT", "RL"] {
            let text = frame(&format!("rankdir={direction}\n start -> exit"));
            assert_fires(Rule::DirectionValid, &text, 0);
        }
    }

    #[test]
    fn unknown_direction_warns() {
        let text = frame("graph [rankdir=\"lr\"]\n start -> exit");
        let found = assert_fires(Rule::DirectionValid, &text, 1);
        assert_eq!(
            found[0].message,
            "rankdir \"lr\" is not a direction; TB is used"
        );
        assert_eq!(position(&text, &found[0]), (4, 8));
    }
}
