//! `prompt_on_llm_nodes`: an agent or prompt node should say what to do, with a prompt
//! or at least an explicit label (SPEC 2.10, 3.2); otherwise its task is its id.

use super::Lint;
use crate::diagnostic::{Diagnostic, Rule};

pub(super) fn check(lint: &mut Lint<'_>) {
    for node in lint.workflow.nodes() {
        if !node.handler.is_llm() || node.has_label() {
            continue;
        }
        let prompt = node.attributes.get_any(&["prompt", "llm_prompt"]);
        if prompt.is_some_and(|attribute| !attribute.value.trim().is_empty()) {
            continue;
        }
        lint.report(
            Diagnostic::new(
                Rule::PromptOnLlmNodes,
                format!(
                    "{} node '{}' has neither a prompt nor a label; its task text is its id",
                    node.handler, node.id
                ),
            )
            .at(node.span)
            .node(&node.id)
            .fix(format!("add prompt=\"...\" to '{}'", node.id)),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::Rule;
    use crate::lint::test_support::{assert_fires, frame, position};

    #[test]
    fn prompt_or_label_passes() {
        let text = frame("a [prompt=\"Do it\"]\n b [shape=tab, label=\"Summarise\"]\n c [llm_prompt=\"@task.md\"]\n d [shape=parallelogram, script=\"true\"]\n start -> a -> b -> c -> d -> exit");
        assert_fires(Rule::PromptOnLlmNodes, &text, 0);
    }

    #[test]
    fn bare_llm_nodes_warn() {
        let text = frame("a [prompt=\"  \"]\n b [shape=tab]\n start -> a -> b -> exit");
        let found = assert_fires(Rule::PromptOnLlmNodes, &text, 2);
        assert_eq!(
            found[0].message,
            "agent node 'a' has neither a prompt nor a label; its task text is its id"
        );
        assert_eq!(position(&text, &found[0]), (4, 1));
        assert_eq!(found[1].node_id.as_deref(), Some("b"));
        assert!(found[1].message.starts_with("prompt node 'b'"));
    }
}
