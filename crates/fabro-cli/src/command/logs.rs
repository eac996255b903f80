//! `fabro logs RUN [NODE] [--follow]` (SPEC 17.4): the output of a stage, found and read
//! by `fabro_engine::local::read_output`; with `--follow`, printed as the stage writes it.

use std::time::Duration;

use fabro_engine::local::{follow_stage, latest_stage, read_output};

use crate::args::LogsArgs;
use crate::command::resolve_run;
use crate::error::{CliError, Status};
use crate::output::Output;

/// How often `--follow` looks for new output: well under a second, so lines appear
/// while the command runs.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

pub(crate) fn run(args: &LogsArgs, output: &mut Output) -> Result<Status, CliError> {
    let record = resolve_run(&args.run)?;
    let node = args.node.as_deref();
    let fail = |error: &dyn std::error::Error| CliError::Usage(fabro_engine::error_chain(error));
    if args.follow {
        follow_stage(
            &record.run_id,
            &record.run_dir,
            node,
            POLL_INTERVAL,
            &mut |bytes| output.out_bytes(bytes),
        )
        .map_err(|error| fail(&error))?;
    } else {
        let stage =
            latest_stage(&record.run_id, &record.run_dir, node).map_err(|error| fail(&error))?;
        output.out_bytes(&read_output(&stage).map_err(|error| fail(&error))?);
    }
    Ok(Status::Success)
}
