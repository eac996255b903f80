//! Kernel-enforced isolation of the processes models and workflows start (SPEC 16).
//!
//! `workspace` confines a process and everything it starts: it may write only inside
//! its working directory, a private `TMPDIR` (one per run and parallel branch,
//! [`PrivateTmpDir`]), the configured writable paths
//! and `/dev/null`, `/dev/zero`, `/dev/tty` and pseudo-terminals (Landlock); `hidden_paths` are covered by
//! empty read-only mounts and `network = false` leaves it a network namespace of its
//! own without any interface up (unprivileged user, mount and network namespaces).
//!
//! The settings ([`IsolationSettings`]) travel with the [`crate::ProcessEnv`] every
//! spawn site already uses; [`crate::ProcessEnv::for_stage`] resolves them for one
//! stage and [`crate::ProcessEnv::command`] applies them to a child.
//!
//! Enforcement happens in the child before `exec`, not in a re-executed `fabro`
//! launcher: the library crates are used without the `fabro` binary (unit tests, other
//! embedders), and a launcher would add a second `exec` to every process start.
//! Everything that allocates or may lock (path resolution, the Landlock ruleset and its
//! rules, the namespace maps) is prepared in the parent, so the child only makes raw
//! system calls (`setns`, `chdir`, `prctl`, `landlock_restrict_self`), which are
//! async-signal-safe. The namespaces are created once per run and set of hidden paths
//! (a short-lived child sharing the engine's memory unshares them, makes the hiding
//! mounts and opens them for the engine to keep); the
//! ruleset is reused while the writable set stays the same. Two ways to start a child:
//! [`crate::ProcessEnv::spawn_piped`] (command nodes, the `shell` tool: many short
//! processes) starts it with `clone(CLONE_VM | CLONE_VFORK)` as `posix_spawn` does,
//! without `fork`ing the engine (`spawner`);
//! [`crate::ProcessEnv::command`] (`cli` and `acp` agent processes: one long-lived
//! process per stage) joins them in a `pre_exec` step, which makes the standard library
//! `fork` the engine process for that child.
//!
//! What the kernel supports is detected once per process ([`KernelSupport::detect`]);
//! a kernel without a mechanism runs without it and the engine emits the
//! `isolation_unavailable` warning, or refuses to start under `require_isolation`.
//! Systems other than Linux support nothing, so there every mode acts like `none`.

#[cfg(target_os = "linux")]
mod clone;
#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
mod spawner;

#[cfg(target_os = "linux")]
pub(crate) use spawner::ConfinedChild;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock, RwLockReadGuard};

/// `[sandbox] agent_isolation` and `command_isolation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IsolationMode {
    /// No confinement.
    #[default]
    None,
    /// Writes confined to the working tree, hidden paths, optional network cut.
    Workspace,
}

impl IsolationMode {
    /// The configuration and event spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            IsolationMode::None => "none",
            IsolationMode::Workspace => "workspace",
        }
    }

    /// Parses `none` or `workspace`.
    pub fn parse(text: &str) -> Option<IsolationMode> {
        match text {
            "none" => Some(IsolationMode::None),
            "workspace" => Some(IsolationMode::Workspace),
            _ => None,
        }
    }
}

/// A kernel mechanism isolation uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mechanism {
    /// Landlock: the writable set.
    Landlock,
    /// An unprivileged user and mount namespace: `hidden_paths`.
    MountNamespace,
    /// An unprivileged user and network namespace: `network = false`.
    NetworkNamespace,
}

impl Mechanism {
    /// Every mechanism, in reporting order.
    pub const ALL: [Mechanism; 3] = [
        Mechanism::Landlock,
        Mechanism::MountNamespace,
        Mechanism::NetworkNamespace,
    ];

    /// The name used in events, warnings and errors.
    pub fn as_str(self) -> &'static str {
        match self {
            Mechanism::Landlock => "landlock",
            Mechanism::MountNamespace => "mount_namespace",
            Mechanism::NetworkNamespace => "network_namespace",
        }
    }

    /// The mechanism named `name`.
    pub fn parse(name: &str) -> Option<Mechanism> {
        Mechanism::ALL
            .into_iter()
            .find(|mechanism| mechanism.as_str() == name.trim())
    }
}

/// What the running kernel can enforce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KernelSupport {
    landlock: bool,
    mount_namespace: bool,
    network_namespace: bool,
}

