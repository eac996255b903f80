//! `fabro rewind RUN --to NODE[@VISIT] | --to-rank N` (SPEC 20.3): move a run that is
//! not running back to the checkpoint written after one of its stages; `fabro resume`
//! continues from there.

use fabro_api::Rewound;
use fabro_engine::{rewind, RewindRequest, RunId, StagePoint, Stores};

use crate::args::RewindArgs;
use crate::command::fork::stage_point;
use crate::command::{json_document, resolve_run};
use crate::error::{CliError, Status};
use crate::loader::fabro_home;
use crate::output::Output;

pub(crate) fn run(args: &RewindArgs, output: &mut Output) -> Result<Status, CliError> {
    let home = fabro_home();
    let run_id = resolve_run(&args.run)?.run_id;
    let request = RewindRequest {
        fabro_home: home.clone(),
        to: target(args)?,
    };
    let rewound = rewind(
        &Stores::local(&home),
        &RunId::from(run_id.as_str()),
        request,
    )?;
    print(
        &Rewound {
            run_id: rewound.run_id,
            k: rewound.k,
            to_rank: rewound.to_rank,
            node_id: rewound.node_id,
            visit: rewound.visit,
        },
        args.json,
        output,
    )
}

/// The stage of `--to` or `--to-rank` (clap requires one of them).
pub(crate) fn target(args: &RewindArgs) -> Result<StagePoint, CliError> {
    stage_point(args.to.as_deref(), args.to_rank)
        .ok_or_else(|| CliError::Usage("give --to NODE[@VISIT] or --to-rank N".to_owned()))
}

/// What a rewind did, locally or in a server: a line on stdout (or the JSON document)
/// and how to continue on stderr.
pub(crate) fn print(
    rewound: &Rewound,
    json: bool,
    output: &mut Output,
) -> Result<Status, CliError> {
    if json {
        output.out(&json_document(rewound)?);
    } else {
        output.out(&format!(
            "rewound run {} to stage {} ({}@{}), rewind {}\n",
            rewound.run_id, rewound.to_rank, rewound.node_id, rewound.visit, rewound.k
        ));
        output.err(&format!("resume with: fabro resume {}\n", rewound.run_id));
    }
    Ok(Status::Success)
}
