//! `fabro gc [--older-than D] [--dry-run]` (SPEC 17.4): old finished runs go with their
//! branches, refs, worktree registrations and unreferenced blobs; cancelled and recent
//! runs stay whole.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use fabro_test_support::TestEnv;
use serde_json::Value;

use crate::git::{git, git_available};
use crate::{code, fabro, stderr, stdout};

/// `$TAG` makes each run's output (and so its blobs) unique, except stage `a`'s, which
/// all runs share. `b` fails for TAG=failing, and the run then fails (its only edge is
/// conditional) and keeps its worktree. The parallel stage makes parallel branches.
const WORKFLOW: &str = r#"digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  a [shape=parallelogram, script="echo shared output"]
  fan [shape=component]
  p1 [shape=parallelogram, script="echo p1-$TAG > p1.txt"]
  p2 [shape=parallelogram, script="echo p2-$TAG > p2.txt"]
  merge [shape=tripleoctagon]
  b [shape=parallelogram, script="echo only-$TAG > out.txt; echo only-$TAG; test $TAG != failing"]
  start -> a -> fan
  fan -> p1 -> merge
  fan -> p2 -> merge
  merge -> b
  b -> exit [condition="outcome=success"]
}
"#;

const SLOW: &str = r#"digraph slow {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  a [shape=parallelogram, script="echo shared output"]
  slow [shape=parallelogram, script="echo canceled-only; touch $MARKER; sleep 30"]
  start -> a -> slow -> exit
}
"#;

fn run(env: &TestEnv, run_id: &str, tag: &str) -> i32 {
    let output = fabro(
        env,
        &[
            "run",
            "w.fabro",
            "--run-id",
            run_id,
            "--var",
            &format!("TAG={tag}"),
        ],
    );
    code(&output)
}

/// Starts the slow workflow and interrupts it with SIGINT in its `slow` stage.
fn canceled_run(env: &TestEnv, run_id: &str) {
    let marker = env.fabro_home().join("slow-started");
    let child = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args([
            "run",
            "slow.fabro",
            "--run-id",
            run_id,
            "--var",
            &format!("MARKER={}", marker.display()),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("fabro starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !marker.exists() {
        assert!(Instant::now() < deadline, "the slow stage never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid fits"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("signal sent");
    let output = child.wait_with_output().expect("exits");
    assert_eq!(code(&output), 130);
}

/// Moves a run into 2020: its start in the manifest, its end in the checkpoint. The index
/// is deleted afterwards, so that the next read rebuilds it from these files.
fn make_old(run_dir: &Path) {
    for (file, key) in [
        ("manifest.json", "started_at"),
        ("checkpoint.json", "timestamp"),
    ] {
        let path = run_dir.join(file);
        let mut value: Value =
            serde_json::from_str(&fs_err::read_to_string(&path).expect("read")).expect("JSON");
        value[key] = Value::from("2020-01-02T03:04:05.678Z");
        fs_err::write(&path, serde_json::to_string_pretty(&value).expect("JSON")).expect("write");
    }
}

/// Every blob ref mentioned in the JSON records of a run directory.
fn blob_refs(run_dir: &Path) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    let mut pending = vec![run_dir.to_path_buf()];
    while let Some(directory) = pending.pop() {
        for entry in fs_err::read_dir(&directory).expect("list") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                if !path.ends_with("worktree") && !path.ends_with("branches") {
                    pending.push(path);
                }
                continue;
            }
            let is_record = path
                .extension()
                .is_some_and(|extension| extension == "json" || extension == "jsonl");
            if !is_record {
                continue;
            }
            let text = fs_err::read_to_string(&path).expect("read");
            let mut rest = text.as_str();
            while let Some(position) = rest.find("blob://sha256/") {
                let hex: String = rest[position + 14..].chars().take(64).collect();
                refs.insert(hex);
                rest = &rest[position + 14..];
            }
        }
    }
    refs
}

fn blob_path(env: &TestEnv, hex: &str) -> PathBuf {
    env.fabro_home()
        .join("blobs/sha256")
        .join(&hex[..2])
        .join(hex)
}

fn refs(env: &TestEnv) -> Vec<String> {
    git(env, &["for-each-ref", "--format=%(refname)"])
        .lines()
        .map(str::to_owned)
        .collect()
}

fn worktrees(env: &TestEnv) -> String {
    git(env, &["worktree", "list", "--porcelain"])
}

/// Sets the modification time of `path` (a directory) to 2020.
fn age(path: &Path) {
    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_578_000_000);
    fs_err::File::open(path)
        .expect("open")
        .file()
        .set_times(
            std::fs::FileTimes::new()
                .set_modified(old)
                .set_accessed(old),
        )
        .expect("set times");
}

