//! Tests of [`RunGit`] and [`RunHistory`] against temporary repositories, checked with the
//! `git` command.

use std::time::{Duration, Instant};

use crate::git::test_repo::{git_in, TestRepo};
use crate::git::{
    inspect, MetadataFile, MetadataMessage, RepoState, RunGit, RunGitSettings, RunHistory,
};

const RUN: &str = "01JRUNTEST";

fn settings(globs: &[&str]) -> RunGitSettings {
    RunGitSettings {
        exclude_globs: globs.iter().map(|glob| (*glob).to_owned()).collect(),
        ..RunGitSettings::default()
    }
}

fn create(repo: &TestRepo, globs: &[&str]) -> RunGit {
    let RepoState::Clean { head_sha, .. } = inspect(&repo.path()).unwrap() else {
        panic!("test repository must be clean");
    };
    RunGit::create(
        &repo.path(),
        RUN,
        &head_sha,
        &repo.outside("run/worktree"),
        settings(globs),
    )
    .unwrap()
}

fn checkpoint(node: &str, completed: usize) -> String {
    format!("{{\"current_node\":\"{node}\",\"completed\":{completed}}}")
}

/// Steps 2 and 3 of the checkpoint cycle for one stage; returns (metadata sha, run sha).
fn cycle(git: &mut RunGit, node: &str, completed: usize) -> (String, String) {
    let staged = git.stage().unwrap();
    let patch = git.diff_patch(&staged, 512 * 1024).unwrap().unwrap();
    let checkpoint = checkpoint(node, completed);
    let status_path = format!("nodes/{node}/status.json");
    let stage_path = format!("stages/{completed:03}-{node}@1/diff.patch");
    let metadata = git
        .write_metadata(
            MetadataMessage::Checkpoint { node_id: node },
            &[
                MetadataFile {
                    path: "checkpoint.json",
                    contents: checkpoint.as_bytes(),
                },
                MetadataFile {
                    path: &status_path,
                    contents: b"{\"status\":\"success\"}",
                },
                MetadataFile {
                    path: &stage_path,
                    contents: &patch,
                },
            ],
        )
        .unwrap();
    let sha = git
        .commit(staged, node, "success", completed, &metadata.sha)
        .unwrap();
    (metadata.sha, sha)
}

fn initialize(git: &mut RunGit) -> String {
    git.write_metadata(
        MetadataMessage::Initialize,
        &[
            MetadataFile {
                path: "manifest.json",
                contents: b"{\"run_id\":\"01JRUNTEST\"}",
            },
            MetadataFile {
                path: "graph.fabro",
                contents: b"digraph g { start -> exit }",
            },
            MetadataFile {
                path: "config.json",
                contents: b"{}",
            },
            MetadataFile {
                path: "children/review.fabro",
                contents: b"digraph c {}",
            },
            MetadataFile {
                path: "checkpoint.json",
                contents: b"{\"current_node\":null}",
            },
        ],
    )
    .unwrap()
    .sha
}

fn lines(text: &str) -> Vec<&str> {
    text.lines().filter(|line| !line.is_empty()).collect()
}

#[test]
fn create_makes_branch_and_worktree_without_touching_the_user_checkout() {
    let Some(repo) = TestRepo::new() else { return };
    repo.write("untracked.txt", "mine");
    let before = repo.snapshot();
    let git = create(&repo, &[]);
    let base = repo.git(&["rev-parse", "HEAD"]);
    assert_eq!(repo.git(&["rev-parse", &format!("fabro/run/{RUN}")]), base);
    assert_eq!(git.head_sha(), base);
    let worktree = repo.outside("run/worktree");
    assert_eq!(
        fs_err::read_to_string(worktree.join("README.md")).unwrap(),
        "hello\n"
    );
    assert!(!worktree.join("untracked.txt").exists());
    assert_eq!(
        git_in(&worktree, &["symbolic-ref", "HEAD"]),
        format!("refs/heads/fabro/run/{RUN}")
    );
    assert_eq!(git_in(&worktree, &["status", "--porcelain"]), "");
    assert_eq!(repo.snapshot(), before);
}

