//! `clone(CLONE_VM | CLONE_VFORK)`: the one way this crate starts a child on a small
//! stack in the engine's memory, used by the spawner of confined children and by the
//! short-lived child that creates a run's namespaces.
#![allow(
    unsafe_code,
    reason = "clone(CLONE_VM | CLONE_VFORK) with a raw entry point and stack"
)]

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

use nix::libc;

/// `clone(flags | CLONE_VM | CLONE_VFORK)` running `entry(argument)` on `stack`, with
/// `SIGCHLD` at its exit and every signal blocked in this thread around the call (so
/// no handler of this process runs on the child's stack; the child inherits the full
/// mask). The pid, and the pidfd when `flags` has `CLONE_PIDFD`.
///
/// # Safety
/// `entry` may only make raw system calls (it shares this process's memory), and
/// `argument` and `stack` must stay alive and untouched until this returns (the child
/// has then called `execve` or exited).
pub(super) unsafe fn clone_vfork(
    entry: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    argument: *mut libc::c_void,
    stack: &mut [u8],
    flags: libc::c_int,
) -> io::Result<(libc::pid_t, Option<OwnedFd>)> {
    let mut all: libc::sigset_t = std::mem::zeroed();
    let mut previous: libc::sigset_t = std::mem::zeroed();
    libc::sigfillset(&mut all);
    libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut previous);
    let top = stack.as_mut_ptr().add(stack.len());
    let top = top.sub(top as usize % 16);
    let mut pidfd: libc::c_int = -1;
    let pid = libc::clone(
        entry,
        top.cast(),
        flags | libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
        argument,
        &raw mut pidfd,
    );
    let error = io::Error::last_os_error();
    libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut());
    if pid == -1 {
        return Err(error);
    }
    let pidfd = (flags & libc::CLONE_PIDFD != 0).then(|| OwnedFd::from_raw_fd(pidfd));
    Ok((pid, pidfd))
}
