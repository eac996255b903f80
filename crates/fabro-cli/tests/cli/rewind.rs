//! `fabro rewind` (SPEC 20.3) on runs with git checkpointing: a finished run moved back
//! to stage 2 runs stage 3 on again when resumed; nothing is deleted (the previous head
//! under `refs/fabro-rewound/{id}/{k}`, the later stages under `rewound/{k}/`); `fabro
//! inspect` shows both; a running run is refused; a rewind killed at any step is
//! finished by `fabro resume` or by the same rewind again.

use std::process::Stdio;
use std::time::{Duration, Instant};

use fabro_test_support::TestEnv;
use serde_json::Value;

use crate::fork::{fabro_sim, init_repo, six_stages, stage_commit, started_stages, take_trace};
use crate::git::{git, git_available};
use crate::lifecycle::{assert_fsck_clean, kill, refs, spawn, wait_for_file};
use crate::{code, fabro, stderr, stdout};

fn inspect_json(env: &TestEnv, run_id: &str) -> Value {
    let output = fabro(env, &["inspect", run_id, "--json"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    serde_json::from_str(&stdout(&output)).expect("JSON")
}

fn ranks(stages: &Value) -> Vec<u64> {
    stages
        .as_array()
        .expect("stages")
        .iter()
        .map(|stage| stage["rank"].as_u64().expect("rank"))
        .collect()
}

/// The `RunRewound` events of the run, as `(k, to_rank)`.
fn rewound_events(env: &TestEnv, run_id: &str) -> Vec<(u64, u64)> {
    fs_err::read_to_string(
        env.fabro_home()
            .join(format!("scratch/{run_id}/events.jsonl")),
    )
    .expect("events")
    .lines()
    .filter_map(|line| serde_json::from_str::<Value>(line).ok())
    .filter(|event| event["event"] == "RunRewound")
    .map(|event| {
        let properties = &event["properties"];
        (
            properties["k"].as_u64().expect("k"),
            properties["to_rank"].as_u64().expect("to_rank"),
        )
    })
    .collect()
}

#[test]
fn a_finished_run_rewound_to_stage_2_runs_stage_3_on_again_when_resumed() {
    if !git_available("a_finished_run_rewound_to_stage_2_runs_stage_3_on_again") {
        return;
    }
    let env = TestEnv::new("rewind_resume");
    let trace = env.fabro_home().join("trace");
    init_repo(&env, &six_stages(&trace, "Think"));
    let output = fabro_sim(&env, &["run", "w.fabro", "--run-id", "r1"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    take_trace(&env);
    let old_head = git(&env, &["rev-parse", "fabro/run/r1"]).trim().to_owned();
    let stage_2 = stage_commit(&env, "r1", "a");

    let output = fabro(&env, &["rewind", "r1", "--to-rank", "2"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "rewound run r1 to stage 2 (a@1), rewind 1\n"
    );
    assert!(
        stderr(&output).contains("fabro resume r1"),
        "{}",
        stderr(&output)
    );
    // Nothing deleted: the old head is kept, the later stages moved aside.
    assert_eq!(
        git(&env, &["rev-parse", "refs/fabro-rewound/r1/1"]).trim(),
        old_head
    );
    assert_eq!(git(&env, &["rev-parse", "fabro/run/r1"]).trim(), stage_2);
    let document = inspect_json(&env, "r1");
    assert_eq!(document["status"], "interrupted");
    assert_eq!(ranks(&document["stages"]), [1, 2]);
    assert_eq!(document["rewound"][0]["k"], 1);
    assert_eq!(ranks(&document["rewound"][0]["stages"]), [3, 4, 5, 6]);
    assert_eq!(rewound_events(&env, "r1"), [(1, 2)]);
    assert_fsck_clean(&env);

    let resumed = fabro_sim(&env, &["resume", "r1"]);
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
    assert_eq!(take_trace(&env), ["b", "c"], "stages 3 on run again");
    let started = started_stages(&env, "r1");
    assert_eq!(
        started[started.len() - 4..],
        [
            (3, "think".to_owned()),
            (4, "b".to_owned()),
            (5, "c".to_owned()),
            (6, "exit".to_owned())
        ]
    );
    // The simulated cursor went back with the checkpoint: the first reply again.
    let response = fs_err::read_to_string(
        env.fabro_home()
            .join("scratch/r1/stages/003-think@1/response.md"),
    )
    .expect("response");
    assert!(response.contains("first thought"), "{response}");
    let document = inspect_json(&env, "r1");
    assert_eq!(document["status"], "success");
    assert_eq!(ranks(&document["stages"]), [1, 2, 3, 4, 5, 6]);
    assert_eq!(ranks(&document["rewound"][0]["stages"]), [3, 4, 5, 6]);
    let text = stdout(&fabro(&env, &["inspect", "r1"]));
    assert!(
        text.contains("rewound by rewind 1 (not current):"),
        "{text}"
    );
    assert_fsck_clean(&env);

    // A second rewind is number 2.
    let head = git(&env, &["rev-parse", "fabro/run/r1"]).trim().to_owned();
    let output = fabro(&env, &["rewind", "r1", "--to", "b", "--json"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let rewound: Value = serde_json::from_str(&stdout(&output)).expect("JSON");
    assert_eq!(rewound["k"], 2);
    assert_eq!(rewound["to_rank"], 4);
    assert_eq!(
        git(&env, &["rev-parse", "refs/fabro-rewound/r1/2"]).trim(),
        head
    );
    assert_eq!(rewound_events(&env, "r1"), [(1, 2), (2, 4)]);
    // A stage the run does not have is a usage error.
    let output = fabro(&env, &["rewind", "r1", "--to", "nowhere"]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
}

#[test]
fn a_running_run_is_not_rewound() {
    let env = TestEnv::new("rewind_running");
    env.write(
        "w.fabro",
        "digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  a [shape=parallelogram, script=\"echo a\"]
  slow [shape=parallelogram, script=\"touch started; sleep 30\"]
  start -> a -> slow -> exit
}
",
    );
    let mut child = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro", "--run-id", "busy"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("fabro starts");
    let started = env.work_dir().join("started");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !started.exists() {
        assert!(Instant::now() < deadline, "the slow stage never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    let output = fabro(&env, &["rewind", "busy", "--to", "a"]);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("is running"),
        "{}",
        stderr(&output)
    );
    assert!(!env.fabro_home().join("scratch/busy/rewound").exists());
}

/// A rewind back before a parallel stage runs its branches again when resumed: the
/// finished branches recorded for the old line go aside with its stages.
#[test]
fn a_parallel_stage_after_the_rewind_runs_its_branches_again() {
    let env = TestEnv::new("rewind_parallel");
    let trace = env.fabro_home().join("trace");
    let trace = trace.display();
    env.write(
        "w.fabro",
        &format!(
            r#"digraph w {{
  start [shape=Mdiamond]
  exit [shape=Msquare]
  a [shape=parallelogram, script="echo a >> {trace}"]
  fan [shape=component]
  p1 [shape=parallelogram, script="echo p1 >> {trace}"]
  p2 [shape=parallelogram, script="echo p2 >> {trace}"]
  merge [shape=tripleoctagon]
  start -> a -> fan
  fan -> p1 -> merge
  fan -> p2 -> merge
  merge -> exit
}}
"#
        ),
    );
    let output = fabro(&env, &["run", "w.fabro", "--run-id", "par"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let mut first = take_trace(&env);
    first.sort();
    assert_eq!(first, ["a", "p1", "p2"]);
    let output = fabro(&env, &["rewind", "par", "--to", "a"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let output = fabro(&env, &["resume", "par"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let mut again = take_trace(&env);
    again.sort();
    assert_eq!(again, ["p1", "p2"], "both branches run again");
    assert!(env
        .fabro_home()
        .join("scratch/par/rewound/1/parallel")
        .is_dir());
}

/// Crash safety: a rewind killed with SIGKILL after its record, after its git steps and
/// after moving the stages is finished by `fabro resume` (which then runs stages 3 on)
/// or by the same rewind again; it stays rewind 1, no stage is lost, git stays
/// consistent.
#[test]
fn a_rewind_killed_at_any_step_is_finished_by_resume_or_by_repeating_it() {
    if !git_available("a_rewind_killed_at_any_step_is_finished") {
        return;
    }
    let env = TestEnv::new("rewind_kill");
    let trace = env.fabro_home().join("trace");
    init_repo(&env, &six_stages(&trace, "Think"));
    for (index, (point, finish_by_resume)) in [
        ("rewind_recorded", true),
        ("rewind_recorded", false),
        ("rewind_git", false),
        ("rewind_stages", true),
    ]
    .into_iter()
    .enumerate()
    {
        let run_id = format!("k{index}");
        let output = fabro_sim(&env, &["run", "w.fabro", "--run-id", &run_id]);
        assert_eq!(code(&output), 0, "{}", stderr(&output));
        take_trace(&env);
        let old_head = git(&env, &["rev-parse", &format!("fabro/run/{run_id}")]);
        let marker = env.fabro_home().join(format!("test-paused-{point}"));
        let mut child = spawn(
            &env,
            &["rewind", &run_id, "--to-rank", "2"],
            &[("FABRO_TEST_PAUSE_AT", point)],
        );
        wait_for_file(&marker, &mut child, &format!("rewind at {point}"));
        kill(child);
        fs_err::remove_file(&marker).expect("marker");
        if !finish_by_resume {
            let output = fabro(&env, &["rewind", &run_id, "--to-rank", "2"]);
            assert_eq!(code(&output), 0, "{point}: {}", stderr(&output));
            assert!(
                stdout(&output).ends_with("rewind 1\n"),
                "{}",
                stdout(&output)
            );
        }
        let resumed = fabro_sim(&env, &["resume", &run_id]);
        assert_eq!(code(&resumed), 0, "{point}: {}", stderr(&resumed));
        assert_eq!(take_trace(&env), ["b", "c"], "{point}: stages 3 on, once");
        assert_eq!(
            refs(&env, &format!("refs/fabro-rewound/{run_id}/")),
            [format!("refs/fabro-rewound/{run_id}/1")],
            "{point}"
        );
        assert_eq!(
            git(
                &env,
                &["rev-parse", &format!("refs/fabro-rewound/{run_id}/1")]
            ),
            old_head
        );
        assert_eq!(rewound_events(&env, &run_id), [(1, 2)], "{point}");
        let document = inspect_json(&env, &run_id);
        assert_eq!(document["status"], "success", "{point}");
        assert_eq!(ranks(&document["stages"]), [1, 2, 3, 4, 5, 6], "{point}");
        assert_eq!(document["rewound"].as_array().map(Vec::len), Some(1));
        assert_eq!(ranks(&document["rewound"][0]["stages"]), [3, 4, 5, 6]);
        assert_fsck_clean(&env);
    }
}