/// The engine moves a `RunGit` into `spawn_blocking` and back.
const _: fn() = || {
    fn assert_send<T: Send>() {}
    assert_send::<RunGit>();
    assert_send::<RunHistory>();
};

#[test]
fn failed_worktree_add_leaves_no_branch() {
    let Some(repo) = TestRepo::new() else { return };
    let head = repo.git(&["rev-parse", "HEAD"]);
    let occupied = repo.outside("occupied");
    fs_err::create_dir_all(occupied.join("worktree")).unwrap();
    fs_err::write(occupied.join("worktree/file"), "x").unwrap();
    let result = RunGit::create(
        &repo.path(),
        RUN,
        &head,
        &occupied.join("worktree"),
        settings(&[]),
    );
    assert!(
        matches!(result, Err(crate::git::GitError::Git { .. })),
        "{result:?}"
    );
    assert_eq!(repo.git(&["branch", "--list", "fabro/*"]), "");
    let git = RunGit::create(
        &repo.path(),
        RUN,
        &head,
        &repo.outside("run/worktree"),
        settings(&[]),
    );
    assert!(git.is_ok());
}

#[test]
fn create_refuses_an_existing_run_branch() {
    let Some(repo) = TestRepo::new() else { return };
    repo.git(&["branch", &format!("fabro/run/{RUN}")]);
    let head = repo.git(&["rev-parse", "HEAD"]);
    let result = RunGit::create(
        &repo.path(),
        RUN,
        &head,
        &repo.outside("run/worktree"),
        settings(&[]),
    );
    assert!(matches!(
        result,
        Err(crate::git::GitError::BranchExists { .. })
    ));
}

#[test]
fn checkpoint_cycles_make_one_commit_per_stage_with_exact_trailers() {
    let Some(repo) = TestRepo::new() else { return };
    let before = repo.snapshot();
    let mut git = create(&repo, &[]);
    let init = initialize(&mut git);
    let worktree = repo.outside("run/worktree");
    let mut expected_messages = Vec::new();
    let mut metadata_shas = vec![init.clone()];
    for (completed, node) in ["start", "build", "test", "exit"].iter().enumerate() {
        let completed = completed + 1;
        if *node == "build" {
            fs_err::write(
                worktree.join("src/lib.rs"),
                "pub fn answer() -> u32 { 43 }\n",
            )
            .unwrap();
            fs_err::write(worktree.join("new.txt"), "created\n").unwrap();
        }
        if *node == "test" {
            fs_err::remove_file(worktree.join("README.md")).unwrap();
        }
        let (metadata_sha, _) = cycle(&mut git, node, completed);
        expected_messages.push(format!(
            "fabro({RUN}): {node} (success)\n\nFabro-Run: {RUN}\nFabro-Completed: {completed}\nFabro-Checkpoint: {metadata_sha}"
        ));
        metadata_shas.push(metadata_sha);
    }
    let branch = format!("fabro/run/{RUN}");
    let log = repo.git(&["log", "--format=%B%x00", &format!("HEAD..{branch}")]);
    let mut messages: Vec<String> = log
        .split('\0')
        .map(|message| message.trim().to_owned())
        .filter(|message| !message.is_empty())
        .collect();
    messages.reverse();
    assert_eq!(messages, expected_messages);

    // Empty stages still commit; file changes land in the right commits.
    assert_eq!(
        repo.git(&[
            "diff",
            "--name-status",
            &format!("{branch}~4"),
            &format!("{branch}~3")
        ]),
        ""
    );
    assert_eq!(
        lines(&repo.git(&[
            "diff",
            "--name-status",
            &format!("{branch}~3"),
            &format!("{branch}~2")
        ])),
        vec!["A\tnew.txt", "M\tsrc/lib.rs"]
    );
    assert_eq!(
        repo.git(&[
            "diff",
            "--name-status",
            &format!("{branch}~2"),
            &format!("{branch}~1")
        ]),
        "D\tREADME.md"
    );
    assert_eq!(git_in(&worktree, &["status", "--porcelain"]), "");

    // The metadata ref is an orphan chain holding the files.
    let metadata_ref = format!("refs/fabro/{RUN}");
    let mut chain = lines(&repo.git(&["rev-list", "--first-parent", &metadata_ref]))
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    chain.reverse();
    assert_eq!(chain, metadata_shas);
    assert_eq!(
        repo.git(&["rev-list", "--max-parents=0", &metadata_ref]),
        init
    );
    assert_eq!(
        repo.git(&["log", "--format=%s", &metadata_ref]),
        format!(
            "fabro({RUN}): checkpoint exit\nfabro({RUN}): checkpoint test\nfabro({RUN}): checkpoint build\nfabro({RUN}): checkpoint start\nfabro({RUN}): initialize"
        )
    );
    let tree = repo.git(&["ls-tree", "-r", "--name-only", &metadata_ref]);
    for path in [
        "checkpoint.json",
        "config.json",
        "graph.fabro",
        "manifest.json",
        "children/review.fabro",
        "nodes/build/status.json",
        "nodes/exit/status.json",
        "stages/002-build@1/diff.patch",
        "stages/004-exit@1/diff.patch",
    ] {
        assert!(
            tree.lines().any(|line| line == path),
            "{path} missing in\n{tree}"
        );
    }
    assert_eq!(
        repo.git(&["show", &format!("{metadata_ref}:checkpoint.json")]),
        checkpoint("exit", 4)
    );
    let build_patch = repo.git(&[
        "show",
        &format!("{metadata_ref}:stages/002-build@1/diff.patch"),
    ]);
    assert!(
        build_patch.contains("+pub fn answer() -> u32 { 43 }"),
        "{build_patch}"
    );
    assert!(build_patch.contains("+++ b/new.txt"), "{build_patch}");

    // Every trailer names a metadata commit.
    let trailers = repo.git(&[
        "log",
        "--format=%(trailers:key=Fabro-Checkpoint,valueonly)",
        &format!("HEAD..{branch}"),
    ]);
    let trailers = lines(&trailers);
    assert_eq!(trailers.len(), 4);
    for sha in trailers {
        assert!(metadata_shas.iter().any(|known| known == sha), "{sha}");
    }

    assert_eq!(repo.git(&["fsck", "--no-progress", "--no-dangling"]), "");
    assert_eq!(repo.snapshot(), before);
}

