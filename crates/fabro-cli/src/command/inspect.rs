//! `fabro inspect RUN [--json]` (SPEC 12.1): a run's summary from the index, its
//! manifest and checkpoint, then one row per stage from `stages/*/status.json`, sorted
//! by rank, with totals.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::time::SystemTime;

use fabro_engine::record::StageStatusFile;
use fabro_engine::run_index::{read_manifest, RunRecord, RunStatus};
use serde_json::Value;

use crate::args::InspectArgs;
use crate::command::{format_elapsed, index_error, json_document, render_table, resolve_run};
use crate::error::{CliError, Status};
use crate::output::Output;
use crate::view::{InspectView, StageView, TotalsView};

pub(crate) fn run(args: &InspectArgs, output: &mut Output) -> Result<Status, CliError> {
    let record = resolve_run(&args.run)?;
    let view = inspect(record)?;
    if args.json {
        output.out(&json_document(&view)?);
    } else {
        output.out(&render(&view));
    }
    Ok(Status::Success)
}

fn inspect(record: RunRecord) -> Result<InspectView, CliError> {
    let manifest = read_manifest(&record.run_dir).map_err(index_error)?;
    let checkpoint = read_checkpoint(&record.run_dir);
    let checkpoint_field = |key: &str| {
        checkpoint
            .as_ref()
            .and_then(|checkpoint| checkpoint.get(key))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let stages = read_stages(&record.run_dir, record.status);
    // SPEC 17.7: while a stage runs, its node is the current one.
    let running_node = stages
        .iter()
        .rfind(|stage| stage.status == "running")
        .map(|stage| stage.node_id.clone());
    let totals = totals(&stages);
    let duration_ms = record
        .duration(SystemTime::now())
        .map(|duration| u64::try_from(duration.as_millis()).unwrap_or(u64::MAX));
    Ok(InspectView {
        current_node: running_node.or_else(|| checkpoint_field("current_node")),
        next_node_id: checkpoint_field("next_node_id"),
        run_dir: record.run_dir.display().to_string(),
        status: record.status.as_str(),
        run_id: record.run_id,
        workflow_name: record.workflow_name,
        workflow_path: record.workflow_path,
        goal: record.goal,
        started_at: record.started_at,
        finished_at: record.finished_at,
        duration_ms,
        base_sha: manifest.base_sha,
        run_branch: manifest.run_branch,
        simulated_llm: manifest.simulated_llm,
        dry_run: manifest.dry_run,
        parent_run_id: record.parent_run_id,
        stages,
        totals,
    })
}

/// `checkpoint.json` as loose JSON: inspect reads two fields and must not fail on a
/// checkpoint of another version.
fn read_checkpoint(run_dir: &Path) -> Option<Value> {
    let text = fs_err::read_to_string(run_dir.join("checkpoint.json")).ok()?;
    serde_json::from_str(&text).ok()
}

/// One row per stage directory, sorted by rank (then node and visit). Directories whose
/// name is not `{rank}-{node_id}@{visit}` are not stages and are skipped.
fn read_stages(run_dir: &Path, run_status: RunStatus) -> Vec<StageView> {
    let Ok(entries) = fs_err::read_dir(run_dir.join("stages")) else {
        return Vec::new();
    };
    let now = SystemTime::now();
    let started = if run_status == RunStatus::Running {
        stage_start_times(run_dir)
    } else {
        HashMap::new()
    };
    let mut stages: Vec<StageView> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_str()?.to_owned();
            let (rank, node_id, visit) = parse_stage_dir(&name)?;
            let status = fs_err::read_to_string(entry.path().join("status.json"))
                .ok()
                .and_then(|text| serde_json::from_str::<StageStatusFile>(&text).ok());
            Some(match status {
                Some(status) => finished_stage(status),
                None => StageView {
                    rank,
                    node_id: node_id.to_owned(),
                    visit,
                    handler: None,
                    status: if run_status == RunStatus::Running {
                        "running"
                    } else {
                        "incomplete"
                    }
                    .to_owned(),
                    attempts: None,
                    // SPEC 17.7: a running stage's elapsed time.
                    duration_ms: started
                        .get(&rank)
                        .filter(|_| run_status == RunStatus::Running)
                        .and_then(|started| now.duration_since(*started).ok())
                        .map(|elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)),
                    tokens: None,
                    input_tokens: None,
                    output_tokens: None,
                    cost_usd: None,
                    files_touched: Vec::new(),
                },
            })
        })
        .collect();
    stages.sort_by(|left, right| {
        (left.rank, &left.node_id, left.visit).cmp(&(right.rank, &right.node_id, right.visit))
    });
    stages
}

/// How much of the end of `events.jsonl` is read for the start times of running stages.
const EVENTS_TAIL_BYTES: u64 = 1 << 20;

/// When the stages of the newest `StageStarted` events started, by rank, from the end
/// of the run's `events.jsonl` (a running stage is among the newest events).
fn stage_start_times(run_dir: &Path) -> HashMap<u32, SystemTime> {
    use std::io::{Read, Seek, SeekFrom};

    let mut times = HashMap::new();
    let Ok(mut file) = fs_err::File::open(run_dir.join("events.jsonl")) else {
        return times;
    };
    let length = file.metadata().map(|metadata| metadata.len()).unwrap_or(0);
    let mut bytes = Vec::new();
    if file
        .seek(SeekFrom::Start(length.saturating_sub(EVENTS_TAIL_BYTES)))
        .and_then(|_| file.read_to_end(&mut bytes))
        .is_err()
    {
        return times;
    }
    for line in String::from_utf8_lossy(&bytes).lines() {
        if !line.contains("\"StageStarted\"") {
            continue;
        }
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let rank = event["properties"]["rank"]
            .as_u64()
            .and_then(|rank| u32::try_from(rank).ok());
        let time = event["ts"].as_str().and_then(fabro_engine::parse_rfc3339);
        if let (Some(rank), Some(time)) = (rank, time) {
            times.insert(rank, time);
        }
    }
    times
}

