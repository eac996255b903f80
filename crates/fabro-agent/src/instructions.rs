//! The system prompt of the api backend (SPEC 10.4.1) and project instruction files
//! (SPEC 10.6).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use fabro_llm::Provider;

use crate::timestamp::utc_date;

/// Cap of the combined project instructions, in bytes.
const PROJECT_INSTRUCTIONS_CAP: usize = 32 * 1024;

/// Appended when project instructions were cut.
pub const PROJECT_INSTRUCTIONS_TRUNCATED: &str = "[Project instructions truncated at 32KB]";

/// What the system prompt is built from.
#[derive(Debug, Clone)]
pub(crate) struct SystemPromptInput<'a> {
    /// Provider (chooses base instructions and the instruction file).
    pub(crate) provider: Provider,
    /// Model id.
    pub(crate) model: &'a str,
    /// Working directory.
    pub(crate) working_dir: &'a Path,
    /// Load project instruction files.
    pub(crate) project_memory: bool,
    /// Today's date `YYYY-MM-DD`; the system clock when `None`.
    pub(crate) date: Option<&'a str>,
    /// Whether shell commands run confined to the working tree (SPEC 16).
    pub(crate) confined: bool,
}

/// What the model is told about writes outside the working directory, so that it does
/// not retry refused ones; confined, also that it cannot commit (decision 65: the
/// repository's object store and refs are outside the writable set).
fn write_policy(confined: bool) -> &'static str {
    if confined {
        "Writes outside the working directory are refused: the file tools reject them, and shell commands (and everything they start) may write only inside it and in $TMPDIR, anywhere else they fail with Permission denied. Do not retry such writes. The repository's object store and refs are outside what you may write, so `git add` and `git commit` fail with Permission denied: do not commit, fabro commits the stage's changes at its checkpoint."
    } else {
        "Writes outside the working directory are refused: the file tools reject them. Do not retry such writes."
    }
}

/// Base instructions, environment block and project instructions.
pub(crate) fn system_prompt(input: &SystemPromptInput<'_>) -> String {
    let git_root = git_root(input.working_dir);
    let branch = git_root.as_deref().and_then(current_branch);
    let date = input
        .date
        .map_or_else(|| utc_date(SystemTime::now()), str::to_owned);
    let mut prompt = format!(
        "{}\n{}\n\n<environment>\nWorking directory: {}\nGit repository: {}\nGit branch: {}\nPlatform: {}\nToday's date: {date}\nModel: {}\n</environment>",
        base_instructions(input.provider),
        write_policy(input.confined),
        input.working_dir.display(),
        if git_root.is_some() { "yes" } else { "no" },
        branch.as_deref().unwrap_or("(none)"),
        std::env::consts::OS,
        input.model,
    );
    if input.project_memory {
        let instructions = project_instructions(input.working_dir, input.provider);
        if !instructions.is_empty() {
            prompt.push_str("\n\n<project_instructions>\n");
            prompt.push_str(&instructions);
            prompt.push_str("\n</project_instructions>");
        }
    }
    prompt
}

/// The provider's base instructions.
fn base_instructions(provider: Provider) -> &'static str {
    match provider {
        Provider::OpenAi | Provider::OpenAiCompatible => {
            "You are a coding agent working in a local repository. Use the tools to inspect files, edit them with apply_patch, and run commands with shell. Keep changes minimal and focused on the task. When you are done, answer with a short summary of what you did and no further tool calls."
        }
        Provider::Anthropic | Provider::Gemini | Provider::Simulated => {
            "You are a coding agent working in a local repository. Use the tools to read and search files, edit them with edit_file or write_file, and run commands with shell. Keep changes minimal and focused on the task. When you are done, answer with a short summary of what you did and no further tool calls."
        }
    }
}

/// The instruction file specific to `provider`, besides `AGENTS.md`.
fn provider_file(provider: Provider) -> Option<&'static str> {
    match provider {
        Provider::Anthropic => Some("CLAUDE.md"),
        Provider::Gemini => Some("GEMINI.md"),
        Provider::OpenAi | Provider::OpenAiCompatible => Some(".codex/instructions.md"),
        Provider::Simulated => None,
    }
}

/// `AGENTS.md` and the provider's file from every directory between the git root (or
/// the working directory) and the working directory, root first, capped at 32 KB.
pub fn project_instructions(working_dir: &Path, provider: Provider) -> String {
    let top = git_root(working_dir).unwrap_or_else(|| working_dir.to_path_buf());
    let mut directories: Vec<PathBuf> = working_dir
        .ancestors()
        .take_while(|directory| directory.starts_with(&top))
        .map(Path::to_path_buf)
        .collect();
    directories.reverse();
    let mut parts = Vec::new();
    for directory in directories {
        for name in std::iter::once("AGENTS.md").chain(provider_file(provider)) {
            if let Ok(text) = fs_err::read_to_string(directory.join(name)) {
                if !text.trim().is_empty() {
                    parts.push(text.trim_end().to_owned());
                }
            }
        }
    }
    let combined = parts.join("\n\n");
    if combined.len() <= PROJECT_INSTRUCTIONS_CAP {
        return combined;
    }
    let mut end = PROJECT_INSTRUCTIONS_CAP;
    while !combined.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n{PROJECT_INSTRUCTIONS_TRUNCATED}", &combined[..end])
}

