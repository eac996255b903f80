//! `mcp_server_known`: a node's `mcp_servers` names a server that the run's
//! configuration does not define (SPEC 19.1). The agent would run without it, so a
//! misspelt name silently removes tools; the caller's [`crate::ModelCatalog`] knows the
//! configured servers.

use super::Lint;
use crate::diagnostic::{Diagnostic, Rule};

pub(super) fn check(lint: &mut Lint<'_>) {
    names_check(lint, "mcp_servers", Rule::McpServerKnown, |lint, name| {
        lint.options.models.is_mcp_server_known(name)
    });
}

/// Reports every name of the list attribute `key` that `known` rejects, once per
/// attribute (a `node [...]` default shared by several nodes is reported where written).
pub(super) fn names_check(
    lint: &mut Lint<'_>,
    key: &str,
    rule: Rule,
    known: fn(&Lint<'_>, &str) -> bool,
) {
    if !lint.workflow.may_have_key(key) {
        return;
    }
    let mut reported = std::collections::HashSet::new();
    let mut findings = Vec::new();
    for node in lint.workflow.nodes() {
        let Some(attribute) = node.attributes.get(key) else {
            continue;
        };
        for name in crate::value::parse_list(&attribute.value) {
            if known(lint, &name) || !reported.insert((attribute.key_span, name.clone())) {
                continue;
            }
            let what = match rule {
                Rule::McpServerKnown => "MCP server",
                _ => "skill",
            };
            findings.push(
                Diagnostic::new(
                    rule,
                    format!(
                        "node '{}' names unknown {what} '{}' in {key}",
                        node.id,
                        name.escape_debug()
                    ),
                )
                .at(attribute.key_span)
                .node(&node.id),
            );
        }
    }
    for finding in findings {
        lint.report(finding);
    }
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::{Rule, Severity};
    use crate::lint::test_support::{assert_fires, frame, position};

    #[test]
    fn configured_servers_pass_and_others_are_reported_at_the_key() {
        // The test catalog knows the server `files` and the skill `review`.
        let text = frame(
            " a [label=\"A\", mcp_servers=\"files,tracker\"]\n b [label=\"B\", mcp_servers=\"\"]\n start -> a -> b -> exit",
        );
        let found = assert_fires(Rule::McpServerKnown, &text, 1);
        assert_eq!(found[0].severity(), Severity::Warning);
        assert_eq!(
            found[0].message,
            "node 'a' names unknown MCP server 'tracker' in mcp_servers"
        );
        assert_eq!(position(&text, &found[0]), (4, 16));
    }
}
