//! W6 (issue 20): stage overhead in a large repository with git checkpointing on.
//!
//! A generated repository of N small files in N/10 directories (two levels), a chain of 50
//! command stages each appending one line to a different file. The per-stage overhead is
//! the time from the first command stage's `StageStarted` to the last one's
//! `CheckpointCompleted` (from `events.jsonl`), divided by 50, minus the command's own run
//! time (the same `sh -c` spawned by the harness). Reported beside it, in the same run:
//! `git status --porcelain` of the same tree, and `git add -A && git commit` after changing
//! one file, with the git command line.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const STAGES: usize = 50;

/// Runs W6 at every size in `sizes` (files), `runs` times each; returns a Markdown table.
pub(crate) fn w6_benchmark(fabro: &Path, sizes: &[usize], runs: usize) -> Result<String, String> {
    let directory = std::env::temp_dir().join(format!("fabro-w6-bench-{}", std::process::id()));
    let result = sizes
        .iter()
        .map(|size| one_size(fabro, &directory, *size, runs))
        .collect::<Result<Vec<String>, String>>();
    let _ = fs_err::remove_dir_all(&directory);
    let mut table = String::from(
        "| files (directories) | fabro overhead per stage (median) | range | `git status --porcelain` | overhead ÷ status | `git add -A && git commit` per stage |\n|---:|---:|---:|---:|---:|---:|\n",
    );
    for row in result? {
        table.push_str(&row);
    }
    Ok(table)
}

fn one_size(fabro: &Path, directory: &Path, files: usize, runs: usize) -> Result<String, String> {
    let repo = directory.join(format!("repo-{files}"));
    let (dirs, targets) = generate_repository(&repo, files)?;
    let command_time = median(
        (0..20)
            .map(|_| {
                let started = Instant::now();
                let _ = Command::new("sh")
                    .args(["-c", "printf 'x\\n' >> scratch.txt"])
                    .current_dir(directory)
                    .status();
                started.elapsed().as_secs_f64()
            })
            .collect(),
    );
    let mut overheads = Vec::new();
    for round in 0..runs {
        let home = directory.join(format!("home-{files}-{round}"));
        let status = Command::new(fabro)
            .args(["run", "w6.fabro"])
            .env("FABRO_HOME", &home)
            .current_dir(&repo)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|error| format!("fabro: {error}"))?;
        if !status.success() {
            return Err(format!("fabro run of W6 ({files} files) failed"));
        }
        let events = find_events(&home).ok_or("no events.jsonl after the W6 run")?;
        let span = stage_span(&fs_err::read_to_string(&events).map_err(|e| e.to_string())?)?;
        overheads.push(span / STAGES as f64 - command_time);
        let _ = fs_err::remove_dir_all(&home);
    }
    let _ = &targets;
    let status_time = median(
        (0..7)
            .map(|_| time_git(&repo, &["status", "--porcelain"]))
            .collect::<Result<Vec<f64>, String>>()?,
    );
    let mut commits = Vec::new();
    for (index, target) in targets.iter().take(10).enumerate() {
        append_line(&repo.join(target))?;
        let started = Instant::now();
        run_git(&repo, &["add", "-A"])?;
        run_git(&repo, &["commit", "-q", "-m", &format!("stage {index}")])?;
        commits.push(started.elapsed().as_secs_f64());
    }
    let commit_time = median(commits);
    let _ = fs_err::remove_dir_all(&repo);
    let mut sorted = overheads.clone();
    sorted.sort_by(f64::total_cmp);
    let overhead = median(overheads);
    let mut row = String::new();
    let _ = writeln!(
        row,
        "| {files} ({dirs}) | {:.1} ms | {:.1}–{:.1} ms | {:.1} ms | {:.2}x | {:.1} ms |",
        overhead * 1000.0,
        sorted.first().copied().unwrap_or(f64::NAN) * 1000.0,
        sorted.last().copied().unwrap_or(f64::NAN) * 1000.0,
        status_time * 1000.0,
        overhead / status_time,
        commit_time * 1000.0,
    );
    Ok(row)
}

