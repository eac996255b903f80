//! Starting confined children (SPEC 16) without `fork`ing the engine.
//!
//! Applying isolation in a `pre_exec` step makes the standard library `fork` the whole
//! engine process for every child instead of using `posix_spawn`: the kernel copies the
//! page tables of its large address space and the runtime then takes copy-on-write
//! faults on every page it writes (docs/benchmarks.md, "Kernel isolation"). Instead each
//! confined child is made the way `posix_spawn` makes children:
//! `clone(CLONE_VM | CLONE_VFORK)` runs it on a small stack in the engine's memory and
//! suspends only the calling thread until the child has called `execve` (or failed), so
//! the cost does not depend on the engine's size and nothing is copied. The child is a
//! thread group of its own, which is what joining a user namespace asks for.
//!
//! Between `clone` and `execve` the child shares the engine's memory, so it makes raw,
//! async-signal-safe system calls only, on data prepared here: signal handlers back to
//! their defaults, standard streams, a process group of its own, the run's namespaces
//! joined, its working directory, `no_new_privs` and `landlock_restrict_self`, an empty
//! signal mask, `execve`. A failure before `execve` leaves its `errno` in memory the
//! engine reads once `clone` returns. `clone` also makes a pidfd (`CLONE_PIDFD`), which
//! the runtime watches; the engine reaps the child with `waitid` on it. The child leads
//! its own process group, so timeouts and cancellation signal it and everything it
//! started by process group, as for children started by the runtime.
#![allow(
    unsafe_code,
    reason = "clone(CLONE_VM) children making raw system calls; waitid on pidfds"
)]

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use nix::libc;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::process::{ChildStderr, ChildStdout};

use super::linux::ChildPlan;

/// The stack the `clone`d child runs on until it calls `execve`.
const CHILD_STACK: usize = 64 << 10;

/// One child to start.
pub(super) struct Request<'a> {
    /// The program (resolved on `PATH` here when it has no slash).
    pub(super) program: &'a OsStr,
    /// The arguments after the program name.
    pub(super) args: &'a [OsString],
    /// The environment, exactly.
    pub(super) env: &'a [(&'a OsString, &'a OsString)],
    /// The working directory.
    pub(super) cwd: &'a Path,
    /// Standard input; `/dev/null` when `None`.
    pub(super) stdin: Option<&'a std::fs::File>,
}

/// Everything the `clone`d child reads (and `error`, which it writes), prepared before
/// the `clone` in memory the child shares until `execve`.
struct Exec<'a> {
    plan: &'a ChildPlan,
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    stdio: [RawFd; 3],
    /// Set by the child when it fails before `execve` succeeds.
    error: libc::c_int,
}

/// Whether this kernel has what [`spawn`] needs: `CLONE_PIDFD` (Linux 5.2) and
/// `waitid(P_PIDFD)` (5.4). Landlock needs 5.13, but namespaces alone run on older
/// kernels, where confined children are started with a `pre_exec` step instead.
pub(super) fn supported() -> bool {
    static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        // SAFETY: plain system calls; the pidfd (of this process) is closed below.
        unsafe {
            let pidfd = libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0);
            let Ok(pidfd) = libc::c_int::try_from(pidfd) else {
                return false;
            };
            if pidfd < 0 {
                return false;
            }
            let pidfd = OwnedFd::from_raw_fd(pidfd);
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let id = libc::id_t::try_from(pidfd.as_raw_fd()).unwrap_or_default();
            // Not a child of ours: ECHILD where P_PIDFD is known, EINVAL where not.
            let result = libc::waitid(libc::P_PIDFD, id, &mut info, libc::WEXITED | libc::WNOHANG);
            result == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD)
        }
    })
}

/// Starts a child under `plan` without `fork`ing this process; `None` when there is
/// nothing to enforce, or on a kernel without pidfds (the caller starts the child
/// itself, with the plan installed as a `pre_exec` step).
pub(super) fn spawn_planned(
    plan: &ChildPlan,
    request: &Request<'_>,
) -> io::Result<Option<ConfinedChild>> {
    if plan.enforces_nothing() || !supported() {
        return Ok(None);
    }
    spawn(plan, request).map(Some)
}

