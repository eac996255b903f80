//! `reserved_keyword_node_id`: node ids that spell a DOT keyword or `if` (SPEC 2.2, 3.2).
//!
//! DOT keywords can only be node ids when quoted; SPEC 3.2 adds `if` to the list, which
//! is an ordinary identifier to the parser and so is flagged quoted or not.

use super::Lint;
use crate::diagnostic::{Diagnostic, Rule};

const RESERVED: [&str; 7] = [
    "digraph", "graph", "node", "edge", "subgraph", "strict", "if",
];

pub(super) fn check(lint: &mut Lint<'_>) {
    for node in lint.workflow.nodes() {
        let Some(keyword) = RESERVED
            .iter()
            .find(|keyword| node.id.eq_ignore_ascii_case(keyword))
        else {
            continue;
        };
        lint.report(
            Diagnostic::new(
                Rule::ReservedKeywordNodeId,
                format!("node id '{}' is the reserved word '{keyword}'", node.id),
            )
            .at(node.span)
            .node(&node.id)
            .fix(format!("rename the node, e.g. '{}_step'", node.id)),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::Rule;
    use crate::lint::test_support::{assert_fires, frame, position};

    #[test]
    fn ordinary_ids_pass() {
        let text = frame("nodes\n graph_step\n iff\n start -> nodes -> graph_step -> iff -> exit");
        assert_fires(Rule::ReservedKeywordNodeId, &text, 0);
    }

    #[test]
    fn quoted_keywords_and_if_warn() {
        let text = frame("\"Node\" [label=\"N\"]\n start -> \"Node\" -> \"if\" -> exit");
        let found = assert_fires(Rule::ReservedKeywordNodeId, &text, 2);
        assert_eq!(
            found[0].message,
            "node id 'Node' is the reserved word 'node'"
        );
        assert_eq!(found[0].node_id.as_deref(), Some("Node"));
        assert_eq!(position(&text, &found[0]), (4, 1));
        assert_eq!(found[1].node_id.as_deref(), Some("if"));
    }
}
