//! `shell`: `/bin/sh -c` in its own process group, with timeout and filtered
//! environment (SPEC 10.5, 13.5).

use std::ffi::OsString;
use std::time::Duration;

use fabro_llm::BoxFuture;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_arguments, Tool, ToolContext, ToolError, MAX_SHELL_TIMEOUT};
use crate::process::{Capture, ProcessGroup};
use crate::truncate::{OutputLimit, TruncationMode};

/// The `shell` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct Shell;

#[derive(Deserialize)]
struct Arguments {
    command: String,
    timeout_ms: Option<u64>,
    #[allow(dead_code)]
    description: Option<String>,
}

impl Tool for Shell {
    fn name(&self) -> &'static str {
        "shell"
    }

    fn description(&self) -> &'static str {
        "Run a shell command (/bin/sh -c) in the working directory. Returns stdout, stderr and the exit code."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "minLength": 1},
                "timeout_ms": {"type": "integer", "minimum": 1, "maximum": 600_000},
                "description": {"type": "string"}
            },
            "required": ["command"],
            "additionalProperties": false
        })
    }

    fn limit(&self) -> OutputLimit {
        OutputLimit::new(30_000, TruncationMode::HeadTail).with_lines(256)
    }

    fn execute<'a>(
        &'a self,
        arguments: Value,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let arguments: Arguments = parse_arguments(arguments)?;
            let timeout = arguments
                .timeout_ms
                .map_or(context.shell_timeout, Duration::from_millis)
                .min(MAX_SHELL_TIMEOUT);
            run_shell(&arguments.command, timeout, context).await
        })
    }
}

/// How the command ended.
enum Ending {
    Exited(Option<i32>),
    TimedOut,
    Canceled,
}

async fn run_shell(
    command: &str,
    timeout: Duration,
    context: &ToolContext,
) -> Result<String, ToolError> {
    let arguments = [OsString::from("-c"), OsString::from(command)];
    let mut child = context
        .env
        .spawn_piped("/bin/sh", &arguments, context.tree.root())
        .map_err(|error| ToolError::Failed(format!("cannot start /bin/sh: {error}")))?;
    let group = ProcessGroup::of_spawned(&child);
    let stdout = Capture::start(child.take_stdout_pipe());
    let stderr = Capture::start(child.take_stderr_pipe());
    let ending = tokio::select! {
        status = child.wait() => Ending::Exited(status.ok().and_then(|status| status.code())),
        () = tokio::time::sleep(timeout) => Ending::TimedOut,
        () = context.cancel.cancelled() => Ending::Canceled,
    };
    match ending {
        Ending::Exited(_) => {}
        Ending::TimedOut | Ending::Canceled => group.terminate(&mut child).await,
    }
    let stdout = stdout.finish().await;
    let stderr = stderr.finish().await;
    // Background processes started by a finished command may keep running.
    group.disarm();
    let mut output = stdout;
    if !stderr.is_empty() {
        if !output.is_empty() && !output.ends_with('\n') {
            output.push('\n');
        }
        output.push_str("[stderr]\n");
        output.push_str(&stderr);
    }
    match ending {
        Ending::Exited(Some(0)) => Ok(output),
        Ending::Exited(code) => {
            if !output.is_empty() && !output.ends_with('\n') {
                output.push('\n');
            }
            match code {
                Some(code) => output.push_str(&format!("[exit code: {code}]")),
                None => output.push_str("[terminated by a signal]"),
            }
            Ok(output)
        }
        Ending::TimedOut => {
            if !output.is_empty() && !output.ends_with('\n') {
                output.push('\n');
            }
            output.push_str(&timeout_message(timeout));
            Err(ToolError::Failed(output))
        }
        Ending::Canceled => Err(ToolError::Failed(format!("{output}\n[canceled]"))),
    }
}

