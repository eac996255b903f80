//! `fabro-bench repositories [RUNS]` (issue 32, SPEC 18.3): what a repository named by URL
//! costs a run on a worker, against the same run in a local checkout. One `fabro worker`
//! (concurrency 1) on PostgreSQL (127.0.0.1:5432) executes RUNS runs (default 10) of a
//! ten-stage workflow one after the other, alternating (A) a run in a clean local
//! checkout (git checkpoints, nothing pushed) and (B) a run on the same repository by URL
//! (a bare repository path: the worker's mirror is fetched, the tree checked out, and
//! both refs pushed after every checkpoint). Each run is timed from its claim to its end
//! by the database's clock; the medians, their ratio and the difference per stage.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use fabro_engine::{QueuedStart, RunId, RunQueue};

use crate::server::median;
use crate::shared::{psql, Database};
use crate::workers::{store, wait_for, Worker};

type Result<T> = std::result::Result<T, String>;

/// Stages of the workflow.
const STAGES: usize = 10;

/// Runs the benchmark; returns the Markdown for `docs/benchmarks.md`.
pub(crate) fn repositories_benchmark(fabro: &Path, runs: usize) -> Result<String> {
    let directory =
        std::env::temp_dir().join(format!("fabro-repositories-bench-{}", std::process::id()));
    let result = measure(fabro, &directory, runs.max(2));
    let _ = fs_err::remove_dir_all(&directory);
    result
}

fn git(dir: &Path, args: &[&str]) -> Result<()> {
    let status = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@fabro.invalid")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@fabro.invalid")
        .status()
        .map_err(|error| format!("cannot run git: {error}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("git {args:?} failed"))
    }
}

fn measure(fabro: &Path, directory: &Path, runs: usize) -> Result<String> {
    let checkout = directory.join("work");
    fs_err::create_dir_all(&checkout).map_err(|error| error.to_string())?;
    let mut nodes = String::new();
    let mut chain = String::from("start");
    for stage in 1..=STAGES {
        nodes.push_str(&format!(
            "  s{stage} [shape=parallelogram, script=\"echo s{stage} >> out.txt\"]\n"
        ));
        chain.push_str(&format!(" -> s{stage}"));
    }
    fs_err::write(
        checkout.join("flow.fabro"),
        format!(
            "digraph flow {{\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n{nodes}  {chain} -> exit\n}}\n"
        ),
    )
    .map_err(|error| error.to_string())?;
    git(&checkout, &["init", "-q", "-b", "main"])?;
    git(&checkout, &["add", "-A"])?;
    git(&checkout, &["commit", "-q", "-m", "flow"])?;
    let remote = directory.join("remote.git");
    git(
        &checkout,
        &["clone", "-q", "--bare", ".", &remote.display().to_string()],
    )?;
    let database = Database::create()?;
    let store = store(&database)?;
    let worker = Worker::start(fabro, directory, &database, "bench")?;
    let (mut local, mut by_url) = (Vec::new(), Vec::new());
    for index in 0..runs {
        let run_id = format!("r{index:03}");
        let request = if index % 2 == 0 {
            serde_json::json!({
                "workflow": checkout.join("flow.fabro").display().to_string(),
                "work_dir": checkout.display().to_string(),
                "run_id": run_id,
            })
        } else {
            serde_json::json!({
                "repository": {"url": remote.display().to_string(), "ref": "main"},
                "workflow": "flow.fabro",
                "run_id": run_id,
            })
        };
        store
            .enqueue(&QueuedStart {
                run_id: RunId::from(run_id.as_str()),
                workflow_name: "flow".to_owned(),
                workflow_path: "flow.fabro".to_owned(),
                goal: String::new(),
                priority: 0,
                request: request.to_string(),
            })
            .map_err(|error| error.to_string())?;
        wait_for(
            &database,
            &format!("SELECT status FROM runs WHERE run_id = '{run_id}'"),
            "success",
            Duration::from_secs(120),
        )?;
        let seconds: f64 = psql(
            database.name(),
            &format!(
                "SELECT extract(epoch FROM finished_at::timestamptz - claimed_at) FROM runs WHERE run_id = '{run_id}'"
            ),
        )?
        .parse()
        .map_err(|error| format!("a duration: {error}"))?;
        if index % 2 == 0 {
            local.push(seconds);
        } else {
            by_url.push(seconds);
        }
    }
    drop(worker);
    let (local, by_url) = (median(&mut local), median(&mut by_url));
    Ok(format!(
        "Repositories by URL, {runs} runs of {STAGES} command stages on one worker, alternating: median from claim to end (A) in a local checkout {:.0} ms, (B) by URL {:.0} ms; B/A {:.2}x, {:.1} ms more per stage (the fetch and checkout of the claim, a push per checkpoint).\n",
        local * 1000.0,
        by_url * 1000.0,
        by_url / local,
        (by_url - local) * 1000.0 / STAGES as f64
    ))
}
