//! `fabro run WORKFLOW --server URL` (or `FABRO_SERVER`, SPEC 14.2): the run executes
//! in a `fabro server`; this process prints the same `run_id`/`run_dir` and `status`
//! lines, drives the same progress view from the server's event stream, and exits with
//! the run's code. The first Ctrl-C cancels the remote run, a second one detaches.

mod branching;
mod stream;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

pub(crate) use branching::{fork, rewind};
use fabro_api::client::{Client, ClientError, RunQuery};
use fabro_api::{
    AnswerLabels, AnswerRequest, ConfigFile, ResumeRequest, RunDocument, StartRequest,
};
use fabro_engine::configuration::CostLimit;
use fabro_engine::local::{InspectView, RunView};
use fabro_engine::{EventEnvelope, EventSink, StopCause};
use serde_json::Value;
use stream::stream_lines;

use crate::args::RunArgs;
use crate::command::events::format_event;
use crate::command::run::parse_answers;
use crate::error::{CliError, Status};
use crate::loader::fabro_home;
use crate::output::Output;
use crate::progress::{JsonSink, ProgressSink};

/// `--server`, else a non-empty `FABRO_SERVER`, without a trailing slash.
pub(crate) fn server_url(flag: Option<&str>) -> Option<String> {
    flag.map(str::to_owned)
        .or_else(|| std::env::var("FABRO_SERVER").ok())
        .filter(|url| !url.is_empty())
        .map(|url| url.trim_end_matches('/').to_owned())
}

/// The server token: `FABRO_SERVER_TOKEN`, else `{root}/server.token` for a loopback
/// server (SPEC 14.1).
fn token(url: &str) -> Option<String> {
    fabro_llm::redact::secrets()
        .get_str("FABRO_SERVER_TOKEN")
        .map(str::to_owned)
        .or_else(|| std::env::var("FABRO_SERVER_TOKEN").ok())
        .filter(|token| !token.is_empty())
        .or_else(|| {
            let host = url.split("://").nth(1)?.split(['/', ':']).next()?;
            matches!(host, "127.0.0.1" | "localhost" | "[::1]")
                .then(|| fs_err::read_to_string(fabro_home().join("server.token")).ok())
                .flatten()
                .map(|token| token.trim().to_owned())
        })
}

/// A refused or failed request as the CLI reports it (exit 2, as for an unknown run
/// locally): the API's message, else what went wrong.
fn refused(error: ClientError) -> CliError {
    CliError::Usage(match &error {
        ClientError::Unreachable { url, source } => format!(
            "cannot reach the fabro server at {url}: {}",
            fabro_engine::error_chain(source)
        ),
        ClientError::Refused { .. } => error
            .api_message()
            .unwrap_or("the server refused the request")
            .to_owned(),
        ClientError::Undecodable { url, source } => {
            format!("the fabro server at {url} sent a document this fabro cannot read: {source}")
        }
    })
}

fn block_on<T>(
    work: impl std::future::Future<Output = Result<T, CliError>>,
) -> Result<T, CliError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(CliError::Runtime)?
        .block_on(work)
}

fn remote(url: &str) -> Client {
    Client::new(url, token(url))
}

/// `fabro cancel RUN --server URL`: exit 0 once the run has stopped canceled, 2 when it
/// is not running or queued, or unknown (SPEC 14.2).
pub(crate) fn cancel(url: &str, run: &str, output: &mut Output) -> Result<Status, CliError> {
    let remote = remote(url);
    block_on(async {
        let run_id = remote.cancel(run).await.map_err(refused)?.run_id;
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let document = remote.peek_run(&run_id).await.map_err(refused)?;
            match document.as_ref().map(|document| document.status.as_str()) {
                Some("canceled") => break,
                Some("running" | "queued") if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                other => {
                    return Err(CliError::Usage(format!(
                        "run {run_id} ended with status {} before it was cancelled",
                        other.unwrap_or("unknown")
                    )))
                }
            }
        }
        output.out(&format!("canceled run {run_id}\n"));
        Ok(Status::Success)
    })
}

