//! `fabro model list [--json]` (SPEC 12.1): the model catalog of SPEC 10.2.

use serde::Serialize;

use fabro_llm::{ModelInfo, CATALOG};

use crate::args::{ModelArgs, ModelCommand};
use crate::error::{CliError, Status};
use crate::output::Output;

/// One catalog entry as `--json` prints it.
#[derive(Debug, Serialize)]
struct ModelView<'a> {
    id: &'a str,
    provider: &'a str,
    context_window: u32,
    max_output: u32,
    tools: bool,
    vision: bool,
    reasoning: bool,
    input_price_per_million: f64,
    output_price_per_million: f64,
    aliases: &'a [&'a str],
    default: bool,
}

impl<'a> From<&'a ModelInfo> for ModelView<'a> {
    fn from(model: &'a ModelInfo) -> ModelView<'a> {
        ModelView {
            id: model.id,
            provider: model.provider.as_str(),
            context_window: model.context_window,
            max_output: model.max_output,
            tools: model.tools,
            vision: model.vision,
            reasoning: model.reasoning,
            input_price_per_million: model.input_price,
            output_price_per_million: model.output_price,
            aliases: model.aliases,
            default: model.default,
        }
    }
}

pub(crate) fn run(args: &ModelArgs, output: &mut Output) -> Result<Status, CliError> {
    let ModelCommand::List { json } = &args.command;
    if *json {
        let views: Vec<ModelView<'_>> = CATALOG.iter().map(ModelView::from).collect();
        let text = serde_json::to_string_pretty(&views).map_err(CliError::EncodeJson)?;
        output.out(&format!("{text}\n"));
    } else {
        output.out(&table());
    }
    Ok(Status::Success)
}

/// The catalog as an aligned table.
fn table() -> String {
    let header = [
        "MODEL",
        "PROVIDER",
        "CONTEXT",
        "MAX OUT",
        "TOOLS",
        "VISION",
        "REASONING",
        "$/M IN",
        "$/M OUT",
        "ALIASES",
        "DEFAULT",
    ];
    let yes_no = |flag: bool| if flag { "yes" } else { "no" }.to_owned();
    let rows: Vec<Vec<String>> = CATALOG
        .iter()
        .map(|model| {
            vec![
                model.id.to_owned(),
                model.provider.as_str().to_owned(),
                model.context_window.to_string(),
                model.max_output.to_string(),
                yes_no(model.tools),
                yes_no(model.vision),
                yes_no(model.reasoning),
                format!("{:.2}", model.input_price),
                format!("{:.2}", model.output_price),
                model.aliases.join(","),
                if model.default { "yes" } else { "" }.to_owned(),
            ]
        })
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|title| title.len()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    let mut line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        text.push_str(padded.join("  ").trim_end());
        text.push('\n');
    };
    line(header.iter().map(|title| (*title).to_owned()).collect());
    for row in rows {
        line(row);
    }
    text
}
