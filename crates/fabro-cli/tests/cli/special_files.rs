//! Special files given as workflows or `@path` references (issue 14 item 7): a FIFO must
//! not block, `/dev/zero` must not be read forever, and an oversized file must be
//! refused without being read whole.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use fabro_test_support::TestEnv;

use crate::{code, stderr, stdout};

/// Generous for a debug build on a loaded machine; a blocked read never finishes.
const DEADLINE: Duration = Duration::from_secs(30);

/// Runs `command` to completion, failing the test (after killing it) if it outlives
/// [`DEADLINE`].
fn finish_within_deadline(mut command: Command, what: &str) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the fabro binary starts");
    let started = Instant::now();
    loop {
        if child
            .try_wait()
            .expect("the child can be waited for")
            .is_some()
        {
            return child.wait_with_output().expect("the output is collected");
        }
        if started.elapsed() > DEADLINE {
            let _ = child.kill();
            let output = child.wait_with_output().expect("the output is collected");
            panic!(
                "{what} did not finish within {DEADLINE:?}; stderr: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Address space for the binary and a few 10 MB buffers: a regression that reads a
/// special or huge file whole fails at once instead of taking the machine's memory.
const MEMORY_LIMIT_KB: u64 = 700 * 1024;

/// `fabro ARGS` with at most [`MEMORY_LIMIT_KB`] of address space.
fn fabro_command(env: &TestEnv, args: &[&str]) -> Command {
    let mut command = env.command("sh");
    command
        .args([
            "-c",
            &format!("ulimit -v {MEMORY_LIMIT_KB} && exec \"$0\" \"$@\""),
            env!("CARGO_BIN_EXE_fabro"),
        ])
        .args(args);
    command
}

fn make_fifo(env: &TestEnv, name: &str) -> std::path::PathBuf {
    let path = env.work_dir().join(name);
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600))
        .expect("the test machine can make a FIFO");
    path
}

#[test]
fn validate_and_run_refuse_a_fifo_without_blocking() {
    let env = TestEnv::new("special_fifo");
    make_fifo(&env, "pipe.fabro");
    for args in [
        &["validate", "pipe.fabro"][..],
        &["graph", "pipe.fabro"][..],
        &["run", "--dry-run", "pipe.fabro"][..],
    ] {
        let output = finish_within_deadline(fabro_command(&env, args), &args.join(" "));
        let text = stderr(&output);
        assert_eq!(code(&output), 2, "{args:?}: {text}{}", stdout(&output));
        assert!(
            text.contains("pipe.fabro") && text.contains("not a regular file"),
            "{args:?}: {text}"
        );
    }
}

#[test]
fn validate_refuses_dev_zero_without_reading_it() {
    let env = TestEnv::new("special_zero");
    let output = finish_within_deadline(
        fabro_command(&env, &["validate", "/dev/zero"]),
        "validate /dev/zero",
    );
    let text = stderr(&output);
    assert_eq!(code(&output), 2, "{text}");
    assert!(
        text.contains("/dev/zero") && text.contains("not a regular file"),
        "{text}"
    );
}

#[test]
fn prompt_references_to_special_files_are_unresolved_without_blocking() {
    let env = TestEnv::new("special_reference");
    make_fifo(&env, "prompt.fifo");
    for reference in ["/dev/zero", "prompt.fifo"] {
        env.write(
            "refers.fabro",
            &format!(
                "digraph refers {{\n start [shape=Mdiamond]\n work [prompt=\"@{reference}\"]\n exit [shape=Msquare]\n start -> work -> exit\n}}\n"
            ),
        );
        for args in [
            &["validate", "refers.fabro"][..],
            &["run", "--dry-run", "refers.fabro"][..],
        ] {
            let output = finish_within_deadline(
                fabro_command(&env, args),
                &format!("{args:?} with prompt=@{reference}"),
            );
            let text = format!("{}{}", stdout(&output), stderr(&output));
            assert_ne!(code(&output), 0, "{args:?} {reference}: {text}");
            assert!(
                text.contains("unresolved_file_ref")
                    && text.contains(reference)
                    && text.contains("not a regular file"),
                "{args:?} {reference}: {text}"
            );
        }
        // `graph` draws what it can; it must not block or run out of memory either.
        let output = finish_within_deadline(
            fabro_command(&env, &["graph", "refers.fabro"]),
            &format!("graph with prompt=@{reference}"),
        );
        assert!(stdout(&output).contains("</svg>"), "{}", stderr(&output));
    }
}

#[test]
fn an_oversized_workflow_is_refused_without_reading_it_whole() {
    let env = TestEnv::new("special_oversized");
    env.write("small.fabro", crate::HELLO);
    let validate = |file: &str| {
        finish_within_deadline(
            fabro_command(&env, &["validate", file]),
            &format!("validate {file}"),
        )
    };
    let output = validate("small.fabro");
    assert_eq!(
        code(&output),
        0,
        "the memory limit leaves room to validate: {}",
        stderr(&output)
    );

    let big = env.work_dir().join("big.fabro");
    let size: u64 = 2 * 1024 * 1024 * 1024;
    fs_err::File::create(&big)
        .and_then(|file| file.set_len(size))
        .expect("a sparse file can be made");
    let output = validate("big.fabro");
    let text = format!("{}{}", stdout(&output), stderr(&output));
    assert_eq!(code(&output), 1, "{text}");
    assert!(
        text.contains(&format!(
            "error[parse_error]: workflow file is {size} bytes; the limit is 10485760 bytes (10 MB)"
        )),
        "{text}"
    );
}
