//! `fabro cancel RUN` for local runs (SPEC 14.2): signals the process holding the run
//! lock with SIGINT, as a first Ctrl-C would, and waits until the run has stopped.
//! Exit 0 when the run ended canceled, 2 when it is not running or unknown.

use std::time::{Duration, Instant};

use fabro_engine::local::{lock_pid, RunLock};
use fabro_engine::RunStatus;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::args::CancelArgs;
use crate::command::resolve_run;
use crate::error::{CliError, Status};
use crate::output::Output;

/// How long a cancelled run may take to stop (its stage has 2 s to end, SPEC 4.3, then
/// it writes its final checkpoint).
const PATIENCE: Duration = Duration::from_secs(30);

pub(crate) fn run(args: &CancelArgs, output: &mut Output) -> Result<Status, CliError> {
    let record = resolve_run(&args.run)?;
    let run_id = &record.run_id;
    let not_running = |status: RunStatus| {
        CliError::Usage(format!(
            "run {run_id} is not running (status {})",
            status.as_str()
        ))
    };
    if record.status != RunStatus::Running {
        return Err(not_running(record.status));
    }
    let pid = lock_pid(&record.run_dir)
        .and_then(|pid| i32::try_from(pid).ok())
        .filter(|_| RunLock::is_held(&record.run_dir))
        .ok_or_else(|| not_running(RunStatus::Interrupted))?;
    kill(Pid::from_raw(pid), Signal::SIGINT).map_err(|error| {
        CliError::Usage(format!("cannot signal run {run_id} (pid {pid}): {error}"))
    })?;
    let deadline = Instant::now() + PATIENCE;
    while RunLock::is_held(&record.run_dir) {
        if Instant::now() >= deadline {
            return Err(CliError::Usage(format!(
                "run {run_id} did not stop within {}s of SIGINT (pid {pid})",
                PATIENCE.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = resolve_run(run_id)?.status;
    if status != RunStatus::Canceled {
        return Err(CliError::Usage(format!(
            "run {run_id} ended with status {} before it was cancelled",
            status.as_str()
        )));
    }
    output.out(&format!("canceled run {run_id}\n"));
    Ok(Status::Success)
}
