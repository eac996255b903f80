//! [`TestDatabase`]: a PostgreSQL database of one test's own, on the machine's server
//! (127.0.0.1:5432, trust authentication for the local `postgres` user), created with a
//! random name and dropped when the test ends. Tests never touch another database.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

/// The server the tests use.
const HOST: &str = "127.0.0.1";
const PORT: &str = "5432";
const USER: &str = "postgres";

/// A database created for one test, dropped (with its connections) on drop.
#[derive(Debug)]
pub struct TestDatabase {
    name: String,
}

impl TestDatabase {
    /// Creates a fresh database for `test`; `None` (after [`crate::skip`], which fails
    /// the test where `CI` is set) when `psql` is missing or the server does not answer.
    pub fn create(test: &str) -> Option<TestDatabase> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.subsec_nanos());
        let name = format!(
            "fabro_test_{}_{nanos}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        match psql(&format!("CREATE DATABASE {name}")) {
            Ok(()) => Some(TestDatabase { name }),
            Err(why) => {
                crate::skip(test, &format!("no PostgreSQL on {HOST}:{PORT}: {why}"));
                None
            }
        }
    }

    /// `postgres://postgres@127.0.0.1:5432/{name}`.
    pub fn url(&self) -> String {
        format!("postgres://{USER}@{HOST}:{PORT}/{}", self.name)
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `sql` in this database with `psql` and returns its unaligned output.
    ///
    /// # Panics
    /// When `psql` fails: the test's own database is broken.
    pub fn query(&self, sql: &str) -> String {
        let output = psql_command(&self.name, sql)
            .output()
            .expect("psql ran a moment ago");
        assert!(
            output.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        // A failed drop leaves a database named fabro_test_… behind; nothing else.
        let _ = psql(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ));
    }
}

fn psql_command(database: &str, sql: &str) -> Command {
    let mut command = Command::new("psql");
    command
        .args(["-h", HOST, "-p", PORT, "-U", USER, "-d", database])
        .args(["-v", "ON_ERROR_STOP=1", "-X", "-q", "-A", "-t", "-c", sql])
        .env("PGCONNECT_TIMEOUT", "5")
        .stdin(Stdio::null());
    command
}

fn psql(sql: &str) -> Result<(), String> {
    let output = psql_command("postgres", sql)
        .output()
        .map_err(|error| format!("cannot run psql: {error}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).trim().to_owned())
    }
}
