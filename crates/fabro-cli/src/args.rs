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
    /// The model catalog.
    Model(ModelArgs),
    /// Answer the pending human question of a detached run.
    Answer(AnswerArgs),
    /// Cancel a running run (as its first Ctrl-C would); it can be resumed.
    Cancel(CancelArgs),
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
}

#[derive(Debug, clap::Args)]
pub(crate) struct CancelArgs {
    /// Run id, or a unique prefix of at least 4 characters.
    pub(crate) run: String,
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
    /// Start the run in a background process (output in worker.log) and exit.
    #[arg(long)]
    pub(crate) detach: bool,
    /// Internal: the worker of `--detach`, whose run directory the parent created.
    #[arg(long, hide = true)]
    pub(crate) detached_worker: bool,
    /// Print NDJSON events on stdout instead of progress.
    #[arg(long)]
    pub(crate) json: bool,
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
