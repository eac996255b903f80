//! `fabro resume RUN_ID | REF | CHECKPOINT.json` (SPEC 8.7, 12.1): continue a run from
//! its newest complete checkpoint, with the workflow, goal, variables and configuration
//! of the run's own records.

use std::path::{Path, PathBuf};

use fabro_engine::checkpoint::{load_newest, load_newest_from_git};
use fabro_engine::config::RunConfig;
use fabro_engine::git::RunHistory;
use fabro_engine::record::{Checkpoint, Manifest};
use fabro_engine::run::prepare_resume;
use fabro_engine::run_dir::{write_json_atomic, RunPaths};
use fabro_engine::run_index::{read_manifest, RunIndexError, RunLock};

use crate::args::ResumeArgs;
use crate::command::resolve_run;
use crate::command::run::{
    catalog_for, check_model_flags, detach, detached_interviewer, environment_options, execute,
    parse_answers,
};
use crate::error::{CliError, Status};
use crate::loader::{fabro_home, read_file, write_file, FsLoader};
use crate::output::Output;

pub(crate) fn run(args: &ResumeArgs, output: &mut Output) -> Result<Status, CliError> {
    check_model_flags(&args.stages)?;
    match crate::command::remote::server_url(args.server.as_deref()) {
        Some(url) => crate::command::remote::resume(&url, args, output),
        None => resume_here(args, output),
    }
}

