//! The spawner's side (a forked copy of the engine): join the namespaces, drop every
//! inherited descriptor, then serve spawn requests and report exits. Async-signal-safe
//! throughout: raw system calls on memory allocated before the `fork`, no allocation,
//! no locks, no panics (every index is checked), and `_exit` instead of returning.

use std::ffi::c_void;
use std::os::fd::RawFd;

use nix::libc;

use super::{Control, Memory, Setup, FLAG_PROCESS_GROUP, FLAG_RULESET, RECORD};

/// Everything the `clone`d child needs, in the spawner's memory (which it shares until
/// `execve`).
struct Exec {
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    stdio: [RawFd; 3],
    ruleset: RawFd,
    process_group: bool,
    /// Set by the child when it fails before `execve` succeeds.
    error: libc::c_int,
}

/// The spawner's life: never returns.
///
/// # Safety
/// Only in the child of `fork`, with `setup` and `memory` prepared before it.
pub(super) unsafe fn serve(setup: &Setup<'_>, memory: &mut Memory) -> ! {
    let code = match prepare(setup) {
        // The engine waits for this byte before it releases any lock (the fence).
        Some(signals) if libc::write(setup.exits, [1u8].as_ptr().cast(), 1) == 1 => {
            run(setup, signals, memory)
        }
        _ => 1,
    };
    libc::_exit(code)
}

/// Own process group (terminal signals are for the engine), standard streams on
/// `/dev/null`, the namespaces joined, default signal handlers, `SIGCHLD` through a
/// `signalfd`, every other descriptor closed. The `signalfd`, or `None` on failure.
unsafe fn prepare(setup: &Setup<'_>) -> Option<RawFd> {
    libc::setpgid(0, 0);
    for target in 0..3 {
        if libc::dup2(setup.null, target) == -1 {
            return None;
        }
    }
    for (fd, kind) in setup.join {
        if libc::setns(*fd, *kind) == -1 {
            return None;
        }
    }
    // Joining a mount namespace leaves the working directory behind.
    libc::chdir(c"/".as_ptr());
    reset_signal_handlers();
    let mut set: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut set);
    libc::sigaddset(&mut set, libc::SIGCHLD);
    libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    let signals = libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
    if signals == -1 {
        return None;
    }
    let mut keep = [setup.requests, setup.exits, signals];
    keep.sort_unstable();
    let mut first: libc::c_uint = 3;
    for fd in keep {
        let Ok(fd) = libc::c_uint::try_from(fd) else {
            return None;
        };
        if fd > first {
            close_range(first, fd - 1);
        }
        first = fd + 1;
    }
    close_range(first, libc::c_uint::MAX);
    Some(signals)
}

/// Closes descriptors `first..=last`.
unsafe fn close_range(first: libc::c_uint, last: libc::c_uint) {
    libc::syscall(libc::SYS_close_range, first, last, 0 as libc::c_uint);
}

/// Handlers inherited from the engine (its runtime's signal handling) back to the
/// default, and `SIGPIPE` ignored: a write to a closed socket is an error here.
unsafe fn reset_signal_handlers() {
    for signal in 1..libc::SIGRTMAX() {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(signal, std::ptr::null(), &mut old) == -1 {
            continue;
        }
        if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN {
            let mut default: libc::sigaction = std::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(signal, &default, std::ptr::null_mut());
        }
    }
    libc::signal(libc::SIGPIPE, libc::SIG_IGN);
}

