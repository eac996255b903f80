//! `skill_known`: a node's `skills` names a skill that is not found in the skill
//! directories (SPEC 19.2), so it would not be listed to the agent; the caller's
//! [`crate::ModelCatalog`] knows the skills.

use super::mcp_server_known::names_check;
use super::Lint;
use crate::diagnostic::Rule;

pub(super) fn check(lint: &mut Lint<'_>) {
    names_check(lint, "skills", Rule::SkillKnown, |lint, name| {
        lint.options.models.is_skill_known(name)
    });
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::Rule;
    use crate::lint::test_support::{assert_fires, frame, position};

    #[test]
    fn found_skills_pass_and_others_are_reported_at_the_key() {
        let text = frame(" a [label=\"A\", skills=\"review, commit\"]\n start -> a -> exit");
        let found = assert_fires(Rule::SkillKnown, &text, 1);
        assert_eq!(
            found[0].message,
            "node 'a' names unknown skill 'commit' in skills"
        );
        assert_eq!(position(&text, &found[0]), (4, 16));
    }
}
