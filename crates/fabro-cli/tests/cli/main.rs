//! Black-box tests of the `fabro` binary: exit codes, stdout, stderr and files.

mod backends;
mod backends_reports;
mod blobs;
mod breakpoints;
mod budget;
mod config;
mod corpus;
mod corrections;
mod crash;
mod diff;
mod errors;
mod extensions;
mod fork;
mod gc;
mod git;
mod graph;
mod help;
mod hooks;
mod human;
mod in_place;
mod inspect;
mod isolation;
mod lifecycle;
mod llm;
mod logs;
mod mcp;
mod offline;
mod parallel_git;
mod parallel_resume;
mod providers;
mod real_acp_agents;
mod real_agents;
mod records;
mod remote_stream;
mod repositories;
mod resume;
mod rewind;
mod run;
mod runs_list;
mod schemathesis;
mod secrets;
mod server;
mod server_catalog;
mod server_errors;
mod server_flags;
mod server_store;
mod server_stream;
mod special_files;
mod stages;
mod steer;
mod storage;
mod store;
mod store_import;
mod terminal;
mod test_store;
mod two_servers;
mod validate;
mod worker_faults;
mod workers;

use std::process::Output;

use fabro_test_support::TestEnv;

/// Runs `fabro` with `args` in `env`.
pub(crate) fn fabro(env: &TestEnv, args: &[&str]) -> Output {
    env.command(env!("CARGO_BIN_EXE_fabro"))
        .args(args)
        .output()
        .expect("the fabro binary runs")
}

/// stdout as text.
pub(crate) fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// stderr as text.
pub(crate) fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The exit code (signals count as -1).
pub(crate) fn code(output: &Output) -> i32 {
    output.status.code().unwrap_or(-1)
}

/// A small valid workflow used by several tests.
pub(crate) const HELLO: &str = r#"digraph hello {
    graph [goal="Say hello"]
    start [shape=Mdiamond]
    greet [label="Greet", prompt="Say hello to $goal"]
    check [shape=parallelogram, script="echo ok"]
    exit  [shape=Msquare]
    start -> greet -> check -> exit
}
"#;