impl KernelSupport {
    /// Probes the kernel once per process: the Landlock ABI, and whether a child can
    /// enter a new user namespace with a mount (or network) namespace. Nothing outside
    /// Linux.
    pub fn detect() -> KernelSupport {
        KernelSupport::detect_only(&Mechanism::ALL)
    }

    /// [`KernelSupport::detect`] for `mechanisms` only, the others reported missing:
    /// a namespace probe starts a child (a `fork` of this process), so a run probes only
    /// what its settings need. Each mechanism is probed at most once per process.
    pub fn detect_only(mechanisms: &[Mechanism]) -> KernelSupport {
        static PROBED: [OnceLock<bool>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
        let mut support = KernelSupport::none();
        for &mechanism in mechanisms {
            let index = Mechanism::ALL
                .iter()
                .position(|known| *known == mechanism)
                .unwrap_or_default();
            let supported = *PROBED[index].get_or_init(|| probe_mechanism(mechanism));
            match mechanism {
                Mechanism::Landlock => support.landlock = supported,
                Mechanism::MountNamespace => support.mount_namespace = supported,
                Mechanism::NetworkNamespace => support.network_namespace = supported,
            }
        }
        support
    }

    /// A kernel without any of the mechanisms.
    pub const fn none() -> KernelSupport {
        KernelSupport {
            landlock: false,
            mount_namespace: false,
            network_namespace: false,
        }
    }

    /// A kernel with every mechanism.
    pub const fn all() -> KernelSupport {
        KernelSupport {
            landlock: true,
            mount_namespace: true,
            network_namespace: true,
        }
    }

    /// Whether `mechanism` is available.
    pub fn supports(self, mechanism: Mechanism) -> bool {
        match mechanism {
            Mechanism::Landlock => self.landlock,
            Mechanism::MountNamespace => self.mount_namespace,
            Mechanism::NetworkNamespace => self.network_namespace,
        }
    }

    /// The same support less `mechanism` (to simulate an older kernel).
    pub fn without(mut self, mechanism: Mechanism) -> KernelSupport {
        match mechanism {
            Mechanism::Landlock => self.landlock = false,
            Mechanism::MountNamespace => self.mount_namespace = false,
            Mechanism::NetworkNamespace => self.network_namespace = false,
        }
        self
    }
}

/// Whose processes: what a model decides to run, or a workflow's command node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessKind {
    /// The `shell` tool and `cli`/`acp` agent processes (`agent_isolation`).
    Agent,
    /// Command nodes (`command_isolation`).
    Command,
}

/// The isolation settings of SPEC 16, paths expanded and defaults included, with the
/// kernel's support. The default isolates nothing; the CLI applies SPEC 16's defaults.
#[derive(Debug, Clone)]
pub struct IsolationSettings {
    /// `agent_isolation`.
    pub agent: IsolationMode,
    /// `command_isolation`.
    pub command: IsolationMode,
    /// `network`: false cuts isolated processes off every network.
    pub network: bool,
    /// Writable besides the working directory and the private `TMPDIR`.
    pub writable_paths: Vec<PathBuf>,
    /// Unreadable for isolated processes.
    pub hidden_paths: Vec<PathBuf>,
    /// The agent programs' state directories (also in `writable_paths`): created, when
    /// missing, before a confined agent process starts, since Landlock can only allow
    /// a path that exists and the program could not create it itself (decision 68).
    pub state_dirs: Vec<PathBuf>,
    /// The agent programs' JSON state files (also in `writable_paths`, e.g. claude's
    /// `~/.claude.json`): created as an empty JSON object when missing, like
    /// `state_dirs`.
    pub state_files: Vec<PathBuf>,
    /// What the kernel can enforce (when not detected lazily: [`Self::detect_lazily`]).
    pub support: KernelSupport,
    /// Detection deferred to the first use of [`Self::support`] (shared by clones).
    lazy: Option<Arc<LazySupport>>,
    /// Set once the `isolation_unavailable` warning was taken.
    warned: Arc<AtomicBool>,
    /// What confined children reuse across spawns (shared by clones).
    reuse: Reuse,
}

impl Default for IsolationSettings {
    fn default() -> IsolationSettings {
        IsolationSettings::new(
            IsolationMode::None,
            IsolationMode::None,
            KernelSupport::none(),
        )
    }
}

impl PartialEq for IsolationSettings {
    fn eq(&self, other: &IsolationSettings) -> bool {
        self.agent == other.agent
            && self.command == other.command
            && self.network == other.network
            && self.writable_paths == other.writable_paths
            && self.hidden_paths == other.hidden_paths
            && self.state_dirs == other.state_dirs
            && self.state_files == other.state_files
            && self.support() == other.support()
    }
}

