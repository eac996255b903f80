//! The `clone` path of [`crate::ProcessEnv::spawn_piped`] under `workspace`: exit codes
//! and signals reported faithfully, output captured, environment and working
//! directory, children of this process and reaped, process groups killable from here
//! (a timed-out command and what it started), kill on drop, failed starts, and many
//! children at once.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::{fixture, kernel_has, sh_spawned, stage_env, Fixture};
use crate::isolation::{IsolationMode, Mechanism};
use crate::{ProcessEnv, ProcessGroup, SpawnError};

/// A confined environment that starts children by `clone` (Landlock, plus namespaces for the
/// fixture's hidden directory where the kernel has them); `None` (skipped, with a
/// message) without Landlock.
fn confined() -> Option<(Fixture, ProcessEnv)> {
    if !kernel_has(Mechanism::Landlock) {
        return None;
    }
    let fixture = fixture();
    let env = stage_env(&fixture, IsolationMode::Workspace, false);
    Some((fixture, env))
}

/// Whether `pid` has ended (gone, or a zombie waiting for its reaper).
fn ended(pid: i32) -> bool {
    match fs_err::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

/// Polls `condition` for up to five seconds.
async fn eventually(mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    condition()
}

#[tokio::test]
async fn exit_codes_signals_output_environment_and_directory() {
    let Some((fixture, mut env)) = confined() else {
        return;
    };
    env.set("FABRO_SPAWN_TEST", "value with spaces");
    let (status, stdout, stderr) = sh_spawned(&env, &fixture.tree, "exit 3").await;
    assert_eq!(
        (status.code(), stdout.as_str(), stderr.as_str()),
        (Some(3), "", "")
    );
    let (status, _, _) = sh_spawned(&env, &fixture.tree, "kill -TERM $$").await;
    assert_eq!(
        (status.code(), status.signal()),
        (None, Some(libc_sigterm()))
    );
    let (status, stdout, stderr) = sh_spawned(
        &env,
        &fixture.tree,
        "pwd; echo \"$FABRO_SPAWN_TEST|$TMPDIR\"; echo to-stderr >&2; head -c 300000 /dev/zero | tr '\\0' x",
    )
    .await;
    assert!(status.success(), "{stderr}");
    let tmpdir = fixture.tree.with_file_name("tmp");
    let expected = format!(
        "{}\nvalue with spaces|{}\n",
        fixture.tree.display(),
        tmpdir.display()
    );
    assert!(stdout.starts_with(&expected), "{stdout}");
    assert_eq!(stdout.len(), expected.len() + 300_000);
    assert_eq!(stderr, "to-stderr\n");
    // This process started it (a child of its own, not of a forked copy), and reaped
    // it once it exited.
    let (_, stdout, _) = sh_spawned(&env, &fixture.tree, "echo $$ $PPID").await;
    let (pid, parent) = stdout.trim().split_once(' ').expect("two pids");
    assert_eq!(parent, std::process::id().to_string());
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "{pid} not reaped"
    );
    // Writes are still confined to the tree and TMPDIR.
    let outside = fixture.outside.join("nope");
    let (status, _, stderr) = sh_spawned(
        &env,
        &fixture.tree,
        &format!("echo x > '{}'", outside.display()),
    )
    .await;
    assert!(!status.success() && !outside.exists(), "{stderr}");
}

fn libc_sigterm() -> i32 {
    Signal::SIGTERM as i32
}

#[tokio::test]
async fn a_timed_out_command_and_its_children_are_killed_by_process_group() {
    let Some((fixture, env)) = confined() else {
        return;
    };
    let arguments = ["-c".into(), "sleep 30 & echo $! > background; wait".into()];
    let mut child = env
        .spawn_piped("/bin/sh", &arguments, &fixture.tree)
        .unwrap();
    let group = ProcessGroup::of_spawned(&child);
    let pid_file = fixture.tree.join("background");
    assert!(
        eventually(|| fs_err::read_to_string(&pid_file).is_ok_and(|text| text.ends_with('\n')))
            .await
    );
    let background: i32 = fs_err::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let timed_out = tokio::time::timeout(Duration::from_millis(100), child.wait()).await;
    assert!(timed_out.is_err(), "the script should still run");
    group.signal(Signal::SIGTERM);
    let status = tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .expect("exit reported")
        .unwrap();
    assert_eq!(status.signal(), Some(Signal::SIGTERM as i32));
    // Waiting again gives the same status.
    assert_eq!(child.wait().await.unwrap(), status);
    assert!(
        eventually(|| ended(background)).await,
        "sleep {background} survived"
    );
    group.disarm();
}

