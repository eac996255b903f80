//! The stall watchdog (SPEC 9.11) and the test hook for kills during set-up.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::event::Emitter;
use crate::id::RunId;
use crate::store::{Notice, RunStore};
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

/// How often a run on a store with notices asks whether its cancel was requested, when
/// no notice said so (a notice can be missed while the store's connection is lost).
const CANCEL_POLL: Duration = Duration::from_secs(1);

/// Cancels the run when a cancel of it is requested through the store from another
/// process (SPEC 18.2), at once on the store's notice and within [`CANCEL_POLL`] in any
/// case, until `stop` fires. Nothing to watch on a store without notices (the local
/// store: a run is cancelled by a signal to its process).
pub(super) fn spawn_cancel_watch(
    runs: Arc<dyn RunStore>,
    run_id: RunId,
    cancel: CancellationToken,
    stop: CancellationToken,
) -> Option<tokio::task::JoinHandle<()>> {
    let mut notices = Some(runs.notices()?);
    Some(tokio::spawn(async move {
        loop {
            let asked = {
                let (runs, run_id) = (Arc::clone(&runs), run_id.clone());
                tokio::task::spawn_blocking(move || runs.cancel_requested(&run_id)).await
            };
            if matches!(asked, Ok(Ok(true))) {
                cancel.cancel();
                return;
            }
            let poll = tokio::time::sleep(CANCEL_POLL);
            tokio::pin!(poll);
            loop {
                let notice = async {
                    match notices.as_mut() {
                        Some(notices) => notices.recv().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = cancel.cancelled() => return,
                    () = &mut poll => break,
                    notice = notice => match notice {
                        Ok(Notice::CancelRequested(id)) if id == run_id => break,
                        Ok(Notice::Missed) | Err(RecvError::Lagged(_)) => break,
                        Ok(_) => {}
                        Err(RecvError::Closed) => notices = None,
                    },
                }
            }
        }
    }))
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
