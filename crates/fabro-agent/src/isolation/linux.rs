//! The Linux mechanisms of SPEC 16: a Landlock ruleset for the writable set, and an
//! unprivileged user namespace with a mount namespace (empty read-only mounts over
//! hidden paths) and a network namespace (no interface up, loopback included).
//!
//! [`ChildPlan::prepare`] does all the work that allocates or resolves paths, in the
//! parent, and reuses across spawns what it can: the namespaces live as long as the
//! run (created by a short-lived child, kept by descriptors) and the ruleset while the
//! writable set is unchanged. [`ChildPlan::enter`] runs in the child before `exec` (a
//! `clone`d one, or a forked one for a `pre_exec` step) and makes raw,
//! async-signal-safe system calls only: no allocation, no locks, no Rust I/O types.
//! Order in the child: join the namespaces first (joining needs the privileges
//! Landlock would deny), then Landlock, which also forbids the child to undo the
//! mounts.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use landlock::{AccessFs, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, ABI};
use nix::libc;

use super::{IsolationError, KernelSupport, Mechanism};

/// `LANDLOCK_CREATE_RULESET_VERSION`: asks `landlock_create_ruleset` for the ABI.
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;

/// Device files every isolated process may write: SPEC 16's three, and the
/// pseudo-terminals (`/dev/ptmx` and the terminals it makes under `/dev/pts`), which
/// agents' shells open (gemini's `forkpty`) and which hold no files.
const WRITABLE_DEVICES: [&str; 5] = [
    "/dev/null",
    "/dev/zero",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
];

/// Where the namespace probe mounts a tmpfs (inside its own namespace only).
const PROBE_MOUNT_POINT: &CStr = c"/tmp";

/// What one child is confined to.
pub(super) struct Policy<'a> {
    /// Writable directories (working directory and `TMPDIR` first).
    pub(super) writable: &'a [PathBuf],
    /// Paths to hide.
    pub(super) hidden: &'a [PathBuf],
    /// False: a network namespace of its own.
    pub(super) network: bool,
    /// What the kernel can do.
    pub(super) support: KernelSupport,
    /// The child's working directory (it is entered again after joining a mount
    /// namespace, which resets it).
    pub(super) cwd: &'a Path,
}

/// What the confined children of one run reuse instead of building per spawn: the
/// namespaces (created once, joined by every child) and the last Landlock ruleset.
#[derive(Default)]
pub(super) struct Reused {
    namespaces: Option<Arc<SharedNamespaces>>,
    /// The last ruleset and the files it was built for.
    ruleset: Option<(Vec<Identity>, Arc<OwnedFd>)>,
    /// The writable paths opened for the last start (a path still naming the same file
    /// is not opened again).
    opened: HashMap<PathBuf, Opened>,
    /// The hidden paths as resolved at the last start.
    hidden: HashMap<PathBuf, Hidden>,
}

/// Everything the child needs, prepared before the child is made.
pub(super) struct ChildPlan {
    /// The namespaces to join and the working directory to enter again.
    join: Option<(Arc<SharedNamespaces>, CString)>,
    /// The Landlock ruleset, `None` without Landlock.
    ruleset: Option<Arc<OwnedFd>>,
}

