//! [`ServerStore`]: the store a test's `fabro server` processes keep their runs in (issue
//! 31 acceptance 2): the files of the test's `$FABRO_HOME`, which local `fabro` commands
//! read too, or, with `FABRO_TEST_STORE=postgres`, a PostgreSQL database of the test's
//! own and a blob directory beside the home, which local commands never see.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::{TestDatabase, TestEnv};

/// The store of one test's servers; shared by the servers that follow one another in a
/// test (the database is dropped with the last of them).
#[derive(Debug)]
pub struct ServerStore {
    shared: Option<SharedStore>,
}

/// A PostgreSQL database and a `file://` blob directory.
#[derive(Debug)]
struct SharedStore {
    database: TestDatabase,
    blobs: PathBuf,
}

/// A record of a run that the API does not serve.
#[derive(Clone, Copy, Debug)]
pub enum Record {
    /// The run's manifest.
    Manifest,
    /// The run's checkpoint.
    Checkpoint,
}

impl ServerStore {
    /// The store `FABRO_TEST_STORE` names for `env`'s servers: with `postgres`, a fresh
    /// database, else the files of the home.
    ///
    /// # Panics
    /// With `FABRO_TEST_STORE=postgres` when PostgreSQL does not answer: the variable
    /// asks for it.
    pub fn for_test(env: &TestEnv) -> Arc<ServerStore> {
        if std::env::var("FABRO_TEST_STORE").is_ok_and(|store| store == "postgres") {
            let database = TestDatabase::create("server_store")
                .expect("FABRO_TEST_STORE=postgres needs PostgreSQL on 127.0.0.1:5432");
            let blobs = env.fabro_home().with_file_name("store-blobs");
            return Arc::new(ServerStore {
                shared: Some(SharedStore { database, blobs }),
            });
        }
        ServerStore::local()
    }

    /// The files of the home, whatever `FABRO_TEST_STORE` says.
    pub fn local() -> Arc<ServerStore> {
        Arc::new(ServerStore { shared: None })
    }

    /// Whether local `fabro` commands see the runs of the servers on this store.
    pub fn is_home(&self) -> bool {
        self.shared.is_none()
    }

    /// The environment that puts a server on this store (`FABRO_STORE`, `FABRO_BLOBS`).
    pub fn server_env(&self) -> Vec<(&'static str, String)> {
        self.shared.as_ref().map_or_else(Vec::new, |shared| {
            vec![
                ("FABRO_STORE", shared.database.url()),
                ("FABRO_BLOBS", format!("file://{}", shared.blobs.display())),
            ]
        })
    }

    /// The blob directory of the shared store.
    pub fn blob_dir(&self) -> Option<&Path> {
        self.shared.as_ref().map(|shared| shared.blobs.as_path())
    }

    /// The text of `record` of the run `run_id` in the database (empty when there is
    /// none); `None` on the home, whose records are the files of the run directory.
    ///
    /// # Panics
    /// When `run_id` is not a plain id (it is put in the query as it is).
    pub fn stored_record(&self, run_id: &str, record: Record) -> Option<String> {
        let shared = self.shared.as_ref()?;
        let query = match record {
            Record::Manifest => "SELECT manifest FROM runs",
            Record::Checkpoint => "SELECT checkpoint FROM run_checkpoints",
        };
        assert!(
            run_id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-'),
            "a plain run id: {run_id}"
        );
        Some(
            shared
                .database
                .query(&format!("{query} WHERE run_id = '{run_id}'")),
        )
    }

    /// Every row of the shared store as text (stage files as escaped text); `None` on
    /// the home, whose records are its files.
    pub fn dump(&self) -> Option<String> {
        let database = &self.shared.as_ref()?.database;
        let tables = database.query(
            "SELECT string_agg(query_to_xml(format('SELECT * FROM %I', table_name), true, false, '')::text, E'\\n') \
             FROM information_schema.tables WHERE table_schema = 'public'",
        );
        let files =
            database.query("SELECT string_agg(encode(content, 'escape'), E'\\n') FROM stage_files");
        Some(format!("{tables}\n{files}"))
    }
}
