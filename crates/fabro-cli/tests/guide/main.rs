//! The user guide (`docs/guide`) and the README checked against the real program (issue
//! 36): every workflow and configuration block is accepted (or fails as shown), the
//! generated reference pages are current, each tutorial's workflow ends as its page says,
//! the README stays a small landing page, and no relative link leaves the repository.

use std::path::{Path, PathBuf};
use std::process::Output;

use fabro_test_support::{workspace_root, TestEnv};

mod reference;

/// Runs `fabro` with `args` in `env`.
fn fabro(env: &TestEnv, args: &[&str]) -> Output {
    env.command(env!("CARGO_BIN_EXE_fabro"))
        .args(args)
        .output()
        .expect("the fabro binary runs")
}

/// The Markdown files of the guide's source, sorted.
fn guide_pages() -> Vec<PathBuf> {
    let mut pages = Vec::new();
    markdown_files(&workspace_root().join("docs/guide/src"), &mut pages);
    pages.sort();
    assert!(!pages.is_empty(), "docs/guide/src has pages");
    pages
}

/// Every `.md` file under `dir`, skipping build output and dependencies.
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs_err::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(
                name.as_str(),
                "target" | "book" | "node_modules" | "fuzz_target"
            ) && !name.starts_with('.')
            {
                markdown_files(&path, out);
            }
        } else if name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// One fenced block: its info string, its text and the line it starts on.
struct Block {
    info: String,
    text: String,
    line: usize,
}

/// The fenced code blocks of a Markdown text (``` fences only, as the guide uses).
fn blocks(markdown: &str) -> Vec<Block> {
    let mut found = Vec::new();
    let mut current: Option<Block> = None;
    for (index, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        match current.take() {
            None if trimmed.starts_with("```") => {
                current = Some(Block {
                    info: trimmed.trim_start_matches('`').trim().to_owned(),
                    text: String::new(),
                    line: index + 1,
                });
            }
            None => {}
            Some(block) if trimmed.starts_with("```") => found.push(block),
            Some(mut block) => {
                block.text.push_str(line);
                block.text.push('\n');
                current = Some(block);
            }
        }
    }
    found
}

fn language(info: &str) -> &str {
    info.split([',', ' ']).next().unwrap_or("")
}

/// Every `dot`/`fabro` block of the guide and README validates with `fabro validate`;
/// a block marked `error-example` fails (exit 1) and prints every line of the `text`
/// block that follows it. Every `toml` block parses with the real configuration parser,
/// except a block marked `not-fabro-config` (another program's file).
#[test]
fn every_workflow_and_configuration_block_is_accepted_or_fails_as_shown() {
    let mut pages = guide_pages();
    pages.push(workspace_root().join("README.md"));
    let env = TestEnv::new("guide-blocks");
    let mut checked = 0;
    for page in &pages {
        let markdown = fs_err::read_to_string(page).expect("the page is readable");
        let found = blocks(&markdown);
        for (index, block) in found.iter().enumerate() {
            let place = format!("{}:{}", page.display(), block.line);
            match language(&block.info) {
                "dot" | "fabro" => {
                    checked += 1;
                    env.write("example.fabro", &block.text);
                    let output = fabro(&env, &["validate", "example.fabro"]);
                    let printed = format!(
                        "{}{}",
                        String::from_utf8_lossy(&output.stdout),
                        String::from_utf8_lossy(&output.stderr)
                    );
                    if block.info.contains("error-example") {
                        assert_eq!(output.status.code(), Some(1), "{place}: {printed}");
                        let shown = found
                            .get(index + 1)
                            .filter(|next| language(&next.info) == "text")
                            .unwrap_or_else(|| {
                                panic!("{place}: an error example is followed by its output")
                            });
                        for line in shown.text.lines().filter(|line| !line.is_empty()) {
                            let line = line.trim_start_matches("$ fabro validate example.fabro");
                            assert!(
                                line.is_empty() || printed.contains(line),
                                "{place}: fabro validate does not print {line:?}:\n{printed}"
                            );
                        }
                    } else {
                        assert_eq!(output.status.code(), Some(0), "{place}: {printed}");
                    }
                }
                // A file of another program (codex's config.toml), said so in its info string.
                "toml" if block.info.contains("not-fabro-config") => {}
                // `$FABRO_HOME/server.toml`: the server's own tables and a layer.
                "toml" if block.info.contains("server.toml") => {
                    checked += 1;
                    let home = tempfile::tempdir().expect("a temporary directory");
                    fs_err::write(home.path().join("server.toml"), &block.text)
                        .expect("server.toml is written");
                    let flags = fabro_server::SettingsFlags::default();
                    if let Err(error) =
                        fabro_server::ServerSettings::load(home.path(), &flags, home.path())
                    {
                        panic!("{place}: the server rejects the block: {error}");
                    }
                }
                "toml" => {
                    checked += 1;
                    if let Err(error) =
                        fabro_engine::configuration::parse(&block.text, Path::new("guide.toml"))
                    {
                        panic!("{place}: the configuration parser rejects the block: {error}");
                    }
                }
                _ => {}
            }
        }
    }
    assert!(
        checked >= 10,
        "the guide has workflow and TOML blocks ({checked})"
    );
}

/// One tutorial: its page, its workflow in `examples/`, the command's arguments after the
/// workflow, and the exit code and final status the page states.
struct Tutorial {
    page: &'static str,
    example: &'static str,
    args: &'static [&'static str],
    exit_code: i32,
    status: &'static str,
}

