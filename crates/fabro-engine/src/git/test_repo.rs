//! Temporary git repositories for the git module's tests, made with the `git` command under an
//! isolated configuration (no system or global config, fixed identities and dates).

use std::path::{Path, PathBuf};
use std::process::Command;

/// A temporary repository with one commit: `README.md` (`hello\n`), `src/lib.rs` and a
/// `.gitignore` ignoring `*.log`.
pub(crate) struct TestRepo {
    dir: tempfile::TempDir,
}

/// What must stay byte-identical in the user's checkout (SPEC 13.6).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct UserSnapshot {
    head: String,
    branch: String,
    status: String,
    index: Vec<u8>,
    files: Vec<(PathBuf, Vec<u8>)>,
}

impl TestRepo {
    /// A repository with the initial commit, or `None` (with a message) when `git` is absent.
    pub(crate) fn new() -> Option<TestRepo> {
        let repo = TestRepo::empty()?;
        repo.write("README.md", "hello\n");
        repo.write("src/lib.rs", "pub fn answer() -> u32 { 42 }\n");
        repo.write(".gitignore", "*.log\n");
        repo.git(&["add", "-A"]);
        repo.git(&["commit", "-q", "-m", "initial"]);
        Some(repo)
    }

    /// An initialised repository without commits, or `None` when `git` is absent.
    pub(crate) fn empty() -> Option<TestRepo> {
        TestRepo::empty_in(None)
    }

    /// [`TestRepo::empty`] in memory (`/dev/shm`) where there is one: for tests that write
    /// many files, which a nearly full disk makes slow to allocate.
    pub(crate) fn empty_in_memory() -> Option<TestRepo> {
        TestRepo::empty_in(Some(Path::new("/dev/shm")).filter(|shm| shm.is_dir()))
    }

    fn empty_in(parent: Option<&Path>) -> Option<TestRepo> {
        if !fabro_test_support::require_program("a git test", "git") {
            return None;
        }
        let dir = match parent {
            Some(parent) => tempfile::tempdir_in(parent).unwrap(),
            None => tempfile::tempdir().unwrap(),
        };
        let repo = TestRepo { dir };
        std::fs::create_dir(repo.path()).unwrap();
        repo.git(&["init", "-q", "-b", "main"]);
        Some(repo)
    }

    /// The repository root (a `repo` directory inside the temporary directory).
    pub(crate) fn path(&self) -> PathBuf {
        self.dir.path().join("repo")
    }

    /// A path beside the repository, inside the temporary directory, for run directories.
    pub(crate) fn outside(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes a file relative to the repository root, creating directories.
    pub(crate) fn write(&self, relative: &str, contents: &str) {
        let path = self.path().join(relative);
        fs_err::create_dir_all(path.parent().unwrap()).unwrap();
        fs_err::write(path, contents).unwrap();
    }

    /// Runs `git` in the repository and returns its trimmed stdout; panics on failure.
    pub(crate) fn git(&self, args: &[&str]) -> String {
        git_in(&self.path(), args)
    }

    /// HEAD, current branch, porcelain status, index bytes and every file outside `.git`.
    pub(crate) fn snapshot(&self) -> UserSnapshot {
        let mut files = Vec::new();
        collect_files(&self.path(), &self.path(), &mut files);
        files.sort();
        let index = fs_err::read(self.path().join(".git/index")).unwrap();
        UserSnapshot {
            head: self.git(&["rev-parse", "HEAD"]),
            branch: self.git(&["symbolic-ref", "HEAD"]),
            status: self.git(&["status", "--porcelain", "--untracked-files=all"]),
            index,
            files,
        }
    }
}

/// Runs `git` in `dir` under the isolated configuration; panics with stderr on failure.
pub(crate) fn git_in(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        // `git status` would otherwise refresh and rewrite the index it reads, which the
        // byte-identical index comparisons must not see.
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Test User")
        .env("GIT_AUTHOR_EMAIL", "user@example.com")
        .env("GIT_COMMITTER_NAME", "Test User")
        .env("GIT_COMMITTER_EMAIL", "user@example.com")
        .env("GIT_AUTHOR_DATE", "2025-01-01T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2025-01-01T00:00:00Z")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .trim_end()
        .to_owned()
}

fn collect_files(root: &Path, dir: &Path, files: &mut Vec<(PathBuf, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        if entry.file_name() == ".git" {
            continue;
        }
        if entry.file_type().unwrap().is_dir() {
            collect_files(root, &path, files);
        } else {
            let contents = fs_err::read(&path).unwrap();
            files.push((path.strip_prefix(root).unwrap().to_path_buf(), contents));
        }
    }
}