#[tokio::test]
async fn a_dropped_child_is_killed() {
    let Some((fixture, env)) = confined() else {
        return;
    };
    let arguments = ["-c".into(), "exec sleep 30".into()];
    let child = env
        .spawn_piped("/bin/sh", &arguments, &fixture.tree)
        .unwrap();
    let pid = i32::try_from(child.id().unwrap()).unwrap();
    drop(child);
    // Killed, and reaped: gone, not a zombie.
    let proc = format!("/proc/{pid}");
    assert!(
        eventually(|| !Path::new(&proc).exists()).await,
        "sleep {pid} survived or was not reaped"
    );
}

#[tokio::test]
async fn a_missing_program_is_a_start_error() {
    let Some((fixture, env)) = confined() else {
        return;
    };
    for program in ["/nonexistent/program", "fabro-no-such-program"] {
        let error = env
            .spawn_piped(program, &[], &fixture.tree)
            .expect_err("no such program");
        match error {
            SpawnError::Io(error) => {
                assert_eq!(error.kind(), std::io::ErrorKind::NotFound, "{error}");
            }
            SpawnError::Isolation(error) => panic!("{error}"),
        }
    }
    // Later starts work after a failed one; a program found on PATH runs.
    let (status, stdout, _) = sh_spawned(&env, &fixture.tree, "echo ok").await;
    assert!(status.success());
    assert_eq!(stdout, "ok\n");
    let mut child = env.spawn_piped("true", &[], &fixture.tree).unwrap();
    assert!(child.wait().await.unwrap().success());
}

#[tokio::test]
async fn many_children_at_once_each_get_their_own_status() {
    let Some((fixture, env)) = confined() else {
        return;
    };
    let runs = (0..40).map(|index| {
        let env = env.clone();
        let tree = fixture.tree.clone();
        tokio::spawn(async move {
            let (status, stdout, _) =
                sh_spawned(&env, &tree, &format!("echo {index}; exit {index}")).await;
            (index, status.code(), stdout)
        })
    });
    for run in runs.collect::<Vec<_>>() {
        let (index, code, stdout) = run.await.unwrap();
        assert_eq!(code, Some(index));
        assert_eq!(stdout, format!("{index}\n"));
    }
}

/// A hook's child reads its event envelope from the file given as standard input
/// (SPEC 20.4), confined or not; without one, standard input stays `/dev/null`.
#[tokio::test]
async fn standard_input_comes_from_the_given_file() {
    use std::io::{Seek, Write};
    use tokio::io::AsyncReadExt;
    let fixture = fixture();
    let mut input = tempfile::tempfile().unwrap();
    input
        .write_all(b"{\"event\":\"StageCompleted\"}\n")
        .unwrap();
    input.rewind().unwrap();
    let plain = stage_env(&fixture, IsolationMode::None, false);
    let mut envs = vec![("plain", plain)];
    if kernel_has(Mechanism::Landlock) {
        envs.push((
            "confined",
            stage_env(&fixture, IsolationMode::Workspace, false),
        ));
    } else {
        fabro_test_support::skip(
            "standard_input_comes_from_the_given_file (confined)",
            "the kernel has no Landlock",
        );
    }
    for (name, env) in envs {
        let arguments = ["-c".into(), "cat; echo end".into()];
        let mut child = env
            .spawn_piped_with_input("/bin/sh", &arguments, &fixture.tree, &input)
            .unwrap();
        let mut stdout = child.take_stdout_pipe().unwrap();
        let mut out = String::new();
        let (status, read) = tokio::join!(child.wait(), stdout.read_to_string(&mut out));
        read.unwrap();
        assert!(status.unwrap().success(), "{name}");
        assert_eq!(out, "{\"event\":\"StageCompleted\"}\nend\n", "{name}");
        input.rewind().unwrap();
        let (_, stdout, _) = sh_spawned(&env, &fixture.tree, "cat; echo end").await;
        assert_eq!(stdout, "end\n", "{name}: /dev/null without input");
    }
}

#[test]
fn this_kernel_starts_confined_children_without_fork() {
    // Linux 5.4 or later (the machines of the project's CI run 6.x): pidfds exist, so
    // confined children are started by `clone`, not with a `pre_exec` step.
    if !kernel_has(Mechanism::Landlock) {
        return;
    }
    assert!(crate::isolation::spawner::supported());
}
