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
            // Every other workflow validates with exit 0 and no error (decision 62:
            // unknown providers in stylesheets are warnings, `google` names `gemini`).
            assert_eq!(code(&output), 0, "{argument}:\n{text}");
            assert!(!text.contains("error["), "{argument}:\n{text}");
        }
    }
}

/// What `unknown_attribute` and `provider_known` (SPEC 17.6) find in the corpus, per file
/// and message with a count. Each was inspected: `is_codergen` and `provenance_version`
/// are attributes of no fabro element (SPEC 2.9-2.11), `max_visits` is a node attribute
/// written on an edge, and the `*_PROVIDER` placeholders name no known provider
/// (warnings in stylesheets, decision 62; `google` is an alias of `gemini`, `inception`
/// a preset of SPEC 10.7).
const CORPUS_FINDINGS: &str = "\
attractor/consensus_task.dot: unknown_attribute: unknown attribute 'is_codergen' (x17)
attractor/reference_template.dot: provider_known: model_stylesheet sets unknown provider 'BRANCH_A_PROVIDER'; expected one of: anthropic, openai, gemini, openai_compatible, simulated (x1)
attractor/reference_template.dot: provider_known: model_stylesheet sets unknown provider 'BRANCH_B_PROVIDER'; expected one of: anthropic, openai, gemini, openai_compatible, simulated (x1)
attractor/reference_template.dot: provider_known: model_stylesheet sets unknown provider 'BRANCH_C_PROVIDER'; expected one of: anthropic, openai, gemini, openai_compatible, simulated (x1)
attractor/reference_template.dot: provider_known: model_stylesheet sets unknown provider 'DEFAULT_PROVIDER'; expected one of: anthropic, openai, gemini, openai_compatible, simulated (x1)
attractor/reference_template.dot: provider_known: model_stylesheet sets unknown provider 'HARD_PROVIDER'; expected one of: anthropic, openai, gemini, openai_compatible, simulated (x1)
attractor/reference_template.dot: provider_known: model_stylesheet sets unknown provider 'VERIFY_PROVIDER'; expected one of: anthropic, openai, gemini, openai_compatible, simulated (x1)
attractor/reference_template.dot: unknown_attribute: unknown attribute 'provenance_version' (x1)
attractor/semport.dot: unknown_attribute: unknown attribute 'is_codergen' (x9)
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

/// The names of the `cluster*` subgraphs written in a workflow's source, in order.
fn cluster_names(source: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find("subgraph") {
        rest = &rest[at + "subgraph".len()..];
        let name: String = rest
            .trim_start()
            .trim_start_matches('"')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.starts_with("cluster") && !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// The value of attribute `key` in the raw attribute text of one SVG element.
fn svg_attribute<'a>(element: &'a str, key: &str) -> Option<&'a str> {
    let start = element.find(&format!(" {key}=\""))? + key.len() + 3;
    let end = element[start..].find('"')? + start;
    Some(&element[start..end])
}

fn svg_number(element: &str, key: &str) -> f64 {
    svg_attribute(element, key)
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("{key} is a number in {element}"))
}

/// The raw text of every element named `name` in `svg`, from its `<` to its `>`.
fn svg_elements<'a>(svg: &'a str, name: &str) -> Vec<&'a str> {
    let open = format!("<{name} ");
    let mut elements = Vec::new();
    let mut rest = svg;
    while let Some(at) = rest.find(&open) {
        let end = rest[at..].find('>').expect("element is closed") + at;
        elements.push(&rest[at..=end]);
        rest = &rest[end..];
    }
    elements
}

/// Every coordinate pair of an SVG path (`M`, `L` and `C` commands with `x,y` pairs).
fn path_points(path: &str) -> Vec<(f64, f64)> {
    path.split_whitespace()
        .map(|token| token.trim_start_matches(|c: char| c.is_ascii_alphabetic()))
        .map(|pair| {
            let (x, y) = pair.split_once(',').expect("coordinates come in x,y pairs");
            (
                x.parse().expect("x is a number"),
                y.parse().expect("y is a number"),
            )
        })
        .collect()
}