/// The resume in this process.
fn resume_here(args: &ResumeArgs, output: &mut Output) -> Result<Status, CliError> {
    let home = fabro_home();
    let run_id = identify(&args.target)?;
    let paths = RunPaths::new(&home, &run_id);
    let no_run_dir = || {
        CliError::Usage(format!(
            "run {run_id} has no run directory under {}",
            home.display()
        ))
    };
    // SPEC 8.7 step 3: the run lock comes before anything of the run is read, so that
    // of two resumes started together one runs and the other is refused at once.
    let created = !paths.run_dir().is_dir();
    if created {
        if !has_metadata(&run_id)? {
            return Err(no_run_dir());
        }
        fs_err::create_dir_all(paths.run_dir())
            .map_err(|error| CliError::io("cannot create", paths.run_dir(), error))?;
    }
    let lock = RunLock::acquire(paths.run_dir()).map_err(|error| match error {
        RunIndexError::Locked { pid, .. } => CliError::Usage(format!(
            "run {run_id} is being resumed by another process{}",
            pid.map(|pid| format!(" (pid {pid})")).unwrap_or_default()
        )),
        error => CliError::Index(error),
    })?;
    if !paths.manifest().exists() {
        let recreated = recreate_run_dir(&run_id, &paths);
        if !matches!(recreated, Ok(true)) && created {
            // Leave no directory behind that looks like a run's set-up leftovers.
            drop(lock);
            let _ = fs_err::remove_dir_all(paths.run_dir());
            return Err(recreated.err().unwrap_or_else(no_run_dir));
        }
        recreated?;
    }
    let manifest = read_manifest(paths.run_dir()).map_err(CliError::Index)?;
    // SPEC 8.7 step 2: with git checkpointing the state comes from the metadata history.
    let load_error = CliError::Checkpoint;
    let checkpoint = match (&manifest.run_branch, &manifest.repo_root) {
        (Some(_), Some(repo_root)) => {
            match load_newest_from_git(Path::new(repo_root), paths.run_dir(), &run_id)
                .map_err(load_error)?
            {
                Some(checkpoint) => Some(checkpoint),
                // Killed before the initial metadata commit: no stage ran, so the run
                // starts over from its initial state at the base commit.
                None => load_newest(paths.run_dir())
                    .map_err(load_error)?
                    .filter(|checkpoint| checkpoint.completed_nodes.is_empty())
                    .map(|mut checkpoint| {
                        checkpoint.git_commit_sha.clone_from(&manifest.base_sha);
                        checkpoint
                    }),
            }
        }
        _ => load_newest(paths.run_dir()).map_err(load_error)?,
    }
    .ok_or_else(|| CliError::Usage(format!("run {run_id} has no checkpoint to resume from")))?;
    let config_bytes = read_file("cannot read run configuration", &paths.config())?;
    let mut config: RunConfig =
        serde_json::from_slice(&config_bytes).map_err(|source| CliError::InvalidRunConfig {
            path: paths.config(),
            source,
        })?;
    super::run::config_overrides(&args.stages, false).apply(&mut config);
    let work_dir = checkpoint
        .context_values
        .get("internal.work_dir")
        .and_then(serde_json::Value::as_str)
        .map(PathBuf::from);
    let base = environment_options(
        paths.graph(),
        config,
        home,
        args.stages.model.clone(),
        args.stages.provider.clone(),
    )?;
    let options = fabro_engine::run::RunOptions {
        goal: Some(manifest.goal),
        dry_run: manifest.dry_run,
        auto_approve: args.stages.auto_approve,
        answers: parse_answers(&args.stages.answers)?,
        run_id: Some(run_id),
        parent_run_id: manifest.parent_run_id,
        work_dir,
        ..base
    };
    let mut options = options;
    if args.detached_worker {
        let run_id = options.run_id.as_deref().unwrap_or_default();
        options.interviewer = Some(detached_interviewer(&options.fabro_home, run_id));
    }
    let catalog = catalog_for(&options);
    let prepared = prepare_resume(options, checkpoint, lock, &FsLoader, &catalog);
    if !args.detach {
        return execute(prepared, args.json, output);
    }
    // Refusals are reported here, before anything runs in the background.
    let prepared = match prepared {
        Ok(prepared) => prepared,
        Err(error) => return execute(Err(error), args.json, output),
    };
    let mut worker_args: Vec<std::ffi::OsString> = std::env::args_os()
        .skip(1)
        .filter(|arg| arg != "--detach")
        .collect();
    worker_args.push("--detached-worker".into());
    // The worker takes the run lock itself, so this process lets go of it first.
    let (run_id, run_dir) = (
        prepared.run_id().to_owned(),
        prepared.run_dir().to_path_buf(),
    );
    drop(prepared);
    detach(&run_id, &run_dir, worker_args, output)
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

/// Whether the repository of the current directory has metadata of run `run_id`.
fn has_metadata(run_id: &str) -> Result<bool, CliError> {
    let Some(history) = current_history() else {
        return Ok(false);
    };
    history
        .metadata_tip(run_id)
        .map(|tip| tip.is_some())
        .map_err(CliError::Git)
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

/// SPEC 8.7 step 2: a run without a run directory whose metadata is in the repository of
/// the current directory gets its run directory back from the newest complete metadata
/// commit: `manifest.json` (naming this repository), `graph.fabro`, `children/` and
/// `config.json`. `Ok(false)` when the repository has no such metadata.
fn recreate_run_dir(run_id: &str, paths: &RunPaths) -> Result<bool, CliError> {
    let Some(history) = current_history() else {
        return Ok(false);
    };
    let git_error = CliError::Git;
    if history.metadata_tip(run_id).map_err(git_error)?.is_none() {
        return Ok(false);
    }
    let sha = history
        .newest_complete_metadata(run_id)
        .map_err(git_error)?
        .ok_or_else(|| {
            CliError::Usage(format!(
                "run {run_id} has no complete checkpoint in the repository's metadata"
            ))
        })?;
    let read = |name: &str| -> Result<Vec<u8>, CliError> {
        history
            .read_file(&sha, name)
            .map_err(git_error)?
            .ok_or_else(|| {
                CliError::Usage(format!(
                    "metadata commit {sha} of run {run_id} has no {name}"
                ))
            })
    };
    let mut manifest: Manifest =
        serde_json::from_slice(&read(fabro_engine::run_dir::MANIFEST_FILE)?).map_err(|source| {
            CliError::InvalidMetadataManifest {
                sha: sha.clone(),
                source,
            }
        })?;
    // The run continues in this repository, wherever the original run was.
    if let Some(work_dir) = history.work_dir() {
        let root = work_dir
            .canonicalize()
            .unwrap_or_else(|_| work_dir.to_path_buf());
        manifest.repo_root = Some(root.display().to_string());
    }
    let graph = read("graph.fabro")?;
    let config = read("config.json")?;
    let children = history.read_dir(&sha, "children").map_err(git_error)?;
    let run_dir = paths.run_dir();
    let mut files = vec![(paths.graph(), graph), (paths.config(), config)];
    for (relative, bytes) in children {
        // Paths come from a tree the run wrote; anything that would leave the run
        // directory is not one of its children.
        let relative = Path::new(&relative);
        if relative
            .components()
            .any(|component| !matches!(component, std::path::Component::Normal(_)))
        {
            continue;
        }
        files.push((run_dir.join(relative), bytes));
    }
    for (path, bytes) in &files {
        if let Some(parent) = path.parent() {
            #[expect(
                clippy::disallowed_methods,
                reason = "the error is wrapped with the path right here"
            )]
            std::fs::create_dir_all(parent)
                .map_err(|error| CliError::io("cannot create", parent, error))?;
        }
        write_file(path, bytes)?;
    }
    // The manifest goes last: a run directory with a manifest is a complete one.
    write_json_atomic(&paths.manifest(), &manifest)
        .map_err(|error| CliError::io("cannot write", paths.manifest(), error))?;
    Ok(true)
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
