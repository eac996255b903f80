//! Repositories named by URL (SPEC 18.3), through the `git` program so that the
//! credentials of the process's environment and git configuration (credential helpers,
//! the SSH agent) apply and nothing else does:
//! - [`Mirrors`]: one bare mirror per URL under a worker's state directory; a ref fetched
//!   into it becomes a commit ([`Mirrors::resolve`]), a commit becomes a plain directory
//!   to read the workflow from ([`Mirrors::checkout`]), and a run's two refs are fetched
//!   to be read ([`Mirrors::fetch_run`]) or on takeover ([`Mirrors::take_over`]).
//! - [`RemotePush`]: after each checkpoint, `fabro/run/{id}` and `refs/fabro/{id}` are
//!   pushed together, each with the commit last pushed (or fetched) as its expected old
//!   value, so that the push of a worker that lost the run is refused.
//!
//! A third ref, `refs/fabro-lease/{id}`, fences the remote on takeover. Every push moves
//! it to the new metadata commit with the same compare-and-swap; a worker that takes
//! the run over first points it at a commit of its own (the fence), so any later push
//! of the worker it took over from is refused, however long that worker was paused
//! between asking for its lease and pushing. The fence is a root commit outside the
//! run's history, which nothing reads.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

use super::{check_run_id, metadata_ref_name, run_branch_name, GitError};

/// A repository named by URL, as a run uses it: the local bare mirror its run branch
/// and worktree are made in, and the remote its refs are pushed to (SPEC 18.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteRepository {
    /// The URL, as the request gave it (credentials in it are never shown).
    pub url: String,
    /// The bare mirror of `url` on this machine.
    pub mirror: PathBuf,
    /// A new run's base commit (fetched into the mirror).
    pub commit: String,
    /// The run's refs as the remote has them: the expected old values of the next push.
    pub pushed: PushedRefs,
}

/// What the remote holds of a run: the commits of `fabro/run/{id}` and
/// `refs/fabro/{id}`, `None` where the ref does not exist.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PushedRefs {
    /// `refs/heads/fabro/run/{id}`.
    pub branch: Option<String>,
    /// `refs/fabro/{id}`.
    pub metadata: Option<String>,
    /// `refs/fabro-lease/{id}`: the metadata commit last pushed, or the fence of the
    /// worker that took the run over last.
    pub lease: Option<String>,
}

/// How often a takeover lists, fetches and fences again when a push of the worker it
/// takes over from landed in between.
const FENCE_ATTEMPTS: usize = 5;

/// `refs/fabro-lease/{run_id}`.
fn lease_ref_name(run_id: &str) -> String {
    format!("refs/fabro-lease/{run_id}")
}

/// The bare mirrors of one machine, one per repository URL, under one directory.
#[derive(Debug, Clone)]
pub struct Mirrors {
    dir: PathBuf,
}

/// One lock per mirror: fetches into the same mirror (its `FETCH_HEAD`, its ref locks)
/// are made one at a time within the process; each worker has a state directory of its
/// own.
fn mirror_lock(path: &Path) -> Arc<Mutex<()>> {
    static LOCKS: OnceLock<Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>> = OnceLock::new();
    let mut locks = LOCKS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Arc::clone(locks.entry(path.to_path_buf()).or_default())
}

impl Mirrors {
    /// The mirrors kept under `dir` (made when first needed).
    pub fn new(dir: impl Into<PathBuf>) -> Mirrors {
        Mirrors { dir: dir.into() }
    }

    /// The mirror of `url`: `{dir}/{hash of the URL}.git`, a bare repository made when
    /// missing.
    fn mirror(&self, url: &str) -> Result<PathBuf, GitError> {
        let name = git2::Oid::hash_object(git2::ObjectType::Blob, url.as_bytes())
            .map_err(GitError::git("hash a repository URL"))?;
        let path = self.dir.join(format!("{name}.git"));
        if !path.join("HEAD").is_file() {
            fs_err::create_dir_all(&self.dir).map_err(GitError::io("create", &self.dir))?;
            let mut init = Command::new("git");
            init.args(["init", "--quiet", "--bare"]).arg(&path);
            program(init, url, "make a mirror")?;
        }
        Ok(path)
    }

