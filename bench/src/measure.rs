//! Times `fabro validate` against Graphviz's `nop` as separate processes: wall time and
//! CPU time of each process, and its peak memory.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use nix::sys::resource::{getrusage, UsageWho};
use nix::sys::time::TimeVal;

use crate::generate;

/// Wall and CPU time of one process.
#[derive(Debug, Clone, Copy)]
struct Timing {
    wall_seconds: f64,
    cpu_seconds: f64,
}

/// Medians of one command's runs.
#[derive(Debug, Clone, Copy)]
struct Summary {
    wall_seconds: f64,
    cpu_seconds: f64,
    max_rss_kib: u64,
}

/// Timed repetitions per command; medians are reported. The two commands alternate, so
/// that load from other processes on a shared machine affects both alike.
const RUNS: usize = 15;

/// Repetitions under GNU `time` for peak memory (it varies little between runs).
const MEMORY_RUNS: usize = 3;

/// Times `fabro validate` against `nop` for each size; returns a Markdown table.
pub(crate) fn parse_benchmark(sizes: &[usize], fabro: &Path) -> Result<String, String> {
    if !fabro.exists() {
        return Err(format!(
            "{} not found: run `cargo build --release -p fabro-cli -p fabro-bench` first",
            fabro.display()
        ));
    }
    let directory = std::env::temp_dir().join(format!("fabro-bench-{}", std::process::id()));
    fs_err::create_dir_all(&directory).map_err(|error| error.to_string())?;
    let mut table = String::from(
        "| nodes | edges | file size | fabro wall | fabro CPU | fabro peak RSS | nop wall | nop CPU | nop peak RSS | wall speed-up | CPU speed-up | fabro µs/node |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for &size in sizes {
        let text = generate::workflow(size);
        let path = directory.join(format!("bench_{size}.fabro"));
        fs_err::write(&path, &text).map_err(|error| error.to_string())?;
        let path_text = path.to_string_lossy().into_owned();
        let fabro_path = fabro.to_string_lossy().into_owned();
        let ours_command = [fabro_path.as_str(), "validate", path_text.as_str()];
        let theirs_command = ["nop", path_text.as_str()];
        let (ours, theirs) = paired_medians(RUNS, &ours_command, &theirs_command)?;
        let ours = Summary {
            wall_seconds: ours.wall_seconds,
            cpu_seconds: ours.cpu_seconds,
            max_rss_kib: median_peak_memory(&ours_command)?,
        };
        let theirs = Summary {
            wall_seconds: theirs.wall_seconds,
            cpu_seconds: theirs.cpu_seconds,
            max_rss_kib: median_peak_memory(&theirs_command)?,
        };
        table.push_str(&format!(
            "| {size} | {} | {:.1} MB | {} | {} | {:.1} MB | {} | {} | {:.1} MB | {:.1}x | {:.1}x | {:.2} |\n",
            2 * size + 1,
            text.len() as f64 / 1_048_576.0,
            seconds(ours.wall_seconds),
            seconds(ours.cpu_seconds),
            ours.max_rss_kib as f64 / 1024.0,
            seconds(theirs.wall_seconds),
            seconds(theirs.cpu_seconds),
            theirs.max_rss_kib as f64 / 1024.0,
            theirs.wall_seconds / ours.wall_seconds.max(1e-9),
            theirs.cpu_seconds / ours.cpu_seconds.max(1e-9),
            ours.wall_seconds * 1e6 / size as f64,
        ));
    }
    let _ = fs_err::remove_dir_all(&directory);
    Ok(table)
}

/// Milliseconds with two decimals below a second, seconds with three above.
fn seconds(value: f64) -> String {
    if value < 1.0 {
        format!("{:.2} ms", value * 1e3)
    } else {
        format!("{value:.3} s")
    }
}

/// Median timings of `first` and `second`, run alternately `runs` times each.
fn paired_medians(
    runs: usize,
    first: &[&str],
    second: &[&str],
) -> Result<(Timing, Timing), String> {
    let mut firsts = Vec::with_capacity(runs);
    let mut seconds = Vec::with_capacity(runs);
    for _ in 0..runs {
        firsts.push(time(first)?);
        seconds.push(time(second)?);
    }
    Ok((median_timing(&firsts), median_timing(&seconds)))
}

/// The median wall time and, taken separately, the median CPU time.
fn median_timing(samples: &[Timing]) -> Timing {
    let median = |pick: fn(&Timing) -> f64| {
        let mut values: Vec<f64> = samples.iter().map(pick).collect();
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    Timing {
        wall_seconds: median(|timing| timing.wall_seconds),
        cpu_seconds: median(|timing| timing.cpu_seconds),
    }
}

/// Runs `command` directly (no wrapper process whose own start-up would be counted) and
/// takes its wall time around spawn and wait, and its CPU time (user + system) as the
/// growth of this process's reaped-children usage, which the wait adds it to.
fn time(command: &[&str]) -> Result<Timing, String> {
    let (program, arguments) = command.split_first().ok_or("empty command")?;
    let before = children_cpu_seconds()?;
    let started = Instant::now();
    let output = Command::new(program)
        .args(arguments)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|error| format!("cannot run {program}: {error}"))?;
    let wall_seconds = started.elapsed().as_secs_f64();
    let cpu_seconds = children_cpu_seconds()? - before;
    if !output.status.success() {
        return Err(format!(
            "{} failed: {}",
            command.join(" "),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(Timing {
        wall_seconds,
        cpu_seconds,
    })
}

fn children_cpu_seconds() -> Result<f64, String> {
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN)
        .map_err(|error| format!("getrusage failed: {error}"))?;
    let total = |time: TimeVal| time.tv_sec() as f64 + time.tv_usec() as f64 * 1e-6;
    Ok(total(usage.user_time()) + total(usage.system_time()))
}

/// The median peak resident set of `command`, from GNU `time`.
fn median_peak_memory(command: &[&str]) -> Result<u64, String> {
    let mut samples = (0..MEMORY_RUNS)
        .map(|_| peak_memory(command))
        .collect::<Result<Vec<u64>, String>>()?;
    samples.sort_unstable();
    Ok(samples[samples.len() / 2])
}

fn peak_memory(command: &[&str]) -> Result<u64, String> {
    let output = Command::new("/usr/bin/time")
        .args(["-f", "%M"])
        .args(command)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .map_err(|error| format!("cannot run /usr/bin/time (apt-get install time): {error}"))?;
    if !output.status.success() {
        return Err(format!(
            "{} failed: {}",
            command.join(" "),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    last.trim()
        .parse()
        .map_err(|_| format!("unexpected output from time: {last:?}"))
}

/// In-process timings of the language pipeline's phases on a generated workflow, to see
/// where time goes (best of five runs each).
pub(crate) fn phases(size: usize) -> String {
    use fabro_language::{check, AnyModel, CheckOptions, NoFiles, Variables};
    let text = generate::workflow(size);
    let best = |work: &dyn Fn()| {
        (0..5)
            .map(|_| {
                let started = std::time::Instant::now();
                work();
                started.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    };
    let parse = best(&|| {
        let _ = fabro_language::syntax::parse(&text);
    });
    let variables = Variables::default();
    let options = CheckOptions {
        loader: &NoFiles,
        variables: &variables,
        models: &AnyModel,
    };
    let full = best(&|| {
        let _ = check("bench.fabro".as_ref(), &text, &options);
    });
    format!(
        "nodes {size}: parse {:.1} ms, check (parse + lower + references + lint) {:.1} ms, {:.2} µs/node",
        parse * 1e3,
        full * 1e3,
        full * 1e6 / size as f64
    )
}
