//! Overhead of kernel isolation (issue 17, SPEC 16): W2 (200 command stages running
//! `true`) through `fabro run` with `command_isolation = "none"`, `"workspace"` and
//! `"workspace"` with `network = false`, in alternating rounds (each round runs the three
//! in turn, each with a fresh `FABRO_HOME` whose `settings.toml` sets the mode), and the
//! cost per process start measured in process: 200 spawns of `sh -c true` through
//! `ProcessEnv::spawn_piped`, plain against confined, alternating.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use fabro_agent::isolation::{
    IsolationMode, IsolationSettings, KernelSupport, PrivateTmpDir, ProcessKind,
};
use fabro_agent::ProcessEnv;

/// The three settings compared: label and `[sandbox]` table.
const MODES: [(&str, &str); 3] = [
    ("none", "command_isolation = \"none\"\n"),
    ("workspace", "command_isolation = \"workspace\"\n"),
    (
        "workspace, network = false",
        "command_isolation = \"workspace\"\nnetwork = false\n",
    ),
];

/// Spawns per in-process sample.
const SPAWNS: usize = 200;

/// Runs `rounds` alternating rounds; returns a Markdown report.
pub(crate) fn isolation_benchmark(fabro: &Path, rounds: usize) -> Result<String, String> {
    let support = KernelSupport::detect();
    let directory =
        std::env::temp_dir().join(format!("fabro-isolation-bench-{}", std::process::id()));
    let work = directory.join("work");
    fs_err::create_dir_all(&work).map_err(|error| error.to_string())?;
    let workflow = crate::engine::workload("w2").ok_or("no w2 workload")?;
    let path = work.join("w2.fabro");
    fs_err::write(&path, workflow).map_err(|error| error.to_string())?;
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
    for round in 0..rounds {
        for (index, (_, sandbox)) in MODES.iter().enumerate() {
            let home = directory.join(format!("home-{round}-{index}"));
            fs_err::create_dir_all(&home).map_err(|error| error.to_string())?;
            fs_err::write(home.join("settings.toml"), format!("[sandbox]\n{sandbox}"))
                .map_err(|error| error.to_string())?;
            let started = Instant::now();
            let status = Command::new(fabro)
                .args(["run", &path.to_string_lossy()])
                .env("FABRO_HOME", &home)
                .current_dir(&work)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .map_err(|error| error.to_string())?;
            if !status.success() {
                return Err(format!("fabro run failed under {sandbox}"));
            }
            samples[index].push(started.elapsed().as_secs_f64());
        }
    }
    let spawn = spawn_costs(rounds.max(5), support, &directory)?;
    let _ = fs_err::remove_dir_all(&directory);
    let mut report = format!(
        "Kernel support: {support:?}\n\n| W2 200 commands `true` | runs (s) | median | vs none |\n|---|---|---:|---:|\n"
    );
    let base = median(&samples[0]);
    for ((label, _), runs) in MODES.iter().zip(&samples) {
        let list: Vec<String> = runs.iter().map(|run| format!("{run:.3}")).collect();
        let _ = writeln!(
            report,
            "| {label} | {} | {:.3} s | {:.3}x |",
            list.join(", "),
            median(runs),
            median(runs) / base
        );
    }
    let _ = writeln!(
        report,
        "\n| one process start (`sh -c true`, median of {} × {SPAWNS}) | µs | added by isolation |\n|---|---:|---:|",
        rounds.max(5)
    );
    for (label, micros) in ["none", "workspace", "workspace, network = false"]
        .iter()
        .zip(&spawn)
    {
        let _ = writeln!(
            report,
            "| {label} | {micros:.0} | {:.0} µs |",
            micros - spawn[0]
        );
    }
    Ok(report)
}

/// Microseconds per `sh -c true` start and reap through `ProcessEnv::spawn_piped` (the
/// path of command nodes and the `shell` tool; confined children through the spawner
/// process): plain,
/// confined, confined without network (medians of `runs` samples of [`SPAWNS`] each,
/// alternating).
fn spawn_costs(runs: usize, support: KernelSupport, directory: &Path) -> Result<[f64; 3], String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| error.to_string())?;
    let cwd = directory.join("work");
    let envs = [true, true, false].map(|network| {
        let mut settings =
            IsolationSettings::new(IsolationMode::Workspace, IsolationMode::Workspace, support);
        settings.network = network;
        settings.hidden_paths = vec![directory.join("hidden")];
        settings
    });
    let _ = fs_err::create_dir_all(directory.join("hidden"));
    let base = ProcessEnv::new(std::env::vars_os(), &[], &BTreeMap::new());
    let stage = |index: usize| -> Result<ProcessEnv, String> {
        if index == 0 {
            return Ok(base.clone());
        }
        let tmpdir = PrivateTmpDir::new(directory.join(format!("tmp{index}")));
        Ok(base
            .clone()
            .with_isolation(envs[index].clone())
            .for_stage(ProcessKind::Command, &tmpdir))
    };
    let stages = [stage(0)?, stage(1)?, stage(2)?];
    let mut samples: [Vec<f64>; 3] = Default::default();
    let arguments = ["-c".into(), "true".into()];
    runtime.block_on(async {
        for _ in 0..runs {
            for (index, env) in stages.iter().enumerate() {
                let started = Instant::now();
                for _ in 0..SPAWNS {
                    let status = env
                        .spawn_piped("sh", &arguments, &cwd)
                        .map_err(|error| error.to_string())?
                        .wait()
                        .await
                        .map_err(|error| error.to_string())?;
                    if !status.success() {
                        return Err("sh -c true failed".to_owned());
                    }
                }
                samples[index].push(started.elapsed().as_secs_f64() * 1e6 / SPAWNS as f64);
            }
        }
        Ok(())
    })?;
    Ok(samples.map(|runs| median(&runs)))
}

fn median(samples: &[f64]) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
}
