//! `fabro steer RUN TEXT [--next]` (SPEC 20.1): sends guidance to the agent stage a run
//! on this machine is running, through its run directory, and waits until the run has
//! accepted it; exit 2 when no agent stage that takes steering runs (unless `--next`).

use std::time::Duration;

use std::sync::Arc;

use fabro_engine::{
    steer_elsewhere, FsRunStore, RunId, RunStore, Steered, SteeringSource, WhenNoAgent,
};

use crate::args::SteerArgs;
use crate::command::resolve_run;
use crate::error::{CliError, Status};
use crate::output::Output;

/// How long to wait for the run to accept the message (it looks every 100 ms).
const PATIENCE: Duration = Duration::from_secs(30);

pub(crate) fn run(args: &SteerArgs, output: &mut Output) -> Result<Status, CliError> {
    let record = resolve_run(&args.run)?;
    let runs: Arc<dyn RunStore> = Arc::new(FsRunStore::new(&crate::loader::fabro_home()));
    let steered = steer_elsewhere(
        &runs,
        &RunId::from(record.run_id.as_str()),
        &record.run_dir,
        &args.text,
        SteeringSource::Cli,
        when(args.next),
        PATIENCE,
    )
    .map_err(|error| CliError::Usage(fabro_engine::error_chain(&error)))?;
    output.out(&accepted(&record.run_id, &steered));
    Ok(Status::Success)
}

/// `--next` as the engine's choice.
fn when(next: bool) -> WhenNoAgent {
    if next {
        WhenNoAgent::WaitForNext
    } else {
        WhenNoAgent::Refuse
    }
}

/// The line printed for an accepted message.
pub(crate) fn accepted(run_id: &str, steered: &Steered) -> String {
    match &steered.node_id {
        Some(node_id) => format!("queued for agent stage {node_id} of run {run_id}\n"),
        None => format!("queued for the next agent stage of run {run_id}\n"),
    }
}