#[test]
fn exclude_globs_and_built_in_exclusions_are_not_committed() {
    let Some(repo) = TestRepo::new() else { return };
    let mut git = create(&repo, &["*.tmp", "/cache/"]);
    let worktree = repo.outside("run/worktree");
    for (path, contents) in [
        ("kept.txt", "kept"),
        ("scratch.tmp", "no"),
        ("deep/x.tmp", "no"),
        ("cache/data.bin", "no"),
        ("src/cache/data.bin", "kept"),
        (".fabro/blobs/abc.json", "no"),
        (".fabro/artifacts/report.html", "no"),
        (".fabro/notes.md", "kept"),
        ("debug.log", "ignored by .gitignore"),
    ] {
        let path = worktree.join(path);
        fs_err::create_dir_all(path.parent().unwrap()).unwrap();
        fs_err::write(path, contents).unwrap();
    }
    let sha = git.commit_stage("work", "success", 1, "0123").unwrap();
    let files = repo.git(&["ls-tree", "-r", "--name-only", &sha]);
    assert_eq!(
        lines(&files),
        vec![
            ".fabro/notes.md",
            ".gitignore",
            "README.md",
            "kept.txt",
            "src/cache/data.bin",
            "src/lib.rs"
        ]
    );
}

#[test]
fn globs_are_relative_to_a_working_directory_below_the_root() {
    let Some(repo) = TestRepo::new() else { return };
    let head = repo.git(&["rev-parse", "HEAD"]);
    let settings = RunGitSettings {
        exclude_globs: vec!["/out/".to_owned()],
        work_dir_relative: "src".into(),
        ..RunGitSettings::default()
    };
    let mut git = RunGit::create(
        &repo.path(),
        RUN,
        &head,
        &repo.outside("run/worktree"),
        settings,
    )
    .unwrap();
    let work_dir = git.work_dir();
    assert_eq!(work_dir, repo.outside("run/worktree/src"));
    for path in ["out/a.o", ".fabro/blobs/b.json", "lib2.rs"] {
        let path = work_dir.join(path);
        fs_err::create_dir_all(path.parent().unwrap()).unwrap();
        fs_err::write(path, "x").unwrap();
    }
    let top = repo.outside("run/worktree/out/top.o");
    fs_err::create_dir_all(top.parent().unwrap()).unwrap();
    fs_err::write(top, "x").unwrap();
    let sha = git.commit_stage("work", "success", 1, "0123").unwrap();
    assert_eq!(
        lines(&repo.git(&["ls-tree", "-r", "--name-only", &sha])),
        vec![
            ".gitignore",
            "README.md",
            "out/top.o",
            "src/lib.rs",
            "src/lib2.rs"
        ]
    );
}

