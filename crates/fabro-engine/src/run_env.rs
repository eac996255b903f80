//! What a run takes from the process that starts it, the same for `fabro run`,
//! `fabro resume` and `fabro server` (SPEC 12.3, 12.4, 13.5, 16): run options from the
//! configuration layers, the environment (after start-up moved the credentials into
//! the secret store) and the model flags; the sandbox environment with its isolation
//! settings; and the model catalog validation uses.

use std::path::{Path, PathBuf};

use fabro_llm::Provider;

use crate::config::{CostLimit, DirtyWorktree, RunConfig};
use crate::llm_target::{LlmDefaults, ProviderSettings};
use crate::run::RunOptions;
use crate::sandbox::{self, IsolationUnavailable, KernelSupport, Mechanism, SandboxEnv};
use crate::source::ConfiguredModels;

/// Why the environment cannot start a run.
#[derive(Debug, thiserror::Error)]
pub enum RunEnvError {
    /// `FABRO_RANDOM_SEED` is no unsigned integer.
    #[error("FABRO_RANDOM_SEED must be an unsigned integer, found '{value}'")]
    RandomSeed {
        /// The value found.
        value: String,
    },
    /// `FABRO_TEST_KERNEL_LACKS` names no mechanism.
    #[error("FABRO_TEST_KERNEL_LACKS: unknown mechanism '{name}'")]
    UnknownMechanism {
        /// The name found.
        name: String,
    },
    /// `require_isolation` on a kernel lacking a needed mechanism (SPEC 16).
    #[error(transparent)]
    Isolation(#[from] IsolationUnavailable),
}

/// A variable as runs see it: from the secret store (credentials moved out of the
/// environment at start-up), else the environment; empty counts as unset.
pub fn env_var(name: &str) -> Option<String> {
    fabro_llm::redact::secrets()
        .get_str(name)
        .map(str::to_owned)
        .or_else(|| std::env::var(name).ok())
        .filter(|value| !value.is_empty())
}

/// What the command line of `fabro run`/`fabro resume` (or the body of a server's start
/// or resume request) changes in the configuration: the budget flags over `[run]`'s
/// limits (SPEC 17.1) and `--no-in-place`. The run records the result in `config.json`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConfigOverrides {
    /// `--max-stages`.
    pub max_stages: Option<u64>,
    /// `--max-tokens`.
    pub max_tokens: Option<u64>,
    /// `--max-cost`.
    pub max_cost: Option<CostLimit>,
    /// `--max-duration`, as written (`90s`, `30m`, `2h`).
    pub max_duration: Option<String>,
    /// `--no-in-place`: `[run] dirty_worktree = "refuse"`.
    pub refuse_dirty_worktree: bool,
}

impl ConfigOverrides {
    /// Applies the overrides to `config`; what they leave unset stays as configured.
    pub fn apply(&self, config: &mut RunConfig) {
        let run = &mut config.run;
        run.max_stages = self.max_stages.or(run.max_stages);
        run.max_tokens = self.max_tokens.or(run.max_tokens);
        run.max_cost_usd = self.max_cost.or(run.max_cost_usd);
        run.max_duration = self.max_duration.clone().or(run.max_duration.take());
        if self.refuse_dirty_worktree {
            run.dirty_worktree = Some(DirtyWorktree::Refuse);
        }
    }
}

/// Run options from `config`, the environment and the model flags; the caller fills in
/// what its command line or request says (goal, answers, run id, interviewer, …).
///
/// # Errors
/// A malformed `FABRO_RANDOM_SEED` or `FABRO_TEST_KERNEL_LACKS`, or isolation the
/// configuration requires and the kernel lacks.
pub fn environment_options(
    workflow_path: PathBuf,
    config: RunConfig,
    fabro_home: PathBuf,
    cli_model: Option<String>,
    cli_provider: Option<String>,
) -> Result<RunOptions, RunEnvError> {
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
    })
}