impl ChildPlan {
    /// The ruleset and the namespaces for `policy`, taken from `reused` when they were
    /// built for the same writable set and the same hidden paths and network; what is
    /// built here is left in `reused` for the next spawn. The hidden paths are resolved
    /// on every spawn, so one created since the last spawn is hidden too.
    pub(super) fn prepare(
        policy: &Policy<'_>,
        reused: &Mutex<Reused>,
    ) -> Result<ChildPlan, IsolationError> {
        let mut reused = reused.lock().unwrap_or_else(PoisonError::into_inner);
        let ruleset = if policy.support.supports(Mechanism::Landlock) {
            Some(reused_ruleset(&mut reused, policy.writable)?)
        } else {
            None
        };
        let wanted = NamespaceKey::of(policy, &mut reused.hidden);
        let join = match wanted {
            None => None,
            Some(key) => {
                let shared = match &reused.namespaces {
                    Some(shared) if shared.key == key => Arc::clone(shared),
                    _ => {
                        let shared = Arc::new(SharedNamespaces::create(key)?);
                        reused.namespaces = Some(Arc::clone(&shared));
                        shared
                    }
                };
                let cwd = std::path::absolute(policy.cwd)
                    .ok()
                    .and_then(|cwd| c_path(&cwd))
                    .ok_or_else(|| IsolationError::Namespaces {
                        message: format!("bad working directory {}", policy.cwd.display()),
                    })?;
                Some((shared, cwd))
            }
        };
        Ok(ChildPlan { join, ruleset })
    }

    /// Whether the plan has nothing to enforce (no namespaces, no ruleset).
    pub(super) fn enforces_nothing(&self) -> bool {
        self.join.is_none() && self.ruleset.is_none()
    }

    /// Installs the plan as the child's last step before `exec`.
    #[allow(
        unsafe_code,
        reason = "pre_exec runs in the forked child; ChildPlan::enter is async-signal-safe"
    )]
    pub(super) fn install(self, command: &mut tokio::process::Command) {
        if self.join.is_none() && self.ruleset.is_none() {
            return;
        }
        // SAFETY: the closure only calls `ChildPlan::enter`, which makes raw system calls
        // on data prepared before fork; it neither allocates nor takes locks.
        unsafe {
            command.pre_exec(move || self.enter());
        }
    }

    /// In the child: joins the namespaces, then restricts itself with Landlock.
    pub(super) fn enter(&self) -> io::Result<()> {
        if let Some((namespaces, cwd)) = &self.join {
            namespaces.join(cwd)?;
        }
        if let Some(ruleset) = &self.ruleset {
            restrict_self(ruleset)?;
        }
        Ok(())
    }
}

/// The ruleset for `writable`: the one in `reused` when it was built for the same
/// files (the same paths, each still naming the file it named then), otherwise a new
/// one, kept there.
fn reused_ruleset(
    reused: &mut Reused,
    writable: &[PathBuf],
) -> Result<Arc<OwnedFd>, IsolationError> {
    let mut kept = HashMap::with_capacity(writable.len() + WRITABLE_DEVICES.len());
    let mut files = Vec::with_capacity(writable.len() + WRITABLE_DEVICES.len());
    for path in writable
        .iter()
        .map(PathBuf::as_path)
        .chain(WRITABLE_DEVICES.iter().map(Path::new))
    {
        if let Some(open) = Opened::open(path, reused.opened.remove(path)) {
            files.push(open.identity);
            kept.insert(path.to_path_buf(), open);
        }
    }
    reused.opened = kept;
    if let Some((built_for, ruleset)) = &reused.ruleset {
        if *built_for == files {
            return Ok(Arc::clone(ruleset));
        }
    }
    let ruleset = Arc::new(ruleset(reused.opened.values())?);
    reused.ruleset = Some((files, Arc::clone(&ruleset)));
    Ok(ruleset)
}

/// Which namespaces a child needs: the flags and the hidden paths that exist now.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NamespaceKey {
    flags: libc::c_int,
    hidden_dirs: Vec<CString>,
    hidden_files: Vec<CString>,
    /// The files hidden: a hidden path replaced since (another file under the same
    /// name) needs new mounts.
    hidden_identities: Vec<Identity>,
}

