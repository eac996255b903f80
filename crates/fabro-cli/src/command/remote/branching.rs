//! `fabro fork RUN --server URL` and `fabro rewind RUN --server URL` (SPEC 20.2, 20.3):
//! the server forks or rewinds the run; a fork is then followed as `fabro run --server`
//! follows a run.

use fabro_api::{ForkRequest, RewindRequest};
use fabro_engine::configuration::CostLimit;

use super::{answer_labels, follow, not_remote, print_detached, refused, remote, Signals, Started};
use crate::args::{ForkArgs, RewindArgs};
use crate::error::{CliError, Status};
use crate::output::Output;

/// `fabro fork RUN --server URL`: the flags go into the fork request; `--workflow` is
/// sent as an absolute path, which the server must see (SPEC 14.2).
pub(crate) fn fork(url: &str, args: &ForkArgs, output: &mut Output) -> Result<Status, CliError> {
    if args.detached_worker {
        return Err(not_remote("--detached-worker"));
    }
    let request = ForkRequest {
        at: args.at.clone(),
        at_rank: args.at_rank,
        run_id: args.run_id.clone(),
        workflow: args.workflow.as_ref().map(|path| {
            std::path::absolute(path)
                .unwrap_or_else(|_| path.clone())
                .display()
                .to_string()
        }),
        auto_approve: args.stages.auto_approve,
        answers: answer_labels(&args.stages.answers)?,
        model: args.stages.model.clone(),
        provider: args.stages.provider.clone(),
        max_stages: args.stages.max_stages,
        max_tokens: args.stages.max_tokens,
        max_cost_usd: args.stages.max_cost.map(CostLimit::usd),
        max_duration: args.stages.max_duration.clone(),
    };
    let remote = remote(url);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(CliError::Runtime)?;
    runtime.block_on(async {
        let signals = if args.detach { None } else { Signals::catch() };
        let run_id = remote
            .fork(&args.run, &request)
            .await
            .map_err(refused)?
            .run_id;
        if args.detach {
            return print_detached(&remote, &run_id, output).await;
        }
        let started = Started {
            run_id: &run_id,
            after: None,
            workflow: None,
        };
        follow(&remote, started, args.json, signals, output).await
    })
}

/// `fabro rewind RUN --server URL`.
pub(crate) fn rewind(
    url: &str,
    args: &RewindArgs,
    output: &mut Output,
) -> Result<Status, CliError> {
    let request = RewindRequest {
        to: args.to.clone(),
        to_rank: args.to_rank,
    };
    let remote = remote(url);
    let rewound =
        super::block_on(async { remote.rewind(&args.run, &request).await.map_err(refused) })?;
    crate::command::rewind::print(&rewound, args.json, output)
}
