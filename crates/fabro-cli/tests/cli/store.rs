//! `fabro store migrate` (SPEC 18.1) against a database of the test's own on the
//! machine's PostgreSQL: the schema is created once, a second run changes nothing, a
//! schema newer than the binary and an unreachable store exit 2 with the SPEC's
//! messages, and no password is ever printed.

use fabro_test_support::{TestDatabase, TestEnv};

use crate::{code, stderr, stdout};

fn migrate(env: &TestEnv, url: &str) -> std::process::Output {
    env.command(env!("CARGO_BIN_EXE_fabro"))
        .args(["store", "migrate", "--store", url])
        .output()
        .expect("fabro runs")
}

#[test]
fn store_migrate_creates_the_schema_and_refuses_a_newer_one() {
    let Some(database) =
        TestDatabase::create("store_migrate_creates_the_schema_and_refuses_a_newer_one")
    else {
        return;
    };
    let env = TestEnv::new("store_migrate");
    let output = migrate(&env, &database.url());
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let version: i64 = database
        .query("SELECT max(version) FROM _sqlx_migrations")
        .parse()
        .expect("a version");
    assert_eq!(
        stdout(&output),
        format!("store {}: schema version {version}\n", database.url())
    );
    let tables = database.query("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'");

    // Through FABRO_STORE, a second time: nothing changes.
    let output = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["store", "migrate"])
        .env("FABRO_STORE", database.url())
        .output()
        .expect("fabro runs");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(
        database.query("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"),
        tables
    );

    let newer = version + 1;
    database.query(&format!(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES ({newer}, 'from a newer fabro', true, '\\x00', 0)"
    ));
    let output = migrate(&env, &database.url());
    assert_eq!(code(&output), 2, "{}", stdout(&output));
    assert_eq!(
        stderr(&output),
        format!("error: the store's schema is version {newer}; this fabro knows up to {version}\n")
    );
}

#[test]
fn an_unreachable_store_exits_2_without_its_password() {
    let env = TestEnv::new("store_unreachable");
    let output = migrate(&env, "postgres://fabro:pw-FAKE-hidden@127.0.0.1:9/fabro");
    assert_eq!(code(&output), 2);
    let text = stderr(&output);
    assert!(
        text.starts_with("error: cannot reach the store postgres://fabro:***@127.0.0.1:9/fabro: "),
        "{text}"
    );
    assert!(!text.contains("pw-FAKE-hidden"), "{text}");

    let output = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["store", "migrate"])
        .env_remove("FABRO_STORE")
        .output()
        .expect("fabro runs");
    assert_eq!(code(&output), 2);
    assert!(
        stderr(&output).contains("--store URL"),
        "{}",
        stderr(&output)
    );
}