impl NamespaceKey {
    /// The namespaces `policy` needs on this kernel; `None` for none. A mount namespace
    /// only when a hidden path exists.
    fn of(policy: &Policy<'_>, resolved: &mut HashMap<PathBuf, Hidden>) -> Option<NamespaceKey> {
        let mut key = NamespaceKey {
            flags: 0,
            hidden_dirs: Vec::new(),
            hidden_files: Vec::new(),
            hidden_identities: Vec::new(),
        };
        if policy.support.supports(Mechanism::MountNamespace) {
            let mut kept = HashMap::with_capacity(policy.hidden.len());
            for path in policy.hidden {
                let Some(hidden) = Hidden::resolve(path, resolved.remove(path)) else {
                    continue;
                };
                if hidden.identity.is_dir {
                    key.hidden_dirs.push(hidden.name.clone());
                } else {
                    key.hidden_files.push(hidden.name.clone());
                }
                key.hidden_identities.push(hidden.identity);
                kept.insert(path.clone(), hidden);
            }
            *resolved = kept;
            if !key.hidden_dirs.is_empty() || !key.hidden_files.is_empty() {
                key.flags |= libc::CLONE_NEWNS;
            }
        }
        if !policy.network && policy.support.supports(Mechanism::NetworkNamespace) {
            key.flags |= libc::CLONE_NEWNET;
        }
        (key.flags != 0).then_some(key)
    }
}

/// A user namespace with a mount namespace (the hiding mounts made) and/or a network
/// namespace, created once by a short-lived child ([`in_child`]) and kept alive by
/// these descriptors. Every confined child joins them with `setns`, which costs far less
/// than creating (and, at exit, tearing down) namespaces of its own per process start.
/// Children of one run share them: the mounts are read-only, and the network namespace
/// has no interface up.
struct SharedNamespaces {
    key: NamespaceKey,
    user: OwnedFd,
    mount: Option<OwnedFd>,
    network: Option<OwnedFd>,
}

impl SharedNamespaces {
    /// Enters the namespaces of `key` in a child that shares this process's memory and
    /// descriptors ([`in_child`]) and keeps them by the descriptors it opens.
    fn create(key: NamespaceKey) -> Result<SharedNamespaces, IsolationError> {
        let namespaces =
            Namespaces::new(key.flags, key.hidden_dirs.clone(), key.hidden_files.clone());
        let mut open = vec![c"/proc/self/ns/user"];
        if key.flags & libc::CLONE_NEWNS != 0 {
            open.push(c"/proc/self/ns/mnt");
        }
        if key.flags & libc::CLONE_NEWNET != 0 {
            open.push(c"/proc/self/ns/net");
        }
        let mut opened = in_child(&namespaces, &open)
            .map_err(|error| IsolationError::Namespaces {
                message: format!("cannot enter the namespaces: {error}"),
            })?
            .into_iter();
        // `in_child` opened every name or failed: one descriptor per name, in order.
        let (Some(user), mount, network) = (
            opened.next(),
            (key.flags & libc::CLONE_NEWNS != 0)
                .then(|| opened.next())
                .flatten(),
            (key.flags & libc::CLONE_NEWNET != 0)
                .then(|| opened.next())
                .flatten(),
        ) else {
            return Err(IsolationError::Namespaces {
                message: "the user namespace was not opened".to_owned(),
            });
        };
        Ok(SharedNamespaces {
            key,
            user,
            mount,
            network,
        })
    }

    /// In the child: joins the user namespace (which grants the rights to join the
    /// others), the mount namespace (entering `cwd` again: joining one moves the
    /// process to its root) and the network namespace.
    #[allow(unsafe_code, reason = "raw setns and chdir in the forked child")]
    fn join(&self, cwd: &CStr) -> io::Result<()> {
        // SAFETY: plain system calls on descriptors and a NUL-terminated string that
        // outlive the calls.
        unsafe {
            check(libc::setns(self.user.as_raw_fd(), libc::CLONE_NEWUSER))?;
            if let Some(mount) = &self.mount {
                check(libc::setns(mount.as_raw_fd(), libc::CLONE_NEWNS))?;
                check(libc::chdir(cwd.as_ptr()))?;
            }
            if let Some(network) = &self.network {
                check(libc::setns(network.as_raw_fd(), libc::CLONE_NEWNET))?;
            }
        }
        Ok(())
    }
}

