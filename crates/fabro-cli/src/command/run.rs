//! `fabro run WORKFLOW …` (SPEC 12.1): validate, execute, report, exit 0 / 3 / 1 / 130.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fabro_engine::configuration::{self, ConfigOverrides, ConfigSources, FsConfigReader};
use fabro_engine::{
    start, ErrorKind, EventSink, Interviewer, Overrides, PreparedRun, RunEnd, RunError, RunOrigin,
    StartRequest, StopCause, StoreInterviewer, Stores,
};
use fabro_llm::Provider;
use tokio_util::sync::CancellationToken;

use crate::args::{RunArgs, StageArgs};
use crate::console::ConsoleInterviewer;
use crate::error::{CliError, Status};
use crate::loader::{config_error, fabro_home, resolve_workflow, FsLoader};
use crate::output::Output;
use crate::progress::{JsonSink, ProgressSink};
use crate::report::{render_diagnostics, SourceView, Style};

pub(crate) fn run(args: &RunArgs, output: &mut Output) -> Result<Status, CliError> {
    if args.priority.is_some() {
        return Err(CliError::Usage(
            "--priority orders a server's queue; use it with --server".to_owned(),
        ));
    }
    let home = fabro_home();
    // With `--detach`, the id is allocated here, so that it can be printed at once.
    let mut run_id = args.run_id.clone();
    if args.detach {
        run_id.get_or_insert_with(fabro_engine::new_run_id);
    }
    let interviewer = if args.detached_worker {
        // SPEC 17.4: `--detach` always passes the worker its run id.
        Some(detached_interviewer(
            &home,
            run_id.as_deref().unwrap_or_default(),
        ))
    } else {
        console_interviewer()
    };
    let request = start_request(args, home.clone(), run_id.clone(), interviewer)?;
    let prepared = start(Stores::local(&home), request);
    if !args.detach {
        return execute(prepared, args.json, output);
    }
    let prepared = match prepared {
        Ok(prepared) => prepared,
        Err(error) => return report_prepare_error(error, output),
    };
    detach(prepared, allocated_id(args.run_id.as_ref(), run_id), output)
}

/// `--run-id ID` for a detached worker when this process allocated `ID` (SPEC 17.4:
/// the worker always gets its run id), nothing when the user named it.
pub(crate) fn allocated_id(named: Option<&String>, run_id: Option<String>) -> Vec<OsString> {
    match (named, run_id) {
        (None, Some(run_id)) => vec!["--run-id".into(), run_id.into()],
        _ => Vec::new(),
    }
}

/// The overrides `fabro resume` and `fabro fork` take from their stage flags; the run
/// they continue keeps its recorded configuration otherwise.
pub(crate) fn stage_overrides(
    stages: &StageArgs,
    interviewer: Option<Arc<dyn Interviewer>>,
) -> Result<Overrides, CliError> {
    Ok(Overrides {
        model: stages.model.clone(),
        provider: stages.provider.clone(),
        auto_approve: stages.auto_approve,
        answers: parse_answers(&stages.answers)?,
        limits: config_overrides(stages, false),
        interviewer,
    })
}

/// Executes `prepared` here, or with `detach_flag` hands it to a detached worker given
/// `extra` arguments; a refusal is reported here, before anything runs in the background.
pub(crate) fn execute_or_detach(
    prepared: Result<PreparedRun, RunError>,
    detach_flag: bool,
    json: bool,
    extra: Vec<OsString>,
    output: &mut Output,
) -> Result<Status, CliError> {
    if !detach_flag {
        return execute(prepared, json, output);
    }
    match prepared {
        Ok(prepared) => detach(prepared, extra, output),
        Err(error) => execute(Err(error), json, output),
    }
}