/// Kernel support detected at first use, less the mechanisms a test simulates missing.
#[derive(Debug, Default)]
struct LazySupport {
    detected: OnceLock<KernelSupport>,
    without: Vec<Mechanism>,
}

impl IsolationSettings {
    /// Settings with the given modes, network on and no extra paths.
    pub fn new(
        agent: IsolationMode,
        command: IsolationMode,
        support: KernelSupport,
    ) -> IsolationSettings {
        IsolationSettings {
            agent,
            command,
            network: true,
            writable_paths: Vec::new(),
            hidden_paths: Vec::new(),
            state_dirs: Vec::new(),
            state_files: Vec::new(),
            support,
            lazy: None,
            warned: Arc::new(AtomicBool::new(false)),
            reuse: Reuse::default(),
        }
    }

    /// The same settings, with the kernel probed for the [`Self::required`] mechanisms
    /// only when [`Self::support`] is first asked for (a namespace probe forks this
    /// process, which a workflow that confines nothing should not pay for), less
    /// `without` (to simulate an older kernel).
    pub fn detect_lazily(mut self, without: Vec<Mechanism>) -> IsolationSettings {
        self.lazy = Some(Arc::new(LazySupport {
            detected: OnceLock::new(),
            without,
        }));
        self
    }

    /// What the kernel can enforce, detected now if deferred.
    pub fn support(&self) -> KernelSupport {
        let Some(lazy) = &self.lazy else {
            return self.support;
        };
        *lazy.detected.get_or_init(|| {
            let mut support = KernelSupport::detect_only(&self.required());
            for mechanism in &lazy.without {
                support = support.without(*mechanism);
            }
            support
        })
    }

    /// The mode for `kind`.
    pub fn mode(&self, kind: ProcessKind) -> IsolationMode {
        match kind {
            ProcessKind::Agent => self.agent,
            ProcessKind::Command => self.command,
        }
    }

    fn confines_anything(&self) -> bool {
        self.agent == IsolationMode::Workspace || self.command == IsolationMode::Workspace
    }

    /// The mechanisms these settings call for: Landlock for any `workspace` mode, a
    /// mount namespace when there are hidden paths, a network namespace when `network`
    /// is false.
    pub fn required(&self) -> Vec<Mechanism> {
        if !self.confines_anything() {
            return Vec::new();
        }
        Mechanism::ALL
            .into_iter()
            .filter(|mechanism| match mechanism {
                Mechanism::Landlock => true,
                Mechanism::MountNamespace => !self.hidden_paths.is_empty(),
                Mechanism::NetworkNamespace => !self.network,
            })
            .collect()
    }

    /// The required mechanisms the kernel lacks.
    pub fn missing(&self) -> Vec<Mechanism> {
        self.required()
            .into_iter()
            .filter(|mechanism| !self.support().supports(*mechanism))
            .collect()
    }

    /// The `isolation_unavailable` warning text, the first time it is asked for while
    /// something is missing (one warning per run: clones share the flag).
    pub fn take_warning(&self) -> Option<String> {
        let missing = self.missing();
        if missing.is_empty() || self.warned.swap(true, Ordering::Relaxed) {
            return None;
        }
        Some(format!(
            "kernel isolation unavailable: this system lacks {}; isolated processes run without it",
            names(&missing)
        ))
    }

    /// What a stage of `kind` runs with, for `StageStarted`.
    pub fn report(&self, kind: ProcessKind) -> IsolationReport {
        let mode = self.mode(kind);
        if mode == IsolationMode::None {
            return IsolationReport {
                mode,
                network: true,
                enforced: Vec::new(),
            };
        }
        let hidden = self.hidden_paths.iter().any(|path| path.exists());
        let enforced = Mechanism::ALL
            .into_iter()
            .filter(|mechanism| self.support().supports(*mechanism))
            .filter(|mechanism| match mechanism {
                Mechanism::Landlock => true,
                Mechanism::MountNamespace => hidden,
                Mechanism::NetworkNamespace => !self.network,
            })
            .collect();
        IsolationReport {
            mode,
            network: self.network,
            enforced,
        }
    }

