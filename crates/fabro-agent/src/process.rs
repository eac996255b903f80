//! Child processes in their own process group, killed as a group on timeout,
//! cancellation or drop (shell tool, cli and acp backends here, the engine's command
//! handler through the re-exported [`ProcessGroup`]).

use std::process::ExitStatus;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, ChildStderr, ChildStdout};
use tokio::task::JoinHandle;

/// Grace period between SIGTERM and SIGKILL (SPEC 10.5, 5.2.3).
pub(crate) const KILL_GRACE: Duration = Duration::from_secs(2);

/// How long pipes are drained after the child ended (background processes may keep
/// them open).
const DRAIN: Duration = Duration::from_millis(500);

/// The process group led by a child spawned with `process_group(0)`. While armed,
/// dropping it kills the whole group, so a dropped session or stage future (a stage
/// timeout, a panic elsewhere) leaves no processes behind.
#[derive(Debug)]
pub struct ProcessGroup {
    id: Option<Pid>,
    armed: bool,
}

impl ProcessGroup {
    /// The group led by `child` (spawned with `process_group(0)`, so its pid is the
    /// group id).
    pub fn of(child: &Child) -> ProcessGroup {
        ProcessGroup {
            id: child
                .id()
                .and_then(|id| i32::try_from(id).ok())
                .map(Pid::from_raw),
            armed: true,
        }
    }

    /// The group led by `child` (started by [`crate::ProcessEnv::spawn_piped`], which
    /// puts it in a group of its own).
    pub fn of_spawned(child: &Spawned) -> ProcessGroup {
        ProcessGroup {
            id: child
                .id()
                .and_then(|id| i32::try_from(id).ok())
                .map(Pid::from_raw),
            armed: true,
        }
    }

    /// Sends `signal` to every process of the group.
    pub fn signal(&self, signal: Signal) {
        if let Some(id) = self.id {
            // ESRCH means the group is already gone, which is what we want.
            if let Err(error) = killpg(id, signal) {
                tracing::debug!(group = %id, %signal, %error, "cannot signal process group");
            }
        }
    }

    /// SIGTERM, then SIGKILL after [`KILL_GRACE`] unless the child exited.
    pub(crate) async fn terminate(&self, child: &mut impl Wait) {
        self.signal(Signal::SIGTERM);
        if tokio::time::timeout(KILL_GRACE, child.wait())
            .await
            .is_err()
        {
            self.signal(Signal::SIGKILL);
            // The child is reaped by tokio when it finally dies; a zombie cannot outlive us.
            let _ = tokio::time::timeout(DRAIN, child.wait()).await;
        }
    }

    /// Leaves the group alone from now on.
    pub fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if self.armed {
            self.signal(Signal::SIGKILL);
        }
    }
}

/// A child that can be waited for (cancel-safe).
pub(crate) trait Wait {
    /// Waits for the exit status.
    fn wait(&mut self) -> impl std::future::Future<Output = std::io::Result<ExitStatus>> + Send;
}

impl Wait for Child {
    fn wait(&mut self) -> impl std::future::Future<Output = std::io::Result<ExitStatus>> + Send {
        Child::wait(self)
    }
}

impl Wait for Spawned {
    fn wait(&mut self) -> impl std::future::Future<Output = std::io::Result<ExitStatus>> + Send {
        Spawned::wait(self)
    }
}

pub use crate::isolation::SpawnError;

/// A child started by [`crate::ProcessEnv::spawn_piped`]: standard input from
/// `/dev/null`, standard output and error piped, in a process group of its own, killed
/// when dropped before it exited. A confined child is started with `clone`, not a
/// `fork` of this process (see `isolation::spawner`).
#[derive(Debug)]
pub struct Spawned {
    inner: Inner,
}

enum Inner {
    Local(Child),
    #[cfg(target_os = "linux")]
    Confined(crate::isolation::ConfinedChild),
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Inner::Local(child) => child.fmt(formatter),
            #[cfg(target_os = "linux")]
            Inner::Confined(child) => write!(formatter, "ConfinedChild({:?})", child.id()),
        }
    }
}

impl Spawned {
    /// A child this process started itself.
    pub(crate) fn local(child: Child) -> Spawned {
        Spawned {
            inner: Inner::Local(child),
        }
    }

    /// A confined child (`isolation::spawner`).
    #[cfg(target_os = "linux")]
    pub(crate) fn confined(child: crate::isolation::ConfinedChild) -> Spawned {
        Spawned {
            inner: Inner::Confined(child),
        }
    }

    /// Its pid (also its process group id), until its exit status was taken.
    pub fn id(&self) -> Option<u32> {
        match &self.inner {
            Inner::Local(child) => child.id(),
            #[cfg(target_os = "linux")]
            Inner::Confined(child) => child.id(),
        }
    }

    /// Its standard output, the first time.
    pub fn take_stdout_pipe(&mut self) -> Option<ChildStdout> {
        match &mut self.inner {
            Inner::Local(child) => child.stdout.take(),
            #[cfg(target_os = "linux")]
            Inner::Confined(child) => child.stdout.take(),
        }
    }

    /// Its standard error, the first time.
    pub fn take_stderr_pipe(&mut self) -> Option<ChildStderr> {
        match &mut self.inner {
            Inner::Local(child) => child.stderr.take(),
            #[cfg(target_os = "linux")]
            Inner::Confined(child) => child.stderr.take(),
        }
    }

    /// Waits for it to exit (cancel-safe; again after it returned, the same status).
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        match &mut self.inner {
            Inner::Local(child) => child.wait().await,
            #[cfg(target_os = "linux")]
            Inner::Confined(child) => child.wait().await,
        }
    }
}

/// A pipe read in the background into a buffer that can be inspected at any time.
#[derive(Debug)]
pub(crate) struct Capture {
    buffer: Arc<Mutex<Vec<u8>>>,
    task: Option<JoinHandle<()>>,
}

impl Capture {
    /// Starts reading `pipe` (nothing when `None`).
    pub(crate) fn start(pipe: Option<impl AsyncRead + Unpin + Send + 'static>) -> Capture {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let task = pipe.map(|mut pipe| {
            let buffer = Arc::clone(&buffer);
            tokio::spawn(async move {
                let mut chunk = [0_u8; 8192];
                loop {
                    match pipe.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(read) => buffer
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .extend_from_slice(&chunk[..read]),
                    }
                }
            })
        });
        Capture { buffer, task }
    }

    /// Waits briefly for the pipe to close, then returns what was read.
    pub(crate) async fn finish(mut self) -> String {
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(DRAIN, task).await.is_err() {
                abort.abort();
            }
        }
        let bytes = self.buffer.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}
