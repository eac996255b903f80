//! The environment commands, tools and agent CLIs run with (SPEC 13.5): the parent's
//! environment minus secret-looking names (unless passed through), plus configured
//! extras, and the kernel isolation they run under (SPEC 16). One implementation
//! serves the engine's commands and the agent's tools, so it lives in `fabro-agent`
//! (`fabro_agent::isolation`); the engine names it `SandboxEnv`, the seam a remote
//! sandbox will implement later.
//!
//! Here: the `[sandbox]` isolation settings with SPEC 16's defaults
//! ([`isolation_settings`]), a stage's environment with the private `TMPDIR` of its run
//! or parallel branch ([`stage_env`], [`run_tmpdir`], [`branch_tmpdir`], removed at the
//! run's end by [`remove_tmpdirs`]), and the `isolation` of `StageStarted` with the one
//! `isolation_unavailable` warning of a run ([`stage_isolation`]).

use std::path::{Path, PathBuf};

pub use fabro_agent::is_secret_name;
pub(crate) use fabro_agent::isolation::{
    IsolationError, IsolationMode, IsolationSettings, PrivateTmpDir, ProcessKind,
};
pub use fabro_agent::isolation::{KernelSupport, Mechanism};
pub(crate) use fabro_agent::ProcessEnv as SandboxEnv;
use fabro_language::HandlerKind;

use crate::config::SandboxConfig;
use crate::event::{kind, Emitter, Event};

/// Writable for isolated processes besides their working directory and `TMPDIR`:
/// the package caches, so builds work, and the agent programs' own state (SPEC 16,
/// decision 68).
pub(crate) const DEFAULT_WRITABLE_PATHS: [&str; 8] = [
    "~/.cache",
    "~/.cargo/registry",
    "~/.cargo/git",
    "~/.npm",
    "~/.claude",
    "~/.claude.json",
    "~/.codex",
    "~/.gemini",
];

/// The agent programs' state directories among the writable paths, created when
/// missing before a confined agent starts (decision 68).
pub(crate) const AGENT_STATE_DIRS: [&str; 3] = ["~/.claude", "~/.codex", "~/.gemini"];

/// The agent programs' JSON state files among the writable paths, created as `{}` when
/// missing before a confined agent starts (claude cannot start without its own).
pub(crate) const AGENT_STATE_FILES: [&str; 1] = ["~/.claude.json"];

/// Hidden from isolated processes (SPEC 16); `{root}` is `$FABRO_HOME`.
pub(crate) const DEFAULT_HIDDEN_PATHS: [&str; 9] = [
    "~/.ssh",
    "~/.aws",
    "~/.gnupg",
    "~/.config/gcloud",
    "~/.docker",
    "~/.netrc",
    "{root}/blobs",
    "{root}/runs.db",
    "{root}/server.token",
];

/// The isolation settings of `config` with SPEC 16's defaults (`agent_isolation =
/// workspace`, `command_isolation = none`, network on, the default writable and hidden
/// paths plus the configured ones), `~` expanded against `home` and `{root}` against
/// `fabro_home`.
pub(crate) fn isolation_settings(
    config: &SandboxConfig,
    home: Option<&Path>,
    fabro_home: &Path,
    support: KernelSupport,
) -> IsolationSettings {
    let mut settings = IsolationSettings::new(
        config.agent_isolation.unwrap_or(IsolationMode::Workspace),
        config.command_isolation.unwrap_or(IsolationMode::None),
        support,
    );
    settings.network = config.network.unwrap_or(true);
    let expand = |paths: &[&str], configured: &Option<Vec<String>>| -> Vec<PathBuf> {
        paths
            .iter()
            .copied()
            .chain(configured.iter().flatten().map(String::as_str))
            .filter_map(|path| expand_path(path, home, fabro_home))
            .collect()
    };
    settings.writable_paths = expand(&DEFAULT_WRITABLE_PATHS, &config.writable_paths);
    settings.hidden_paths = expand(&DEFAULT_HIDDEN_PATHS, &config.hidden_paths);
    settings.state_dirs = expand(&AGENT_STATE_DIRS, &None);
    settings.state_files = expand(&AGENT_STATE_FILES, &None);
    settings
}

/// `~/x` against `home` (dropped without a home), `{root}/x` against `fabro_home`.
fn expand_path(path: &str, home: Option<&Path>, fabro_home: &Path) -> Option<PathBuf> {
    if let Some(rest) = path.strip_prefix("{root}") {
        return Some(fabro_home.join(rest.trim_start_matches('/')));
    }
    if path == "~" {
        return home.map(Path::to_path_buf);
    }
    if let Some(rest) = path.strip_prefix("~/") {
        return home.map(|home| home.join(rest));
    }
    Some(PathBuf::from(path))
}

/// What `require_isolation` refuses: the settings need mechanisms the kernel lacks.
#[derive(Debug, thiserror::Error)]
#[error("[sandbox] require_isolation is set but this system cannot enforce isolation: it lacks {}", fabro_agent::isolation::names(.missing))]
pub struct IsolationUnavailable {
    /// The missing mechanisms.
    pub missing: Vec<Mechanism>,
}

/// `Err` when `require` is set and the kernel lacks a mechanism `settings` need.
pub(crate) fn check_required(
    settings: &IsolationSettings,
    require: bool,
) -> Result<(), IsolationUnavailable> {
    if !require {
        return Ok(());
    }
    let missing = settings.missing();
    if !missing.is_empty() {
        return Err(IsolationUnavailable { missing });
    }
    Ok(())
}

/// The process kind of a handler: agent nodes run what a model decides, command nodes
/// what the author wrote; other handlers start no processes.
fn process_kind(handler: HandlerKind) -> Option<ProcessKind> {
    match handler {
        HandlerKind::Agent => Some(ProcessKind::Agent),
        HandlerKind::Command => Some(ProcessKind::Command),
        _ => None,
    }
}