    /// The confinement of one stage's processes, `None` for `none`.
    pub(crate) fn confinement(
        &self,
        kind: ProcessKind,
        tmpdir: &PrivateTmpDir,
    ) -> Option<Confinement> {
        (self.mode(kind) == IsolationMode::Workspace).then(|| Confinement {
            tmpdir: tmpdir.clone(),
            network: self.network,
            writable: self.writable_paths.clone(),
            state_dirs: match kind {
                ProcessKind::Agent => self.state_dirs.clone(),
                ProcessKind::Command => Vec::new(),
            },
            state_files: match kind {
                ProcessKind::Agent => self.state_files.clone(),
                ProcessKind::Command => Vec::new(),
            },
            hidden: self.hidden_paths.clone(),
            support: self.support(),
            reuse: self.reuse.clone(),
        })
    }
}

/// Comma-separated mechanism names.
pub fn names(mechanisms: &[Mechanism]) -> String {
    mechanisms
        .iter()
        .map(|mechanism| mechanism.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `isolation` of `StageStarted`: mode, network, and what the kernel applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsolationReport {
    /// The stage's mode.
    pub mode: IsolationMode,
    /// Whether isolated processes have a network.
    pub network: bool,
    /// What the kernel applies (empty for `none`).
    pub enforced: Vec<Mechanism>,
}

/// Why a confined child could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum IsolationError {
    /// The private temporary directory could not be created.
    #[error("cannot create the private temporary directory: {source}")]
    TempDir {
        /// Why (the error names the path).
        source: std::io::Error,
    },
    /// The Landlock ruleset could not be built.
    #[error("cannot prepare the Landlock rules: {message}")]
    Landlock {
        /// The library's message.
        message: String,
    },
    /// The namespaces could not be created.
    #[error("cannot prepare the namespaces: {message}")]
    Namespaces {
        /// What failed, and why.
        message: String,
    },
}

/// What the confined children of a run (the clones of one [`IsolationSettings`])
/// reuse instead of building per process start: the Landlock ruleset of the last
/// writable set and the namespaces (see `linux::ChildPlan::prepare`). Process starts
/// were measured to cost several hundred microseconds more when every child created
/// and tore down namespaces of its own (docs/benchmarks.md).
#[derive(Clone, Default)]
pub(crate) struct Reuse {
    #[cfg(target_os = "linux")]
    inner: Arc<std::sync::Mutex<linux::Reused>>,
}

impl std::fmt::Debug for Reuse {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("Reuse")
    }
}

/// A cache: equal whatever it holds.
impl PartialEq for Reuse {
    fn eq(&self, _other: &Reuse) -> bool {
        true
    }
}

/// The private temporary directory of confined processes (SPEC 16, decision 63): one
/// per run and per parallel branch, shared by all its stages, created when its first
/// confined process starts (a run without one creates none). Clones share whether it
/// was created; removing it is up to the owner of the run.
#[derive(Debug, Clone)]
pub struct PrivateTmpDir {
    inner: Arc<TmpDirState>,
}

#[derive(Debug)]
struct TmpDirState {
    path: PathBuf,
    created: AtomicBool,
}

impl PrivateTmpDir {
    /// The directory at `path`, not created yet.
    pub fn new(path: impl Into<PathBuf>) -> PrivateTmpDir {
        PrivateTmpDir {
            inner: Arc::new(TmpDirState {
                path: path.into(),
                created: AtomicBool::new(false),
            }),
        }
    }

    /// Where it is (or will be).
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Creates it (and its parents) unless that was done before: once per run or
    /// branch, not per stage or process.
    pub(crate) fn create(&self) -> Result<(), IsolationError> {
        if self.inner.created.load(Ordering::Acquire) {
            return Ok(());
        }
        fs_err::create_dir_all(&self.inner.path)
            .map_err(|source| IsolationError::TempDir { source })?;
        self.inner.created.store(true, Ordering::Release);
        Ok(())
    }
}

/// The same directory.
impl PartialEq for PrivateTmpDir {
    fn eq(&self, other: &PrivateTmpDir) -> bool {
        self.inner.path == other.inner.path
    }
}

/// One stage's confinement: what its processes may write and see.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(
    not(target_os = "linux"),
    allow(dead_code, reason = "only Linux enforces the policy")
)]
pub(crate) struct Confinement {
    tmpdir: PrivateTmpDir,
    network: bool,
    writable: Vec<PathBuf>,
    /// Created when missing before a process starts (agents only).
    state_dirs: Vec<PathBuf>,
    /// Created as `{}` when missing before a process starts (agents only).
    state_files: Vec<PathBuf>,
    hidden: Vec<PathBuf>,
    support: KernelSupport,
    reuse: Reuse,
}

