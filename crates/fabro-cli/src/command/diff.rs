//! `fabro diff RUN [NODE]` (SPEC 17.4): the patch `fabro_engine::local::run_diff` computes,
//! coloured like `git diff` when stdout is a terminal and `NO_COLOR` is unset.

use fabro_engine::local::{run_diff, stage_diff, DiffLine, DiffLineKind};
use fabro_engine::repository::Mirrors;
use fabro_engine::{FsRunStore, RunId};

use crate::args::DiffArgs;
use crate::command::resolve_run;
use crate::error::{CliError, Status};
use crate::output::Output;

/// ANSI bold, for file headers.
const BOLD: &str = "\x1b[1m";
/// ANSI cyan, for hunk headers.
const CYAN: &str = "\x1b[36m";
/// ANSI green, for added lines.
const GREEN: &str = "\x1b[32m";
/// ANSI red, for removed lines.
const RED: &str = "\x1b[31m";

pub(crate) fn run(args: &DiffArgs, output: &mut Output) -> Result<Status, CliError> {
    let record = resolve_run(&args.run)?;
    let home = crate::loader::fabro_home();
    let store = FsRunStore::new(&home);
    let run_id = RunId::from(record.run_id.as_str());
    // A run of this home's server on a repository by URL: its server's mirrors.
    let mirrors = Mirrors::new(home.join("repositories"));
    let lines = match args.node.as_deref() {
        Some(node) => stage_diff(&store, &run_id, node, Some(&mirrors)),
        None => run_diff(&store, &run_id, Some(&mirrors)),
    }
    .map_err(|error| CliError::Usage(fabro_engine::error_chain(&error)))?;
    output.out_bytes(&render(&lines, output.stdout_color()));
    Ok(Status::Success)
}

/// The patch, each line wrapped in its colour when `color` is set (the colour ends
/// before the newline, as git does).
fn render(lines: &[DiffLine], color: bool) -> Vec<u8> {
    let mut bytes = Vec::new();
    for line in lines {
        let paint = match line.kind {
            DiffLineKind::FileHeader => Some(BOLD),
            DiffLineKind::HunkHeader => Some(CYAN),
            DiffLineKind::Addition => Some(GREEN),
            DiffLineKind::Deletion => Some(RED),
            DiffLineKind::Context | DiffLineKind::Note => None,
        };
        match paint.filter(|_| color) {
            None => bytes.extend_from_slice(&line.text),
            Some(code) => {
                for piece in line.text.split_inclusive(|&byte| byte == b'\n') {
                    let (text, newline) = match piece.strip_suffix(b"\n") {
                        Some(text) => (text, true),
                        None => (piece, false),
                    };
                    bytes.extend_from_slice(code.as_bytes());
                    bytes.extend_from_slice(text);
                    bytes.extend_from_slice(b"\x1b[0m");
                    if newline {
                        bytes.push(b'\n');
                    }
                }
            }
        }
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminals_get_colours_and_pipes_plain_text() {
        let lines = vec![
            DiffLine {
                kind: DiffLineKind::FileHeader,
                text: b"diff --git a/x b/x\n--- a/x\n+++ b/x\n".to_vec(),
            },
            DiffLine {
                kind: DiffLineKind::HunkHeader,
                text: b"@@ -1 +1 @@\n".to_vec(),
            },
            DiffLine {
                kind: DiffLineKind::Deletion,
                text: b"-old\n".to_vec(),
            },
            DiffLine {
                kind: DiffLineKind::Addition,
                text: b"+new".to_vec(),
            },
            DiffLine {
                kind: DiffLineKind::Note,
                text: b"\n\\ No newline at end of file\n".to_vec(),
            },
        ];
        let plain = "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+new\n\\ No newline at end of file\n";
        assert_eq!(
            String::from_utf8(render(&lines, false)).expect("utf8"),
            plain
        );
        assert_eq!(
            String::from_utf8(render(&lines, true)).expect("utf8"),
            "\x1b[1mdiff --git a/x b/x\x1b[0m\n\x1b[1m--- a/x\x1b[0m\n\x1b[1m+++ b/x\x1b[0m\n\
             \x1b[36m@@ -1 +1 @@\x1b[0m\n\x1b[31m-old\x1b[0m\n\x1b[32m+new\x1b[0m\n\
             \\ No newline at end of file\n"
        );
    }
}
