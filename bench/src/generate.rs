//! Generated workflows for the parse-and-validate benchmark.

use std::fmt::Write;

/// A valid workflow with `nodes` agent nodes between start and exit and two outgoing
/// edges per node (an unconditional step forward and a conditional loop back), every
/// tenth node in class `review`, and a model stylesheet with all selector kinds. It stays
/// under the 10 MB source limit at 100,000 nodes.
pub(crate) fn workflow(nodes: usize) -> String {
    let mut out = String::with_capacity(nodes * 80 + 512);
    let _ = writeln!(out, "digraph bench_{nodes} {{");
    out.push_str(
        "  graph [goal=\"Benchmark workflow\", default_max_retries=1, model_stylesheet=\"* { model: claude-sonnet-4-5; } box { provider: anthropic; } .review { model: gpt-5.2; } #n1 { reasoning_effort: low; }\"]\n",
    );
    out.push_str("  node [shape=box]\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n");
    for index in 1..=nodes {
        if index % 10 == 0 {
            let _ = writeln!(out, "  n{index} [label=\"S{index}\", class=review]");
        } else {
            let _ = writeln!(out, "  n{index} [label=\"S{index}\"]");
        }
    }
    out.push_str("  start -> n1\n");
    for index in 1..=nodes {
        let next = if index == nodes {
            "exit".to_owned()
        } else {
            format!("n{}", index + 1)
        };
        let back = index.saturating_sub(5).max(1);
        let _ = writeln!(out, "  n{index} -> {next}");
        let _ = writeln!(out, "  n{index} -> n{back} [condition=\"outcome=fail\"]");
    }
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabro_language::{check, AnyModel, CheckOptions, NoFiles, Variables};

    #[test]
    fn generated_workflows_are_valid_and_small_enough() {
        let text = workflow(200);
        let variables = Variables::default();
        let options = CheckOptions {
            loader: &NoFiles,
            variables: &variables,
            models: &AnyModel,
        };
        let checked = check("bench.fabro".as_ref(), &text, &options);
        assert!(checked.diagnostics.is_empty(), "{:#?}", checked.diagnostics);
        let workflow = checked.workflow.expect("parses");
        assert_eq!(workflow.nodes().len(), 202);
        assert_eq!(workflow.edges().len(), 401);
        assert!(workflow.edges().iter().any(|edge| edge.condition.is_some()));
        assert!(self::workflow(100_000).len() < 10 * 1024 * 1024);
    }
}