/// The Landlock ruleset: every write right handled, all of them granted beneath the
/// `opened` directories, file write rights on the `opened` files (the devices).
fn ruleset<'a>(opened: impl Iterator<Item = &'a Opened>) -> Result<OwnedFd, IsolationError> {
    let error = |error: landlock::RulesetError| IsolationError::Landlock {
        message: error.to_string(),
    };
    // ABI 3's write rights (file writes, creation, removal, renames, truncation). Later
    // ABIs add device ioctls and Unix socket connections, which are not writes.
    let access = AccessFs::from_write(ABI::V3);
    let rules = opened.map(|open| {
        let allowed = if open.identity.is_dir {
            access
        } else {
            access & AccessFs::from_file(ABI::V3)
        };
        Ok::<_, landlock::RulesetError>(PathBeneath::new(open.fd.as_fd(), allowed))
    });
    let created = Ruleset::default()
        .handle_access(access)
        .map_err(error)?
        .create()
        .map_err(error)?
        .add_rules(rules)
        .map_err(error)?;
    Option::<OwnedFd>::from(created).ok_or_else(|| IsolationError::Landlock {
        message: "the kernel refused to create a ruleset".to_owned(),
    })
}

/// Which file a path named when it was last resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    device: u64,
    inode: u64,
    is_dir: bool,
}

impl Identity {
    /// The file `path` names now (symbolic links followed); `None` when there is none.
    fn of(path: &Path) -> Option<Identity> {
        std::fs::metadata(path)
            .ok()
            .map(|meta| Identity::from(&meta))
    }
}

impl From<&std::fs::Metadata> for Identity {
    fn from(meta: &std::fs::Metadata) -> Identity {
        use std::os::unix::fs::MetadataExt;
        Identity {
            device: meta.dev(),
            inode: meta.ino(),
            is_dir: meta.is_dir(),
        }
    }
}

/// A writable path opened (`O_PATH`) for a Landlock rule.
struct Opened {
    identity: Identity,
    fd: PathFd,
}

impl Opened {
    /// `path` opened, reusing `previous` while the path names the same file (one `stat`
    /// instead of an `open`, an `fstat` and a `close`); `None` when it does not exist.
    fn open(path: &Path, previous: Option<Opened>) -> Option<Opened> {
        let now = Identity::of(path)?;
        if let Some(previous) = previous.filter(|previous| previous.identity == now) {
            return Some(previous);
        }
        let fd = PathFd::new(path).ok()?;
        // What was opened, not what the `stat` above saw, in case the path changed since.
        let stat = nix::sys::stat::fstat(fd.as_fd()).ok()?;
        let identity = Identity {
            device: stat.st_dev,
            inode: stat.st_ino,
            is_dir: stat.st_mode & libc::S_IFMT == libc::S_IFDIR,
        };
        Some(Opened { identity, fd })
    }
}

/// A hidden path resolved to the name the mounts hide.
struct Hidden {
    identity: Identity,
    name: CString,
}

impl Hidden {
    /// `path` resolved, reusing `previous` while the path names the same file (one `stat`
    /// instead of a `readlink` per component); `None` when it does not exist.
    fn resolve(path: &Path, previous: Option<Hidden>) -> Option<Hidden> {
        let now = Identity::of(path)?;
        if let Some(previous) = previous.filter(|previous| previous.identity == now) {
            return Some(previous);
        }
        let resolved = path.canonicalize().ok()?;
        Some(Hidden {
            identity: now,
            name: c_path(&resolved)?,
        })
    }
}

/// A path as a C string (`None` for one with an interior NUL, which cannot exist).
fn c_path(path: &Path) -> Option<CString> {
    CString::new(path.as_os_str().as_bytes()).ok()
}

/// The namespaces of one child: which to unshare, its uid and gid maps, and the
/// mounts that hide paths.
struct Namespaces {
    flags: libc::c_int,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    hidden_dirs: Vec<CString>,
    hidden_files: Vec<CString>,
}

