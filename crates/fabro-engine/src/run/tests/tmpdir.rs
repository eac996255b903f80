//! The private `TMPDIR` of confined processes (SPEC 16, decision 63): one per run and
//! per parallel branch, created when the first confined process starts, removed when
//! the run finishes however it ends. The kernel's support does not matter here (the
//! settings claim none, so processes start plainly with `TMPDIR` set): this is about
//! which directory a stage gets and when it exists.

use std::path::{Path, PathBuf};

use super::*;
use crate::sandbox::{IsolationMode, IsolationSettings, KernelSupport, SandboxEnv};

/// The run's environment with `command_isolation = command` (agents confined).
fn sandbox(command: IsolationMode) -> SandboxEnv {
    SandboxEnv::inherit().with_isolation(IsolationSettings::new(
        IsolationMode::Workspace,
        command,
        KernelSupport::none(),
    ))
}

/// A command node `id` that records its `TMPDIR` in `{id}.tmpdir` in the working
/// directory, then runs `then`.
fn recording(id: &str, then: &str) -> String {
    format!(r#"{id} [shape=parallelogram, script="printf %s \"$TMPDIR\" > {id}.tmpdir; {then}"]"#)
}

/// What node `id` recorded as its `TMPDIR`.
fn recorded(fixture: &Fixture, id: &str) -> PathBuf {
    let path = fixture.root.path().join(format!("{id}.tmpdir"));
    PathBuf::from(fs_err::read_to_string(path).expect("the stage recorded its TMPDIR"))
}

/// `{run_dir}/cache/tmp`, where the private directories live.
fn tmp_root(report: &RunReport) -> PathBuf {
    report.run_dir.join("cache").join("tmp")
}

fn is_under(path: &Path, root: &Path) -> bool {
    path.starts_with(root) && path != root
}

#[tokio::test]
async fn confined_stages_of_a_run_share_one_tmpdir() {
    let fixture = Fixture::new();
    let workflow = format!(
        r#"digraph t {{
            start [shape=Mdiamond]
            exit [shape=Msquare]
            {}
            {}
            start -> one -> two -> exit
        }}"#,
        recording("one", r#"echo shared > \"$TMPDIR/note\""#),
        recording("two", r#"cat \"$TMPDIR/note\" > seen.txt"#),
    );
    let mut options = fixture.options(&workflow);
    options.sandbox_env = sandbox(IsolationMode::Workspace);
    let report = fixture.run(options, CancellationToken::new()).await;

    assert_eq!(report.status, RunStatus::Success, "{:?}", report.end);
    let (one, two) = (recorded(&fixture, "one"), recorded(&fixture, "two"));
    assert_eq!(one, two, "both stages of the run get the run's TMPDIR");
    assert!(is_under(&one, &tmp_root(&report)), "{}", one.display());
    let seen = fs_err::read_to_string(fixture.root.path().join("seen.txt")).expect("seen.txt");
    assert_eq!(
        seen, "shared\n",
        "the second stage sees the first one's file"
    );
}

#[tokio::test]
async fn parallel_branches_get_tmpdirs_of_their_own() {
    let fixture = Fixture::new();
    let workflow = format!(
        r#"digraph t {{
            start [shape=Mdiamond]
            exit [shape=Msquare]
            {}
            fan [shape=component, max_parallel=1]
            {}
            {}
            {}
            merge [shape=tripleoctagon]
            {}
            start -> before -> fan
            fan -> a1 -> a2 -> merge
            fan -> b -> merge
            merge -> after -> exit
        }}"#,
        recording("before", ""),
        recording("a1", ""),
        recording("a2", ""),
        recording("b", ""),
        recording("after", ""),
    );
    let mut options = fixture.options(&workflow);
    options.sandbox_env = sandbox(IsolationMode::Workspace);
    let report = fixture.run(options, CancellationToken::new()).await;

    assert_eq!(report.status, RunStatus::Success, "{:?}", report.end);
    let [before, a1, a2, b, after] =
        ["before", "a1", "a2", "b", "after"].map(|id| recorded(&fixture, id));
    assert_eq!(before, after, "the run's stages share the run's TMPDIR");
    assert_eq!(a1, a2, "the stages of one branch share the branch's TMPDIR");
    assert_ne!(a1, b, "two branches get different TMPDIRs");
    assert_ne!(a1, before, "a branch's TMPDIR is not the run's");
    assert_ne!(b, before, "a branch's TMPDIR is not the run's");
    for path in [&before, &a1, &b] {
        assert!(is_under(path, &tmp_root(&report)), "{}", path.display());
    }
}

