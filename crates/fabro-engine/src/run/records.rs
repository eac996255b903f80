//! What a run records and starts with (SPEC 4.1, 11.1): its answer sources, manifest,
//! records and initial context.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use fabro_language::render::dot::render_dot;

use super::git_plan::GitPlan;
use super::{PreparedRun, RunError};
use crate::interviewer::{AnswerFlags, AutoApprove, FirstApplicable, Interviewer};
use crate::record::Manifest;
use crate::store::RunRecords;
use crate::timestamp::now_rfc3339;
use crate::traversal::RunState;

impl PreparedRun {
    /// The run's answer sources, first applicable wins (SPEC 5.5): this run's own
    /// `--answer` values (a child run starts with its parent's again), `--auto-approve`,
    /// then the interactive source.
    pub(super) fn interviewer(&self) -> Arc<dyn Interviewer> {
        let mut sources: Vec<Arc<dyn Interviewer>> =
            vec![Arc::new(AnswerFlags::new(&self.options.answers))];
        if self.options.auto_approve {
            sources.push(Arc::new(AutoApprove));
        }
        sources.extend(self.options.interviewer.clone());
        Arc::new(FirstApplicable::new(sources))
    }

    /// The manifest of a new run (SPEC 11.1); with git checkpointing it names the run
    /// branch and base commit that the set-up is about to make.
    pub(super) fn manifest(&self, simulated_llm: bool) -> Manifest {
        let (base_sha, run_branch, repo_root, work_dir_relative) = match &self.git_plan {
            GitPlan::Clean {
                repo_root,
                head_sha,
                work_dir_relative,
                ..
            } => (
                Some(head_sha.clone()),
                Some(crate::git::run_branch_name(&self.run_id)),
                Some(repo_root.display().to_string()),
                Some(work_dir_relative.display().to_string()),
            ),
            GitPlan::Dirty { repo_root, .. } => {
                (None, None, Some(repo_root.display().to_string()), None)
            }
            GitPlan::Off => (None, None, None, None),
        };
        // SPEC 20.2: a fork names its source; running the source's stored workflow, it
        // keeps the source's workflow path and name.
        let (workflow_path, workflow_name) =
            match self.fork.as_ref().and_then(|fork| fork.workflow.clone()) {
                Some(workflow) => workflow,
                None => (
                    self.options.workflow_path.display().to_string(),
                    self.workflow_name.clone(),
                ),
            };
        let forked_from = self.fork.as_ref().map(|fork| fork.forked_from.clone());
        Manifest {
            run_id: self.run_id.clone(),
            workflow_name,
            workflow_path,
            goal: self.goal.clone(),
            node_count: self.workflow.nodes().len(),
            edge_count: self.workflow.edges().len(),
            base_sha,
            run_branch,
            started_at: now_rfc3339(),
            fabro_version: env!("CARGO_PKG_VERSION").to_owned(),
            dry_run: self.options.dry_run,
            parent_run_id: match &forked_from {
                Some(source) => Some(source.run_id.clone()),
                None => self.options.parent_run_id.clone(),
            },
            vars: redact_vars(&self.options.vars),
            simulated_llm,
            repo_root,
            work_dir_relative,
            origin: Some(self.origin),
            forked_from,
            repository_url: self
                .options
                .repository
                .as_ref()
                .filter(|_| matches!(self.git_plan, GitPlan::Clean { .. }))
                .map(|repository| repository.url.clone()),
        }
    }

    /// INITIALIZE for a new run: `graph.fabro`, `children/`, `config.json`, and
    /// `manifest.json` last (a run directory with a manifest is a complete one).
    pub(super) fn write_records(&self, manifest: &Manifest) -> Result<(), RunError> {
        let graph = match &self.stored {
            Some(stored) => std::borrow::Cow::Borrowed(stored.graph.as_str()),
            None => std::borrow::Cow::Owned(render_dot(&self.workflow)),
        };
        // SPEC 12.3: the merged configuration, with the run's variables (CLI included)
        // and secret-looking values redacted.
        let mut config = self.options.config.clone();
        config.run.vars = redact_vars(&self.options.vars);
        let records = RunRecords {
            graph: &graph,
            children: self
                .stored
                .as_ref()
                .map_or(&[], |stored| stored.children.as_slice()),
            config: &config,
            manifest,
            run_dir: Some(self.paths.run_dir()),
        };
        self.stores
            .runs
            .write_records(&self.id(), &records)
            .map_err(RunError::from)
    }
}

/// The context at the start of a run (SPEC 4.1 step 4).
pub(super) fn seed_context(
    state: &mut RunState,
    workflow: &fabro_language::Workflow,
    goal: &str,
    run_id: &str,
    work_dir: &Path,
) {
    let context = &mut state.context;
    for attribute in &workflow.attributes {
        context.set(format!("graph.{}", attribute.key), attribute.value.as_ref());
    }
    context.set("graph.goal", goal);
    context.set("internal.run_id", run_id);
    context.set("internal.work_dir", work_dir.display().to_string());
    context.set("internal.restart_count", 0);
    for key in [
        "outcome",
        "preferred_label",
        "failure_class",
        "failure_signature",
        "last_stage",
        "last_response",
    ] {
        context.set(key, "");
    }
}

/// Variables with secret-looking names redacted (SPEC 11.1, 13.1).
fn redact_vars(vars: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    vars.iter()
        .map(|(key, value)| {
            let value = if crate::sandbox::is_secret_name(key) {
                "[REDACTED]".to_owned()
            } else {
                value.clone()
            };
            (key.clone(), value)
        })
        .collect()
}
