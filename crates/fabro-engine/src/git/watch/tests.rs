//! The watched stage commit against the full scan: two runs of one repository receive the
//! same randomized changes, one stages from its watch and one scans its whole worktree, and
//! every stage's tree must be identical. Also the fallback after a forced queue overflow.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::asset_capture::{AssetScanner, CaptureLimits};
use crate::git::test_repo::TestRepo;
use crate::git::{inspect, RepoState, RunGit, RunGitSettings};

const EXCLUDES: [&str; 2] = ["*.tmp", "/excluded/"];

fn repo_with_tree() -> Option<TestRepo> {
    let repo = TestRepo::empty_in_memory()?;
    repo.write(".gitignore", "*.log\nignored_dir/\n");
    repo.write("README.md", "hello\n");
    for dir in ["a", "a/b", "a/b/c", "d", "e/f"] {
        for file in ["one.txt", "two.txt"] {
            repo.write(&format!("{dir}/{file}"), &format!("{dir} {file}\n"));
        }
    }
    repo.write("a/.gitignore", "local.out\n");
    repo.write("tracked.log", "tracked although ignored\n");
    repo.git(&["add", "-A", "-f"]);
    repo.git(&["commit", "-q", "-m", "initial"]);
    Some(repo)
}

fn run(repo: &TestRepo, run_id: &str) -> RunGit {
    let RepoState::Clean { head_sha, .. } = inspect(&repo.path()).unwrap() else {
        panic!("test repository must be clean");
    };
    let settings = RunGitSettings {
        exclude_globs: EXCLUDES.iter().map(|glob| (*glob).to_owned()).collect(),
        ..RunGitSettings::default()
    };
    RunGit::create(
        &repo.path(),
        run_id,
        &head_sha,
        &repo.outside(&format!("{run_id}/worktree")),
        settings,
    )
    .unwrap()
    .volatile()
}

/// Every path below `root` (files, symlinks and directories), relative, sorted; `.git`
/// excluded.
fn listing(root: &Path) -> (Vec<String>, Vec<String>) {
    let mut files = Vec::new();
    let mut dirs = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(relative) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(root.join(&relative)) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().into_string().unwrap();
            if relative.as_os_str().is_empty() && name == ".git" {
                continue;
            }
            let path = relative.join(&name);
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                dirs.push(path.to_string_lossy().into_owned());
                pending.push(path);
            } else {
                files.push(path.to_string_lossy().into_owned());
            }
        }
    }
    files.sort();
    dirs.sort();
    (files, dirs)
}

/// One change, applied to both worktrees alike.
#[derive(Debug, Clone)]
enum Op {
    Write(String, String),
    Append(String, String),
    Remove(String),
    RemoveDir(String),
    Rename(String, String),
    Chmod(String, u32),
    Symlink(String, String),
    Mkdir(String),
    /// A child process writes the file after a short sleep; the stage waits for it.
    Child(String, String),
    /// The mtime changes, the content does not.
    Touch(String),
}

fn random_name(rng: &mut StdRng) -> String {
    const NAMES: [&str; 12] = [
        "x",
        "y",
        "z",
        "n1",
        "n2",
        "deep",
        "new",
        "one.txt",
        "q.log",
        "w.tmp",
        "local.out",
        "s",
    ];
    NAMES[rng.random_range(0..NAMES.len())].to_owned()
}