/// `fabro answer RUN LABEL [--text T] --server URL`: answers the run's pending question
/// through the API; exit 2 when none is pending or nothing matches.
pub(crate) fn answer(
    url: &str,
    args: &crate::args::AnswerArgs,
    output: &mut Output,
) -> Result<Status, CliError> {
    let remote = remote(url);
    block_on(async {
        let run = &args.run;
        let questions = remote.questions(run).await.map_err(refused)?.questions;
        let Some(question) = questions.into_iter().next() else {
            return Err(CliError::Usage(format!(
                "run {run} has no pending human question"
            )));
        };
        let request = AnswerRequest {
            key: None,
            label: Some(args.label.clone()),
            text: args.text.clone(),
        };
        let answered = remote
            .answer(run, &question.question_id, &request)
            .await
            .map_err(refused)?;
        let key = answered.selected_key;
        let described = match &args.text {
            Some(text) => format!("\"{text}\""),
            None => {
                let display = question
                    .options
                    .iter()
                    .find(|option| option.key == key)
                    .map_or("", |option| option.display_label.as_str());
                format!("[{key}] {display}")
            }
        };
        output.out(&format!("{} → {described}\n", question.node_id));
        Ok(Status::Success)
    })
}

/// `fabro steer RUN TEXT [--next] --server URL` (SPEC 20.1): steers the run's agent
/// through the API; exit 2 when the server refuses (no agent stage running, a cli
/// backend, a run that is not running).
pub(crate) fn steer(
    url: &str,
    args: &crate::args::SteerArgs,
    output: &mut Output,
) -> Result<Status, CliError> {
    let remote = remote(url);
    block_on(async {
        let request = fabro_api::SteerRequest {
            text: args.text.clone(),
            next: args.next,
        };
        let accepted = remote.steer(&args.run, &request).await.map_err(refused)?;
        let steered = fabro_engine::Steered {
            node_id: accepted.node_id,
        };
        output.out(&crate::command::steer::accepted(&accepted.run_id, &steered));
        Ok(Status::Success)
    })
}

/// `fabro run WORKFLOW --server URL`: every flag of `run` goes into the start request
/// (`--config` as the file's text, since the server may not see the client's files), or
/// is refused.
pub(crate) fn run(url: &str, args: &RunArgs, output: &mut Output) -> Result<Status, CliError> {
    if args.detached_worker {
        return Err(not_remote("--detached-worker"));
    }
    let current = std::env::current_dir()
        .map_err(|source| CliError::io("cannot read", "the current directory", source))?;
    let workflow = std::path::absolute(&args.workflow).unwrap_or_else(|_| args.workflow.clone());
    let config = match &args.config {
        Some(path) => Some(client_config(path)?),
        None => None,
    };
    let answers = answer_labels(&args.stages.answers)?;
    let mut vars = BTreeMap::new();
    for var in &args.vars {
        let (key, value) = var
            .split_once('=')
            .filter(|(key, _)| !key.is_empty())
            .ok_or_else(|| CliError::Usage(format!("--var expects K=V, found '{var}'")))?;
        vars.insert(key.to_owned(), value.to_owned());
    }
    // SPEC 18.3: from a checkout with an `origin`, the run works on that repository.
    let (workflow_field, work_dir, repository) = match repository_of(&current, &workflow)? {
        Some((relative, repository)) => (relative, None, Some(repository)),
        None => (
            workflow.display().to_string(),
            Some(current.display().to_string()),
            None,
        ),
    };
    let request = StartRequest {
        workflow: Some(workflow_field),
        source: None,
        work_dir,
        goal: args.goal.clone(),
        vars,
        model: args.stages.model.clone(),
        provider: args.stages.provider.clone(),
        auto_approve: args.stages.auto_approve,
        answers,
        dry_run: args.dry_run,
        run_id: args.run_id.clone(),
        config,
        no_in_place: args.no_in_place,
        max_stages: args.stages.max_stages,
        max_tokens: args.stages.max_tokens,
        max_cost_usd: args.stages.max_cost.map(CostLimit::usd),
        max_duration: args.stages.max_duration.clone(),
        priority: args.priority,
        repository,
    };
    let remote = remote(url);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(CliError::Runtime)?;
    runtime.block_on(async {
        let signals = if args.detach { None } else { Signals::catch() };
        let Some(run_id) = start_run(&remote, &request, output).await? else {
            return Ok(Status::Failure);
        };
        if args.detach {
            return print_detached(&remote, &run_id, output).await;
        }
        let started = Started {
            run_id: &run_id,
            after: None,
            workflow: Some(&workflow),
        };
        follow(&remote, started, args.json, signals, output).await
    })
}

