//! `fabro run WORKFLOW …` (SPEC 12.1): validate, execute, report, exit 0 / 3 / 1 / 130.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

use fabro_engine::config::{self, ConfigSources, FsConfigReader};
use fabro_engine::event::EventSink;
use fabro_engine::llm_target::{LlmDefaults, ProviderSettings};
use fabro_engine::run::{prepare, RunError, RunOptions};
use fabro_engine::sandbox::SandboxEnv;
use fabro_engine::traversal::RunEnd;
use tokio_util::sync::CancellationToken;

use crate::args::RunArgs;
use crate::error::{CliError, Status};
use crate::loader::{config_error, fabro_home, resolve_workflow, Catalog, FsLoader};
use crate::output::Output;
use crate::progress::{JsonSink, ProgressSink};
use crate::report::{render_diagnostics, SourceView, Style};

pub(crate) fn run(args: &RunArgs, output: &mut Output) -> Result<Status, CliError> {
    let options = options(args)?;
    let prepared = match prepare(options, &FsLoader, &Catalog) {
        Ok(prepared) => prepared,
        Err(RunError::InvalidWorkflow {
            path,
            text,
            checked,
        }) => {
            let name = path.display().to_string();
            let source = SourceView::new(&name, &text);
            let style = Style {
                snippet: output.stderr_is_terminal(),
                color: output.stderr_color(),
            };
            output.err(&render_diagnostics(&source, &checked.diagnostics, style));
            return Ok(Status::Failure);
        }
        Err(error) => return Err(cli_error(error)),
    };
    for warning in prepared.warnings() {
        output.err(&format!("{warning}\n"));
    }
    if !args.json {
        output.out(&format!(
            "run_id: {}\nrun_dir: {}\n",
            prepared.run_id(),
            prepared.run_dir().display()
        ));
    }
    let sink: Arc<dyn EventSink> = if args.json {
        Arc::new(JsonSink::new())
    } else {
        Arc::new(ProgressSink::new(output.stderr_color()))
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| CliError::Usage(format!("cannot start the async runtime: {error}")))?;
    let result = runtime.block_on(async {
        let cancel = CancellationToken::new();
        let signals = tokio::spawn(watch_signals(cancel.clone()));
        let result = prepared.execute(cancel, vec![sink]).await;
        signals.abort();
        result
    });
    let report = result.map_err(cli_error)?;
    if !args.json {
        let mut text = format!("status: {}\n", report.status);
        if let Some(reason) = &report.reason {
            text.push_str(&format!("reason: {reason}\n"));
        }
        output.out(&text);
    }
    Ok(match &report.end {
        RunEnd::Completed { status } if *status == fabro_language::StageStatus::Success => {
            Status::Success
        }
        RunEnd::Completed { .. } => Status::PartialSuccess,
        RunEnd::Failed { .. } => Status::Failure,
        RunEnd::Canceled { stalled: true, .. } => Status::Failure,
        RunEnd::Canceled { stalled: false, .. } => Status::Canceled,
    })
}

/// A run that could not start or finish: configuration and I/O problems exit 2.
fn cli_error(error: RunError) -> CliError {
    match error {
        RunError::Configuration(message) => CliError::Usage(message),
        RunError::Io {
            action,
            path,
            source,
        } => CliError::io(action, path, source),
        RunError::InvalidWorkflow { path, .. } => {
            CliError::Usage(format!("workflow {} has errors", path.display()))
        }
    }
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

fn options(args: &RunArgs) -> Result<RunOptions, CliError> {
    let (workflow_path, workflow_config) = resolve_workflow(&args.workflow)?;
    let fabro_home = fabro_home();
    // SPEC 12.3: `--config` above a TOML WORKFLOW; the project layer is searched from the
    // workflow's absolute directory.
    let sources = ConfigSources {
        root: fabro_home.clone(),
        workflow: std::path::absolute(&workflow_path).unwrap_or_else(|_| workflow_path.clone()),
        run_configs: args.config.iter().cloned().chain(workflow_config).collect(),
    };
    let config = config::load(&sources, &FsConfigReader).map_err(config_error)?;
    let answers = args
        .answers
        .iter()
        .map(|answer| split_pair(answer, "--answer", "NODE=LABEL"))
        .collect::<Result<Vec<_>, _>>()?;
    let mut vars = config.run.vars.clone();
    for var in &args.vars {
        let (key, value) = split_pair(var, "--var", "K=V")?;
        vars.insert(key, value);
    }
    let env = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
    // SPEC 12.4: keys and base URLs from the environment, the rest from `[llm]`.
    let providers = ProviderSettings::from_env(&env, &config.llm);
    let credentials = providers.credentials();
    let random_seed = match env("FABRO_RANDOM_SEED") {
        Some(seed) => Some(seed.parse().map_err(|_| {
            CliError::Usage(format!(
                "FABRO_RANDOM_SEED must be an unsigned integer, found '{seed}'"
            ))
        })?),
        None => None,
    };
    Ok(RunOptions {
        workflow_path,
        goal: args.goal.clone(),
        dry_run: args.dry_run,
        auto_approve: args.auto_approve,
        answers,
        vars,
        run_id: args.run_id.clone(),
        fabro_home,
        console: std::io::stdin().is_terminal() && std::io::stderr().is_terminal(),
        llm: LlmDefaults {
            cli_model: args.model.clone(),
            cli_provider: args.provider.clone(),
            env_model: env("FABRO_MODEL"),
            env_provider: env("FABRO_PROVIDER"),
            config_model: config.llm.model.clone(),
            config_provider: config.llm.provider.clone(),
            credentials,
            providers,
        },
        simulated_responses: env("FABRO_SIMULATED_RESPONSES")
            .map(PathBuf::from)
            .or_else(|| config.llm.simulated_responses.clone()),
        random_seed,
        sandbox_env: SandboxEnv::new(
            std::env::vars_os(),
            config
                .sandbox
                .env_passthrough
                .as_deref()
                .unwrap_or_default(),
            &config.sandbox.env,
        ),
        config,
        parent_run_id: None,
        fallback_goal: None,
        work_dir: None,
    })
}

fn split_pair(text: &str, flag: &str, form: &str) -> Result<(String, String), CliError> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(CliError::Usage(format!(
            "{flag} expects {form}, found '{text}'"
        ))),
    }
}
