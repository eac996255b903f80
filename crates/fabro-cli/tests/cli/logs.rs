//! `fabro logs RUN [NODE] [--follow]` (SPEC 17.4): a stage's output, and following a
//! running command as it writes.

use std::io::{BufRead, BufReader, Read};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fabro_test_support::TestEnv;

use crate::{code, fabro, stderr, stdout};

/// Waits until `condition` holds, failing the test after 30 s.
fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Creates the marker when dropped, so that a failing test never leaves the run waiting.
struct ReleaseOnDrop(std::path::PathBuf);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        let _ = fs_err::write(&self.0, "");
    }
}

#[test]
fn logs_follow_prints_a_running_commands_output_as_it_appears() {
    let env = TestEnv::new("logs_follow");
    let marker = env.work_dir().join("marker");
    env.write(
        "w.fabro",
        &format!(
            r#"digraph w {{
  start [shape=Mdiamond]
  exit [shape=Msquare]
  slow [shape=parallelogram, script="echo first line; while [ ! -e {marker} ]; do sleep 0.02; done; echo second line; echo oops >&2"]
  start -> slow -> exit
}}
"#,
            marker = marker.display()
        ),
    );
    let release = ReleaseOnDrop(marker.clone());
    let run = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro", "--run-id", "r1"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fabro starts");
    let stage_log = env
        .fabro_home()
        .join("scratch/r1/stages/002-slow@1/stdout.log");
    wait_for("the slow stage to start", || stage_log.exists());

    let mut follower = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["logs", "r1", "slow", "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the follower starts");
    let follower_stdout = follower.stdout.take().expect("piped stdout");
    let (lines_sender, lines) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut reader = BufReader::new(follower_stdout);
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if lines_sender.send(line).is_err() {
                        break;
                    }
                }
            }
        }
    });
    // The first line arrives while the command still waits for the marker.
    let first = lines
        .recv_timeout(Duration::from_secs(30))
        .expect("the follower printed the first line while the stage runs");
    assert_eq!(first, "first line\n");
    assert!(!marker.exists());
    drop(release);

    let status = follower.wait().expect("the follower exits");
    reader.join().expect("reader thread");
    let rest: Vec<String> = lines.try_iter().collect();
    assert_eq!(rest, ["second line\n", "oops\n"]);
    let mut follower_stderr = String::new();
    follower
        .stderr
        .take()
        .expect("piped stderr")
        .read_to_string(&mut follower_stderr)
        .expect("stderr readable");
    assert_eq!(status.code(), Some(0), "{follower_stderr}");

    let run = run.wait_with_output().expect("the run ends");
    assert_eq!(code(&run), 0, "{}", stderr(&run));

    // At rest: stdout.log, then stderr.log.
    let output = fabro(&env, &["logs", "r1", "slow"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(stdout(&output), "first line\nsecond line\noops\n");
    // `--follow` on a finished stage prints it and exits.
    let output = fabro(&env, &["logs", "r1", "slow", "--follow"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(stdout(&output), "first line\nsecond line\noops\n");
}

#[test]
fn logs_show_responses_answers_and_the_last_stage_and_reject_unknown_nodes() {
    let env = TestEnv::new("logs_kinds");
    env.write(
        "w.fabro",
        r#"digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  think [shape=box, prompt="Think hard"]
  gate [shape=hexagon, label="Ship it?"]
  fix [shape=parallelogram, script="echo fixing"]
  done [shape=parallelogram, script="echo all done"]
  start -> think -> gate
  gate -> done [label="[A] Approve"]
  gate -> fix [label="[F] Fix"]
  fix -> done
  done -> exit
}
"#,
    );
    env.write(
        "responses.json",
        r#"{"nodes": {"think": [{"text": "A considered answer."}]}}"#,
    );
    let output = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro", "--run-id", "r1", "--answer", "gate=A"])
        .env(
            "FABRO_SIMULATED_RESPONSES",
            env.work_dir().join("responses.json"),
        )
        .output()
        .expect("fabro runs");
    assert_eq!(code(&output), 0, "{}", stderr(&output));

    let think = fabro(&env, &["logs", "r1", "think"]);
    assert_eq!(code(&think), 0, "{}", stderr(&think));
    let response = fs_err::read_to_string(
        env.fabro_home()
            .join("scratch/r1/stages/002-think@1/response.md"),
    )
    .expect("response.md");
    assert!(response.contains("A considered answer."), "{response}");
    // Issue 28 item 8: the response ends with exactly one newline on the terminal, so
    // the shell prompt is not glued to it, whether response.md has one or not.
    assert_eq!(
        stdout(&think),
        format!("{}\n", response.trim_end_matches('\n'))
    );

    let gate = fabro(&env, &["logs", "r1", "gate"]);
    assert_eq!(code(&gate), 0, "{}", stderr(&gate));
    assert_eq!(stdout(&gate), "[A] Approve\n");

    // Without NODE: the last stage (exit, which prints nothing); a prefix names the run.
    let last = fabro(&env, &["logs", "r1"]);
    assert_eq!(code(&last), 0, "{}", stderr(&last));
    assert_eq!(stdout(&last), "");
    let done = fabro(&env, &["logs", "r1", "done"]);
    assert_eq!(stdout(&done), "all done\n");

    let unknown = fabro(&env, &["logs", "r1", "nosuch"]);
    assert_eq!(code(&unknown), 2);
    assert!(
        stderr(&unknown).contains("unknown node 'nosuch'"),
        "{}",
        stderr(&unknown)
    );
    // A node of the workflow that never ran has no stage.
    let never = fabro(&env, &["logs", "r1", "fix"]);
    assert_eq!(code(&never), 2);
    assert!(stderr(&never).contains("fix"), "{}", stderr(&never));
    assert_eq!(code(&fabro(&env, &["logs", "nope", "x"])), 2);
}
