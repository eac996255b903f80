//! `fidelity_valid`: fidelity values must name one of the six modes of SPEC 6.4;
//! invalid ones are ignored (SPEC 3.2).

use super::Lint;
use crate::diagnostic::{Diagnostic, Rule};
use crate::model::Fidelity;
use crate::syntax::Attribute;

pub(super) fn check(lint: &mut Lint<'_>) {
    let workflow = lint.workflow;
    for key in ["default_fidelity", "context_fidelity_default"] {
        let Some(attribute) = workflow.attributes.get(key).filter(|a| is_invalid(a)) else {
            continue;
        };
        lint.report(diagnostic(attribute, format!("graph {key}"), "compact is used").fix(fix()));
    }
    if !workflow.may_have_key("fidelity") {
        return;
    }
    for node in workflow.nodes() {
        let Some(attribute) = node.attributes.get("fidelity").filter(|a| is_invalid(a)) else {
            continue;
        };
        lint.report(
            diagnostic(
                attribute,
                format!("node '{}' fidelity", node.id),
                "the graph default is used",
            )
            .node(&node.id)
            .fix(fix()),
        );
    }
    for edge in workflow.edges() {
        let Some(attribute) = edge.attributes.get("fidelity").filter(|a| is_invalid(a)) else {
            continue;
        };
        let from = &workflow.node(edge.from).id;
        let to = &workflow.node(edge.to).id;
        lint.report(
            diagnostic(
                attribute,
                format!("edge {from} -> {to} fidelity"),
                "the target's own fidelity is used",
            )
            .edge(from, to)
            .fix(fix()),
        );
    }
}

fn is_invalid(attribute: &Attribute) -> bool {
    Fidelity::parse(&attribute.value).is_none()
}

fn diagnostic(attribute: &Attribute, subject: String, fallback: &str) -> Diagnostic {
    Diagnostic::new(
        Rule::FidelityValid,
        format!(
            "{subject} \"{}\" is not a fidelity mode; {fallback}",
            attribute.value.escape_debug()
        ),
    )
    .at(attribute.key_span)
}

fn fix() -> String {
    let modes: Vec<_> = Fidelity::ALL.iter().map(|mode| mode.as_str()).collect();
    format!("use one of: {}", modes.join(", "))
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::Rule;
    use crate::lint::test_support::{assert_fires, frame, position};

    #[test]
    fn valid_modes_pass() {
        let text = frame("default_fidelity=\"summary:high\"\n a [fidelity=full]\n start -> a [fidelity=truncate]\n a -> exit");
        assert_fires(Rule::FidelityValid, &text, 0);
    }

    #[test]
    fn invalid_modes_warn_on_graph_node_and_edge() {
        let text = frame("context_fidelity_default=summary\n a [fidelity=fulll]\n start -> a [fidelity=\"\"]\n a -> exit");
        let found = assert_fires(Rule::FidelityValid, &text, 3);
        assert_eq!(
            found[0].message,
            "graph context_fidelity_default \"summary\" is not a fidelity mode; compact is used"
        );
        assert_eq!(position(&text, &found[0]), (4, 1));
        assert_eq!(found[1].node_id.as_deref(), Some("a"));
        assert_eq!(position(&text, &found[1]), (5, 5));
        assert_eq!(
            found[2].message,
            "edge start -> a fidelity \"\" is not a fidelity mode; the target's own fidelity is used"
        );
    }
}