#[test]
fn every_corpus_svg_holds_its_edges_labels_and_clusters_and_dot_keeps_clusters() {
    let test = "every_corpus_svg_holds_its_edges_labels_and_clusters_and_dot_keeps_clusters";
    let graphviz = Command::new("dot").arg("-V").output().is_ok();
    if !graphviz {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install graphviz (dot)"
        );
    }
    let env = TestEnv::new("corpus_svg_bounds");
    let mut files = corpus_or_skip(test);
    files.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/quickstart.fabro"));
    let mut clusters_seen = 0;
    for (index, path) in files.iter().enumerate() {
        let argument = path.to_str().expect("corpus paths are UTF-8");
        let source = fs_err::read_to_string(path).expect("the workflow is readable");
        let output = fabro(&env, &["graph", argument]);
        assert_eq!(code(&output), 0, "{argument}: {}", stderr(&output));
        let svg = stdout(&output);

        let view_box: Vec<f64> = svg_attribute(&svg, "viewBox")
            .expect("the SVG has a view box")
            .split_whitespace()
            .map(|number| number.parse().expect("view box numbers"))
            .collect();
        let (left, top) = (view_box[0], view_box[1]);
        let (right, bottom) = (left + view_box[2], top + view_box[3]);
        let inside = |(x, y): (f64, f64), what: &str| {
            assert!(
                (left..=right).contains(&x) && (top..=bottom).contains(&y),
                "{argument}: {what} at ({x}, {y}) is outside the view box {view_box:?}"
            );
        };
        for group in svg.split("<g class=\"edge\">").skip(1) {
            let group = &group[..group.find("</g>").expect("edge group is closed")];
            for path in svg_elements(group, "path") {
                let d = svg_attribute(path, "d").expect("a path has d");
                for point in path_points(d) {
                    inside(point, "an edge path point");
                }
            }
            for polygon in svg_elements(group, "polygon") {
                for point in path_points(svg_attribute(polygon, "points").expect("points")) {
                    inside(point, "an arrowhead point");
                }
            }
            for text in svg_elements(group, "text")
                .into_iter()
                .chain(svg_elements(group, "tspan"))
            {
                if svg_attribute(text, "x").is_some() {
                    inside(
                        (svg_number(text, "x"), svg_number(text, "y")),
                        "an edge label",
                    );
                }
            }
        }

        let names = cluster_names(&source);
        if names.is_empty() {
            continue;
        }
        let dot_file = format!("clusters{index}.dot");
        let output = fabro(
            &env,
            &["graph", "--format", "dot", "-o", &dot_file, argument],
        );
        assert_eq!(code(&output), 0, "{argument}: {}", stderr(&output));
        let dot = fs_err::read_to_string(env.work_dir().join(&dot_file)).expect("DOT written");
        for name in &names {
            clusters_seen += 1;
            let opening = format!("subgraph {name} {{");
            let block = dot
                .split(&opening)
                .nth(1)
                .unwrap_or_else(|| panic!("{argument}: DOT keeps {opening}\n{dot}"));
            let block = &block[..block.find('}').expect("the subgraph block is closed")];
            let group = svg
                .split(&format!("<g class=\"cluster\" id=\"cluster-{name}\">"))
                .nth(1)
                .unwrap_or_else(|| panic!("{argument}: the SVG draws {name}\n{svg}"));
            let rect = svg_elements(group, "rect")
                .into_iter()
                .next()
                .unwrap_or_else(|| panic!("{argument}: {name} is drawn as a box"));
            let (x, y) = (svg_number(rect, "x"), svg_number(rect, "y"));
            let (width, height) = (svg_number(rect, "width"), svg_number(rect, "height"));
            inside((x, y), "a cluster box corner");
            inside((x + width, y + height), "a cluster box corner");
            // Every node written directly in the DOT block sits inside the box.
            for member in block
                .split(['\n', ';'])
                .map(str::trim)
                .filter(|line| !line.is_empty() && !line.contains('=') && !line.contains('{'))
            {
                let member = member.trim_matches('"');
                let node = svg
                    .split(&format!("<g class=\"node\" id=\"node-{member}\">"))
                    .nth(1)
                    .unwrap_or_else(|| panic!("{argument}: node {member} is drawn"));
                let text = svg_elements(node, "text")[0];
                let (node_x, node_y) = match svg_attribute(text, "x") {
                    Some(_) => (svg_number(text, "x"), svg_number(text, "y")),
                    None => {
                        let span = svg_elements(node, "tspan")[0];
                        (svg_number(span, "x"), svg_number(span, "y"))
                    }
                };
                assert!(
                    (x..=x + width).contains(&node_x) && (y..=y + height).contains(&node_y),
                    "{argument}: {member} at ({node_x}, {node_y}) is outside the box of {name}"
                );
            }
        }
        if graphviz {
            let rendered = Command::new("dot")
                .args(["-Tsvg", &dot_file])
                .current_dir(env.work_dir())
                .output()
                .expect("dot runs");
            assert!(
                rendered.status.success(),
                "dot rejected the clusters of {argument}: {}",
                String::from_utf8_lossy(&rendered.stderr)
            );
            let drawn = String::from_utf8_lossy(&rendered.stdout);
            for name in &names {
                assert!(
                    drawn.contains(&format!("<title>{name}</title>")),
                    "Graphviz draws {name} of {argument} as a cluster"
                );
            }
        }
    }
    assert!(
        clusters_seen > 0,
        "the quickstart alone has a cluster to check"
    );
}
