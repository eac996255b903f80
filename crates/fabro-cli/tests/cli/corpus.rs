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
        } else {
            assert_eq!(code(&output), 0, "{argument}:\n{text}");
        }
    }
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