impl Namespaces {
    /// A new user namespace plus `flags`, mapping the caller's ids to themselves.
    fn new(flags: libc::c_int, hidden_dirs: Vec<CString>, hidden_files: Vec<CString>) -> Self {
        let uid = nix::unistd::getuid();
        let gid = nix::unistd::getgid();
        Namespaces {
            flags: flags | libc::CLONE_NEWUSER,
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            hidden_dirs,
            hidden_files,
        }
    }

    /// In the child: unshares, writes the id maps, mounts over the hidden paths.
    #[allow(
        unsafe_code,
        reason = "raw system calls on C strings prepared before fork"
    )]
    fn enter(&self) -> io::Result<()> {
        // SAFETY: plain system calls; every pointer is a NUL-terminated string that
        // outlives the call.
        unsafe {
            check(libc::unshare(self.flags))?;
            match write_file(c"/proc/self/setgroups", b"deny") {
                // Kernels before 3.19 have no setgroups file and need no denial.
                Err(error) if error.raw_os_error() == Some(libc::ENOENT) => {}
                other => other?,
            }
            write_file(c"/proc/self/uid_map", &self.uid_map)?;
            write_file(c"/proc/self/gid_map", &self.gid_map)?;
            for dir in &self.hidden_dirs {
                check(libc::mount(
                    c"tmpfs".as_ptr(),
                    dir.as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    c"size=4k,mode=0555".as_ptr().cast(),
                ))?;
            }
            for file in &self.hidden_files {
                check(libc::mount(
                    c"/dev/null".as_ptr(),
                    file.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND,
                    std::ptr::null(),
                ))?;
            }
        }
        Ok(())
    }
}

/// `-1` as the last OS error.
fn check(result: libc::c_int) -> io::Result<()> {
    if result == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Writes `bytes` to `path` with raw system calls (async-signal-safe).
#[allow(unsafe_code, reason = "raw open, write and close in the forked child")]
fn write_file(path: &CStr, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated, `bytes` is valid for its length, and the
    // descriptor is closed on every path.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd == -1 {
            return Err(io::Error::last_os_error());
        }
        let written = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let error = io::Error::last_os_error();
        libc::close(fd);
        if usize::try_from(written).ok() == Some(bytes.len()) {
            Ok(())
        } else {
            Err(error)
        }
    }
}

/// `no_new_privs`, then `landlock_restrict_self` (async-signal-safe).
#[allow(
    unsafe_code,
    reason = "raw prctl and landlock system calls in the forked child"
)]
fn restrict_self(ruleset: &OwnedFd) -> io::Result<()> {
    // SAFETY: plain system calls with integer arguments.
    unsafe {
        check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
        let result = libc::syscall(
            libc::SYS_landlock_restrict_self,
            ruleset.as_raw_fd(),
            0 as libc::c_uint,
        );
        if result == -1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether this kernel supports `mechanism`; the namespaces are tried in a short-lived
/// child.
pub(super) fn supports(mechanism: Mechanism) -> bool {
    match mechanism {
        Mechanism::Landlock => landlock_abi() >= 1,
        Mechanism::MountNamespace => probe(libc::CLONE_NEWNS),
        Mechanism::NetworkNamespace => probe(libc::CLONE_NEWNET),
    }
}

/// The Landlock ABI version, or a negative number without Landlock.
#[allow(unsafe_code, reason = "the Landlock ABI query is a raw system call")]
fn landlock_abi() -> libc::c_long {
    // SAFETY: a null attribute with size 0 and the VERSION flag only returns a number.
    unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0_usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    }
}

/// Whether a child can enter a user namespace plus `flag` (for a mount namespace also
/// mount a tmpfs in it).
fn probe(flag: libc::c_int) -> bool {
    let dirs = if flag == libc::CLONE_NEWNS {
        vec![PROBE_MOUNT_POINT.to_owned()]
    } else {
        Vec::new()
    };
    in_child(&Namespaces::new(flag, dirs, Vec::new()), &[]).is_ok()
}

/// The stack of an [`in_child`] child.
const IN_CHILD_STACK: usize = 64 << 10;

/// The most files an [`in_child`] child opens.
const IN_CHILD_FILES: usize = 3;

/// What an [`in_child`] child does, and what it reports (in memory it shares).
struct InChild<'a> {
    namespaces: &'a Namespaces,
    open: &'a [&'a CStr],
    opened: [RawFd; IN_CHILD_FILES],
    /// Set when it fails.
    error: libc::c_int,
}