const TUTORIALS: &[Tutorial] = &[
    Tutorial {
        page: "tutorials/first-workflow.md",
        example: "examples/first-workflow.fabro",
        args: &["--provider", "simulated"],
        exit_code: 0,
        status: "success",
    },
    Tutorial {
        page: "tutorials/loops-and-gates.md",
        example: "examples/loops-and-gates.fabro",
        args: &["--provider", "simulated", "--auto-approve"],
        exit_code: 0,
        status: "success",
    },
    Tutorial {
        page: "tutorials/loops-and-gates.md",
        example: "examples/loops-and-gates.fabro",
        args: &["--provider", "simulated", "--answer", "review=Reject"],
        exit_code: 3,
        status: "partial_success",
    },
];

/// Each tutorial's workflow runs offline and ends with the status and exit code its page
/// states; the page shows the same command and the workflow itself.
#[test]
fn each_tutorial_workflow_ends_as_its_page_says() {
    for tutorial in TUTORIALS {
        let root = workspace_root();
        let page = fs_err::read_to_string(root.join("docs/guide/src").join(tutorial.page))
            .expect("the tutorial page exists");
        let command = format!("fabro run {} {}", tutorial.example, tutorial.args.join(" "));
        assert!(
            page.contains(&command),
            "{} shows `{command}`",
            tutorial.page
        );
        assert!(
            page.contains(&format!("status: {}", tutorial.status)),
            "{} states `status: {}`",
            tutorial.page,
            tutorial.status
        );
        let env = TestEnv::new("guide-tutorial");
        let name = Path::new(tutorial.example)
            .file_name()
            .and_then(|name| name.to_str())
            .expect("a file name");
        let workflow =
            fs_err::read_to_string(root.join(tutorial.example)).expect("the example exists");
        env.write(name, &workflow);
        let shown: String = workflow
            .lines()
            .filter(|line| !line.starts_with("//"))
            .map(|line| format!("{line}\n"))
            .collect();
        assert!(
            page.contains(&shown),
            "{} shows {} as it is (comments aside)",
            tutorial.page,
            tutorial.example
        );
        let mut args = vec!["run", name];
        args.extend_from_slice(tutorial.args);
        let output = fabro(&env, &args);
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(
            output.status.code(),
            Some(tutorial.exit_code),
            "{command}: {printed}"
        );
        assert!(
            printed.contains(&format!("status: {}", tutorial.status)),
            "{command} ends with status {}: {printed}",
            tutorial.status
        );
    }
}

/// The README is a landing page under 6 KB whose first two commands are the quickstart run
/// and the test command `.ci/run` extracts.
#[test]
fn the_readme_is_a_small_landing_page_with_the_two_commands_first() {
    let readme =
        fs_err::read_to_string(workspace_root().join("README.md")).expect("README.md exists");
    assert!(
        readme.len() < 6 * 1024,
        "README.md is {} bytes; keep it under 6 KB and move details into docs/guide",
        readme.len()
    );
    let commands: Vec<Block> = blocks(&readme)
        .into_iter()
        .filter(|block| language(&block.info) == "sh")
        .take(2)
        .collect();
    assert_eq!(commands.len(), 2, "README.md shows two commands");
    assert!(
        commands[0].text.contains("run examples/quickstart.fabro"),
        "the first command runs the quickstart: {}",
        commands[0].text
    );
    let marker = readme
        .find("<!-- ci:test-command -->")
        .expect("README.md marks its test command");
    let second = readme[marker..]
        .find("```sh")
        .map(|offset| marker + offset)
        .expect("a block follows the marker");
    assert!(
        readme[second..].contains(commands[1].text.as_str())
            && commands[1].text.contains("cargo test"),
        "the second command is the test command after the marker"
    );
}

/// The Markdown files of the repository, with the guide, README and docs.
fn repository_markdown() -> Vec<PathBuf> {
    let mut files = Vec::new();
    markdown_files(&workspace_root(), &mut files);
    files.sort();
    files
}

/// Every relative link of every Markdown file names a file or directory inside the
/// repository (mdBook's internal links included); links to public sites may stay. The
/// README and the guide do not name the shared specification outside the repository.
#[test]
fn no_relative_link_leaves_the_repository_or_is_broken() {
    let root = workspace_root();
    let mut broken = Vec::new();
    for file in repository_markdown() {
        let text = fs_err::read_to_string(&file).expect("readable Markdown");
        let mut in_code = false;
        for (number, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                in_code = !in_code;
                continue;
            }
            if in_code {
                continue;
            }
            // The README and the guide are for users: they name nothing outside the
            // repository, not even in passing.
            let for_users =
                file == root.join("README.md") || file.starts_with(root.join("docs/guide"));
            if for_users && line.contains("../shared") {
                broken.push(format!(
                    "{}:{}: names ../shared",
                    file.display(),
                    number + 1
                ));
            }
            for target in links(line) {
                if target.contains("://")
                    || target.starts_with("mailto:")
                    || target.starts_with('#')
                {
                    continue;
                }
                let path = target.split('#').next().unwrap_or("");
                let resolved = normalise(&file.parent().expect("a directory").join(path));
                if !resolved.starts_with(&root) || !resolved.exists() {
                    broken.push(format!("{}:{}: {target}", file.display(), number + 1));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links that leave the repository or are broken: {broken:#?}"
    );
}

/// The targets of the inline Markdown links `[text](target)` on a line.
fn links(line: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut rest = line;
    while let Some(start) = rest.find("](") {
        let after = &rest[start + 2..];
        let Some(end) = after.find(')') else {
            break;
        };
        let target = after[..end].split_whitespace().next().unwrap_or("");
        if !target.is_empty() {
            targets.push(target.to_owned());
        }
        rest = &after[end..];
    }
    targets
}

/// `path` with `.` and `..` resolved lexically.
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}
