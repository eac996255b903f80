//! [`RunLock`]: `{run_dir}/run.lock`, held by the process executing a run (SPEC 11.4).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::RunIndexError;

/// The advisory lock of a run being executed; released when dropped (or when the
/// process dies, which is what makes interrupted runs detectable).
#[derive(Debug)]
pub struct RunLock {
    // Held for its lock; closing the descriptor releases it (in `Drop`).
    file: Option<std::fs::File>,
}

impl Drop for RunLock {
    fn drop(&mut self) {
        // A child forked at this moment must not keep a copy of the descriptor.
        let _fence = fabro_agent::isolation::descriptor_release_fence();
        drop(self.file.take());
    }
}

impl RunLock {
    /// Takes the lock of the run in `run_dir` and writes this process's pid into
    /// `run.lock`, without waiting for another holder: [`RunIndexError::Locked`] at once
    /// when a live process holds it. Two kinds of holder are waited out (for at most
    /// [`LOCK_PATIENCE`]): readers testing the lock for an instant ([`RunLock::is_held`]),
    /// and a holder whose recorded pid is dead or dying (a zombie, or a process with a
    /// SIGKILL pending): a killed run lets its lock go while it is torn down, and a child
    /// it forked keeps the descriptor until it execs.
    pub fn acquire(run_dir: &Path) -> Result<RunLock, RunIndexError> {
        let path = lock_path(run_dir);
        let io = |action: &'static str| {
            let path = path.clone();
            move |source| RunIndexError::Io {
                action,
                path,
                source,
            }
        };
        let mut file = fs_err::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io("cannot open"))?;
        let started = std::time::Instant::now();
        loop {
            match file.file().try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) => {
                    // An exclusive holder makes the shared test fail too; readers do not.
                    // A holder with this process's pid is waited out like a dead one's
                    // children: a child this process is starting holds a copy of the
                    // descriptor between its `clone` and its `exec`, after the lease of
                    // the run that wrote the pid was dropped.
                    let pid = lock_pid(run_dir);
                    let live_holder = RunLock::is_held(run_dir)
                        && pid.is_some_and(|pid| {
                            pid != std::process::id() && process_is_running(pid)
                        });
                    if live_holder || started.elapsed() >= LOCK_PATIENCE {
                        return Err(RunIndexError::Locked { path, pid });
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(std::fs::TryLockError::Error(source)) => {
                    return Err(io("cannot lock")(source));
                }
            }
        }
        file.set_len(0).map_err(io("cannot write"))?;
        writeln!(file, "{}", std::process::id()).map_err(io("cannot write"))?;
        file.flush().map_err(io("cannot write"))?;
        Ok(RunLock {
            file: Some(file.into_parts().0),
        })
    }

    /// Whether some process holds the lock of the run in `run_dir`. Where the file
    /// system cannot lock, the pid written in `run.lock` is checked instead.
    pub fn is_held(run_dir: &Path) -> bool {
        let path = lock_path(run_dir);
        let Ok(file) = fs_err::File::open(&path) else {
            return false;
        };
        match file.file().try_lock_shared() {
            // Dropping `file` releases the shared lock at once.
            Ok(()) => false,
            Err(std::fs::TryLockError::WouldBlock) => true,
            Err(std::fs::TryLockError::Error(error)) => {
                tracing::debug!(path = %path.display(), %error, "cannot test run lock; checking its pid");
                lock_pid(run_dir).is_some_and(process_is_alive)
            }
        }
    }
}

/// Whether the lock of the run in `run_dir` is free within [`LOCK_PATIENCE`]: a child
/// that another thread of this process is starting (`fork` then `exec`) holds copies of
/// every descriptor for that instant, the just-released lock among them.
#[cfg(test)]
pub(crate) fn released_soon(run_dir: &Path) -> bool {
    let started = std::time::Instant::now();
    while RunLock::is_held(run_dir) {
        if started.elapsed() >= LOCK_PATIENCE {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// How long [`RunLock::acquire`] waits out readers and the children of dead holders.
pub const LOCK_PATIENCE: Duration = Duration::from_secs(2);

/// The pid written in `{run_dir}/run.lock` by the last process that executed the run.
pub fn lock_pid(run_dir: &Path) -> Option<u32> {
    fs_err::read_to_string(lock_path(run_dir))
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn lock_path(run_dir: &Path) -> PathBuf {
    run_dir.join("run.lock")
}

/// Whether `pid` is alive and not on its way out: a zombie, or a process that a SIGKILL
/// is already ending, holds nothing for long (`/proc/{pid}/status`; where it cannot be
/// read, a live pid counts as running).
fn process_is_running(pid: u32) -> bool {
    process_is_alive(pid)
        && !fs_err::read_to_string(format!("/proc/{pid}/status"))
            .is_ok_and(|status| status_says_dying(&status))
}

/// Whether a `/proc/{pid}/status` text describes a zombie or dead process, or one with
/// SIGKILL pending (bit 8 of the pending masks).
fn status_says_dying(status: &str) -> bool {
    const SIGKILL_BIT: u64 = 1 << 8;
    status.lines().any(|line| {
        let Some((key, value)) = line.split_once(':') else {
            return false;
        };
        let value = value.trim();
        match key {
            "State" => value.starts_with('Z') || value.starts_with('X'),
            "SigPnd" | "ShdPnd" => {
                u64::from_str_radix(value, 16).is_ok_and(|mask| mask & SIGKILL_BIT != 0)
            }
            _ => false,
        }
    })
}

fn process_is_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) => true,
        Err(errno) => errno == nix::errno::Errno::EPERM,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 28 item 7: a killed run whose pid is still a zombie while a child it forked
    /// holds the lock is waited out, not reported as a live holder. Here the lock is held
    /// by a second descriptor of this process and let go after 100 ms, and `run.lock`
    /// names a zombie (a child that exited and was not waited for yet).
    #[test]
    fn a_lock_named_by_a_zombie_is_waited_for() {
        let dir = tempfile::tempdir().expect("tempdir");
        let run_dir = dir.path();
        let holder = RunLock::acquire(run_dir).expect("locks");
        let mut zombie = std::process::Command::new("true")
            .spawn()
            .expect("starts `true`");
        let zombie_pid = zombie.id();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !fs_err::read_to_string(format!("/proc/{zombie_pid}/status"))
            .is_ok_and(|status| status_says_dying(&status))
        {
            assert!(std::time::Instant::now() < deadline, "`true` never exited");
            std::thread::sleep(Duration::from_millis(5));
        }
        fs_err::write(lock_path(run_dir), format!("{zombie_pid}\n")).expect("writes the pid");
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(holder);
        });
        let taken = RunLock::acquire(run_dir);
        release.join().expect("the releasing thread ends");
        zombie.wait().expect("reaps the zombie");
        assert!(taken.is_ok(), "{taken:?}");
    }

    #[test]
    fn dying_processes_are_read_from_their_status() {
        let status = |state: &str, pending: &str| {
            format!("Name:\tx\nState:\t{state}\nSigPnd:\t0000000000000000\nShdPnd:\t{pending}\n")
        };
        assert!(!status_says_dying(&status(
            "S (sleeping)",
            "0000000000000000"
        )));
        assert!(status_says_dying(&status("Z (zombie)", "0000000000000000")));
        assert!(status_says_dying(&status(
            "R (running)",
            "0000000000000100"
        )));
        assert!(!status_says_dying(&status(
            "R (running)",
            "0000000000000002"
        )));
        assert!(!status_says_dying("garbage"));
        assert!(process_is_running(std::process::id()));
    }
}
