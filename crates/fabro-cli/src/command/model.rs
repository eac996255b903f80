//! `fabro model list [--json]` (SPEC 12.1): the model catalog of SPEC 10.2, then the
//! models of the providers configured by name (SPEC 10.7) in the layers a workflow in
//! the current directory would read (`settings.toml`, `.fabro/project.toml`,
//! `workflow.toml` or `run.toml`).

use std::path::PathBuf;

use serde::Serialize;

use fabro_engine::configuration::{self, ConfigSources, CostLimit, FsConfigReader, LlmConfig};
use fabro_llm::{ModelInfo, CATALOG};

use crate::args::{ModelArgs, ModelCommand};
use crate::error::{CliError, Status};
use crate::loader::{config_error, fabro_home};
use crate::output::Output;

/// One model as `--json` prints it; what a configured model's table leaves out is
/// `null` (the catalog's defaults apply to its limits, and it has no price).
#[derive(Debug, Serialize)]
struct ModelView {
    id: String,
    provider: String,
    context_window: Option<u64>,
    max_output: Option<u64>,
    tools: Option<bool>,
    vision: Option<bool>,
    reasoning: Option<bool>,
    input_price_per_million: Option<f64>,
    output_price_per_million: Option<f64>,
    aliases: Vec<String>,
    default: bool,
}

impl From<&ModelInfo> for ModelView {
    fn from(model: &ModelInfo) -> ModelView {
        ModelView {
            id: model.id.to_owned(),
            provider: model.provider.as_str().to_owned(),
            context_window: Some(u64::from(model.context_window)),
            max_output: Some(u64::from(model.max_output)),
            tools: Some(model.tools),
            vision: Some(model.vision),
            reasoning: Some(model.reasoning),
            input_price_per_million: Some(model.input_price),
            output_price_per_million: Some(model.output_price),
            aliases: model
                .aliases
                .iter()
                .map(|alias| (*alias).to_owned())
                .collect(),
            default: model.default,
        }
    }
}

/// The catalog, then every configured provider's model table in name order.
fn models(llm: &LlmConfig) -> Vec<ModelView> {
    let mut views: Vec<ModelView> = CATALOG.iter().map(ModelView::from).collect();
    for (provider, settings) in &llm.providers {
        for (id, model) in &settings.models {
            views.push(ModelView {
                id: id.clone(),
                provider: provider.clone(),
                context_window: model.context_window,
                max_output: model.max_output,
                tools: None,
                vision: None,
                reasoning: model.reasoning,
                input_price_per_million: model.input_price.map(CostLimit::usd),
                output_price_per_million: model.output_price.map(CostLimit::usd),
                aliases: Vec::new(),
                default: false,
            });
        }
    }
    views
}

pub(crate) fn run(args: &ModelArgs, output: &mut Output) -> Result<Status, CliError> {
    let ModelCommand::List { json } = &args.command;
    let current = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let sources = ConfigSources {
        root: fabro_home(),
        // No workflow is named: the layers of one in the current directory.
        workflow: current.join("workflow.fabro"),
        run_configs: Vec::new(),
    };
    let config = configuration::load(&sources, &FsConfigReader).map_err(config_error)?;
    let views = models(&config.llm);
    if *json {
        let text = serde_json::to_string_pretty(&views).map_err(CliError::EncodeJson)?;
        output.out(&format!("{text}\n"));
    } else {
        output.out(&table(&views));
    }
    Ok(Status::Success)
}

/// The models as an aligned table; `-` where a configured model's table is silent.
fn table(views: &[ModelView]) -> String {
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
    let number = |value: Option<u64>| value.map_or_else(|| "-".to_owned(), |n| n.to_string());
    let yes_no = |flag: Option<bool>| match flag {
        Some(true) => "yes".to_owned(),
        Some(false) => "no".to_owned(),
        None => "-".to_owned(),
    };
    let price = |usd: Option<f64>| usd.map_or_else(|| "-".to_owned(), |usd| format!("{usd:.2}"));
    let rows: Vec<Vec<String>> = views
        .iter()
        .map(|model| {
            vec![
                model.id.clone(),
                model.provider.clone(),
                number(model.context_window),
                number(model.max_output),
                yes_no(model.tools),
                yes_no(model.vision),
                yes_no(model.reasoning),
                price(model.input_price_per_million),
                price(model.output_price_per_million),
                model.aliases.join(","),
                if model.default { "yes" } else { "" }.to_owned(),
            ]
        })
        .collect();
    crate::command::render_table(&header, &rows)
}
