//! `fabro run WORKFLOW --server URL` (or `FABRO_SERVER`, SPEC 14.2): the run executes
//! in a `fabro server`; this process prints the same `run_id`/`run_dir` and `status`
//! lines, drives the same progress view from the server's event stream, and exits with
//! the run's code. The first Ctrl-C cancels the remote run, a second one detaches.

mod stream;

use std::collections::BTreeMap;
use std::sync::Arc;

use fabro_engine::config::CostLimit;
use fabro_engine::event::{EventEnvelope, EventSink};
use fabro_engine::run_view::{InspectView, RunView};
use fabro_engine::StopCause;
use fabro_server::engine_bridge::{AnswerLabels, ConfigFile, ResumeRequest, StartRequest};
use serde_json::{json, Value};
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

/// A client of one server.
struct Remote {
    client: reqwest::Client,
    url: String,
    token: Option<String>,
}

impl Remote {
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Value), CliError> {
        let response = self
            .request(method, path, body)
            .send()
            .await
            .map_err(|error| self.unreachable(&error))?;
        let status = response.status().as_u16();
        let text = response
            .text()
            .await
            .map_err(|error| self.unreachable(&error))?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }

    /// `method path` with `body`: the reply when the status is `expected`, else the
    /// API's message as an error (exit 2, as for an unknown run locally).
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        expected: u16,
    ) -> Result<Value, CliError> {
        let (status, reply) = self.send(method, path, body).await?;
        if status != expected {
            return Err(CliError::Usage(api_message(&reply)));
        }
        Ok(reply)
    }

    /// A GET answered 200 (see [`Remote::call`]).
    async fn get(&self, path: &str) -> Result<Value, CliError> {
        self.call(reqwest::Method::GET, path, None, 200).await
    }

    /// A GET whatever its status: the body, or null.
    async fn peek(&self, path: &str) -> Result<Value, CliError> {
        Ok(self.send(reqwest::Method::GET, path, None).await?.1)
    }

    fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> reqwest::RequestBuilder {
        let mut request = self.client.request(method, format!("{}{path}", self.url));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        request
    }

    fn unreachable(&self, error: &reqwest::Error) -> CliError {
        CliError::Usage(format!(
            "cannot reach the fabro server at {}: {}",
            self.url,
            fabro_engine::error_chain(error)
        ))
    }
}