/// Writes `files` files in two levels of directories (10 files each) and the W6 workflow,
/// commits them; returns the number of directories and the 50 files the stages change.
fn generate_repository(repo: &Path, files: usize) -> Result<(usize, Vec<String>), String> {
    let _ = fs_err::remove_dir_all(repo);
    let dirs = (files / 10).max(1);
    // Top-level directories: the largest divisor of `dirs` not above its square root.
    let top = (1..=dirs)
        .take_while(|candidate| candidate * candidate <= dirs)
        .filter(|candidate| dirs.is_multiple_of(*candidate))
        .last()
        .unwrap_or(1);
    let per_top = dirs / top;
    let mut paths = Vec::with_capacity(files);
    for index in 0..files {
        let dir = index / 10;
        paths.push(format!(
            "d{:03}/s{:03}/f{}.txt",
            dir / per_top,
            dir % per_top,
            index % 10
        ));
    }
    for (index, path) in paths.iter().enumerate() {
        let path = repo.join(path);
        if index % 10 == 0 {
            if let Some(parent) = path.parent() {
                fs_err::create_dir_all(parent).map_err(|error| error.to_string())?;
            }
        }
        fs_err::write(&path, format!("file {index}\n")).map_err(|error| error.to_string())?;
    }
    let step = files / STAGES;
    let targets: Vec<String> = (0..STAGES)
        .map(|stage| paths[(stage * step + stage * 7) % files].clone())
        .collect();
    let mut workflow =
        String::from("digraph w6 {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n");
    for (stage, target) in targets.iter().enumerate() {
        let _ = writeln!(
            workflow,
            "  c{} [shape=parallelogram, script=\"printf 'x\\\\n' >> {target}\"]",
            stage + 1
        );
    }
    workflow.push_str("  start -> c1\n");
    for stage in 1..STAGES {
        let _ = writeln!(workflow, "  c{stage} -> c{}", stage + 1);
    }
    let _ = writeln!(workflow, "  c{STAGES} -> exit\n}}");
    fs_err::write(repo.join("w6.fabro"), workflow).map_err(|error| error.to_string())?;
    run_git(repo, &["init", "-q", "-b", "main"])?;
    run_git(repo, &["add", "-A"])?;
    run_git(repo, &["commit", "-q", "-m", "init"])?;
    Ok((dirs, targets))
}

fn run_git(repo: &Path, args: &[&str]) -> Result<(), String> {
    let status = Command::new("git")
        .args(["-c", "user.name=bench", "-c", "user.email=bench@local"])
        .args(args)
        .current_dir(repo)
        .stdout(Stdio::null())
        .status()
        .map_err(|error| format!("git: {error}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("git {args:?} failed"))
    }
}

fn time_git(repo: &Path, args: &[&str]) -> Result<f64, String> {
    let started = Instant::now();
    run_git(repo, args)?;
    Ok(started.elapsed().as_secs_f64())
}

fn append_line(path: &Path) -> Result<(), String> {
    use std::io::Write as _;
    let mut file = fs_err::OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|error| error.to_string())?;
    file.write_all(b"y\n").map_err(|error| error.to_string())
}

fn find_events(home: &Path) -> Option<PathBuf> {
    let mut pending = vec![home.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).ok()?.flatten() {
            let path = entry.path();
            if path.file_name().is_some_and(|name| name == "events.jsonl") {
                return Some(path);
            }
            if entry.file_type().is_ok_and(|kind| kind.is_dir())
                && path.file_name().is_some_and(|name| name != "worktree")
            {
                pending.push(path);
            }
        }
    }
    None
}

/// Seconds from `StageStarted` of `c1` to `CheckpointCompleted` of the last command stage.
fn stage_span(events: &str) -> Result<f64, String> {
    let last = format!("c{STAGES}");
    let mut start = None;
    let mut end = None;
    for line in events.lines() {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let name = event["event"].as_str().unwrap_or_default();
        let node = event["node_id"].as_str().unwrap_or_default();
        let ts = event["ts"].as_str().unwrap_or_default();
        if name == "StageStarted" && node == "c1" {
            start = Some(parse_ts(ts)?);
        }
        if name == "CheckpointCompleted" && node == last {
            end = Some(parse_ts(ts)?);
        }
    }
    match (start, end) {
        (Some(start), Some(end)) => Ok(end - start),
        _ => Err("W6 events lack the first or last stage".to_owned()),
    }
}

/// Seconds of the day of an RFC 3339 UTC timestamp `YYYY-MM-DDTHH:MM:SS.mmmZ` (the runs
/// measured do not cross midnight by more than a day; the day is added in).
fn parse_ts(ts: &str) -> Result<f64, String> {
    let bad = || format!("unexpected timestamp {ts:?}");
    let (date, time) = ts.split_once('T').ok_or_else(bad)?;
    let day: f64 = date
        .rsplit('-')
        .next()
        .ok_or_else(bad)?
        .parse()
        .map_err(|_| bad())?;
    let time = time.trim_end_matches('Z');
    let mut parts = time.split(':');
    let hours: f64 = parts.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
    let minutes: f64 = parts.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
    let seconds: f64 = parts.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
    Ok(day * 86_400.0 + hours * 3600.0 + minutes * 60.0 + seconds)
}

fn median(mut samples: Vec<f64>) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stage_span_runs_from_the_first_stage_to_the_last_checkpoint() {
        let events = format!(
            "{}\n{}\n{}\n",
            r#"{"id":1,"ts":"2026-11-26T10:00:00.100Z","event":"StageStarted","node_id":"c1"}"#,
            r#"{"id":2,"ts":"2026-11-26T10:00:01.000Z","event":"CheckpointCompleted","node_id":"c1"}"#,
            r#"{"id":3,"ts":"2026-11-26T10:00:02.600Z","event":"CheckpointCompleted","node_id":"c50"}"#,
        );
        let span = stage_span(&events).unwrap();
        assert!((span - 2.5).abs() < 1e-9, "{span}");
    }
}
