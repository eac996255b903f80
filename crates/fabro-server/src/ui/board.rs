//! The runs board `/` (SPEC 15): every run, newest first, filterable by status, 50 per
//! page, with a counter per status. The page's script reloads the board fragment
//! (`X-Fabro-Fragment: board`) while it is open, so new runs and status changes show
//! without a reload.

use std::collections::BTreeMap;

use axum::http::HeaderMap;
use axum::response::{Html, IntoResponse, Response};
use serde_json::Value;

use super::{blocking, cost, duration, escape, layout, status_badge, text, url_segment};
use crate::engine_bridge::records;
use crate::engine_bridge::RunStatus;
use crate::state::AppState;

/// Runs per page.
pub const PAGE_SIZE: usize = 50;

/// The statuses the board filters by, in display order: those of `GET /api/v1/runs`
/// without `unreadable` (the last).
pub const FILTERS: &[&str] = crate::api::STATUSES
    .split_at(crate::api::STATUSES.len() - 1)
    .0;

/// One run before its details are read: id, status and whether a question waits.
struct Entry {
    run_id: String,
    status: String,
    waiting: bool,
    record: Option<records::RunRecordRef>,
    queued: Option<Value>,
}

/// What the board shows.
struct Board {
    counts: BTreeMap<&'static str, usize>,
    total: usize,
    rows: Vec<Value>,
    pages: usize,
}

/// The board page, or its fragment when `headers` ask for it.
pub async fn page(state: &AppState, status: Option<String>, page: usize) -> Response {
    let filter = status.filter(|status| FILTERS.contains(&status.as_str()));
    let board = load(state, filter.clone(), page).await;
    let fragment = render(&board, filter.as_deref(), page);
    let body = format!("<h1>Runs</h1><div id=\"board\" data-live=\"board\">{fragment}</div>");
    Html(layout("Runs", " data-page=\"board\"", &body)).into_response()
}

/// The board fragment alone (`GET /?…` with `X-Fabro-Fragment: board`).
pub async fn fragment_if_asked(
    state: &AppState,
    headers: &HeaderMap,
    status: Option<String>,
    page: usize,
) -> Option<Response> {
    let asked = headers
        .get("x-fabro-fragment")
        .is_some_and(|value| value == "board");
    if !asked {
        return None;
    }
    let filter = status.filter(|status| FILTERS.contains(&status.as_str()));
    let board = load(state, filter.clone(), page).await;
    Some(Html(render(&board, filter.as_deref(), page)).into_response())
}

async fn load(state: &AppState, filter: Option<String>, page: usize) -> Board {
    let state = state.clone();
    blocking(move || load_blocking(&state, filter.as_deref(), page))
        .await
        .unwrap_or(Board {
            counts: BTreeMap::new(),
            total: 0,
            rows: Vec::new(),
            pages: 1,
        })
}

fn load_blocking(state: &AppState, filter: Option<&str>, page: usize) -> Board {
    let records = records::list_runs(state.run_store()).unwrap_or_default();
    let mut entries: Vec<Entry> = Vec::new();
    for active in state.all_active() {
        if !records.iter().any(|record| record.run_id == active.run_id) {
            entries.push(Entry {
                run_id: active.run_id.clone(),
                status: "queued".to_owned(),
                waiting: false,
                record: None,
                queued: Some(super::json_value(&active.queued_summary())),
            });
        }
    }
    for record in records {
        let waiting = record.status == RunStatus::Running
            && !crate::api::questions::pending(state, &record.run_id).is_empty();
        entries.push(Entry {
            run_id: record.run_id.clone(),
            status: record.status.as_str().to_owned(),
            waiting,
            record: Some(record),
            queued: None,
        });
    }
    let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
    for entry in &entries {
        for &status in FILTERS {
            if entry.status == status || (status == "waiting" && entry.waiting) {
                *counts.entry(status).or_default() += 1;
            }
        }
    }
    let total = entries.len();
    let selected: Vec<Entry> = entries
        .into_iter()
        .filter(|entry| {
            filter.is_none_or(|wanted| {
                entry.status == wanted || (wanted == "waiting" && entry.waiting)
            })
        })
        .collect();
    let pages = selected.len().div_ceil(PAGE_SIZE).max(1);
    let page = page.clamp(1, pages);
    let rows = selected
        .into_iter()
        .skip((page - 1) * PAGE_SIZE)
        .take(PAGE_SIZE)
        .map(|entry| row_value(state.run_store(), entry))
        .collect();
    Board {
        counts,
        total,
        rows,
        pages,
    }
}

