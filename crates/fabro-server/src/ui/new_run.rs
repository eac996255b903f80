//! The new-run form `/new` (SPEC 15): a workflow from `GET /api/v1/workflows` or pasted
//! DOT, goal, variables, model, provider and auto-approve. The post validates and starts
//! the run as `POST /api/v1/runs` does; an invalid workflow comes back as the form with
//! its diagnostics (line and column) and nothing started; success redirects to the run
//! page.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::Form;
use serde::Deserialize;
use serde_json::Value;

use super::{
    blocking, escape, layout, posted_form, sign_in_required, signed_in, text, url_segment,
};
use crate::engine_bridge::{records, StartRequest};
use crate::state::AppState;

/// The form's fields.
#[derive(Debug, Default, Deserialize)]
pub struct NewRunForm {
    #[serde(default)]
    workflow: String,
    #[serde(default)]
    source: String,
    #[serde(default)]
    goal: String,
    #[serde(default)]
    vars: String,
    #[serde(default)]
    model: String,
    #[serde(default)]
    provider: String,
    auto_approve: Option<String>,
}

/// `GET /new`.
pub async fn form(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if !signed_in(&state, &headers) {
        return sign_in_required();
    }
    let (workflows, providers) = choices(&state).await;
    let page = render(&workflows, &providers, &NewRunForm::default(), None);
    Html(layout("New run", " data-page=\"new\"", &page)).into_response()
}

/// What the form offers: the workflows under the roots, and the providers a run may
/// name (the built-in ones, the presets and the server's configured ones, SPEC 10.7).
async fn choices(state: &AppState) -> (Vec<Value>, Vec<String>) {
    let roots = state.bridge().roots().to_vec();
    let root = state.bridge().root().to_path_buf();
    let (workflows, providers) = blocking(move || {
        (
            records::workflows(&roots),
            crate::engine_bridge::offered_providers(&root),
        )
    })
    .await
    .unwrap_or_default();
    (workflows.iter().map(super::json_value).collect(), providers)
}

/// `POST /new`.
pub async fn submit(
    State(state): State<AppState>,
    headers: HeaderMap,
    form: Result<Form<NewRunForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let form = match posted_form(&state, &headers, form, "form") {
        Ok(form) => form,
        Err(answer) => return *answer,
    };
    let request = match start_request(&form) {
        Ok(request) => request,
        Err(problem) => return form_again(&state, &form, &problem, None).await,
    };
    match crate::runs::start(&state, request).await {
        Ok(accepted) => (
            StatusCode::SEE_OTHER,
            [(
                header::LOCATION,
                format!("/runs/{}", url_segment(&accepted.run_id)),
            )],
        )
            .into_response(),
        Err(error) => {
            let error = error.into_public();
            let diagnostics = error.diagnostics.as_ref().map(super::json_value);
            form_again(&state, &form, &error.message, diagnostics.as_ref()).await
        }
    }
}

async fn form_again(
    state: &AppState,
    form: &NewRunForm,
    problem: &str,
    diagnostics: Option<&Value>,
) -> Response {
    let (workflows, providers) = choices(state).await;
    let page = render(&workflows, &providers, form, Some((problem, diagnostics)));
    (
        StatusCode::UNPROCESSABLE_ENTITY,
        Html(layout("New run", " data-page=\"new\"", &page)),
    )
        .into_response()
}

fn non_empty(value: &str) -> Option<String> {
    let value = value.trim();
    (!value.is_empty()).then(|| value.to_owned())
}

fn start_request(form: &NewRunForm) -> Result<StartRequest, String> {
    let mut vars = BTreeMap::new();
    for (number, line) in form.vars.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let Some((name, value)) = line.split_once('=') else {
            return Err(format!(
                "variables line {}: expected NAME=VALUE, found '{line}'",
                number + 1
            ));
        };
        vars.insert(name.trim().to_owned(), value.to_owned());
    }
    let source = (!form.source.trim().is_empty()).then(|| form.source.clone());
    let workflow = if source.is_some() {
        None
    } else {
        non_empty(&form.workflow)
    };
    if source.is_none() && workflow.is_none() {
        return Err("pick a workflow or paste one".to_owned());
    }
    Ok(StartRequest {
        workflow,
        source,
        goal: non_empty(&form.goal),
        vars,
        model: non_empty(&form.model),
        provider: non_empty(&form.provider),
        auto_approve: form.auto_approve.is_some(),
        ..StartRequest::default()
    })
}

