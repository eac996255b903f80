//! `fabro diff RUN [NODE]` (SPEC 17.4): the changes of a stage and of a whole run, equal
//! to what `git diff` prints for the same commits.

use fabro_test_support::TestEnv;

use crate::git::{git, git_available};
use crate::{code, fabro, stderr, stdout};

/// Stage `a` adds a file, deletes a tracked one and renames another with a small edit
/// (git reports the rename with its similarity index), `b` edits, adds in a subdirectory
/// and writes a file without a final newline, `c` changes nothing.
const WORKFLOW: &str = r#"digraph w {
  start [shape=Mdiamond]
  exit [shape=Msquare]
  a [shape=parallelogram, script="printf 'one\ntwo\nthree\n' > a.txt; rm old.txt; mv long.txt moved.txt; sed -i 's/^15$/fifteen/' moved.txt"]
  b [shape=parallelogram, script="printf 'one\n2\nthree\nfour\n' > a.txt; mkdir -p sub; printf 'no newline' > sub/y.txt; echo more >> README.md"]
  c [shape=parallelogram, script="true"]
  start -> a -> b -> c -> exit
}
"#;

fn init_repo(env: &TestEnv) {
    git(env, &["init", "-q", "-b", "main"]);
    env.write("w.fabro", WORKFLOW);
    env.write("README.md", "user file\nsecond line\n");
    env.write("old.txt", "to be removed\n");
    let long: String = (1..=30).map(|line| format!("{line}\n")).collect();
    env.write("long.txt", &long);
    git(env, &["add", "w.fabro", "README.md", "old.txt", "long.txt"]);
    git(env, &["commit", "-q", "-m", "init"]);
}

/// The run-branch commit of `node`'s stage, found by its subject.
fn stage_commit(env: &TestEnv, run_id: &str, node: &str) -> String {
    let log = git(
        env,
        &["log", "--format=%H %s", &format!("fabro/run/{run_id}")],
    );
    log.lines()
        .find_map(|line| {
            let (sha, subject) = line.split_once(' ')?;
            subject
                .starts_with(&format!("fabro({run_id}): {node} ("))
                .then(|| sha.to_owned())
        })
        .expect("the stage has a run-branch commit")
}

#[test]
fn diffs_of_a_stage_and_of_a_run_equal_git_diff() {
    if !git_available("diffs_of_a_stage_and_of_a_run_equal_git_diff") {
        return;
    }
    let env = TestEnv::new("diff_git");
    init_repo(&env);
    let base = git(&env, &["rev-parse", "HEAD"]).trim().to_owned();
    let output = fabro(&env, &["run", "w.fabro", "--run-id", "r1"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));

    for node in ["a", "b", "c"] {
        let commit = stage_commit(&env, "r1", node);
        let expected = git(
            &env,
            &["diff", "--no-color", &format!("{commit}^"), &commit],
        );
        let diff = fabro(&env, &["diff", "r1", node]);
        assert_eq!(code(&diff), 0, "{}", stderr(&diff));
        assert_eq!(stdout(&diff), expected, "stage {node}");
    }
    assert!(stdout(&fabro(&env, &["diff", "r1", "b"])).contains("+four\n"));
    assert_eq!(stdout(&fabro(&env, &["diff", "r1", "c"])), "");

    let expected = git(&env, &["diff", "--no-color", &base, "fabro/run/r1"]);
    let diff = fabro(&env, &["diff", "r1"]);
    assert_eq!(code(&diff), 0, "{}", stderr(&diff));
    assert_eq!(stdout(&diff), expected);
    assert!(expected.contains("deleted file mode"), "{expected}");
    assert!(expected.contains("rename to moved.txt"), "{expected}");
    assert!(
        expected.contains("\\ No newline at end of file"),
        "{expected}"
    );

    let unknown = fabro(&env, &["diff", "r1", "nosuch"]);
    assert_eq!(code(&unknown), 2);
    assert!(
        stderr(&unknown).contains("unknown node 'nosuch'"),
        "{}",
        stderr(&unknown)
    );
}

#[test]
fn runs_without_git_checkpoints_have_no_diff() {
    let env = TestEnv::new("diff_no_git");
    env.write("w.fabro", WORKFLOW);
    env.write("old.txt", "x\n");
    env.write("README.md", "x\n");
    env.write("long.txt", "15\n");
    let output = fabro(&env, &["run", "w.fabro", "--run-id", "r1"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let diff = fabro(&env, &["diff", "r1"]);
    assert_eq!(code(&diff), 2);
    assert!(
        stderr(&diff).contains("run r1 has no git checkpoints"),
        "{}",
        stderr(&diff)
    );
    assert_eq!(code(&fabro(&env, &["diff", "r1", "a"])), 2);
}
