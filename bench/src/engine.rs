//! Engine overhead workloads of issue 3 (W1–W4), run through `fabro run` as processes.
//!
//! W0: `start -> exit`, the fixed cost of a run (run directory, journal, run index).
//! W1: a chain of 1,000 conditional (no-op) nodes. W2: a chain of 200 command nodes
//! running `true`, compared with spawning and reaping `sh -c true` 200 times. W3: a fan-out
//! of 100 branches each running `sleep 0.2`. W4: a 500-iteration loop that exits on
//! `context.internal.node_visit_count >= 500`.
//!
//! W5 (issue 6): a chain of 100 prompt nodes on the simulated provider with zero
//! latency, so the time per stage is the engine's own: prompt assembly with the compact
//! preamble, the call, `prompt.md`/`response.md`, the routing scan and the checkpoint.
//! The same chain also runs against the twin (`fabro-twin`, loopback HTTP, the Anthropic
//! wire format), compared with 100 calls of the same client from the harness, so the
//! difference is the engine's overhead beyond the HTTP round trip.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

/// Generates the workflow of workload `name`.
pub(crate) fn workload(name: &str) -> Option<String> {
    let mut out =
        String::from("digraph bench {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n");
    match name {
        "w0" => out.push_str("  start -> exit\n"),
        "w1" => {
            for index in 1..=1000 {
                let _ = writeln!(out, "  n{index} [shape=diamond]");
            }
            out.push_str("  start -> n1\n");
            for index in 1..1000 {
                let _ = writeln!(
                    out,
                    "  n{index} -> n{} [condition=\"outcome=success\"]",
                    index + 1
                );
                let _ = writeln!(out, "  n{index} -> exit");
            }
            out.push_str("  n1000 -> exit\n");
        }
        "w2" => {
            for index in 1..=200 {
                let _ = writeln!(out, "  c{index} [shape=parallelogram, script=\"true\"]");
            }
            out.push_str("  start -> c1\n");
            for index in 1..200 {
                let _ = writeln!(out, "  c{index} -> c{}", index + 1);
            }
            out.push_str("  c200 -> exit\n");
        }
        "w3" => {
            out.push_str("  fan [shape=component, max_parallel=100]\n  join [shape=tripleoctagon]\n  start -> fan\n  join -> exit\n");
            for index in 1..=100 {
                let _ = writeln!(
                    out,
                    "  b{index} [shape=parallelogram, script=\"sleep 0.2\"]"
                );
                let _ = writeln!(out, "  fan -> b{index} -> join");
            }
        }
        "w4" => {
            out.push_str("  spin [shape=diamond]\n  start -> spin\n");
            out.push_str(
                "  spin -> exit [condition=\"context.internal.node_visit_count >= 500\"]\n",
            );
            out.push_str("  spin -> spin\n");
        }
        "w5" | "w5t" => {
            if name == "w5" {
                out.push_str("  node [shape=tab, provider=\"simulated\"]\n");
            } else {
                out.push_str(
                    "  node [shape=tab, provider=\"anthropic\", model=\"claude-sonnet-4-6\"]\n",
                );
            }
            for index in 1..=100 {
                let _ = writeln!(out, "  p{index} [prompt=\"Step {index} of $goal\"]");
            }
            out.push_str("  start -> p1\n");
            for index in 1..100 {
                let _ = writeln!(out, "  p{index} -> p{}", index + 1);
            }
            out.push_str("  p100 -> exit\n");
        }
        _ => return None,
    }
    out.push_str("}\n");
    Some(out)
}