/// The repository a run from the checkout around `current` works on (SPEC 18.3):
/// `origin`'s URL at the commit of `HEAD`, and `workflow` relative to the checkout's root;
/// `None` outside a checkout with an `origin`. Exit 2 when the tree has uncommitted
/// changes or `HEAD` is not on `origin`.
fn repository_of(
    current: &std::path::Path,
    workflow: &std::path::Path,
) -> Result<Option<(String, fabro_api::RepositoryRef)>, CliError> {
    use fabro_engine::repository::{checkout_origin, CheckoutOrigin};
    let origin = checkout_origin(current)
        .map_err(|error| CliError::Usage(fabro_engine::error_chain(&error)))?;
    let (url, head, root) = match origin {
        CheckoutOrigin::None => return Ok(None),
        CheckoutOrigin::Dirty => {
            return Err(CliError::Usage(
                "the working tree has uncommitted changes; commit and push them to run on a \
                 server"
                    .to_owned(),
            ))
        }
        CheckoutOrigin::Unpushed { head } => {
            return Err(CliError::Usage(format!(
                "HEAD {head} is not pushed to origin"
            )))
        }
        CheckoutOrigin::WithCredentials => {
            return Err(CliError::Usage(
                "origin's URL carries credentials, which a server never receives; set it \
                 without them and configure a credential helper or SSH key on the workers"
                    .to_owned(),
            ))
        }
        CheckoutOrigin::Pushed { url, head, root } => (url, head, root),
    };
    let resolved = fs_err::canonicalize(workflow)
        .map_err(|source| CliError::io("cannot read", workflow, source))?;
    let root = fs_err::canonicalize(&root).unwrap_or(root);
    let relative = resolved.strip_prefix(&root).map_err(|_| {
        CliError::Usage(format!(
            "{} is outside the checkout {}, which the server runs from origin",
            workflow.display(),
            root.display()
        ))
    })?;
    Ok(Some((
        relative.display().to_string(),
        fabro_api::RepositoryRef {
            url,
            reference: Some(head),
        },
    )))
}

/// A flag that has no meaning for a run in a server.
fn not_remote(flag: &str) -> CliError {
    CliError::Usage(format!("{flag} cannot be used with --server"))
}

/// The `--config` file for the server: read and checked here as `fabro run` checks it
/// (the same messages, exit 2), sent with its absolute path.
fn client_config(path: &std::path::Path) -> Result<ConfigFile, CliError> {
    use fabro_engine::configuration::ConfigReader;
    let text = fabro_engine::configuration::FsConfigReader
        .read(path)
        .map_err(|source| CliError::io("cannot read configuration", path, source))?;
    fabro_engine::configuration::parse(&text, path).map_err(CliError::Config)?;
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    Ok(ConfigFile {
        path: absolute.display().to_string(),
        text,
    })
}

/// `--answer NODE=LABEL` flags as the request's `answers`: per node, in order.
fn answer_labels(answers: &[String]) -> Result<BTreeMap<String, AnswerLabels>, CliError> {
    let mut grouped: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (node, label) in parse_answers(answers)? {
        grouped.entry(node).or_default().push(label);
    }
    Ok(grouped
        .into_iter()
        .map(|(node, labels)| (node, AnswerLabels::from_labels(labels)))
        .collect())
}

/// `POST /api/v1/runs`: the new run's id, or `None` after printing an invalid
/// workflow's diagnostics (exit 1, as locally).
async fn start_run(
    remote: &Client,
    request: &StartRequest,
    output: &mut Output,
) -> Result<Option<String>, CliError> {
    match remote.start(request).await {
        Ok(started) => Ok(Some(started.run_id)),
        Err(ClientError::Refused {
            status,
            body: Some(body),
            ..
        }) if status.as_u16() == 422 && body.error.diagnostics.is_some() => {
            for diagnostic in body.error.diagnostics.iter().flatten() {
                let (line, column) = diagnostic
                    .span
                    .map_or((0, 0), |span| (span.line, span.column));
                output.err(&format!(
                    "{}:{line}:{column}: {}[{}]: {}\n",
                    diagnostic.file, diagnostic.severity, diagnostic.rule, diagnostic.message,
                ));
            }
            Ok(None)
        }
        Err(error) => Err(refused(error)),
    }
}