fn random_op(rng: &mut StdRng, root: &Path, stage: usize) -> Op {
    let (files, dirs) = listing(root);
    let pick = |rng: &mut StdRng, list: &[String]| -> Option<String> {
        (!list.is_empty()).then(|| list[rng.random_range(0..list.len())].clone())
    };
    let parent = |rng: &mut StdRng| -> String {
        const SPECIAL: [&str; 6] = [
            "ignored_dir",
            "excluded",
            "a/b/c",
            "cypress/videos",
            "node_modules/m",
            "e/playwright-report",
        ];
        if rng.random_range(0..6) == 0 {
            return SPECIAL[rng.random_range(0..SPECIAL.len())].to_owned();
        }
        pick(rng, &dirs).unwrap_or_default()
    };
    let new_path = |rng: &mut StdRng| -> String {
        let mut path = parent(rng);
        // Nested new directories.
        for _ in 0..rng.random_range(0..3) {
            if !path.is_empty() {
                path.push('/');
            }
            path.push_str(&format!("d{}", rng.random_range(0..4)));
        }
        if !path.is_empty() {
            path.push('/');
        }
        path.push_str(&random_name(rng));
        path
    };
    let content = format!("stage {stage} {}\n", rng.random_range(0..1000));
    match rng.random_range(0..14) {
        0 | 1 => Op::Write(new_path(rng), content),
        2 | 3 => match pick(rng, &files) {
            Some(file) => Op::Append(file, content),
            None => Op::Write(new_path(rng), content),
        },
        4 => pick(rng, &files).map_or(Op::Mkdir(new_path(rng)), Op::Remove),
        5 => pick(rng, &dirs).map_or(Op::Mkdir(new_path(rng)), Op::RemoveDir),
        6 => match pick(rng, &files) {
            Some(file) => Op::Rename(file, new_path(rng)),
            None => Op::Mkdir(new_path(rng)),
        },
        7 => match pick(rng, &dirs) {
            Some(dir) => Op::Rename(dir, new_path(rng)),
            None => Op::Mkdir(new_path(rng)),
        },
        8 => match pick(rng, &files) {
            Some(file) => Op::Chmod(file, if rng.random_bool(0.5) { 0o755 } else { 0o644 }),
            None => Op::Mkdir(new_path(rng)),
        },
        9 => {
            let target = pick(rng, &files).unwrap_or_else(|| "missing".to_owned());
            let link = match pick(rng, &files) {
                // A file turns into a symlink.
                Some(file) if rng.random_bool(0.3) => file,
                _ => new_path(rng),
            };
            Op::Symlink(link, target)
        }
        10 => match pick(rng, &files) {
            // A file turns into a directory.
            Some(file) if rng.random_bool(0.5) => Op::Mkdir(file),
            _ => Op::Mkdir(new_path(rng)),
        },
        11 => Op::Child(new_path(rng), content),
        12 => match pick(rng, &files) {
            Some(file) => Op::Touch(file),
            None => Op::Mkdir(new_path(rng)),
        },
        _ => match rng.random_range(0..3) {
            // The ignore rules change.
            0 => Op::Append("a/.gitignore".to_owned(), "!keep.log\n".to_owned()),
            1 => Op::Write("a/.gitignore".to_owned(), "local.out\n".to_owned()),
            _ => Op::Write("a/keep.log".to_owned(), content),
        },
    }
}

fn clear(path: &Path) {
    match std::fs::symlink_metadata(path) {
        Ok(metadata) if metadata.is_dir() => std::fs::remove_dir_all(path).unwrap(),
        Ok(_) => std::fs::remove_file(path).unwrap(),
        Err(_) => {}
    }
}

fn make_parent(path: &Path) {
    let parent = path.parent().unwrap();
    if std::fs::symlink_metadata(parent).is_ok_and(|metadata| !metadata.is_dir()) {
        clear(parent);
    }
    // A file on the way is replaced by a directory.
    let mut ancestor = parent.to_path_buf();
    let mut blockers = Vec::new();
    while ancestor.parent().is_some() {
        if std::fs::symlink_metadata(&ancestor).is_ok_and(|metadata| !metadata.is_dir()) {
            blockers.push(ancestor.clone());
        }
        ancestor = ancestor.parent().unwrap().to_path_buf();
    }
    for blocker in blockers {
        clear(&blocker);
    }
    fs_err::create_dir_all(parent).unwrap();
}

fn apply(root: &Path, op: &Op) {
    let at = |relative: &str| root.join(relative);
    match op {
        Op::Write(path, content) => {
            let path = at(path);
            make_parent(&path);
            if std::fs::symlink_metadata(&path).is_ok_and(|metadata| !metadata.is_file()) {
                clear(&path);
            }
            fs_err::write(path, content).unwrap();
        }
        Op::Append(path, content) => {
            use std::io::Write;
            let path = at(path);
            make_parent(&path);
            if std::fs::symlink_metadata(&path).is_ok_and(|metadata| !metadata.is_file()) {
                clear(&path);
            }
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .unwrap();
            file.write_all(content.as_bytes()).unwrap();
        }
        Op::Remove(path) | Op::RemoveDir(path) => clear(&at(path)),
        Op::Rename(from, to) => {
            let (from, to) = (at(from), at(to));
            if to.starts_with(&from) || !from.exists() && std::fs::symlink_metadata(&from).is_err()
            {
                return;
            }
            make_parent(&to);
            if std::fs::symlink_metadata(&from).is_err() {
                return;
            }
            clear(&to);
            std::fs::rename(from, to).unwrap();
        }
        Op::Chmod(path, mode) => {
            let path = at(path);
            if std::fs::symlink_metadata(&path).is_ok_and(|metadata| metadata.is_file()) {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(*mode)).unwrap();
            }
        }
        Op::Symlink(link, target) => {
            let link = at(link);
            make_parent(&link);
            clear(&link);
            std::os::unix::fs::symlink(target, link).unwrap();
        }
        Op::Mkdir(path) => {
            let path = at(path);
            make_parent(&path);
            if std::fs::symlink_metadata(&path).is_ok_and(|metadata| !metadata.is_dir()) {
                clear(&path);
            }
            fs_err::create_dir_all(&path).unwrap();
            fs_err::write(path.join("inner.txt"), "inner\n").unwrap();
        }
        Op::Child(path, content) => {
            let path = at(path);
            make_parent(&path);
            if std::fs::symlink_metadata(&path).is_ok_and(|metadata| !metadata.is_file()) {
                clear(&path);
            }
            let status = Command::new("sh")
                .arg("-c")
                .arg("sleep 0.01; printf '%s' \"$1\" > \"$2\"")
                .arg("sh")
                .arg(content)
                .arg(&path)
                .status()
                .unwrap();
            assert!(status.success());
        }
        Op::Touch(path) => {
            let path = at(path);
            if std::fs::symlink_metadata(&path).is_ok_and(|metadata| metadata.is_file()) {
                let file = std::fs::File::options().write(true).open(path).unwrap();
                file.set_modified(std::time::SystemTime::now()).unwrap();
            }
        }
    }
}