fn spawn(plan: &ChildPlan, request: &Request<'_>) -> io::Result<ConfinedChild> {
    // The pipes and the pidfd are registered with the runtime.
    tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
    let program = resolve(request)?;
    let path = c_string(program.as_os_str().as_bytes())?;
    let cwd = c_string(request.cwd.as_os_str().as_bytes())?;
    let argv: Vec<CString> = std::iter::once(request.program)
        .chain(request.args.iter().map(OsString::as_os_str))
        .map(|argument| c_string(argument.as_bytes()))
        .collect::<io::Result<_>>()?;
    let envp: Vec<CString> = request
        .env
        .iter()
        .map(|(name, value)| {
            let mut entry = name.as_bytes().to_vec();
            entry.push(b'=');
            entry.extend_from_slice(value.as_bytes());
            c_string(&entry)
        })
        .collect::<io::Result<_>>()?;
    let argv_pointers = null_terminated(&argv);
    let envp_pointers = null_terminated(&envp);
    let stdin = match request.stdin {
        Some(file) => OwnedFd::from(file.try_clone()?),
        None => OwnedFd::from(fs_err::File::open("/dev/null")?.into_parts().0),
    };
    let (stdout_read, stdout_write) = pipe()?;
    let (stderr_read, stderr_write) = pipe()?;
    let mut exec = Exec {
        plan,
        path: path.as_ptr(),
        argv: argv_pointers.as_ptr(),
        envp: envp_pointers.as_ptr(),
        cwd: cwd.as_ptr(),
        stdio: [
            stdin.as_raw_fd(),
            stdout_write.as_raw_fd(),
            stderr_write.as_raw_fd(),
        ],
        error: 0,
    };
    let mut stack = vec![0u8; CHILD_STACK];
    // The child has copies of every descriptor until `execve` closes the
    // close-on-exec ones; no lock may be released meanwhile (the fence).
    let (pid, pidfd) = {
        let _fence = super::fork_fence();
        // SAFETY: `child` makes raw system calls only; `exec` and `stack` live until
        // the end of this function.
        unsafe {
            super::clone::clone_vfork(
                child,
                std::ptr::from_mut(&mut exec).cast(),
                &mut stack,
                libc::CLONE_PIDFD,
            )?
        }
    };
    let pidfd = pidfd.ok_or_else(|| io::Error::other("clone made no pidfd"))?;
    // SAFETY: CLONE_VFORK: the child has called `execve` or exited by now, and no
    // longer writes `error`.
    let error = unsafe { std::ptr::read_volatile(&raw const exec.error) };
    drop((stdin, stdout_write, stderr_write));
    let mut child = ConfinedChild {
        pid,
        // SAFETY: an `OwnedFd` stays open and names the same pidfd while registered.
        pidfd: Some(unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE)? }),
        status: None,
        stdout: Some(ChildStdout::from_std(std::process::ChildStdout::from(
            stdout_read,
        ))?),
        stderr: Some(ChildStderr::from_std(std::process::ChildStderr::from(
            stderr_read,
        ))?),
    };
    if error != 0 {
        // The child exited with 127 before `execve`; reap it.
        child.reap_blocking();
        return Err(io::Error::from_raw_os_error(error));
    }
    Ok(child)
}

/// The `clone`d child. It shares the engine's memory until `execve`, so it only makes
/// system calls and writes `error`.
extern "C" fn child(argument: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `argument` is the engine's `Exec`, alive until this child has exec'd or
    // exited (CLONE_VFORK suspends the engine's thread until then).
    unsafe {
        let exec = &mut *argument.cast::<Exec<'_>>();
        let failed = |exec: &mut Exec<'_>, error: libc::c_int| -> libc::c_int {
            std::ptr::write_volatile(&raw mut exec.error, error.max(1));
            libc::_exit(127)
        };
        let errno = || {
            io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO)
        };
        reset_signal_handlers();
        for (target, fd) in exec.stdio.into_iter().enumerate() {
            if libc::dup2(fd, target as libc::c_int) == -1 {
                return failed(exec, errno());
            }
        }
        if libc::setpgid(0, 0) == -1 {
            return failed(exec, errno());
        }
        if let Err(error) = exec.plan.enter() {
            return failed(exec, error.raw_os_error().unwrap_or(libc::EPERM));
        }
        if libc::chdir(exec.cwd) == -1 {
            return failed(exec, errno());
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        libc::execve(exec.path, exec.argv, exec.envp);
        failed(exec, errno())
    }
}

/// Handlers of the engine (its runtime's signal handling) back to the default, as
/// `posix_spawn` does; `SIGPIPE` to the default too (the engine ignores it).
///
/// # Safety
/// In the `clone`d child, with every signal blocked.
unsafe fn reset_signal_handlers() {
    for signal in 1..libc::SIGRTMAX() {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(signal, std::ptr::null(), &mut old) == -1 {
            continue;
        }
        if old.sa_sigaction != libc::SIG_DFL
            && (old.sa_sigaction != libc::SIG_IGN || signal == libc::SIGPIPE)
        {
            let mut default: libc::sigaction = std::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(signal, &default, std::ptr::null_mut());
        }
    }
}

