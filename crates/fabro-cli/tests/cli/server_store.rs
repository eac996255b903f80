//! `fabro server --store URL --blobs URL` (SPEC 18.1): a store that cannot be used at
//! start exits 2 before the server listens, naming the store with its password
//! redacted; a schema newer than the binary is refused with the SPEC's message.

use fabro_test_support::{TestDatabase, TestEnv};

use crate::{code, stderr};

fn server(env: &TestEnv, store: &str, extra: &[&str]) -> std::process::Output {
    let blobs = format!("file://{}", env.work_dir().join("blobs").display());
    env.command(env!("CARGO_BIN_EXE_fabro"))
        .args([
            "server",
            "--bind",
            "127.0.0.1:0",
            "--store",
            store,
            "--blobs",
        ])
        .arg(blobs)
        .args(extra)
        .output()
        .expect("fabro runs")
}

#[test]
fn a_server_on_an_unreachable_store_exits_2_without_its_password() {
    let env = TestEnv::new("server_store_unreachable");
    let output = server(
        &env,
        "postgres://fabro:pw-FAKE-hidden@127.0.0.1:9/fabro",
        &[],
    );
    assert_eq!(code(&output), 2);
    let text = stderr(&output);
    assert!(
        text.starts_with("error: cannot reach the store postgres://fabro:***@127.0.0.1:9/fabro: "),
        "{text}"
    );
    assert!(!text.contains("pw-FAKE-hidden"), "{text}");
    assert!(!text.contains("listening"), "{text}");
}

#[test]
fn a_server_refuses_a_store_schema_newer_than_the_binary() {
    let Some(database) =
        TestDatabase::create("a_server_refuses_a_store_schema_newer_than_the_binary")
    else {
        return;
    };
    let env = TestEnv::new("server_store_newer");
    let migrated = env
        .command(env!("CARGO_BIN_EXE_fabro"))
        .args(["store", "migrate", "--store", &database.url()])
        .output()
        .expect("fabro runs");
    assert_eq!(code(&migrated), 0, "{}", stderr(&migrated));
    let version: i64 = database
        .query("SELECT max(version) FROM _sqlx_migrations")
        .parse()
        .expect("a version");
    let newer = version + 1;
    database.query(&format!(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES ({newer}, 'from a newer fabro', true, '\\x00', 0)"
    ));
    let expected =
        format!("error: the store's schema is version {newer}; this fabro knows up to {version}\n");
    for extra in [&[][..], &["--no-migrate"][..]] {
        let output = server(&env, &database.url(), extra);
        assert_eq!(code(&output), 2, "{extra:?}");
        assert_eq!(stderr(&output), expected, "{extra:?}");
    }
}