/// Serves until the engine closes the request socket; the exit code.
unsafe fn run(setup: &Setup<'_>, signals: RawFd, memory: &mut Memory) -> libc::c_int {
    loop {
        let mut polled = [
            libc::pollfd {
                fd: setup.requests,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: signals,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        if libc::poll(polled.as_mut_ptr(), 2, -1) == -1 {
            if errno() == libc::EINTR {
                continue;
            }
            return 1;
        }
        if polled[1].revents != 0 && !report_exits(setup.exits, signals) {
            return 0;
        }
        if polled[0].revents != 0 && !handle_request(setup, memory) {
            return 0;
        }
    }
}

fn errno() -> libc::c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Drains the `signalfd` and reports every child that ended; false once the engine
/// is gone.
unsafe fn report_exits(exits: RawFd, signals: RawFd) -> bool {
    let mut info: libc::signalfd_siginfo = std::mem::zeroed();
    let size = std::mem::size_of::<libc::signalfd_siginfo>();
    while libc::read(signals, (&raw mut info).cast(), size) > 0 {}
    loop {
        let mut status: libc::c_int = 0;
        let pid = libc::waitpid(-1, &mut status, libc::WNOHANG);
        if pid <= 0 {
            return true;
        }
        if !write_all(exits, &record(pid, status)) {
            return false;
        }
    }
}

/// Two native-endian 32-bit numbers.
fn record(first: i32, second: i32) -> [u8; RECORD] {
    let mut bytes = [0; RECORD];
    let (a, b) = bytes.split_at_mut(4);
    a.copy_from_slice(&first.to_ne_bytes());
    b.copy_from_slice(&second.to_ne_bytes());
    bytes
}

unsafe fn write_all(fd: RawFd, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        let written = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        if written < 0 && errno() == libc::EINTR {
            continue;
        }
        let Ok(written) = usize::try_from(written) else {
            return false;
        };
        if written == 0 {
            return false;
        }
        bytes = bytes.get(written..).unwrap_or_default();
    }
    true
}

/// Fills `bytes` from `fd`; false at the end of the stream or on an error.
unsafe fn read_exact(fd: RawFd, mut bytes: &mut [u8]) -> bool {
    while !bytes.is_empty() {
        let read = libc::read(fd, bytes.as_mut_ptr().cast(), bytes.len());
        if read < 0 && errno() == libc::EINTR {
            continue;
        }
        let Ok(read) = usize::try_from(read) else {
            return false;
        };
        if read == 0 {
            return false;
        }
        bytes = match bytes.get_mut(read..) {
            Some(rest) => rest,
            None => return false,
        };
    }
    true
}

/// The descriptors received with a request (at most four).
struct Received {
    fds: [RawFd; 4],
    count: usize,
}

impl Received {
    unsafe fn close(&self) {
        for fd in self.fds.iter().take(self.count) {
            libc::close(*fd);
        }
    }
}

/// Reads one request and its descriptors, starts the child and replies; false once
/// the engine closed the socket (or broke the protocol).
unsafe fn handle_request(setup: &Setup<'_>, memory: &mut Memory) -> bool {
    let mut header = [0_u8; RECORD];
    let Some((got, received)) = receive_header(setup.requests, &mut header) else {
        return false;
    };
    if got < RECORD && !read_exact(setup.requests, header.get_mut(got..).unwrap_or_default()) {
        received.close();
        return false;
    }
    let [a, b, c, d, e, f, g, h] = header;
    let length = u32::from_ne_bytes([a, b, c, d]) as usize;
    let flags = u32::from_ne_bytes([e, f, g, h]);
    let Some(body) = memory.body.get_mut(..length) else {
        // The engine never sends more than the body holds.
        received.close();
        return false;
    };
    if !read_exact(setup.requests, body) {
        received.close();
        return false;
    }
    let wanted = if flags & FLAG_RULESET != 0 { 4 } else { 3 };
    let (pid, error) = if received.count == wanted {
        start(memory, length, flags, &received)
    } else {
        (-1, libc::EINVAL)
    };
    received.close();
    write_all(setup.requests, &record(pid, error))
}

/// `recvmsg` of the header with its `SCM_RIGHTS` descriptors (close-on-exec here):
/// bytes read and descriptors, `None` at the end of the stream.
unsafe fn receive_header(fd: RawFd, header: &mut [u8; RECORD]) -> Option<(usize, Received)> {
    let mut control: Control = [0; 8];
    let mut iov = libc::iovec {
        iov_base: header.as_mut_ptr().cast(),
        iov_len: RECORD,
    };
    let mut message: libc::msghdr = std::mem::zeroed();
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    message.msg_controllen = std::mem::size_of::<Control>() as _;
    let got = loop {
        let got = libc::recvmsg(fd, &mut message, libc::MSG_CMSG_CLOEXEC);
        if got < 0 && errno() == libc::EINTR {
            continue;
        }
        break got;
    };
    let got = usize::try_from(got).ok().filter(|got| *got > 0)?;
    let mut received = Received {
        fds: [-1; 4],
        count: 0,
    };
    let mut cmsg = libc::CMSG_FIRSTHDR(&message);
    while !cmsg.is_null() {
        if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
            let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
            let bytes = ((*cmsg).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
            for index in 0..bytes / std::mem::size_of::<RawFd>() {
                let fd = data.add(index).read_unaligned();
                match received.fds.get_mut(received.count) {
                    Some(slot) => {
                        *slot = fd;
                        received.count += 1;
                    }
                    None => {
                        libc::close(fd);
                    }
                }
            }
        }
        cmsg = libc::CMSG_NXTHDR(&message, cmsg);
    }
    Some((got, received))
}

/// Parses the body and starts the child: (pid, 0) or (-1, errno).
unsafe fn start(
    memory: &mut Memory,
    length: usize,
    flags: u32,
    received: &Received,
) -> (libc::pid_t, libc::c_int) {
    let Some(body) = memory.body.get(..length) else {
        return (-1, libc::EINVAL);
    };
    let mut reader = Reader { body, at: 0 };
    let (Some(cwd), Some(path)) = (reader.string(), reader.string()) else {
        return (-1, libc::EINVAL);
    };
    let strings = &mut memory.strings;
    let Some(argc) = reader.vector(strings, 0) else {
        return (-1, libc::EINVAL);
    };
    let Some(envc) = reader.vector(strings, argc + 1) else {
        return (-1, libc::EINVAL);
    };
    let _ = envc;
    let mut exec = Exec {
        path,
        argv: strings.as_ptr(),
        envp: strings.as_ptr().add(argc + 1),
        cwd,
        stdio: [received.fds[0], received.fds[1], received.fds[2]],
        ruleset: if flags & FLAG_RULESET != 0 {
            received.fds[3]
        } else {
            -1
        },
        process_group: flags & FLAG_PROCESS_GROUP != 0,
        error: 0,
    };
    let stack = memory.stack.as_mut_ptr().add(memory.stack.len());
    let stack = stack.sub(stack as usize % 16);
    let pid = libc::clone(
        child,
        stack.cast(),
        libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
        (&raw mut exec).cast(),
    );
    if pid == -1 {
        return (-1, errno());
    }
    // CLONE_VFORK: the child has called `execve` or exited by now.
    let error = std::ptr::read_volatile(&raw const exec.error);
    if error != 0 {
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        return (-1, error);
    }
    (pid, 0)
}

/// Reads NUL-terminated strings and counted vectors of them from a request body.
struct Reader<'a> {
    body: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    /// The next string (a pointer into the body).
    fn string(&mut self) -> Option<*const libc::c_char> {
        let rest = self.body.get(self.at..)?;
        let end = rest.iter().position(|byte| *byte == 0)?;
        let pointer = rest.as_ptr().cast();
        self.at += end + 1;
        Some(pointer)
    }

    /// A count, then that many strings into `strings` from `from`, null-terminated.
    fn vector(&mut self, strings: &mut [*const libc::c_char], from: usize) -> Option<usize> {
        let bytes = self.body.get(self.at..self.at + 4)?;
        let count = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        self.at += 4;
        for index in 0..count {
            let string = self.string()?;
            *strings.get_mut(from + index)? = string;
        }
        *strings.get_mut(from + count)? = std::ptr::null();
        Some(count)
    }
}

