//! Runs commands under GNU `time` and reports wall time and peak memory.

use std::path::Path;
use std::process::Command;

use crate::generate;

/// Wall time and peak resident memory of one process.
#[derive(Debug, Clone, Copy)]
struct Sample {
    seconds: f64,
    max_rss_kib: u64,
}

/// Repetitions per measurement; the median is reported. The two commands alternate, so
/// that load from other processes on a shared machine affects both alike.
const RUNS: usize = 9;

/// Times `fabro validate` against `nop` for each size; returns a Markdown table.
pub(crate) fn parse_benchmark(sizes: &[usize], fabro: &Path) -> Result<String, String> {
    if !fabro.exists() {
        return Err(format!(
            "{} not found: run `cargo build --release -p fabro-cli` first",
            fabro.display()
        ));
    }
    let directory = std::env::temp_dir().join(format!("fabro-bench-{}", std::process::id()));
    fs_err::create_dir_all(&directory).map_err(|error| error.to_string())?;
    let mut table = String::from(
        "| nodes | edges | file size | fabro validate | peak RSS | nop | peak RSS | speed-up | fabro µs/node |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for &size in sizes {
        let text = generate::workflow(size);
        let path = directory.join(format!("bench_{size}.fabro"));
        fs_err::write(&path, &text).map_err(|error| error.to_string())?;
        let path_text = path.to_string_lossy().into_owned();
        let fabro_path = fabro.to_string_lossy().into_owned();
        let (ours, theirs) = paired_medians(
            RUNS,
            &[fabro_path.as_str(), "validate", path_text.as_str()],
            &["nop", path_text.as_str()],
        )?;
        table.push_str(&format!(
            "| {size} | {} | {:.1} MB | {:.3} s | {:.1} MB | {:.3} s | {:.1} MB | {:.1}x | {:.2} |\n",
            2 * size + 1,
            text.len() as f64 / 1_048_576.0,
            ours.seconds,
            ours.max_rss_kib as f64 / 1024.0,
            theirs.seconds,
            theirs.max_rss_kib as f64 / 1024.0,
            theirs.seconds / ours.seconds.max(1e-9),
            ours.seconds * 1e6 / size as f64,
        ));
    }
    let _ = fs_err::remove_dir_all(&directory);
    Ok(table)
}

/// Median samples of `first` and `second`, run alternately `runs` times each.
fn paired_medians(
    runs: usize,
    first: &[&str],
    second: &[&str],
) -> Result<(Sample, Sample), String> {
    let mut firsts = Vec::with_capacity(runs);
    let mut seconds = Vec::with_capacity(runs);
    for _ in 0..runs {
        firsts.push(run(first)?);
        seconds.push(run(second)?);
    }
    Ok((median(firsts), median(seconds)))
}

fn median(mut samples: Vec<Sample>) -> Sample {
    samples.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
    samples[samples.len() / 2]
}

fn run(command: &[&str]) -> Result<Sample, String> {
    // GNU time's own clock has 10 ms resolution, so wall time is taken here; time
    // reports the child's peak resident set.
    let started = std::time::Instant::now();
    let output = Command::new("/usr/bin/time")
        .args(["-f", "%M"])
        .stdout(std::process::Stdio::null())
        .args(command)
        .output()
        .map_err(|error| format!("cannot run /usr/bin/time (apt-get install time): {error}"))?;
    if !output.status.success() {
        return Err(format!(
            "{} failed: {}",
            command.join(" "),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let seconds = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    match last.trim().parse() {
        Ok(max_rss_kib) => Ok(Sample {
            seconds,
            max_rss_kib,
        }),
        Err(_) => Err(format!("unexpected output from time: {last:?}")),
    }
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
