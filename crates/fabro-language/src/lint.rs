//! Lint rules of SPEC 3.2 that look at the lowered workflow as a whole.
//!
//! One rule (or one family of identical rules) per file in `lint/`; each exposes
//! `check(&mut Lint)`. Conversion errors (`attribute_type`, `condition_syntax`,
//! `stylesheet_syntax`, `output_schema_invalid` of inline schemas) come from lowering, and
//! file errors (`unresolved_file_ref`, `child_workflow`, `output_schema_invalid` of
//! `@path` schemas) from reference resolution. Every rule is linear in the size of the
//! workflow: adjacency comes from `Workflow::outgoing` and `Workflow::incoming`.

mod all_conditional_edges;
mod direction_valid;
mod edge_target_exists;
mod enum_value;
mod exit_no_outgoing;
mod fidelity_valid;
mod freeform_edge_count;
mod goal_gate_has_retry;
mod human_conditional_edge;
mod human_duplicate_key;
mod mcp_server_known;
mod model_known;
mod orphan_custom_outcome;
mod output_schema;
mod prompt_on_llm_nodes;
pub(crate) mod provider_known;
mod random_selection_no_conditions;
mod reachability;
mod reserved_keyword_node_id;
mod retry_target_exists;
mod script_absolute_cd;
mod skill_known;
mod start_no_incoming;
mod start_node;
mod terminal_node;
mod thread_id_requires_fidelity_full;
mod type_known;
mod undefined_variable;
mod unknown_attribute;

use crate::diagnostic::Diagnostic;
use crate::model::Workflow;
use crate::CheckOptions;

/// What every rule sees: the workflow, its source text and the check options.
pub(crate) struct Lint<'a> {
    pub(crate) workflow: &'a Workflow,
    pub(crate) source: &'a str,
    pub(crate) options: &'a CheckOptions<'a>,
    diagnostics: &'a mut Vec<Diagnostic>,
}

impl Lint<'_> {
    pub(crate) fn report(&mut self, diagnostic: Diagnostic) {
        self.diagnostics.push(diagnostic);
    }
}

type RuleCheck = fn(&mut Lint<'_>);

const RULES: &[RuleCheck] = &[
    start_node::check,
    terminal_node::check,
    start_no_incoming::check,
    exit_no_outgoing::check,
    output_schema::check,
    freeform_edge_count::check,
    random_selection_no_conditions::check,
    reachability::check,
    edge_target_exists::check,
    all_conditional_edges::check,
    human_conditional_edge::check,
    human_duplicate_key::check,
    orphan_custom_outcome::check,
    type_known::check,
    fidelity_valid::check,
    retry_target_exists::check,
    goal_gate_has_retry::check,
    prompt_on_llm_nodes::check,
    direction_valid::check,
    reserved_keyword_node_id::check,
    script_absolute_cd::check,
    model_known::check,
    provider_known::check,
    thread_id_requires_fidelity_full::check,
    enum_value::check,
    undefined_variable::check,
    unknown_attribute::check,
    mcp_server_known::check,
    skill_known::check,
];

/// Runs every rule, appending to `diagnostics`.
pub(crate) fn run<'a>(
    workflow: &'a Workflow,
    source: &'a str,
    options: &'a CheckOptions<'a>,
    diagnostics: &'a mut Vec<Diagnostic>,
) {
    let mut lint = Lint {
        workflow,
        source,
        options,
        diagnostics,
    };
    for rule in RULES {
        rule(&mut lint);
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Helpers for rule tests: check a workflow text and collect one rule's findings.

    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};

    use crate::diagnostic::{Diagnostic, Rule};
    use crate::span::LineIndex;
    use crate::{check, CheckOptions, ModelCatalog, SourceLoader, Variables};

    /// A loader over an in-memory map of paths to texts.
    pub(crate) struct MapLoader(pub(crate) BTreeMap<PathBuf, String>);

    impl SourceLoader for MapLoader {
        fn read(&self, path: &Path) -> std::io::Result<String> {
            self.0.get(path).cloned().ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory")
            })
        }

        fn home_dir(&self) -> Option<PathBuf> {
            Some(PathBuf::from("/home/user"))
        }
    }

    /// Knows the models `known-model` and `alias`, the MCP server `files` and the skill
    /// `review`.
    pub(crate) struct TestCatalog;

    impl ModelCatalog for TestCatalog {
        fn is_known(&self, model: &str) -> bool {
            matches!(model, "known-model" | "alias")
        }

        fn is_mcp_server_known(&self, server: &str) -> bool {
            server == "files"
        }

        fn is_skill_known(&self, name: &str) -> bool {
            name == "review"
        }
    }

    /// Diagnostics of `rule` for `text` (checked as `/w/test.fabro`, files from `files`).
    pub(crate) fn findings_with(rule: Rule, text: &str, files: &[(&str, &str)]) -> Vec<Diagnostic> {
        let loader = MapLoader(
            files
                .iter()
                .map(|(path, text)| (PathBuf::from(path), (*text).to_owned()))
                .collect(),
        );
        let variables = Variables::new("", BTreeMap::from([("known".to_owned(), "v".to_owned())]));
        let options = CheckOptions {
            loader: &loader,
            variables: &variables,
            models: &TestCatalog,
        };
        check(Path::new("/w/test.fabro"), text, &options)
            .diagnostics
            .into_iter()
            .filter(|diagnostic| diagnostic.rule == rule)
            .collect()
    }

    /// Diagnostics of `rule` for `text`.
    pub(crate) fn findings(rule: Rule, text: &str) -> Vec<Diagnostic> {
        findings_with(rule, text, &[])
    }

    /// Asserts `text` triggers `rule` exactly `count` times.
    pub(crate) fn assert_fires(rule: Rule, text: &str, count: usize) -> Vec<Diagnostic> {
        let found = findings(rule, text);
        assert_eq!(found.len(), count, "{} findings: {found:#?}", rule.id());
        found
    }

    /// 1-based line and column of the start of `diagnostic`'s span in `text`.
    pub(crate) fn position(text: &str, diagnostic: &Diagnostic) -> (u32, u32) {
        let span = diagnostic.span.expect("diagnostic has a span");
        LineIndex::new(text).position(text, span.start)
    }

    /// A valid minimal frame around `body`: start and exit nodes plus `body`.
    pub(crate) fn frame(body: &str) -> String {
        format!("digraph t {{\n start [shape=Mdiamond]\n exit [shape=Msquare]\n{body}\n}}")
    }
}
