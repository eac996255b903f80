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
}

#[derive(Debug, clap::Args)]
pub(crate) struct ValidateArgs {
    /// Workflow file (.fabro, .dot, .gv) or a workflow name under .fabro/workflows/.
    pub(crate) workflow: PathBuf,
    /// Print one JSON document instead of diagnostics lines.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct GraphArgs {
    /// Workflow file (.fabro, .dot, .gv) or a workflow name under .fabro/workflows/.
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
