//! The run page `/runs/{id}` (SPEC 15): header with Cancel and Resume, the live graph
//! (`graph.svg` inline, restyled by the script as events arrive), the pending human
//! question as buttons, the stage list and the event log. `/runs/{id}/live` returns the
//! parts that change as JSON of HTML fragments; the form posts cancel, resume and
//! answer, then go back to the page.

use std::collections::BTreeMap;

use std::hash::{Hash, Hasher};

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::{Form, Json};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{
    blocking, check_post, cost, duration, escape, layout, message_page, posted_form,
    sign_in_required, signed_in, status_badge, text, url_segment,
};
use crate::api::questions;
use crate::engine_bridge::{
    agent_stages_elsewhere, records, ResumeRequest, RunStatus, SteeringSource, WhenNoAgent,
};
use crate::error::ApiError;
use crate::runs;
use crate::state::AppState;
use fabro_api::AnswerRequest;

/// Everything the page shows about one run.
struct RunView {
    run_id: String,
    document: Value,
    stages: Vec<Value>,
    graph: Option<String>,
    question: Option<Value>,
    /// The nodes of the running agent stages that take steering (SPEC 20.1).
    steerable: Vec<String>,
    /// The last stored event when the run was read (read first: the view shows at
    /// least what the events up to it did).
    last_event_id: u64,
}

async fn load(state: &AppState, id: &str, with_graph: bool) -> Result<RunView, ApiError> {
    let Some(record) = crate::api::find_run(state, id).await? else {
        let active = state
            .active_by_prefix(id)
            .ok_or_else(|| ApiError::not_found(format!("unknown run '{id}'")))?;
        return Ok(RunView {
            run_id: active.run_id.clone(),
            document: super::json_value(&active.queued_summary()),
            stages: Vec::new(),
            graph: None,
            question: None,
            steerable: Vec::new(),
            last_event_id: 0,
        });
    };
    if record.status == RunStatus::Queued {
        // Not started (or started a moment ago): no manifest to inspect yet.
        let document = state.active(&record.run_id).map_or_else(
            || records::run_summary(state.run_store(), &record),
            |active| active.queued_summary(),
        );
        return Ok(RunView {
            run_id: record.run_id.clone(),
            document: super::json_value(&document),
            stages: Vec::new(),
            graph: None,
            question: None,
            steerable: Vec::new(),
            last_event_id: 0,
        });
    }
    let run_id = record.run_id.clone();
    let question = questions::pending(state, &run_id)
        .first()
        .map(super::json_value);
    let cache = state.clone();
    let view = blocking(move || {
        let steerable = steerable_stages(&cache, &record.run_id, &record.run_dir);
        let store = cache.run_store();
        let last_event_id = store.last_event_id(&fabro_engine::RunId::from(record.run_id.as_str()));
        // A finished run's document comes from the API's cache; its graph's layout
        // from the page's: only the stages and the statuses are read per request.
        let document = match cache.documents().document(store, &record) {
            Some(cached) => serde_json::from_slice(&cached?).map_err(ApiError::internal)?,
            None => super::json_value(&records::inspect(store, &record)?),
        };
        let stages = records::stages(store, &record);
        let graph = with_graph
            .then(|| cache.graphs().layout(store, &record).ok())
            .flatten()
            .map(|layout| layout.annotate(&records::node_statuses(&stages)));
        let stages = stages.iter().map(super::json_value).collect();
        Ok::<_, ApiError>((document, stages, graph, last_event_id, steerable))
    })
    .await
    .ok_or_else(|| ApiError::internal("the run could not be read"))??;
    let (document, stages, graph, last_event_id, steerable) = view;
    Ok(RunView {
        run_id,
        document,
        stages,
        graph,
        question,
        steerable,
        last_event_id,
    })
}

/// The nodes of the agent stages of run `run_id` that take steering now: from the
/// server's own run, else from the store or the run directory of a run another process
/// executes.
fn steerable_stages(state: &AppState, run_id: &str, run_dir: &std::path::Path) -> Vec<String> {
    let running = match state.active(run_id) {
        Some(active) => active.steering.running(),
        None => agent_stages_elsewhere(
            &state.stores().runs,
            &fabro_engine::RunId::from(run_id),
            run_dir,
        )
        .unwrap_or_default(),
    };
    running
        .into_iter()
        .filter(|stage| stage.steerable())
        .map(|stage| stage.node_id)
        .collect()
}

fn error_page(error: ApiError) -> Response {
    let status = error.status();
    let heading = if status == StatusCode::NOT_FOUND {
        "Not found"
    } else {
        "Error"
    };
    message_page(status, heading, &error.into_public().message)
}