/// Refuses a `--model` catalog alias of another built-in provider than `--provider`
/// (SPEC 17.6) before anything is created. `--provider simulated` takes any model: it
/// simulates the model named (17.3). Whether `--provider` names a provider at all
/// depends on the configuration (presets and providers configured by name, SPEC
/// 10.7): the engine checks that where the run starts, locally or in a server.
pub(crate) fn check_model_flags(stages: &StageArgs) -> Result<(), CliError> {
    let Some(name) = stages.provider.as_deref() else {
        return Ok(());
    };
    let Some(provider) = Provider::parse(name) else {
        return Ok(());
    };
    let Some(model) = stages.model.as_deref() else {
        return Ok(());
    };
    match fabro_llm::catalog::find(model) {
        Some(info)
            if info.id != model
                && info.provider != provider
                && provider != Provider::Simulated =>
        {
            Err(CliError::Usage(format!(
                "--model {model} is the catalog alias of {}, a model of provider {}, but --provider is {provider}; use a model of {provider} or drop one of the flags",
                info.id, info.provider
            )))
        }
        _ => Ok(()),
    }
}

/// The human gates of a detached run wait for `fabro answer` (SPEC 17.4).
pub(crate) fn detached_interviewer(fabro_home: &Path, run_id: &str) -> Arc<dyn Interviewer> {
    let store = Arc::new(fabro_engine::FsRunStore::new(fabro_home));
    Arc::new(StoreInterviewer::new(
        store,
        &fabro_engine::RunId::from(run_id),
    ))
}

/// The console, when stdin and stderr are terminals (SPEC 5.5 source 3); otherwise
/// nothing, and a gate without `--answer` or `--auto-approve` fails closed.
pub(crate) fn console_interviewer() -> Option<Arc<dyn Interviewer>> {
    let terminal = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    terminal.then(|| Arc::new(ConsoleInterviewer::new()) as Arc<dyn Interviewer>)
}

/// Hands `prepared` to a worker: this command again in the background, without
/// `--detach`, with `--detached-worker` and `extra`, in a process group of its own (so a
/// Ctrl-C at the terminal does not reach it), with its output in `worker.log`; prints
/// the run id and directory (SPEC 12.1). The worker takes the run lock itself, so this
/// process lets go of the prepared run first.
fn detach(
    prepared: PreparedRun,
    extra: Vec<OsString>,
    output: &mut Output,
) -> Result<Status, CliError> {
    use std::os::unix::process::CommandExt;

    let mut worker_args: Vec<OsString> = std::env::args_os()
        .skip(1)
        .filter(|arg| arg != "--detach")
        .collect();
    worker_args.push("--detached-worker".into());
    worker_args.extend(extra);
    let (run_id, run_dir) = (
        prepared.run_id().to_owned(),
        prepared.run_dir().to_path_buf(),
    );
    drop(prepared);
    let (run_id, run_dir) = (run_id.as_str(), run_dir.as_path());

    let log_path = run_dir.join("worker.log");
    let log = fs_err::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|error| CliError::Usage(error.to_string()))?;
    let log_err = log
        .file()
        .try_clone()
        .map_err(|source| CliError::io("cannot open", &log_path, source))?;
    let program = std::env::current_exe()
        .map_err(|source| CliError::io("cannot locate", "the fabro executable", source))?;
    let mut worker = std::process::Command::new(program)
        .args(worker_args)
        // This process took its credentials out of its environment at start-up; the
        // worker needs them (and takes them out of its own in turn).
        .envs(fabro_llm::redact::secrets().variables())
        .stdin(std::process::Stdio::null())
        .stdout(log.into_parts().0)
        .stderr(log_err)
        .process_group(0)
        .spawn()
        .map_err(|source| {
            CliError::io("cannot start the background worker for", run_dir, source)
        })?;
    wait_until_registered(&mut worker, run_dir, &log_path)?;
    output.out(&format!(
        "run_id: {run_id}\nrun_dir: {}\n",
        run_dir.display()
    ));
    Ok(Status::Success)
}