    /// The commit `reference` (a branch, a tag or a commit; `None`: the remote's default
    /// branch) names in `url`, fetched into the mirror; the mirror and the commit.
    pub fn resolve(
        &self,
        url: &str,
        reference: Option<&str>,
    ) -> Result<(PathBuf, String), GitError> {
        let mirror = self.mirror(url)?;
        let lock = mirror_lock(&mirror);
        let _held = lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(commit) = reference.filter(|reference| is_full_sha(reference)) {
            if has_commit(&mirror, commit) {
                return Ok((mirror, commit.to_owned()));
            }
        }
        let mut fetch = git_in(&mirror);
        fetch
            .args(["fetch", "--quiet", "--no-tags", "--", url])
            .arg(reference.unwrap_or("HEAD"));
        program(
            fetch,
            url,
            &format!("fetch {}", reference.unwrap_or("HEAD")),
        )?;
        let mut parse = git_in(&mirror);
        parse.args(["rev-parse", "--verify", "--quiet", "FETCH_HEAD^{commit}"]);
        let commit = program(parse, url, "read the fetched commit")?;
        Ok((mirror, commit.trim().to_owned()))
    }

    /// Fetches the commits of run `run_id`'s two refs from `url` into the mirror without
    /// setting any ref of the mirror (to read them: a diff; the mirror may be the one the
    /// run executes in), and `base` when the mirror lacks it. The repository, with the
    /// refs as pushed.
    pub fn fetch_run(
        &self,
        url: &str,
        run_id: &str,
        base: Option<&str>,
    ) -> Result<RemoteRepository, GitError> {
        self.fetch(url, run_id, base, false)
    }

    /// Fetches run `run_id`'s two refs from `url` into the mirror's refs, deleting those
    /// the remote does not have, for a worker that takes the run over or resumes it
    /// (SPEC 18.3); then fences the remote (see the module), so that the run's previous
    /// worker can push nothing more. The repository, with the refs as pushed.
    pub fn take_over(
        &self,
        url: &str,
        run_id: &str,
        base: Option<&str>,
    ) -> Result<RemoteRepository, GitError> {
        self.fetch(url, run_id, base, true)
    }

    fn fetch(
        &self,
        url: &str,
        run_id: &str,
        base: Option<&str>,
        fencing: bool,
    ) -> Result<RemoteRepository, GitError> {
        check_run_id(run_id)?;
        let (mirror, commit) = match base {
            Some(base) => self.resolve(url, Some(base))?,
            None => (self.mirror(url)?, String::new()),
        };
        let lock = mirror_lock(&mirror);
        let _held = lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut pushed = fetch_refs(&mirror, url, run_id, fencing)?;
            if fencing {
                match fence(&mirror, url, run_id, pushed.lease.as_deref()) {
                    Ok(fenced) => pushed.lease = Some(fenced),
                    // The previous worker pushed after the listing: take what it pushed.
                    Err(error) if attempt < FENCE_ATTEMPTS => {
                        tracing::info!(run_id, error = %crate::error_chain(&error), "the run's refs moved while fencing; fetching them again");
                        continue;
                    }
                    Err(error) => return Err(error),
                }
            }
            return Ok(RemoteRepository {
                url: url.to_owned(),
                mirror,
                commit,
                pushed,
            });
        }
    }

    /// Writes the tree of `commit` of `mirror` into the directory `dir` (made; not a
    /// repository): where a new run's workflow and configuration are read from.
    pub fn checkout(mirror: &Path, commit: &str, dir: &Path) -> Result<(), GitError> {
        fs_err::create_dir_all(dir).map_err(GitError::io("create", dir))?;
        let index = dir.with_extension("index");
        let mut checkout = git_in(mirror);
        checkout
            .env("GIT_INDEX_FILE", &index)
            .arg("--work-tree")
            .arg(dir)
            .args(["checkout", "--quiet", "--force", commit, "--", "."]);
        let result = program(checkout, "", &format!("check out {commit}"));
        let _ = fs_err::remove_file(&index);
        result.map(drop)
    }
}

