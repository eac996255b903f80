//! What a run takes from the process that starts it, the same for `fabro run`,
//! `fabro resume` and `fabro server` (SPEC 12.3, 12.4, 13.5, 16): the environment
//! (after start-up moved the credentials into the secret store), the command line's
//! overrides of the configuration, and the sandbox environment with its isolation
//! settings. The run options built from them are `run/options.rs`'s.

use std::path::{Path, PathBuf};

use crate::config::{CostLimit, DirtyWorktree, RunConfig};
use crate::sandbox::{self, IsolationUnavailable, KernelSupport, Mechanism, SandboxEnv};

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
    /// `--provider` (or a request's `provider`) names no provider: not a built-in one,
    /// an alias, a preset or one configured by name (SPEC 10.7).
    #[error("unknown provider '{name}' for --provider; expected one of: {}", .known.join(", "))]
    UnknownProvider {
        /// The name given.
        name: String,
        /// Every name the run knows.
        known: Vec<String>,
    },
}

/// Every provider name a run with `config` knows (SPEC 10.1, 10.7): the built-in ones,
/// the presets, then those configured by name.
pub fn known_provider_names(config: &crate::config::LlmConfig) -> Vec<String> {
    let mut names: Vec<String> = fabro_llm::Provider::ALL
        .iter()
        .map(|provider| provider.as_str().to_owned())
        .collect();
    for preset in crate::config::PRESETS {
        names.push(preset.name.to_owned());
    }
    for name in config.providers.keys() {
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    names
}

/// Refuses a `--provider` that names no provider the run knows; aliases (`google`)
/// count as their provider.
pub(crate) fn check_provider(
    name: &str,
    config: &crate::config::LlmConfig,
) -> Result<(), RunEnvError> {
    let known = known_provider_names(config);
    if fabro_llm::Provider::parse(name).is_some() || known.iter().any(|known| known == name) {
        return Ok(());
    }
    Err(RunEnvError::UnknownProvider {
        name: name.escape_debug().to_string(),
        known,
    })
}

/// A variable as runs see it: from the secret store (credentials moved out of the
/// environment at start-up), else the environment; empty counts as unset.
pub(crate) fn env_var(name: &str) -> Option<String> {
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

/// The environment of commands, tools and agent CLIs (SPEC 13.5) with the isolation
/// settings of SPEC 16; the kernel is probed only when something is to be isolated.
/// `FABRO_TEST_KERNEL_LACKS` (comma-separated mechanism names) simulates a kernel
/// without them, for tests.
///
/// # Errors
/// An unknown name in `FABRO_TEST_KERNEL_LACKS`; `require_isolation` on a kernel
/// lacking a needed mechanism.
pub(crate) fn sandbox_env(
    config: &RunConfig,
    fabro_home: &Path,
) -> Result<SandboxEnv, RunEnvError> {
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
