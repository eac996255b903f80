//! The stall watchdog (SPEC 9.11) and the test hook for kills during set-up.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::event::Emitter;
use crate::traversal::CancelCause;

/// Test hook for kills at chosen moments of a run's set-up, inert unless the
/// environment variable `FABRO_TEST_PAUSE_AT` names `point` (`before_manifest`,
/// `after_manifest` or `after_git_setup`): the process then creates
/// `{root}/test-paused-{point}` and sleeps until it is killed.
pub(super) fn pause_for_tests(point: &str, root: &Path) {
    if std::env::var_os("FABRO_TEST_PAUSE_AT").is_some_and(|value| value == point) {
        let _ = fs_err::write(root.join(format!("test-paused-{point}")), b"");
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
}

/// The stall watchdog (SPEC 9.11): cancels the run when nothing happened for
/// `stall_timeout`, unless a human question is open or a wait node sleeps.
pub(super) fn spawn_watchdog(
    stall_timeout: Duration,
    emitter: Arc<Emitter>,
    cancel: CancellationToken,
    cause: Arc<CancelCause>,
    paused: Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if stall_timeout.is_zero() {
            return;
        }
        let tick = (stall_timeout / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
        loop {
            tokio::time::sleep(tick).await;
            if paused.load(Ordering::SeqCst) > 0 {
                emitter.touch();
                continue;
            }
            if emitter.last_activity().elapsed() >= stall_timeout {
                cause.set_stall(format!(
                    "stall timeout: no events for {}s",
                    stall_timeout.as_secs()
                ));
                cancel.cancel();
                return;
            }
        }
    })
}