/// What `--detach` prints once the run is started: its id and directory (exit 0).
async fn print_detached(
    remote: &Client,
    run_id: &str,
    output: &mut Output,
) -> Result<Status, CliError> {
    let document = remote.peek_run(run_id).await.map_err(refused)?;
    output.out(&format!(
        "run_id: {run_id}\nrun_dir: {}\n",
        document
            .as_ref()
            .map_or("", |document| document.run_dir.as_str())
    ));
    Ok(Status::Success)
}

/// A run a client started (or resumed) on a server, to follow.
struct Started<'a> {
    run_id: &'a str,
    /// The id of the last event before this run (or resume) started.
    after: Option<u64>,
    /// The workflow file it was started from, on the client's side.
    workflow: Option<&'a Path>,
}

/// Prints the `run_id`/`run_dir` lines, drives the progress view from the run's event
/// stream, prints the `status` lines and returns the run's exit status, as a local run.
/// `signals`: the Ctrl-C that cancels the run.
async fn follow(
    remote: &Client,
    started: Started<'_>,
    json: bool,
    signals: Option<Signals>,
    output: &mut Output,
) -> Result<Status, CliError> {
    let (run_id, after) = (started.run_id.to_owned(), started.after);
    let document = remote.peek_run(&run_id).await.map_err(refused)?;
    if !json {
        output.out(&format!(
            "run_id: {run_id}\nrun_dir: {}\n",
            document
                .as_ref()
                .map_or("", |document| document.run_dir.as_str())
        ));
    }
    let progress = (!json).then(|| Arc::new(ProgressSink::new(output.stderr_color())));
    if let (Some(progress), Some(workflow)) = (&progress, started.workflow) {
        progress.name_nodes_from(workflow);
    }
    let sink: Arc<dyn EventSink> = match &progress {
        Some(progress) => progress.clone(),
        None => Arc::new(JsonSink::new()),
    };
    let terminal = tokio::select! {
        terminal = stream_events(remote, &run_id, after, sink.as_ref()) => terminal,
        () = interrupted(remote, &run_id, signals) => {
            if let Some(progress) = &progress {
                progress.finish();
            }
            return Ok(Status::Canceled);
        }
    };
    // The live line stops before anything else is printed, as for a local run.
    let summary = progress.as_ref().map(|progress| progress.finish());
    let terminal = terminal?;
    let document = remote.peek_run(&run_id).await.map_err(refused)?;
    let run_status = document
        .as_ref()
        .map_or("fail", |document| document.status.as_str())
        .to_owned();
    let failed = terminal
        .as_ref()
        .filter(|event| event.name() == "WorkflowRunFailed")
        .map(|event| {
            let properties = event.properties();
            let text = |key: &str| {
                properties
                    .get(key)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            (text("failure_class"), text("reason"))
        });
    if let Some(summary) = summary {
        output.err(&format!("{summary}\n"));
    }
    if !json {
        let mut text = format!("status: {run_status}\n");
        if matches!(run_status.as_str(), "fail" | "canceled") {
            if let Some((_, reason)) = &failed {
                text.push_str(&format!("reason: {reason}\n"));
            }
        }
        output.out(&text);
        if run_status == "canceled" {
            output.err(&format!("resume with: fabro resume {run_id}\n"));
        }
    }
    let cause = failed
        .as_ref()
        .and_then(|(class, reason)| StopCause::from_run_failed(class, reason));
    Ok(exit_status(&run_status, cause))
}

/// The exit status of a run that ended with `run_status`, as `fabro run` maps its end
/// (SPEC 14.2): a user cancellation is 130; a budget stop, a stall timeout or a storage
/// failure leaves status `canceled` but exits 1.
fn exit_status(run_status: &str, cause: Option<StopCause>) -> Status {
    match (run_status, cause) {
        ("success", _) => Status::Success,
        ("partial_success", _) => Status::PartialSuccess,
        ("canceled", Some(StopCause::User)) => Status::Canceled,
        _ => Status::Failure,
    }
}

/// Feeds the run's events to `sink` until the stream ends; returns the terminal event.
async fn stream_events(
    remote: &Client,
    run_id: &str,
    after: Option<u64>,
    sink: &dyn EventSink,
) -> Result<Option<EventEnvelope>, CliError> {
    let mut terminal = None;
    stream_lines(remote, run_id, after, |line| {
        let Ok(envelope) = serde_json::from_str::<EventEnvelope>(line) else {
            return false;
        };
        sink.emit(&envelope);
        let ends = envelope.kind.is_terminal();
        if ends {
            terminal = Some(envelope);
        }
        ends
    })
    .await?;
    Ok(terminal)
}

/// SIGINT and SIGTERM, caught from before the run is started, so that a Ctrl-C at any
/// moment after that cancels the remote run instead of ending this process.
struct Signals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    /// Catches both signals (within a runtime); `None` when they cannot be caught.
    fn catch() -> Option<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Some(Signals {
            terminate: signal(SignalKind::terminate()).ok()?,
            interrupt: signal(SignalKind::interrupt()).ok()?,
        })
    }

    async fn next(&mut self) {
        tokio::select! { _ = self.terminate.recv() => {} _ = self.interrupt.recv() => {} }
    }
}

