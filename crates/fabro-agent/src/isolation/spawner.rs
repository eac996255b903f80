//! The spawner of confined children (SPEC 16): one small process per run and set of
//! namespaces that starts every confined child of the run, so the multi-threaded engine
//! process is never `fork`ed per process start.
//!
//! Applying isolation in a `pre_exec` step makes the standard library `fork` the whole
//! engine process for every child instead of using `posix_spawn` (`vfork`): the kernel
//! copies the page tables of its large address space and the runtime then takes
//! copy-on-write faults on every page it writes (docs/benchmarks.md, "Kernel
//! isolation"). Instead, the first confined start of a run `fork`s the engine once; the
//! child (the spawner) joins the run's namespaces once, closes every descriptor it does
//! not need and serves requests on a Unix socket until the engine closes it. For each
//! request (argument vector, environment, working directory; standard input, output and
//! error and the stage's Landlock ruleset passed with `SCM_RIGHTS`) it starts the child
//! with `clone(CLONE_VM | CLONE_VFORK)`, which costs the same whatever the size of the
//! address space; the child only calls `dup2`, `setpgid`, `chdir`, `prctl`,
//! `landlock_restrict_self` and `execve`. The spawner answers with the pid (or the
//! `errno` of a failed start) on the request socket and reports every exit status,
//! collected through a `signalfd`, on a second socket, which a task of the engine reads
//! and hands to [`ConfinedChild::wait`].
//!
//! The spawner is a forked copy of a multi-threaded process, so everything it runs is
//! async-signal-safe: raw system calls on memory allocated before the `fork`, no
//! allocation, no locks, no panics. A child in its own process group can be signalled
//! from the engine by process group id (same user), so timeouts and cancellation kill
//! it and everything it started exactly as for children the engine starts itself.
//!
//! The cost: the spawner keeps the copy-on-write image of the engine from the moment of
//! its `fork`, so pages the engine writes afterwards are copied once (as after any
//! `fork`) and the old copies stay in memory until the run's settings are dropped.
#![allow(
    unsafe_code,
    reason = "a forked server and clone(CLONE_VM) children: raw system calls only"
)]

use std::collections::HashMap;
use std::ffi::{CString, OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use nix::libc;
use tokio::process::{ChildStderr, ChildStdout};
use tokio::sync::oneshot;

use server::serve;

mod server;

/// The largest request body (working directory, program, arguments, environment).
const MAX_REQUEST: usize = 4 << 20;

/// The most argument and environment strings of one request.
const MAX_STRINGS: usize = 1 << 15;

/// The stack the `clone`d child runs on until it calls `execve`.
const CHILD_STACK: usize = 128 << 10;

/// Request flag: the child leads a process group of its own.
const FLAG_PROCESS_GROUP: u32 = 1;

/// Request flag: a Landlock ruleset follows the three standard descriptors.
const FLAG_RULESET: u32 = 2;

/// Bytes of a request header, a spawn reply and an exit record (two 32-bit numbers).
const RECORD: usize = 8;

/// The namespaces the spawner joins, in order: descriptor and `CLONE_NEW*` type.
pub(super) type Join = Vec<(RawFd, libc::c_int)>;

/// One run's spawner process, seen from the engine. Dropping it (when the run's
/// settings and every child it started are gone) closes the request socket, which ends
/// the spawner; the reading task then sees the end of the exit socket and reaps it.
pub(super) struct Spawner {
    /// Requests and spawn replies; closing it ends the spawner.
    requests: Mutex<UnixStream>,
    /// Exit statuses, filled by the reading task.
    exits: Arc<Mutex<Exits>>,
    /// The spawner process.
    pid: libc::pid_t,
}

/// Exit statuses reported by the spawner and the waiters for them.
#[derive(Default)]
struct Exits {
    slots: HashMap<libc::pid_t, Slot>,
    /// The spawner is gone: no more statuses will come.
    closed: bool,
    /// The reading task was dropped before the end of the socket (its runtime shut
    /// down): the spawner is reaped when dropped.
    unread: bool,
}

/// One child's exit status, or who waits for it.
enum Slot {
    Waiting(oneshot::Sender<ExitStatus>),
    Exited(ExitStatus),
    /// Dropped before it exited: the status is discarded.
    Abandoned,
}

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
    /// The Landlock ruleset to restrict the child with.
    pub(super) ruleset: Option<&'a OwnedFd>,
}

