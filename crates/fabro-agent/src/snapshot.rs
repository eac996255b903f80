//! Git snapshots of a working directory (SPEC 7.6): which paths are modified or
//! untracked, so the files an external agent touched are the difference.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::SystemTime;

use tokio::process::Command;

use crate::environment::ProcessEnv;

/// The output of `git diff --name-only` and `git ls-files --others --exclude-standard`
/// at one moment, paths relative to the working directory.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GitSnapshot {
    directory: PathBuf,
    paths: BTreeSet<String>,
}

impl GitSnapshot {
    /// Takes a snapshot of `directory`; `None` outside a git repository (or when git
    /// cannot run).
    pub async fn take(directory: &Path, env: &ProcessEnv) -> Option<GitSnapshot> {
        let inside = git(directory, env, &["rev-parse", "--is-inside-work-tree"]).await?;
        if inside.trim() != "true" {
            return None;
        }
        let changed = git(directory, env, &["diff", "--name-only", "--relative"]).await?;
        let untracked = git(
            directory,
            env,
            &["ls-files", "--others", "--exclude-standard"],
        )
        .await?;
        Some(GitSnapshot {
            directory: directory.to_path_buf(),
            paths: changed
                .lines()
                .chain(untracked.lines())
                .filter(|line| !line.is_empty())
                .map(str::to_owned)
                .collect(),
        })
    }

    /// A snapshot of `directory` holding `paths` (relative to it).
    pub(crate) fn from_paths(directory: &Path, paths: BTreeSet<String>) -> GitSnapshot {
        GitSnapshot {
            directory: directory.to_path_buf(),
            paths,
        }
    }

    /// Paths of this snapshot, sorted.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.paths.iter().map(String::as_str)
    }

    /// Paths in `self` missing from `before`, sorted lexically.
    pub fn touched_since(&self, before: &GitSnapshot) -> Vec<String> {
        self.paths.difference(&before.paths).cloned().collect()
    }

    /// The most recently modified of `paths` (deleted files count as oldest).
    pub fn last_modified(&self, paths: &[String]) -> Option<String> {
        paths
            .iter()
            .map(|path| {
                let modified = std::fs::metadata(self.directory.join(path))
                    .and_then(|metadata| metadata.modified())
                    .unwrap_or(SystemTime::UNIX_EPOCH);
                (modified, path)
            })
            .max_by(|a, b| a.0.cmp(&b.0).then_with(|| b.1.cmp(a.1)))
            .map(|(_, path)| path.clone())
    }
}

/// Touched files and the last touched one between two optional snapshots (empty
/// outside git).
pub(crate) fn touched(
    before: Option<&GitSnapshot>,
    after: Option<&GitSnapshot>,
) -> (Vec<String>, Option<String>) {
    match (before, after) {
        (Some(before), Some(after)) => {
            let touched = after.touched_since(before);
            let last = after.last_modified(&touched);
            (touched, last)
        }
        _ => (Vec::new(), None),
    }
}

async fn git(directory: &Path, env: &ProcessEnv, arguments: &[&str]) -> Option<String> {
    git_with(directory, env, &[], arguments).await
}

/// `git` with pathspecs taken literally (no glob or magic), for paths read from the disk.
pub(crate) async fn git_literal(
    directory: &Path,
    env: &ProcessEnv,
    arguments: &[&str],
) -> Option<String> {
    git_with(directory, env, &["--literal-pathspecs"], arguments).await
}

async fn git_with(
    directory: &Path,
    env: &ProcessEnv,
    options: &[&str],
    arguments: &[&str],
) -> Option<String> {
    let output = Command::new("git")
        .args(options)
        .args(["-c", "core.quotepath=off"])
        .args(arguments)
        .current_dir(directory)
        .env_clear()
        .envs(env.iter())
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A git repository with one committed file, isolated from user configuration.
    pub(crate) fn repository() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let run = |arguments: &[&str]| {
            let status = std::process::Command::new("git")
                .args(arguments)
                .current_dir(dir.path())
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_AUTHOR_NAME", "t")
                .env("GIT_AUTHOR_EMAIL", "t@t")
                .env("GIT_COMMITTER_NAME", "t")
                .env("GIT_COMMITTER_EMAIL", "t@t")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .unwrap();
            assert!(status.success(), "git {arguments:?}");
        };
        run(&["init", "-q", "-b", "main"]);
        fs_err::write(dir.path().join("tracked.txt"), "one\n").unwrap();
        fs_err::write(dir.path().join(".gitignore"), "ignored/\n").unwrap();
        run(&["add", "."]);
        run(&["commit", "-q", "-m", "init"]);
        dir
    }

    #[tokio::test]
    async fn differences_between_snapshots() {
        let dir = repository();
        let env = ProcessEnv::inherit();
        fs_err::write(dir.path().join("already.txt"), "x").unwrap();
        let before = GitSnapshot::take(dir.path(), &env).await.unwrap();
        assert_eq!(before.paths().collect::<Vec<_>>(), ["already.txt"]);
        fs_err::write(dir.path().join("tracked.txt"), "two\n").unwrap();
        fs_err::write(dir.path().join("already.txt"), "y").unwrap();
        std::fs::create_dir(dir.path().join("ignored")).unwrap();
        fs_err::write(dir.path().join("ignored/x"), "").unwrap();
        fs_err::write(dir.path().join("b.txt"), "").unwrap();
        let after = GitSnapshot::take(dir.path(), &env).await.unwrap();
        let (touched, last) = touched(Some(&before), Some(&after));
        assert_eq!(touched, ["b.txt", "tracked.txt"]);
        assert!(last.is_some());
    }

    #[tokio::test]
    async fn outside_git_there_is_no_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            GitSnapshot::take(dir.path(), &ProcessEnv::inherit()).await,
            None
        );
        assert_eq!(touched(None, None), (Vec::new(), None));
    }
}