/// Completes on a second SIGINT or SIGTERM; the first one cancels the remote run.
async fn interrupted(remote: &Client, run_id: &str, signals: Option<Signals>) {
    let Some(mut signals) = signals else {
        return std::future::pending().await;
    };
    signals.next().await;
    let _ = remote.cancel(run_id).await;
    signals.next().await;
}

/// `fabro inspect RUN --server URL`: the server's `fabro inspect --json` document.
pub(crate) fn inspect(url: &str, run: &str) -> Result<InspectView, CliError> {
    let remote = remote(url);
    match block_on(async { remote.run(run).await.map_err(refused) })? {
        RunDocument::Inspected(document) => Ok(document.inspect),
        // Not started yet: no inspect document; told as a document that lacks its
        // fields, as before the documents were typed.
        RunDocument::Queued(summary) => {
            let error = serde_json::to_value(&summary)
                .and_then(serde_json::from_value::<InspectView>)
                .err()
                .map_or_else(
                    || "the run has not started".to_owned(),
                    |error| error.to_string(),
                );
            Err(CliError::Usage(format!(
                "the fabro server at {url} sent a document this fabro cannot read: {error}"
            )))
        }
    }
}

/// How many events one page of `GET /api/v1/runs/{id}/events` holds at most.
const EVENT_PAGE: usize = 1000;

/// How many runs one page of `GET /api/v1/runs` holds at most.
const PAGE: usize = 200;

/// `fabro runs --server URL`: the runs with one of `statuses` (all when empty), newest
/// first, at most `limit`, each with its workflow's path.
pub(crate) fn runs(
    url: &str,
    statuses: &[fabro_engine::RunStatus],
    limit: Option<usize>,
) -> Result<Vec<(RunView, String, Option<String>)>, CliError> {
    let remote = remote(url);
    let limit = limit.unwrap_or(usize::MAX);
    let statuses: Vec<&str> = statuses.iter().map(|status| status.as_str()).collect();
    block_on(async {
        let mut found = Vec::new();
        let mut before: Option<String> = None;
        while found.len() < limit {
            let query = RunQuery {
                statuses: &statuses,
                workflow: None,
                limit: Some(PAGE.min(limit - found.len())),
                before: before.as_deref(),
            };
            let page = remote.list_runs(&query).await.map_err(refused)?;
            for summary in page.runs {
                let path = summary.workflow_path.unwrap_or_default();
                let worker = summary.worker;
                let view = RunView {
                    run_id: summary.run_id,
                    workflow_name: summary.workflow_name,
                    status: summary.status,
                    // A queued run has not started yet.
                    started_at: summary.started_at.unwrap_or_default(),
                    finished_at: summary.finished_at,
                    run_dir: summary.run_dir,
                    goal: summary.goal,
                    simulated_llm: summary.simulated_llm,
                    reason: summary.reason,
                };
                found.push((view, path, worker));
            }
            before = page.next;
            if before.is_none() {
                break;
            }
        }
        Ok(found)
    })
}