/// How long `--detach` waits for the worker to register the run.
const REGISTER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Waits until the worker has written the run's `manifest.json`, from which every
/// command resolves the run id, so that the id printed next can be used at once. A
/// worker that exits before that failed to start the run: its log says why. After
/// [`REGISTER_TIMEOUT`] (a slow git setup) the id is printed anyway.
fn wait_until_registered(
    worker: &mut std::process::Child,
    run_dir: &std::path::Path,
    log_path: &std::path::Path,
) -> Result<(), CliError> {
    let manifest = run_dir.join(fabro_engine::local::MANIFEST_FILE);
    let deadline = std::time::Instant::now() + REGISTER_TIMEOUT;
    while !manifest.exists() && std::time::Instant::now() < deadline {
        if let Ok(Some(status)) = worker.try_wait() {
            if manifest.exists() {
                break;
            }
            let log = fs_err::read_to_string(log_path).unwrap_or_default();
            return Err(CliError::Usage(format!(
                "the background worker stopped ({status}) before the run started:\n{}",
                log.trim_end()
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    Ok(())
}

/// Prints why a run could not start. The one mapping of the engine's error kinds to
/// exit codes: workflow diagnostics exit 1, every other kind exits 2 (SPEC 12.2).
fn report_prepare_error(error: RunError, output: &mut Output) -> Result<Status, CliError> {
    match error.kind() {
        ErrorKind::InvalidWorkflow => render_invalid_workflow(error, output),
        ErrorKind::Unfit
        | ErrorKind::Usage
        | ErrorKind::NotFound
        | ErrorKind::Conflict
        | ErrorKind::Storage
        | ErrorKind::Internal => Err(CliError::from(error)),
    }
}

/// Prints the diagnostics of an invalid workflow (exit 1).
fn render_invalid_workflow(error: RunError, output: &mut Output) -> Result<Status, CliError> {
    match error {
        RunError::InvalidWorkflow {
            path,
            text,
            checked,
        } => {
            let name = path.display().to_string();
            let source = SourceView::new(&name, &text);
            let style = Style {
                snippet: output.stderr_is_terminal(),
                color: output.stderr_color(),
            };
            output.err(&render_diagnostics(&source, &checked.diagnostics, style));
            Ok(Status::Failure)
        }
        error => Err(CliError::from(error)),
    }
}

/// Reports a prepared run's problems or executes it: the shared second half of `run` and
/// `resume` (SPEC 12.1).
pub(crate) fn execute(
    prepared: Result<PreparedRun, RunError>,
    json: bool,
    output: &mut Output,
) -> Result<Status, CliError> {
    let prepared = match prepared {
        Ok(prepared) => prepared,
        Err(error) => return report_prepare_error(error, output),
    };
    for warning in prepared.warnings() {
        output.err(&format!("{warning}\n"));
    }
    if !json {
        output.out(&format!(
            "run_id: {}\nrun_dir: {}\n",
            prepared.run_id(),
            prepared.run_dir().display()
        ));
    }
    // SPEC 17.5: the live line only on a terminal that takes colour; plain lines elsewhere.
    let progress = (!json).then(|| Arc::new(ProgressSink::new(output.stderr_color())));
    let sink: Arc<dyn EventSink> = match &progress {
        Some(progress) => progress.clone(),
        None => Arc::new(JsonSink::new()),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(CliError::Runtime)?;
    // The run is a task of the runtime, not the future `block_on` drives: a worker
    // thread that polls it also polls the I/O and signal drivers, so a child's exit or a
    // pipe's end wakes it without a hand-off to this thread (docs/benchmarks.md).
    let result = runtime.block_on(async {
        let cancel = CancellationToken::new();
        let signals = tokio::spawn(watch_signals(cancel.clone()));
        let result = tokio::spawn(prepared.execute(cancel, vec![sink])).await;
        signals.abort();
        result
    });
    // The live line stops before anything else is printed, whatever the run's end.
    let summary = progress.as_ref().map(|progress| progress.finish());
    let report = match result {
        Ok(result) => result.map_err(CliError::from)?,
        // A panic inside the run is a bug: it ends the process as it would have
        // without the task around it.
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(error) => return Err(CliError::Aborted(error)),
    };
    if let Some(summary) = summary {
        output.err(&format!("{summary}\n"));
        let mut text = format!("status: {}\n", report.status);
        if let Some(reason) = &report.reason {
            text.push_str(&format!("reason: {reason}\n"));
        }
        output.out(&text);
        if matches!(report.end, RunEnd::Canceled { .. }) {
            // SPEC 17.5: every cancelled run can go on.
            output.err(&format!("resume with: fabro resume {}\n", report.run_id));
        }
    }
    Ok(match &report.end {
        RunEnd::Completed { status } if *status == fabro_language::StageStatus::Success => {
            Status::Success
        }
        RunEnd::Completed { .. } => Status::PartialSuccess,
        RunEnd::Failed { .. } => Status::Failure,
        RunEnd::Canceled {
            cause: StopCause::User,
            ..
        } => Status::Canceled,
        RunEnd::Canceled { .. } => Status::Failure,
    })
}

/// First SIGINT or SIGTERM cancels the run cleanly; a second one exits at once with 130
/// (SPEC 4.8).
async fn watch_signals(cancel: CancellationToken) {
    let Ok(mut terminate) =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    else {
        return;
    };
    let Ok(mut interrupt) =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
    else {
        return;
    };
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    cancel.cancel();
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    force_exit();
}

#[expect(
    clippy::exit,
    reason = "a second signal must end the process at once, without further writes (SPEC 4.8)"
)]
fn force_exit() {
    std::process::exit(130);
}

/// What `fabro run` asks of the engine: the workflow and its configuration layers
/// (SPEC 12.3: `--config` above a TOML WORKFLOW; the project layer is searched from the
/// workflow's absolute directory) and the flags.
fn start_request(
    args: &RunArgs,
    fabro_home: PathBuf,
    run_id: Option<String>,
    interviewer: Option<Arc<dyn Interviewer>>,
) -> Result<StartRequest<'static>, CliError> {
    let (workflow_path, workflow_config) = resolve_workflow(&args.workflow)?;
    let sources = ConfigSources {
        root: fabro_home.clone(),
        workflow: std::path::absolute(&workflow_path).unwrap_or_else(|_| workflow_path.clone()),
        run_configs: args.config.iter().cloned().chain(workflow_config).collect(),
    };
    let config = configuration::load(&sources, &FsConfigReader).map_err(config_error)?;
    let answers = parse_answers(&args.stages.answers)?;
    let mut vars = BTreeMap::new();
    for var in &args.vars {
        let (key, value) = split_pair(var, "--var", "K=V")?;
        vars.insert(key, value);
    }
    Ok(StartRequest {
        fabro_home,
        workflow_path,
        loader: &FsLoader,
        config,
        goal: args.goal.clone(),
        vars,
        dry_run: args.dry_run,
        run_id,
        work_dir: None,
        detached_worker: args.detached_worker,
        origin: RunOrigin::Cli,
        repository: None,
        overrides: Overrides {
            model: args.stages.model.clone(),
            provider: args.stages.provider.clone(),
            auto_approve: args.stages.auto_approve,
            answers,
            limits: config_overrides(&args.stages, args.no_in_place),
            interviewer,
        },
    })
}

/// `--max-stages`, `--max-tokens`, `--max-cost`, `--max-duration` and `--no-in-place`
/// as overrides of the configuration (SPEC 17.1); the run records the result in
/// `config.json`.
pub(crate) fn config_overrides(stages: &StageArgs, no_in_place: bool) -> ConfigOverrides {
    ConfigOverrides {
        max_stages: stages.max_stages,
        max_tokens: stages.max_tokens,
        max_cost: stages.max_cost,
        max_duration: stages.max_duration.clone(),
        refuse_dirty_worktree: no_in_place,
    }
}

/// `--answer NODE=LABEL` values (SPEC 12.1).
pub(crate) fn parse_answers(answers: &[String]) -> Result<Vec<(String, String)>, CliError> {
    answers
        .iter()
        .map(|answer| split_pair(answer, "--answer", "NODE=LABEL"))
        .collect()
}

fn split_pair(text: &str, flag: &str, form: &str) -> Result<(String, String), CliError> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(CliError::Usage(format!(
            "{flag} expects {form}, found '{text}'"
        ))),
    }
}