/// Runs every workload `runs` times; returns a Markdown table.
pub(crate) fn engine_benchmark(fabro: &Path, runs: usize) -> Result<String, String> {
    let directory = std::env::temp_dir().join(format!("fabro-engine-bench-{}", std::process::id()));
    fs_err::create_dir_all(&directory).map_err(|error| error.to_string())?;
    let mut table = String::from("| workload | stages | fabro run (median) | peak RSS | reference | overhead per stage |\n|---|---:|---:|---:|---:|---:|\n");
    let spawn_200 = median(runs, || {
        let started = Instant::now();
        for _ in 0..200 {
            let status = Command::new("sh").args(["-c", "true"]).status();
            if status.is_err() {
                return f64::NAN;
            }
        }
        started.elapsed().as_secs_f64()
    });
    for (name, stages, reference, work) in [
        (
            "W0 empty workflow (the fixed cost of a run)",
            2usize,
            "–",
            0.0,
        ),
        ("W1 1,000 conditional nodes", 1002, "–", 0.0),
        ("W2 200 commands `true`", 202, "200 × sh -c true", spawn_200),
        ("W3 100 parallel `sleep 0.2`", 104, "one 0.2 s sleep", 0.2),
        ("W4 500-iteration loop", 502, "–", 0.0),
        ("W5 100 prompt nodes (simulated LLM)", 102, "–", 0.0),
        ("W1 with git checkpoints", 1002, "–", 0.0),
        (
            "W2 with git checkpoints",
            202,
            "200 × sh -c true",
            spawn_200,
        ),
    ] {
        let key = name
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_lowercase();
        let with_git = name.contains("git");
        let text = workload(&key).ok_or_else(|| format!("unknown workload {key}"))?;
        let run_directory = if with_git {
            let repo = directory.join(format!("repo-{key}"));
            git_repository(&repo, &format!("{key}.fabro"), &text)?;
            repo
        } else {
            // A working directory of its own: asset capture scans it around every
            // command, and the run directories of earlier workloads must not be in it.
            let work = directory.join(format!("work-{key}"));
            fs_err::create_dir_all(&work).map_err(|error| error.to_string())?;
            work
        };
        let path = run_directory.join(format!("{key}.fabro"));
        fs_err::write(&path, text).map_err(|error| error.to_string())?;
        let mut rss = 0u64;
        let mut round = 0;
        let seconds = median(runs, || {
            // A fresh FABRO_HOME per round, deleted only at the end: on a file system
            // without a journal (ext4 here) every file created within about 30 s of a mass
            // deletion pays for scanning the recently freed inodes, which would charge the
            // harness's own clean-up to the engine.
            round += 1;
            let home = directory.join(format!("home-{key}-{with_git}-{round}"));
            let mut command = Command::new(fabro);
            command
                // W1 has 1,002 stages: above the default stage budget (SPEC 17.1).
                .args(["run", &path.to_string_lossy(), "--max-stages", "100000"])
                .env("FABRO_HOME", &home)
                .current_dir(&run_directory);
            timed_run(command, &mut rss)
        });
        let overhead_ms = (seconds - work) * 1000.0 / stages as f64;
        let reference_text = if work > 0.0 {
            format!("{reference} = {work:.3} s")
        } else {
            reference.to_owned()
        };
        let _ = writeln!(
            table,
            "| {name} | {stages} | {seconds:.3} s | {:.1} MB | {reference_text} | {overhead_ms:.3} ms |",
            rss as f64 / 1024.0
        );
    }
    let (seconds, rss, round_trips) = w5_against_twin(fabro, &directory, runs)?;
    let _ = writeln!(
        table,
        "| W5 100 prompt nodes against the twin (HTTP) | 102 | {seconds:.3} s | {:.1} MB | 100 × client round trip = {round_trips:.3} s | {:.3} ms |",
        rss as f64 / 1024.0,
        (seconds - round_trips) * 1000.0 / 102.0
    );
    let resume = median(runs, || {
        resume_after_1000(fabro, &directory).unwrap_or(f64::NAN)
    });
    let _ = writeln!(
        table,
        "\nResuming a run with 1,000 completed stages (whole `fabro resume` process up to its exit, one remaining instant command): {:.1} ms (median of {runs})",
        resume * 1000.0
    );
    let _ = fs_err::remove_dir_all(&directory);
    Ok(table)
}

/// W5 against the twin: (median wall seconds of `fabro run`, peak RSS in KB, median
/// seconds of 100 sequential calls of the same client from the harness).
fn w5_against_twin(fabro: &Path, directory: &Path, runs: usize) -> Result<(f64, u64, f64), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start tokio: {error}"))?;
    let twin = runtime
        .block_on(fabro_twin::Twin::start())
        .map_err(|error| format!("cannot start the twin: {error}"))?;
    let client = crate::twin_client::client(fabro_llm::Provider::Anthropic, &twin)?;
    let request = crate::llm::request("claude-sonnet-4-6");
    let round_trips = median(runs, || {
        runtime.block_on(async {
            let started = Instant::now();
            for _ in 0..100 {
                let mut sink = |_: &fabro_llm::StreamEvent| {};
                if client
                    .complete_streaming(&request, &mut sink)
                    .await
                    .is_err()
                {
                    return f64::NAN;
                }
            }
            started.elapsed().as_secs_f64()
        })
    });
    let before = twin.request_count();
    let work = directory.join("work-w5t");
    fs_err::create_dir_all(&work).map_err(|error| error.to_string())?;
    let path = work.join("w5t.fabro");
    fs_err::write(&path, workload("w5t").ok_or("w5t")?).map_err(|error| error.to_string())?;
    let mut rss = 0u64;
    let mut round = 0;
    let seconds = median(runs, || {
        round += 1;
        let mut command = Command::new(fabro);
        command
            .args(["run", &path.to_string_lossy()])
            .env("FABRO_HOME", directory.join(format!("home-w5t-{round}")))
            .env("ANTHROPIC_API_KEY", "bench-key")
            .env("ANTHROPIC_BASE_URL", twin.base_url())
            .current_dir(&work);
        timed_run(command, &mut rss)
    });
    let made = twin.request_count() - before;
    if made < 100 * runs {
        return Err(format!("W5 against the twin made only {made} requests"));
    }
    Ok((seconds, rss, round_trips))
}