impl Spawner {
    /// Forks the spawner, which joins `join` and serves requests until dropped.
    pub(super) fn start(join: &Join) -> io::Result<Spawner> {
        let (requests, requests_far) = UnixStream::pair()?;
        let (exits_near, exits_far) = UnixStream::pair()?;
        let null = fs_err::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")?;
        let null = OwnedFd::from(null.into_parts().0);
        let mut memory = Memory {
            body: vec![0; MAX_REQUEST],
            strings: vec![std::ptr::null(); MAX_STRINGS + 2],
            stack: vec![0; CHILD_STACK],
        };
        let setup = Setup {
            requests: requests_far.as_raw_fd(),
            exits: exits_far.as_raw_fd(),
            null: null.as_raw_fd(),
            join,
        };
        let fence = super::fork_fence();
        // SAFETY: the child runs `serve`, which only makes raw system calls on memory
        // allocated above and never returns.
        let pid = unsafe { libc::fork() };
        if pid == -1 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: in the forked child, see above.
            unsafe { serve(&setup, &mut memory) }
        }
        drop((requests_far, exits_far, null, memory));
        // The spawner writes one byte once it has closed the descriptors it inherited
        // (locks among them); until then no lock may be released (the fence).
        let mut ready = [0u8; 1];
        let started = (&exits_near).read_exact(&mut ready);
        drop(fence);
        if let Err(error) = started {
            drop(requests);
            // SAFETY: waits for our own child, which failed to prepare.
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
            return Err(error);
        }
        let exits = Arc::new(Mutex::new(Exits::default()));
        if let Err(error) = start_reader(exits_near, Arc::clone(&exits), pid) {
            // Closing the request socket (below) ends the spawner; reap it.
            drop(requests);
            // SAFETY: waits for our own child.
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
            return Err(error);
        }
        Ok(Spawner {
            requests: Mutex::new(requests),
            exits,
            pid,
        })
    }

    /// Starts `request` with standard input from `/dev/null`, piped standard output and
    /// error, in a process group of its own.
    pub(super) fn spawn(self: &Arc<Self>, request: &Request<'_>) -> io::Result<ConfinedChild> {
        let program = resolve(request)?;
        let body = encode(request, &program)?;
        let stdin = fs_err::File::open("/dev/null")?;
        let stdin = OwnedFd::from(stdin.into_parts().0);
        let (stdout_read, stdout_write) = pipe()?;
        let (stderr_read, stderr_write) = pipe()?;
        let mut fds = vec![
            stdin.as_raw_fd(),
            stdout_write.as_raw_fd(),
            stderr_write.as_raw_fd(),
        ];
        let mut flags = FLAG_PROCESS_GROUP;
        if let Some(ruleset) = request.ruleset {
            fds.push(ruleset.as_raw_fd());
            flags |= FLAG_RULESET;
        }
        let reply = {
            let stream = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
            let length = u32::try_from(body.len()).map_err(|_| too_big())?;
            send_with_fds(&stream, &header(length, flags), &fds)?;
            (&*stream).write_all(&body)?;
            let mut reply = [0; RECORD];
            (&*stream).read_exact(&mut reply)?;
            reply
        };
        // The child has its copies; the pipes must end when it (and what it started)
        // closes them.
        drop((stdin, stdout_write, stderr_write));
        let (pid, error) = split(reply);
        if pid <= 0 {
            return Err(io::Error::from_raw_os_error(error));
        }
        let exit = self.register(pid)?;
        Ok(ConfinedChild {
            pid,
            spawner: Arc::clone(self),
            exit: Some(exit),
            status: None,
            stdout: Some(ChildStdout::from_std(std::process::ChildStdout::from(
                stdout_read,
            ))?),
            stderr: Some(ChildStderr::from_std(std::process::ChildStderr::from(
                stderr_read,
            ))?),
        })
    }

    /// Whether it is gone (or its exits are no longer read): a new one is needed.
    pub(super) fn is_closed(&self) -> bool {
        self.exits().closed
    }

    fn exits(&self) -> MutexGuard<'_, Exits> {
        self.exits.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The receiver of `pid`'s exit status (already there when it exited first).
    fn register(&self, pid: libc::pid_t) -> io::Result<oneshot::Receiver<ExitStatus>> {
        let (sender, receiver) = oneshot::channel();
        let mut exits = self.exits();
        match exits.slots.remove(&pid) {
            Some(Slot::Exited(status)) => {
                let _ = sender.send(status);
            }
            _ if exits.closed => return Err(spawner_gone()),
            _ => {
                exits.slots.insert(pid, Slot::Waiting(sender));
            }
        }
        Ok(receiver)
    }
}