#[test]
fn diff_patch_above_the_limit_is_none() {
    let Some(repo) = TestRepo::new() else { return };
    let mut git = create(&repo, &[]);
    fs_err::write(repo.outside("run/worktree/big.txt"), "line\n".repeat(1000)).unwrap();
    let staged = git.stage().unwrap();
    assert!(!staged.is_empty());
    assert_eq!(git.diff_patch(&staged, 1000).unwrap(), None);
    let patch = git.diff_patch(&staged, 1 << 20).unwrap().unwrap();
    assert!(String::from_utf8(patch)
        .unwrap()
        .starts_with("diff --git a/big.txt b/big.txt\n"));
    let unchanged = {
        git.commit(staged, "n", "success", 1, "0").unwrap();
        git.stage().unwrap()
    };
    assert!(unchanged.is_empty());
    assert_eq!(git.diff_patch(&unchanged, 10).unwrap(), Some(Vec::new()));
}

#[test]
fn history_finds_checkpoints_run_commits_and_files() {
    let Some(repo) = TestRepo::new() else { return };
    let mut git = create(&repo, &[]);
    let init = initialize(&mut git);
    let (first_meta, first_run) = cycle(&mut git, "start", 1);
    let (second_meta, second_run) = cycle(&mut git, "build", 2);
    // A crash between steps 2 and 3: a metadata commit without its run-branch commit.
    let orphan = git
        .write_metadata(
            MetadataMessage::Checkpoint { node_id: "test" },
            &[MetadataFile {
                path: "checkpoint.json",
                contents: checkpoint("test", 3).as_bytes(),
            }],
        )
        .unwrap()
        .sha;
    drop(git);

    let history = RunHistory::open(&repo.path().join("src")).unwrap().unwrap();
    assert_eq!(history.metadata_tip(RUN).unwrap(), Some(orphan.clone()));
    let entries: Vec<_> = history
        .metadata_history(RUN)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let shas: Vec<&str> = entries.iter().map(|entry| entry.sha.as_str()).collect();
    assert_eq!(
        shas,
        vec![orphan.as_str(), &second_meta, &first_meta, &init]
    );
    assert_eq!(
        entries[0].checkpoint.as_deref(),
        Some(checkpoint("test", 3).as_bytes())
    );
    assert_eq!(entries[0].message, format!("fabro({RUN}): checkpoint test"));

    let by_checkpoint = history.run_commits_by_checkpoint(RUN).unwrap();
    assert_eq!(by_checkpoint.len(), 2);
    assert_eq!(by_checkpoint.get(&second_meta), Some(&second_run));
    assert_eq!(
        history.find_run_commit(RUN, &first_meta).unwrap(),
        Some(first_run)
    );
    assert_eq!(history.find_run_commit(RUN, &orphan).unwrap(), None);

    assert_eq!(
        history
            .read_file(&orphan, "graph.fabro")
            .unwrap()
            .as_deref(),
        Some(&b"digraph g { start -> exit }"[..])
    );
    assert_eq!(history.read_file(&orphan, "missing.json").unwrap(), None);
    assert_eq!(
        history.read_dir(&orphan, "children").unwrap(),
        vec![("children/review.fabro".to_owned(), b"digraph c {}".to_vec())]
    );
    assert!(history.read_dir(&orphan, "nothing").unwrap().is_empty());
    assert!(history.metadata_history("OTHER").unwrap().next().is_none());
    assert!(RunHistory::open(&repo.outside("")).unwrap().is_none());
}

