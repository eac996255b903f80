//! Command output in the blob store (SPEC 7.7, 11.2): streamed, content-addressed,
//! stored once, and never in checkpoints or events as payload.

use fabro_test_support::TestEnv;
use serde_json::Value;

use crate::{code, fabro, stderr};

fn blob_files(env: &TestEnv) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let root = env.fabro_home().join("blobs/sha256");
    for shard in fs_err::read_dir(&root).expect("blob store exists") {
        let shard = shard.expect("entry").path();
        for blob in fs_err::read_dir(&shard).expect("shard") {
            files.push(blob.expect("entry").path());
        }
    }
    files
}

#[test]
fn identical_output_is_stored_once_and_referenced_by_hash() {
    let env = TestEnv::new("blobs_once");
    // 200 KB of output, printed by two different stages.
    let script = "head -c 204800 /dev/zero | tr '\\\\0' x";
    let workflow = format!(
        "digraph w {{
  start [shape=Mdiamond]
  exit [shape=Msquare]
  one [shape=parallelogram, script=\"{script}\"]
  two [shape=parallelogram, script=\"{script}\"]
  start -> one -> two -> exit
}}
"
    );
    env.write("w.fabro", &workflow);
    let output = fabro(&env, &["run", "w.fabro", "--run-id", "r1"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let blobs = blob_files(&env);
    let large: Vec<_> = blobs
        .iter()
        .filter(|path| fs_err::metadata(path).expect("stat").len() > 200_000)
        .collect();
    assert_eq!(large.len(), 1, "{blobs:?}");
    let stored = fs_err::read(large[0]).expect("read");
    assert_eq!(stored.len(), 204_800 + 2, "a compact JSON string");
    let checkpoint: Value = serde_json::from_str(
        &fs_err::read_to_string(env.fabro_home().join("scratch/r1/checkpoint.json"))
            .expect("checkpoint"),
    )
    .expect("json");
    let reference = checkpoint["context_values"]["command.output"]
        .as_str()
        .expect("a ref");
    let hex = large[0].file_name().expect("name").to_string_lossy();
    assert_eq!(reference, format!("blob://sha256/{hex}"));
    let text = fs_err::read_to_string(env.fabro_home().join("scratch/r1/checkpoint.json"))
        .expect("checkpoint");
    assert!(text.len() < 20_000, "payloads stay out of checkpoints");
}

/// 200 MB of output: the engine streams it to the stage log and into the blob store,
/// so its peak memory stays far below the output's size.
#[test]
fn huge_output_is_streamed_with_bounded_memory() {
    let env = TestEnv::new("blobs_huge");
    env.write(
        "w.fabro",
        "digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  flood [shape=parallelogram, script=\"head -c 209715200 /dev/zero | tr '\\\\0' y\"]
  start -> flood -> exit
}
",
    );
    let output = fabro(&env, &["run", "w.fabro", "--run-id", "r1"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    // The largest resident set of any process this test binary has waited for, fabro
    // included (the others are smaller fabro runs and shells).
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .expect("getrusage");
    let peak_kib = usage.max_rss();
    assert!(
        peak_kib < 100 * 1024,
        "peak RSS {peak_kib} KiB for 200 MB of output"
    );
    let blobs = blob_files(&env);
    let sizes: Vec<u64> = blobs
        .iter()
        .map(|path| fs_err::metadata(path).expect("stat").len())
        .collect();
    assert!(sizes.contains(&(209_715_200 + 2)), "{sizes:?}");
    let log = env
        .fabro_home()
        .join("scratch/r1/stages/002-flood@1/stdout.log");
    assert_eq!(fs_err::metadata(log).expect("log").len(), 209_715_200);
}

#[test]
fn dump_exports_stages_records_and_blobs() {
    let env = TestEnv::new("dump");
    env.write(
        "w.fabro",
        "digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  ask [shape=tab, prompt=\"Plan it\"]
  say [shape=parallelogram, script=\"echo dumped\"]
  start -> ask -> say -> exit
}
",
    );
    let output = fabro(&env, &["run", "w.fabro", "--run-id", "r1"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let out = env.work_dir().join("out");
    let output = fabro(&env, &["dump", "r1", "-o", "out"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    for file in [
        "checkpoint.json",
        "events.jsonl",
        "manifest.json",
        "graph.fabro",
        "config.json",
        "stages/002-ask@1/prompt.md",
        "stages/002-ask@1/response.md",
        "stages/002-ask@1/status.json",
        "stages/003-say@1/status.json",
    ] {
        assert!(out.join(file).is_file(), "{file} missing");
    }
    let checkpoint: Value =
        serde_json::from_str(&fs_err::read_to_string(out.join("checkpoint.json")).expect("read"))
            .expect("json");
    let reference = checkpoint["context_values"]["command.output"]
        .as_str()
        .expect("ref");
    let hex = reference.trim_start_matches("blob://sha256/");
    assert_eq!(
        fs_err::read_to_string(out.join(format!("blobs/{hex}.json"))).expect("blob"),
        "\"dumped\\n\""
    );

    // A non-empty directory is refused; a missing blob fails the dump.
    let output = fabro(&env, &["dump", "r1", "-o", "out"]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    for blob in blob_files(&env) {
        fs_err::remove_file(blob).expect("remove blob");
    }
    let output = fabro(&env, &["dump", "r1", "-o", "out2"]);
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("error: engine error: missing blob blob://sha256/"),
        "{}",
        stderr(&output)
    );
}

/// SPEC 7.7 and 7.8: test reports written by a command are captured per attempt, old and
/// oversized files are skipped with a warning, a large LLM response becomes a blob ref,
/// and the run's terminal event counts assets and distinct blobs separately.
#[test]
fn assets_are_captured_and_large_values_offloaded() {
    let env = TestEnv::new("assets");
    env.write("junit-old.xml", "<testsuite/>");
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    fs_err::File::options()
        .write(true)
        .open(env.work_dir().join("junit-old.xml"))
        .expect("open")
        .set_modified(old)
        .expect("set mtime");
    env.write(
        "w.fabro",
        "digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  tests [shape=parallelogram, script=\"echo '<testsuite/>' > junit.xml; mkdir -p playwright-report test-results; echo '<html/>' > playwright-report/index.html; head -c 11000000 /dev/zero > test-results/huge.bin; echo ran\"]
  big [shape=tab, prompt=\"Write a lot\"]
  start -> tests -> big -> exit
}
",
    );
    let text = "y".repeat(150_000);
    env.write(
        "responses.json",
        &serde_json::json!({"nodes": {"big": [{"text": text}]}}).to_string(),
    );
    let output = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["run", "w.fabro", "--run-id", "r1"])
        .env(
            "FABRO_SIMULATED_RESPONSES",
            env.work_dir().join("responses.json"),
        )
        .output()
        .expect("fabro runs");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let run_dir = env.fabro_home().join("scratch/r1");
    let captured = run_dir.join("artifacts/files/tests/retry_1");
    assert_eq!(
        fs_err::read_to_string(captured.join("junit.xml")).expect("junit captured"),
        "<testsuite/>\n"
    );
    assert!(captured.join("playwright-report/index.html").is_file());
    assert!(
        !captured.join("test-results/huge.bin").exists(),
        "over 10 MB"
    );
    assert!(!captured.join("junit-old.xml").exists(), "unchanged");

    let events: Vec<Value> = fs_err::read_to_string(run_dir.join("events.jsonl"))
        .expect("events")
        .lines()
        .map(|line| serde_json::from_str(line).expect("event"))
        .collect();
    assert!(events.iter().any(|event| event["event"] == "Warning"
        && event["properties"]["code"] == "asset_skipped"
        && event["node_id"] == "tests"));
    let completed = events.last().expect("terminal event");
    assert_eq!(completed["event"], "WorkflowRunCompleted");
    assert_eq!(completed["properties"]["asset_count"], 2);
    // stdout and stderr of `tests`, and the offloaded response.
    assert_eq!(completed["properties"]["artifact_count"], 3);

    let checkpoint: Value = serde_json::from_str(
        &fs_err::read_to_string(run_dir.join("checkpoint.json")).expect("checkpoint"),
    )
    .expect("json");
    let reference = checkpoint["context_values"]["response.big"]
        .as_str()
        .expect("a ref");
    assert!(reference.starts_with("blob://sha256/"), "{reference}");
    let blob = blob_files(&env)
        .into_iter()
        .find(|path| reference.ends_with(&*path.file_name().expect("name").to_string_lossy()))
        .expect("the blob is stored");
    assert_eq!(
        serde_json::from_str::<Value>(&fs_err::read_to_string(blob).expect("read")).expect("json"),
        Value::String(text)
    );
}

/// A chain of commands: each one captures only what it wrote itself, whether its
/// baseline is the previous command's rescan or a fresh scan (after another stage).
#[test]
fn each_command_in_a_chain_captures_only_its_own_assets() {
    let env = TestEnv::new("asset-chain");
    env.write(
        "w.fabro",
        "digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  write [shape=parallelogram, script=\"echo '<first/>' > junit.xml\"]
  idle [shape=parallelogram, script=\"true\"]
  check [shape=diamond]
  idle_again [shape=parallelogram, script=\"true\"]
  rewrite [shape=parallelogram, script=\"echo '<second/>' > junit.xml\"]
  start -> write -> idle -> check -> idle_again -> rewrite -> exit
}
",
    );
    let output = fabro(&env, &["run", "w.fabro", "--run-id", "chain"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let files = env.fabro_home().join("scratch/chain/artifacts/files");
    let read = |node: &str| fs_err::read_to_string(files.join(node).join("retry_1/junit.xml"));
    assert_eq!(read("write").expect("captured"), "<first/>\n");
    assert_eq!(read("rewrite").expect("captured"), "<second/>\n");
    for idle in ["idle", "idle_again"] {
        assert!(!files.join(idle).exists(), "{idle} wrote nothing");
    }
    let events = fs_err::read_to_string(env.fabro_home().join("scratch/chain/events.jsonl"))
        .expect("events");
    let completed: Value =
        serde_json::from_str(events.lines().last().expect("events")).expect("event");
    assert_eq!(completed["properties"]["asset_count"], 2);
}
