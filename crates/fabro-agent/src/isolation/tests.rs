//! Isolation settings, reports and, where the kernel has the mechanisms, real children
//! confined by [`crate::ProcessEnv::command`] (a `pre_exec` step) and by
//! [`crate::ProcessEnv::spawn_piped`] (a `clone` without `fork`), which must agree.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;

use tokio::io::AsyncReadExt;

use super::*;
use crate::ProcessEnv;

fn settings(mode: IsolationMode, support: KernelSupport) -> IsolationSettings {
    IsolationSettings::new(mode, mode, support)
}

#[test]
fn modes_and_mechanisms_parse_and_print() {
    assert_eq!(
        IsolationMode::parse("workspace"),
        Some(IsolationMode::Workspace)
    );
    assert_eq!(IsolationMode::parse("none"), Some(IsolationMode::None));
    assert_eq!(IsolationMode::parse("docker"), None);
    for mechanism in Mechanism::ALL {
        assert_eq!(Mechanism::parse(mechanism.as_str()), Some(mechanism));
    }
    assert_eq!(
        names(&Mechanism::ALL),
        "landlock, mount_namespace, network_namespace"
    );
}

#[test]
fn required_follows_the_settings_and_missing_the_kernel() {
    let mut isolation = settings(IsolationMode::None, KernelSupport::none());
    assert!(isolation.required().is_empty());
    isolation.agent = IsolationMode::Workspace;
    assert_eq!(isolation.required(), [Mechanism::Landlock]);
    isolation.hidden_paths.push("/nonexistent".into());
    isolation.network = false;
    assert_eq!(isolation.required(), Mechanism::ALL);
    assert_eq!(isolation.missing(), Mechanism::ALL);
    isolation.support = KernelSupport::all().without(Mechanism::NetworkNamespace);
    assert_eq!(isolation.missing(), [Mechanism::NetworkNamespace]);
}

#[test]
fn the_warning_is_given_once_across_clones() {
    let isolation = settings(
        IsolationMode::Workspace,
        KernelSupport::all().without(Mechanism::Landlock),
    );
    let clone = isolation.clone();
    let warning = isolation.take_warning().expect("landlock is missing");
    assert!(warning.contains("landlock"), "{warning}");
    assert_eq!(clone.take_warning(), None);
    let supported = settings(IsolationMode::Workspace, KernelSupport::all());
    assert_eq!(supported.take_warning(), None);
}

#[test]
fn reports_list_what_is_applied() {
    let dir = tempfile::tempdir().unwrap();
    let mut isolation = IsolationSettings::new(
        IsolationMode::Workspace,
        IsolationMode::None,
        KernelSupport::all(),
    );
    isolation.network = false;
    isolation.hidden_paths = vec![dir.path().to_path_buf()];
    let agent = isolation.report(ProcessKind::Agent);
    assert_eq!(agent.mode, IsolationMode::Workspace);
    assert!(!agent.network);
    assert_eq!(agent.enforced, Mechanism::ALL);
    let command = isolation.report(ProcessKind::Command);
    assert_eq!(
        command,
        IsolationReport {
            mode: IsolationMode::None,
            network: true,
            enforced: Vec::new()
        }
    );
    isolation.support = KernelSupport::none();
    assert!(isolation.report(ProcessKind::Agent).enforced.is_empty());
}

/// Runs `script` with `sh -c` in `cwd` under `env`, once through each spawn path
/// (`command` with its `pre_exec` step, then `spawn_piped`), which must give the same
/// result; (exit code, stdout + stderr).
async fn sh(env: &ProcessEnv, cwd: &Path, script: &str) -> (Option<i32>, String) {
    let output = env
        .command("/bin/sh", cwd)
        .expect("prepared")
        .args(["-c", script])
        .stdin(Stdio::null())
        .output()
        .await
        .expect("spawned");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let spawned = sh_spawned(env, cwd, script).await;
    let (status, stdout, stderr) = spawned;
    assert_eq!(
        (status.code(), format!("{stdout}{stderr}")),
        (output.status.code(), text.clone()),
        "spawn_piped and command disagree on {script}"
    );
    (output.status.code(), text)
}