/// A confined child: its pid, pipes and exit status. Dropped before its exit was
/// seen, it is killed (like `kill_on_drop`) and reaped.
pub(crate) struct ConfinedChild {
    pid: libc::pid_t,
    /// Readable once it exited; `None` once reaped.
    pidfd: Option<AsyncFd<OwnedFd>>,
    status: Option<ExitStatus>,
    /// Its standard output, until taken.
    pub(crate) stdout: Option<ChildStdout>,
    /// Its standard error, until taken.
    pub(crate) stderr: Option<ChildStderr>,
}

impl ConfinedChild {
    /// The pid, until the exit status was taken.
    pub(crate) fn id(&self) -> Option<u32> {
        if self.status.is_some() {
            return None;
        }
        u32::try_from(self.pid).ok()
    }

    /// Waits for the exit status (cancel-safe; again after it returned, the same
    /// status).
    pub(crate) async fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.status {
                return Ok(status);
            }
            let pidfd = self.pidfd.as_ref().ok_or_else(already_reaped)?;
            let mut ready = pidfd.readable().await?;
            match reap(ready.get_inner(), false)? {
                Some(status) => {
                    self.status = Some(status);
                    drop(ready);
                    self.pidfd = None;
                }
                None => ready.clear_ready(),
            }
        }
    }

    /// Waits for the exit without the runtime (the child is known to be ending).
    fn reap_blocking(&mut self) {
        if let Some(pidfd) = self.pidfd.take() {
            if let Ok(Some(status)) = reap(pidfd.get_ref(), true) {
                self.status = Some(status);
            }
        }
    }
}

impl Drop for ConfinedChild {
    fn drop(&mut self) {
        let Some(pidfd) = self.pidfd.take() else {
            return;
        };
        if let Ok(Some(_)) = reap(pidfd.get_ref(), false) {
            return;
        }
        // SAFETY: a plain system call on our pidfd, which names this child whatever
        // happened to its pid.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                pidfd.get_ref().as_raw_fd(),
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0 as libc::c_uint,
            );
        }
        // Killed, it ends at once; reap it in the background where there is a runtime.
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    while let Ok(mut ready) = pidfd.readable().await {
                        match reap(ready.get_inner(), false) {
                            Ok(None) => ready.clear_ready(),
                            Ok(Some(_)) | Err(_) => return,
                        }
                    }
                });
            }
            Err(_) => {
                let _ = reap(pidfd.get_ref(), true);
            }
        }
    }
}

/// `waitid` on `pidfd`: the exit status once it exited (`None` while it runs and
/// `block` is false).
fn reap(pidfd: &OwnedFd, block: bool) -> io::Result<Option<ExitStatus>> {
    let flags = if block {
        libc::WEXITED
    } else {
        libc::WEXITED | libc::WNOHANG
    };
    loop {
        // SAFETY: `info` is plain data the kernel fills; the pidfd is ours.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let pidfd_id = libc::id_t::try_from(pidfd.as_raw_fd()).map_err(io::Error::other)?;
        // SAFETY: as above.
        let result = unsafe { libc::waitid(libc::P_PIDFD, pidfd_id, &mut info, flags) };
        if result == -1 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        // SAFETY: after a successful waitid, `si_pid` and `si_status` are set (a zero
        // pid: nothing exited yet).
        let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
        if pid == 0 {
            return Ok(None);
        }
        let raw = match info.si_code {
            libc::CLD_EXITED => (status & 0xff) << 8,
            libc::CLD_DUMPED => status | 0x80,
            _ => status,
        };
        return Ok(Some(ExitStatus::from_raw(raw)));
    }
}

fn already_reaped() -> io::Error {
    io::Error::other("the child was already reaped")
}

/// `bytes` as a C string; an interior NUL is invalid input.
fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// Pointers to `strings`, then a null pointer.
fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|string| string.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// The program's path: as given when it contains a slash, otherwise the first
/// executable file of that name on the child's `PATH` (as `execvp` would find it).
fn resolve(request: &Request<'_>) -> io::Result<PathBuf> {
    let program = Path::new(request.program);
    if request.program.as_bytes().contains(&b'/') {
        return Ok(program.to_path_buf());
    }
    let path = request
        .env
        .iter()
        .find(|(name, _)| name.as_os_str() == "PATH")
        .map_or_else(
            || OsString::from("/usr/local/bin:/usr/bin:/bin"),
            |(_, value)| (*value).clone(),
        );
    std::env::split_paths(&path)
        .map(|directory| request.cwd.join(directory).join(program))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o111 != 0)
}

/// A pipe (read end, write end), both close-on-exec.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}