#[test]
fn gc_removes_exactly_the_old_finished_runs_and_what_only_they_use() {
    if !git_available("gc_removes_exactly_the_old_finished_runs_and_what_only_they_use") {
        return;
    }
    let env = TestEnv::new("gc");
    git(&env, &["init", "-q", "-b", "main"]);
    env.write("w.fabro", WORKFLOW);
    env.write("slow.fabro", SLOW);
    env.write("README.md", "user file\n");
    git(&env, &["add", "w.fabro", "slow.fabro", "README.md"]);
    git(&env, &["commit", "-q", "-m", "init"]);
    let scratch = env.fabro_home().join("scratch");

    assert_eq!(run(&env, "old-ok", "old-ok"), 0);
    assert_eq!(run(&env, "old-failed", "failing"), 1);
    canceled_run(&env, "old-canceled");
    for run_id in ["old-ok", "old-failed", "old-canceled"] {
        make_old(&scratch.join(run_id));
    }
    fs_err::remove_file(env.fabro_home().join("runs.db")).expect("index removed");
    assert_eq!(run(&env, "recent", "recent"), 0);
    // Set-up leftovers: directories without a manifest, one old and one new.
    fs_err::create_dir_all(scratch.join("leftover-old/cache")).expect("mkdir");
    fs_err::write(scratch.join("leftover-old/cache/x"), "x").expect("write");
    age(&scratch.join("leftover-old"));
    fs_err::create_dir_all(scratch.join("leftover-new")).expect("mkdir");

    let old_refs: BTreeSet<String> = ["old-ok", "old-failed"]
        .iter()
        .flat_map(|run_id| blob_refs(&scratch.join(run_id)))
        .collect();
    let kept_refs: BTreeSet<String> = ["old-canceled", "recent"]
        .iter()
        .flat_map(|run_id| blob_refs(&scratch.join(run_id)))
        .collect();
    let only_old: Vec<&String> = old_refs.difference(&kept_refs).collect();
    let shared: Vec<&String> = old_refs.intersection(&kept_refs).collect();
    assert!(!only_old.is_empty() && !shared.is_empty());
    for hex in old_refs.iter().chain(&kept_refs) {
        assert!(blob_path(&env, hex).is_file(), "blob {hex} stored");
    }
    let refs_before = refs(&env);
    for run_id in ["old-ok", "old-failed", "old-canceled", "recent"] {
        assert!(refs_before.contains(&format!("refs/heads/fabro/run/{run_id}")));
        assert!(refs_before.contains(&format!("refs/fabro/{run_id}")));
    }
    assert!(refs_before
        .iter()
        .any(|name| name.starts_with("refs/heads/fabro/parallel/old-ok/")));
    assert!(
        worktrees(&env).contains("old-failed"),
        "{}",
        worktrees(&env)
    );
    let index_before = stdout(&fabro(&env, &["runs", "--json"]));

    // Dry run: lists, removes nothing.
    let dry = fabro(&env, &["gc", "--dry-run"]);
    assert_eq!(code(&dry), 0, "{}", stderr(&dry));
    let listed = stdout(&dry);
    for name in ["old-ok", "old-failed", "leftover-old"] {
        assert!(listed.contains(name), "{listed}");
    }
    for name in ["old-canceled", "recent", "leftover-new"] {
        assert!(!listed.contains(name), "{listed}");
    }
    assert!(listed.contains("would free"), "{listed}");
    assert_eq!(refs(&env), refs_before);
    assert!(scratch.join("old-ok").is_dir() && scratch.join("leftover-old").is_dir());
    for hex in &old_refs {
        assert!(blob_path(&env, hex).is_file());
    }
    assert_eq!(stdout(&fabro(&env, &["runs", "--json"])), index_before);
    // Recent runs are not old enough for the default of 30 days either way.
    let recent_only = fabro(&env, &["gc", "--dry-run", "--older-than", "3650d"]);
    assert_eq!(code(&recent_only), 0, "{}", stderr(&recent_only));
    assert!(!stdout(&recent_only).contains("old-ok"));

    let gc = fabro(&env, &["gc"]);
    assert_eq!(code(&gc), 0, "{}", stderr(&gc));
    let printed = stdout(&gc);
    assert!(
        printed.contains("removed") && printed.contains("freed"),
        "{printed}"
    );
    assert_eq!(
        printed.lines().filter(|line| line.contains("old-")).count(),
        2
    );

    let mut remaining: Vec<String> = fs_err::read_dir(&scratch)
        .expect("scratch")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    remaining.sort();
    assert_eq!(remaining, ["leftover-new", "old-canceled", "recent"]);
    let listed: Value =
        serde_json::from_str(&stdout(&fabro(&env, &["runs", "--json"]))).expect("runs JSON");
    let ids: BTreeSet<&str> = listed
        .as_array()
        .expect("array")
        .iter()
        .map(|run| run["run_id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, BTreeSet::from(["old-canceled", "recent"]));

    let refs_after = refs(&env);
    let expected: Vec<String> = refs_before
        .iter()
        .filter(|name| !name.contains("/old-ok") && !name.contains("/old-failed"))
        .cloned()
        .collect();
    assert_eq!(refs_after, expected);
    assert!(refs_after.contains(&"refs/heads/main".to_owned()));
    assert!(refs_after
        .iter()
        .any(|name| name.starts_with("refs/heads/fabro/parallel/recent/")));
    let worktrees = worktrees(&env);
    assert!(!worktrees.contains("old-failed"), "{worktrees}");
    assert!(worktrees.contains("old-canceled"), "{worktrees}");

    for hex in &only_old {
        assert!(!blob_path(&env, hex).exists(), "blob {hex} removed");
    }
    for hex in &kept_refs {
        assert!(blob_path(&env, hex).is_file(), "blob {hex} kept");
    }

    let fsck = env
        .command("git")
        .args(["fsck", "--strict", "--no-dangling"])
        .output()
        .expect("git fsck");
    assert!(
        fsck.status.success() && fsck.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&fsck.stderr)
    );
    // The kept runs' records are whole.
    for run_id in ["old-canceled", "recent"] {
        let inspect = fabro(&env, &["inspect", run_id]);
        assert_eq!(code(&inspect), 0, "{}", stderr(&inspect));
    }
    // Nothing left to collect.
    let again = fabro(&env, &["gc"]);
    assert_eq!(code(&again), 0, "{}", stderr(&again));
    assert!(!stdout(&again).contains("removed "), "{}", stdout(&again));
}

#[test]
fn gc_rejects_bad_durations() {
    let env = TestEnv::new("gc_usage");
    let output = fabro(&env, &["gc", "--older-than", "soon"]);
    assert_eq!(code(&output), 2);
    let output = fabro(&env, &["gc", "--dry-run"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
}