/// Runs `script` through [`ProcessEnv::spawn_piped`]: (status, stdout, stderr).
async fn sh_spawned(
    env: &ProcessEnv,
    cwd: &Path,
    script: &str,
) -> (std::process::ExitStatus, String, String) {
    let arguments = ["-c".into(), script.into()];
    let mut child = env
        .spawn_piped("/bin/sh", &arguments, cwd)
        .expect("spawned");
    let (mut stdout, mut stderr) = (
        child.take_stdout_pipe().unwrap(),
        child.take_stderr_pipe().unwrap(),
    );
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let (status, read_out, read_err) = tokio::join!(
        child.wait(),
        stdout.read_to_end(&mut out),
        stderr.read_to_end(&mut err)
    );
    read_out.unwrap();
    read_err.unwrap();
    (
        status.expect("exit status"),
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    )
}

/// A tree, a sibling outside it, a stage temp dir, and an environment of `mode`.
struct Fixture {
    _base: tempfile::TempDir,
    tree: std::path::PathBuf,
    outside: std::path::PathBuf,
    hidden: std::path::PathBuf,
}

fn fixture() -> Fixture {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().canonicalize().unwrap();
    let (tree, outside, hidden) = (root.join("tree"), root.join("outside"), root.join("hidden"));
    for dir in [&tree, &outside, &hidden] {
        fs_err::create_dir_all(dir).unwrap();
    }
    fs_err::write(hidden.join("secret"), "s3cret").unwrap();
    Fixture {
        _base: base,
        tree,
        outside,
        hidden,
    }
}

fn stage_env(fixture: &Fixture, mode: IsolationMode, network: bool) -> ProcessEnv {
    let mut isolation = settings(mode, KernelSupport::detect());
    isolation.network = network;
    isolation.hidden_paths = vec![fixture.hidden.clone()];
    ProcessEnv::new(std::env::vars_os(), &[], &BTreeMap::new())
        .with_isolation(isolation)
        .for_stage(
            ProcessKind::Command,
            &PrivateTmpDir::new(fixture.tree.with_file_name("tmp")),
        )
}

/// Whether the kernel has `mechanism`; says so when it does not.
fn kernel_has(mechanism: Mechanism) -> bool {
    let has = KernelSupport::detect().supports(mechanism);
    if !has {
        fabro_test_support::skip(
            "an isolation test",
            &format!("this kernel lacks {}", mechanism.as_str()),
        );
    }
    has
}

#[tokio::test]
async fn workspace_confines_writes_to_the_tree_and_tmpdir_for_all_descendants() {
    if !kernel_has(Mechanism::Landlock) {
        return;
    }
    let fixture = fixture();
    let env = stage_env(&fixture, IsolationMode::Workspace, true);
    assert!(env.is_confined());
    let outside = fixture.outside.join("escaped");
    let (code, text) = sh(
        &env,
        &fixture.tree,
        &format!("echo x > '{}'", outside.display()),
    )
    .await;
    assert_ne!(code, Some(0), "{text}");
    assert!(text.contains("Permission denied"), "{text}");
    let nested = format!("sh -c \"echo x > '{}'\"", outside.display());
    let (code, _) = sh(&env, &fixture.tree, &nested).await;
    assert_ne!(code, Some(0));
    assert!(!outside.exists());
    let (code, text) = sh(
        &env,
        &fixture.tree,
        "echo x > inside && echo y > \"$TMPDIR/t\" && cat inside \"$TMPDIR/t\" >/dev/null",
    )
    .await;
    assert_eq!(code, Some(0), "{text}");
    assert!(fixture.tree.join("inside").exists());
    assert!(fixture.tree.with_file_name("tmp").join("t").exists());
}

/// Agents' shells start pseudo-terminals (gemini's `forkpty`): a confined process may
/// open `/dev/ptmx` and the terminals under `/dev/pts`, which are not files.
#[tokio::test]
async fn confined_processes_can_open_pseudo_terminals() {
    if !kernel_has(Mechanism::Landlock) {
        return;
    }
    let fixture = fixture();
    let env = stage_env(&fixture, IsolationMode::Workspace, true);
    let (code, text) = sh(&env, &fixture.tree, "exec 3<>/dev/ptmx && echo opened").await;
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("opened"), "{text}");
}

