//! The environment the `shell` tool, agent CLIs and command nodes run with (SPEC
//! 13.5), and the isolation they run under (SPEC 16).

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;

use crate::isolation::{
    Confinement, IsolationError, IsolationSettings, PrivateTmpDir, ProcessKind,
};
use crate::process::{SpawnError, Spawned};

/// Suffixes that mark a variable as a secret (case-insensitive).
const SECRET_SUFFIXES: &[&str] = &["_API_KEY", "_SECRET", "_TOKEN", "_PASSWORD", "_CREDENTIAL"];

/// Whether a variable name looks like it holds a credential.
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_SUFFIXES.iter().any(|suffix| upper.ends_with(suffix))
}

/// Variables for child processes: the parent's environment minus secret-looking names
/// (unless passed through), plus configured extras. Children get exactly these
/// (`env_clear` first). It also carries the run's [`IsolationSettings`] and, once
/// resolved for a stage ([`ProcessEnv::for_stage`]), the stage's confinement, which
/// [`ProcessEnv::command`] applies to every child.
///
/// The variables and settings are shared between the copies made per stage (copied on
/// the first [`ProcessEnv::set`]), so a stage's environment costs no copy of the map.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessEnv {
    variables: Arc<BTreeMap<OsString, OsString>>,
    isolation: Arc<IsolationSettings>,
    confinement: Option<Confinement>,
}

impl ProcessEnv {
    /// Filters `parent` (normally `std::env::vars_os()`), keeping secret-looking names
    /// listed in `passthrough`, then adds `extra`.
    pub fn new(
        parent: impl IntoIterator<Item = (OsString, OsString)>,
        passthrough: &[String],
        extra: &BTreeMap<String, String>,
    ) -> ProcessEnv {
        let secrets = fabro_llm::redact::secrets();
        let mut variables: BTreeMap<OsString, OsString> = parent
            .into_iter()
            .filter(|(name, _)| {
                let name = name.to_string_lossy();
                // Variables only the configuration marks as credentials (SPEC 10.7) are
                // in the process's secrets too.
                let secret = is_secret_name(&name) || secrets.get(&name).is_some();
                !secret || passthrough.iter().any(|allowed| *allowed == name)
            })
            .collect();
        for (name, value) in extra {
            variables.insert(name.into(), value.into());
        }
        ProcessEnv {
            variables: Arc::new(variables),
            isolation: Arc::default(),
            confinement: None,
        }
    }

    /// The same environment with the run's isolation settings.
    pub fn with_isolation(mut self, isolation: IsolationSettings) -> ProcessEnv {
        self.isolation = Arc::new(isolation);
        self
    }

    /// The run's isolation settings.
    pub fn isolation(&self) -> &IsolationSettings {
        &self.isolation
    }

    /// The environment of one stage's processes of `kind`. Under `workspace` it points
    /// `TMPDIR` at `tmpdir`, the private temporary directory of the stage's run or
    /// parallel branch (created when the first confined child starts), and confines
    /// every child made by [`ProcessEnv::command`].
    pub fn for_stage(&self, kind: ProcessKind, tmpdir: &PrivateTmpDir) -> ProcessEnv {
        let mut env = self.clone();
        env.confinement = self.isolation.confinement(kind, tmpdir);
        if env.confinement.is_some() {
            env.set("TMPDIR", tmpdir.path().as_os_str());
        }
        env
    }

    /// Whether children run confined (`workspace`).
    pub fn is_confined(&self) -> bool {
        self.confinement.is_some()
    }

    /// A command for `program` in `cwd` with exactly these variables, confined when the
    /// stage is.
    pub fn command(
        &self,
        program: impl AsRef<OsStr>,
        cwd: &Path,
    ) -> Result<tokio::process::Command, IsolationError> {
        let mut command = tokio::process::Command::new(program);
        command.current_dir(cwd).env_clear().envs(self.iter());
        if let Some(confinement) = &self.confinement {
            confinement.create_dirs()?;
            confinement.apply(&mut command, cwd)?;
        }
        Ok(command)
    }

    /// Starts `program` with `args` in `cwd` with exactly these variables: standard
    /// input from `/dev/null`, standard output and error piped, in a process group of
    /// its own, killed when dropped before it exited. A confined child is started with
    /// `clone(CLONE_VM | CLONE_VFORK)`, so this process is not `fork`ed for it (a
    /// `pre_exec` step would make the standard library `fork` it: docs/benchmarks.md).
    pub fn spawn_piped(
        &self,
        program: impl AsRef<OsStr>,
        args: &[OsString],
        cwd: &Path,
    ) -> Result<Spawned, SpawnError> {
        self.spawn_with_stdin(program.as_ref(), args, cwd, None)
    }

