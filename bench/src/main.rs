//! Benchmark harness: `cargo run --release -p fabro-bench -- parse [SIZES…]`.
//!
//! `parse` generates workflows of the given node counts (twice as many edges, with
//! conditions, classes and a model stylesheet), then times `fabro validate FILE` against
//! Graphviz's `nop FILE` (its own parser and printer) on the same files, each as a
//! separate process spawned directly: wall time around spawn and wait, CPU time from the
//! reaped child's usage, and peak resident memory from separate runs under GNU `time`.
//! `llm` measures the LLM layer in process against the twin (`fabro-twin`): the CPU cost of
//! streaming a 1 MB response beyond the raw transfer, and 100 concurrent calls. It prints a
//! Markdown table for `docs/benchmarks.md`. `isolation [ROUNDS]` compares W2 under the
//! isolation modes of SPEC 16 and measures the added cost of one process start.
//! `server [ROUNDS [PARTS]]` (parts: letters of `abcd`, default all) measures `fabro server` over loopback HTTP (issue 18): runs started
//! over HTTP against `fabro run`, event delivery latency to 100 streams, `GET` latency
//! under 50 clients and the server's peak memory. It times the `fabro` binary beside its own
//! executable: build both with `cargo build --release -p fabro-cli -p fabro-bench`.
//! `shared [ROUNDS [PARTS]]` (parts: digits of `123`, default all) measures `fabro server`
//! on the shared store (PostgreSQL on 127.0.0.1:5432) beside the local store (issue 31).

mod caching;
mod engine;
mod generate;
mod isolation;
mod llm;
mod measure;
mod repositories;
mod server;
mod shared;
mod sse;
mod twin_client;
mod w6;
mod workers;

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("parse") => {
            let sizes: Result<Vec<usize>, _> = args[1..].iter().map(|size| size.parse()).collect();
            let sizes = match sizes {
                Ok(sizes) if !sizes.is_empty() => sizes,
                Ok(_) => vec![1_000, 10_000, 100_000],
                Err(error) => {
                    report(&format!("error: sizes must be whole numbers: {error}"));
                    return ExitCode::from(2);
                }
            };
            finish(measure::parse_benchmark(&sizes, &fabro_binary()))
        }
        Some("phases") => {
            let Some(size) = args.get(1).and_then(|size| size.parse().ok()) else {
                report("usage: fabro-bench phases NODES");
                return ExitCode::from(2);
            };
            print_out(&measure::phases(size));
            ExitCode::SUCCESS
        }
        Some("engine") => finish(engine::engine_benchmark(&fabro_binary(), 5).and_then(|table| {
            // `--without-w6`: only W0–W5, for comparing two builds in alternating runs.
            if args.iter().any(|arg| arg == "--without-w6") {
                return Ok(table);
            }
            let w6 = w6::w6_benchmark(&fabro_binary(), &[20_000, 100_000], 3)?;
            Ok(format!("{table}\nW6 (issue 20), 50 command stages in a generated repository, git checkpoints on:\n\n{w6}"))
        })),
        Some("w6") => {
            let sizes: Vec<usize> = args.iter().skip(1).filter_map(|size| size.parse().ok()).collect();
            let sizes = if sizes.is_empty() { vec![20_000, 100_000] } else { sizes };
            finish(w6::w6_benchmark(&fabro_binary(), &sizes, 3))
        }
        Some("isolation") => {
            let rounds = args
                .get(1)
                .and_then(|rounds| rounds.parse().ok())
                .unwrap_or(3);
            finish(isolation::isolation_benchmark(&fabro_binary(), rounds))
        }
        Some("server") => {
            let rounds = args
                .get(1)
                .and_then(|rounds| rounds.parse().ok())
                .unwrap_or(5);
            let parts = args.get(2).map_or("abcd", String::as_str);
            finish(server::server_benchmark(&fabro_binary(), rounds, parts))
        }
        Some("shared") => {
            let rounds = args
                .get(1)
                .and_then(|rounds| rounds.parse().ok())
                .unwrap_or(3);
            let parts = args.get(2).map_or("123", String::as_str);
            finish(shared::shared_benchmark(&fabro_binary(), rounds, parts))
        }
        Some("workers") => {
            let runs = args
                .get(1)
                .and_then(|runs| runs.parse().ok())
                .unwrap_or(24);
            finish(workers::workers_benchmark(&fabro_binary(), runs))
        }
        Some("repositories") => {
            let runs = args
                .get(1)
                .and_then(|runs| runs.parse().ok())
                .unwrap_or(10);
            finish(repositories::repositories_benchmark(&fabro_binary(), runs))
        }
        Some("llm") => finish(llm::llm_benchmark()),
        Some("caching") => finish(caching::caching_benchmark()),
        Some("generate") => {
            let Some(size) = args.get(1).and_then(|size| size.parse().ok()) else {
                report("usage: fabro-bench generate NODES");
                return ExitCode::from(2);
            };
            print_out(&generate::workflow(size));
            ExitCode::SUCCESS
        }
        _ => {
            report("usage: fabro-bench parse [SIZES…] | fabro-bench phases NODES | fabro-bench engine [--without-w6] | fabro-bench w6 [FILES…] | fabro-bench isolation [ROUNDS] | fabro-bench server [ROUNDS [PARTS]] | fabro-bench shared [ROUNDS [PARTS]] | fabro-bench workers [RUNS] | fabro-bench repositories [RUNS] | fabro-bench llm | fabro-bench caching | fabro-bench generate NODES");
            ExitCode::from(2)
        }
    }
}

/// Prints the table, or reports the error and fails.
fn finish(result: Result<String, impl std::fmt::Display>) -> ExitCode {
    match result {
        Ok(table) => {
            print_out(&table);
            ExitCode::SUCCESS
        }
        Err(error) => {
            report(&format!("error: {error}"));
            ExitCode::FAILURE
        }
    }
}

/// The `fabro` binary next to this one (both live in `target/release`).
fn fabro_binary() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("fabro")))
        .unwrap_or_else(|| PathBuf::from("target/release/fabro"))
}

#[expect(clippy::print_stdout, reason = "the harness prints its report")]
fn print_out(text: &str) {
    println!("{text}");
}

#[expect(
    clippy::print_stderr,
    reason = "the harness reports progress and errors"
)]
fn report(text: &str) {
    eprintln!("{text}");
}
