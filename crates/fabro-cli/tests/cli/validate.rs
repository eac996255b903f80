//! `fabro validate`.

use fabro_test_support::TestEnv;

use crate::{code, fabro, stderr, stdout, HELLO};

#[test]
fn valid_workflow_exits_zero_with_summary() {
    let env = TestEnv::new("validate_valid");
    env.write("hello.fabro", HELLO);
    let output = fabro(&env, &["validate", "hello.fabro"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(stdout(&output), "0 error(s), 0 warning(s)\n");
}

#[test]
fn warnings_alone_exit_zero() {
    let env = TestEnv::new("validate_warnings");
    env.write(
        "w.fabro",
        "digraph {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  start -> typo -> exit\n}\n",
    );
    let output = fabro(&env, &["validate", "w.fabro"]);
    assert_eq!(code(&output), 0);
    assert_eq!(
        stdout(&output),
        "w.fabro:4:12: warning[edge_target_exists]: node 'typo' is used by an edge but never declared; it runs as a default agent node\n\
         w.fabro:4:12: warning[prompt_on_llm_nodes]: agent node 'typo' has neither a prompt nor a label; its task text is its id\n\
         0 error(s), 2 warning(s)\n"
    );
}

#[test]
fn errors_exit_one_in_the_spec_format() {
    let env = TestEnv::new("validate_errors");
    env.write(
        "bad.fabro",
        "digraph {\n  exit [shape=Msquare]\n  a [max_retries=many, prompt=\"Do it\"]\n  exit -> a\n}\n",
    );
    let output = fabro(&env, &["validate", "bad.fabro"]);
    assert_eq!(code(&output), 1);
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "bad.fabro: error[start_node]: workflow has no start node"
    );
    assert!(lines.contains(&"bad.fabro:3:6: error[attribute_type]: attribute 'max_retries' expects an integer ≥ 0, found \"many\""), "{text}");
    assert!(
        lines.contains(
            &"bad.fabro:4:3: error[exit_no_outgoing]: edge exit -> a leaves the exit node"
        ),
        "{text}"
    );
    assert_eq!(*lines.last().expect("summary"), "3 error(s), 0 warning(s)");
}

#[test]
fn syntax_errors_report_line_and_column() {
    let cases: &[(&str, &str)] = &[
        (
            "digraph {\n  a [label=\"open\n}\n",
            "2:12: error[parse_error]: unterminated string",
        ),
        (
            "digraph {\n  a [label=x\n  b -> c\n}\n",
            "3:3: error[parse_error]: expected '=' after attribute 'b'",
        ),
        (
            "digraph {\n  a -- b\n}\n",
            "2:5: error[parse_error]: the undirected edge operator '--' is not supported",
        ),
        (
            "strict digraph { a }\n",
            "1:1: error[parse_error]: strict graphs are not supported",
        ),
        (
            "graph { a }\n",
            "1:1: error[parse_error]: undirected graphs are not supported",
        ),
        (
            "digraph { a }\ndigraph { b }\n",
            "2:1: error[parse_error]: a workflow file must contain exactly one graph",
        ),
        (
            "digraph {\n  a [timeout=\"1.5h\"]\n}\n",
            "2:6: error[attribute_type]: attribute 'timeout' expects a duration",
        ),
        (
            "digraph {\n  a [timeout=5x]\n}\n",
            "2:14: error[parse_error]: invalid value '5x'",
        ),
        (
            "digraph {\n  a [goal_gate=maybe]\n}\n",
            "2:6: error[attribute_type]: attribute 'goal_gate' expects true or false",
        ),
    ];
    let env = TestEnv::new("validate_syntax_errors");
    for (index, (text, expected)) in cases.iter().enumerate() {
        let name = format!("case{index}.fabro");
        env.write(&name, text);
        let output = fabro(&env, &["validate", &name]);
        assert_eq!(code(&output), 1, "{name}");
        let expected = format!("{name}:{expected}");
        assert!(
            stdout(&output).contains(&expected),
            "{name}: expected {expected:?} in\n{}",
            stdout(&output)
        );
        assert!(stderr(&output).is_empty(), "{}", stderr(&output));
    }
}

#[test]
fn json_output_is_one_document() {
    let env = TestEnv::new("validate_json");
    env.write("hello.fabro", HELLO);
    let output = fabro(&env, &["validate", "--json", "hello.fabro"]);
    assert_eq!(code(&output), 0);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("valid JSON");
    insta::assert_json_snapshot!(json, @r#"
    {
      "diagnostics": [],
      "edges": [
        {
          "condition": "",
          "from": "start",
          "label": "",
          "to": "greet"
        },
        {
          "condition": "",
          "from": "greet",
          "label": "",
          "to": "check"
        },
        {
          "condition": "",
          "from": "check",
          "label": "",
          "to": "exit"
        }
      ],
      "nodes": [
        {
          "handler": "start",
          "id": "start",
          "label": "start"
        },
        {
          "handler": "agent",
          "id": "greet",
          "label": "Greet"
        },
        {
          "handler": "command",
          "id": "check",
          "label": "check"
        },
        {
          "handler": "exit",
          "id": "exit",
          "label": "exit"
        }
      ],
      "valid": true
    }
    "#);
}

#[test]
fn json_diagnostics_carry_spans() {
    let env = TestEnv::new("validate_json_errors");
    env.write("bad.fabro", "digraph {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  start -> exit [condition=\"outcome=\"]\n}\n");
    let output = fabro(&env, &["validate", "--json", "bad.fabro"]);
    assert_eq!(code(&output), 1);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("valid JSON");
    assert_eq!(json["valid"], false);
    let diagnostic = &json["diagnostics"][0];
    assert_eq!(diagnostic["rule"], "condition_syntax");
    assert_eq!(diagnostic["severity"], "error");
    assert_eq!(
        diagnostic["edge"],
        serde_json::json!({"from": "start", "to": "exit"})
    );
    assert_eq!(diagnostic["span"]["line"], 4);
    assert_eq!(diagnostic["file"], "bad.fabro");
}

#[test]
fn missing_file_exits_two() {
    let env = TestEnv::new("validate_missing");
    let output = fabro(&env, &["validate", "nope.fabro"]);
    assert_eq!(code(&output), 2);
    assert!(
        stderr(&output).starts_with("error: cannot read workflow nope.fabro: "),
        "{}",
        stderr(&output)
    );
    assert!(stdout(&output).is_empty());
}

#[test]
fn usage_errors_exit_two() {
    let env = TestEnv::new("validate_usage");
    assert_eq!(code(&fabro(&env, &["validate"])), 2);
    assert_eq!(code(&fabro(&env, &["validate", "--bogus", "x"])), 2);
    let help = fabro(&env, &["help"]);
    assert_eq!(code(&help), 0);
    assert!(stdout(&help).contains("validate"));
    let version = fabro(&env, &["--version"]);
    assert_eq!(
        stdout(&version).trim(),
        format!("fabro {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn invalid_utf8_and_empty_files_are_parse_errors() {
    let env = TestEnv::new("validate_bytes");
    fs_err::write(
        env.work_dir().join("binary.fabro"),
        b"digraph { a [label=\"\xff\"] }",
    )
    .expect("write");
    let output = fabro(&env, &["validate", "binary.fabro"]);
    assert_eq!(code(&output), 1);
    assert!(
        stdout(&output)
            .contains("binary.fabro:1:21: error[parse_error]: workflow file is not valid UTF-8"),
        "{}",
        stdout(&output)
    );
    env.write("empty.fabro", "  \n");
    let output = fabro(&env, &["validate", "empty.fabro"]);
    assert_eq!(code(&output), 1);
    assert!(stdout(&output).contains("empty.fabro: error[parse_error]: workflow file is empty"));
}

#[test]
fn prompt_files_resolve_relative_to_the_workflow() {
    let env = TestEnv::new("validate_file_refs");
    env.write("flows/prompts/plan.md", "Plan {{ goal }}");
    env.write(
        "flows/w.fabro",
        "digraph {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  plan [prompt=\"@prompts/plan.md\"]\n  fix [prompt=\"@prompts/missing.md\"]\n  start -> plan -> fix -> exit\n}\n",
    );
    let output = fabro(&env, &["validate", "flows/w.fabro"]);
    assert_eq!(code(&output), 1);
    let text = stdout(&output);
    assert!(text.contains("flows/w.fabro:5:8: error[unresolved_file_ref]: cannot read 'flows/prompts/missing.md' (referenced by prompt)"), "{text}");
    assert!(!text.contains("plan.md"), "{text}");
}

#[test]
fn workflow_names_resolve_under_dot_fabro() {
    let env = TestEnv::new("validate_named");
    env.write(".fabro/workflows/hello/workflow.fabro", HELLO);
    fs_err::create_dir_all(env.work_dir().join("sub/dir")).expect("mkdir");
    let output = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["validate", "hello"])
        .current_dir(env.work_dir().join("sub/dir"))
        .output()
        .expect("runs");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
}

#[test]
fn model_list_prints_the_catalog() {
    let env = TestEnv::new("model_list");
    let output = fabro(&env, &["model", "list"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.starts_with("MODEL"), "{text}");
    let sonnet = text
        .lines()
        .find(|line| line.starts_with("claude-sonnet-4-6 "))
        .expect("sonnet row");
    assert!(
        sonnet.contains("anthropic") && sonnet.contains("200000") && sonnet.contains("sonnet"),
        "{sonnet}"
    );

    let output = fabro(&env, &["model", "list", "--json"]);
    assert_eq!(code(&output), 0);
    let models: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let models = models.as_array().expect("array");
    assert_eq!(models.len(), 11);
    let gpt = models
        .iter()
        .find(|model| model["id"] == "gpt-5.4")
        .expect("gpt-5.4");
    assert_eq!(gpt["provider"], "openai");
    assert_eq!(gpt["default"], true);
    assert_eq!(gpt["input_price_per_million"], 2.5);
    let haiku = models
        .iter()
        .find(|model| model["id"] == "claude-haiku-4-5")
        .expect("haiku");
    assert_eq!(haiku["reasoning"], false);
}

/// SPEC 17.6: misspelt attributes are `unknown_attribute` warnings with the nearest known
/// attribute; Graphviz presentation attributes are not.
#[test]
fn typos_are_unknown_attributes_with_a_suggestion() {
    let env = TestEnv::new("validate_typos");
    env.write(
        "t.fabro",
        "digraph t {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  plan [label=\"Plan\", promt=\"Plan it\", color=blue, style=filled]\n  build [shape=parallelogram, scrpit=\"make\"]\n  start -> plan -> build -> exit [wieght=2, frobnicate=1]\n}\n",
    );
    let output = fabro(&env, &["validate", "t.fabro"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "t.fabro:4:23: warning[unknown_attribute]: unknown attribute 'promt'; did you mean 'prompt'?\n\
         t.fabro:5:31: warning[unknown_attribute]: unknown attribute 'scrpit'; did you mean 'script'?\n\
         t.fabro:6:35: warning[unknown_attribute]: unknown attribute 'wieght'; did you mean 'weight'?\n\
         t.fabro:6:45: warning[unknown_attribute]: unknown attribute 'frobnicate'\n\
         0 error(s), 4 warning(s)\n"
    );
    let output = fabro(&env, &["validate", "--json", "t.fabro"]);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(json["valid"], true);
    let first = &json["diagnostics"][0];
    assert_eq!(first["rule"], "unknown_attribute");
    assert_eq!(first["node_id"], "plan");
    assert_eq!(first["fix"], "rename it to 'prompt'");
}

/// SPEC 17.6 and decision 62: an unknown provider on a node is a `provider_known` error
/// with its line and column and the closest known name; in the stylesheet a warning.
#[test]
fn unknown_providers_are_errors_with_line_and_column() {
    let env = TestEnv::new("validate_provider");
    env.write(
        "p.fabro",
        "digraph p {\n  model_stylesheet=\"* { provider: openai; } .x { provider: azure; }\"\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  ask [label=\"Ask\", provider=antropic]\n  start -> ask -> exit\n}\n",
    );
    let output = fabro(&env, &["validate", "p.fabro"]);
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "p.fabro:2:60: warning[provider_known]: model_stylesheet sets unknown provider 'azure'; expected one of: anthropic, openai, gemini, openai_compatible, simulated\n\
         p.fabro:5:21: error[provider_known]: unknown provider 'antropic' on node 'ask'; did you mean 'anthropic'?\n\
         1 error(s), 1 warning(s)\n"
    );
}

/// SPEC 17.6: an unterminated string is reported at its opening quote, wherever it is.
#[test]
fn unterminated_strings_point_at_the_opening_quote() {
    let cases: &[(&str, &str)] = &[
        ("digraph \"name {\n}\n", "1:9"),
        ("digraph {\n  \"node [shape=box]\n}\n", "2:3"),
        ("digraph {\n  a -> \"b\n}\n", "2:8"),
        (
            "digraph {\n  a [tooltip=\"é\", label=\"x\\\"y, prompt=z]\n}\n",
            "2:25",
        ),
        ("digraph {\n  a [\"label=x]\n}\n", "2:6"),
    ];
    let env = TestEnv::new("validate_unterminated");
    for (index, (text, position)) in cases.iter().enumerate() {
        let name = format!("u{index}.fabro");
        env.write(&name, text);
        let output = fabro(&env, &["validate", &name]);
        assert_eq!(code(&output), 1, "{text}");
        assert_eq!(
            stdout(&output),
            format!("{name}:{position}: error[parse_error]: unterminated string\n1 error(s), 0 warning(s)\n"),
            "{text}"
        );
    }
}