/// Lists run `run_id`'s refs on `url` and fetches its branch and metadata into
/// `mirror`: into its refs when `to_refs` (deleting those the remote does not have),
/// else only their commits; what the remote holds.
fn fetch_refs(
    mirror: &Path,
    url: &str,
    run_id: &str,
    to_refs: bool,
) -> Result<PushedRefs, GitError> {
    let branch_ref = format!("refs/heads/{}", run_branch_name(run_id));
    let metadata_ref = metadata_ref_name(run_id);
    let lease_ref = lease_ref_name(run_id);
    let mut list = Command::new("git");
    list.args([
        "ls-remote",
        "--",
        url,
        &branch_ref,
        &metadata_ref,
        &lease_ref,
    ]);
    let listed = program(list, url, &format!("list the refs of run {run_id}"))?;
    let mut pushed = PushedRefs::default();
    for line in listed.lines() {
        let Some((sha, name)) = line.split_once('\t') else {
            continue;
        };
        let slot = match name {
            name if name == branch_ref => &mut pushed.branch,
            name if name == metadata_ref => &mut pushed.metadata,
            name if name == lease_ref => &mut pushed.lease,
            _ => continue,
        };
        *slot = Some(sha.to_owned());
    }
    let refs = [
        (&pushed.branch, &branch_ref),
        (&pushed.metadata, &metadata_ref),
    ];
    let refspecs: Vec<String> = refs
        .iter()
        .filter(|(sha, _)| sha.is_some())
        .map(|(_, name)| {
            if to_refs {
                format!("+{name}:{name}")
            } else {
                (*name).clone()
            }
        })
        .collect();
    if !refspecs.is_empty() {
        let mut fetch = git_in(mirror);
        fetch
            .args(["fetch", "--quiet", "--no-tags", "--", url])
            .args(&refspecs);
        program(fetch, url, &format!("fetch the refs of run {run_id}"))?;
    }
    for (sha, name) in refs {
        if to_refs && sha.is_none() {
            let mut delete = git_in(mirror);
            delete.args(["update-ref", "-d", name]);
            program(delete, url, &format!("delete the stale {name}"))?;
        }
    }
    Ok(pushed)
}

/// Points `refs/fabro-lease/{run_id}` on `url` at a new root commit made in `mirror`,
/// if it is still `held` (absent: `None`); the commit.
fn fence(mirror: &Path, url: &str, run_id: &str, held: Option<&str>) -> Result<String, GitError> {
    let mut tree = git_in(mirror);
    tree.arg("mktree");
    let tree = program(tree, url, "write the empty tree")?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos());
    let mut commit = git_in(mirror);
    commit
        .envs([
            ("GIT_AUTHOR_NAME", "fabro"),
            ("GIT_AUTHOR_EMAIL", "fabro@localhost"),
            ("GIT_COMMITTER_NAME", "fabro"),
            ("GIT_COMMITTER_EMAIL", "fabro@localhost"),
        ])
        .args(["commit-tree", tree.trim(), "-m"])
        .arg(format!(
            "fabro: run {run_id} taken over\n\nFabro-Fence: {}-{nanos}",
            std::process::id()
        ));
    let fenced = program(commit, url, "write the fence")?.trim().to_owned();
    let lease_ref = lease_ref_name(run_id);
    let mut push = git_in(mirror);
    push.args(["push", "--quiet", "--atomic", "--no-verify"])
        .arg(format!(
            "--force-with-lease={lease_ref}:{}",
            held.unwrap_or("")
        ))
        .args(["--", url])
        .arg(format!("{fenced}:{lease_ref}"));
    program(push, url, &format!("fence the refs of run {run_id}"))?;
    Ok(fenced)
}

