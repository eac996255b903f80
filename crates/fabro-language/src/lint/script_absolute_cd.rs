//! `script_absolute_cd`: a command script that changes to an absolute directory
//! probably escapes the run's working directory (SPEC 3.2, 5.4).

use super::Lint;
use crate::diagnostic::{Diagnostic, Rule};
use crate::model::HandlerKind;

pub(super) fn check(lint: &mut Lint<'_>) {
    if !lint.workflow.has_handler(HandlerKind::Command) {
        return;
    }
    for node in lint.workflow.nodes() {
        if node.handler != HandlerKind::Command {
            continue;
        }
        let Some(attribute) = node.attributes.get_any(&["script", "tool_command"]) else {
            continue;
        };
        let Some(path) = absolute_cd(&attribute.value) else {
            continue;
        };
        lint.report(
            Diagnostic::new(
                Rule::ScriptAbsoluteCd,
                format!(
                    "script of command node '{}' changes to the absolute directory '{path}'",
                    node.id
                ),
            )
            .at(attribute.key_span)
            .node(&node.id)
            .fix("use a path relative to the working directory"),
        );
    }
}

/// The target of the first `cd` word followed by spaces or tabs and `/`, up to the next
/// whitespace or shell separator.
fn absolute_cd(script: &str) -> Option<&str> {
    let bytes = script.as_bytes();
    let mut search = 0;
    while let Some(offset) = script[search..].find("cd") {
        let start = search + offset;
        search = start + 2;
        let word_start = start == 0 || !is_word_byte(bytes[start - 1]);
        let rest = &script[start + 2..];
        let after_space = rest.trim_start_matches([' ', '\t']);
        if word_start && after_space.len() < rest.len() && after_space.starts_with('/') {
            let end = after_space
                .find(|c: char| c.is_whitespace() || matches!(c, ';' | '&' | '|' | ')'))
                .unwrap_or(after_space.len());
            return Some(&after_space[..end]);
        }
    }
    None
}

fn is_word_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

#[cfg(test)]
mod tests {
    use super::absolute_cd;
    use crate::diagnostic::Rule;
    use crate::lint::test_support::{assert_fires, frame, position};

    #[test]
    fn detects_cd_words_only() {
        assert_eq!(absolute_cd("cd /tmp && ls"), Some("/tmp"));
        assert_eq!(absolute_cd("make; cd\t/srv/app;make"), Some("/srv/app"));
        assert_eq!(absolute_cd("(cd /x)"), Some("/x"));
        assert_eq!(absolute_cd("abcd /x"), None);
        assert_eq!(absolute_cd("cd/x"), None);
        assert_eq!(absolute_cd("cd src && cd ../x"), None);
        assert_eq!(absolute_cd("cd\n/bin/true"), None);
    }

    #[test]
    fn relative_cd_passes() {
        let text = frame("c [shape=parallelogram, script=\"cd sub && make\"]\n a [prompt=\"cd /tmp\"]\n start -> c -> a -> exit");
        assert_fires(Rule::ScriptAbsoluteCd, &text, 0);
    }

    #[test]
    fn absolute_cd_in_script_warns() {
        let text = frame(
            "c [shape=parallelogram, tool_command=\"cd /tmp/work && make\"]\n start -> c -> exit",
        );
        let found = assert_fires(Rule::ScriptAbsoluteCd, &text, 1);
        assert_eq!(
            found[0].message,
            "script of command node 'c' changes to the absolute directory '/tmp/work'"
        );
        assert_eq!(position(&text, &found[0]), (4, 25));
    }
}
