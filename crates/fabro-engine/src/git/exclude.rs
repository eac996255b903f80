//! What a run-branch commit leaves unstaged (SPEC 8.3): `[checkpoint] exclude_globs` in
//! gitignore syntax relative to the working directory, plus the built-in `.fabro/blobs/` and
//! `.fabro/artifacts/` of SPEC 7.7.

use std::path::{Path, PathBuf};

use ignore::gitignore::{Gitignore, GitignoreBuilder};

use super::GitError;

/// Built-in exclusions, relative to the working directory (SPEC 7.7).
const BUILT_IN: [&str; 2] = ["/.fabro/blobs/", "/.fabro/artifacts/"];

/// Compiled exclusions for one run.
#[derive(Debug, Clone)]
pub(crate) struct Excludes {
    /// The working directory relative to the repository root.
    work_dir_relative: PathBuf,
    matcher: Gitignore,
}

impl Excludes {
    /// Compiles `globs` for a working directory at `work_dir_relative` inside the worktree.
    pub(crate) fn new(work_dir_relative: &Path, globs: &[String]) -> Result<Excludes, GitError> {
        // The matcher only ever sees relative paths, so its root is never consulted.
        let mut builder = GitignoreBuilder::new("");
        for glob in BUILT_IN
            .iter()
            .copied()
            .chain(globs.iter().map(String::as_str))
        {
            builder
                .add_line(None, glob)
                .map_err(|source| GitError::ExcludeGlob {
                    glob: glob.to_owned(),
                    source,
                })?;
        }
        let matcher = builder.build().map_err(|source| GitError::ExcludeGlob {
            glob: globs.join(", "),
            source,
        })?;
        Ok(Excludes {
            work_dir_relative: work_dir_relative.to_path_buf(),
            matcher,
        })
    }

    /// Whether `repo_path` (relative to the repository root, `/`-separated) is excluded.
    /// Paths outside the working directory are never excluded.
    pub(crate) fn is_excluded(&self, repo_path: &str) -> bool {
        let Ok(relative) = Path::new(repo_path).strip_prefix(&self.work_dir_relative) else {
            return false;
        };
        if relative.as_os_str().is_empty() {
            return false;
        }
        self.matcher
            .matched_path_or_any_parents(relative, false)
            .is_ignore()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(work_dir: &str, globs: &[&str], path: &str, expected: bool) {
        let globs: Vec<String> = globs.iter().map(|glob| (*glob).to_owned()).collect();
        let excludes = Excludes::new(Path::new(work_dir), &globs).unwrap();
        assert_eq!(
            excludes.is_excluded(path),
            expected,
            "{work_dir} {globs:?} {path}"
        );
    }

    #[test]
    fn built_in_exclusions_apply_at_the_working_directory_root() {
        check("", &[], ".fabro/blobs/abc.json", true);
        check("", &[], ".fabro/artifacts/report.html", true);
        check("", &[], ".fabro/project.toml", false);
        check("", &[], "sub/.fabro/blobs/abc.json", false);
        check("app", &[], "app/.fabro/blobs/abc.json", true);
        check("app", &[], ".fabro/blobs/abc.json", false);
    }

    #[test]
    fn globs_use_gitignore_syntax_relative_to_the_working_directory() {
        check("", &["*.tmp"], "deep/dir/x.tmp", true);
        check("", &["/build"], "build/out.o", true);
        check("", &["/build"], "src/build/out.o", false);
        check("", &["dist/", "!dist/keep.txt"], "dist/a.js", true);
        check("", &["secret/**"], "secret/a/b", true);
        check("app", &["/build"], "app/build/x", true);
        check("app", &["/build"], "build/x", false);
        check("", &["*.tmp", "!keep.tmp"], "keep.tmp", false);
    }

    #[test]
    fn invalid_glob_is_an_error() {
        let result = Excludes::new(Path::new(""), &["a[z-a]".to_owned()]);
        assert!(matches!(result, Err(GitError::ExcludeGlob { .. })));
    }
}