/// Pushes a run's refs after each checkpoint (SPEC 18.3), each a compare-and-swap on the
/// commit this process last pushed or fetched.
#[derive(Debug, Clone)]
pub(crate) struct RemotePush {
    url: String,
    pushed: PushedRefs,
}

impl RemotePush {
    /// Pushes to `url`, whose refs of the run are `pushed` now.
    pub(crate) fn new(url: String, pushed: PushedRefs) -> RemotePush {
        RemotePush { url, pushed }
    }

    /// Points `fabro/run/{run_id}` at `branch`, and `refs/fabro/{run_id}` and
    /// `refs/fabro-lease/{run_id}` at `metadata` on the remote, in one atomic push from
    /// the repository at `git_dir`; nothing when all are as last pushed. Refused
    /// ([`GitError::Program`]) when any ref moved since: another worker holds the run.
    pub(crate) fn push(
        &mut self,
        git_dir: &Path,
        run_id: &str,
        branch: &str,
        metadata: &str,
    ) -> Result<(), GitError> {
        let wanted = PushedRefs {
            branch: Some(branch.to_owned()),
            metadata: Some(metadata.to_owned()),
            lease: Some(metadata.to_owned()),
        };
        if wanted == self.pushed {
            return Ok(());
        }
        let branch_ref = format!("refs/heads/{}", run_branch_name(run_id));
        let metadata_ref = metadata_ref_name(run_id);
        let lease_ref = lease_ref_name(run_id);
        let lease = |name: &str, old: &Option<String>| {
            format!("--force-with-lease={name}:{}", old.as_deref().unwrap_or(""))
        };
        let mut push = git_in(git_dir);
        push.args(["push", "--quiet", "--atomic", "--no-verify"])
            .arg(lease(&branch_ref, &self.pushed.branch))
            .arg(lease(&metadata_ref, &self.pushed.metadata))
            .arg(lease(&lease_ref, &self.pushed.lease))
            .args(["--", &self.url])
            .arg(format!("{branch}:{branch_ref}"))
            .arg(format!("{metadata}:{metadata_ref}"))
            .arg(format!("{metadata}:{lease_ref}"));
        program(push, &self.url, &format!("push the refs of run {run_id}"))?;
        self.pushed = wanted;
        Ok(())
    }
}

/// What a checkout offers `fabro run --server` (SPEC 18.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckoutOrigin {
    /// Not inside a git checkout with a commit, or without an `origin` remote: the
    /// workflow is sent as it is, to run in a directory of the server's.
    None,
    /// Tracked files have changes that are not committed.
    Dirty,
    /// `origin`'s URL carries credentials ([`has_credentials`]), which are not sent.
    WithCredentials,
    /// `HEAD` is on no ref of `origin`.
    Unpushed {
        /// The commit of `HEAD`.
        head: String,
    },
    /// `origin`'s URL and the commit of `HEAD`, which `origin` has.
    Pushed {
        /// The URL of `origin`.
        url: String,
        /// The commit of `HEAD`.
        head: String,
        /// The root of the checkout's working tree.
        root: PathBuf,
    },
}

/// What the checkout around `dir` offers a run on a server (SPEC 18.3): its `origin`
/// URL and `HEAD` when the tree is clean and `origin` has `HEAD` on one of its refs.
pub fn checkout_origin(dir: &Path) -> Result<CheckoutOrigin, GitError> {
    let (repo_root, head) = match super::inspect(dir)? {
        super::RepoState::Clean {
            repo_root,
            head_sha,
            ..
        } => (repo_root, head_sha),
        super::RepoState::Dirty { .. } => {
            return Ok(if has_origin(dir) {
                CheckoutOrigin::Dirty
            } else {
                CheckoutOrigin::None
            })
        }
        _ => return Ok(CheckoutOrigin::None),
    };
    let mut get_url = Command::new("git");
    get_url
        .arg("-C")
        .arg(&repo_root)
        .args(["remote", "get-url", "origin"]);
    let Ok(url) = program(get_url, "", "read the URL of origin") else {
        return Ok(CheckoutOrigin::None);
    };
    let url = url.trim().to_owned();
    if has_credentials(&url) {
        return Ok(CheckoutOrigin::WithCredentials);
    }
    let mut list = Command::new("git");
    list.arg("-C").arg(&repo_root).args(["ls-remote", "origin"]);
    let listed = program(list, &url, "list the refs of origin")?;
    let tips: Vec<&str> = listed
        .lines()
        .filter_map(|line| line.split_once('\t').map(|(sha, _)| sha))
        .collect();
    if tips.contains(&head.as_str()) || reachable_from(&repo_root, &head, &tips)? {
        return Ok(CheckoutOrigin::Pushed {
            url,
            head,
            root: repo_root,
        });
    }
    Ok(CheckoutOrigin::Unpushed { head })
}