/// The SPEC 10.5 timeout notice.
fn timeout_message(timeout: Duration) -> String {
    format!(
        "[ERROR: Command timed out after {}ms. Partial output is shown above.\nYou can retry with a longer timeout by setting the timeout_ms parameter.]",
        timeout.as_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{context, run};
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn runs_in_the_working_directory_with_exit_code() {
        let (_dir, context) = context();
        fs_err::write(context.tree.root().join("here.txt"), "").unwrap();
        let result = run(
            Arc::new(Shell),
            json!({"command": "ls; echo oops >&2; exit 3"}),
            &context,
        )
        .await;
        assert!(!result.is_error);
        assert_eq!(result.output, "here.txt\n[stderr]\noops\n[exit code: 3]");
    }

    #[tokio::test]
    async fn secrets_are_not_in_the_environment() {
        let (_dir, mut context) = context();
        context.env = crate::ProcessEnv::new(
            [
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("X_API_KEY".into(), "secret".into()),
            ],
            &[],
            &std::collections::BTreeMap::new(),
        );
        let result = run(
            Arc::new(Shell),
            json!({"command": "echo \"[$X_API_KEY][$PATH]\""}),
            &context,
        )
        .await;
        assert_eq!(result.output, "[][/usr/bin:/bin]\n");
    }

    #[tokio::test]
    async fn timeout_kills_the_group_and_keeps_partial_output() {
        let (_dir, context) = context();
        let started = std::time::Instant::now();
        let result = run(
            Arc::new(Shell),
            json!({"command": "echo partial; sleep 30 & sleep 30", "timeout_ms": 200}),
            &context,
        )
        .await;
        assert!(result.is_error);
        assert_eq!(
            result.output,
            "Tool error (shell): partial\n[ERROR: Command timed out after 200ms. Partial output is shown above.\nYou can retry with a longer timeout by setting the timeout_ms parameter.]"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn confined_commands_report_exit_codes_and_time_out_through_the_spawner() {
        use crate::isolation::{IsolationMode, IsolationSettings, KernelSupport, Mechanism};
        let support = KernelSupport::detect();
        if !support.supports(Mechanism::Landlock) {
            fabro_test_support::skip("a shell tool test", "this kernel lacks landlock");
            return;
        }
        let (dir, mut context) = context();
        let isolation =
            IsolationSettings::new(IsolationMode::Workspace, IsolationMode::Workspace, support);
        context.env = crate::ProcessEnv::inherit()
            .with_isolation(isolation)
            .for_stage(
                crate::isolation::ProcessKind::Agent,
                &crate::isolation::PrivateTmpDir::new(dir.path().join("stage-tmp")),
            );
        let result = run(
            Arc::new(Shell),
            json!({"command": "echo out; echo err >&2; exit 4"}),
            &context,
        )
        .await;
        assert_eq!(result.output, "out\n[stderr]\nerr\n[exit code: 4]");
        let started = std::time::Instant::now();
        let result = run(
            Arc::new(Shell),
            json!({"command": "echo partial; sleep 30 & sleep 30", "timeout_ms": 200}),
            &context,
        )
        .await;
        assert!(result.is_error);
        assert!(
            result
                .output
                .starts_with("Tool error (shell): partial\n[ERROR: Command timed out after 200ms."),
            "{}",
            result.output
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn bad_arguments_and_line_truncation() {
        let (_dir, context) = context();
        let result = run(Arc::new(Shell), json!({"command": ""}), &context).await;
        assert!(result
            .output
            .starts_with("Invalid arguments for tool: shell"));
        let result = run(
            Arc::new(Shell),
            json!({"command": "ls", "timeout_ms": 700_000}),
            &context,
        )
        .await;
        assert!(result.is_error);
        let result = run(Arc::new(Shell), json!({"command": "seq 1 1000"}), &context).await;
        assert!(
            result.model_output.contains("[... 745 lines omitted ...]"),
            "{}",
            result.model_output
        );
        assert!(result.model_output.starts_with("1\n2\n"));
    }
}
