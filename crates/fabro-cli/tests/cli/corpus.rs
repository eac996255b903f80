//! The shared corpus of real workflows: every file parses, all but `invalid.fabro`
//! validate, and normalised DOT output is accepted by Graphviz.

use std::path::Path;
use std::process::Command;

use fabro_test_support::{corpus_files, skip, TestEnv};

use crate::{code, fabro, stderr, stdout};

fn corpus_or_skip(test: &str) -> Vec<std::path::PathBuf> {
    match corpus_files() {
        Some(files) => {
            assert!(
                files.len() > 50,
                "the corpus should hold dozens of workflows, found {}",
                files.len()
            );
            files
        }
        None => {
            skip(test, "../shared/corpus/fabro is not next to this checkout");
            Vec::new()
        }
    }
}

fn is_invalid_fixture(path: &Path) -> bool {
    path.file_name().is_some_and(|name| name == "invalid.fabro")
}

#[test]
fn every_corpus_workflow_validates_except_the_invalid_one() {
    let env = TestEnv::new("corpus_validate");
    for path in corpus_or_skip("every_corpus_workflow_validates_except_the_invalid_one") {
        let argument = path.to_str().expect("corpus paths are UTF-8");
        let output = fabro(&env, &["validate", argument]);
        let text = stdout(&output);
        assert!(
            !text.contains("error[parse_error]"),
            "{argument} must parse:\n{text}"
        );
        if is_invalid_fixture(&path) {
            assert_eq!(code(&output), 1, "{argument}:\n{text}");
            assert!(
                text.contains(&format!(
                    "{argument}: error[start_node]: workflow has no start node"
                )),
                "{text}"
            );
        } else if text.contains("error[") {
            // Stylesheets naming providers that do not exist (SPEC 17.6; listed in
            // `the_new_rules_find_only_genuine_problems_in_the_corpus`) are the only errors.
            assert_eq!(code(&output), 1, "{argument}:\n{text}");
            assert!(
                text.lines()
                    .filter(|line| line.contains("error["))
                    .all(|line| line.contains("error[provider_known]")),
                "{argument}:\n{text}"
            );
        } else {
            assert_eq!(code(&output), 0, "{argument}:\n{text}");
        }
    }
}

/// What `unknown_attribute` and `provider_known` (SPEC 17.6) find in the corpus, per file
/// and message with a count. Each was inspected: `is_codergen` and `provenance_version`
/// are attributes of no fabro element (SPEC 2.9-2.11), `max_visits` is a node attribute
/// written on an edge, and `google`, `inception` and the `*_PROVIDER` placeholders name
/// no provider of SPEC 10.1 (runs of those files fail when they start).
const CORPUS_FINDINGS: &str = "\
attractor/consensus_task.dot: unknown_attribute: unknown attribute 'is_codergen' (x17)
attractor/refactor_test_complex.dot: provider_known: model_stylesheet sets unknown provider 'google'; expected one of: anthropic, openai, gemini, openai_compatible, simulated (x4)
attractor/refactor_test_moderate.dot: provider_known: model_stylesheet sets unknown provider 'google'; expected one of: anthropic, openai, gemini, openai_compatible, simulated (x4)
attractor/refactor_test_vague.dot: provider_known: model_stylesheet sets unknown provider 'google'; expected one of: anthropic, openai, gemini, openai_compatible, simulated (x1)
attractor/reference_template.dot: provider_known: model_stylesheet sets unknown provider 'BRANCH_A_PROVIDER'; expected one of: anthropic, openai, gemini, openai_compatible, simulated (x1)
attractor/reference_template.dot: provider_known: model_stylesheet sets unknown provider 'BRANCH_B_PROVIDER'; expected one of: anthropic, openai, gemini, openai_compatible, simulated (x1)
attractor/reference_template.dot: provider_known: model_stylesheet sets unknown provider 'BRANCH_C_PROVIDER'; expected one of: anthropic, openai, gemini, openai_compatible, simulated (x1)
attractor/reference_template.dot: provider_known: model_stylesheet sets unknown provider 'DEFAULT_PROVIDER'; expected one of: anthropic, openai, gemini, openai_compatible, simulated (x1)
attractor/reference_template.dot: provider_known: model_stylesheet sets unknown provider 'HARD_PROVIDER'; expected one of: anthropic, openai, gemini, openai_compatible, simulated (x1)
attractor/reference_template.dot: provider_known: model_stylesheet sets unknown provider 'VERIFY_PROVIDER'; expected one of: anthropic, openai, gemini, openai_compatible, simulated (x1)
attractor/reference_template.dot: unknown_attribute: unknown attribute 'provenance_version' (x1)
attractor/semport.dot: unknown_attribute: unknown attribute 'is_codergen' (x9)
docs/tutorials/ensemble/ensemble.fabro: provider_known: model_stylesheet sets unknown provider 'inception'; expected one of: anthropic, openai, gemini, openai_compatible, simulated (x1)
docs/tutorials/sub-workflow/implement-and-test.fabro: unknown_attribute: unknown attribute 'max_visits' (x1)
";

