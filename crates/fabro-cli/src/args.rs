//! Command-line arguments (SPEC 12.1).

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// fabro: run AI coding workflows defined as Graphviz graphs.
#[derive(Debug, Parser)]
#[command(name = "fabro", version, about, propagate_version = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Parse and lint a workflow; exit 1 when it has errors.
    Validate(ValidateArgs),
    /// Render a workflow as SVG (built-in layout) or normalised DOT.
    Graph(GraphArgs),
    /// Validate, then execute a workflow.
    Run(RunArgs),
    /// Continue an interrupted or cancelled run from its newest complete checkpoint.
    Resume(ResumeArgs),
    /// Start a new run from a checkpoint of an existing run (any status).
    Fork(ForkArgs),
    /// Move a run that is not running back to the checkpoint after one of its stages.
    Rewind(RewindArgs),
    /// List runs, newest first.
    Runs(RunsArgs),
    /// Summarise one run: status, times, and one row per stage.
    Inspect(InspectArgs),
    /// Print the events of a run.
    Events(EventsArgs),
    /// Export a run's stages, records and referenced blobs into a directory.
    Dump(DumpArgs),
    /// Print the output of a stage: command logs, an LLM response or a gate's answer.
    Logs(LogsArgs),
    /// Show the changes of a stage, or of a whole run, as a unified diff.
    Diff(DiffArgs),
    /// Remove old finished runs with their branches, refs, worktrees and unused blobs.
    Gc(GcArgs),
    /// The model catalog.
    Model(ModelArgs),
    /// Answer the pending human question of a detached run.
    Answer(AnswerArgs),
    /// Cancel a running run (as its first Ctrl-C would); it can be resumed.
    Cancel(CancelArgs),
    /// Send guidance to the agent stage a run is running.
    Steer(SteerArgs),
    /// Serve the HTTP API (and the page at /) over the runs of $FABRO_HOME.
    Server(ServerArgs),
    /// Manage a shared store (PostgreSQL, SPEC 18.1).
    Store(StoreArgs),
    /// Execute the queued runs of a shared store, under leases (SPEC 18.2).
    Worker(WorkerArgs),
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  fabro worker --store postgres://fabro@db.internal/fabro --blobs s3://fabro-blobs/team
  fabro worker --concurrency 8 --name build-1      eight runs at once, as build-1
  fabro worker --lease-ttl 10s                     another worker takes over 10s after a crash

Exit codes:
  0    stopped by SIGINT or SIGTERM after handing its runs back to the queue
  2    usage error, or the --store cannot be reached or has a schema newer than this fabro")]
pub(crate) struct WorkerArgs {
    /// The shared store: `postgres://…` (default: $FABRO_STORE, else `[store] url` of
    /// server.toml).
    #[arg(long, value_name = "URL")]
    pub(crate) store: Option<String>,
    /// Blob store beside --store: s3://bucket/prefix or file:///path (default:
    /// $FABRO_BLOBS, else `[store] blobs` of server.toml).
    #[arg(long, value_name = "URL")]
    pub(crate) blobs: Option<String>,
    /// Runs executed at once (default 4).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) concurrency: Option<u16>,
    /// The worker's name among the store's workers (default: HOST-PID).
    #[arg(long, value_name = "NAME")]
    pub(crate) name: Option<String>,
    /// Where run directories and worktrees are made (default: $FABRO_HOME/worker).
    #[arg(long, value_name = "DIR")]
    pub(crate) state_dir: Option<std::path::PathBuf>,
    /// How long a lease lasts without renewal (default 30s; `[worker] lease_ttl`).
    #[arg(long, value_name = "D", value_parser = parse_lease_ttl)]
    pub(crate) lease_ttl: Option<std::time::Duration>,
    /// Do not upgrade the store's schema; refuse one newer than this binary.
    #[arg(long)]
    pub(crate) no_migrate: bool,
}

