//! Diagnostics: the problems found in a workflow, as data (SPEC 3.1).
//!
//! Parsing and validation never stop at the first problem (except that a `parse_error`
//! ends parsing); every finding becomes a [`Diagnostic`] with a rule id, a severity and a
//! span. Rendering them (lines, columns, carets, colour) is the CLI's job.

use crate::span::Span;

/// How serious a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// The workflow cannot run.
    Error,
    /// The workflow runs, but probably not as intended.
    Warning,
}

impl Severity {
    /// `error` or `warning`, as printed.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

macro_rules! rules {
    ($($variant:ident => $id:literal, $severity:ident;)*) => {
        /// Every validation rule of SPEC 3.2, with its id and severity.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Rule {
            $(
                #[doc = concat!("`", $id, "`")]
                $variant,
            )*
        }

        impl Rule {
            /// Every rule, in SPEC order.
            pub const ALL: &'static [Rule] = &[$(Rule::$variant,)*];

            /// The rule id as printed, e.g. `parse_error`.
            pub fn id(self) -> &'static str {
                match self {
                    $(Rule::$variant => $id,)*
                }
            }

            /// The severity the rule reports with.
            pub fn severity(self) -> Severity {
                match self {
                    $(Rule::$variant => Severity::$severity,)*
                }
            }
        }
    };
}

rules! {
    ParseError => "parse_error", Error;
    AttributeType => "attribute_type", Error;
    StartNode => "start_node", Error;
    TerminalNode => "terminal_node", Error;
    StartNoIncoming => "start_no_incoming", Error;
    ExitNoOutgoing => "exit_no_outgoing", Error;
    ConditionSyntax => "condition_syntax", Error;
    StylesheetSyntax => "stylesheet_syntax", Error;
    UnresolvedFileRef => "unresolved_file_ref", Error;
    OutputSchemaInvalid => "output_schema_invalid", Error;
    OutputSchemaUnsupported => "output_schema_unsupported", Error;
    FreeformEdgeCount => "freeform_edge_count", Error;
    RandomSelectionNoConditions => "random_selection_no_conditions", Error;
    ChildWorkflow => "child_workflow", Error;
    ProviderKnown => "provider_known", Error;
    Reachability => "reachability", Warning;
    EdgeTargetExists => "edge_target_exists", Warning;
    AllConditionalEdges => "all_conditional_edges", Warning;
    HumanConditionalEdge => "human_conditional_edge", Warning;
    HumanDuplicateKey => "human_duplicate_key", Warning;
    OrphanCustomOutcome => "orphan_custom_outcome", Warning;
    TypeKnown => "type_known", Warning;
    FidelityValid => "fidelity_valid", Warning;
    RetryTargetExists => "retry_target_exists", Warning;
    GoalGateHasRetry => "goal_gate_has_retry", Warning;
    PromptOnLlmNodes => "prompt_on_llm_nodes", Warning;
    DirectionValid => "direction_valid", Warning;
    ReservedKeywordNodeId => "reserved_keyword_node_id", Warning;
    ScriptAbsoluteCd => "script_absolute_cd", Warning;
    NodeModelKnown => "node_model_known", Warning;
    StylesheetModelKnown => "stylesheet_model_known", Warning;
    ThreadIdRequiresFidelityFull => "thread_id_requires_fidelity_full", Warning;
    SelectionValid => "selection_valid", Warning;
    JoinPolicyValid => "join_policy_valid", Warning;
    RetryPolicyValid => "retry_policy_valid", Warning;
    BackendValid => "backend_valid", Warning;
    UndefinedVariable => "undefined_variable", Warning;
    UnknownAttribute => "unknown_attribute", Warning;
    McpServerKnown => "mcp_server_known", Warning;
    SkillKnown => "skill_known", Warning;
}

/// The edge a diagnostic concerns, by node ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeRef {
    /// Source node id.
    pub from: String,
    /// Target node id.
    pub to: String,
}