/// A child started by the spawner: its pid, pipes and exit status. Dropped before its
/// exit was seen, it is killed (like `kill_on_drop`).
pub(crate) struct ConfinedChild {
    pid: libc::pid_t,
    spawner: Arc<Spawner>,
    exit: Option<oneshot::Receiver<ExitStatus>>,
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
        if let Some(status) = self.status {
            return Ok(status);
        }
        let exit = self.exit.as_mut().ok_or_else(spawner_gone)?;
        let status = exit.await.map_err(|_| spawner_gone())?;
        self.status = Some(status);
        self.exit = None;
        Ok(status)
    }
}

impl Drop for ConfinedChild {
    fn drop(&mut self) {
        if self.status.is_some() {
            return;
        }
        let mut exits = self.spawner.exits();
        // The reader sends under the lock, so a status not received now is not sent.
        let exited = self
            .exit
            .as_mut()
            .is_some_and(|exit| exit.try_recv().is_ok());
        if exited || exits.closed {
            return;
        }
        exits.slots.insert(self.pid, Slot::Abandoned);
        // SAFETY: a plain system call; the pid is not reaped (its exit has not been
        // reported), so it still names our child.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
    }
}

/// Starts reading `stream`'s exit records in a task of the current `tokio` runtime
/// (which the child's pipes need too). Not a thread of its own: a new thread is not
/// free here, its first allocation takes a fresh allocator segment, whose first touch
/// the kernel backs with a zeroed huge page (docs/benchmarks.md, "Kernel isolation").
fn start_reader(
    stream: UnixStream,
    exits: Arc<Mutex<Exits>>,
    spawner: libc::pid_t,
) -> io::Result<()> {
    let runtime = tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
    stream.set_nonblocking(true)?;
    let _entered = runtime.enter();
    let stream = tokio::net::UnixStream::from_std(stream)?;
    let reaper = Reaper {
        exits,
        spawner,
        reaped: false,
    };
    runtime.spawn(read_exits(stream, reaper));
    Ok(())
}

/// The reading task: delivers records until the spawner closes its socket.
async fn read_exits(mut stream: tokio::net::UnixStream, mut reaper: Reaper) {
    use tokio::io::AsyncReadExt;
    let mut record = [0; RECORD];
    while stream.read_exact(&mut record).await.is_ok() {
        deliver(&reaper.exits, record);
    }
    // The spawner closes its socket by exiting: reap it.
    drop(close(&reaper.exits));
    // SAFETY: reaps our own child, the spawner.
    unsafe { libc::waitpid(reaper.spawner, std::ptr::null_mut(), 0) };
    reaper.reaped = true;
}

/// Ends the spawner's bookkeeping if its reading task is dropped before the end of the
/// socket (its runtime shut down): waiters get an error, the next start makes a new
/// spawner, and dropping this one reaps it.
struct Reaper {
    exits: Arc<Mutex<Exits>>,
    spawner: libc::pid_t,
    reaped: bool,
}

impl Drop for Reaper {
    fn drop(&mut self) {
        if !self.reaped {
            close(&self.exits).unread = true;
        }
    }
}

impl Drop for Spawner {
    fn drop(&mut self) {
        let requests = self
            .requests
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        // The end of the request socket ends the spawner.
        let _ = requests.shutdown(std::net::Shutdown::Both);
        if self.exits().unread {
            // SAFETY: reaps our own child, the spawner, which exits at the end of its
            // request socket; nobody else reaps it (its reading task is gone).
            unsafe { libc::waitpid(self.pid, std::ptr::null_mut(), 0) };
        }
    }
}

/// Hands one exit record to its waiter, or keeps it for a later one.
fn deliver(exits: &Mutex<Exits>, record: [u8; RECORD]) {
    let (pid, raw) = split(record);
    let status = ExitStatus::from_raw(raw);
    let mut exits = exits.lock().unwrap_or_else(PoisonError::into_inner);
    match exits.slots.remove(&pid) {
        Some(Slot::Waiting(sender)) => {
            let _ = sender.send(status);
        }
        Some(Slot::Abandoned) => {}
        Some(Slot::Exited(_)) | None => {
            exits.slots.insert(pid, Slot::Exited(status));
        }
    }
}

