//! `fabro resume RUN_ID | REF | CHECKPOINT.json` (SPEC 8.7, 12.1): continue a run from
//! its newest complete checkpoint, with the workflow, goal, variables and configuration
//! of the run's own records.

use std::path::Path;

use fabro_engine::backend::Checkpoint;
use fabro_engine::local::RunHistory;
use fabro_engine::{resume, ResumeRequest, RunId, Stores};

use crate::args::ResumeArgs;
use crate::command::resolve_run;
use crate::command::run::{
    console_interviewer, detached_interviewer, execute_or_detach, stage_overrides,
};
use crate::error::{CliError, Status};
use crate::loader::{fabro_home, read_file};
use crate::output::Output;

pub(crate) fn run(args: &ResumeArgs, output: &mut Output) -> Result<Status, CliError> {
    resume_here(args, output)
}

/// The resume in this process: the engine's [`resume`] of the run the argument names,
/// with the current directory's repository to restore a run whose records are lost.
fn resume_here(args: &ResumeArgs, output: &mut Output) -> Result<Status, CliError> {
    let home = fabro_home();
    let run_id = identify(&args.target)?;
    let history = current_history();
    let interviewer = if args.detached_worker {
        Some(detached_interviewer(&home, &run_id))
    } else {
        console_interviewer()
    };
    let request = ResumeRequest {
        fabro_home: home.clone(),
        history: history.as_ref(),
        repository: None,
        overrides: stage_overrides(&args.stages, interviewer)?,
    };
    let prepared = resume(Stores::local(&home), &RunId::from(run_id.as_str()), request);
    execute_or_detach(prepared, args.detach, args.json, Vec::new(), output)
}

/// The run a `fabro resume --server` argument names: the run of a checkpoint file or of
/// a ref name, else the argument (a run id or prefix the server resolves).
pub(crate) fn remote_target(target: &str) -> Result<String, CliError> {
    let path = Path::new(target);
    if path.is_file() {
        let bytes = read_file("cannot read checkpoint", path)?;
        let checkpoint: Checkpoint =
            serde_json::from_slice(&bytes).map_err(|source| CliError::NotACheckpoint {
                target: target.to_owned(),
                source,
            })?;
        return Ok(checkpoint.run_id.into_string());
    }
    Ok(run_id_of_ref(target).unwrap_or(target).to_owned())
}

/// The run an argument names (SPEC 8.7 step 1): a checkpoint file, a run-branch or
/// metadata ref name, or a run id or unique prefix.
fn identify(target: &str) -> Result<String, CliError> {
    let path = Path::new(target);
    if path.is_file() {
        let bytes = read_file("cannot read checkpoint", path)?;
        let checkpoint: Checkpoint =
            serde_json::from_slice(&bytes).map_err(|source| CliError::NotACheckpoint {
                target: target.to_owned(),
                source,
            })?;
        return Ok(checkpoint.run_id.into_string());
    }
    if let Some(run_id) = run_id_of_ref(target) {
        return Ok(run_id.to_owned());
    }
    match resolve_run(target) {
        Ok(record) => Ok(record.run_id),
        // A run unknown here may still be in the current repository's metadata (SPEC 8.7
        // step 2), e.g. after its run directory (or the whole run index) was lost.
        Err(error) => match current_history() {
            Some(history) if matches!(history.metadata_tip(target), Ok(Some(_))) => {
                Ok(target.to_owned())
            }
            _ => Err(error),
        },
    }
}

/// The repository of the current directory, if any.
fn current_history() -> Option<RunHistory> {
    let directory = std::env::current_dir().ok()?;
    RunHistory::open(&directory).ok().flatten()
}

/// The run id in `fabro/run/{id}`, `fabro/meta/{id}` or `refs/fabro/{id}`, optionally
/// preceded by `refs/heads/`, `refs/remotes/{remote}/` or `{remote}/`.
fn run_id_of_ref(text: &str) -> Option<&str> {
    let text = text.strip_prefix("refs/heads/").unwrap_or(text);
    if let Some(id) = text.strip_prefix("refs/fabro/") {
        return non_empty_id(id);
    }
    let text = match text.strip_prefix("refs/remotes/") {
        Some(rest) => rest.split_once('/')?.1,
        None => text,
    };
    for prefix in ["fabro/run/", "fabro/meta/"] {
        if let Some(id) = text.strip_prefix(prefix) {
            return non_empty_id(id);
        }
    }
    // `{remote}/fabro/run/{id}`.
    let (_, rest) = text.split_once('/')?;
    ["fabro/run/", "fabro/meta/"]
        .iter()
        .find_map(|prefix| rest.strip_prefix(prefix))
        .and_then(non_empty_id)
}

fn non_empty_id(id: &str) -> Option<&str> {
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ref_names_name_runs() {
        for (text, expected) in [
            ("fabro/run/R1", Some("R1")),
            ("fabro/meta/R1", Some("R1")),
            ("refs/fabro/R1", Some("R1")),
            ("refs/heads/fabro/run/R1", Some("R1")),
            ("refs/remotes/origin/fabro/meta/R1", Some("R1")),
            ("origin/fabro/run/R1", Some("R1")),
            ("R1", None),
            ("fabro/run/", None),
            ("fabro/other/R1", None),
            ("refs/fabro/a/b", None),
        ] {
            assert_eq!(run_id_of_ref(text), expected, "{text}");
        }
    }
}