#[test]
fn history_reads_pushed_branches_through_remote_tracking_refs() {
    let Some(repo) = TestRepo::new() else { return };
    let mut git = create(&repo, &[]);
    initialize(&mut git);
    let (meta, run) = cycle(&mut git, "start", 1);
    git.remove_worktree().unwrap();
    repo.git(&[
        "update-ref",
        &format!("refs/remotes/origin/fabro/meta/{RUN}"),
        &meta,
    ]);
    repo.git(&[
        "update-ref",
        &format!("refs/remotes/origin/fabro/run/{RUN}"),
        &run,
    ]);
    repo.git(&["update-ref", "-d", &format!("refs/fabro/{RUN}")]);
    repo.git(&["branch", "-D", &format!("fabro/run/{RUN}")]);

    let history = RunHistory::open(&repo.path()).unwrap().unwrap();
    assert_eq!(history.metadata_tip(RUN).unwrap(), Some(meta.clone()));
    assert_eq!(
        history.find_run_commit(RUN, &meta).unwrap(),
        Some(run.clone())
    );

    // Reattach creates the local branch from the remote-tracking one.
    let git = RunGit::reattach(
        &repo.path(),
        RUN,
        &repo.outside("run/worktree"),
        &run,
        settings(&[]),
    )
    .unwrap();
    assert_eq!(repo.git(&["rev-parse", &format!("fabro/run/{RUN}")]), run);
    assert_eq!(git.metadata_sha(), Some(meta));
}

#[test]
fn reattach_resets_branch_and_worktree_discarding_leftovers() {
    let Some(repo) = TestRepo::new() else { return };
    let before = repo.snapshot();
    let mut git = create(&repo, &[]);
    initialize(&mut git);
    let worktree = repo.outside("run/worktree");
    fs_err::write(worktree.join("one.txt"), "1").unwrap();
    let (_, first) = cycle(&mut git, "start", 1);
    fs_err::write(worktree.join("two.txt"), "2").unwrap();
    let (second_meta, _) = cycle(&mut git, "build", 2);
    // An interrupted stage's leftovers: a modification, an untracked file, an ignored file.
    fs_err::write(worktree.join("one.txt"), "changed").unwrap();
    fs_err::write(worktree.join("stray.txt"), "stray").unwrap();
    fs_err::write(worktree.join("trace.log"), "ignored").unwrap();
    drop(git);

    let mut git = RunGit::reattach(&repo.path(), RUN, &worktree, &first, settings(&[])).unwrap();
    assert_eq!(repo.git(&["rev-parse", &format!("fabro/run/{RUN}")]), first);
    assert_eq!(git.head_sha(), first);
    assert_eq!(git.metadata_sha(), Some(second_meta));
    assert_eq!(
        fs_err::read_to_string(worktree.join("one.txt")).unwrap(),
        "1"
    );
    for gone in ["two.txt", "stray.txt", "trace.log"] {
        assert!(!worktree.join(gone).exists(), "{gone}");
    }
    assert_eq!(
        git_in(&worktree, &["status", "--porcelain", "--ignored"]),
        ""
    );
    // The run continues on the reattached worktree.
    let (_, next) = cycle(&mut git, "build", 2);
    assert_eq!(repo.git(&["rev-parse", &format!("{next}~1")]), first);
    assert_eq!(repo.snapshot(), before);
    assert_eq!(repo.git(&["fsck", "--no-progress", "--no-dangling"]), "");
}

#[test]
fn reattach_recovers_half_deleted_and_stale_worktrees() {
    let Some(repo) = TestRepo::new() else { return };
    let mut git = create(&repo, &[]);
    let (_, first) = cycle(&mut git, "start", 1);
    drop(git);
    let worktree = repo.outside("run/worktree");

    // Half-deleted: the .git file and some files are gone.
    fs_err::remove_file(worktree.join(".git")).unwrap();
    fs_err::remove_file(worktree.join("README.md")).unwrap();
    let git = RunGit::reattach(&repo.path(), RUN, &worktree, &first, settings(&[])).unwrap();
    assert_eq!(
        fs_err::read_to_string(worktree.join("README.md")).unwrap(),
        "hello\n"
    );
    drop(git);

    // Stale registration: the directory is gone entirely.
    fs_err::remove_dir_all(&worktree).unwrap();
    let git = RunGit::reattach(&repo.path(), RUN, &worktree, &first, settings(&[])).unwrap();
    assert_eq!(git_in(&worktree, &["rev-parse", "HEAD"]), first);
    drop(git);

    // Reattaching elsewhere replaces the old registration.
    let elsewhere = repo.outside("moved/worktree");
    let git = RunGit::reattach(&repo.path(), RUN, &elsewhere, &first, settings(&[])).unwrap();
    assert_eq!(git.worktree_path(), elsewhere.as_path());
    let listed = repo.git(&["worktree", "list", "--porcelain"]);
    assert_eq!(listed.matches("worktree ").count(), 2, "{listed}");
    assert_eq!(repo.git(&["worktree", "prune", "--dry-run", "-v"]), "");
}

