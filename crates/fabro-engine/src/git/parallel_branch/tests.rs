//! Tests of parallel branch worktrees and the fan-in move against temporary repositories,
//! checked with the `git` command.

use crate::git::test_repo::{git_in, TestRepo};
use crate::git::{inspect, ParallelSite, RepoState, RunGit, RunGitSettings};

const RUN: &str = "01JPARTEST";

fn create(repo: &TestRepo) -> RunGit {
    let RepoState::Clean { head_sha, .. } = inspect(&repo.path()).unwrap() else {
        panic!("test repository must be clean");
    };
    RunGit::create(
        &repo.path(),
        RUN,
        &head_sha,
        &repo.outside("run/worktree"),
        RunGitSettings {
            exclude_globs: vec!["*.tmp".to_owned()],
            ..RunGitSettings::default()
        },
    )
    .unwrap()
}

#[test]
fn branches_are_isolated_committed_and_removed_keeping_their_refs() {
    let Some(repo) = TestRepo::new() else {
        return;
    };
    let before = repo.snapshot();
    let mut git = create(&repo);
    let run_dir = repo.outside("run");
    let site = ParallelSite {
        run_dir: &run_dir,
        node_id: "fan",
        visit: 1,
    };
    let mut line = git.checked_out();
    let base = line.commit_base("fan").unwrap();
    assert_eq!(
        base,
        line.head_sha(),
        "a clean worktree needs no base commit"
    );
    let mut a = line.create_branch(&site, "a", &base).unwrap();
    let mut b = line.create_branch(&site, "b", &base).unwrap();
    assert_eq!(a.work_dir(), run_dir.join("branches/fan@1/a"));
    fs_err::write(a.work_dir().join("a.txt"), "A\n").unwrap();
    fs_err::write(a.work_dir().join("scratch.tmp"), "excluded\n").unwrap();
    fs_err::write(b.work_dir().join("b.txt"), "B\n").unwrap();
    assert!(!b.work_dir().join("a.txt").exists());
    let a_head = a.commit_stage("a", "success").unwrap();
    let b_head = b.commit_stage("b", "success").unwrap();
    let b_second = b.commit_stage("b2", "fail").unwrap();
    assert_ne!(
        b_head, b_second,
        "every stage gets a commit, even an empty one"
    );

    let refs = repo.git(&[
        "for-each-ref",
        "--format=%(refname) %(objectname)",
        "refs/heads/fabro/parallel",
    ]);
    assert_eq!(
        refs,
        format!(
            "refs/heads/fabro/parallel/{RUN}/fan/1/a {a_head}\nrefs/heads/fabro/parallel/{RUN}/fan/1/b {b_second}"
        )
    );
    let message = repo.git(&["log", "-1", "--format=%B", &a_head]);
    assert_eq!(
        message,
        format!("fabro({RUN}): a (success)\n\nFabro-Run: {RUN}\nFabro-Parallel: fan@1/a")
    );
    let files = repo.git(&["ls-tree", "--name-only", &a_head]);
    assert!(
        files.contains("a.txt") && !files.contains("scratch.tmp"),
        "{files}"
    );

    let cleanups = [a.cleanup(), b.cleanup()];
    drop((a, b));
    for cleanup in &cleanups {
        cleanup.remove().unwrap();
    }
    assert!(!run_dir.join("branches/fan@1").exists());
    assert_eq!(repo.git(&["worktree", "list"]).lines().count(), 2);
    assert_eq!(
        repo.git(&["rev-parse", &format!("fabro/parallel/{RUN}/fan/1/a")]),
        a_head
    );
    repo.git(&["fsck", "--strict"]);
    assert_eq!(repo.snapshot(), before);
}

