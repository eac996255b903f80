//! The stage page `/runs/{id}/stages/{rank}` (SPEC 15): `prompt.md` and `response.md`
//! as safe Markdown with a raw view, `status.json`, the tails of `stdout.log` and
//! `stderr.log` (followed by the script through `/live` while the stage runs), files
//! touched, the coloured diff, the agent's tool calls and retries from the events, and
//! the stage's captured artifacts with download links; "Fork from here" posts to
//! `/runs/{id}/stages/{rank}/fork`, which forks the run at the stage (SPEC 20.2) and goes
//! to the new run's page.

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::{
    blocking, check_post, cost, diff, duration, escape, layout, markdown, message_page,
    sign_in_required, signed_in, status_badge, text, url_segment,
};
use crate::engine_bridge::records::{self, RunRecordRef};
use crate::state::AppState;

/// The largest tail of a log shown.
const LOG_TAIL: usize = 64 * 1024;
/// The largest tool output shown per call.
const TOOL_OUTPUT: usize = 4 * 1024;

/// Everything the page shows about one stage.
struct StageView {
    record: RunRecordRef,
    stage: Value,
    files: Vec<(String, String)>,
    diff: Option<String>,
    events: Vec<Value>,
    artifacts: Vec<Value>,
}

fn file(stage_files: &[(String, String)], name: &str) -> Option<String> {
    stage_files
        .iter()
        .find(|(file, _)| file == name)
        .map(|(_, text)| text.clone())
}

fn tail(text: &str) -> &str {
    if text.len() <= LOG_TAIL {
        return text;
    }
    let mut start = text.len() - LOG_TAIL;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

fn load_blocking(
    store: &dyn fabro_engine::RunStore,
    mirrors: &fabro_engine::repository::Mirrors,
    record: RunRecordRef,
    rank: u32,
    full: bool,
) -> Option<StageView> {
    let stage = records::stages(store, &record)
        .into_iter()
        .find(|stage| stage.rank == rank)?;
    let node = stage.node_id.clone();
    let stage = super::json_value(&stage);
    let names: Vec<&str> = if full {
        records::STAGE_FILES.to_vec()
    } else {
        vec!["stdout.log", "stderr.log"]
    };
    let files = names
        .into_iter()
        .filter_map(|name| {
            let bytes = records::stage_file(store, &record.run_id, rank, name).ok()?;
            Some((
                name.to_owned(),
                String::from_utf8_lossy(&bytes).into_owned(),
            ))
        })
        .collect();
    if !full {
        return Some(StageView {
            record,
            stage,
            files,
            diff: None,
            events: Vec::new(),
            artifacts: Vec::new(),
        });
    }
    let diff = records::stage_diff(store, &record, rank, mirrors)
        .ok()
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned());
    let events = stage_events(store, &record.run_id, &node, rank);
    let artifacts = records::artifacts(&record.run_dir)
        .into_iter()
        .filter(|artifact| artifact.node_id == node)
        .map(|artifact| super::json_value(&artifact))
        .collect();
    Some(StageView {
        record,
        stage,
        files,
        diff,
        events,
        artifacts,
    })
}

/// The events of the stage: those of its node from its `StageStarted` to its
/// `StageCompleted`.
fn stage_events(
    store: &dyn fabro_engine::RunStore,
    run_id: &str,
    node: &str,
    rank: u32,
) -> Vec<Value> {
    let mut inside = false;
    let mut found = Vec::new();
    let mut reader = store.event_reader(&fabro_engine::RunId::from(run_id), 0);
    for event in crate::api::feed::read_events(reader.as_mut()) {
        let Ok(value) = serde_json::from_str::<Value>(&event.line) else {
            continue;
        };
        if value["node_id"] != node {
            continue;
        }
        let is_rank = value["properties"]["rank"].as_u64() == Some(u64::from(rank));
        match event.name.as_str() {
            "StageStarted" if is_rank => inside = true,
            "StageCompleted" if is_rank => return found,
            _ if inside => found.push(value),
            _ => {}
        }
    }
    found
}

