//! `fabro store import` (SPEC 18.1, issue 31 acceptance 3): the runs of a `$FABRO_HOME`
//! made with the CLI (successful, failed, cancelled by a budget, one with a large
//! command output, one with git checkpoints) are copied into a PostgreSQL store and a
//! `file://` blob store; a server on the shared store then answers for every imported
//! run exactly as a server on the local root does (the run document, its stages, each
//! stage file, its events; a rewound run's rewound stages). A running run is left out,
//! and a second import skips every run the first one copied.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use fabro_test_support::{ServerProcess, TestDatabase, TestEnv};
use serde_json::Value;

use crate::budget::COMMAND_LOOP;
use crate::git::{git, git_available};
use crate::server::exchange;
use crate::{code, stderr, stdout};

/// An LLM stage (the simulated provider), a command and a human gate (auto-approved).
const SHIPPED: &str = r#"digraph shipped {
  graph [goal="Ship a greeting"]
  start [shape=Mdiamond]
  exit [shape=Msquare]
  plan [shape=tab, prompt="Plan: $goal"]
  work [shape=parallelogram, script="echo working"]
  approve [shape=hexagon, label="Ship it?"]
  start -> plan -> work -> approve
  approve -> exit [label="[Y] yes"]
  approve -> work [label="[N] no"]
}
"#;

/// A command that fails with no edge to take: status `fail`.
const BROKEN: &str = r#"digraph broken {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  t [shape=parallelogram, script="echo trying; exit 4"]
  start -> t
  t -> exit [condition="outcome=success"]
}
"#;

/// A command whose output (about 200 KB) is offloaded to a blob as a context value too.
const LARGE: &str = r#"digraph large {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  big [shape=parallelogram, script="yes imported | head -c 200000"]
  start -> big -> exit
}
"#;

/// How the runs of the home are made: workflow, extra flags, expected exit code, count.
const KINDS: [(&str, &[&str], i32, usize); 4] = [
    ("shipped.fabro", &[], 0, 40),
    ("broken.fabro", &[], 1, 4),
    ("loop.fabro", &["--max-stages", "4"], 1, 4),
    ("large.fabro", &[], 0, 1),
];

/// `fabro run` of `workflow` in `dir` as run `run_id`.
fn run(env: &TestEnv, dir: &Path, workflow: &str, run_id: &str, extra: &[&str]) -> i32 {
    let output = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .current_dir(dir)
        .args(["run", workflow, "--provider", "simulated", "--auto-approve"])
        .args(["--run-id", run_id])
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .expect("fabro runs");
    assert!(
        matches!(code(&output), 0 | 1),
        "{run_id}: {}{}",
        stdout(&output),
        stderr(&output)
    );
    code(&output)
}

/// Makes the 49 runs of [`KINDS`] in the work directory, on a few threads; returns the
/// run ids.
fn make_runs(env: &TestEnv) -> Vec<String> {
    let mut jobs = Vec::new();
    for (workflow, extra, expected, count) in KINDS {
        let stem = workflow.trim_end_matches(".fabro");
        for index in 0..count {
            jobs.push((format!("{stem}-{index:02}"), workflow, extra, expected));
        }
    }
    let ids = jobs.iter().map(|job| job.0.clone()).collect();
    let jobs = std::sync::Mutex::new(jobs);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| loop {
                let job = jobs.lock().expect("the job list").pop();
                let Some((run_id, workflow, extra, expected)) = job else {
                    break;
                };
                let exit = run(env, &env.work_dir(), workflow, &run_id, extra);
                assert_eq!(exit, expected, "{run_id}");
            });
        }
    });
    ids
}