fn tree_of(repo: &git2::Repository, sha: &str) -> git2::Oid {
    repo.find_commit(git2::Oid::from_str(sha).unwrap())
        .unwrap()
        .tree_id()
}

#[test]
fn watched_stages_commit_exactly_what_a_full_scan_commits() {
    let Some(repo) = repo_with_tree() else {
        return;
    };
    let git = git2::Repository::open(repo.path()).unwrap();
    let mut stages = 0;
    let mut captured = 0;
    let mut files_touched = 0;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut env = fabro_agent::ProcessEnv::inherit();
    for (name, value) in [
        ("GIT_CONFIG_NOSYSTEM", "1"),
        ("GIT_CONFIG_GLOBAL", "/dev/null"),
    ] {
        env.set(name, value);
    }
    for seed in 0..6u64 {
        let mut watched = run(&repo, &format!("W{seed}")).split_index_from(1);
        let mut scanned = run(&repo, &format!("F{seed}")).without_watch();
        assert!(watched.watch().is_some(), "the watch must start");
        // The agents' files_touched and write-scope snapshots (SPEC 7.6, 13.4).
        let tracking = fabro_agent::FileTracking::with_tracker(watched.change_tracker().unwrap());
        let snapshots = |watched: &Path, scanned: &Path| {
            runtime.block_on(async {
                (
                    tracking.snapshot(watched, &env).await.unwrap(),
                    fabro_agent::GitSnapshot::take(scanned, &env).await.unwrap(),
                )
            })
        };
        let scanner =
            || AssetScanner::new(&["*.png".to_owned()], CaptureLimits::default()).unwrap();
        let (followed, walked) = (scanner(), scanner());
        let (feed, prefix) = watched.change_feed().unwrap();
        followed.follow(feed, watched.worktree_path(), &prefix);
        // Written after the follow's walk, before the first baseline: the feed has it.
        let between = Op::Write("between.png".to_owned(), format!("seed {seed}\n"));
        apply(watched.worktree_path(), &between);
        apply(scanned.worktree_path(), &between);
        let assets = repo.outside(&format!("assets{seed}"));
        let mut rng = StdRng::seed_from_u64(seed);
        let mut history = Vec::new();
        for stage in 1..=85 {
            let followed_baseline = followed.baseline(watched.worktree_path());
            let walked_baseline = walked.baseline(scanned.worktree_path());
            let (tracked_before, full_before) =
                snapshots(watched.worktree_path(), scanned.worktree_path());
            for _ in 0..rng.random_range(1..5) {
                let op = random_op(&mut rng, watched.worktree_path(), stage);
                apply(watched.worktree_path(), &op);
                apply(scanned.worktree_path(), &op);
                history.push(op);
            }
            let paths = |report: crate::asset_capture::CaptureReport| -> Vec<String> {
                report
                    .captured
                    .into_iter()
                    .map(|asset| asset.path)
                    .collect()
            };
            let from_feed = paths(
                followed.capture(&followed_baseline, &assets.join(format!("followed{stage}"))),
            );
            let from_walk =
                paths(walked.capture(&walked_baseline, &assets.join(format!("walked{stage}"))));
            assert_eq!(
                from_feed,
                from_walk,
                "seed {seed} stage {stage}: asset captures differ; last changes: {:?}",
                &history[history.len().saturating_sub(4)..]
            );
            captured += from_walk.len();
            let (tracked_after, full_after) =
                snapshots(watched.worktree_path(), scanned.worktree_path());
            let touched = full_after.touched_since(&full_before);
            assert_eq!(
                tracked_after.touched_since(&tracked_before),
                touched,
                "seed {seed} stage {stage}: files_touched differ; last changes: {:?}",
                &history[history.len().saturating_sub(4)..]
            );
            assert!(
                tracked_after.paths().eq(full_after.paths()),
                "seed {seed} stage {stage}: the snapshots differ"
            );
            files_touched += touched.len();
            let node = format!("n{stage}");
            let watched_sha = watched.commit_stage(&node, "success", stage, "m").unwrap();
            let scanned_sha = scanned.commit_stage(&node, "success", stage, "m").unwrap();
            assert_eq!(
                tree_of(&git, &watched_sha),
                tree_of(&git, &scanned_sha),
                "seed {seed} stage {stage}: the watched commit differs from the full scan; last changes: {:?}",
                &history[history.len().saturating_sub(4)..]
            );
            assert_eq!(
                watched.take_full_scan_warning(),
                None,
                "seed {seed} stage {stage}"
            );
            stages += 1;
        }
        // The worktree index on disk matches the commit, as after a full scan.
        let status = crate::git::test_repo::git_in(
            watched.worktree_path(),
            &["status", "--porcelain", "--untracked-files=no"],
        );
        let expected = crate::git::test_repo::git_in(
            scanned.worktree_path(),
            &["status", "--porcelain", "--untracked-files=no"],
        );
        assert_eq!(status, expected, "seed {seed}");
    }
    assert!(stages >= 500);
    assert!(captured >= 50, "only {captured} assets were captured");
    assert!(
        files_touched >= 500,
        "only {files_touched} files were touched"
    );
}

