//! Statements made again while the store's connection is lost (SPEC 18.4.3: a database
//! that restarts, or that ends a process's connections, is waited for): a connection
//! that fails in the middle of a statement leaves it committed or not, so only
//! statements that can be run twice are made again.

use std::future::Future;
use std::time::{Duration, Instant};

/// How long a statement is made again while the connection is lost.
pub(crate) const RETRY_PATIENCE: Duration = Duration::from_secs(30);

/// Whether `error` says that the connection, not the statement, failed.
pub(crate) fn connection_lost(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(database) => database.code().is_some_and(|code| {
            code.starts_with("08") || matches!(code.as_ref(), "57P01" | "57P02" | "57P03")
        }),
        _ => false,
    }
}

/// The pause before the next attempt, after `pause`.
pub(crate) fn next_pause(pause: Duration) -> Duration {
    (pause * 2).min(Duration::from_secs(1))
}

/// Makes the statement `attempt` makes, again while the connection is lost, for at most
/// [`RETRY_PATIENCE`]. `attempt` must be safe to run twice.
pub(crate) async fn again<T, Attempt, Made>(what: &str, attempt: Attempt) -> Result<T, sqlx::Error>
where
    Attempt: Fn() -> Made,
    Made: Future<Output = Result<T, sqlx::Error>>,
{
    let deadline = Instant::now() + RETRY_PATIENCE;
    let mut pause = Duration::from_millis(50);
    loop {
        match attempt().await {
            Err(error) if connection_lost(&error) && Instant::now() < deadline => {
                tracing::warn!(%error, "lost the store's connection; {what} again");
                tokio::time::sleep(pause).await;
                pause = next_pause(pause);
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_connections_are_told_from_failed_statements() {
        assert!(connection_lost(&sqlx::Error::PoolTimedOut));
        assert!(connection_lost(&sqlx::Error::Io(std::io::Error::from(
            std::io::ErrorKind::ConnectionReset
        ))));
        assert!(!connection_lost(&sqlx::Error::RowNotFound));
        assert!(!connection_lost(&sqlx::Error::PoolClosed));
        assert_eq!(
            next_pause(Duration::from_millis(800)),
            Duration::from_secs(1)
        );
    }

    #[tokio::test]
    async fn a_lost_connection_is_tried_again_and_a_failed_statement_is_not() {
        let attempts = std::sync::atomic::AtomicUsize::new(0);
        let made = again("counting", || async {
            let attempt = attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if attempt < 2 {
                Err(sqlx::Error::PoolTimedOut)
            } else {
                Ok(attempt)
            }
        })
        .await;
        assert_eq!(made.ok(), Some(2));
        let failed = again("failing", || async {
            Err::<(), _>(sqlx::Error::RowNotFound)
        })
        .await;
        assert!(matches!(failed, Err(sqlx::Error::RowNotFound)));
    }
}