async fn load(
    state: &AppState,
    id: &str,
    rank: &str,
    full: bool,
) -> Result<StageView, Box<Response>> {
    let not_found = || {
        Box::new(message_page(
            StatusCode::NOT_FOUND,
            "Not found",
            "no such stage",
        ))
    };
    let rank: u32 = rank.parse().map_err(|_| not_found())?;
    let record = match crate::api::find_run(state, id).await {
        Ok(Some(record)) => record,
        _ => return Err(not_found()),
    };
    let reader = state.clone();
    blocking(move || {
        let mirrors = reader.bridge().mirrors();
        load_blocking(reader.run_store(), &mirrors, record, rank, full)
    })
    .await
    .flatten()
    .ok_or_else(not_found)
}

/// `GET /runs/{id}/stages/{rank}`.
pub async fn page(
    State(state): State<AppState>,
    Path((id, rank)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if !signed_in(&state, &headers) {
        return sign_in_required();
    }
    let view = match load(&state, &id, &rank, true).await {
        Ok(view) => view,
        Err(response) => return *response,
    };
    let stage = &view.stage;
    let run_id = &view.record.run_id;
    let node = text(&stage["node_id"]);
    let status = text(&stage["status"]);
    let mut body = format!(
        "<p class=\"crumbs\"><a href=\"/runs/{run_path}\">← run {run_short}</a></p>\
         <h1>Stage {rank}: <span class=\"node\">{node}</span></h1>\
         <dl class=\"facts\"><div><dt>Status</dt><dd id=\"stage-status\" data-status=\"{status_attr}\">{badge}</dd></div>\
         <div><dt>Visit</dt><dd>{visit}</dd></div><div><dt>Handler</dt><dd>{handler}</dd></div>\
         <div><dt>Attempts</dt><dd>{attempts}</dd></div><div><dt>Duration</dt><dd>{duration}</dd></div>\
         <div><dt>Model</dt><dd>{model}</dd></div><div><dt>Tokens</dt><dd>{tokens}</dd></div>\
         <div><dt>Cost</dt><dd>{cost}</dd></div></dl>",
        run_path = url_segment(run_id),
        run_short = escape(&run_id.chars().take(10).collect::<String>()),
        rank = escape(&text(&stage["rank"])),
        node = escape(&node),
        status_attr = escape(&status),
        badge = status_badge(&status),
        visit = escape(&text(&stage["visit"])),
        handler = escape(&text(&stage["handler"])),
        attempts = escape(&text(&stage["attempts"])),
        duration = duration(stage["duration_ms"].as_u64()),
        model = escape(&text(&stage["model"])),
        tokens = tokens(&stage["usage"]),
        cost = cost(&stage["cost_usd"]),
    );
    if status != "running" {
        body.push_str(&format!(
            "<div class=\"actions\"><form method=\"post\" action=\"/runs/{}/stages/{}/fork\">\
             <button type=\"submit\">Fork from here</button></form></div>",
            url_segment(run_id),
            escape(&text(&stage["rank"])),
        ));
    }
    for (name, heading) in [("prompt.md", "Prompt"), ("response.md", "Response")] {
        if let Some(source) = file(&view.files, name) {
            body.push_str(&markdown_section(name, heading, &source));
        }
    }
    body.push_str(&logs_section(&view));
    body.push_str(&files_touched(&stage["files_touched"]));
    body.push_str("<section aria-label=\"diff\"><h2>Diff</h2>");
    match &view.diff {
        Some(text) => body.push_str(&diff::render(text)),
        None => body.push_str("<p class=\"empty\">No diff (the run has no git checkpoints).</p>"),
    }
    body.push_str("</section>");
    body.push_str(&tool_calls(&view.events));
    body.push_str(&artifacts(run_id, &view.artifacts));
    if let Some(status_json) = file(&view.files, "status.json") {
        body.push_str(&format!(
            "<section aria-label=\"status.json\"><h2>status.json</h2><pre class=\"raw\">{}</pre></section>",
            escape(&status_json)
        ));
    }
    let attributes = format!(
        " data-page=\"stage\" data-run=\"{}\" data-rank=\"{}\" data-status=\"{}\"",
        escape(run_id),
        escape(&text(&stage["rank"])),
        escape(&status)
    );
    Html(layout(&format!("Stage {node}"), &attributes, &body)).into_response()
}

/// `POST /runs/{id}/stages/{rank}/fork`: forks the run from the checkpoint written after
/// the stage (SPEC 20.2) and goes to the new run's page; the same checks as every form.
pub async fn fork(
    State(state): State<AppState>,
    Path((id, rank)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = check_post(&state, &headers) {
        return refused;
    }
    let failed = |error: crate::error::ApiError| {
        let status = error.status();
        message_page(status, "Cannot fork", &error.into_public().message)
    };
    let Ok(rank) = rank.parse::<u32>() else {
        return message_page(StatusCode::NOT_FOUND, "Not found", "no such stage");
    };
    let record = match crate::api::require_run(&state, &id).await {
        Ok(record) => record,
        Err(error) => return failed(error),
    };
    let request = crate::engine_bridge::ForkRequest {
        at_rank: Some(rank),
        ..Default::default()
    };
    match crate::runs::fork(&state, &record.run_id, request).await {
        Ok(accepted) => (
            StatusCode::SEE_OTHER,
            [(
                header::LOCATION,
                format!("/runs/{}", url_segment(&accepted.run_id)),
            )],
        )
            .into_response(),
        Err(error) => failed(error),
    }
}

/// `GET /runs/{id}/stages/{rank}/live`: status and log tails as JSON text.
pub async fn live(
    State(state): State<AppState>,
    Path((id, rank)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if !signed_in(&state, &headers) {
        return sign_in_required();
    }
    let view = match load(&state, &id, &rank, false).await {
        Ok(view) => view,
        Err(response) => return *response,
    };
    let body = json!({
        "status": view.stage["status"],
        "stdout": file(&view.files, "stdout.log").as_deref().map(tail),
        "stderr": file(&view.files, "stderr.log").as_deref().map(tail),
    });
    ([(header::CACHE_CONTROL, "no-store")], Json(body)).into_response()
}

/// Tokens of a stage, with the share of its input read from the provider's prompt
/// cache when there is one (SPEC 10.8).
fn tokens(usage: &Value) -> String {
    match (
        usage["input_tokens"].as_u64(),
        usage["output_tokens"].as_u64(),
    ) {
        (Some(input), Some(output)) => {
            let cached = usage["cache_read_tokens"]
                .as_u64()
                .filter(|read| *read > 0 && input > 0)
                .map(|read| format!(", {}% cached", read * 100 / input))
                .unwrap_or_default();
            format!("{} ({input} in{cached} / {output} out)", input + output)
        }
        _ => String::new(),
    }
}

fn markdown_section(name: &str, heading: &str, source: &str) -> String {
    let id = name.trim_end_matches(".md");
    format!(
        "<section aria-label=\"{heading}\" id=\"{id}\"><h2>{heading}</h2>\
         <div class=\"markdown\">{rendered}</div>\
         <details><summary>Raw {name}</summary><pre class=\"raw\">{raw}</pre></details></section>",
        rendered = markdown::render(source),
        raw = escape(source),
    )
}

fn logs_section(view: &StageView) -> String {
    let stdout = file(&view.files, "stdout.log");
    let stderr = file(&view.files, "stderr.log");
    let running = view.stage["status"] == "running";
    if stdout.is_none() && stderr.is_none() && !running {
        return String::new();
    }
    let mut html = String::from("<section aria-label=\"output\"><h2>Output</h2>");
    for (id, heading, content) in [
        ("stdout", "stdout.log", stdout),
        ("stderr", "stderr.log", stderr),
    ] {
        html.push_str(&format!(
            "<h3>{heading}</h3><pre class=\"log\" id=\"{id}\" tabindex=\"0\">{}</pre>",
            escape(content.as_deref().map(tail).unwrap_or_default())
        ));
    }
    html.push_str("</section>");
    html
}

fn files_touched(files: &Value) -> String {
    let items: Vec<String> = files
        .as_array()
        .into_iter()
        .flatten()
        .map(|path| format!("<li><code>{}</code></li>", escape(&text(path))))
        .collect();
    if items.is_empty() {
        return String::new();
    }
    format!(
        "<section aria-label=\"files touched\"><h2>Files touched</h2><ul class=\"files\">{}</ul></section>",
        items.concat()
    )
}

fn clip(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n… ({} more bytes)", &text[..end], text.len() - end)
}

fn tool_calls(events: &[Value]) -> String {
    let mut html = String::new();
    for event in events {
        let properties = &event["properties"];
        match event["event"].as_str().unwrap_or_default() {
            "Agent.ToolCallStarted" => html.push_str(&format!(
                "<li class=\"call\"><span class=\"tool\">{}</span> <code class=\"call-id\">{}</code>\
                 <pre class=\"raw\">{}</pre></li>",
                escape(&text(&properties["tool"])),
                escape(&text(&properties["call_id"])),
                escape(&clip(
                    &serde_json::to_string_pretty(&properties["arguments"]).unwrap_or_default(),
                    TOOL_OUTPUT
                )),
            )),
            "Agent.ToolCallCompleted" => html.push_str(&format!(
                "<li class=\"result{}\"><span class=\"tool\">{} {}</span> ({})<pre class=\"raw\">{}</pre></li>",
                if properties["is_error"] == true { " error" } else { "" },
                if properties["is_error"] == true { "✗ error from" } else { "✓ result of" },
                escape(&text(&properties["tool"])),
                duration(properties["duration_ms"].as_u64()),
                escape(&clip(&text(&properties["output"]), TOOL_OUTPUT)),
            )),
            "StageRetrying" => html.push_str(&format!(
                "<li class=\"retry\">↻ attempt {} failed ({}): {}</li>",
                escape(&text(&properties["attempt"])),
                escape(&text(&properties["failure_class"])),
                escape(&text(&properties["failure_reason"])),
            )),
            _ => {}
        }
    }
    if html.is_empty() {
        return String::new();
    }
    format!("<section aria-label=\"tool calls\"><h2>Tool calls and attempts</h2><ol class=\"calls\">{html}</ol></section>")
}

fn artifacts(run_id: &str, artifacts: &[Value]) -> String {
    if artifacts.is_empty() {
        return String::new();
    }
    let mut html =
        String::from("<section aria-label=\"artifacts\"><h2>Artifacts</h2><ul class=\"files\">");
    for artifact in artifacts {
        let path = text(&artifact["path"]);
        let link: Vec<String> = path.split('/').map(url_segment).collect();
        html.push_str(&format!(
            "<li><a href=\"/api/v1/runs/{}/artifacts/{}\" download>{}</a> ({} bytes)</li>",
            url_segment(run_id),
            link.join("/"),
            escape(&path),
            escape(&text(&artifact["size"])),
        ));
    }
    html.push_str("</ul></section>");
    html
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::tokens;

    /// SPEC 10.8: the stage page shows the share of the input read from the cache.
    #[test]
    fn tokens_show_the_cached_share_of_the_input() {
        assert_eq!(
            tokens(&json!({"input_tokens": 1000, "output_tokens": 50, "cache_read_tokens": 850})),
            "1050 (1000 in, 85% cached / 50 out)"
        );
        assert_eq!(
            tokens(&json!({"input_tokens": 1000, "output_tokens": 50, "cache_read_tokens": 0})),
            "1050 (1000 in / 50 out)"
        );
        assert_eq!(tokens(&json!(null)), "");
    }
}