/// `fabro events RUN [--follow] [--json] --server URL`: the stored events from the
/// server's event stream, formatted as locally; a running run without `--follow` is
/// read from the event pages instead, up to its newest event.
pub(crate) fn events(
    url: &str,
    args: &crate::args::EventsArgs,
    output: &mut Output,
) -> Result<Status, CliError> {
    let remote = remote(url);
    block_on(async {
        let document = remote.run_header(&args.run).await.map_err(refused)?;
        let run_id = document.run_id;
        let live = matches!(document.status.as_str(), "running" | "queued");
        if live && !args.follow {
            let mut after = 0;
            loop {
                let page = remote
                    .events(&run_id, after, EVENT_PAGE)
                    .await
                    .map_err(refused)?;
                if page.events.is_empty() {
                    return Ok(Status::Success);
                }
                let mut text = String::new();
                for event in &page.events {
                    if let Some((line, _)) = format_event(event.get(), args.json) {
                        text.push_str(&line);
                    }
                }
                output.out(&text);
                after = page.next_after;
            }
        }
        let ended = stream_lines(&remote, &run_id, None, |line| {
            format_event(line, args.json).is_some_and(|(text, name)| {
                output.out(&text);
                fabro_engine::EventKind::is_terminal_name(&name)
            })
        })
        .await?;
        if !ended && args.follow {
            output.error(&CliError::Usage(format!(
                "run {run_id} is interrupted: no process holds its lock and it has no terminal event"
            )));
            return Ok(Status::Failure);
        }
        Ok(Status::Success)
    })
}

/// `fabro resume RUN --server URL`: the server resumes the run; this process follows it
/// as `fabro run --server` does (or, with `--detach`, prints it and exits).
pub(crate) fn resume(
    url: &str,
    args: &crate::args::ResumeArgs,
    output: &mut Output,
) -> Result<Status, CliError> {
    if args.detached_worker {
        return Err(not_remote("--detached-worker"));
    }
    let target = super::resume::remote_target(&args.target)?;
    let request = ResumeRequest {
        auto_approve: args.stages.auto_approve,
        answers: answer_labels(&args.stages.answers)?,
        model: args.stages.model.clone(),
        provider: args.stages.provider.clone(),
        max_stages: args.stages.max_stages,
        max_tokens: args.stages.max_tokens,
        max_cost_usd: args.stages.max_cost.map(CostLimit::usd),
        max_duration: args.stages.max_duration.clone(),
    };
    let remote = remote(url);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(CliError::Runtime)?;
    runtime.block_on(async {
        let signals = if args.detach { None } else { Signals::catch() };
        // The resumed run's events follow the ones stored now; only those are shown.
        let run_id = remote.run_header(&target).await.map_err(refused)?.run_id;
        let after = last_event_id(&remote, &run_id).await?;
        remote.resume(&run_id, &request).await.map_err(refused)?;
        if args.detach {
            return print_detached(&remote, &run_id, output).await;
        }
        let started = Started {
            run_id: &run_id,
            after,
            workflow: None,
        };
        follow(&remote, started, args.json, signals, output).await
    })
}

/// The id of the run's newest stored event, if it has any.
async fn last_event_id(remote: &Client, run_id: &str) -> Result<Option<u64>, CliError> {
    let mut last = None;
    loop {
        let page = remote
            .events(run_id, last.unwrap_or(0), EVENT_PAGE)
            .await
            .map_err(refused)?;
        if page.events.is_empty() {
            return Ok(last);
        }
        last = Some(page.next_after);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_canceled_run_exits_130_only_when_the_user_stopped_it() {
        for (status, cause, expected) in [
            ("success", None, Status::Success),
            ("partial_success", None, Status::PartialSuccess),
            ("fail", None, Status::Failure),
            ("canceled", Some(StopCause::User), Status::Canceled),
            ("canceled", Some(StopCause::Budget), Status::Failure),
            ("canceled", Some(StopCause::Stall), Status::Failure),
            ("canceled", Some(StopCause::EngineError), Status::Failure),
            ("interrupted", None, Status::Failure),
        ] {
            assert_eq!(exit_status(status, cause), expected, "{status} {cause:?}");
        }
    }
}