/// One finding of parsing or validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The rule that fired.
    pub rule: Rule,
    /// How serious it is: the rule's severity unless the rule reports some findings
    /// differently (`provider_known` warns about stylesheets, SPEC 17.6).
    pub severity: Severity,
    /// One-line message, lowercase start, no trailing period.
    pub message: String,
    /// The node concerned, if any.
    pub node_id: Option<String>,
    /// The edge concerned, if any (boxed: most diagnostics have none).
    pub edge: Option<Box<EdgeRef>>,
    /// Where in the source; `None` only for whole-graph findings.
    pub span: Option<Span>,
    /// An optional suggestion for fixing it.
    pub fix: Option<String>,
}

impl Diagnostic {
    /// A diagnostic for `rule` with a message and no location yet.
    pub fn new(rule: Rule, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            rule,
            severity: rule.severity(),
            message: message.into(),
            node_id: None,
            edge: None,
            span: None,
            fix: None,
        }
    }

    /// How serious the finding is (see [`Diagnostic::severity`]'s field).
    pub fn severity(&self) -> Severity {
        self.severity
    }

    /// Reports this finding as a warning, whatever its rule's severity.
    pub fn as_warning(mut self) -> Diagnostic {
        self.severity = Severity::Warning;
        self
    }

    /// Sets the span.
    pub fn at(mut self, span: Span) -> Diagnostic {
        self.span = Some(span);
        self
    }

    /// Sets the node.
    pub fn node(mut self, node_id: &str) -> Diagnostic {
        self.node_id = Some(node_id.to_owned());
        self
    }

    /// Sets the edge.
    pub fn edge(mut self, from: &str, to: &str) -> Diagnostic {
        self.edge = Some(Box::new(EdgeRef {
            from: from.to_owned(),
            to: to.to_owned(),
        }));
        self
    }

    /// Sets the fix hint.
    pub fn fix(mut self, fix: impl Into<String>) -> Diagnostic {
        self.fix = Some(fix.into());
        self
    }
}

/// Sorts diagnostics by position, then rule id (SPEC 3.1); span-less ones come first.
/// Identical findings (a chained edge statement shares one attribute between its edges)
/// are reported once.
pub fn sort_diagnostics(diagnostics: &mut Vec<Diagnostic>) {
    diagnostics.sort_by(|a, b| {
        a.span
            .map(|span| span.start)
            .cmp(&b.span.map(|span| span.start))
            .then_with(|| a.rule.id().cmp(b.rule.id()))
    });
    diagnostics.dedup_by(|later, earlier| {
        later.rule == earlier.rule && later.span == earlier.span && later.message == earlier.message
    });
}

/// True when any diagnostic is an error.
pub fn has_errors(diagnostics: &[Diagnostic]) -> bool {
    diagnostics
        .iter()
        .any(|diagnostic| diagnostic.severity() == Severity::Error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_ids_are_unique_snake_case() {
        let mut ids: Vec<_> = Rule::ALL.iter().map(|rule| rule.id()).collect();
        assert!(ids
            .iter()
            .all(|id| id.chars().all(|c| c.is_ascii_lowercase() || c == '_')));
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), Rule::ALL.len());
        assert_eq!(Rule::ALL.len(), 40);
    }

    #[test]
    fn sorting_is_by_offset_then_rule() {
        let mut diagnostics = vec![
            Diagnostic::new(Rule::TypeKnown, "b").at(Span::new(10, 11)),
            Diagnostic::new(Rule::AttributeType, "a").at(Span::new(10, 12)),
            Diagnostic::new(Rule::StartNode, "c"),
            Diagnostic::new(Rule::Reachability, "d").at(Span::new(2, 3)),
        ];
        sort_diagnostics(&mut diagnostics);
        let order: Vec<_> = diagnostics.iter().map(|d| d.message.as_str()).collect();
        assert_eq!(order, ["c", "d", "a", "b"]);
    }
}
