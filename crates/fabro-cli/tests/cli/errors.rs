//! The exact stderr of run-preparation errors (issue 15): typed engine errors render
//! the same bytes as the strings they replaced, with no extra `caused by:` lines.

use crate::{code, fabro, stderr};
use fabro_test_support::TestEnv;

const TRIVIAL: &str = "digraph w { start [shape=Mdiamond]; exit [shape=Msquare]; start -> exit }";

const GATED: &str = r#"digraph w {
    start [shape=Mdiamond]
    review [shape=hexagon, label="Review"]
    approve [shape=hexagon, label="Approve"]
    exit [shape=Msquare]
    start -> review
    review -> approve [label="Yes"]
    review -> exit [label="No"]
    approve -> exit
}"#;

fn refused(env: &TestEnv, args: &[&str]) -> String {
    let output = fabro(env, args);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    stderr(&output)
}

#[test]
fn issue_15_invalid_and_taken_run_ids() {
    let env = TestEnv::new("issue_15_run_ids");
    env.write("w.fabro", TRIVIAL);
    assert_eq!(
        refused(&env, &["run", "w.fabro", "--run-id", "bad id"]),
        "error: invalid run id 'bad id': use 1–64 characters from [A-Za-z0-9._-], starting with a letter or digit\n"
    );
    let output = fabro(&env, &["run", "w.fabro", "--run-id", "dup1"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(
        refused(&env, &["run", "w.fabro", "--run-id", "dup1"]),
        "error: run dup1 already exists\n"
    );
    assert_eq!(
        refused(&env, &["resume", "dup1"]),
        "error: run dup1 already finished with status success\n"
    );
}

#[test]
fn issue_15_answers_for_unknown_gates() {
    let env = TestEnv::new("issue_15_answers");
    env.write("w.fabro", TRIVIAL);
    env.write("gated.fabro", GATED);
    assert_eq!(
        refused(&env, &["run", "w.fabro", "--answer", "nope=Yes"]),
        "error: --answer names no human gate of the workflow: 'nope' (the workflow has no human gates)\n"
    );
    assert_eq!(
        refused(
            &env,
            &["run", "gated.fabro", "--answer", "nope=Yes", "--answer", "other=No", "--answer", "review=Yes"]
        ),
        "error: --answer names no human gate of the workflow: 'nope', 'other' (human gates: approve, review)\n"
    );
}

#[test]
fn issue_15_invalid_simulated_responses() {
    let env = TestEnv::new("issue_15_simulated_responses");
    env.write("w.fabro", TRIVIAL);
    env.write("bad.json", "{\"nodes\": \n");
    let output = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro"])
        .env("FABRO_SIMULATED_RESPONSES", "bad.json")
        .output()
        .expect("the fabro binary runs");
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert_eq!(
        stderr(&output),
        "error: bad.json: invalid simulated responses file at line 2, column 0: EOF while parsing a value at line 2 column 0\n"
    );
}