fn has_origin(dir: &Path) -> bool {
    Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["remote", "get-url", "origin"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Whether `head` is an ancestor of one of `tips` known to the repository at `root`.
fn reachable_from(root: &Path, head: &str, tips: &[&str]) -> Result<bool, GitError> {
    let repo = git2::Repository::open(root).map_err(GitError::git("open the checkout"))?;
    let head = git2::Oid::from_str(head).map_err(GitError::git("read HEAD"))?;
    for tip in tips {
        let Ok(tip) = git2::Oid::from_str(tip) else {
            continue;
        };
        if repo.find_commit(tip).is_ok() && repo.graph_descendant_of(tip, head).unwrap_or(false) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Whether `text` is a full hexadecimal commit id.
fn is_full_sha(text: &str) -> bool {
    text.len() == 40 && text.bytes().all(|byte| byte.is_ascii_hexdigit())
}

fn has_commit(mirror: &Path, commit: &str) -> bool {
    git_in(mirror)
        .args(["cat-file", "-e", &format!("{commit}^{{commit}}")])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// `git` on the repository `git_dir`, never prompting for credentials.
fn git_in(git_dir: &Path) -> Command {
    let mut command = Command::new("git");
    command.arg("--git-dir").arg(git_dir);
    command
}

/// Runs `command` to `action`; its standard output, or [`GitError::Program`] with the
/// end of its standard error (`url`'s credentials and secrets taken out).
fn program(mut command: Command, url: &str, action: &str) -> Result<String, GitError> {
    command
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .stdin(std::process::Stdio::null());
    let output = command.output().map_err(|source| GitError::Program {
        action: action.to_owned(),
        detail: format!("cannot run git: {source}"),
    })?;
    if output.status.success() {
        return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let detail = stderr
        .lines()
        .filter(|line| !line.trim().is_empty())
        .rev()
        .take(3)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join("; ");
    Err(GitError::Program {
        action: action.to_owned(),
        detail: without_credentials(&detail, url),
    })
}

/// Whether `url` carries credentials: a password in its user information, or any user
/// information over HTTP(S), where a token is commonly given as the user. A run's URL is
/// kept in the store and in its metadata, so credentials come from the worker's git
/// configuration instead (SPEC 18.3); `ssh://git@host/…` and `git@host:…` name a user
/// only.
pub fn has_credentials(url: &str) -> bool {
    let Some((scheme, rest)) = url.split_once("://") else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let Some((userinfo, _)) = authority.rsplit_once('@') else {
        return false;
    };
    userinfo.contains(':') || matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https")
}

/// `text` without the user information of `url` and without known secrets.
pub fn without_credentials(text: &str, url: &str) -> String {
    let mut text = text.to_owned();
    let userinfo = url
        .split_once("://")
        .and_then(|(_, rest)| rest.split('/').next())
        .and_then(|authority| authority.rsplit_once('@'))
        .map(|(userinfo, _)| userinfo)
        .filter(|userinfo| !userinfo.is_empty());
    if let Some(userinfo) = userinfo {
        text = text.replace(&format!("{userinfo}@"), "");
    }
    fabro_llm::redact::redactor().redact_string(&mut text);
    text
}

#[cfg(test)]
mod tests;
