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
    /// Serve the HTTP API (and the page at /) over the runs of $FABRO_HOME.
    Server(ServerArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct ServerArgs {
    /// Listen address (default from server.toml, else 127.0.0.1:3210).
    #[arg(long, value_name = "ADDR")]
    pub(crate) bind: Option<std::net::SocketAddr>,
    /// Runs executing at once; later ones wait queued (default 4).
    #[arg(long, value_name = "N")]
    pub(crate) max_concurrent_runs: Option<usize>,
}

#[derive(Debug, clap::Args)]
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
pub(crate) struct CancelArgs {
    /// Run id, or a unique prefix of at least 4 characters.
    pub(crate) run: String,
    /// Cancel through this fabro server (default: $FABRO_SERVER).
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
    List {
        /// Print one JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, clap::Args)]
pub(crate) struct RunsArgs {
    /// Print one JSON array instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct InspectArgs {
    /// Run id, or a unique prefix of at least 4 characters.
    pub(crate) run: String,
    /// Print one JSON document instead of the summary.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, clap::Args)]
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
pub(crate) struct EventsArgs {
    /// Run id, or a unique prefix of at least 4 characters.
    pub(crate) run: String,
    /// Keep reading new events until the run's terminal event.
    #[arg(long)]
    pub(crate) follow: bool,
    /// Print the stored event envelopes verbatim (NDJSON).
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, clap::Args)]
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
    pub(crate) max_cost: Option<fabro_engine::config::CostLimit>,
    /// Stop the run after this much wall time since it (or its resume) started:
    /// `90s`, `30m`, `2h` (`[run] max_duration`).
    #[arg(long, value_name = "D", value_parser = parse_limit_duration)]
    pub(crate) max_duration: Option<String>,
}

fn parse_cost(text: &str) -> Result<fabro_engine::config::CostLimit, String> {
    text.parse::<f64>()
        .ok()
        .and_then(fabro_engine::config::CostLimit::new)
        .ok_or_else(|| format!("'{text}' is not an amount in USD (examples: 5, 0.50)"))
}

fn parse_limit_duration(text: &str) -> Result<String, String> {
    fabro_language::value::parse_duration(text)
        .map(|_| text.to_owned())
        .ok_or_else(|| format!("'{text}' is not a duration (examples: 90s, 30m, 2h)"))
}

#[derive(Debug, clap::Args)]
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
}

#[derive(Debug, clap::Args)]
pub(crate) struct ValidateArgs {
    /// Workflow file (.fabro, .dot, .gv), run-config TOML, or a workflow name under .fabro/workflows/.
    pub(crate) workflow: PathBuf,
    /// Print one JSON document instead of diagnostics lines.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, clap::Args)]
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