/// The nearest ancestor of `directory` (itself included) holding `.git`.
pub(crate) fn git_root(directory: &Path) -> Option<PathBuf> {
    directory
        .ancestors()
        .find(|candidate| candidate.join(".git").exists())
        .map(Path::to_path_buf)
}

/// The checked-out branch, read from `HEAD` (worktrees' `.git` files followed).
fn current_branch(root: &Path) -> Option<String> {
    let dot_git = root.join(".git");
    let git_dir = if dot_git.is_file() {
        let pointer = fs_err::read_to_string(&dot_git).ok()?;
        let target = pointer.trim().strip_prefix("gitdir:")?.trim().to_owned();
        root.join(target)
    } else {
        dot_git
    };
    let head = fs_err::read_to_string(git_dir.join("HEAD")).ok()?;
    Some(match head.trim().strip_prefix("ref: refs/heads/") {
        Some(branch) => branch.to_owned(),
        None => "(detached HEAD)".to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_root_first_with_provider_file() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs_err::create_dir_all(root.join(".git")).unwrap();
        fs_err::write(root.join(".git/HEAD"), "ref: refs/heads/feature\n").unwrap();
        fs_err::create_dir_all(root.join("sub/.codex")).unwrap();
        fs_err::write(root.join("AGENTS.md"), "root agents").unwrap();
        fs_err::write(root.join("CLAUDE.md"), "root claude").unwrap();
        fs_err::write(root.join("sub/AGENTS.md"), "sub agents").unwrap();
        fs_err::write(root.join("sub/.codex/instructions.md"), "sub codex").unwrap();
        let sub = root.join("sub");
        assert_eq!(
            project_instructions(&sub, Provider::Anthropic),
            "root agents\n\nroot claude\n\nsub agents"
        );
        assert_eq!(
            project_instructions(&sub, Provider::OpenAi),
            "root agents\n\nsub agents\n\nsub codex"
        );
        let prompt = system_prompt(&SystemPromptInput {
            provider: Provider::Anthropic,
            model: "claude-sonnet-4-6",
            working_dir: &sub,
            project_memory: true,
            date: Some("2026-01-02"),
            confined: true,
        });
        assert!(prompt.contains("Git repository: yes\nGit branch: feature\n"));
        assert!(prompt.contains(
            "shell commands (and everything they start) may write only inside it and in $TMPDIR"
        ));
        assert!(prompt.contains("Today's date: 2026-01-02\nModel: claude-sonnet-4-6"));
        assert!(prompt.contains("<project_instructions>\nroot agents\n\nroot claude\n\nsub agents\n</project_instructions>"));
        let without = system_prompt(&SystemPromptInput {
            project_memory: false,
            ..SystemPromptInput {
                provider: Provider::Anthropic,
                model: "m",
                working_dir: &sub,
                project_memory: true,
                date: None,
                confined: false,
            }
        });
        assert!(!without.contains("project_instructions"));
        assert!(without.contains("Writes outside the working directory are refused: the file tools reject them. Do not retry"));
    }

    #[test]
    fn agents_are_told_that_fabro_commits_only_under_workspace() {
        let dir = tempfile::tempdir().unwrap();
        let prompt = |confined| {
            system_prompt(&SystemPromptInput {
                provider: Provider::Anthropic,
                model: "m",
                working_dir: dir.path(),
                project_memory: false,
                date: Some("2026-01-02"),
                confined,
            })
        };
        // Decision 65: under `workspace` the repository's object store and refs are not
        // writable, so the agent's own commits fail; fabro commits at the checkpoint.
        let workspace = prompt(true);
        assert!(
            workspace.contains("`git add` and `git commit` fail with Permission denied"),
            "{workspace}"
        );
        assert!(
            workspace.contains("fabro commits the stage's changes at its checkpoint"),
            "{workspace}"
        );
        let none = prompt(false);
        assert!(!none.contains("git commit"), "{none}");
        assert!(!none.contains("fabro commits"), "{none}");
    }

    #[test]
    fn instructions_are_capped_at_32_kb() {
        let dir = tempfile::tempdir().unwrap();
        fs_err::write(dir.path().join("AGENTS.md"), "é".repeat(20_000)).unwrap();
        let text = project_instructions(dir.path(), Provider::Simulated);
        assert!(text.ends_with("\n[Project instructions truncated at 32KB]"));
        assert!(text.len() <= 32 * 1024 + 50);
    }
}