#[test]
fn an_overflowed_watch_falls_back_to_one_full_scan_with_a_warning() {
    let Some(repo) = repo_with_tree() else {
        return;
    };
    let git = git2::Repository::open(repo.path()).unwrap();
    let mut watched = run(&repo, "WATCHED");
    let mut scanned = run(&repo, "SCANNED").without_watch();
    let limit: usize = fs_err::read_to_string("/proc/sys/fs/inotify/max_queued_events")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(16_384);
    let watch = watched.watch().unwrap();
    // The watch thread blocks in its handler, so the kernel queue overflows.
    watch.stall(true);
    // One modification event per write; alternating files, so none merges with the last.
    let noise: Vec<std::fs::File> = ["noise1.log", "noise2.log"]
        .iter()
        .map(|name| {
            fs_err::File::create(watched.worktree_path().join(name))
                .unwrap()
                .into_parts()
                .0
        })
        .collect();
    for index in 0..limit + 100 {
        use std::os::unix::fs::FileExt;
        noise[index % 2].write_all_at(b"x", 0).unwrap();
    }
    for root in [watched.worktree_path(), scanned.worktree_path()] {
        apply(root, &Op::Mkdir("lost/while/overflowing".to_owned()));
        apply(
            root,
            &Op::Append("a/one.txt".to_owned(), "more\n".to_owned()),
        );
    }
    watched.watch().unwrap().stall(false);
    let watched_sha = watched.commit_stage("n1", "success", 1, "m").unwrap();
    let scanned_sha = scanned.commit_stage("n1", "success", 1, "m").unwrap();
    assert_eq!(tree_of(&git, &watched_sha), tree_of(&git, &scanned_sha));
    let warning = watched.take_full_scan_warning();
    assert_eq!(
        warning.as_deref(),
        Some("the file-system watch's event queue overflowed")
    );
    // The watch covers the directories made while events were lost, and warns once.
    for stage in 2..=4 {
        for root in [watched.worktree_path(), scanned.worktree_path()] {
            apply(
                root,
                &Op::Write(
                    format!("lost/while/overflowing/file{stage}.txt"),
                    "x\n".to_owned(),
                ),
            );
        }
        let node = format!("n{stage}");
        let watched_sha = watched.commit_stage(&node, "success", stage, "m").unwrap();
        let scanned_sha = scanned.commit_stage(&node, "success", stage, "m").unwrap();
        assert_eq!(tree_of(&git, &watched_sha), tree_of(&git, &scanned_sha));
        assert_eq!(watched.take_full_scan_warning(), None);
    }
}

#[test]
fn without_a_watch_the_first_full_scan_is_reported_once() {
    let Some(repo) = repo_with_tree() else {
        return;
    };
    let mut scanned = run(&repo, "NOWATCH").without_watch();
    apply(
        scanned.worktree_path(),
        &Op::Write("new.txt".to_owned(), "x\n".to_owned()),
    );
    scanned.commit_stage("n1", "success", 1, "m").unwrap();
    assert_eq!(
        scanned.take_full_scan_warning().as_deref(),
        Some("no file-system watch: disabled by a test")
    );
    scanned.commit_stage("n2", "success", 2, "m").unwrap();
    assert_eq!(scanned.take_full_scan_warning(), None);
}
