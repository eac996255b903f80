//! `fabro graph`.

use fabro_test_support::TestEnv;

use crate::{code, fabro, stderr, stdout, HELLO};

#[test]
fn svg_has_one_group_per_node_and_edge() {
    let env = TestEnv::new("graph_svg");
    env.write("hello.fabro", HELLO);
    let output = fabro(&env, &["graph", "hello.fabro"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let svg = stdout(&output);
    assert!(svg.contains("<svg"), "{svg}");
    for id in ["start", "greet", "check", "exit"] {
        assert_eq!(
            svg.matches(&format!("<g class=\"node\" id=\"node-{id}\""))
                .count(),
            1,
            "{id}"
        );
    }
    assert_eq!(svg.matches("<g class=\"edge\"").count(), 3);
    assert!(svg.contains(">Greet<"));
}

#[test]
fn dot_output_is_normalised_and_goes_to_a_file() {
    let env = TestEnv::new("graph_dot");
    env.write(
        "w.fabro",
        "digraph w {\n  node [shape=box]\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  start -> a -> exit [label=\"go\"]\n  a [human.default_choice=yes]\n}\n",
    );
    let output = fabro(
        &env,
        &["graph", "w.fabro", "--format", "dot", "-o", "out.dot"],
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(stdout(&output).is_empty());
    let dot = fs_err::read_to_string(env.work_dir().join("out.dot")).expect("written");
    insta::assert_snapshot!(dot.trim_end(), @r#"
    digraph w {
        start [shape="Mdiamond", type="start"]
        exit [shape="Msquare", type="exit"]
        a [shape="box", "human.default_choice"="yes", type="agent"]
        start -> a [label="go"]
        a -> exit [label="go"]
    }
    "#);
}

#[test]
fn validation_problems_go_to_stderr_but_rendering_continues() {
    let env = TestEnv::new("graph_invalid");
    env.write("bad.fabro", "digraph {\n  a -> b\n}\n");
    let output = fabro(&env, &["graph", "bad.fabro", "--format", "dot"]);
    assert_eq!(code(&output), 0);
    assert!(stdout(&output).contains("a -> b"));
    assert!(
        stderr(&output).contains("bad.fabro: error[start_node]: workflow has no start node"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn parse_errors_exit_one_and_render_nothing() {
    let env = TestEnv::new("graph_parse_error");
    env.write("bad.fabro", "digraph {\n  a -> \n");
    let output = fabro(&env, &["graph", "bad.fabro"]);
    assert_eq!(code(&output), 1);
    assert!(stdout(&output).is_empty());
    assert!(
        stderr(&output).contains("error[parse_error]"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn missing_file_exits_two() {
    let env = TestEnv::new("graph_missing");
    let output = fabro(&env, &["graph", "nope.fabro"]);
    assert_eq!(code(&output), 2);
}

#[test]
fn rankdir_lr_lays_ranks_out_horizontally() {
    let env = TestEnv::new("graph_rankdir");
    env.write("lr.fabro", "digraph { rankdir=LR\n start [shape=Mdiamond]\n a\n exit [shape=Msquare]\n start -> a -> exit }\n");
    env.write(
        "tb.fabro",
        "digraph { start [shape=Mdiamond]\n a\n exit [shape=Msquare]\n start -> a -> exit }\n",
    );
    let extent = |file: &str| {
        let svg = stdout(&fabro(&env, &["graph", file]));
        let view_box = svg
            .split("viewBox=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .expect("viewBox")
            .to_owned();
        let numbers: Vec<f64> = view_box
            .split_whitespace()
            .filter_map(|n| n.parse().ok())
            .collect();
        (numbers[2], numbers[3])
    };
    let (lr_width, lr_height) = extent("lr.fabro");
    let (tb_width, tb_height) = extent("tb.fabro");
    assert!(lr_width > lr_height, "LR is wide: {lr_width}x{lr_height}");
    assert!(tb_height > tb_width, "TB is tall: {tb_width}x{tb_height}");
}
