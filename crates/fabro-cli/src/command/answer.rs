//! `fabro answer RUN LABEL [--text T]` (SPEC 17.4, 14.2): answers the pending human
//! question of a detached run through its answer files; exit 2 when no question is
//! pending or nothing matches.

use std::time::Duration;

use fabro_engine::local::{answer_pending, AnswerFileError};

use crate::args::AnswerArgs;
use crate::command::resolve_run;
use crate::error::{CliError, Status};
use crate::output::Output;

/// How long to wait for the run to take the answer (it looks every 50 ms).
const PATIENCE: Duration = Duration::from_secs(30);

pub(crate) fn run(args: &AnswerArgs, output: &mut Output) -> Result<Status, CliError> {
    let record = resolve_run(&args.run)?;
    let answered = answer_pending(&record.run_dir, &args.label, args.text.as_deref(), PATIENCE);
    match answered {
        Ok((question, answer)) => {
            output.out(&format!(
                "{} → {}\n",
                question.node_id(),
                question.describe(&answer)
            ));
            Ok(Status::Success)
        }
        Err(AnswerFileError::NoQuestion) => Err(CliError::Usage(format!(
            "run {} has no pending human question",
            record.run_id
        ))),
        Err(error) => Err(CliError::Usage(fabro_engine::error_chain(&error))),
    }
}