#[tokio::test]
async fn a_run_without_confined_processes_makes_no_tmpdir() {
    let fixture = Fixture::new();
    let workflow = format!(
        r#"digraph t {{
            start [shape=Mdiamond]
            exit [shape=Msquare]
            {}
            start -> one -> exit
        }}"#,
        recording("one", ""),
    );
    let mut options = fixture.options(&workflow);
    options.sandbox_env = sandbox(IsolationMode::None);
    let report = fixture.run(options, CancellationToken::new()).await;

    assert_eq!(report.status, RunStatus::Success, "{:?}", report.end);
    let one = recorded(&fixture, "one");
    assert!(!one.starts_with(&report.run_dir), "{}", one.display());
    assert!(!tmp_root(&report).exists());
    assert!(!report.run_dir.join("cache").exists());
}

#[tokio::test]
async fn the_tmpdir_is_removed_when_the_run_finishes_however_it_ends() {
    // Success.
    let fixture = Fixture::new();
    let workflow = format!(
        r#"digraph t {{
            start [shape=Mdiamond]
            exit [shape=Msquare]
            {}
            start -> one -> exit
        }}"#,
        recording("one", r#"touch \"$TMPDIR/left\""#),
    );
    let mut options = fixture.options(&workflow);
    options.sandbox_env = sandbox(IsolationMode::Workspace);
    let report = fixture.run(options, CancellationToken::new()).await;
    assert_eq!(report.status, RunStatus::Success, "{:?}", report.end);
    let one = recorded(&fixture, "one");
    assert!(is_under(&one, &tmp_root(&report)), "{}", one.display());
    assert!(!one.exists(), "{} outlived the run", one.display());
    assert!(!tmp_root(&report).exists());

    // Failure: the stage fails and no edge leads on, so the run fails.
    let fixture = Fixture::new();
    let workflow = format!(
        r#"digraph t {{
            start [shape=Mdiamond]
            exit [shape=Msquare]
            {}
            start -> one
            one -> exit [condition="outcome=success"]
        }}"#,
        recording("one", r#"touch \"$TMPDIR/left\"; exit 1"#),
    );
    let mut options = fixture.options(&workflow);
    options.sandbox_env = sandbox(IsolationMode::Workspace);
    let report = fixture.run(options, CancellationToken::new()).await;
    assert_eq!(report.status, RunStatus::Fail, "{:?}", report.end);
    let one = recorded(&fixture, "one");
    assert!(is_under(&one, &tmp_root(&report)), "{}", one.display());
    assert!(!tmp_root(&report).exists());

    // Cancellation at a human gate after a confined stage.
    let fixture = Fixture::new();
    let workflow = format!(
        r#"digraph t {{
            start [shape=Mdiamond]
            exit [shape=Msquare]
            {}
            review [shape=hexagon, label="Approve?"]
            start -> one -> review
            review -> exit [label="[A] Approve"]
        }}"#,
        recording("one", r#"touch \"$TMPDIR/left\""#),
    );
    let cancel = CancellationToken::new();
    let mut options = fixture.options(&workflow);
    options.sandbox_env = sandbox(IsolationMode::Workspace);
    options.interviewer = Some(Arc::new(CancelWhenAsked(cancel.clone())));
    let report = fixture.run(options, cancel).await;
    assert_eq!(report.status, RunStatus::Canceled, "{:?}", report.end);
    let one = recorded(&fixture, "one");
    assert!(is_under(&one, &tmp_root(&report)), "{}", one.display());
    assert!(!tmp_root(&report).exists());
}