/// A run whose command waits for `{work}/go`, started; returns once its stage runs.
fn start_running(env: &TestEnv) -> Child {
    let work = env.work_dir();
    let started = work.join("started");
    let workflow = format!(
        "digraph waits {{\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  wait [shape=parallelogram, script=\"touch {}; while [ ! -f {} ]; do sleep 0.05; done\"]\n  start -> wait -> exit\n}}\n",
        started.display(),
        work.join("go").display()
    );
    env.write("waits.fabro", &workflow);
    let child = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "waits.fabro", "--run-id", "still-running"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("fabro starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !started.exists() {
        assert!(Instant::now() < deadline, "the waiting run never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

fn import(env: &TestEnv, store: &str, blobs: &str) -> std::process::Output {
    env.command(env!("CARGO_BIN_EXE_fabro"))
        .args(["store", "import", "--store", store])
        .env("FABRO_BLOBS", blobs)
        .output()
        .expect("fabro runs")
}

/// `GET path` on `server`: status and body.
fn get(server: &ServerProcess, path: &str) -> (u16, String) {
    let (status, _, body) = exchange(&server.address, "GET", path, Some(&server.token), None);
    (status, body)
}

fn get_json(server: &ServerProcess, path: &str) -> Value {
    let (status, body) = get(server, path);
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|error| panic!("GET {path}: {error}: {body}"))
}

/// Every event of the run, page by page.
fn all_events(server: &ServerProcess, run_id: &str) -> Vec<Value> {
    let mut events = Vec::new();
    let mut after = 0;
    loop {
        let page = get_json(
            server,
            &format!("/api/v1/runs/{run_id}/events?after={after}"),
        );
        let batch = page["events"].as_array().cloned().unwrap_or_default();
        if batch.is_empty() {
            return events;
        }
        events.extend(batch);
        after = page["next_after"].as_u64().expect("next_after");
    }
}

/// What `server` answers for `run_id`: the run document, the stages, each stage file
/// and the events.
fn answers(server: &ServerProcess, run_id: &str) -> Vec<(String, Value)> {
    let mut answers = Vec::new();
    let run = format!("/api/v1/runs/{run_id}");
    answers.push((run.clone(), get_json(server, &run)));
    let stages = get_json(server, &format!("{run}/stages"));
    let rows = stages["stages"].as_array().cloned().unwrap_or_default();
    assert!(!rows.is_empty(), "{run_id} has stages");
    for stage in rows {
        let rank = &stage["rank"];
        for file in stage["files"].as_array().cloned().unwrap_or_default() {
            let file = file.as_str().expect("a file name");
            let path = format!("{run}/stages/{rank}/files/{file}");
            let (status, body) = get(server, &path);
            answers.push((path, Value::from(format!("{status} {body}"))));
        }
    }
    answers.push((format!("{run}/stages"), stages));
    answers.push((
        format!("{run}/events"),
        Value::Array(all_events(server, run_id)),
    ));
    answers
}

/// The files of a blob directory: `(key, bytes)`, by key.
fn blob_files(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    for directory in fs_err::read_dir(root.join("sha256")).expect("blobs") {
        for file in fs_err::read_dir(directory.expect("entry").path()).expect("a directory") {
            let path = file.expect("entry").path();
            let key = path
                .strip_prefix(root)
                .expect("inside")
                .display()
                .to_string();
            files.push((key, fs_err::read(&path).expect("a blob")));
        }
    }
    files.sort();
    files
}

#[test]
fn imported_runs_answer_on_a_shared_store_as_on_the_local_root() {
    let test = "imported_runs_answer_on_a_shared_store_as_on_the_local_root";
    if !git_available(test) {
        return;
    }
    let Some(database) = TestDatabase::create(test) else {
        return;
    };
    let env = TestEnv::new("store_import");
    env.write("shipped.fabro", SHIPPED);
    env.write("broken.fabro", BROKEN);
    env.write("loop.fabro", COMMAND_LOOP);
    env.write("large.fabro", LARGE);
    // One run in a clean repository: git checkpoints (run branch, metadata ref).
    let repo = env.work_dir().join("repo");
    fs_err::create_dir_all(&repo).expect("repo dir");
    fs_err::write(repo.join("shipped.fabro"), SHIPPED).expect("writes");
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "shipped.fabro"],
        &["commit", "-q", "-m", "init"],
    ] {
        git(&env, &[&["-C", "repo"][..], args].concat());
    }
    let mut imported = std::thread::scope(|scope| {
        let runs = scope.spawn(|| make_runs(&env));
        assert_eq!(run(&env, &repo, "shipped.fabro", "in-git", &[]), 0);
        runs.join().expect("the runs were made")
    });
    imported.push("in-git".to_owned());
    assert_eq!(imported.len(), 50);
    let manifest: Value = serde_json::from_str(
        &fs_err::read_to_string(env.fabro_home().join("scratch/in-git/manifest.json"))
            .expect("a manifest"),
    )
    .expect("JSON");
    assert!(manifest["run_branch"].is_string(), "{manifest}");
    // One run rewound to its plan stage: the later stages are kept under `rewound`.
    let rewound = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["rewind", "shipped-00", "--to", "plan"])
        .output()
        .expect("fabro runs");
    assert_eq!(code(&rewound), 0, "{}", stderr(&rewound));
    let mut running = start_running(&env);

    let shared_blobs = env.work_dir().join("shared-blobs");
    let blobs_url = format!("file://{}", shared_blobs.display());
    let output = import(&env, &database.url(), &blobs_url);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let text = stdout(&output);
    for run_id in &imported {
        let status = if run_id == "shipped-00" {
            "interrupted"
        } else if run_id.starts_with("broken") {
            "fail"
        } else if run_id.starts_with("loop") {
            "canceled"
        } else {
            "success"
        };
        assert!(
            text.contains(&format!("imported run {run_id} ({status})\n")),
            "{run_id}: {text}"
        );
    }
    assert!(
        text.contains("skipped run still-running: running\n"),
        "{text}"
    );
    let summary = format!(
        "store {}: 50 runs imported, 0 already there, 1 running or queued; blobs {blobs_url}: ",
        database.url()
    );
    assert!(text.contains(&summary), "{text}");
    assert_eq!(text.lines().count(), 52, "{text}");
    let local_blobs = blob_files(&env.fabro_home().join("blobs"));
    assert!(
        local_blobs.iter().any(|(_, bytes)| bytes.len() > 200_000),
        "the large output is a blob"
    );
    assert_eq!(blob_files(&shared_blobs), local_blobs);

    // A second import copies nothing; the running run is still left out.
    let output = import(&env, &database.url(), &blobs_url);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let text = stdout(&output);
    for run_id in &imported {
        assert!(
            text.contains(&format!("skipped run {run_id}: already in the store\n")),
            "{run_id}: {text}"
        );
    }
    assert!(
        text.contains(&format!(
            "store {}: 0 runs imported, 50 already there, 1 running or queued; blobs {blobs_url}: 0 copied, {} already there\n",
            database.url(),
            local_blobs.len()
        )),
        "{text}"
    );
    fs_err::write(env.work_dir().join("go"), "").expect("releases the run");
    assert!(running.wait().expect("the run ends").success());

    let local = ServerProcess::spawn({
        let mut command = env.command(env!("CARGO_BIN_EXE_fabro"));
        command.args(["server", "--bind", "127.0.0.1:0"]);
        command
    });
    // The shared server's own root is empty: everything it answers comes from the store.
    let empty_home = env.work_dir().join("empty-home");
    let shared = ServerProcess::spawn({
        let mut command = env.command(env!("CARGO_BIN_EXE_fabro"));
        command
            .args([
                "server",
                "--bind",
                "127.0.0.1:0",
                "--store",
                &database.url(),
            ])
            .args(["--blobs", &blobs_url])
            .env("FABRO_HOME", &empty_home);
        command
    });
    let mut compared = 0;
    for run_id in &imported {
        let expected = answers(&local, run_id);
        let actual = answers(&shared, run_id);
        assert_eq!(expected.len(), actual.len(), "{run_id}");
        for ((path, expected), (_, actual)) in expected.iter().zip(&actual) {
            assert_eq!(actual, expected, "GET {path}");
            compared += 1;
        }
    }
    assert!(compared > 50 * 6, "{compared}");
    let rewound = get_json(&shared, "/api/v1/runs/shipped-00");
    assert_eq!(rewound["rewound"][0]["k"], 1, "{rewound}");
    let (status, _) = get(&shared, "/api/v1/runs/still-running");
    assert_eq!(status, 404, "the running run was not imported");
}

#[test]
fn an_import_into_an_unusable_store_exits_2_without_its_password() {
    let env = TestEnv::new("store_import_unreachable");
    let output = import(
        &env,
        "postgres://fabro:pw-FAKE-hidden@127.0.0.1:9/fabro",
        "file:///nonexistent-never-written",
    );
    assert_eq!(code(&output), 2);
    let text = stderr(&output);
    assert!(
        text.starts_with("error: cannot reach the store postgres://fabro:***@127.0.0.1:9/fabro: "),
        "{text}"
    );
    assert!(!text.contains("pw-FAKE-hidden"), "{text}");
    assert_eq!(stdout(&output), "");

    let output = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["store", "import"])
        .output()
        .expect("fabro runs");
    assert_eq!(code(&output), 2);
    assert_eq!(
        stderr(&output),
        "error: fabro store import needs --store URL (or FABRO_STORE)\n"
    );
}