/// Enters `namespaces` in a child and opens the files `open` there (its own
/// `/proc/self/ns/*`, which the engine could not open from outside while it is not
/// dumpable); the descriptors, in order.
///
/// The child is made with `clone(CLONE_VM | CLONE_FILES | CLONE_VFORK)`, as
/// `posix_spawn` makes children: it shares this process's memory and descriptor table
/// and suspends the calling thread until it exits. Nothing is copied (a `fork` of the
/// engine copies its page tables, and every page the engine writes afterwards), no
/// program is executed, and no descriptor copy outlives the call (so no lock is held
/// by a copy; no fence needed). The child makes raw system calls only.
#[allow(
    unsafe_code,
    reason = "a clone(CLONE_VM) child making raw system calls on memory prepared here"
)]
fn in_child(namespaces: &Namespaces, open: &[&CStr]) -> io::Result<Vec<OwnedFd>> {
    use std::os::fd::FromRawFd;
    if open.len() > IN_CHILD_FILES {
        return Err(io::Error::from_raw_os_error(libc::E2BIG));
    }
    let mut task = InChild {
        namespaces,
        open,
        opened: [-1; IN_CHILD_FILES],
        error: 0,
    };
    let mut stack = vec![0u8; IN_CHILD_STACK];
    // SAFETY: `in_child_entry` makes raw system calls only, on `task` and `stack`,
    // which live until it has exited and been reaped below.
    unsafe {
        let (pid, _) = super::clone::clone_vfork(
            in_child_entry,
            (&raw mut task).cast(),
            &mut stack,
            libc::CLONE_FILES,
        )?;
        let mut status = 0;
        while libc::waitpid(pid, &mut status, 0) == -1
            && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
        {}
        let error = std::ptr::read_volatile(&raw const task.error);
        let opened = std::ptr::read_volatile(&raw const task.opened);
        // The child opened these in the shared table: they are ours now.
        let opened: Vec<OwnedFd> = opened[..open.len()]
            .iter()
            .filter(|fd| **fd >= 0)
            .map(|fd| OwnedFd::from_raw_fd(*fd))
            .collect();
        if error != 0 {
            return Err(io::Error::from_raw_os_error(error));
        }
        if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0)
            || opened.len() != open.len()
        {
            return Err(io::Error::other("the namespace child failed"));
        }
        Ok(opened)
    }
}

/// The [`in_child`] child (every signal blocked): the namespaces entered, the files
/// opened, `_exit`.
#[allow(unsafe_code, reason = "raw system calls in the clone(CLONE_VM) child")]
extern "C" fn in_child_entry(argument: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `argument` is the caller's `InChild`, alive until this child has exited
    // (the caller is suspended by CLONE_VFORK); only raw system calls follow.
    unsafe {
        let task = &mut *argument.cast::<InChild<'_>>();
        let failed = |task: &mut InChild<'_>, error: libc::c_int| -> libc::c_int {
            std::ptr::write_volatile(&raw mut task.error, error.max(1));
            libc::_exit(1)
        };
        if let Err(error) = task.namespaces.enter() {
            return failed(task, error.raw_os_error().unwrap_or(libc::EINVAL));
        }
        for (index, name) in task.open.iter().enumerate() {
            let fd = libc::open(name.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if fd == -1 {
                let error = io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO);
                return failed(task, error);
            }
            std::ptr::write_volatile(&raw mut task.opened[index], fd);
        }
        libc::_exit(0)
    }
}