/// Runs `command` under GNU `time`; returns its wall seconds (NaN when it fails) and
/// stores its peak resident memory in KB in `rss`.
fn timed_run(command: Command, rss: &mut u64) -> f64 {
    let mut timed = Command::new("/usr/bin/time");
    timed
        .args(["-f", "%M"])
        .arg(command.get_program())
        .args(command.get_args())
        .envs(
            command
                .get_envs()
                .filter_map(|(key, value)| Some((key, value?))),
        )
        .stdout(Stdio::null());
    if let Some(directory) = command.get_current_dir() {
        timed.current_dir(directory);
    }
    let started = Instant::now();
    let output = timed.output();
    let elapsed = started.elapsed().as_secs_f64();
    match output {
        Ok(output) if output.status.success() => {
            *rss = String::from_utf8_lossy(&output.stderr)
                .lines()
                .last()
                .and_then(|line| line.trim().parse().ok())
                .unwrap_or(*rss);
            elapsed
        }
        _ => f64::NAN,
    }
}

/// A git repository at `directory` whose first commit holds `file` with `text`.
fn git_repository(directory: &Path, file: &str, text: &str) -> Result<(), String> {
    let _ = fs_err::remove_dir_all(directory);
    fs_err::create_dir_all(directory).map_err(|error| error.to_string())?;
    fs_err::write(directory.join(file), text).map_err(|error| error.to_string())?;
    for args in [
        vec!["init", "-q", "-b", "main"],
        vec!["add", file],
        vec![
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@local",
            "commit",
            "-q",
            "-m",
            "init",
        ],
    ] {
        let status = Command::new("git")
            .args(&args)
            .current_dir(directory)
            .stdout(Stdio::null())
            .status()
            .map_err(|error| format!("git: {error}"))?;
        if !status.success() {
            return Err(format!("git {args:?} failed"));
        }
    }
    Ok(())
}

/// Seconds `fabro resume` takes to continue a run whose 1,000 conditional stages are
/// complete: the run is killed while its last stage waits, then resumed.
fn resume_after_1000(fabro: &Path, directory: &Path) -> Result<f64, String> {
    let mut text = workload("w1").ok_or("w1")?;
    text = text.replace(
        "  n1000 -> exit\n",
        "  block [shape=parallelogram, script=\"[ -e go ] || sleep 30\"]\n  n1000 -> block -> exit\n",
    );
    let work = directory.join("resume");
    let _ = fs_err::remove_dir_all(&work);
    fs_err::create_dir_all(&work).map_err(|error| error.to_string())?;
    let path = work.join("w.fabro");
    fs_err::write(&path, text).map_err(|error| error.to_string())?;
    let home = work.join("home");
    let mut child = Command::new(fabro)
        .args([
            "run",
            "w.fabro",
            "--run-id",
            "resume1",
            "--max-stages",
            "100000",
        ])
        .env("FABRO_HOME", &home)
        .current_dir(&work)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|error| error.to_string())?;
    let checkpoint = home.join("scratch/resume1/checkpoint.json");
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let text = fs_err::read_to_string(&checkpoint).unwrap_or_default();
        if text.contains("\"next_node_id\":\"block\"") {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err("the run never reached the blocking stage".to_owned());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    fs_err::write(work.join("go"), "").map_err(|error| error.to_string())?;
    let started = Instant::now();
    let status = Command::new(fabro)
        .args(["resume", "resume1", "--max-stages", "100000"])
        .env("FABRO_HOME", &home)
        .current_dir(&work)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|error| error.to_string())?;
    let elapsed = started.elapsed().as_secs_f64();
    if !status.success() {
        return Err("resume failed".to_owned());
    }
    Ok(elapsed)
}

fn median(runs: usize, mut measure: impl FnMut() -> f64) -> f64 {
    let mut samples: Vec<f64> = (0..runs.max(1)).map(|_| measure()).collect();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabro_language::{check, AnyModel, CheckOptions, NoFiles, Variables};

    #[test]
    fn workloads_are_valid_workflows() {
        let variables = Variables::default();
        let options = CheckOptions {
            loader: &NoFiles,
            variables: &variables,
            models: &AnyModel,
        };
        for name in ["w1", "w2", "w3", "w4", "w5", "w5t"] {
            let text = workload(name).expect("known workload");
            let checked = check("bench.fabro".as_ref(), &text, &options);
            assert!(!checked.has_errors(), "{name}: {:#?}", checked.diagnostics);
        }
        assert!(workload("w9").is_none());
    }
}