/// The `clone`d child: standard streams, process group, default signal mask and
/// `SIGPIPE`, working directory, Landlock, `execve`. It shares the spawner's memory
/// until `execve`, so it only makes system calls and writes `error`.
extern "C" fn child(argument: *mut c_void) -> libc::c_int {
    // SAFETY: `argument` is the spawner's `Exec`, alive until this child has exec'd or
    // exited (CLONE_VFORK suspends the spawner until then).
    unsafe {
        let exec = &mut *argument.cast::<Exec>();
        let failed = |exec: &mut Exec| -> libc::c_int {
            std::ptr::write_volatile(&raw mut exec.error, errno().max(1));
            libc::_exit(127)
        };
        for (target, fd) in exec.stdio.into_iter().enumerate() {
            if libc::dup2(fd, target as libc::c_int) == -1 {
                return failed(exec);
            }
        }
        if exec.process_group && libc::setpgid(0, 0) == -1 {
            return failed(exec);
        }
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        if libc::chdir(exec.cwd) == -1 {
            return failed(exec);
        }
        if exec.ruleset >= 0 {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == -1 {
                return failed(exec);
            }
            if libc::syscall(libc::SYS_landlock_restrict_self, exec.ruleset, 0) == -1 {
                return failed(exec);
            }
        }
        libc::execve(exec.path, exec.argv, exec.envp);
        failed(exec)
    }
}