#[test]
fn the_new_rules_find_only_genuine_problems_in_the_corpus() {
    let env = TestEnv::new("corpus_new_rules");
    let Some(root) = fabro_test_support::corpus_dir() else {
        skip(
            "the_new_rules_find_only_genuine_problems_in_the_corpus",
            "../shared/corpus/fabro is not next to this checkout",
        );
        return;
    };
    let mut found: std::collections::BTreeMap<String, usize> = Default::default();
    for path in corpus_or_skip("the_new_rules_find_only_genuine_problems_in_the_corpus") {
        let argument = path.to_str().expect("corpus paths are UTF-8");
        let output = fabro(&env, &["validate", "--json", argument]);
        let json: serde_json::Value =
            serde_json::from_slice(&output.stdout).expect("validate --json prints JSON");
        let relative = path
            .strip_prefix(&root)
            .unwrap_or(&path)
            .display()
            .to_string();
        for diagnostic in json["diagnostics"].as_array().expect("a diagnostics list") {
            let rule = diagnostic["rule"].as_str().unwrap_or_default();
            if rule == "unknown_attribute" || rule == "provider_known" {
                let message = diagnostic["message"].as_str().unwrap_or_default();
                *found
                    .entry(format!("{relative}: {rule}: {message}"))
                    .or_default() += 1;
            }
        }
    }
    let report: String = found
        .iter()
        .map(|(finding, count)| format!("{finding} (x{count})\n"))
        .collect();
    assert_eq!(report, CORPUS_FINDINGS);
}

#[test]
fn every_corpus_workflow_renders_dot_that_graphviz_accepts() {
    let graphviz = Command::new("dot").arg("-V").output().is_ok();
    if !graphviz {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install graphviz (dot)"
        );
        skip(
            "every_corpus_workflow_renders_dot_that_graphviz_accepts",
            "Graphviz `dot` is not installed",
        );
        return;
    }
    let env = TestEnv::new("corpus_dot");
    for (index, path) in corpus_or_skip("every_corpus_workflow_renders_dot_that_graphviz_accepts")
        .iter()
        .enumerate()
    {
        let argument = path.to_str().expect("corpus paths are UTF-8");
        let out = format!("out{index}.dot");
        let output = fabro(&env, &["graph", "--format", "dot", "-o", &out, argument]);
        assert_eq!(code(&output), 0, "{argument}: {}", stderr(&output));
        let dot = Command::new("dot")
            .args(["-Tsvg", "-o", "/dev/null", &out])
            .current_dir(env.work_dir())
            .output()
            .expect("dot runs");
        assert!(
            dot.status.success(),
            "dot rejected the output for {argument}: {}",
            String::from_utf8_lossy(&dot.stderr)
        );
    }
}

#[test]
fn every_corpus_workflow_renders_svg() {
    let env = TestEnv::new("corpus_svg");
    for path in corpus_or_skip("every_corpus_workflow_renders_svg") {
        let argument = path.to_str().expect("corpus paths are UTF-8");
        let output = fabro(&env, &["graph", argument]);
        assert_eq!(code(&output), 0, "{argument}: {}", stderr(&output));
        let svg = stdout(&output);
        assert!(svg.trim_end().ends_with("</svg>"), "{argument}");
        assert!(svg.contains("<g class=\"node\""), "{argument}");
    }
}