#[test]
fn advance_fast_forwards_and_replays_commits_made_since_the_base() {
    let Some(repo) = TestRepo::new() else {
        return;
    };
    let mut git = create(&repo);
    let run_dir = repo.outside("run");
    let site = ParallelSite {
        run_dir: &run_dir,
        node_id: "fan",
        visit: 2,
    };
    // A dirty run worktree is committed as the parallel base.
    fs_err::write(git.work_dir().join("base.txt"), "base\n").unwrap();
    let mut line = git.checked_out();
    let original = line.head_sha();
    let base = line.commit_base("fan").unwrap();
    assert_ne!(base, original);
    assert_eq!(
        repo.git(&["log", "-1", "--format=%s", &base]),
        format!("fabro({RUN}): fan (parallel base)")
    );
    let mut a = line.create_branch(&site, "a", &base).unwrap();
    assert!(a.work_dir().join("base.txt").exists());
    fs_err::write(a.work_dir().join("README.md"), "changed by a\n").unwrap();
    let a_head = a.commit_stage("a", "success").unwrap();
    drop(line);

    // The parallel stage's own (empty) run-branch commit, made before the fan-in.
    let parallel_commit = git.commit_stage("fan", "success", 3, "0123").unwrap();
    let tip = git.checked_out().advance(&a_head).unwrap();
    assert_eq!(git.head_sha(), tip);
    assert_eq!(repo.git(&["rev-parse", &format!("{tip}^")]), a_head);
    assert_eq!(
        repo.git(&["log", "-1", "--format=%B", &tip]),
        repo.git(&["log", "-1", "--format=%B", &parallel_commit])
    );
    let worktree = git.worktree_path().to_path_buf();
    assert_eq!(
        fs_err::read_to_string(worktree.join("README.md")).unwrap(),
        "changed by a\n"
    );
    assert_eq!(git_in(&worktree, &["status", "--porcelain"]), "");
    // The next stage commits on top of the moved branch.
    let next = git.commit_stage("merge", "success", 4, "4567").unwrap();
    assert_eq!(repo.git(&["rev-parse", &format!("{next}^")]), tip);

    // Moving to a head the branch already contains is a no-op fast-forward.
    let same = git.checked_out().advance(&a_head).unwrap();
    assert_eq!(same, next);
    repo.git(&["fsck", "--strict"]);
}

#[test]
fn a_stale_branch_and_worktree_of_an_interrupted_attempt_are_replaced() {
    let Some(repo) = TestRepo::new() else {
        return;
    };
    let mut git = create(&repo);
    let run_dir = repo.outside("run");
    let site = ParallelSite {
        run_dir: &run_dir,
        node_id: "fan",
        visit: 1,
    };
    let mut line = git.checked_out();
    let base = line.commit_base("fan").unwrap();
    let mut first = line.create_branch(&site, "a", &base).unwrap();
    fs_err::write(first.work_dir().join("half.txt"), "x\n").unwrap();
    first.commit_stage("a", "success").unwrap();
    drop(first);
    let again = line.create_branch(&site, "a", &base).unwrap();
    assert_eq!(again.head_sha(), base);
    assert!(!again.work_dir().join("half.txt").exists());
}

/// Issue 20: branch worktrees are watched; a branch without a watch scans its worktree and
/// gives the run's `full_scan` warning, once per run; the parallel base commit and the
/// fan-in keep the run worktree's index current for `git`.
#[test]
fn branch_worktrees_are_watched_and_one_without_a_watch_warns_once_per_run() {
    let Some(repo) = TestRepo::new() else {
        return;
    };
    let mut git = create(&repo);
    let worktree = repo.outside("run/worktree");
    let run_dir = repo.outside("run");
    let site = ParallelSite {
        run_dir: &run_dir,
        node_id: "fan",
        visit: 1,
    };
    fs_err::write(worktree.join("before.txt"), "left by the previous stage\n").unwrap();
    let mut line = git.checked_out();
    let base = line.commit_base("fan").unwrap();
    let files = repo.git(&["ls-tree", "--name-only", &base]);
    assert!(files.contains("before.txt"), "{files}");
    let mut a = line.create_branch(&site, "a", &base).unwrap();
    let mut b = line
        .create_branch(&site, "b", &base)
        .unwrap()
        .without_watch();
    let mut c = line
        .create_branch(&site, "c", &base)
        .unwrap()
        .without_watch();
    drop(line);
    assert!(a.is_watched());
    assert_eq!(git.full_scans().fallbacks(), 0);
    fs_err::write(a.work_dir().join("a.txt"), "A\n").unwrap();
    fs_err::write(b.work_dir().join("b.txt"), "B\n").unwrap();
    fs_err::write(c.work_dir().join("c.txt"), "C\n").unwrap();
    let a_head = a.commit_stage("a", "success").unwrap();
    assert_eq!(git.full_scans().fallbacks(), 0, "branch a is watched");
    assert_eq!(git.take_full_scan_warning(), None);
    let b_head = b.commit_stage("b", "success").unwrap();
    c.commit_stage("c", "success").unwrap();
    assert_eq!(git.full_scans().fallbacks(), 2);
    assert_eq!(
        git.take_full_scan_warning().as_deref(),
        Some("no file-system watch: disabled by a test")
    );
    assert_eq!(git.take_full_scan_warning(), None, "once per run");
    for (head, file) in [(&a_head, "a.txt"), (&b_head, "b.txt")] {
        let files = repo.git(&["ls-tree", "--name-only", head]);
        assert!(files.contains(file), "{files}");
        assert_eq!(
            git_in(
                &run_dir.join(format!("branches/fan@1/{}", &file[..1])),
                &["status", "--porcelain"]
            ),
            ""
        );
    }
    git.checked_out().advance(&b_head).unwrap();
    assert_eq!(git_in(&worktree, &["status", "--porcelain"]), "");
    assert!(worktree.join("b.txt").exists());
}
