//! `fabro resume`: continuing cancelled and killed runs (SPEC 8.7) without git.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use fabro_test_support::TestEnv;
use serde_json::Value;

use crate::{code, fabro, stderr, stdout};

/// Every stage appends its id to the trace file (outside the working directory, so that
/// git resets do not touch it) and writes a file of its own, so re-executions are
/// visible. The loop through `count` and `gate` makes routing depend on restored context
/// and visit counts, and the simulated `think` stage consumes scripted replies, so
/// restored cursors matter too.
fn pipeline(trace: &Path) -> String {
    let trace = trace.display();
    format!(
        r#"digraph pipeline {{
  graph [goal="Resume safely"]
  start [shape=Mdiamond]
  exit [shape=Msquare]
  a [shape=parallelogram, script="echo a >> {trace}; echo a > a.txt; sleep 0.05"]
  count [shape=parallelogram, script="echo count >> {trace}; echo x >> count.txt; sleep 0.05; echo round"]
  gate [shape=diamond]
  think [shape=tab, prompt="Think"]
  b [shape=parallelogram, script="echo b >> {trace}; echo b > b.txt; sleep 0.05"]
  c [shape=parallelogram, script="echo c >> {trace}; echo c > c.txt; sleep 0.05"]
  start -> a -> count -> gate
  gate -> think [condition="context.internal.node_visit_count < 3"]
  gate -> b
  think -> count
  b -> c -> exit
}}
"#
    )
}

const RESPONSES: &str =
    r#"{"nodes": {"think": [{"text": "first thought"}, {"text": "second thought"}]}}"#;

fn checkpoint(run_dir: &Path) -> Value {
    serde_json::from_str(&fs_err::read_to_string(run_dir.join("checkpoint.json")).expect("read"))
        .expect("checkpoint is JSON")
}

