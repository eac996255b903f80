//! `--help` of every subcommand ends with examples and the exit codes (SPEC 17.5, 12.2),
//! walking the command tree as `fabro --help` lists it.

use fabro_test_support::TestEnv;

use crate::{code, fabro, stderr, stdout};

/// The subcommands a `--help` text lists under `Commands:`, without `help`.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// Every leaf command path below `path`.
fn leaves(env: &TestEnv, path: Vec<String>, found: &mut Vec<Vec<String>>) {
    let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
    args.push("--help");
    let output = fabro(env, &args);
    assert_eq!(code(&output), 0, "{args:?}: {}", stderr(&output));
    let children = subcommands(&stdout(&output));
    if children.is_empty() {
        found.push(path);
        return;
    }
    for child in children {
        let mut next = path.clone();
        next.push(child);
        leaves(env, next, found);
    }
}

#[test]
fn every_subcommand_help_ends_with_examples_and_exit_codes() {
    let env = TestEnv::new("help_walk");
    let mut commands = Vec::new();
    leaves(&env, Vec::new(), &mut commands);
    assert!(commands.len() >= 14, "{commands:?}");
    for command in &commands {
        let mut args: Vec<&str> = command.iter().map(String::as_str).collect();
        args.push("--help");
        let help = stdout(&fabro(&env, &args));
        let name = command.join(" ");
        let (_, after) = help
            .split_once("\nExamples:\n")
            .unwrap_or_else(|| panic!("`fabro {name} --help` has no examples:\n{help}"));
        let examples: Vec<&str> = after.lines().take_while(|line| !line.is_empty()).collect();
        let command_lines = examples
            .iter()
            .filter(|line| line.starts_with(&format!("  fabro {name}")))
            .count();
        assert!(command_lines > 0, "{name}:\n{help}");
        for example in &examples {
            // Each example runs the command; a long one explains itself on the next line.
            assert!(
                example.starts_with(&format!("  fabro {name}")) || example.starts_with("    "),
                "`fabro {name}` examples run `fabro {name}`: {example:?}\n{help}"
            );
        }
        let exit_codes = help
            .split_once("\nExit codes:")
            .map(|(_, codes)| codes)
            .unwrap_or_else(|| panic!("`fabro {name} --help` has no exit codes:\n{help}"));
        assert!(exit_codes.contains('0'), "{name}:\n{help}");
        if name == "run" || name == "resume" {
            // SPEC 12.2, in full.
            for code in ["0 ", "1 ", "2 ", "3 ", "130 "] {
                assert!(
                    exit_codes
                        .lines()
                        .any(|line| line.trim_start().starts_with(code)),
                    "`fabro {name} --help` explains exit code {code}:\n{help}"
                );
            }
        }
    }
}