fn render(
    workflows: &[Value],
    offered: &[String],
    form: &NewRunForm,
    problem: Option<(&str, Option<&Value>)>,
) -> String {
    let mut options = String::from("<option value=\"\">(paste DOT below)</option>");
    for workflow in workflows {
        let path = text(&workflow["path"]);
        let selected = if path == form.workflow {
            " selected"
        } else {
            ""
        };
        options.push_str(&format!(
            "<option value=\"{path_attr}\"{selected}>{name} — {goal} ({nodes} nodes{warn})</option>",
            path_attr = escape(&path),
            name = escape(&text(&workflow["name"])),
            goal = escape(&text(&workflow["goal"])),
            nodes = escape(&text(&workflow["node_count"])),
            warn = match workflow["diagnostics_count"].as_u64() {
                Some(0) | None => String::new(),
                Some(count) => format!(", {count} diagnostics"),
            },
        ));
    }
    let mut providers = String::new();
    for provider in offered.iter().map(String::as_str).chain([""]) {
        let selected = if provider == form.provider {
            " selected"
        } else {
            ""
        };
        let label = if provider.is_empty() {
            "(default)"
        } else {
            provider
        };
        providers.push_str(&format!(
            "<option value=\"{value}\"{selected}>{label}</option>",
            value = escape(provider),
            label = escape(label),
        ));
    }
    format!(
        "<h1>New run</h1>{problem}<form method=\"post\" action=\"/new\" class=\"new-run\">\
         <label for=\"workflow\">Workflow</label><select id=\"workflow\" name=\"workflow\">{options}</select>\
         <label for=\"source\">or DOT source</label>\
         <textarea id=\"source\" name=\"source\" rows=\"12\" spellcheck=\"false\">{source}</textarea>\
         <label for=\"goal\">Goal</label><input id=\"goal\" name=\"goal\" value=\"{goal}\">\
         <label for=\"vars\">Variables (NAME=VALUE per line)</label>\
         <textarea id=\"vars\" name=\"vars\" rows=\"3\" spellcheck=\"false\">{vars}</textarea>\
         <label for=\"model\">Model</label><input id=\"model\" name=\"model\" value=\"{model}\">\
         <label for=\"provider\">Provider</label><select id=\"provider\" name=\"provider\">{providers}</select>\
         <label class=\"check\"><input type=\"checkbox\" id=\"auto_approve\" name=\"auto_approve\" value=\"1\"{auto}> auto-approve human gates</label>\
         <button type=\"submit\" id=\"start\">Start run</button></form>",
        problem = problem.map_or_else(String::new, |(message, diagnostics)| render_problem(message, diagnostics)),
        source = escape(&form.source),
        goal = escape(&form.goal),
        vars = escape(&form.vars),
        model = escape(&form.model),
        auto = if form.auto_approve.is_some() { " checked" } else { "" },
    )
}

fn render_problem(message: &str, diagnostics: Option<&Value>) -> String {
    let mut html = format!(
        "<div class=\"problem\" role=\"alert\" id=\"problem\"><p>{}</p>",
        escape(message)
    );
    let items = diagnostics.and_then(Value::as_array);
    if let Some(items) = items.filter(|items| !items.is_empty()) {
        html.push_str("<ul class=\"diagnostics\" id=\"diagnostics\">");
        for diagnostic in items {
            let span = &diagnostic["span"];
            let position = match (span["line"].as_u64(), span["column"].as_u64()) {
                (Some(line), Some(column)) => format!("{line}:{column}"),
                _ => "-".to_owned(),
            };
            html.push_str(&format!(
                "<li class=\"{severity_class}\"><span class=\"position\">{position}</span> \
                 <span class=\"severity\">{severity}</span> [{rule}] {message}</li>",
                severity_class = super::css_word(&text(&diagnostic["severity"])),
                severity = escape(&text(&diagnostic["severity"])),
                rule = escape(&text(&diagnostic["rule"])),
                message = escape(&text(&diagnostic["message"])),
            ));
        }
        html.push_str("</ul>");
    }
    html.push_str("</div>");
    html
}