fn parse_lease_ttl(text: &str) -> Result<std::time::Duration, String> {
    fabro_language::value::parse_duration(text)
        .filter(|ttl| *ttl >= std::time::Duration::from_secs(1))
        .ok_or_else(|| format!("'{text}' is not a lease duration (examples: 30s, 2m; at least 1s)"))
}

#[derive(Debug, clap::Args)]
pub(crate) struct StoreArgs {
    #[command(subcommand)]
    pub(crate) command: StoreCommand,
}

#[derive(Debug, Subcommand)]
pub(crate) enum StoreCommand {
    /// Create or upgrade the shared store's schema (versioned migrations).
    #[command(after_help = "Examples:
  fabro store migrate --store postgres://fabro@db.internal/fabro
  fabro store migrate                   the store named by FABRO_STORE

Exit codes:
  0    the schema is at this fabro's version
  2    no store named, the store cannot be reached, or its schema is newer than this fabro")]
    Migrate {
        /// The store: `postgres://…` (the password from the URL, PGPASSWORD or
        /// .pgpass); default: $FABRO_STORE.
        #[arg(long, value_name = "URL")]
        store: Option<String>,
    },
    /// Copy the runs of $FABRO_HOME that are not running or queued, and its blobs, into a
    /// shared store (ids kept; a run already there is skipped).
    #[command(after_help = "Examples:
  fabro store import --store postgres://fabro@db.internal/fabro --blobs s3://fabro-blobs/team
  fabro store import                    the stores named by FABRO_STORE and FABRO_BLOBS

Exit codes:
  0    every run that is not running or queued is in the store
  1    a run or a blob could not be read (each is named on stderr); the others are imported
  2    no store named, the store cannot be reached or used, or its schema is newer than this fabro")]
    Import {
        /// The store: `postgres://…` (the password from the URL, PGPASSWORD or
        /// .pgpass); default: $FABRO_STORE.
        #[arg(long, value_name = "URL")]
        store: Option<String>,
        /// The store's blobs: s3://bucket/prefix or file:///path (default: $FABRO_BLOBS;
        /// without either the blobs stay in $FABRO_HOME/blobs).
        #[arg(long, value_name = "URL")]
        blobs: Option<String>,
        /// Do not upgrade the store's schema; refuse one newer than this binary.
        #[arg(long)]
        no_migrate: bool,
    },
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  fabro server                                      serve on 127.0.0.1:3210; open the printed link
  fabro server --bind 127.0.0.1:0                   on a free port (the link names it)
  fabro server --max-concurrent-runs 1              one run at a time, the rest queued
                                                    (then: fabro run w.fabro --server URL)

Exit codes:
  0    stopped by SIGINT or SIGTERM after cancelling its running runs
  2    usage or configuration error (server.toml), the address cannot be bound, or the
       --store cannot be reached or has a schema newer than this fabro")]
pub(crate) struct ServerArgs {
    /// Listen address (default from server.toml, else 127.0.0.1:3210).
    #[arg(long, value_name = "ADDR")]
    pub(crate) bind: Option<std::net::SocketAddr>,
    /// Runs executing at once; later ones wait queued (default 4).
    #[arg(long, value_name = "N")]
    pub(crate) max_concurrent_runs: Option<usize>,
    /// Shared PostgreSQL run store (default: $FABRO_STORE, else `[store] url` of
    /// server.toml; else the local files).
    #[arg(long, value_name = "URL")]
    pub(crate) store: Option<String>,
    /// Blob store beside --store: s3://bucket/prefix or file:///path (default:
    /// $FABRO_BLOBS, else `[store] blobs` of server.toml).
    #[arg(long, value_name = "URL")]
    pub(crate) blobs: Option<String>,
    /// Do not upgrade the store's schema; refuse one newer than this binary.
    #[arg(long)]
    pub(crate) no_migrate: bool,
    /// With --store: queue the runs this server accepts for `fabro worker` processes and
    /// execute none here.
    #[arg(long)]
    pub(crate) no_worker: bool,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  fabro answer 01JX4Q A                 choose the option with key A
  fabro answer 01JX4Q Approve           choose it by its label (or target node)
  fabro answer 01JX4Q other --text 'Use the v2 API'
                                        answer through the freeform edge

Exit codes: 0 answered, 2 unknown run, no pending question, or nothing matches")]
pub(crate) struct AnswerArgs {
    /// Run id, or a unique prefix of at least 4 characters.
    pub(crate) run: String,
    /// The option: its key, its label or its target node (or, with --text, the freeform edge).
    pub(crate) label: String,
    /// Free text for the gate's freeform edge, which LABEL names.
    #[arg(long, value_name = "T")]
    pub(crate) text: Option<String>,
    /// Answer through this fabro server (default: $FABRO_SERVER).
    #[arg(long, value_name = "URL")]
    pub(crate) server: Option<String>,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  fabro cancel 01JX4Q                   stop a running run; resume it later
  fabro cancel 01JX4QZ8M3               any unique prefix of at least 4 characters

Exit codes: 0 the run stopped (status canceled), 2 unknown run or a run that is not running")]
pub(crate) struct CancelArgs {
    /// Run id, or a unique prefix of at least 4 characters.
    pub(crate) run: String,
    /// Cancel through this fabro server (default: $FABRO_SERVER).
    #[arg(long, value_name = "URL")]
    pub(crate) server: Option<String>,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  fabro steer 01JX4Q 'Use the v2 API, not v1'
                                        the running agent reads it before its next LLM call
  fabro steer 01JX4Q 'Keep the public names' --next
                                        or the next agent stage, when none runs now

The agent gets one user message [Steering from cli] TEXT after its current round of
tool calls (a running tool is never interrupted); messages sent together arrive
together. An acp agent gets it as a new prompt turn; cli agents cannot be steered.

Exit codes: 0 the run accepted the message, 2 unknown run, no agent stage running
(without --next), a run that is not running, or a cli-backend stage")]
pub(crate) struct SteerArgs {
    /// Run id, or a unique prefix of at least 4 characters.
    pub(crate) run: String,
    /// The guidance.
    pub(crate) text: String,
    /// When no agent stage runs, queue the message for the next one that starts.
    #[arg(long)]
    pub(crate) next: bool,
    /// Steer through this fabro server (default: $FABRO_SERVER).
    #[arg(long, value_name = "URL")]
    pub(crate) server: Option<String>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ModelArgs {
    #[command(subcommand)]
    pub(crate) command: ModelCommand,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ModelCommand {
    /// List the models fabro knows: provider, context window, limits, prices, aliases.
    #[command(after_help = "Examples:
  fabro model list                      the catalog as a table
  fabro model list --json               as one JSON array

Exit codes: 0 printed")]
    List {
        /// Print one JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  fabro runs                            the newest runs (50 on a terminal)
  fabro runs --status running           the runs still going
  fabro runs --status fail --status canceled --limit 10
  fabro runs --json                     every run as one JSON array

Exit codes: 0 listed, 2 bad arguments or an unreadable run index")]
pub(crate) struct RunsArgs {
    /// Print one JSON array instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Only runs with this status: running, success, partial_success, fail, canceled,
    /// interrupted or unreadable (repeatable).
    #[arg(long, value_name = "S", value_parser = parse_run_status)]
    pub(crate) status: Vec<fabro_engine::RunStatus>,
    /// At most N runs, the newest (default: 50 on a terminal, all otherwise).
    #[arg(long, value_name = "N")]
    pub(crate) limit: Option<usize>,
    /// List the runs through this fabro server (default: $FABRO_SERVER).
    #[arg(long, value_name = "URL")]
    pub(crate) server: Option<String>,
}

fn parse_run_status(text: &str) -> Result<fabro_engine::RunStatus, String> {
    use fabro_engine::RunStatus;
    const ALL: [RunStatus; 8] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Success,
        RunStatus::PartialSuccess,
        RunStatus::Fail,
        RunStatus::Canceled,
        RunStatus::Interrupted,
        RunStatus::Unreadable,
    ];
    ALL.into_iter()
        .find(|status| status.as_str() == text)
        .ok_or_else(|| {
            let names: Vec<&str> = ALL.iter().map(|status| status.as_str()).collect();
            format!(
                "'{text}' is not a run status; expected one of: {}",
                names.join(", ")
            )
        })
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  fabro inspect 01JX4Q                  status, times and one row per stage
  fabro inspect 01JX4Q --json           the same as one JSON document

Exit codes: 0 printed, 2 unknown or ambiguous run")]
pub(crate) struct InspectArgs {
    /// Run id, or a unique prefix of at least 4 characters.
    pub(crate) run: String,
    /// Print one JSON document instead of the summary.
    #[arg(long)]
    pub(crate) json: bool,
    /// Inspect the run through this fabro server (default: $FABRO_SERVER).
    #[arg(long, value_name = "URL")]
    pub(crate) server: Option<String>,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  fabro dump 01JX4Q -o run-export       stages, records and referenced blobs

Exit codes: 0 written, 1 a referenced blob is missing, 2 unknown run or a non-empty DIR")]
pub(crate) struct DumpArgs {
    /// Run id, or a unique prefix of at least 4 characters.
    pub(crate) run: String,
    /// Directory to write; it must not exist or be empty.
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub(crate) output: std::path::PathBuf,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  fabro logs 01JX4Q test            output of the latest stage of node `test`
  fabro logs 01JX4Q                 output of the running (or last) stage
  fabro logs 01JX4Q build --follow  print a running command's output as it is written

Exit codes: 0 printed, 2 unknown run or node, or a node that has not run")]
pub(crate) struct LogsArgs {
    /// Run id, or a unique prefix of at least 4 characters.
    pub(crate) run: String,
    /// Node whose latest stage to show; default: the running or last stage.
    pub(crate) node: Option<String>,
    /// Keep printing a running stage's output until the stage ends.
    #[arg(long, short = 'f')]
    pub(crate) follow: bool,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  fabro diff 01JX4Q                 everything the run changed (base SHA to run branch)
  fabro diff 01JX4Q implement       what the latest stage of node `implement` changed
  fabro diff 01JX4Q | git apply     apply the run's changes to your checkout

Exit codes: 0 printed, 2 unknown run or node, or a run without git checkpoints")]
pub(crate) struct DiffArgs {
    /// Run id, or a unique prefix of at least 4 characters.
    pub(crate) run: String,
    /// Node whose latest stage's commit to show; default: the whole run.
    pub(crate) node: Option<String>,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  fabro gc --dry-run                list finished runs older than 30 days
  fabro gc                          remove them, their git refs and unused blobs
  fabro gc --older-than 7d          remove finished runs older than a week

Running, cancelled and interrupted runs are never removed.
Exit codes: 0 done, 2 bad arguments or storage errors")]
pub(crate) struct GcArgs {
    /// Remove finished runs that ended longer ago than this (`30d`, `12h`, `0s`).
    #[arg(long, value_name = "D", default_value = "30d", value_parser = parse_age)]
    pub(crate) older_than: std::time::Duration,
    /// Print what would be removed, remove nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
}

fn parse_age(text: &str) -> Result<std::time::Duration, String> {
    fabro_language::value::parse_duration(text)
        .ok_or_else(|| format!("'{text}' is not a duration (examples: 30d, 12h, 90m, 0s)"))
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  fabro events 01JX4Q                   one line per event
  fabro events 01JX4Q --follow          keep printing until the run ends
  fabro events 01JX4Q --json | jq .event
                                        the stored envelopes (NDJSON)

Exit codes: 0 printed, 1 a followed run was interrupted, 2 unknown run")]
pub(crate) struct EventsArgs {
    /// Run id, or a unique prefix of at least 4 characters.
    pub(crate) run: String,
    /// Keep reading new events until the run's terminal event.
    #[arg(long)]
    pub(crate) follow: bool,
    /// Print the stored event envelopes verbatim (NDJSON).
    #[arg(long)]
    pub(crate) json: bool,
    /// Read the events through this fabro server (default: $FABRO_SERVER).
    #[arg(long, value_name = "URL")]
    pub(crate) server: Option<String>,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  fabro run workflow.fabro                          run it, asking at human gates
  fabro run workflow.fabro --auto-approve --provider simulated
                                                    offline, every gate on its default
  fabro run workflow.fabro --answer review=Approve --var env=staging
  fabro run workflow.fabro --max-stages 200 --max-cost 5
                                                    stop at 200 stages or $5
  fabro run workflow.fabro --detach                 in the background; see fabro answer

Exit codes:
  0    the run ended with status success (or --detach started it)
  1    the run failed: status fail (validation errors, missing credentials, a missing
       blob), a stall timeout, or a budget stop (status canceled)
  2    usage, configuration or I/O error; a refused resume
  3    the run reached exit with status partial_success
  130  cancelled by the user (Ctrl-C, SIGTERM, fabro cancel)")]
pub(crate) struct RunArgs {
    /// Workflow file (.fabro, .dot, .gv), run-config TOML, or a workflow name under .fabro/workflows/.
    pub(crate) workflow: PathBuf,
    /// Override the workflow's goal.
    #[arg(long)]
    pub(crate) goal: Option<String>,
    /// Simulate every handler: no commands, no LLM calls, no side effects.
    #[arg(long)]
    pub(crate) dry_run: bool,
    #[command(flatten)]
    pub(crate) stages: StageArgs,
    /// Run variable K=V (repeatable).
    #[arg(long = "var", value_name = "K=V")]
    pub(crate) vars: Vec<String>,
    /// Run config TOML (SPEC 12.3), above `.fabro/project.toml` and `settings.toml`.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Use this run id instead of a new ULID.
    #[arg(long)]
    pub(crate) run_id: Option<String>,
    /// Refuse to run in a working tree with uncommitted changes (`[run] dirty_worktree =
    /// "refuse"`) instead of running in place.
    #[arg(long)]
    pub(crate) no_in_place: bool,
    /// Start the run in a background process (output in worker.log) and exit.
    #[arg(long)]
    pub(crate) detach: bool,
    /// Internal: the worker of `--detach`, whose run directory the parent created.
    #[arg(long, hide = true)]
    pub(crate) detached_worker: bool,
    /// Print NDJSON events on stdout instead of progress.
    #[arg(long)]
    pub(crate) json: bool,
    /// Run on this fabro server instead of here (default: $FABRO_SERVER).
    #[arg(long, value_name = "URL")]
    pub(crate) server: Option<String>,
    /// With --server on a shared store's queue: runs of a higher priority are claimed
    /// first (default 0).
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub(crate) priority: Option<i32>,
}

/// How stages are answered and which model they use: shared by `run` and `resume`.
#[derive(Debug, clap::Args)]
pub(crate) struct StageArgs {
    /// Answer every human gate with its default choice (or first option).
    #[arg(long)]
    pub(crate) auto_approve: bool,
    /// Answer a human gate: NODE=LABEL (repeatable, consumed in order per node).
    #[arg(long = "answer", value_name = "NODE=LABEL")]
    pub(crate) answers: Vec<String>,
    /// Model for LLM nodes without one of their own.
    #[arg(long)]
    pub(crate) model: Option<String>,
    /// Provider for LLM nodes without one of their own.
    #[arg(long)]
    pub(crate) provider: Option<String>,
    /// Stop the run before it starts more than N stages (`[run] max_stages`, default
    /// 1000; 0: unlimited).
    #[arg(long, value_name = "N")]
    pub(crate) max_stages: Option<u64>,
    /// Stop the run once its LLM calls used N input + output tokens (`[run] max_tokens`).
    #[arg(long, value_name = "N")]
    pub(crate) max_tokens: Option<u64>,
    /// Stop the run once its LLM calls cost USD dollars (`[run] max_cost_usd`).
    #[arg(long, value_name = "USD", value_parser = parse_cost)]
    pub(crate) max_cost: Option<fabro_engine::configuration::CostLimit>,
    /// Stop the run after this much wall time since it (or its resume) started:
    /// `90s`, `30m`, `2h` (`[run] max_duration`).
    #[arg(long, value_name = "D", value_parser = parse_limit_duration)]
    pub(crate) max_duration: Option<String>,
}

fn parse_cost(text: &str) -> Result<fabro_engine::configuration::CostLimit, String> {
    text.parse::<f64>()
        .ok()
        .and_then(fabro_engine::configuration::CostLimit::new)
        .ok_or_else(|| format!("'{text}' is not an amount in USD (examples: 5, 0.50)"))
}

fn parse_limit_duration(text: &str) -> Result<String, String> {
    fabro_language::value::parse_duration(text)
        .map(|_| text.to_owned())
        .ok_or_else(|| format!("'{text}' is not a duration (examples: 90s, 30m, 2h)"))
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  fabro resume 01JX4Q                               continue where the run stopped
  fabro resume 01JX4Q --max-stages 2000             after a budget stop, with more room
  fabro resume fabro/run/01JX4QZ8M3                 from the run branch in git

Exit codes:
  0    the run ended with status success (or --detach started it)
  1    the run failed: status fail (validation errors, missing credentials, a missing
       blob), a stall timeout, or a budget stop (status canceled)
  2    usage, configuration or I/O error; a refused resume
  3    the run reached exit with status partial_success
  130  cancelled by the user (Ctrl-C, SIGTERM, fabro cancel)")]
pub(crate) struct ResumeArgs {
    /// Run id (or unique prefix), checkpoint file, or ref (fabro/run/ID, fabro/meta/ID, refs/fabro/ID).
    pub(crate) target: String,
    #[command(flatten)]
    pub(crate) stages: StageArgs,
    /// Continue the run in a background process (output in worker.log) and exit.
    #[arg(long)]
    pub(crate) detach: bool,
    /// Internal: the worker of `--detach`.
    #[arg(long, hide = true)]
    pub(crate) detached_worker: bool,
    /// Print NDJSON events on stdout instead of progress.
    #[arg(long)]
    pub(crate) json: bool,
    /// Resume on this fabro server instead of here (default: $FABRO_SERVER).
    #[arg(long, value_name = "URL")]
    pub(crate) server: Option<String>,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  fabro fork 01JX4Q                                 a new run from the newest checkpoint
  fabro fork 01JX4Q --at plan                       from the checkpoint after plan's latest visit
  fabro fork 01JX4Q --at review@2 --auto-approve    after review's second visit
  fabro fork 01JX4Q --at-rank 3 --workflow edited.fabro
                                                    run an edited workflow from stage 3 on

Exit codes:
  0    the fork ended with status success (or --detach started it)
  1    the fork failed: status fail, a stall timeout or a budget stop
  2    usage, configuration or I/O error; an unknown run or stage; an edited workflow
       without a node the checkpoint completed
  3    the fork reached exit with status partial_success
  130  cancelled by the user (Ctrl-C, SIGTERM, fabro cancel)")]
pub(crate) struct ForkArgs {
    /// Run id (or unique prefix) of the run to fork.
    pub(crate) run: String,
    /// Fork from the checkpoint written after this stage: NODE (its latest visit) or
    /// NODE@VISIT (default: the newest complete checkpoint).
    #[arg(long, value_name = "NODE[@VISIT]", conflicts_with = "at_rank")]
    pub(crate) at: Option<String>,
    /// Fork from the checkpoint written after the stage of rank N.
    #[arg(long, value_name = "N")]
    pub(crate) at_rank: Option<u32>,
    /// Use this run id instead of a new ULID.
    #[arg(long)]
    pub(crate) run_id: Option<String>,
    /// Run this edited workflow instead of the run's stored one; it must still have
    /// every node the checkpoint completed.
    #[arg(long, value_name = "FILE")]
    pub(crate) workflow: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) stages: StageArgs,
    /// Start the fork in a background process (output in worker.log) and exit.
    #[arg(long)]
    pub(crate) detach: bool,
    /// Internal: the worker of `--detach`.
    #[arg(long, hide = true)]
    pub(crate) detached_worker: bool,
    /// Print NDJSON events on stdout instead of progress.
    #[arg(long)]
    pub(crate) json: bool,
    /// Fork on this fabro server instead of here (default: $FABRO_SERVER).
    #[arg(long, value_name = "URL")]
    pub(crate) server: Option<String>,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  fabro rewind 01JX4Q --to plan                     back to the checkpoint after plan's latest visit
                                                    (then fabro resume 01JX4Q continues from there)
  fabro rewind 01JX4Q --to review@2                 after review's second visit
  fabro rewind 01JX4Q --to-rank 2 --json            after stage 2; the result as JSON

Exit codes: 0 rewound, 2 unknown run or stage, a running run, or a storage failure")]
pub(crate) struct RewindArgs {
    /// Run id, or a unique prefix of at least 4 characters.
    pub(crate) run: String,
    /// The stage to go back to: NODE (its latest visit) or NODE@VISIT.
    #[arg(
        long,
        value_name = "NODE[@VISIT]",
        required_unless_present = "to_rank",
        conflicts_with = "to_rank"
    )]
    pub(crate) to: Option<String>,
    /// The rank of the stage to go back to.
    #[arg(long, value_name = "N")]
    pub(crate) to_rank: Option<u32>,
    /// Print the result as one JSON document.
    #[arg(long)]
    pub(crate) json: bool,
    /// Rewind through this fabro server (default: $FABRO_SERVER).
    #[arg(long, value_name = "URL")]
    pub(crate) server: Option<String>,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  fabro validate workflow.fabro         diagnostics, then `E error(s), W warning(s)`
  fabro validate my-flow                .fabro/workflows/my-flow/workflow.fabro
  fabro validate workflow.fabro --json  one JSON document with nodes and edges

Exit codes: 0 no errors (warnings allowed), 1 errors, 2 usage or I/O problems")]
pub(crate) struct ValidateArgs {
    /// Workflow file (.fabro, .dot, .gv), run-config TOML, or a workflow name under .fabro/workflows/.
    pub(crate) workflow: PathBuf,
    /// Print one JSON document instead of diagnostics lines.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  fabro graph workflow.fabro -o flow.svg   render with the built-in layout
  fabro graph workflow.fabro --format dot  the normalised DOT source

Exit codes: 0 rendered, 1 a parse error, 2 a missing or unreadable file")]
pub(crate) struct GraphArgs {
    /// Workflow file (.fabro, .dot, .gv), run-config TOML, or a workflow name under .fabro/workflows/.
    pub(crate) workflow: PathBuf,
    /// Write to this file instead of stdout.
    #[arg(short = 'o', long = "output")]
    pub(crate) output: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = GraphFormat::Svg)]
    pub(crate) format: GraphFormat,
}

/// Formats of `fabro graph`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum GraphFormat {
    /// SVG from the built-in layered layout.
    Svg,
    /// Normalised DOT text.
    Dot,
}
