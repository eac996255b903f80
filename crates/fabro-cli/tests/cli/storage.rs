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
/// workflow, keeps its checkpoint, frees the space, resumes, and copies `FABRO_HOME` out to
/// `home-copy`.
const SCRIPT: &str = r#"
mount -t tmpfs -o size=2m tmpfs "$FABRO_HOME" || exit 90
head -c 1600000 /dev/zero > "$FABRO_HOME/filler" || exit 91
"$FABRO" run w.fabro --run-id r1 > run.out 2> run.err
echo $? > run.code
cp "$FABRO_HOME/scratch/r1/checkpoint.json" first-checkpoint.json
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
        fabro_test_support::skip(
            "a_full_disk_cancels_the_run_and_resume_runs_the_stage_again",
            "the `unshare` program is not installed",
        );
        return;
    };
    if matches!(output.status.code(), Some(90 | 91) | None)
        || (!output.status.success() && read(&env, "run.code").is_empty())
    {
        fabro_test_support::skip(
            "a_full_disk_cancels_the_run_and_resume_runs_the_stage_again",
            &format!(
                "cannot mount a tmpfs in a user namespace here: {}",
                String::from_utf8_lossy(&output.stderr)
            ),
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

    let run_out = read(&env, "run.out");
    assert!(run_out.contains("status: canceled\n"), "{run_out}");
    assert!(
        run_out.contains("reason: engine error: ") && run_out.contains("No space left on device"),
        "{run_out}"
    );
    // The run stopped resumable: its checkpoint is the last complete one, before s2.
    let first: Value =
        serde_json::from_str(&read(&env, "first-checkpoint.json")).expect("first checkpoint");
    assert_eq!(first["run_status"], "canceled", "{first}");
    assert_eq!(first["next_node_id"], "s2", "{first}");

    let run_dir = env.work_dir().join("home-copy/scratch/r1");
    let checkpoint: Value = serde_json::from_str(
        &fs_err::read_to_string(run_dir.join("checkpoint.json")).expect("checkpoint"),
    )
    .expect("json");
    assert_eq!(checkpoint["run_status"], "success");
    assert_eq!(checkpoint["node_outcomes"]["s2"]["status"], "success");
}

/// Branch `a` writes 800 KB of random bytes into its worktree (under `FABRO_HOME`, on the
/// real disk); the git object for them does not fit on the repository's filled tmpfs.
const PARALLEL: &str = r#"digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  fan [shape=component]
  a [shape=parallelogram, script="head -c 800000 /dev/urandom > a.bin"]
  b [shape=parallelogram, script="echo b > b.txt"]
  merge [shape=tripleoctagon]
  start -> fan
  fan -> a -> merge
  fan -> b -> merge
  merge -> exit
}
"#;

/// Mounts a 4 MB tmpfs as the repository, fills all but about 400 KB, runs, frees the
/// space and resumes.
const REPO_SCRIPT: &str = r#"
mount -t tmpfs -o size=4m tmpfs repo || exit 90
cd repo
git init -q -b main && cp ../w.fabro . && git add w.fabro && git commit -q -m init || exit 92
head -c 3600000 /dev/zero > ../repo/.git/filler || exit 91
"$FABRO" run w.fabro --run-id r1 > ../run.out 2> ../run.err
echo $? > ../run.code
rm .git/filler
"$FABRO" resume r1 > ../resume.out 2> ../resume.err
echo $? > ../resume.code
git rev-parse --verify -q fabro/run/r1:a.bin > ../a.blob || true
git fsck --strict > ../fsck.out 2>&1
echo $? > ../fsck.code
"#;

#[test]
fn a_full_repository_disk_stops_a_parallel_stage_with_the_cause() {
    let env = TestEnv::new("storage_full_repository");
    env.write("w.fabro", PARALLEL);
    fs_err::create_dir_all(env.work_dir().join("repo")).expect("repo dir");
    let output = env
        .command("unshare")
        .args([
            "--user",
            "--map-root-user",
            "--mount",
            "sh",
            "-c",
            REPO_SCRIPT,
        ])
        .env("FABRO", env!("CARGO_BIN_EXE_fabro"))
        .output();
    let Ok(output) = output else {
        fabro_test_support::skip(
            "a_full_repository_disk_stops_a_parallel_stage_with_the_cause",
            "the `unshare` program is not installed",
        );
        return;
    };
    if matches!(output.status.code(), Some(90..=92) | None)
        || (!output.status.success() && read(&env, "run.code").is_empty())
    {
        fabro_test_support::skip(
            "a_full_repository_disk_stops_a_parallel_stage_with_the_cause",
            &format!(
                "cannot mount a tmpfs in a user namespace here: {}",
                String::from_utf8_lossy(&output.stderr)
            ),
        );
        return;
    }
    let (run_out, run_err) = (read(&env, "run.out"), read(&env, "run.err"));
    assert_eq!(read(&env, "run.code").trim(), "1", "{run_out}\n{run_err}");
    assert!(run_out.contains("status: canceled\n"), "{run_out}");
    assert!(
        run_out.contains("reason: engine error: ") && run_out.contains("No space left on device"),
        "{run_out}\n{run_err}"
    );
    assert_eq!(
        read(&env, "resume.code").trim(),
        "0",
        "{}",
        read(&env, "resume.err")
    );
    assert!(read(&env, "resume.out").contains("status: success"));
    assert!(
        !read(&env, "a.blob").trim().is_empty(),
        "a.bin is not on the run branch"
    );
    assert_eq!(
        read(&env, "fsck.code").trim(),
        "0",
        "{}",
        read(&env, "fsck.out")
    );
}
