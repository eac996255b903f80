//! Opening `runs.db`: the schema, the connection settings and the repair of a corrupt
//! file (SPEC 11.4).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::Connection;

use super::{RunIndexError, COLUMNS};

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS runs(
    run_id TEXT PRIMARY KEY NOT NULL,
    workflow_name TEXT NOT NULL,
    workflow_path TEXT NOT NULL,
    goal TEXT NOT NULL,
    status TEXT NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    run_dir TEXT NOT NULL,
    parent_run_id TEXT
)";

/// Created after the columns are checked, so a foreign `runs` table reads as corrupt.
const SCHEMA_INDEX: &str = "CREATE INDEX IF NOT EXISTS runs_started_at ON runs(started_at)";

/// `PRAGMA user_version` of a file whose schema [`connect`] has made and checked
/// ("fabr"): later opens skip the statements that would only find it in place (parsing
/// them cost a third of a short run's instructions).
const SCHEMA_VERSION: i64 = 0x6661_6272;

/// Per-connection settings: see [`connect`].
const DURABILITY: &str = "PRAGMA journal_mode=PERSIST; PRAGMA synchronous=OFF;";

/// How long a writer waits for another process's transaction on `runs.db`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Why `runs.db` could not be opened: a file to replace, or another failure.
pub(super) enum ConnectError {
    Corrupt(String),
    Sqlite(rusqlite::Error),
}

impl ConnectError {
    pub(super) fn into_index_error(self, path: &Path) -> RunIndexError {
        match self {
            ConnectError::Corrupt(reason) => RunIndexError::Corrupt {
                path: path.to_path_buf(),
                reason,
            },
            ConnectError::Sqlite(source) => RunIndexError::Database {
                path: path.to_path_buf(),
                source,
            },
        }
    }
}

/// Opens `path` with the settings and schema of the index; a foreign or damaged file is
/// [`ConnectError::Corrupt`].
pub(super) fn connect(path: &Path) -> Result<Connection, ConnectError> {
    let classify = |error: rusqlite::Error| {
        if is_corruption(&error) {
            ConnectError::Corrupt(error.to_string())
        } else {
            ConnectError::Sqlite(error)
        }
    };
    let connection = Connection::open(path).map_err(classify)?;
    connection.busy_timeout(BUSY_TIMEOUT).map_err(classify)?;
    // The index is a cache that the next read rebuilds from the run directories, so it
    // needs no syncs (three fsyncs and a directory sync per write cost about 5 ms on a
    // run's start and end), and a kept rollback journal spares creating and deleting one
    // file per transaction.
    connection.execute_batch(DURABILITY).map_err(classify)?;
    let version: i64 = connection
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(classify)?;
    if version == SCHEMA_VERSION {
        return Ok(connection);
    }
    connection.execute_batch(SCHEMA).map_err(classify)?;
    let columns = {
        let mut statement = connection
            .prepare("SELECT name FROM pragma_table_info('runs') ORDER BY cid")
            .map_err(classify)?;
        let names = statement
            .query_map([], |row| row.get::<_, String>(0))
            .map_err(classify)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(classify)?;
        names.join(", ")
    };
    if columns != COLUMNS {
        return Err(ConnectError::Corrupt(format!(
            "table runs has columns ({columns})"
        )));
    }
    connection.execute_batch(SCHEMA_INDEX).map_err(classify)?;
    connection
        .pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(classify)?;
    // No integrity check here: it reads the whole file on every open. Damage deeper in
    // the file surfaces as `DatabaseCorrupt` on a read, which `RunIndex::read` repairs.
    Ok(connection)
}

/// Whether SQLite says the file is not (or no longer) a sound database.
pub(super) fn is_corruption(error: &rusqlite::Error) -> bool {
    matches!(
        error,
        rusqlite::Error::SqliteFailure(failure, _)
            if matches!(
                failure.code,
                rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt
            )
    )
}

/// Removes the database at `path` and its journal files.
pub(super) fn remove_database(path: &Path) -> Result<(), RunIndexError> {
    let mut files = vec![path.to_path_buf()];
    for suffix in ["-journal", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        files.push(PathBuf::from(name));
    }
    for file in files {
        match fs_err::remove_file(&file) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(RunIndexError::Io {
                    action: "cannot remove corrupt run index",
                    path: file,
                    source,
                })
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(connection: &Connection) -> i64 {
        connection
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .expect("reads the version")
    }

    /// The first open makes and checks the schema and marks the file; later opens see
    /// the mark and skip the statements; a file without it is checked as before.
    #[test]
    fn the_schema_is_made_and_checked_once_per_file() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("runs.db");
        let Ok(connection) = connect(&path) else {
            panic!("cannot create {}", path.display());
        };
        assert_eq!(version(&connection), SCHEMA_VERSION);
        connection
            .execute("INSERT INTO runs (run_id, workflow_name, workflow_path, goal, status, started_at, run_dir) VALUES ('r', 'w', 'w.fabro', '', 'running', 't', 'd')", [])
            .expect("inserts");
        drop(connection);
        let Ok(connection) = connect(&path) else {
            panic!("cannot open {} again", path.display());
        };
        assert_eq!(
            connection
                .query_row("SELECT count(*) FROM runs", [], |row| row.get::<_, i64>(0))
                .expect("counts"),
            1
        );
        drop(connection);

        let foreign = directory.path().join("foreign.db");
        Connection::open(&foreign)
            .and_then(|connection| connection.execute_batch("CREATE TABLE runs(id TEXT)"))
            .expect("creates");
        assert!(matches!(connect(&foreign), Err(ConnectError::Corrupt(_))));
    }
}