/// No more statuses will come: every waiter is woken with an error.
fn close(exits: &Mutex<Exits>) -> MutexGuard<'_, Exits> {
    let mut exits = exits.lock().unwrap_or_else(PoisonError::into_inner);
    exits.closed = true;
    // Dropping the senders wakes every waiter with an error.
    exits.slots.clear();
    exits
}

fn spawner_gone() -> io::Error {
    io::Error::other("the spawner of confined processes exited")
}

fn too_big() -> io::Error {
    io::Error::from_raw_os_error(libc::E2BIG)
}

/// Two native-endian 32-bit numbers.
fn header(first: u32, second: u32) -> [u8; RECORD] {
    let mut bytes = [0; RECORD];
    bytes[..4].copy_from_slice(&first.to_ne_bytes());
    bytes[4..].copy_from_slice(&second.to_ne_bytes());
    bytes
}

/// The two signed numbers of a reply or exit record.
fn split(record: [u8; RECORD]) -> (i32, i32) {
    let [a, b, c, d, e, f, g, h] = record;
    (
        i32::from_ne_bytes([a, b, c, d]),
        i32::from_ne_bytes([e, f, g, h]),
    )
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

/// The request body: working directory, program path, then the counted argument
/// vector (program name first) and environment, each string NUL-terminated.
fn encode(request: &Request<'_>, program: &Path) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    let string = |body: &mut Vec<u8>, bytes: &[u8]| -> io::Result<()> {
        CString::new(bytes).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        body.extend_from_slice(bytes);
        body.push(0);
        Ok(())
    };
    string(&mut body, request.cwd.as_os_str().as_bytes())?;
    string(&mut body, program.as_os_str().as_bytes())?;
    let argc = request.args.len() + 1;
    if argc + request.env.len() > MAX_STRINGS {
        return Err(too_big());
    }
    body.extend_from_slice(&u32::try_from(argc).map_err(|_| too_big())?.to_ne_bytes());
    string(&mut body, request.program.as_bytes())?;
    for argument in request.args {
        string(&mut body, argument.as_bytes())?;
    }
    let envc = u32::try_from(request.env.len()).map_err(|_| too_big())?;
    body.extend_from_slice(&envc.to_ne_bytes());
    for (name, value) in request.env {
        let mut entry = name.as_bytes().to_vec();
        entry.push(b'=');
        entry.extend_from_slice(value.as_bytes());
        string(&mut body, &entry)?;
    }
    if body.len() > MAX_REQUEST {
        return Err(too_big());
    }
    Ok(body)
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

/// Room for `SCM_RIGHTS` with up to four descriptors (aligned for `cmsghdr`).
type Control = [u64; 8];

/// Sends `bytes` with `fds` attached.
fn send_with_fds(stream: &UnixStream, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let mut control: Control = [0; 8];
    let fds_bytes = std::mem::size_of_val(fds);
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr().cast_mut().cast(),
        iov_len: bytes.len(),
    };
    // SAFETY: msghdr is plain data; every pointer set below outlives the sendmsg call,
    // and the control buffer is large enough for four descriptors (checked).
    unsafe {
        let space = libc::CMSG_SPACE(u32::try_from(fds_bytes).map_err(|_| too_big())?) as usize;
        if fds.len() > 4 || space > std::mem::size_of::<Control>() {
            return Err(too_big());
        }
        let mut message: libc::msghdr = std::mem::zeroed();
        message.msg_iov = &mut iov;
        message.msg_iovlen = 1;
        message.msg_control = control.as_mut_ptr().cast();
        message.msg_controllen = space as _;
        let cmsg = libc::CMSG_FIRSTHDR(&message);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(fds_bytes as u32) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(cmsg).cast(), fds.len());
        loop {
            let sent = libc::sendmsg(stream.as_raw_fd(), &message, libc::MSG_NOSIGNAL);
            if sent >= 0 {
                // The header is tiny; a stream socket with room takes it whole.
                return if usize::try_from(sent).ok() == Some(bytes.len()) {
                    Ok(())
                } else {
                    Err(io::Error::from(io::ErrorKind::WriteZero))
                };
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }
}

/// Memory the spawner uses, allocated before the `fork`.
struct Memory {
    body: Vec<u8>,
    strings: Vec<*const libc::c_char>,
    stack: Vec<u8>,
}

/// The spawner's descriptors (numbers valid in the forked child).
struct Setup<'a> {
    requests: RawFd,
    exits: RawFd,
    null: RawFd,
    join: &'a Join,
}