/// `GET /runs/{id}`.
pub async fn page(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if !signed_in(&state, &headers) {
        return sign_in_required();
    }
    let view = match load(&state, &id, true).await {
        Ok(view) => view,
        Err(error) => return error_page(error),
    };
    let run_id = escape(&view.run_id);
    let graph = view
        .graph
        .as_deref()
        .map(strip_prologue)
        .unwrap_or("<p class=\"empty\">No graph yet.</p>");
    let stages = render_stages(&view.run_id, &view.stages);
    let body = format!(
        "<section id=\"run-header\" aria-label=\"run\">{header}</section>\
         <div class=\"run-grid\"><section class=\"graph-panel\" aria-label=\"graph\">\
         <h2>Graph</h2><div class=\"graph-tools\">\
         <button type=\"button\" data-zoom=\"in\" aria-label=\"zoom in\">+</button>\
         <button type=\"button\" data-zoom=\"out\" aria-label=\"zoom out\">−</button>\
         <button type=\"button\" data-zoom=\"reset\">fit</button></div>\
         <div id=\"graph\" class=\"graph\">{graph}</div></section>\
         <div class=\"side\"><section id=\"question\" aria-label=\"question\" data-question=\"{question_id}\">{question}</section>\
         <section id=\"steer\" aria-label=\"steer the agent\" data-steer=\"{steer_key}\">{steer}</section>\
         <section aria-label=\"stages\"><h2>Stages</h2><div id=\"stages\" data-key=\"{stages_key}\">{stages}</div></section></div></div>\
         <section aria-label=\"events\"><h2>Events</h2>\
         <label class=\"follow\"><input type=\"checkbox\" id=\"follow\" checked> follow new events</label>\
         <ol id=\"events\" class=\"events\"></ol></section>",
        header = render_header(&view),
        question_id = escape(&question_id(&view)),
        question = render_question(&view),
        steer_key = escape(&view.steerable.join(" ")),
        steer = render_steer(&view),
        stages_key = fragment_key(&stages),
    );
    let attributes = format!(
        " data-page=\"run\" data-run=\"{run_id}\" data-shown-event=\"{}\"",
        view.last_event_id
    );
    let title = format!("Run {}", text(&view.document["workflow_name"]));
    Html(layout(&title, &attributes, &body)).into_response()
}

/// `?stages=` of `/live`: the key of the stage table the page shows.
#[derive(Debug, Default, Deserialize)]
pub struct LiveQuery {
    stages: Option<String>,
}