impl Confinement {
    /// Creates the private temporary directory before the first confined process
    /// starts (a no-op after that), and the missing state directories and files of an
    /// agent. A state path that cannot be created (a read-only home) is left to the
    /// program, which then meets its own error, as it would unconfined.
    pub(crate) fn create_dirs(&self) -> Result<(), IsolationError> {
        for dir in &self.state_dirs {
            if !dir.is_dir() {
                let _ = fs_err::create_dir_all(dir);
            }
        }
        for file in &self.state_files {
            if !file.exists() {
                // `create_new`: a file the program made meanwhile is left alone.
                let _ = fs_err::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(file)
                    .and_then(|mut created| std::io::Write::write_all(&mut created, b"{}\n"));
            }
        }
        self.tmpdir.create()
    }

    /// Arranges for the child of `command` to enter the confinement before `exec`;
    /// `cwd` is its working directory (writable).
    pub(crate) fn apply(
        &self,
        command: &mut tokio::process::Command,
        cwd: &Path,
    ) -> Result<(), IsolationError> {
        #[cfg(target_os = "linux")]
        {
            self.plan(cwd)?.install(command);
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (command, cwd);
        }
        Ok(())
    }
}

impl Confinement {
    /// What a child in `cwd` enters: the writable set (`cwd`, the private `TMPDIR`, the
    /// writable paths), the hidden paths and the network, with the kernel's support.
    #[cfg(target_os = "linux")]
    fn plan(&self, cwd: &Path) -> Result<linux::ChildPlan, IsolationError> {
        let mut writable = vec![cwd.to_path_buf(), self.tmpdir.path().to_path_buf()];
        writable.extend(self.writable.iter().cloned());
        linux::ChildPlan::prepare(
            &linux::Policy {
                writable: &writable,
                hidden: &self.hidden,
                network: self.network,
                support: self.support,
                cwd,
            },
            &self.reuse.inner,
        )
    }

    /// Starts `program` with `args` in `cwd` confined, by `clone` (no `fork` of this
    /// process); standard input from `stdin` (`/dev/null` when `None`), standard output
    /// and error piped, a process group of its own. `None` where nothing is enforced
    /// (other systems, or a kernel without the mechanisms): the caller starts it plainly.
    #[cfg(target_os = "linux")]
    pub(crate) fn spawn(
        &self,
        program: &std::ffi::OsStr,
        args: &[std::ffi::OsString],
        env: &[(&std::ffi::OsString, &std::ffi::OsString)],
        cwd: &Path,
        stdin: Option<&std::fs::File>,
    ) -> Result<Option<ConfinedChild>, SpawnError> {
        let plan = self.plan(cwd)?;
        let request = spawner::Request {
            program,
            args,
            env,
            cwd,
            stdin,
        };
        Ok(spawner::spawn_planned(&plan, &request)?)
    }
}

/// Why a child could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// Its confinement could not be prepared.
    #[error(transparent)]
    Isolation(#[from] IsolationError),
    /// The system refused to start it.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Whether the kernel supports `mechanism` (probed; never outside Linux).
fn probe_mechanism(mechanism: Mechanism) -> bool {
    #[cfg(target_os = "linux")]
    {
        linux::supports(mechanism)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = mechanism;
        false
    }
}

/// Orders the closing of lock descriptors against the starting of confined children.
static FORK_FENCE: RwLock<()> = RwLock::new(());

/// Held while closing a descriptor that holds a lock (`flock`), such as a run's
/// `run.lock`. A confined child has copies of every descriptor until its `exec` closes
/// them; it is started under the write side of this fence, so a lock released under the
/// read side is free at once instead of staying held by a copy in a child that has not
/// run `exec` yet.
pub fn descriptor_release_fence() -> RwLockReadGuard<'static, ()> {
    FORK_FENCE
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The write side of [`descriptor_release_fence`], held from before a `fork` until the
/// child has closed the descriptors it does not need (for a `Command` with a
/// `pre_exec` step: around `spawn`, which returns once the child has run `exec`).
pub fn fork_fence() -> std::sync::RwLockWriteGuard<'static, ()> {
    FORK_FENCE
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Spawns `command` under [`fork_fence`]: for a command with a `pre_exec` step (a
/// confined one), which forks this process.
pub fn spawn_fenced(
    command: &mut tokio::process::Command,
) -> std::io::Result<tokio::process::Child> {
    let _fence = fork_fence();
    command.spawn()
}

#[cfg(test)]
mod tests;