/// The environment of commands, tools and agent CLIs (SPEC 13.5) with the isolation
/// settings of SPEC 16; the kernel is probed only when something is to be isolated.
/// `FABRO_TEST_KERNEL_LACKS` (comma-separated mechanism names) simulates a kernel
/// without them, for tests.
///
/// # Errors
/// An unknown name in `FABRO_TEST_KERNEL_LACKS`; `require_isolation` on a kernel
/// lacking a needed mechanism.
pub fn sandbox_env(config: &RunConfig, fabro_home: &Path) -> Result<SandboxEnv, RunEnvError> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut isolation = sandbox::isolation_settings(
        &config.sandbox,
        home.as_deref(),
        fabro_home,
        KernelSupport::none(),
    );
    if !isolation.required().is_empty() {
        let mut lacking = Vec::new();
        if let Some(lacks) = std::env::var_os("FABRO_TEST_KERNEL_LACKS") {
            for name in lacks
                .to_string_lossy()
                .split(',')
                .filter(|name| !name.is_empty())
            {
                lacking.push(Mechanism::parse(name).ok_or_else(|| {
                    RunEnvError::UnknownMechanism {
                        name: name.to_owned(),
                    }
                })?);
            }
        }
        // Probed at the first stage that confines a process (or just below, for
        // `require_isolation`).
        isolation = isolation.detect_lazily(lacking);
        if isolation.required().contains(&Mechanism::MountNamespace) {
            // The blob store's directory (hidden by default) is made now, not by the
            // first blob a stage writes: a hidden path that appears mid-run makes the
            // next confined start build new namespaces and a new spawner.
            let _ = fs_err::create_dir_all(fabro_home.join("blobs"));
        }
    }
    sandbox::check_required(
        &isolation,
        config.sandbox.require_isolation.unwrap_or(false),
    )?;
    let secrets = fabro_llm::redact::secrets();
    Ok(SandboxEnv::new(
        // The secrets take part so that `env_passthrough` can let some through.
        std::env::vars_os().chain(
            secrets
                .variables()
                .map(|(name, value)| (name.clone(), value.clone())),
        ),
        config
            .sandbox
            .env_passthrough
            .as_deref()
            .unwrap_or_default(),
        &config.sandbox.env,
    )
    .with_isolation(isolation))
}

/// The catalog validation uses for a run: the LLM catalog with the presets and the
/// providers configured in `[llm.providers]` (SPEC 10.7), accepting every provider name
/// when the run never calls the providers a workflow names, that is a dry run (SPEC 4.9)
/// or a run whose provider setting (flag, environment or configuration, the first one
/// set) is `simulated` (17.3).
pub fn catalog_for(options: &RunOptions) -> ConfiguredModels {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::IsolationMode;

    #[test]
    fn the_hidden_blob_directory_exists_before_the_first_confined_start() {
        let confined = tempfile::tempdir().unwrap();
        let mut config = RunConfig::default();
        config.sandbox.command_isolation = Some(IsolationMode::Workspace);
        sandbox_env(&config, confined.path()).unwrap();
        assert!(confined.path().join("blobs").is_dir());

        let unconfined = tempfile::tempdir().unwrap();
        config.sandbox.command_isolation = Some(IsolationMode::None);
        config.sandbox.agent_isolation = Some(IsolationMode::None);
        sandbox_env(&config, unconfined.path()).unwrap();
        assert!(!unconfined.path().join("blobs").exists());
    }

    #[test]
    fn overrides_replace_only_what_they_set() {
        let mut config = RunConfig::default();
        config.run.max_stages = Some(7);
        config.run.max_duration = Some("1h".to_owned());
        ConfigOverrides::default().apply(&mut config);
        assert_eq!(config.run.max_stages, Some(7));
        assert_eq!(config.run.dirty_worktree, None);
        ConfigOverrides {
            max_stages: Some(3),
            max_tokens: Some(10),
            max_cost: CostLimit::new(0.5),
            max_duration: None,
            refuse_dirty_worktree: true,
        }
        .apply(&mut config);
        assert_eq!(config.run.max_stages, Some(3));
        assert_eq!(config.run.max_tokens, Some(10));
        assert_eq!(config.run.max_cost_usd, CostLimit::new(0.5));
        assert_eq!(config.run.max_duration.as_deref(), Some("1h"));
        assert_eq!(config.run.dirty_worktree, Some(DirtyWorktree::Refuse));
    }
}
