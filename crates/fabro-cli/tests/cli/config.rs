//! Configuration layers (SPEC 12.3): run-config TOML as WORKFLOW, `--config`, adjacent
//! `workflow.toml`, `.fabro/project.toml`, `$FABRO_HOME/settings.toml`, and the errors.

use std::path::Path;

use fabro_test_support::TestEnv;
use serde_json::Value;

use crate::{code, fabro, stderr, stdout};

/// One command stage that writes its expanded script's output to `out.txt`.
const ECHO: &str = r#"digraph w {
    start [shape=Mdiamond]
    exit  [shape=Msquare]
    echo  [shape=parallelogram, script="echo \"$who|$goal|$GREETING\" > out.txt"]
    start -> echo -> exit
}
"#;

fn json(path: &Path) -> Value {
    serde_json::from_str(&fs_err::read_to_string(path).expect("file written")).expect("json")
}

fn out(env: &TestEnv) -> String {
    fs_err::read_to_string(env.work_dir().join("out.txt")).expect("the command ran")
}

fn run_dir(env: &TestEnv) -> std::path::PathBuf {
    env.fabro_home().join("scratch/r1")
}

#[test]
fn toml_workflow_supplies_vars_and_goal() {
    let env = TestEnv::new("config_toml_workflow");
    env.write("flows/w.fabro", ECHO);
    env.write(
        "flows/run.toml",
        "_version = 1\n[workflow]\ngraph = \"w.fabro\"\n[run]\ngoal = \"Ship it\"\n[run.vars]\nwho = \"config\"\napi_name = \"v\"\n[sandbox]\nenv = { GREETING = \"hi\" }\n",
    );
    let output = fabro(&env, &["run", "flows/run.toml", "--run-id", "r1"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        stdout(&output).contains("status: success"),
        "{}",
        stdout(&output)
    );
    assert_eq!(out(&env), "config|Ship it|hi\n");
    let manifest = json(&run_dir(&env).join("manifest.json"));
    assert_eq!(manifest["goal"], "Ship it");
    assert_eq!(manifest["vars"]["who"], "config");
    let config = json(&run_dir(&env).join("config.json"));
    assert_eq!(config["run"]["goal"], "Ship it");
    assert_eq!(config["run"]["vars"]["who"], "config");
    assert_eq!(config["sandbox"]["env"]["GREETING"], "hi");
}

#[test]
fn toml_workflow_is_accepted_by_validate_and_graph() {
    let env = TestEnv::new("config_toml_validate");
    env.write("flows/workflow.fabro", ECHO);
    env.write("flows/run.toml", "goal = \"x\"\n");
    let output = fabro(&env, &["validate", "flows/run.toml"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(stdout(&output), "0 error(s), 0 warning(s)\n");
    let output = fabro(&env, &["graph", "flows/run.toml", "--format", "dot"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(stdout(&output).contains("echo"), "{}", stdout(&output));
}

#[test]
fn config_flag_supplies_vars_and_cli_goal_wins() {
    let env = TestEnv::new("config_flag");
    env.write("w.fabro", ECHO);
    env.write("ci.toml", "goal = \"from config\"\n[vars]\nwho = \"ci\"\n");
    let output = fabro(
        &env,
        &["run", "w.fabro", "--config", "ci.toml", "--run-id", "r1"],
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(out(&env), "ci|from config|\n");
    let output = fabro(
        &env,
        &[
            "run",
            "w.fabro",
            "--config",
            "ci.toml",
            "--goal",
            "from flag",
            "--run-id",
            "r2",
        ],
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(out(&env), "ci|from flag|\n");
}

#[test]
fn workflow_toml_next_to_the_dot_file_is_picked_up() {
    let env = TestEnv::new("config_adjacent");
    env.write("flows/w.fabro", ECHO);
    env.write("flows/workflow.toml", "[run.vars]\nwho = \"adjacent\"\n");
    let output = fabro(&env, &["run", "flows/w.fabro", "--run-id", "r1"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(out(&env), "adjacent||\n");
}

#[test]
fn layers_apply_in_precedence_order() {
    let env = TestEnv::new("config_layers");
    env.write(
        "flows/w.fabro",
        r#"digraph w {
    start [shape=Mdiamond]
    exit  [shape=Msquare]
    echo  [shape=parallelogram, script="echo $a $b $c $d > out.txt"]
    start -> echo -> exit
}
"#,
    );
    fs_err::write(
        env.fabro_home().join("settings.toml"),
        "[run.vars]\na = \"settings\"\nb = \"settings\"\nc = \"settings\"\nd = \"settings\"\n",
    )
    .expect("writable");
    env.write(
        ".fabro/project.toml",
        "[run.vars]\nb = \"project\"\nc = \"project\"\nd = \"project\"\n",
    );
    env.write("flows/workflow.toml", "[vars]\nc = \"run\"\nd = \"run\"\n");
    let output = fabro(
        &env,
        &["run", "flows/w.fabro", "--var", "d=cli", "--run-id", "r1"],
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(out(&env), "settings project run cli\n");
    let manifest = json(&run_dir(&env).join("manifest.json"));
    assert_eq!(manifest["vars"]["d"], "cli");
}

fn check_error(name: &str, toml: &str, expected: &str) {
    let env = TestEnv::new(name);
    env.write("workflow.fabro", ECHO);
    env.write("run.toml", toml);
    let output = fabro(&env, &["run", "run.toml", "--run-id", "r1"]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert_eq!(stderr(&output), format!("error: {expected}\n"));
    assert!(!run_dir(&env).exists());
}

#[test]
fn unknown_key_names_the_line_and_a_suggestion() {
    check_error(
        "config_unknown_key",
        "[run]\ngoal = \"x\"\ngaol = \"y\"\n",
        "unknown key 'run.gaol' in run.toml:3; did you mean 'run.goal'?",
    );
    check_error(
        "config_unknown_section",
        "[colours]\n",
        "unknown key 'colours' in run.toml:1",
    );
}

#[test]
fn credential_keys_are_rejected() {
    check_error(
        "config_credential",
        "[llm]\nmodel = \"sonnet\"\napi_key = \"sk-123\"\n",
        "credentials are read from environment variables only (llm.api_key)",
    );
}

#[test]
fn docker_sandbox_is_rejected() {
    check_error(
        "config_docker",
        "[sandbox]\nprovider = \"docker\"\n",
        "the docker sandbox is not available in this release",
    );
}

#[test]
fn other_versions_are_rejected() {
    check_error(
        "config_version",
        "_version = 2\n",
        "unsupported configuration version 2 in run.toml:1; this build reads 1",
    );
}

#[test]
fn errors_in_other_layers_exit_two() {
    let env = TestEnv::new("config_project_error");
    env.write("w.fabro", ECHO);
    env.write(".fabro/project.toml", "[llm]\nmodle = \"x\"\n");
    let output = fabro(&env, &["run", "w.fabro", "--run-id", "r1"]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    let expected = format!(
        "error: unknown key 'llm.modle' in {}:2; did you mean 'llm.model'?\n",
        env.work_dir().join(".fabro/project.toml").display()
    );
    assert_eq!(stderr(&output), expected);
    env.write(".fabro/project.toml", "");
    let output = fabro(
        &env,
        &[
            "run",
            "w.fabro",
            "--config",
            "missing.toml",
            "--run-id",
            "r1",
        ],
    );
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(
        stderr(&output).starts_with("error: cannot read configuration missing.toml"),
        "{}",
        stderr(&output)
    );
}