/// A short key of a fragment: equal keys, equal fragments (within this process).
fn fragment_key(html: &str) -> String {
    let mut hasher = std::hash::DefaultHasher::new();
    html.hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// `GET /runs/{id}/live`: the changing parts as HTML fragments; the stage table only
/// when it differs from the one whose key `?stages=` names (else `null`), since a long
/// run's table is most of the answer.
pub async fn live(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<LiveQuery>,
    headers: HeaderMap,
) -> Response {
    if !signed_in(&state, &headers) {
        return sign_in_required();
    }
    let view = match load(&state, &id, false).await {
        Ok(view) => view,
        Err(error) => return error.into_response(),
    };
    let mut nodes: BTreeMap<String, Value> = BTreeMap::new();
    for stage in &view.stages {
        let node = text(&stage["node_id"]);
        let visits = nodes
            .get(&node)
            .and_then(|entry| entry["visits"].as_u64())
            .unwrap_or(0);
        nodes.insert(
            node,
            json!({"rank": stage["rank"], "status": stage["status"], "visits": visits + 1}),
        );
    }
    let stages = render_stages(&view.run_id, &view.stages);
    let stages_key = fragment_key(&stages);
    let stages = (query.stages.as_deref() != Some(stages_key.as_str())).then_some(stages);
    let body = json!({
        "status": view.document["status"],
        "current_node": view.document["current_node"],
        "header": render_header(&view),
        "question_id": question_id(&view),
        "question": render_question(&view),
        "steer_key": view.steerable.join(" "),
        "steer": render_steer(&view),
        "stages": stages,
        "stages_key": stages_key,
        "nodes": nodes,
        "last_event_id": view.last_event_id,
    });
    ([(header::CACHE_CONTROL, "no-store")], Json(body)).into_response()
}

/// The SVG without its XML declaration, for inline use.
fn strip_prologue(svg: &str) -> &str {
    svg.find("<svg").map_or(svg, |start| &svg[start..])
}

fn question_id(view: &RunView) -> String {
    view.question
        .as_ref()
        .map(|question| text(&question["question_id"]))
        .unwrap_or_default()
}

fn render_header(view: &RunView) -> String {
    let document = &view.document;
    let status = text(&document["status"]);
    let shown = if status == "running" && view.question.is_some() {
        "waiting".to_owned()
    } else {
        status.clone()
    };
    let run_path = url_segment(&view.run_id);
    let mut actions = String::new();
    if matches!(status.as_str(), "running" | "queued") {
        actions.push_str(&format!(
            "<form method=\"post\" action=\"/runs/{run_path}/cancel\"><button type=\"submit\" class=\"danger\" id=\"cancel\">Cancel run</button></form>"
        ));
    }
    if matches!(status.as_str(), "canceled" | "interrupted") {
        actions.push_str(&format!(
            "<form method=\"post\" action=\"/runs/{run_path}/resume\"><button type=\"submit\" id=\"resume\">Resume run</button></form>"
        ));
    }
    let totals = &document["totals"];
    format!(
        "<h1><span class=\"workflow\">{workflow}</span> <small class=\"run-id\">{run_id}</small></h1>\
         <p class=\"goal\">{goal}</p>\
         <dl class=\"facts\"><div><dt>Status</dt><dd id=\"run-status\" data-status=\"{status_attr}\">{badge}</dd></div>\
         <div><dt>Current node</dt><dd id=\"current-node\">{node}</dd></div>\
         <div><dt>Duration</dt><dd>{duration}</dd></div>\
         <div><dt>Tokens</dt><dd>{tokens}</dd></div><div><dt>Cost</dt><dd>{cost}</dd></div>\
         <div><dt>Run branch</dt><dd>{branch}</dd></div><div><dt>Base SHA</dt><dd>{base}</dd></div></dl>\
         <div class=\"actions\">{actions}</div>",
        workflow = escape(&text(&document["workflow_name"])),
        run_id = escape(&view.run_id),
        goal = escape(&text(&document["goal"])),
        status_attr = escape(&status),
        badge = status_badge(&shown),
        node = escape(&text(&document["current_node"])),
        duration = duration(document["duration_ms"].as_u64()),
        tokens = text(&totals["tokens"]),
        cost = cost(&totals["cost_usd"]),
        branch = escape(&text(&document["run_branch"])),
        base = escape(&text(&document["base_sha"])),
    )
}

fn render_question(view: &RunView) -> String {
    let Some(question) = &view.question else {
        return String::new();
    };
    let run_path = url_segment(&view.run_id);
    let question_id = escape(&text(&question["question_id"]));
    let default = text(&question["default_choice"]);
    let mut buttons = String::new();
    for option in question["options"].as_array().into_iter().flatten() {
        let key = text(&option["key"]);
        let label = text(&option["display_label"]);
        let label = if label.is_empty() {
            text(&option["label"])
        } else {
            label
        };
        let is_default = !default.is_empty()
            && [
                &option["key"],
                &option["label"],
                &option["display_label"],
                &option["target"],
            ]
            .iter()
            .any(|value| text(value).eq_ignore_ascii_case(&default));
        let (class, mark) = if is_default {
            (" class=\"default\"", " <em>(default)</em>")
        } else {
            ("", "")
        };
        buttons.push_str(&format!(
            "<button type=\"submit\" name=\"key\" value=\"{key_attr}\" data-key=\"{key_attr}\"{class}>\
             <kbd>{key}</kbd> {label}{mark}</button> ",
            key_attr = escape(&key),
            key = escape(&key),
            label = escape(&label),
        ));
    }
    let freeform = if question["allow_freeform"].as_bool().unwrap_or(false) {
        format!(
            "<form method=\"post\" action=\"/runs/{run_path}/answer\" class=\"freeform\">\
             <input type=\"hidden\" name=\"question_id\" value=\"{question_id}\">\
             <label for=\"answer-text\">Your answer</label>\
             <textarea id=\"answer-text\" name=\"text\" rows=\"3\"></textarea>\
             <button type=\"submit\">Send answer</button></form>"
        )
    } else {
        String::new()
    };
    format!(
        "<h2>Question from {node}</h2><p class=\"question-text\">{text}</p>\
         <form method=\"post\" action=\"/runs/{run_path}/answer\" class=\"options\">\
         <input type=\"hidden\" name=\"question_id\" value=\"{question_id}\">{buttons}</form>{freeform}",
        node = escape(&text(&question["node_id"])),
        text = escape(&text(&question["text"])),
    )
}

/// The steering form (SPEC 20.1), while an agent stage that takes steering runs.
fn render_steer(view: &RunView) -> String {
    if view.steerable.is_empty() {
        return String::new();
    }
    format!(
        "<h2>Steer the agent</h2>\
         <form method=\"post\" action=\"/runs/{run_path}/steer\" class=\"steer\">\
         <label for=\"steer-text\">Guidance for {nodes}, read before its next LLM call</label>\
         <textarea id=\"steer-text\" name=\"text\" rows=\"3\" required></textarea>\
         <button type=\"submit\" id=\"steer-send\">Send to the agent</button></form>",
        run_path = url_segment(&view.run_id),
        nodes = escape(&view.steerable.join(", ")),
    )
}

fn render_stages(run_id: &str, stages: &[Value]) -> String {
    if stages.is_empty() {
        return "<p class=\"empty\">No stages yet.</p>".to_owned();
    }
    let run_path = url_segment(run_id);
    let mut html = String::from(
        "<div class=\"scroll\"><table class=\"stages\"><thead><tr><th>#</th><th>Node</th><th>Visit</th>\
         <th>Status</th><th>Duration</th><th>Model</th><th>Tokens</th><th>Cost</th></tr></thead><tbody>",
    );
    for stage in stages {
        let rank = text(&stage["rank"]);
        let node = text(&stage["node_id"]);
        let usage = &stage["usage"];
        let tokens = match (
            usage["input_tokens"].as_u64(),
            usage["output_tokens"].as_u64(),
        ) {
            (Some(input), Some(output)) => (input + output).to_string(),
            _ => String::new(),
        };
        html.push_str(&format!(
            "<tr data-node=\"{node_attr}\" data-rank=\"{rank_attr}\"><td><a href=\"/runs/{run_path}/stages/{rank_path}\">{rank}</a></td>\
             <td><a href=\"/runs/{run_path}/stages/{rank_path}\">{node}</a></td><td>{visit}</td><td>{badge}</td>\
             <td>{duration}</td><td>{model}</td><td>{tokens}</td><td>{cost}</td></tr>",
            node_attr = escape(&node),
            rank_attr = escape(&rank),
            rank_path = url_segment(&rank),
            rank = escape(&rank),
            node = escape(&node),
            visit = escape(&text(&stage["visit"])),
            badge = status_badge(&text(&stage["status"])),
            duration = duration(stage["duration_ms"].as_u64()),
            model = escape(&text(&stage["model"])),
            cost = cost(&stage["cost_usd"]),
        ));
    }
    html.push_str("</tbody></table></div>");
    html
}

fn back_to(run_id: &str) -> Response {
    (
        StatusCode::SEE_OTHER,
        [(header::LOCATION, format!("/runs/{}", url_segment(run_id)))],
    )
        .into_response()
}

/// `POST /runs/{id}/cancel`.
pub async fn cancel(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = check_post(&state, &headers) {
        return refused;
    }
    match runs::cancel(&state, &id) {
        Ok(run_id) => back_to(&run_id),
        Err(error) => error_page(error),
    }
}

/// `POST /runs/{id}/resume`.
pub async fn resume(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = check_post(&state, &headers) {
        return refused;
    }
    let record = match crate::api::require_run(&state, &id).await {
        Ok(record) => record,
        Err(error) => return error_page(error),
    };
    match runs::resume(&state, &record.run_id, ResumeRequest::default()).await {
        Ok(accepted) => back_to(&accepted.run_id),
        Err(error) => error_page(error),
    }
}

/// The steering form.
#[derive(Debug, Deserialize)]
pub struct SteerForm {
    text: String,
}

/// `POST /runs/{id}/steer`: the message goes to the running agent stage, source `ui`.
pub async fn steer(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    form: Result<Form<SteerForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let form = match posted_form(&state, &headers, form, "steering form") {
        Ok(form) => form,
        Err(answer) => return *answer,
    };
    match crate::api::steer::send(
        &state,
        &id,
        &form.text,
        SteeringSource::Ui,
        WhenNoAgent::Refuse,
    )
    .await
    {
        Ok(accepted) => back_to(&accepted.run_id),
        Err(error) => error_page(error),
    }
}

/// The answer form.
#[derive(Debug, Deserialize)]
pub struct AnswerForm {
    question_id: String,
    key: Option<String>,
    text: Option<String>,
}

/// `POST /runs/{id}/answer`.
pub async fn answer(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    form: Result<Form<AnswerForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let form = match posted_form(&state, &headers, form, "answer form") {
        Ok(form) => form,
        Err(answer) => return *answer,
    };
    let request = match (form.key, form.text) {
        (Some(key), _) => AnswerRequest {
            key: Some(key),
            label: None,
            text: None,
        },
        (None, text) => AnswerRequest {
            key: None,
            label: None,
            text: Some(text.unwrap_or_default()),
        },
    };
    let answered = questions::answer(
        State(state.clone()),
        Path((id.clone(), form.question_id)),
        Ok(Json(request)),
    )
    .await;
    match answered {
        Ok(_) => back_to(&id),
        Err(error) => error_page(error),
    }
}
