//! [`Bridge`]: runs the async clients of the shared store (sqlx, `object_store`) for the
//! engine's synchronous store traits, from any thread, inside a tokio runtime or not.
//!
//! The futures run on a current-thread runtime of their own, on a thread of their own;
//! the caller waits on a channel, as it would wait for a file write. Dropping the bridge
//! closes its queue and the thread ends by itself, so dropping a store inside async
//! code never drops a runtime there.

use std::future::Future;
use std::pin::Pin;

use tokio::sync::mpsc;

type Job = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A thread with a runtime that runs the futures it is given.
#[derive(Debug, Clone)]
pub(crate) struct Bridge {
    jobs: mpsc::UnboundedSender<Job>,
}

impl Bridge {
    /// Starts the thread `name`.
    pub(crate) fn start(name: &str) -> std::io::Result<Bridge> {
        let (jobs, mut queue) = mpsc::unbounded_channel::<Job>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                runtime.block_on(async move {
                    while let Some(job) = queue.recv().await {
                        tokio::spawn(job);
                    }
                });
            })?;
        Ok(Bridge { jobs })
    }

    /// Runs `future` on the bridge's runtime and waits for its output; `None` when the
    /// bridge's thread is gone (it panicked).
    pub(crate) fn run<T: Send + 'static>(
        &self,
        future: impl Future<Output = T> + Send + 'static,
    ) -> Option<T> {
        let (sender, receiver) = std::sync::mpsc::sync_channel(1);
        let job: Job = Box::pin(async move {
            // The caller may have stopped waiting; nothing else to do then.
            let _ = sender.send(future.await);
        });
        self.jobs.send(job).ok()?;
        receiver.recv().ok()
    }

    /// Runs `future` on the bridge's runtime without waiting for it; nothing happens
    /// when the bridge's thread is gone.
    pub(crate) fn spawn(&self, future: impl Future<Output = ()> + Send + 'static) {
        let _ = self.jobs.send(Box::pin(future));
    }
}

#[cfg(test)]
mod tests {
    use super::Bridge;

    #[test]
    fn runs_futures_from_plain_threads_and_from_inside_a_runtime() {
        let bridge = Bridge::start("bridge-test").expect("starts");
        assert_eq!(bridge.run(async { 2 + 2 }), Some(4));
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let inner = bridge.clone();
        let answer = runtime.block_on(async move {
            // Blocking inside async code, as a synchronous store call does.
            tokio::task::block_in_place(|| inner.run(async { "inside" }))
        });
        assert_eq!(answer, Some("inside"));
        // Dropping the bridge inside async code drops no runtime there.
        runtime.block_on(async move { drop(bridge) });
    }
}