/// The `isolation` of `StageStarted` for command and agent stages. The first stage of
/// a run that should be confined on a kernel lacking something emits the one
/// `isolation_unavailable` warning first.
pub(crate) fn stage_isolation(
    env: &SandboxEnv,
    emitter: &Emitter,
    node_id: &str,
    handler: HandlerKind,
) -> Option<kind::StageIsolation> {
    let kind = process_kind(handler)?;
    let settings = env.isolation();
    let report = settings.report(kind);
    if report.mode == IsolationMode::Workspace {
        if let Some(message) = settings.take_warning() {
            emitter.emit(Event::warning(
                Some(node_id),
                "isolation_unavailable",
                &message,
            ));
        }
    }
    Some(kind::StageIsolation {
        enforced: report
            .enforced
            .iter()
            .map(|mechanism| mechanism.as_str().to_owned())
            .collect(),
        mode: report.mode.as_str().to_owned(),
        network: report.network,
    })
}

/// The environment of one stage's processes of `kind`: under `workspace` confined, with
/// `TMPDIR` at `tmpdir`, its run's or parallel branch's private directory.
pub(crate) fn stage_env(env: &SandboxEnv, tmpdir: &PrivateTmpDir, kind: ProcessKind) -> SandboxEnv {
    env.for_stage(kind, tmpdir)
}

/// `{run_dir}/cache/tmp` (SPEC 11.1's scratch space), where the private `TMPDIR`s of a
/// run and its parallel branches live (decision 63).
fn tmp_root(run_dir: &Path) -> PathBuf {
    run_dir.join("cache").join("tmp")
}

/// The run's own private `TMPDIR`, `{run_dir}/cache/tmp/run`, made when its first
/// confined process starts.
pub(crate) fn run_tmpdir(run_dir: &Path) -> PrivateTmpDir {
    PrivateTmpDir::new(tmp_root(run_dir).join("run"))
}

/// The private `TMPDIR` of the parallel branch starting at `target` of the parallel
/// stage of rank `rank` (ranks are unique in a run, so nested branches and branches of
/// a parallel stage visited again get their own): `{run_dir}/cache/tmp/branch-{rank:03}-{target}`.
pub(crate) fn branch_tmpdir(run_dir: &Path, rank: u32, target: &str) -> PrivateTmpDir {
    PrivateTmpDir::new(tmp_root(run_dir).join(format!("branch-{rank:03}-{target}")))
}

/// Removes the private `TMPDIR`s of the run and its branches when the run finishes,
/// however it ended; a resumed run makes them again. A failure is logged, not fatal.
pub(crate) fn remove_tmpdirs(run_dir: &Path) {
    let root = tmp_root(run_dir);
    match fs_err::remove_dir_all(&root) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => tracing::warn!(%error, "cannot remove the private temporary directories"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_configured_paths_are_expanded() {
        let config = SandboxConfig {
            writable_paths: Some(vec!["~/.gradle".to_owned(), "/opt/cache".to_owned()]),
            hidden_paths: Some(vec!["{root}/secrets".to_owned()]),
            ..SandboxConfig::default()
        };
        let settings = isolation_settings(
            &config,
            Some(Path::new("/home/u")),
            Path::new("/fh"),
            KernelSupport::all(),
        );
        assert_eq!(settings.agent, IsolationMode::Workspace);
        assert_eq!(settings.command, IsolationMode::None);
        assert!(settings.network);
        // SPEC 16 and decision 68: the package caches and the agent programs' state.
        let expected: Vec<PathBuf> = [
            "/home/u/.cache",
            "/home/u/.cargo/registry",
            "/home/u/.cargo/git",
            "/home/u/.npm",
            "/home/u/.claude",
            "/home/u/.claude.json",
            "/home/u/.codex",
            "/home/u/.gemini",
            "/home/u/.gradle",
            "/opt/cache",
        ]
        .into_iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(settings.writable_paths, expected);
        assert_eq!(
            settings.state_dirs,
            [&expected[4], &expected[6], &expected[7]].map(PathBuf::clone)
        );
        assert_eq!(settings.state_files, [expected[5].clone()]);
        assert!(settings
            .hidden_paths
            .contains(&PathBuf::from("/home/u/.ssh")));
        assert!(settings
            .hidden_paths
            .contains(&PathBuf::from("/fh/runs.db")));
        assert_eq!(
            settings.hidden_paths.last(),
            Some(&PathBuf::from("/fh/secrets"))
        );
        let homeless = isolation_settings(&config, None, Path::new("/fh"), KernelSupport::all());
        assert_eq!(homeless.writable_paths, [PathBuf::from("/opt/cache")]);
    }

    #[test]
    fn require_isolation_names_what_is_missing() {
        let mut settings = isolation_settings(
            &SandboxConfig::default(),
            None,
            Path::new("/fh"),
            KernelSupport::all().without(Mechanism::Landlock),
        );
        assert!(check_required(&settings, false).is_ok());
        let error = check_required(&settings, true).unwrap_err();
        assert_eq!(
            error.to_string(),
            "[sandbox] require_isolation is set but this system cannot enforce isolation: it lacks landlock"
        );
        settings.agent = IsolationMode::None;
        assert!(check_required(&settings, true).is_ok());
    }

    #[test]
    fn tmpdirs_live_in_the_run_scratch_space() {
        assert_eq!(
            run_tmpdir(Path::new("/r")).path(),
            Path::new("/r/cache/tmp/run")
        );
        assert_eq!(
            branch_tmpdir(Path::new("/r"), 4, "a").path(),
            Path::new("/r/cache/tmp/branch-004-a")
        );
    }
}
