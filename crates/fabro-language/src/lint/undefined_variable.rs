//! `undefined_variable`: `{{ NAME }}` references to variables unknown at validation time
//! (SPEC 2.7, 3.2). They are left untouched at run time, which is rarely intended.
//!
//! Expanded texts are the prompt (after `@path` inlining), the script (`tool_command`),
//! the graph `goal` and `human.default_choice`. `$NAME` references are not reported:
//! undefined ones are normal in shell scripts (`$HOME`).

use std::collections::HashSet;
use std::fmt;

use super::Lint;
use crate::diagnostic::{Diagnostic, Rule};
use crate::span::Span;
use crate::syntax::Attribute;
use crate::variable::template_references;

pub(super) fn check(lint: &mut Lint<'_>) {
    let workflow = lint.workflow;
    let mut checker = Checker {
        reported: HashSet::new(),
    };
    if let Some(goal) = workflow.attributes.get("goal") {
        checker.inline(lint, goal, Owner::Graph, None);
    }
    for node in workflow.nodes() {
        // Named lazily: formatting it for every node would cost more than the check.
        let owner = Owner::Node(&node.id);
        if let Some(prompt) = node.attributes.get_any(&["prompt", "llm_prompt"]) {
            if *node.llm.prompt == *prompt.value {
                checker.inline(lint, prompt, owner, Some(&node.id));
            } else {
                // Inlined from an `@path` file: offsets do not map to the workflow source.
                checker.inlined(lint, prompt, &node.llm.prompt, owner, &node.id);
            }
        }
        if let Some(script) = node.attributes.get_any(&["script", "tool_command"]) {
            checker.inline(lint, script, owner, Some(&node.id));
        }
        if let Some(choice) = node.attributes.get("human.default_choice") {
            checker.inline(lint, choice, owner, Some(&node.id));
        }
    }
}

/// Whose text a reference is in, as messages name it.
#[derive(Debug, Clone, Copy)]
enum Owner<'a> {
    Graph,
    Node(&'a str),
}

impl fmt::Display for Owner<'_> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Owner::Graph => formatter.write_str("the graph"),
            Owner::Node(id) => write!(formatter, "node '{id}'"),
        }
    }
}

/// Reports references, once per source location: an attribute set by `node [...]`
/// defaults is shared by many nodes and is reported at its first node only.
struct Checker {
    reported: HashSet<Span>,
}

impl Checker {
    /// References in an attribute's own value, located inside the value.
    fn inline(
        &mut self,
        lint: &mut Lint<'_>,
        attribute: &Attribute,
        owner: Owner<'_>,
        node: Option<&str>,
    ) {
        for (name, range) in template_references(&attribute.value) {
            if lint.options.variables.is_defined(name) {
                continue;
            }
            let span = attribute.value_subspan(lint.source, range);
            if !self.reported.insert(span) {
                continue;
            }
            let diagnostic = Diagnostic::new(
                Rule::UndefinedVariable,
                format!(
                    "{} of {owner} refers to undefined variable '{name}'",
                    attribute.key
                ),
            )
            .at(span)
            .fix(fix(name));
            lint.report(match node {
                Some(node) => diagnostic.node(node),
                None => diagnostic,
            });
        }
    }

    /// References in a prompt read from the file named by `attribute`, located at the key.
    fn inlined(
        &mut self,
        lint: &mut Lint<'_>,
        attribute: &Attribute,
        text: &str,
        owner: Owner<'_>,
        node: &str,
    ) {
        let mut names: Vec<&str> = Vec::new();
        for (name, _) in template_references(text) {
            if !lint.options.variables.is_defined(name) && !names.contains(&name) {
                names.push(name);
            }
        }
        if names.is_empty() || !self.reported.insert(attribute.key_span) {
            return;
        }
        for name in names {
            lint.report(
                Diagnostic::new(
                    Rule::UndefinedVariable,
                    format!(
                        "{} file {} of {owner} refers to undefined variable '{name}'",
                        attribute.key,
                        attribute.value.trim()
                    ),
                )
                .at(attribute.key_span)
                .node(node)
                .fix(fix(name)),
            );
        }
    }
}

fn fix(name: &str) -> String {
    format!("define it with --var {name}=VALUE or in [run.vars], or wrap the text in {{% raw %}}...{{% endraw %}}")
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::Rule;
    use crate::lint::test_support::{assert_fires, findings_with, frame, position};

    #[test]
    fn defined_variables_pass() {
        let text = frame("goal=\"Ship {{ known }}\"\n a [prompt=\"{{goal}} with {{ known }}, $HOME and {% raw %}{{ x }}{% endraw %}\"]\n start -> a -> exit");
        assert_fires(Rule::UndefinedVariable, &text, 0);
    }

    #[test]
    fn undefined_references_warn_inside_values() {
        let text = frame(
            "goal=\"Fix {{ bug }}\"\n c [shape=parallelogram, script=\"echo {{dir}}\"]\n h [shape=hexagon, human.default_choice=\"{{ pick }}\"]\n start -> c -> h -> exit",
        );
        let found = assert_fires(Rule::UndefinedVariable, &text, 3);
        assert_eq!(
            found[0].message,
            "goal of the graph refers to undefined variable 'bug'"
        );
        assert_eq!(position(&text, &found[0]), (4, 11));
        let span = found[1].span.expect("span");
        assert_eq!(&text[span.range()], "{{dir}}");
        assert_eq!(
            found[1].message,
            "script of node 'c' refers to undefined variable 'dir'"
        );
        assert_eq!(found[2].node_id.as_deref(), Some("h"));
    }

    #[test]
    fn prompt_from_defaults_is_reported_once() {
        let text = frame("node [prompt=\"Do {{ task }}\"]\n start -> a -> b -> exit");
        let found = assert_fires(Rule::UndefinedVariable, &text, 1);
        assert_eq!(position(&text, &found[0]), (4, 18));
    }

    #[test]
    fn references_in_prompt_files_point_at_the_key() {
        let text = frame("a [prompt=\"@task.md\"]\n start -> a -> exit");
        let found = findings_with(
            Rule::UndefinedVariable,
            &text,
            &[(
                "/w/task.md",
                "Do {{ task }} for {{ known }} then {{ task }}",
            )],
        );
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(
            found[0].message,
            "prompt file @task.md of node 'a' refers to undefined variable 'task'"
        );
        assert_eq!(position(&text, &found[0]), (4, 4));
    }
}
