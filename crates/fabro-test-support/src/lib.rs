//! Test helpers shared by fabro's crates; used only as a dev-dependency.
//!
//! [`TestEnv`] gives each test its own temporary directory, `FABRO_HOME` and `HOME`, and
//! builds commands that never see the developer's environment (no colour, UTC, git
//! without system or global config). [`corpus_files`] finds the shared workflow corpus
//! next to the checkout, so tests read it in place instead of copying it.
//! [`ServerProcess`] is a `fabro server` started by a test; [`TestDatabase`] a
//! PostgreSQL database of a test's own; [`S3Server`] an S3-compatible server; [`Gate`] a
//! proxy in front of one that a test closes to lose the service; [`ServerStore`] the
//! store a test's servers keep their runs in (`FABRO_TEST_STORE`).

mod gate;
mod postgres;
mod s3;
mod server_process;
mod server_store;

pub use gate::Gate;
pub use postgres::TestDatabase;
pub use s3::S3Server;
pub use server_process::ServerProcess;
pub use server_store::{Record, ServerStore};

use std::path::{Path, PathBuf};
use std::process::Command;

/// An isolated environment for one test.
pub struct TestEnv {
    root: tempfile::TempDir,
}

impl TestEnv {
    /// Creates a fresh directory named after the test.
    ///
    /// # Panics
    /// When the temporary directory cannot be created: a broken test machine.
    pub fn new(name: &str) -> TestEnv {
        let root = tempfile::Builder::new()
            .prefix(&format!("fabro-{name}-"))
            .tempdir()
            .expect("the test machine can create temporary directories");
        for directory in ["home", "fabro-home", "work"] {
            fs_err::create_dir_all(root.path().join(directory))
                .expect("a fresh temporary directory is writable");
        }
        TestEnv { root }
    }

    /// The working directory for the test's commands.
    pub fn work_dir(&self) -> PathBuf {
        self.root.path().join("work")
    }

    /// `FABRO_HOME` of the test.
    pub fn fabro_home(&self) -> PathBuf {
        self.root.path().join("fabro-home")
    }

    /// Writes `contents` to `relative` under the working directory and returns its path.
    ///
    /// # Panics
    /// When the file cannot be written: a broken test machine.
    pub fn write(&self, relative: &str, contents: &str) -> PathBuf {
        let path = self.work_dir().join(relative);
        if let Some(parent) = path.parent() {
            fs_err::create_dir_all(parent).expect("test directories are writable");
        }
        fs_err::write(&path, contents).expect("test files are writable");
        path
    }

    /// A command for `program` (e.g. `env!("CARGO_BIN_EXE_fabro")`) running in the
    /// working directory with an isolated, deterministic environment.
    pub fn command(&self, program: impl AsRef<Path>) -> Command {
        let mut command = Command::new(program.as_ref());
        command
            .current_dir(self.work_dir())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.root.path().join("home"))
            .env("FABRO_HOME", self.fabro_home())
            .env("NO_COLOR", "1")
            .env("TZ", "UTC")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "fabro-test")
            .env("GIT_AUTHOR_EMAIL", "test@fabro.invalid")
            .env("GIT_COMMITTER_NAME", "fabro-test")
            .env("GIT_COMMITTER_EMAIL", "test@fabro.invalid")
            .env("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z")
            .env("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z");
        command
    }
}

impl Drop for TestEnv {
    #[expect(
        clippy::print_stderr,
        reason = "tells the developer where the kept directory is"
    )]
    fn drop(&mut self) {
        if std::env::var_os("FABRO_KEEP_TEST_DIRS").is_some() {
            let kept = std::mem::replace(
                &mut self.root,
                tempfile::tempdir().expect("the test machine can create temporary directories"),
            );
            let path = kept.keep();
            eprintln!("kept test directory {}", path.display());
        }
    }
}

/// The repository root (the directory holding the workspace `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/fabro-test-support sits two levels below the root")
        .to_path_buf()
}

/// The shared corpus of real workflows (`../shared/corpus/fabro` beside the checkout),
/// if present.
pub fn corpus_dir() -> Option<PathBuf> {
    let directory = workspace_root().join("../shared/corpus/fabro");
    directory.is_dir().then_some(directory)
}

/// Every `.fabro`, `.dot` and `.gv` file of the corpus, sorted; `None` when the corpus
/// is absent (tests then say that they skipped).
pub fn corpus_files() -> Option<Vec<PathBuf>> {
    let directory = corpus_dir()?;
    let mut files = Vec::new();
    collect(&directory, &mut files);
    files.sort();
    Some(files)
}

fn collect(directory: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = fs_err::read_dir(directory) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, files);
        } else if matches!(
            path.extension().and_then(|extension| extension.to_str()),
            Some("fabro" | "dot" | "gv")
        ) {
            files.push(path);
        }
    }
}

/// Says on stderr that `test` skipped its checks and why (visible with `--nocapture`
/// and in CI logs of failures), so a skip never passes silently; where `CI` is set,
/// fails the test instead: CI installs every tool the tests need, so a missing one is a
/// defect of CI, not a reason to pass.
pub fn skip(test: &str, why: &str) {
    skip_where(std::env::var_os("CI").is_some(), test, why);
}

/// [`skip`] with the environment's answer as a parameter.
#[expect(clippy::print_stderr, reason = "a skipped test must say so")]
fn skip_where(ci: bool, test: &str, why: &str) {
    assert!(!ci, "{test} cannot run, and CI is set: {why}");
    eprintln!("SKIPPED {test}: {why}");
}

/// Whether the program `name` can be started (`name --version`); when it cannot,
/// [`skip`]s `test` (which fails it where `CI` is set).
pub fn require_program(test: &str, name: &str) -> bool {
    let found = std::process::Command::new(name)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok();
    if !found {
        skip(test, &format!("the `{name}` program is not installed"));
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 28 item 6: with `CI` set a skip fails the test; without it, it only says so.
    #[test]
    fn a_skip_fails_where_ci_is_set() {
        skip_where(false, "t", "nothing to run");
        let failed = std::panic::catch_unwind(|| skip_where(true, "t", "git is missing"));
        let message = failed.expect_err("a skip in CI fails");
        let text = message
            .downcast_ref::<String>()
            .map(String::as_str)
            .unwrap_or_default();
        assert_eq!(text, "t cannot run, and CI is set: git is missing");
    }
}