fn start_run(env: &TestEnv, run_id: &str) -> std::process::Child {
    env.command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro", "--run-id", run_id])
        .env(
            "FABRO_SIMULATED_RESPONSES",
            env.work_dir().join("responses.json"),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("fabro starts")
}

fn resume(env: &TestEnv, target: &str) -> std::process::Output {
    env.command(env!("CARGO_BIN_EXE_fabro"))
        .args(["resume", target])
        .env(
            "FABRO_SIMULATED_RESPONSES",
            env.work_dir().join("responses.json"),
        )
        .output()
        .expect("fabro runs")
}

/// The parts of the final state that must not depend on interruptions.
fn final_state(run_dir: &Path) -> (Vec<Value>, Value, Value) {
    let checkpoint = checkpoint(run_dir);
    let mut context = checkpoint["context_values"].clone();
    if let Some(map) = context.as_object_mut() {
        // Blob refs of command output are content hashes, so they are compared too; only
        // the run id differs between the runs compared.
        map.remove("internal.run_id");
        // With git each run works in its own worktree.
        map.remove("internal.work_dir");
    }
    (
        checkpoint["completed_nodes"]
            .as_array()
            .expect("list")
            .clone(),
        context,
        checkpoint["run_status"].clone(),
    )
}

fn trace(env: &TestEnv, name: &str) -> Vec<String> {
    fs_err::read_to_string(env.work_dir().join(name))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_cancelled_run_resumes_where_it_stopped() {
    let env = TestEnv::new("resume_cancel");
    let workflow = "digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  a [shape=parallelogram, script=\"echo a >> trace\"]
  slow [shape=parallelogram, script=\"echo slow >> trace; touch started; sleep 30\"]
  c [shape=parallelogram, script=\"echo c >> trace\"]
  start -> a -> slow -> c -> exit
}
";
    env.write("w.fabro", workflow);
    env.write("responses.json", "{}");
    let child = start_run(&env, "r1");
    let started = env.work_dir().join("started");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !started.exists() {
        assert!(Instant::now() < deadline, "the slow stage never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid fits"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("signal sent");
    let output = child.wait_with_output().expect("exits");
    assert_eq!(code(&output), 130);
    let run_dir = env.fabro_home().join("scratch/r1");
    let canceled = checkpoint(&run_dir);
    assert_eq!(canceled["run_status"], "canceled");
    assert_eq!(canceled["next_node_id"], "slow");
    // The interrupted visit is not counted: the resume runs it as the same visit.
    assert_eq!(canceled["node_visits"].get("slow"), None);

    // Resume, and cancel the resumed run in the same stage: a resumed run runs the
    // interrupted stage again and checkpoints like a fresh one.
    fs_err::remove_file(&started).expect("remove marker");
    let resumed = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["resume", "r1", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("resume starts");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !started.exists() {
        assert!(Instant::now() < deadline, "the resumed stage never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = nix::unistd::Pid::from_raw(i32::try_from(resumed.id()).expect("pid fits"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("signal sent");
    let output = resumed.wait_with_output().expect("exits");
    assert_eq!(code(&output), 130, "{}", stderr(&output));
    let lines: Vec<Value> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).expect("NDJSON"))
        .collect();
    assert_eq!(lines[0]["event"], "WorkflowRunStarted");
    assert_eq!(lines[0]["properties"]["resumed"], true);
    assert_eq!(lines[0]["properties"]["next_node_id"], "slow");
    assert_eq!(trace(&env, "trace"), ["a", "slow", "slow"]);

    // Event ids continue across resumes without gaps or repeats.
    let ids: Vec<u64> = fs_err::read_to_string(run_dir.join("events.jsonl"))
        .expect("events")
        .lines()
        .map(|line| {
            serde_json::from_str::<Value>(line).expect("event")["id"]
                .as_u64()
                .expect("id")
        })
        .collect();
    assert_eq!(ids, (1..=ids.len() as u64).collect::<Vec<_>>());
    // The interrupted stage kept its rank: one directory for it, replaced each time.
    let stages: Vec<String> = fs_err::read_dir(run_dir.join("stages"))
        .expect("stages")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(
        stages.iter().filter(|name| name.contains("slow")).count(),
        1
    );
}

#[test]
fn finished_runs_and_unknown_runs_are_refused() {
    let env = TestEnv::new("resume_refused");
    env.write(
        "w.fabro",
        "digraph w { start [shape=Mdiamond]; exit [shape=Msquare]; start -> exit }",
    );
    let output = fabro(&env, &["run", "w.fabro", "--run-id", "done1"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let output = fabro(&env, &["resume", "done1"]);
    assert_eq!(code(&output), 2);
    assert!(
        stderr(&output).contains("error: run done1 already finished with status success"),
        "{}",
        stderr(&output)
    );
    let output = fabro(&env, &["resume", "nope"]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    let output = fabro(&env, &["resume", "fabro/run/missing"]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(stderr(&output).contains("missing"), "{}", stderr(&output));
}

/// A kill between the journal's final record and the replacement of `checkpoint.json`
/// leaves the file saying `running`: resume refuses the finished run and repairs the file.
#[test]
fn a_stale_checkpoint_file_of_a_finished_run_is_repaired() {
    let env = TestEnv::new("resume_stale_file");
    env.write(
        "w.fabro",
        "digraph w { start [shape=Mdiamond]; exit [shape=Msquare]; start -> exit }",
    );
    let output = fabro(&env, &["run", "w.fabro", "--run-id", "done1"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let path = env.fabro_home().join("scratch/done1/checkpoint.json");
    let finished = fs_err::read_to_string(&path).expect("checkpoint");
    let stale = finished.replace("\"run_status\":\"success\"", "\"run_status\":\"running\"");
    assert_ne!(stale, finished);
    fs_err::write(&path, &stale).expect("stale checkpoint");
    let output = fabro(&env, &["resume", "done1"]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    assert!(stderr(&output).contains("already finished with status success"));
    assert_eq!(fs_err::read_to_string(&path).expect("checkpoint"), finished);
}

/// After an operating-system crash the refs can lag behind the synced journal (ref
/// updates are not synced, the packs and the journal are). Resume moves them forward to
/// the journal's newest commit instead of running completed stages again.
#[test]
fn resume_recovers_refs_that_lag_behind_the_journal() {
    let env = TestEnv::new("resume_lagging_refs");
    // Outside the working directory: with git, commands run in the run's worktree.
    let trace_path = env.fabro_home().join("trace.txt");
    let go = env.fabro_home().join("go");
    env.write(
        "w.fabro",
        &format!(
            "digraph w {{
  start [shape=Mdiamond]
  exit [shape=Msquare]
  a [shape=parallelogram, script=\"echo a >> {trace}; echo a > a.txt\"]
  b [shape=parallelogram, script=\"if [ -e {go} ]; then echo b >> {trace}; else sleep 30; fi\"]
  start -> a -> b -> exit
}}
",
            trace = trace_path.display(),
            go = go.display()
        ),
    );
    env.write("responses.json", "{}");
    let git = |args: &[&str]| {
        let output = env.command("git").args(args).output().expect("git runs");
        assert!(output.status.success(), "git {args:?}: {output:?}");
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    };
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "w.fabro", "responses.json"]);
    git(&["commit", "-q", "-m", "init"]);
    let mut child = start_run(&env, "lag1");
    let run_dir = env.fabro_home().join("scratch/lag1");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = fs_err::read_to_string(run_dir.join("checkpoint.json")).unwrap_or_default();
        if text.contains("\"next_node_id\":\"b\"") && !text.contains("\"git_commit_sha\":null") {
            break;
        }
        assert!(Instant::now() < deadline, "the run never reached b");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    // Lose the last ref updates, as an operating-system crash could.
    let branch = "refs/heads/fabro/run/lag1";
    let a_commit = git(&["rev-parse", branch]);
    let metadata = git(&["rev-parse", "refs/fabro/lag1"]);
    git(&["update-ref", branch, &format!("{a_commit}~1")]);
    git(&["update-ref", "refs/fabro/lag1", &format!("{metadata}~1")]);
    fs_err::write(&go, "").expect("write");
    let output = resume(&env, "lag1");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let executed = fs_err::read_to_string(&trace_path).expect("trace");
    assert_eq!(executed, "a\nb\n", "a ran once");
    let subjects = git(&["log", "--format=%s", branch]);
    let subjects: Vec<&str> = subjects.lines().collect();
    assert_eq!(
        subjects,
        [
            "fabro(lag1): exit (success)",
            "fabro(lag1): b (success)",
            "fabro(lag1): a (success)",
            "fabro(lag1): start (success)",
            "init"
        ]
    );
    git(&["fsck", "--strict"]);
}

/// A run killed after its exit stage's checkpoint but before the final one: resuming
/// executes nothing and only finishes the run.
#[test]
fn a_run_killed_after_its_exit_stage_finishes_on_resume() {
    let env = TestEnv::new("resume_after_exit");
    env.write(
        "w.fabro",
        "digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  work [shape=parallelogram, script=\"echo ran >> trace.txt\"]
  start -> work -> exit
}
",
    );
    let output = fabro(&env, &["run", "w.fabro", "--run-id", "late1"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let run_dir = env.fabro_home().join("scratch/late1");
    // Drop the final checkpoint: the newest durable state is the exit stage's.
    let journal = fs_err::read_to_string(run_dir.join("journal.jsonl")).expect("journal");
    let lines: Vec<&str> = journal.lines().collect();
    fs_err::write(
        run_dir.join("journal.jsonl"),
        format!("{}\n", lines[..lines.len() - 1].join("\n")),
    )
    .expect("write");
    let text = fs_err::read_to_string(run_dir.join("checkpoint.json")).expect("checkpoint");
    fs_err::write(
        run_dir.join("checkpoint.json"),
        text.replace("\"run_status\":\"success\"", "\"run_status\":\"running\""),
    )
    .expect("write");
    let output = fabro(&env, &["resume", "late1"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(checkpoint(&run_dir)["run_status"], "success");
    assert_eq!(trace(&env, "trace.txt"), ["ran"], "nothing ran again");
    let events = fs_err::read_to_string(run_dir.join("events.jsonl")).expect("events");
    let last = events.lines().last().expect("events");
    assert!(last.contains("WorkflowRunCompleted"), "{last}");
}

/// Kills `fabro run` with SIGKILL at 20 moments spread over the run (stages, checkpoint
/// writes and everything between) and resumes until the run finishes. Every run must end
/// with the uninterrupted run's path and context, and only an interrupted stage may
/// execute twice.
#[test]
fn runs_killed_at_any_moment_resume_to_the_same_result() {
    kill_at_twenty_moments("resume_kill", false);
}

/// The same with git checkpointing: state from the metadata history, the worktree reset
/// to the last complete checkpoint, and the run branch's final tree identical.
#[test]
fn runs_with_git_killed_at_any_moment_resume_to_the_same_result() {
    if !crate::git::git_available("runs_with_git_killed_at_any_moment_resume_to_the_same_result") {
        return;
    }
    kill_at_twenty_moments("resume_kill_git", true);
}

/// Kills `fabro run` with SIGKILL at 20 moments spread over the run (stages, checkpoint
/// writes and everything between) and resumes until the run finishes. Every run must end
/// with the uninterrupted run's path and context (and, with git, run-branch tree), and
/// only an interrupted stage may execute twice.
fn kill_at_twenty_moments(name: &str, with_git: bool) {
    let env = TestEnv::new(name);
    let trace_path = env.fabro_home().join("trace");
    env.write("w.fabro", &pipeline(&trace_path));
    env.write("responses.json", RESPONSES);
    let git = |args: &[&str]| {
        let output = env.command("git").args(args).output().expect("git runs");
        assert!(output.status.success(), "git {args:?}");
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    };
    if with_git {
        git(&["init", "-q", "-b", "main"]);
        git(&["add", "w.fabro", "responses.json"]);
        git(&["commit", "-q", "-m", "init"]);
    }
    let run_tree = |run_id: &str| {
        with_git.then(|| git(&["rev-parse", &format!("fabro/run/{run_id}^{{tree}}")]))
    };
    let read_trace = || -> Vec<String> {
        fs_err::read_to_string(&trace_path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    };

    let reference_start = Instant::now();
    let output = start_run(&env, "reference").wait().expect("runs");
    let reference_duration = reference_start.elapsed();
    assert!(output.success());
    let reference = final_state(&env.fabro_home().join("scratch/reference"));
    let reference_tree = run_tree("reference");
    let reference_trace = read_trace();
    assert_eq!(reference.2, "success");
    assert_eq!(
        reference_trace,
        ["a", "count", "count", "count", "b", "c"],
        "the uninterrupted run's path"
    );

    let mut interrupted = 0;
    let mut repeated = 0;
    for attempt in 0..20u32 {
        fs_err::remove_file(&trace_path).unwrap_or_default();
        let run_id = format!("kill{attempt}");
        // Spread over the first 80% of the reference run, so that the kills land
        // inside runs even when later runs are faster than the first.
        let delay = reference_duration * (attempt + 1) / 26;
        let mut child = start_run(&env, &run_id);
        std::thread::sleep(delay);
        // The run may already have finished at the last moments; that is fine.
        let _ = child.kill();
        let status = child.wait().expect("reaped");
        if status.code().is_none() {
            interrupted += 1;
        }
        let run_dir = env.fabro_home().join("scratch").join(&run_id);
        let mut resumes = 0;
        loop {
            // A run exists once its manifest does (written after the initial checkpoint).
            let text = fs_err::read_to_string(run_dir.join("checkpoint.json"));
            let Some(text) = text.ok().filter(|_| run_dir.join("manifest.json").exists()) else {
                // Killed before the run existed: nothing ran, start again.
                let _ = fs_err::remove_dir_all(&run_dir);
                if with_git {
                    git(&["worktree", "prune"]);
                    let _ = env
                        .command("git")
                        .args(["branch", "-D", &format!("fabro/run/{run_id}")])
                        .output();
                    let _ = env
                        .command("git")
                        .args(["update-ref", "-d", &format!("refs/fabro/{run_id}")])
                        .output();
                }
                assert!(read_trace().is_empty());
                assert!(start_run(&env, &run_id).wait().expect("runs").success());
                break;
            };
            let state: Value = serde_json::from_str(&text).expect("checkpoint is never torn");
            if state["run_status"] != "running" && state["run_status"] != "canceled" {
                break;
            }
            let output = resume(&env, &run_id);
            resumes += 1;
            assert!(
                resumes < 3,
                "attempt {attempt}: resume did not finish: {}",
                stderr(&output)
            );
            // Killed after the journal's final record but before `checkpoint.json` was
            // replaced: the run had finished; the refusal repairs the file.
            if code(&output) == 2 && stderr(&output).contains("already finished") {
                continue;
            }
            assert_eq!(
                code(&output),
                0,
                "attempt {attempt} (killed: {status:?}): {}",
                stderr(&output)
            );
        }
        assert_eq!(
            final_state(&run_dir),
            reference,
            "attempt {attempt}: killed after {delay:?}"
        );
        assert_eq!(run_tree(&run_id), reference_tree, "attempt {attempt}");
        // Only the stage that was interrupted may have executed twice, right after itself.
        let executed = read_trace();
        let repeated_once = executed.len() == reference_trace.len() + 1
            && (1..executed.len()).any(|index| {
                let mut without = executed.clone();
                without.remove(index);
                executed[index] == executed[index - 1] && without == reference_trace
            });
        assert!(
            executed == reference_trace || repeated_once,
            "attempt {attempt} (killed after {delay:?}): {executed:?}"
        );
        repeated += usize::from(repeated_once);
    }
    // The kills really landed inside runs, and some inside a stage's work. (Later runs
    // can be faster than the reference, so the last kills may come after the end.)
    assert!(interrupted >= 10, "only {interrupted} runs were killed");
    assert!(
        repeated >= 2,
        "only {repeated} interrupted stages ran again"
    );
}

#[test]
fn detached_runs_print_their_id_and_finish_in_the_background() {
    let env = TestEnv::new("detach");
    env.write(
        "w.fabro",
        "digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  work [shape=parallelogram, script=\"while [ ! -e go ]; do sleep 0.02; done; echo done > out.txt\"]
  start -> work -> exit
}
",
    );
    // The stage waits for a file the test creates only after `--detach` returned, so
    // the command cannot have waited for the run.
    let output = fabro(&env, &["run", "w.fabro", "--detach", "--run-id", "d1"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(!env.work_dir().join("out.txt").exists());
    env.write("go", "");
    let run_dir = env.fabro_home().join("scratch/d1");
    assert_eq!(
        stdout(&output),
        format!("run_id: d1\nrun_dir: {}\n", run_dir.display())
    );
    // `events --follow` returns at the terminal event.
    let output = fabro(&env, &["events", "d1", "--follow"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(stdout(&output).contains("WorkflowRunCompleted"));
    assert_eq!(checkpoint(&run_dir)["run_status"], "success");
    assert_eq!(
        fs_err::read_to_string(env.work_dir().join("out.txt")).expect("the work ran"),
        "done\n"
    );
    // The worker prints its last line just after the terminal event.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let log = fs_err::read_to_string(run_dir.join("worker.log")).expect("worker.log");
        if log.contains("status: success") {
            break;
        }
        assert!(Instant::now() < deadline, "{log}");
        std::thread::sleep(Duration::from_millis(20));
    }

    // A workflow with errors is reported at once and nothing starts.
    env.write("bad.fabro", "digraph w { a -> b }");
    let output = fabro(&env, &["run", "bad.fabro", "--detach", "--run-id", "d2"]);
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    assert!(!env.fabro_home().join("scratch/d2").exists());
}

/// SPEC 17.6: `resume` refuses an unknown `--provider` and a `--model` alias of another
/// provider with exit 2, leaving the run as it was.
#[test]
fn resume_refuses_bad_provider_and_model_flags_without_touching_the_run() {
    let env = TestEnv::new("resume_model_flags");
    // After the marker `resumed` exists the slow stage ends at once, so a resume that
    // wrongly goes ahead finishes quickly.
    env.write(
        "w.fabro",
        "digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  slow [shape=parallelogram, script=\"touch started; [ -f resumed ] || sleep 30\"]
  start -> slow -> exit
}
",
    );
    env.write("responses.json", "{}");
    let child = start_run(&env, "r1");
    let started = env.work_dir().join("started");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !started.exists() {
        assert!(Instant::now() < deadline, "the slow stage never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid fits"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("signal sent");
    let output = child.wait_with_output().expect("exits");
    assert_eq!(code(&output), 130);
    env.write("resumed", "");
    let run_dir = env.fabro_home().join("scratch/r1");
    let before = (
        fs_err::read(run_dir.join("checkpoint.json")).expect("checkpoint"),
        fs_err::read(run_dir.join("events.jsonl")).expect("events"),
    );
    for (args, message) in [
        (
            ["--provider", "foo", "", ""],
            "error: unknown provider 'foo' for --provider; expected one of: anthropic, openai, gemini, openai_compatible, simulated, kimi, zai, minimax, inception, openrouter, fireworks, ollama, litellm\n",
        ),
        (
            ["--provider", "gemini", "--model", "opus"],
            "error: --model opus is the catalog alias of claude-opus-4-6, a model of provider anthropic, but --provider is gemini; use a model of gemini or drop one of the flags\n",
        ),
    ] {
        let mut all = vec!["resume", "r1"];
        all.extend(args.iter().filter(|arg| !arg.is_empty()));
        let output = fabro(&env, &all);
        assert_eq!(code(&output), 2, "{args:?}: {}", stderr(&output));
        assert_eq!(stderr(&output), message, "{args:?}");
        let after = (
            fs_err::read(run_dir.join("checkpoint.json")).expect("checkpoint"),
            fs_err::read(run_dir.join("events.jsonl")).expect("events"),
        );
        assert!(after == before, "{args:?} changed the run");
    }
    // The run itself is still resumable.
    let output = fabro(&env, &["resume", "r1"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
}