    /// [`ProcessEnv::spawn_piped`] with standard input read from `input` (a hook's
    /// event envelope, SPEC 20.4) instead of `/dev/null`.
    pub fn spawn_piped_with_input(
        &self,
        program: impl AsRef<OsStr>,
        args: &[OsString],
        cwd: &Path,
        input: &std::fs::File,
    ) -> Result<Spawned, SpawnError> {
        self.spawn_with_stdin(program.as_ref(), args, cwd, Some(input))
    }

    fn spawn_with_stdin(
        &self,
        program: &OsStr,
        args: &[OsString],
        cwd: &Path,
        input: Option<&std::fs::File>,
    ) -> Result<Spawned, SpawnError> {
        #[cfg(target_os = "linux")]
        if let Some(confinement) = &self.confinement {
            confinement.create_dirs()?;
            let env: Vec<(&OsString, &OsString)> = self.iter().collect();
            if let Some(child) = confinement.spawn(program, args, &env, cwd, input)? {
                return Ok(Spawned::confined(child));
            }
        }
        let stdin = match input {
            Some(file) => Stdio::from(file.try_clone()?),
            None => Stdio::null(),
        };
        let mut command = self.command(program, cwd)?;
        command
            .args(args)
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        // Not started above: nothing to enforce (another system, or a kernel without
        // the mechanisms), or a kernel without pidfds, where `command` installed a
        // `pre_exec` step and the child is forked (under the fence).
        let child = {
            let _fence = self.is_confined().then(crate::isolation::fork_fence);
            command.spawn()?
        };
        Ok(Spawned::local(child))
    }

    /// The current process's environment, filtered, without extras.
    pub fn inherit() -> ProcessEnv {
        ProcessEnv::new(std::env::vars_os(), &[], &BTreeMap::new())
    }

    /// Sets one variable (a CLI backend gets its own provider's key back this way).
    pub fn set(&mut self, name: impl Into<OsString>, value: impl Into<OsString>) {
        Arc::make_mut(&mut self.variables).insert(name.into(), value.into());
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&OsString> {
        self.variables.get(&OsString::from(name))
    }

    /// The variables, for `Command::envs` after `env_clear`.
    pub fn iter(&self) -> impl Iterator<Item = (&OsString, &OsString)> {
        self.variables.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isolation::{IsolationMode, KernelSupport};

    #[tokio::test]
    async fn the_private_tmpdir_is_made_by_the_first_confined_start() {
        let dir = tempfile::tempdir().unwrap();
        let tmpdir = PrivateTmpDir::new(dir.path().join("cache/tmp/run"));
        let settings = IsolationSettings::new(
            IsolationMode::Workspace,
            IsolationMode::None,
            KernelSupport::none(),
        );
        let env = ProcessEnv::inherit().with_isolation(settings);
        // Unconfined processes get the parent's TMPDIR; nothing is created.
        let command = env.for_stage(ProcessKind::Command, &tmpdir);
        assert_eq!(command.get("TMPDIR"), std::env::var_os("TMPDIR").as_ref());
        let agent = env.for_stage(ProcessKind::Agent, &tmpdir);
        assert_eq!(
            agent.get("TMPDIR").map(std::path::PathBuf::from).as_deref(),
            Some(tmpdir.path())
        );
        assert!(!tmpdir.path().exists(), "made before any process started");
        let arguments = [OsString::from("-c"), OsString::from("true")];
        let status = agent
            .spawn_piped("sh", &arguments, dir.path())
            .unwrap()
            .wait()
            .await
            .unwrap();
        assert!(status.success());
        assert!(tmpdir.path().is_dir());
    }

    #[test]
    fn secrets_are_filtered_unless_passed_through() {
        let parent = [
            ("PATH", "/bin"),
            ("ANTHROPIC_API_KEY", "sk-1"),
            ("github_token", "t"),
            ("DB_PASSWORD", "p"),
            ("MY_SECRET", "s"),
            ("AWS_CREDENTIAL", "c"),
            ("KEEP_TOKEN", "k"),
            ("TOKENIZER", "ok"),
        ]
        .map(|(name, value)| (OsString::from(name), OsString::from(value)));
        let extra = BTreeMap::from([("EXTRA".to_owned(), "1".to_owned())]);
        let env = ProcessEnv::new(parent, &["KEEP_TOKEN".to_owned()], &extra);
        let names: Vec<String> = env
            .iter()
            .map(|(name, _)| name.to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["EXTRA", "KEEP_TOKEN", "PATH", "TOKENIZER"]);
    }
}
