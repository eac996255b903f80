//! The run side of sub-workflow nodes (SPEC 5.10): [`ChildRuns`] implements the handlers'
//! [`ChildRunner`] by preparing the child workflow as a run of its own, with the parent's
//! options as the template.

use std::path::PathBuf;

use fabro_language::resolve_path;

use super::{prepare, RunError, RunOptions};
use crate::handler::{ChildReport, ChildRequest, ChildRun, ChildRunFailed, ChildRunner};
use crate::run_dir::RunPaths;
use crate::source::{CatalogModels, FsLoader};

/// Starts the child runs of one parent run.
pub(crate) struct ChildRuns {
    /// The parent's options, the template for its children.
    template: RunOptions,
    /// The parent's run directory, where its children are stored (SPEC 4.1).
    parent_run_dir: PathBuf,
}

impl ChildRuns {
    /// The child runner of the run `run_id` started with `options`.
    pub(crate) fn new(options: &RunOptions, run_id: &str) -> ChildRuns {
        ChildRuns {
            template: options.clone(),
            parent_run_dir: RunPaths::new(&options.fabro_home, run_id)
                .run_dir()
                .to_path_buf(),
        }
    }
}

impl ChildRunner for ChildRuns {
    fn start(&self, request: ChildRequest) -> Result<ChildRun, ChildRunFailed> {
        // SPEC 4.1: the parent's stored graph names its children by paths relative to the
        // run directory (`children/…`), where they are stored; the original files are not
        // read again.
        let mut options = self.template.clone();
        options.workflow_path = resolve_path(&FsLoader, &self.parent_run_dir, &request.reference);
        options.run_id = None;
        options.goal = None;
        options.fallback_goal = request.fallback_goal;
        options.parent_run_id = Some(request.parent_run_id);
        options.config.run.goal = None;
        options.work_dir = Some(request.work_dir);
        let prepared =
            prepare(options, &FsLoader, &CatalogModels).map_err(|error| failed(&error))?;
        let run_id = prepared.run_id().to_owned();
        let run_dir = prepared.run_dir().to_path_buf();
        let cancel = request.cancel;
        Ok(ChildRun {
            run_id,
            run_dir,
            execution: Box::pin(async move {
                prepared
                    .execute(cancel, Vec::new())
                    .await
                    .map(|report| ChildReport {
                        status: report.status,
                        reason: report.reason,
                    })
                    .map_err(|error| failed(&error))
            }),
        })
    }
}

/// The sub-workflow stage's failure for a child run that could not run.
fn failed(error: &RunError) -> ChildRunFailed {
    let reason = match error {
        RunError::InvalidWorkflow { path, checked, .. } => {
            let first = checked
                .diagnostics
                .iter()
                .find(|diagnostic| diagnostic.severity() == fabro_language::Severity::Error)
                .map_or_else(String::new, |diagnostic| {
                    format!(": {}", diagnostic.message)
                });
            format!("child workflow {} is invalid{first}", path.display())
        }
        RunError::Unparsed { .. }
        | RunError::InvalidRunId { .. }
        | RunError::RunExists { .. }
        | RunError::UnknownAnswerNodes { .. }
        | RunError::StoredWorkflowInvalid { .. }
        | RunError::SimulatedResponses { .. }
        | RunError::LlmSetup(_)
        | RunError::ArtifactsInclude(_)
        | RunError::Store(_)
        | RunError::ExecutedTwice { .. }
        | RunError::NoStartNode { .. }
        | RunError::MissingRunDir { .. }
        | RunError::AlreadyFinished { .. }
        | RunError::Environment(_)
        | RunError::NoRunDir { .. }
        | RunError::Locked { .. }
        | RunError::NoCheckpoint { .. }
        | RunError::Resume { .. } => {
            format!("child workflow: {}", crate::error_chain(error))
        }
        RunError::Io {
            action,
            path,
            source,
        } => format!("child workflow: {action} {}: {source}", path.display()),
        // Child workflows never plan git (SPEC 5.10), and are never forks or rewinds
        // (SPEC 20.2, 20.3), so these do not occur; they are still reported with their
        // cause.
        RunError::DirtyWorktree
        | RunError::SaveBefore { .. }
        | RunError::NoSuchStage { .. }
        | RunError::NoCheckpointAfter { .. }
        | RunError::MissingNodes { .. }
        | RunError::Running { .. }
        | RunError::RewindPending { .. }
        | RunError::Rewind { .. } => {
            format!("child workflow: {}", crate::error_chain(error))
        }
    };
    ChildRunFailed { reason }
}
