//! Run options from the configuration, the environment and the model flags
//! ([`environment_options`]), and the model catalog validation uses for them
//! ([`catalog_for`]); [`run_options`](super::run_options) builds on them.

use std::path::{Path, PathBuf};

use fabro_llm::Provider;

use super::RunOptions;
use crate::config::RunConfig;
use crate::llm_target::{LlmDefaults, ProviderSettings};
use crate::run_env::{env_var, sandbox_env, RunEnvError};
use crate::source::ConfiguredModels;

/// Run options from `config`, the environment and the model flags; the caller fills in
/// what its command line or request says (goal, answers, run id, interviewer, …).
///
/// # Errors
/// A malformed `FABRO_RANDOM_SEED` or `FABRO_TEST_KERNEL_LACKS`, or isolation the
/// configuration requires and the kernel lacks.
pub(crate) fn environment_options(
    workflow_path: PathBuf,
    config: RunConfig,
    fabro_home: PathBuf,
    cli_model: Option<String>,
    cli_provider: Option<String>,
) -> Result<RunOptions, RunEnvError> {
    if let Some(name) = cli_provider.as_deref() {
        crate::run_env::check_provider(name, &config.llm)?;
    }
    // SPEC 12.4: keys and base URLs from the environment, the rest from `[llm]`.
    let providers = ProviderSettings::from_env(&env_var, &config.llm);
    let credentials = providers.credentials();
    let random_seed = match env_var("FABRO_RANDOM_SEED") {
        Some(value) => Some(
            value
                .parse()
                .map_err(|_| RunEnvError::RandomSeed { value })?,
        ),
        None => None,
    };
    let sandbox_env = sandbox_env(&config, &fabro_home)?;
    Ok(RunOptions {
        workflow_path,
        goal: None,
        dry_run: false,
        auto_approve: false,
        answers: Vec::new(),
        vars: config.run.vars.clone(),
        run_id: None,
        fabro_home,
        interviewer: None,
        llm: LlmDefaults {
            cli_model,
            cli_provider,
            env_model: env_var("FABRO_MODEL"),
            env_provider: env_var("FABRO_PROVIDER"),
            config_model: config.llm.model.clone(),
            config_provider: config.llm.provider.clone(),
            credentials,
            providers,
        },
        simulated_responses: env_var("FABRO_SIMULATED_RESPONSES")
            .map(PathBuf::from)
            .or_else(|| config.llm.simulated_responses.clone()),
        random_seed,
        sandbox_env,
        config,
        parent_run_id: None,
        fallback_goal: None,
        work_dir: None,
        detached_worker: false,
        repository: None,
    })
}

/// The catalog validation uses for a run: the LLM catalog with the presets and the
/// providers configured in `[llm.providers]` (SPEC 10.7), accepting every provider name
/// when the run never calls the providers a workflow names, that is a dry run (SPEC 4.9)
/// or a run whose provider setting (flag, environment or configuration, the first one
/// set) is `simulated` (17.3).
pub(crate) fn catalog_for(options: &RunOptions) -> ConfiguredModels {
    let llm = &options.llm;
    let provider = llm
        .cli_provider
        .as_deref()
        .or(llm.env_provider.as_deref())
        .or(llm.config_provider.as_deref());
    let work_dir = options
        .work_dir
        .clone()
        .or_else(|| options.workflow_path.parent().map(Path::to_path_buf))
        .unwrap_or_default();
    let mut catalog = ConfiguredModels::of(&options.config.llm).with_extensions(
        &options.config,
        &options.fabro_home,
        &work_dir,
    );
    catalog.any_provider = options.dry_run || provider == Some(Provider::Simulated.as_str());
    catalog
}