#[test]
fn reattach_replaces_a_half_made_worktree_of_its_own_run() {
    let Some(repo) = TestRepo::new() else { return };
    let mut git = create(&repo, &[]);
    let (_, first) = cycle(&mut git, "start", 1);
    let path = git.worktree_path().to_path_buf();
    drop(git);
    // Killed while libgit2 was adding the worktree: the registration directory exists but
    // names no worktree yet, and the `.git` link was created but not written.
    fs_err::write(path.join(".git"), "").unwrap();
    let admin = super::worktree_admin_dir(&repo.path().join(".git"), RUN);
    fs_err::remove_file(admin.join("gitdir")).unwrap();
    fs_err::write(path.join("partial.txt"), "half").unwrap();
    let git = RunGit::reattach(&repo.path(), RUN, &path, &first, settings(&[])).unwrap();
    assert!(git.worktree_path().join(".git").exists());
    assert!(!path.join("partial.txt").exists());
}

#[test]
fn reattach_refuses_a_foreign_directory_and_a_missing_branch() {
    let Some(repo) = TestRepo::new() else { return };
    let mut git = create(&repo, &[]);
    let (_, first) = cycle(&mut git, "start", 1);
    git.remove_worktree().unwrap();
    let foreign = repo.outside("foreign");
    fs_err::create_dir_all(&foreign).unwrap();
    fs_err::write(foreign.join("precious.txt"), "keep").unwrap();
    let result = RunGit::reattach(&repo.path(), RUN, &foreign, &first, settings(&[]));
    assert!(matches!(
        result,
        Err(crate::git::GitError::WorktreePathOccupied { .. })
    ));
    assert_eq!(
        fs_err::read_to_string(foreign.join("precious.txt")).unwrap(),
        "keep"
    );

    let result = RunGit::reattach(
        &repo.path(),
        "OTHER",
        &repo.outside("x"),
        &first,
        settings(&[]),
    );
    assert!(matches!(
        result,
        Err(crate::git::GitError::BranchMissing { .. })
    ));
    let result = RunGit::reattach(
        &repo.path(),
        RUN,
        &repo.outside("x"),
        "not-a-sha",
        settings(&[]),
    );
    assert!(matches!(
        result,
        Err(crate::git::GitError::UnknownCommit { .. })
    ));
}

#[test]
fn remove_worktree_keeps_the_branch() {
    let Some(repo) = TestRepo::new() else { return };
    let mut git = create(&repo, &[]);
    let (_, sha) = cycle(&mut git, "start", 1);
    git.remove_worktree().unwrap();
    assert!(!repo.outside("run/worktree").exists());
    assert_eq!(repo.git(&["rev-parse", &format!("fabro/run/{RUN}")]), sha);
    assert_eq!(
        lines(&repo.git(&["worktree", "list", "--porcelain"])).len(),
        3
    );
    assert_eq!(repo.git(&["worktree", "prune", "--dry-run", "-v"]), "");
}

