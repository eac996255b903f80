//! The schema of a shared store, against a database of each test's own.

use fabro_test_support::TestDatabase;

use super::*;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().expect("a tokio runtime")
}

#[test]
fn migrations_create_the_schema_once() {
    let Some(database) = TestDatabase::create("migrations_create_the_schema_once") else {
        return;
    };
    let runtime = runtime();
    let store = runtime
        .block_on(PgStore::connect(&database.url()))
        .expect("connects");
    assert_eq!(
        runtime.block_on(store.schema_version()).expect("reads"),
        None
    );
    let version = runtime.block_on(store.migrate()).expect("migrates");
    assert_eq!(version, PgStore::known_version());
    assert!(version >= 1);
    // Again: nothing to do, same version.
    assert_eq!(
        runtime.block_on(store.migrate()).expect("migrates"),
        version
    );
    assert_eq!(
        database.query(
            "SELECT count(*) FROM information_schema.tables WHERE table_name IN \
             ('runs', 'run_events', 'run_checkpoints', 'questions', 'workers')"
        ),
        "5"
    );
}

#[test]
fn a_schema_newer_than_the_binary_is_refused() {
    let Some(database) = TestDatabase::create("a_schema_newer_than_the_binary_is_refused") else {
        return;
    };
    let runtime = runtime();
    let store = runtime
        .block_on(PgStore::connect(&database.url()))
        .expect("connects");
    runtime.block_on(store.migrate()).expect("migrates");
    let future = PgStore::known_version() + 1;
    database.query(&format!(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES ({future}, 'from a newer fabro', true, '\\x00', 0)"
    ));
    let applied = database.query("SELECT count(*) FROM _sqlx_migrations");
    let error = runtime.block_on(store.migrate()).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "the store's schema is version {future}; this fabro knows up to {}",
            PgStore::known_version()
        )
    );
    // Nothing was applied or removed.
    assert_eq!(
        database.query("SELECT count(*) FROM _sqlx_migrations"),
        applied
    );
}

#[test]
fn an_unreachable_store_is_named_without_its_password() {
    let runtime = runtime();
    // A port nothing listens on (the discard port) and a password to hide.
    let error = runtime
        .block_on(PgStore::connect_within(
            "postgres://fabro:pw-FAKE-secret@127.0.0.1:9/fabro",
            Duration::from_millis(500),
        ))
        .unwrap_err();
    let text = error.to_string();
    assert!(
        text.starts_with("cannot reach the store postgres://fabro:***@127.0.0.1:9/fabro"),
        "{text}"
    );
    assert!(!text.contains("pw-FAKE-secret"), "{text}");
}
