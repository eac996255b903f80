//! Failures of fabro's own storage (issue 14 item 6): a full disk under `FABRO_HOME` stops
//! the run at once as `canceled` with an `engine error:` reason naming the cause (exit 1),
//! and after space is freed `fabro resume` runs the interrupted stage again and finishes.
//!
//! The full disk is a tiny tmpfs mounted in a private user and mount namespace (`unshare`),
//! so the test needs no privileges and leaves no mount behind; it skips where the kernel or
//! the machine does not allow that.

use fabro_test_support::TestEnv;
use serde_json::Value;

/// `s2` prints 600 KB, more than the filled tmpfs has left; `s1` and `s3` print a line.
/// Every stage appends its id to `trace` outside `FABRO_HOME`.
fn workflow(env: &TestEnv) -> String {
    let trace = env.work_dir().join("trace");
    let trace = trace.display();
    format!(
        r#"digraph w {{
  start [shape=Mdiamond]
  exit [shape=Msquare]
  s1 [shape=parallelogram, script="echo s1 >> {trace}; echo one"]
  s2 [shape=parallelogram, script="echo s2 >> {trace}; head -c 600000 /dev/zero | tr '\\0' x"]
  s3 [shape=parallelogram, script="echo s3 >> {trace}; echo three"]
  start -> s1 -> s2 -> s3 -> exit
}}
"#
    )
}

/// Mounts a 2 MB tmpfs over `FABRO_HOME`, fills all but about 400 KB of it, runs the
/// workflow, frees the space, resumes, and copies `FABRO_HOME` out to `home-copy`.
const SCRIPT: &str = r#"
mount -t tmpfs -o size=2m tmpfs "$FABRO_HOME" || exit 90
head -c 1600000 /dev/zero > "$FABRO_HOME/filler" || exit 91
"$FABRO" run w.fabro --run-id r1 > run.out 2> run.err
echo $? > run.code
rm "$FABRO_HOME/filler"
"$FABRO" resume r1 > resume.out 2> resume.err
echo $? > resume.code
cp -a "$FABRO_HOME/." home-copy/
"#;

fn read(env: &TestEnv, name: &str) -> String {
    fs_err::read_to_string(env.work_dir().join(name)).unwrap_or_default()
}

#[test]
fn a_full_disk_cancels_the_run_and_resume_runs_the_stage_again() {
    let env = TestEnv::new("storage_full_disk");
    env.write("w.fabro", &workflow(&env));
    fs_err::create_dir_all(env.work_dir().join("home-copy")).expect("copy dir");
    let output = env
        .command("unshare")
        .args(["--user", "--map-root-user", "--mount", "sh", "-c", SCRIPT])
        .env("FABRO", env!("CARGO_BIN_EXE_fabro"))
        .output();
    let Ok(output) = output else {
        eprintln!("skipped: unshare is not installed");
        return;
    };
    if matches!(output.status.code(), Some(90 | 91) | None)
        || (!output.status.success() && read(&env, "run.code").is_empty())
    {
        eprintln!(
            "skipped: cannot mount a tmpfs in a user namespace here: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        return;
    }
    let run_err = read(&env, "run.err");
    assert_eq!(read(&env, "run.code").trim(), "1", "{run_err}");
    assert!(
        run_err.contains("engine error") && run_err.contains("No space left on device"),
        "{run_err}"
    );
    let trace = read(&env, "trace");
    assert_eq!(
        trace.lines().collect::<Vec<_>>(),
        ["s1", "s2", "s2", "s3"],
        "s3 must not run on a full disk, and s2 runs again on resume\nrun: {run_err}\nresume: {}",
        read(&env, "resume.err")
    );
    assert_eq!(
        read(&env, "resume.code").trim(),
        "0",
        "{}",
        read(&env, "resume.err")
    );

    let run_dir = env.work_dir().join("home-copy/scratch/r1");
    let events: Vec<Value> = fs_err::read_to_string(run_dir.join("events.jsonl"))
        .expect("events")
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let stop = events
        .iter()
        .find(|event| event["event"] == "WorkflowRunFailed")
        .expect("the first run's end is recorded");
    let reason = stop["properties"]["error"]
        .as_str()
        .or_else(|| stop["properties"]["reason"].as_str())
        .unwrap_or_default();
    assert!(
        reason.starts_with("engine error") && reason.contains("No space left on device"),
        "{stop}"
    );
    assert_eq!(stop["properties"]["failure_class"], "canceled", "{stop}");
    let checkpoint: Value = serde_json::from_str(
        &fs_err::read_to_string(run_dir.join("checkpoint.json")).expect("checkpoint"),
    )
    .expect("json");
    assert_eq!(checkpoint["run_status"], "success");
    assert_eq!(checkpoint["node_outcomes"]["s2"]["status"], "success");
}