/// Measures the git part of the checkpoint cycle (stage, diff, metadata commit with three
/// files, run-branch commit) over 200 stages of a 53-file repository, half of them changing a
/// file, and prints the cost per stage and phase next to the cost of creating and renaming one
/// small file on the same file system, which dominates it (each cycle's pack and index, and an
/// index update when files changed, are such files). The budget of issue 4 is 5 ms per node for the whole cycle.
#[test]
fn checkpoint_cycle_cost() {
    let Some(repo) = TestRepo::new() else { return };
    for index in 0..50 {
        repo.write(&format!("src/module_{index}.rs"), "pub fn f() {}\n");
    }
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-q", "-m", "more files"]);
    let mut git = create(&repo, &[]);
    initialize(&mut git);
    let worktree = repo.outside("run/worktree");
    let objects_before = loose_objects(&repo);
    let stages: u32 = 200;
    let mut phases = [Duration::ZERO; 4];
    for completed in 1..=stages {
        if completed % 2 == 0 {
            fs_err::write(worktree.join("src/lib.rs"), format!("// {completed}\n")).unwrap();
        }
        let node = format!("node{completed}");
        let timer = Instant::now();
        let staged = git.stage().unwrap();
        phases[0] += timer.elapsed();
        let timer = Instant::now();
        let patch = git.diff_patch(&staged, 512 * 1024).unwrap().unwrap();
        phases[1] += timer.elapsed();
        let timer = Instant::now();
        let checkpoint = checkpoint(&node, completed as usize);
        let status_path = format!("nodes/{node}/status.json");
        let patch_path = format!("stages/{completed:03}-{node}@1/diff.patch");
        let metadata = git
            .write_metadata(
                MetadataMessage::Checkpoint { node_id: &node },
                &[
                    MetadataFile {
                        path: "checkpoint.json",
                        contents: checkpoint.as_bytes(),
                    },
                    MetadataFile {
                        path: &status_path,
                        contents: node.as_bytes(),
                    },
                    MetadataFile {
                        path: &patch_path,
                        contents: &patch,
                    },
                ],
            )
            .unwrap();
        phases[2] += timer.elapsed();
        let timer = Instant::now();
        git.commit(staged, &node, "success", completed as usize, &metadata.sha)
            .unwrap();
        phases[3] += timer.elapsed();
    }
    let per_phase = phases.map(|phase| phase / stages);
    let per_stage: Duration = per_phase.iter().sum();
    let objects = (loose_objects(&repo) - objects_before) as f64 / f64::from(stages);
    let timer = Instant::now();
    git.sync_to_disk().unwrap();
    let sync = timer.elapsed();
    let scratch = repo.outside("create-rename");
    fs_err::create_dir_all(&scratch).unwrap();
    let timer = Instant::now();
    for index in 0..stages {
        let temporary = scratch.join(format!("tmp{index}"));
        fs_err::write(&temporary, "x".repeat(200)).unwrap();
        fs_err::rename(&temporary, scratch.join(format!("file{index}"))).unwrap();
    }
    let create_rename = timer.elapsed() / stages;
    eprintln!(
        "git checkpoint cycle: {per_stage:?} per stage over {stages} stages \
         (stage {:?}, diff {:?}, metadata {:?}, commit {:?}); {objects:.1} loose objects per stage; \
         create+rename of one file {create_rename:?}; syncfs {sync:?}",
        per_phase[0], per_phase[1], per_phase[2], per_phase[3]
    );
    assert_eq!(
        repo.git(&["rev-list", "--count", &format!("HEAD..fabro/run/{RUN}")]),
        stages.to_string()
    );
    assert_eq!(
        fs_err::read_to_string(worktree.join("src/lib.rs")).unwrap(),
        format!("// {stages}\n")
    );
    // libgit2 keeps every pack it has seen mapped; merged-away packs must not pile up.
    let maps = fs_err::read_to_string("/proc/self/maps").unwrap();
    let repo_path = repo.path().display().to_string();
    let stale: std::collections::BTreeSet<&str> = maps
        .lines()
        .filter(|line| line.contains(&repo_path) && line.ends_with("(deleted)"))
        .filter_map(|line| line.split_whitespace().nth(5))
        .collect();
    assert!(
        stale.len() < 140,
        "{} deleted packs still mapped",
        stale.len()
    );
}

fn loose_objects(repo: &TestRepo) -> u64 {
    let counts = repo.git(&["count-objects"]);
    counts.split(' ').next().unwrap().parse().unwrap()
}

