//! `goal_gate_has_retry`: a goal gate needs a retry target on itself or on the graph,
//! or an unsatisfied gate simply fails the run at exit (SPEC 3.2, 9.10).

use super::Lint;
use crate::diagnostic::{Diagnostic, Rule};

pub(super) fn check(lint: &mut Lint<'_>) {
    let settings = &lint.workflow.settings;
    if settings.retry_target.is_some() || settings.fallback_retry_target.is_some() {
        return;
    }
    // Only a `goal_gate` attribute makes a node a goal gate.
    if !lint.workflow.may_have_key("goal_gate") {
        return;
    }
    for node in lint.workflow.nodes() {
        if !node.goal_gate
            || node.retry_target().is_some()
            || node.fallback_retry_target().is_some()
        {
            continue;
        }
        lint.report(
            Diagnostic::new(
                Rule::GoalGateHasRetry,
                format!(
                    "goal gate '{}' has no retry target on itself or the graph; if it is unsatisfied at exit the run fails",
                    node.id
                ),
            )
            .at(node.span)
            .node(&node.id)
            .fix(format!("add retry_target=\"...\" to '{}' or to the graph", node.id)),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::Rule;
    use crate::lint::test_support::{assert_fires, frame, position};

    #[test]
    fn gates_with_a_retry_target_pass() {
        assert_fires(
            Rule::GoalGateHasRetry,
            &frame("a [goal_gate=true, retry_target=start]\n start -> a -> exit"),
            0,
        );
        assert_fires(
            Rule::GoalGateHasRetry,
            &frame("a [goal_gate=true, fallback_retry_target=start]\n start -> a -> exit"),
            0,
        );
        assert_fires(
            Rule::GoalGateHasRetry,
            &frame("retry_target=a\n a [goal_gate=true]\n start -> a -> exit"),
            0,
        );
    }

    #[test]
    fn gate_without_retry_target_warns() {
        let text = frame("a [goal_gate=true]\n b [goal_gate=false]\n start -> a -> b -> exit");
        let found = assert_fires(Rule::GoalGateHasRetry, &text, 1);
        assert_eq!(
            found[0].message,
            "goal gate 'a' has no retry target on itself or the graph; if it is unsatisfied at exit the run fails"
        );
        assert_eq!(found[0].node_id.as_deref(), Some("a"));
        assert_eq!(position(&text, &found[0]), (4, 1));
    }
}
