//! `fabro dump RUN -o DIR` (SPEC 12.1): export a run's records and the blobs they
//! refer to. A non-empty DIR exits 2; a blob missing from the store exits 1.

use fabro_engine::local::{dump_run, DumpError};
use fabro_engine::FsBlobStore;

use crate::args::DumpArgs;
use crate::command::resolve_run;
use crate::error::{CliError, Status};
use crate::loader::fabro_home;
use crate::output::Output;

pub(crate) fn run(args: &DumpArgs, output: &mut Output) -> Result<Status, CliError> {
    let record = resolve_run(&args.run)?;
    let blobs = FsBlobStore::new(&fabro_home());
    match dump_run(&record.run_id, &record.run_dir, &blobs, &args.output) {
        Ok(summary) => {
            output.err(&format!(
                "dumped run {} to {}: {} files, {} blobs\n",
                record.run_id,
                args.output.display(),
                summary.files,
                summary.blobs
            ));
            Ok(Status::Success)
        }
        Err(error @ DumpError::MissingBlob { .. }) => {
            output.err(&format!("error: {error}\n"));
            Ok(Status::Failure)
        }
        Err(error) => Err(CliError::Dump(error)),
    }
}