/// After their first write, both refs move by overwriting the loose ref file in place (no
/// new inode); a ref that `git pack-refs` packed is written again through libgit2.
#[test]
fn refs_move_in_place_after_their_first_write() {
    use std::os::unix::fs::MetadataExt;
    let Some(repo) = TestRepo::new() else { return };
    let mut git = create(&repo, &[]);
    initialize(&mut git);
    cycle(&mut git, "a", 1);
    let ref_files = [
        repo.path().join(format!(".git/refs/heads/fabro/run/{RUN}")),
        repo.path().join(format!(".git/refs/fabro/{RUN}")),
    ];
    let inodes = ref_files
        .clone()
        .map(|path| fs_err::metadata(path).unwrap().ino());
    let (metadata, head) = cycle(&mut git, "b", 2);
    assert_eq!(
        ref_files
            .clone()
            .map(|path| fs_err::metadata(path).unwrap().ino()),
        inodes
    );
    assert_eq!(repo.git(&["rev-parse", &format!("fabro/run/{RUN}")]), head);
    assert_eq!(
        repo.git(&["rev-parse", &format!("refs/fabro/{RUN}")]),
        metadata
    );
    repo.git(&["pack-refs", "--all"]);
    assert!(!ref_files[0].exists());
    let (metadata, head) = cycle(&mut git, "c", 3);
    assert_eq!(repo.git(&["rev-parse", &format!("fabro/run/{RUN}")]), head);
    assert_eq!(
        repo.git(&["rev-parse", &format!("refs/fabro/{RUN}")]),
        metadata
    );
    assert_eq!(
        repo.git(&["log", "--format=%s", &format!("fabro/run/{RUN}"), "-3"]),
        format!("fabro({RUN}): c (success)\nfabro({RUN}): b (success)\nfabro({RUN}): a (success)")
    );
    repo.git(&["fsck", "--strict"]);
}

/// Issue 20: the index a stage commit writes in the worktree grows with what the stage
/// changed, not with the tree; `git` in the worktree still sees it current.
#[test]
fn stage_commits_in_a_large_tree_write_an_index_of_the_changes() {
    let Some(repo) = TestRepo::empty_in_memory() else {
        return;
    };
    const FILES: usize = 6000;
    for index in 0..FILES {
        repo.write(&format!("d{}/f{index}.txt", index / 100), "x\n");
    }
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-q", "-m", "initial"]);
    let mut git = create(&repo, &[]).volatile();
    initialize(&mut git);
    let worktree = repo.outside("run/worktree");
    let index_path = git_in(&worktree, &["rev-parse", "--git-path", "index"]);
    // The whole index: the shared index, written when the worktree was set up.
    let git_dir = worktree.join(git_in(&worktree, &["rev-parse", "--git-dir"]));
    let full_size = fs_err::read_dir(&git_dir)
        .unwrap()
        .flatten()
        .filter(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .starts_with("sharedindex.")
        })
        .map(|entry| entry.metadata().unwrap().len())
        .max()
        .expect("a shared index after set-up");
    for stage in 1..=12usize {
        let node = format!("n{stage}");
        fs_err::write(
            worktree.join(format!("d{}/f{}.txt", stage, stage * 100)),
            format!("stage {stage}\n"),
        )
        .unwrap();
        fs_err::create_dir_all(worktree.join(format!("new/s{stage}"))).unwrap();
        fs_err::write(worktree.join(format!("new/s{stage}/file.txt")), "new\n").unwrap();
        if stage == 6 {
            fs_err::remove_file(worktree.join("d50/f5000.txt")).unwrap();
        }
        cycle(&mut git, &node, stage + 1);
        assert_eq!(
            git_in(
                &worktree,
                &["status", "--porcelain", "--untracked-files=all"]
            ),
            "",
            "after stage {stage}"
        );
        assert_eq!(git_in(&worktree, &["diff", "--cached", "--name-only"]), "");
        let size = fs_err::metadata(worktree.join(&index_path)).unwrap().len();
        assert!(
            size * 20 < full_size,
            "stage {stage} wrote an index of {size} bytes; the whole index is {full_size}"
        );
    }
    let files = git_in(&worktree, &["ls-files"]);
    assert_eq!(files.lines().count(), FILES - 1 + 12);
    assert!(!files.contains("d50/f5000.txt"));
}
