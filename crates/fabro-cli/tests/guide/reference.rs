//! The generated reference pages: configuration (from the parser's key lists) and CLI
//! (from clap's help of every subcommand). Set `FABRO_UPDATE_GUIDE=1` to rewrite them.

use fabro_test_support::{workspace_root, TestEnv};

use super::fabro;

const REGENERATE: &str =
    "regenerate with: FABRO_UPDATE_GUIDE=1 cargo test -p fabro-cli --test guide";

/// Compares `generated` with the page at `relative`, or writes it when asked to.
fn compare_or_update(relative: &str, generated: &str) {
    let path = workspace_root().join(relative);
    if std::env::var_os("FABRO_UPDATE_GUIDE").is_some() {
        fs_err::write(&path, generated).expect("the guide is writable");
        return;
    }
    let current = fs_err::read_to_string(&path).unwrap_or_default();
    assert!(current == generated, "{relative} is stale; {REGENERATE}");
}

/// Every configuration key the parser accepts is described, every description names a
/// key, and the page is what the descriptions generate.
#[test]
fn the_configuration_reference_is_complete_and_current() {
    use fabro_engine::configuration::reference;
    assert_eq!(
        reference::undocumented_keys(),
        Vec::<String>::new(),
        "keys without a description in crates/fabro-engine/src/config/reference.rs"
    );
    assert_eq!(
        reference::unknown_descriptions(),
        Vec::<&str>::new(),
        "descriptions of keys the parser does not accept"
    );
    compare_or_update(
        "docs/guide/src/reference/configuration.md",
        &reference::markdown(),
    );
}

/// The subcommands listed in the `Commands:` section of a help text, `help` left out.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| line.trim() != "Commands:")
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter(|line| !line.starts_with("   "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// The CLI reference: clap's long help of `fabro` and of every subcommand, depth first.
fn cli_reference() -> String {
    let env = TestEnv::new("guide-cli");
    let mut page = String::from(
        "# CLI reference\n\n<!-- Generated from clap's help (crates/fabro-cli/src/args.rs); do \
         not edit. Regenerate with: FABRO_UPDATE_GUIDE=1 cargo test -p fabro-cli --test guide \
         -->\n\nThe help of every command, as `fabro COMMAND --help` prints it. Exit codes: 0 \
         success, 1 failure, 2 usage or configuration error, 3 partial success (`run`, \
         `resume`), 130 cancelled.\n",
    );
    let mut pending = vec![Vec::<String>::new()];
    while let Some(path) = pending.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let output = fabro(&env, &args);
        assert_eq!(output.status.code(), Some(0), "fabro {args:?}");
        let help = String::from_utf8_lossy(&output.stdout).into_owned();
        let title = if path.is_empty() {
            "fabro".to_owned()
        } else {
            format!("fabro {}", path.join(" "))
        };
        page.push_str(&format!(
            "\n## `{title}`\n\n```text\n{}\n```\n",
            help.trim_end()
        ));
        for name in subcommands(&help).into_iter().rev() {
            let mut next = path.clone();
            next.push(name);
            pending.push(next);
        }
    }
    page
}

/// The CLI reference page is what clap prints today.
#[test]
fn the_cli_reference_is_current() {
    compare_or_update("docs/guide/src/reference/cli.md", &cli_reference());
}

/// The server's OpenAPI document, kept in the guide so that readers can browse the API
/// without starting a server, is what the server serves at `/api/v1/openapi.json`.
#[tokio::test]
async fn the_openapi_document_in_the_guide_is_current() {
    let document = fabro_server::openapi::document().await.0;
    let mut text =
        serde_json::to_string_pretty(&document).expect("the OpenAPI document serialises");
    text.push('\n');
    compare_or_update("docs/guide/src/reference/openapi.json", &text);
}