#[tokio::test]
async fn hidden_paths_cannot_be_read() {
    if !kernel_has(Mechanism::MountNamespace) {
        return;
    }
    let fixture = fixture();
    let env = stage_env(&fixture, IsolationMode::Workspace, true);
    let secret = fixture.hidden.join("secret");
    let (code, text) = sh(&env, &fixture.tree, &format!("cat '{}'", secret.display())).await;
    assert_ne!(code, Some(0), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
    // A hidden file reads as empty.
    let mut isolation = settings(IsolationMode::Workspace, KernelSupport::detect());
    isolation.hidden_paths = vec![secret.clone()];
    let file_env = ProcessEnv::new(std::env::vars_os(), &[], &BTreeMap::new())
        .with_isolation(isolation)
        .for_stage(
            ProcessKind::Agent,
            &PrivateTmpDir::new(fixture.tree.with_file_name("tmp")),
        );
    let (_, text) = sh(
        &file_env,
        &fixture.tree,
        &format!("cat '{}'", secret.display()),
    )
    .await;
    assert!(!text.contains("s3cret"), "{text}");
    let none = stage_env(&fixture, IsolationMode::None, true);
    let (code, text) = sh(&none, &fixture.tree, &format!("cat '{}'", secret.display())).await;
    assert_eq!((code, text.as_str()), (Some(0), "s3cret"));
}

#[tokio::test]
async fn without_network_loopback_is_unreachable() {
    if !kernel_has(Mechanism::NetworkNamespace) {
        return;
    }
    if !Path::new("/bin/bash").exists() {
        fabro_test_support::skip("an isolation test", "no /bin/bash for /dev/tcp");
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!("/bin/bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}'");
    let fixture = fixture();
    let cut = stage_env(&fixture, IsolationMode::Workspace, false);
    let (code, text) = sh(&cut, &fixture.tree, &connect).await;
    assert_ne!(code, Some(0), "{text}");
    let open = stage_env(&fixture, IsolationMode::Workspace, true);
    let (code, text) = sh(&open, &fixture.tree, &connect).await;
    assert_eq!(code, Some(0), "{text}");
}

#[tokio::test]
async fn none_confines_nothing() {
    let fixture = fixture();
    let env = stage_env(&fixture, IsolationMode::None, false);
    assert!(!env.is_confined());
    assert_eq!(env.get("TMPDIR"), std::env::var_os("TMPDIR").as_ref());
    let outside = fixture.outside.join("written");
    let (code, text) = sh(
        &env,
        &fixture.tree,
        &format!("sh -c \"echo x > '{}'\"", outside.display()),
    )
    .await;
    assert_eq!(code, Some(0), "{text}");
    assert!(outside.exists());
}

#[tokio::test]
async fn reused_namespaces_keep_the_working_directory_and_hide_paths_created_later() {
    if !kernel_has(Mechanism::MountNamespace) || !kernel_has(Mechanism::Landlock) {
        return;
    }
    let fixture = fixture();
    let later = fixture.outside.join("later");
    let mut isolation = settings(IsolationMode::Workspace, KernelSupport::detect());
    isolation.hidden_paths = vec![fixture.hidden.clone(), later.clone()];
    let env = ProcessEnv::new(std::env::vars_os(), &[], &BTreeMap::new())
        .with_isolation(isolation)
        .for_stage(
            ProcessKind::Command,
            &PrivateTmpDir::new(fixture.tree.with_file_name("tmp")),
        );
    let read_secret = format!("cat '{}'", fixture.hidden.join("secret").display());
    // Several starts share one set of namespaces; each still starts in its own
    // working directory, writes there, and cannot read the hidden file.
    for round in 0..3 {
        let (code, text) = sh(
            &env,
            &fixture.tree,
            &format!("pwd; echo {round} > r{round}"),
        )
        .await;
        assert_eq!(code, Some(0), "{text}");
        assert_eq!(text.trim(), fixture.tree.display().to_string());
        assert!(fixture.tree.join(format!("r{round}")).exists());
        let (code, text) = sh(&env, &fixture.tree, &read_secret).await;
        assert_ne!(code, Some(0), "{text}");
        assert!(!text.contains("s3cret"), "{text}");
    }
    // A hidden path that appears after the namespaces were made is hidden from the
    // next start too.
    fs_err::create_dir_all(&later).unwrap();
    fs_err::write(later.join("note"), "l4ter").unwrap();
    let (_, text) = sh(
        &env,
        &fixture.tree,
        &format!("cat '{}'", later.join("note").display()),
    )
    .await;
    assert!(!text.contains("l4ter"), "{text}");
    let (code, text) = sh(&env, &fixture.tree, &read_secret).await;
    assert_ne!(code, Some(0), "{text}");
    // Another stage of the run (another working directory and TMPDIR) is confined to
    // its own.
    let other = fixture.outside.join("other");
    fs_err::create_dir_all(&other).unwrap();
    let (code, text) = sh(
        &env,
        &other,
        &format!("echo x > '{}'", fixture.tree.join("from-other").display()),
    )
    .await;
    // `env` confines to the directory the command runs in: `other` now, not the tree.
    assert_ne!(code, Some(0), "{text}");
    assert!(!fixture.tree.join("from-other").exists());
}

mod spawn;

#[test]
fn only_the_mechanisms_asked_for_are_probed() {
    let landlock_only = KernelSupport::detect_only(&[Mechanism::Landlock]);
    assert!(!landlock_only.supports(Mechanism::MountNamespace));
    assert!(!landlock_only.supports(Mechanism::NetworkNamespace));
    assert_eq!(
        landlock_only.supports(Mechanism::Landlock),
        KernelSupport::detect().supports(Mechanism::Landlock)
    );
    assert_eq!(KernelSupport::detect_only(&[]), KernelSupport::none());
}

#[tokio::test]
async fn paths_replaced_between_starts_are_resolved_again() {
    if !kernel_has(Mechanism::MountNamespace) || !kernel_has(Mechanism::Landlock) {
        return;
    }
    let fixture = fixture();
    let env = stage_env(&fixture, IsolationMode::Workspace, true);
    let (code, text) = sh(&env, &fixture.tree, "echo 1 > first").await;
    assert_eq!(code, Some(0), "{text}");
    // The working tree removed and made again: a new directory under the same name,
    // still writable.
    fs_err::remove_dir_all(&fixture.tree).unwrap();
    fs_err::create_dir_all(&fixture.tree).unwrap();
    let (code, text) = sh(&env, &fixture.tree, "echo 2 > second").await;
    assert_eq!(code, Some(0), "{text}");
    assert!(fixture.tree.join("second").exists());
    // The hidden directory moved away and another made in its place: the new one is
    // hidden too.
    fs_err::rename(&fixture.hidden, fixture.outside.join("moved")).unwrap();
    fs_err::create_dir_all(&fixture.hidden).unwrap();
    fs_err::write(fixture.hidden.join("secret"), "n3w").unwrap();
    let (_, text) = sh(
        &env,
        &fixture.tree,
        &format!("cat '{}'", fixture.hidden.join("secret").display()),
    )
    .await;
    assert!(!text.contains("n3w"), "{text}");
}

/// Decision 68: an agent program may write its state directory and file even when
/// they did not exist before (Landlock can only allow paths that exist), while a command, which has
/// no state directories, does not get it created.
#[tokio::test]
async fn missing_state_directories_are_created_for_confined_agents() {
    if !kernel_has(Mechanism::Landlock) {
        return;
    }
    let fixture = fixture();
    let state = fixture.outside.join("home/.agent");
    let config = fixture.outside.join("home/.agent.json");
    let mut isolation = settings(IsolationMode::Workspace, KernelSupport::detect());
    isolation.writable_paths = vec![state.clone(), config.clone()];
    isolation.state_dirs = vec![state.clone()];
    isolation.state_files = vec![config.clone()];
    let env = ProcessEnv::new(std::env::vars_os(), &[], &BTreeMap::new()).with_isolation(isolation);
    let tmpdir = PrivateTmpDir::new(fixture.tree.with_file_name("tmp"));
    let command = env.for_stage(ProcessKind::Command, &tmpdir);
    let script = format!("mkdir -p '{0}' && echo x > '{0}/log'", state.display());
    let (code, _) = sh(&command, &fixture.tree, &script).await;
    assert_ne!(code, Some(0));
    assert!(!state.exists());
    let agent = env.for_stage(ProcessKind::Agent, &tmpdir);
    let (code, text) = sh(&agent, &fixture.tree, &script).await;
    assert_eq!(code, Some(0), "{text}");
    assert!(state.join("log").exists());
    // A JSON state file starts as an empty object the program can rewrite in place.
    assert_eq!(fs_err::read_to_string(&config).unwrap(), "{}\n");
    let rewrite = format!("echo '{{\"a\": 1}}' > '{}'", config.display());
    let (code, text) = sh(&agent, &fixture.tree, &rewrite).await;
    assert_eq!(code, Some(0), "{text}");
}