fn row_value(store: &dyn fabro_engine::RunStore, entry: Entry) -> Value {
    let worker = entry
        .record
        .as_ref()
        .and_then(|record| record.worker.clone());
    let mut value = match (&entry.record, entry.queued) {
        (Some(record), _) => records::inspect(store, record).map_or_else(
            |_| {
                serde_json::json!({
                    "run_id": entry.run_id, "workflow_name": record.workflow_name,
                    "status": entry.status, "started_at": record.started_at,
                })
            },
            |document| super::json_value(&document),
        ),
        (None, Some(queued)) => queued,
        (None, None) => serde_json::json!({ "run_id": entry.run_id, "status": entry.status }),
    };
    if entry.waiting {
        value["status"] = Value::String("waiting".to_owned());
    }
    if let Some(worker) = worker {
        value["worker"] = Value::String(worker);
    }
    value
}

fn render(board: &Board, filter: Option<&str>, page: usize) -> String {
    let mut html = String::from("<nav class=\"filters\" aria-label=\"status filter\"><ul>");
    let all_current = if filter.is_none() {
        " aria-current=\"page\""
    } else {
        ""
    };
    html.push_str(&format!(
        "<li><a href=\"/\"{all_current}>all <span class=\"count\" data-count=\"all\">{}</span></a></li>",
        board.total
    ));
    for &status in FILTERS {
        let current = if filter == Some(status) {
            " aria-current=\"page\""
        } else {
            ""
        };
        html.push_str(&format!(
            "<li><a href=\"/?status={status}\" class=\"status-{status}\"{current}>{status} \
             <span class=\"count\" data-count=\"{status}\">{}</span></a></li>",
            board.counts.get(status).copied().unwrap_or(0)
        ));
    }
    html.push_str("</ul></nav>");
    if board.rows.is_empty() {
        html.push_str("<p class=\"empty\">No runs.</p>");
        return html;
    }
    // The runs of a store's queue name their worker (SPEC 18.2).
    let workers = board.rows.iter().any(|row| row["worker"].is_string());
    html.push_str(
        "<div class=\"scroll\"><table class=\"runs\"><thead><tr><th>Run</th><th>Workflow</th>\
         <th>Goal</th><th>Status</th><th>Current node</th><th>Started</th><th>Duration</th>\
         <th>Tokens</th><th>Cost</th>",
    );
    html.push_str(if workers { "<th>Worker</th>" } else { "" });
    html.push_str("</tr></thead><tbody>");
    for row in &board.rows {
        html.push_str(&render_row(row, workers));
    }
    html.push_str("</tbody></table></div>");
    if board.pages > 1 {
        html.push_str(&pager(filter, page.clamp(1, board.pages), board.pages));
    }
    html
}

fn render_row(row: &Value, workers: bool) -> String {
    let run_id = text(&row["run_id"]);
    let short: String = run_id.chars().take(10).collect();
    let status = text(&row["status"]);
    let worker = if workers {
        format!(
            "<td class=\"worker\">{}</td>",
            escape(&text(&row["worker"]))
        )
    } else {
        String::new()
    };
    format!(
        "<tr data-run=\"{id}\" data-status=\"{status_attr}\"><td><a href=\"/runs/{link}\">{short}</a></td>\
         <td>{workflow}</td><td class=\"goal\">{goal}</td><td>{badge}</td><td>{node}</td>\
         <td>{started}</td><td>{duration}</td><td>{tokens}</td><td>{cost}</td>{worker}</tr>",
        id = escape(&run_id),
        status_attr = escape(&status),
        link = url_segment(&run_id),
        short = escape(&short),
        workflow = escape(&text(&row["workflow_name"])),
        goal = escape(&text(&row["goal"])),
        badge = status_badge(&status),
        node = escape(&text(&row["current_node"])),
        started = escape(&text(&row["started_at"]).replace('T', " ")),
        duration = duration(row["duration_ms"].as_u64()),
        tokens = text(&row["totals"]["tokens"]),
        cost = cost(&row["totals"]["cost_usd"]),
    )
}

fn pager(filter: Option<&str>, page: usize, pages: usize) -> String {
    let base = match filter {
        Some(status) => format!("/?status={status}&page="),
        None => "/?page=".to_owned(),
    };
    let mut html = String::from("<nav class=\"pager\" aria-label=\"pages\">");
    if page > 1 {
        html.push_str(&format!(
            "<a href=\"{base}{}\" rel=\"prev\">← newer</a> ",
            page - 1
        ));
    }
    html.push_str(&format!("<span>page {page} of {pages}</span>"));
    if page < pages {
        html.push_str(&format!(
            " <a href=\"{base}{}\" rel=\"next\">older →</a>",
            page + 1
        ));
    }
    html.push_str("</nav>");
    html
}