fn finished_stage(status: StageStatusFile) -> StageView {
    let usage = status.usage;
    StageView {
        rank: status.rank,
        node_id: status.node_id,
        visit: status.visit,
        handler: Some(status.handler),
        status: status.status.as_str().to_owned(),
        attempts: Some(status.attempt),
        duration_ms: Some(status.duration_ms),
        tokens: usage.map(|usage| usage.input_tokens.saturating_add(usage.output_tokens)),
        input_tokens: usage.map(|usage| usage.input_tokens),
        output_tokens: usage.map(|usage| usage.output_tokens),
        cost_usd: usage.and_then(|usage| usage.cost_usd),
        files_touched: status.files_touched,
    }
}

/// `007-plan@2` → (7, "plan", 2).
fn parse_stage_dir(name: &str) -> Option<(u32, &str, u32)> {
    let (rank, rest) = name.split_once('-')?;
    let (node_id, visit) = rest.rsplit_once('@')?;
    if node_id.is_empty() {
        return None;
    }
    Some((rank.parse().ok()?, node_id, visit.parse().ok()?))
}

fn totals(stages: &[StageView]) -> TotalsView {
    let sum = |field: fn(&StageView) -> Option<u64>| {
        stages
            .iter()
            .filter_map(field)
            .fold(0_u64, u64::saturating_add)
    };
    let costs: Vec<f64> = stages.iter().filter_map(|stage| stage.cost_usd).collect();
    let files: BTreeSet<&String> = stages
        .iter()
        .flat_map(|stage| &stage.files_touched)
        .collect();
    TotalsView {
        stages: stages.len(),
        attempts: sum(|stage| stage.attempts.map(u64::from)),
        duration_ms: sum(|stage| stage.duration_ms),
        tokens: sum(|stage| stage.tokens),
        input_tokens: sum(|stage| stage.input_tokens),
        output_tokens: sum(|stage| stage.output_tokens),
        cost_usd: (!costs.is_empty()).then(|| costs.iter().sum()),
        files_touched: files.into_iter().cloned().collect(),
    }
}

/// The human summary: `label: value` lines, a blank line, then the stage table.
fn render(view: &InspectView) -> String {
    let dash = |value: Option<&str>| value.unwrap_or("-").to_owned();
    let mut text = String::new();
    let mut line = |label: &str, value: String| text.push_str(&format!("{label}: {value}\n"));
    line("run id", view.run_id.clone());
    line(
        "workflow",
        format!("{} ({})", view.workflow_name, view.workflow_path),
    );
    line("goal", view.goal.clone());
    line("status", view.status.to_owned());
    line("started", view.started_at.clone());
    line("finished", dash(view.finished_at.as_deref()));
    line(
        "duration",
        view.duration_ms.map_or_else(|| "-".to_owned(), elapsed),
    );
    line("run dir", view.run_dir.clone());
    line("base SHA", dash(view.base_sha.as_deref()));
    line("run branch", dash(view.run_branch.as_deref()));
    if view.simulated_llm {
        line("simulated LLM", "yes".to_owned());
    }
    line("current node", dash(view.current_node.as_deref()));
    line("next node", dash(view.next_node_id.as_deref()));
    text.push('\n');
    let mut rows: Vec<Vec<String>> = view
        .stages
        .iter()
        .map(|stage| {
            vec![
                stage.rank.to_string(),
                stage.node_id.clone(),
                stage.visit.to_string(),
                dash(stage.handler.as_deref()),
                stage.status.clone(),
                stage
                    .attempts
                    .map_or_else(|| "-".to_owned(), |attempts| attempts.to_string()),
                stage.duration_ms.map_or_else(|| "-".to_owned(), elapsed),
                stage
                    .tokens
                    .map_or_else(|| "-".to_owned(), |tokens| tokens.to_string()),
                cost(stage.cost_usd),
                stage.files_touched.len().to_string(),
            ]
        })
        .collect();
    let totals = &view.totals;
    rows.push(vec![
        "total".to_owned(),
        format!(
            "{} stage{}",
            totals.stages,
            if totals.stages == 1 { "" } else { "s" }
        ),
        String::new(),
        String::new(),
        String::new(),
        totals.attempts.to_string(),
        elapsed(totals.duration_ms),
        totals.tokens.to_string(),
        cost(totals.cost_usd),
        totals.files_touched.len().to_string(),
    ]);
    text.push_str(&render_table(
        &[
            "RANK", "NODE", "VISIT", "HANDLER", "STATUS", "ATTEMPTS", "DURATION", "TOKENS", "COST",
            "FILES",
        ],
        &rows,
    ));
    text
}

fn elapsed(milliseconds: u64) -> String {
    format_elapsed(std::time::Duration::from_millis(milliseconds))
}

fn cost(cost_usd: Option<f64>) -> String {
    cost_usd.map_or_else(|| "-".to_owned(), |cost| format!("${cost:.4}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_directory_names_give_rank_node_and_visit() {
        let check = |name: &str, expected: Option<(u32, &str, u32)>| {
            assert_eq!(parse_stage_dir(name), expected, "{name}");
        };
        check("007-plan@2", Some((7, "plan", 2)));
        check("1234-a-b@c@10", Some((1234, "a-b@c", 10)));
        check("001-@1", None);
        check("x-plan@1", None);
        check("001-plan", None);
        check("001-plan@", None);
    }
}
