//! `fabro fork RUN [--at NODE[@VISIT] | --at-rank N] [--run-id ID] [--workflow FILE]`
//! (SPEC 20.2): a new run from a checkpoint of an existing one, executed and reported
//! like `fabro run`, with the options of `fabro resume`.

use fabro_engine::{fork, new_run_id, ForkRequest, RunId, RunOrigin, StagePoint, Stores};

use crate::args::ForkArgs;
use crate::command::resolve_run;
use crate::command::run::{
    allocated_id, console_interviewer, detached_interviewer, execute_or_detach, stage_overrides,
};
use crate::error::{CliError, Status};
use crate::loader::{fabro_home, FsLoader};
use crate::output::Output;

/// The stage of `--at NODE[@VISIT]` or `--at-rank N` (clap lets only one through).
pub(crate) fn stage_point(node: Option<&str>, rank: Option<u32>) -> Option<StagePoint> {
    match (node, rank) {
        (Some(node), _) => Some(StagePoint::parse_node(node)),
        (None, Some(rank)) => Some(StagePoint::Rank(rank)),
        (None, None) => None,
    }
}

pub(crate) fn run(args: &ForkArgs, output: &mut Output) -> Result<Status, CliError> {
    let home = fabro_home();
    let source = resolve_run(&args.run)?.run_id;
    // With `--detach`, the id is allocated here, so that it can be printed at once.
    let mut run_id = args.run_id.clone();
    if args.detach {
        run_id.get_or_insert_with(new_run_id);
    }
    let interviewer = if args.detached_worker {
        Some(detached_interviewer(
            &home,
            run_id.as_deref().unwrap_or_default(),
        ))
    } else {
        console_interviewer()
    };
    let request = ForkRequest {
        fabro_home: home.clone(),
        at: stage_point(args.at.as_deref(), args.at_rank),
        run_id: run_id.clone(),
        workflow: args
            .workflow
            .as_ref()
            .map(|path| std::path::absolute(path).unwrap_or_else(|_| path.clone())),
        loader: &FsLoader,
        detached_worker: args.detached_worker,
        origin: RunOrigin::Cli,
        overrides: stage_overrides(&args.stages, interviewer)?,
    };
    let prepared = fork(Stores::local(&home), &RunId::from(source.as_str()), request);
    let extra = allocated_id(args.run_id.as_ref(), run_id);
    execute_or_detach(prepared, args.detach, args.json, extra, output)
}