/// The message of an API error body.
fn api_message(body: &Value) -> String {
    body["error"]["message"]
        .as_str()
        .unwrap_or("the server refused the request")
        .to_owned()
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

fn remote(url: &str) -> Remote {
    Remote {
        client: reqwest::Client::new(),
        url: url.to_owned(),
        token: token(url),
    }
}

/// `fabro cancel RUN --server URL`: exit 0 once the run has stopped canceled, 2 when it
/// is not running or queued, or unknown (SPEC 14.2).
pub(crate) fn cancel(url: &str, run: &str, output: &mut Output) -> Result<Status, CliError> {
    let remote = remote(url);
    block_on(async {
        let reply = remote
            .call(
                reqwest::Method::POST,
                &format!("/api/v1/runs/{run}/cancel"),
                Some(&json!({})),
                202,
            )
            .await?;
        let run_id = reply["run_id"].as_str().unwrap_or(run).to_owned();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let document = remote.peek(&format!("/api/v1/runs/{run_id}")).await?;
            match document["status"].as_str() {
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
        let reply = remote.get(&format!("/api/v1/runs/{run}/questions")).await?;
        let Some(question) = reply["questions"].get(0).cloned() else {
            return Err(CliError::Usage(format!(
                "run {run} has no pending human question"
            )));
        };
        let question_id = question["question_id"].as_str().unwrap_or_default();
        let body = match &args.text {
            Some(text) => json!({"label": args.label, "text": text}),
            None => json!({"label": args.label}),
        };
        let reply = remote
            .call(
                reqwest::Method::POST,
                &format!("/api/v1/runs/{run}/questions/{question_id}/answer"),
                Some(&body),
                200,
            )
            .await?;
        let key = reply["selected_key"].as_str().unwrap_or_default();
        let described = match &args.text {
            Some(text) => format!("\"{text}\""),
            None => {
                let display = question["options"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|option| option["key"] == key)
                    .and_then(|option| option["display_label"].as_str())
                    .unwrap_or_default();
                format!("[{key}] {display}")
            }
        };
        output.out(&format!(
            "{} → {described}\n",
            question["node_id"].as_str().unwrap_or_default()
        ));
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
    let request = StartRequest {
        workflow: Some(workflow.display().to_string()),
        source: None,
        work_dir: Some(current.display().to_string()),
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
    };
    let body = serde_json::to_value(&request).map_err(CliError::EncodeJson)?;
    let remote = remote(url);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(CliError::Runtime)?;
    runtime.block_on(async {
        let signals = if args.detach { None } else { Signals::catch() };
        let Some(run_id) = start_run(&remote, &body, output).await? else {
            return Ok(Status::Failure);
        };
        if args.detach {
            return print_detached(&remote, &run_id, output).await;
        }
        follow(&remote, (&run_id, None), args.json, signals, output).await
    })
}

/// A flag that has no meaning for a run in a server.
fn not_remote(flag: &str) -> CliError {
    CliError::Usage(format!("{flag} cannot be used with --server"))
}

/// The `--config` file for the server: read and checked here as `fabro run` checks it
/// (the same messages, exit 2), sent with its absolute path.
fn client_config(path: &std::path::Path) -> Result<ConfigFile, CliError> {
    use fabro_engine::config::ConfigReader;
    let text = fabro_engine::config::FsConfigReader
        .read(path)
        .map_err(|source| CliError::io("cannot read configuration", path, source))?;
    fabro_engine::config::parse(&text, path).map_err(CliError::Config)?;
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
        .map(|(node, mut labels)| {
            let labels = if labels.len() == 1 {
                AnswerLabels::One(labels.remove(0))
            } else {
                AnswerLabels::Many(labels)
            };
            (node, labels)
        })
        .collect())
}

/// `POST /api/v1/runs`: the new run's id, or `None` after printing an invalid
/// workflow's diagnostics (exit 1, as locally).
async fn start_run(
    remote: &Remote,
    body: &Value,
    output: &mut Output,
) -> Result<Option<String>, CliError> {
    let (status, reply) = remote
        .send(reqwest::Method::POST, "/api/v1/runs", Some(body))
        .await?;
    if status == 422 {
        for diagnostic in reply["error"]["diagnostics"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let span = &diagnostic["span"];
            output.err(&format!(
                "{}:{}:{}: {}[{}]: {}\n",
                diagnostic["file"].as_str().unwrap_or_default(),
                span["line"].as_u64().unwrap_or(0),
                span["column"].as_u64().unwrap_or(0),
                diagnostic["severity"].as_str().unwrap_or_default(),
                diagnostic["rule"].as_str().unwrap_or_default(),
                diagnostic["message"].as_str().unwrap_or_default(),
            ));
        }
        if reply["error"]["diagnostics"].is_array() {
            return Ok(None);
        }
    }
    if status != 201 {
        return Err(CliError::Usage(api_message(&reply)));
    }
    Ok(Some(
        reply["run_id"].as_str().unwrap_or_default().to_owned(),
    ))
}

/// What `--detach` prints once the run is started: its id and directory (exit 0).
async fn print_detached(
    remote: &Remote,
    run_id: &str,
    output: &mut Output,
) -> Result<Status, CliError> {
    let document = remote.peek(&format!("/api/v1/runs/{run_id}")).await?;
    output.out(&format!(
        "run_id: {run_id}\nrun_dir: {}\n",
        document["run_dir"].as_str().unwrap_or_default()
    ));
    Ok(Status::Success)
}

/// Prints the `run_id`/`run_dir` lines, drives the progress view from the run's event
/// stream, prints the `status` lines and returns the run's exit status, as a local run.
/// `after`: the id of the last event before this run (or resume) started; `signals`:
/// the Ctrl-C that cancels the run.
async fn follow(
    remote: &Remote,
    (run_id, after): (&str, Option<u64>),
    json: bool,
    signals: Option<Signals>,
    output: &mut Output,
) -> Result<Status, CliError> {
    let run_id = run_id.to_owned();
    let document = remote.peek(&format!("/api/v1/runs/{run_id}")).await?;
    if !json {
        output.out(&format!(
            "run_id: {run_id}\nrun_dir: {}\n",
            document["run_dir"].as_str().unwrap_or_default()
        ));
    }
    let progress = (!json).then(|| Arc::new(ProgressSink::new(output.stderr_color())));
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
    let document = remote.peek(&format!("/api/v1/runs/{run_id}")).await?;
    let run_status = document["status"].as_str().unwrap_or("fail").to_owned();
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
    remote: &Remote,
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
async fn interrupted(remote: &Remote, run_id: &str, signals: Option<Signals>) {
    let Some(mut signals) = signals else {
        return std::future::pending().await;
    };
    signals.next().await;
    let _ = remote
        .send(
            reqwest::Method::POST,
            &format!("/api/v1/runs/{run_id}/cancel"),
            Some(&json!({})),
        )
        .await;
    signals.next().await;
}

fn decode<T: serde::de::DeserializeOwned>(url: &str, value: Value) -> Result<T, CliError> {
    serde_json::from_value(value).map_err(|error| {
        CliError::Usage(format!(
            "the fabro server at {url} sent a document this fabro cannot read: {error}"
        ))
    })
}

/// `fabro inspect RUN --server URL`: the server's `fabro inspect --json` document.
pub(crate) fn inspect(url: &str, run: &str) -> Result<InspectView, CliError> {
    let remote = remote(url);
    let document = block_on(remote.get(&format!("/api/v1/runs/{run}")))?;
    decode(url, document)
}

/// How many runs one page of `GET /api/v1/runs` holds at most.
const PAGE: usize = 200;

/// `fabro runs --server URL`: the runs with one of `statuses` (all when empty), newest
/// first, at most `limit`, each with its workflow's path.
pub(crate) fn runs(
    url: &str,
    statuses: &[fabro_engine::RunStatus],
    limit: Option<usize>,
) -> Result<Vec<(RunView, String)>, CliError> {
    let remote = remote(url);
    let limit = limit.unwrap_or(usize::MAX);
    let filter: String = statuses
        .iter()
        .map(|status| format!("&status={}", status.as_str()))
        .collect();
    block_on(async {
        let mut found = Vec::new();
        let mut before: Option<String> = None;
        while found.len() < limit {
            let page = PAGE.min(limit - found.len());
            let after = before
                .as_ref()
                .map(|before| format!("&before={before}"))
                .unwrap_or_default();
            let mut reply = remote
                .get(&format!("/api/v1/runs?limit={page}{filter}{after}"))
                .await?;
            for mut summary in reply["runs"]
                .as_array_mut()
                .map(std::mem::take)
                .unwrap_or_default()
            {
                // A queued run has not started yet.
                if summary["started_at"].is_null() {
                    summary["started_at"] = Value::String(String::new());
                }
                let path = summary["workflow_path"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                found.push((decode::<RunView>(url, summary)?, path));
            }
            before = reply["next"].as_str().map(str::to_owned);
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
        let document = remote.get(&format!("/api/v1/runs/{}", args.run)).await?;
        let run_id = document["run_id"].as_str().unwrap_or(&args.run).to_owned();
        let live = matches!(document["status"].as_str(), Some("running" | "queued"));
        if live && !args.follow {
            let mut after = 0;
            loop {
                let page = remote
                    .get(&format!(
                        "/api/v1/runs/{run_id}/events?after={after}&limit=1000"
                    ))
                    .await?;
                let events = page["events"].as_array().cloned().unwrap_or_default();
                if events.is_empty() {
                    return Ok(Status::Success);
                }
                let mut text = String::new();
                for event in &events {
                    if let Some((line, _)) = format_event(&event.to_string(), args.json) {
                        text.push_str(&line);
                    }
                }
                output.out(&text);
                after = page["next_after"].as_u64().unwrap_or(u64::MAX);
            }
        }
        let ended = stream_lines(&remote, &run_id, None, |line| {
            format_event(line, args.json).is_some_and(|(text, name)| {
                output.out(&text);
                fabro_engine::event::EventKind::is_terminal_name(&name)
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
    let body = serde_json::to_value(&request).map_err(CliError::EncodeJson)?;
    let remote = remote(url);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(CliError::Runtime)?;
    runtime.block_on(async {
        let signals = if args.detach { None } else { Signals::catch() };
        // The resumed run's events follow the ones stored now; only those are shown.
        let reply = remote.get(&format!("/api/v1/runs/{target}")).await?;
        let run_id = reply["run_id"].as_str().unwrap_or(&target).to_owned();
        let after = last_event_id(&remote, &run_id).await?;
        remote
            .call(
                reqwest::Method::POST,
                &format!("/api/v1/runs/{run_id}/resume"),
                Some(&body),
                202,
            )
            .await?;
        if args.detach {
            return print_detached(&remote, &run_id, output).await;
        }
        follow(&remote, (&run_id, after), args.json, signals, output).await
    })
}

/// The id of the run's newest stored event, if it has any.
async fn last_event_id(remote: &Remote, run_id: &str) -> Result<Option<u64>, CliError> {
    let mut last = None;
    loop {
        let after = last.unwrap_or(0);
        let page = remote
            .get(&format!(
                "/api/v1/runs/{run_id}/events?after={after}&limit=1000"
            ))
            .await?;
        if page["events"].as_array().is_none_or(Vec::is_empty) {
            return Ok(last);
        }
        last = page["next_after"].as_u64().or(last);
        if last.is_none() {
            return Ok(None);
        }
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
