//! Run variables and their expansion in prompts, scripts, the goal and
//! `human.default_choice` (SPEC 2.7).

use std::borrow::Cow;
use std::collections::BTreeMap;

/// The variables of a run: `goal` plus the `[run.vars]` / `--var` entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Variables {
    goal: String,
    values: BTreeMap<String, String>,
}

impl Variables {
    /// Variables with the resolved goal and the given entries.
    pub fn new(goal: impl Into<String>, values: BTreeMap<String, String>) -> Variables {
        Variables {
            goal: goal.into(),
            values,
        }
    }

    /// The resolved goal.
    pub fn goal(&self) -> &str {
        &self.goal
    }

    /// The value of `name`; `goal` is always defined (possibly empty).
    pub fn get(&self, name: &str) -> Option<&str> {
        if name == "goal" {
            return Some(&self.goal);
        }
        self.values.get(name).map(String::as_str)
    }

    /// Whether `name` is defined.
    pub fn is_defined(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// The entries other than `goal`.
    pub fn values(&self) -> &BTreeMap<String, String> {
        &self.values
    }

    /// Expands `$NAME` and `{{ NAME }}` in `text` in one pass.
    pub fn expand<'t>(&self, text: &'t str) -> Cow<'t, str> {
        expand_with(text, &|name| self.get(name))
    }
}

/// Resolves the goal from its sources, highest precedence first (`--goal`, `[run] goal`,
/// the graph attribute). A source that mentions `$goal` or `{{ goal }}` has it replaced by
/// the next source's resolved goal, or keeps it literally when there is none.
pub fn resolve_goal(sources: &[&str], values: &BTreeMap<String, String>) -> String {
    let Some((first, rest)) = sources.split_first() else {
        return String::new();
    };
    let fallback = (!rest.is_empty()).then(|| resolve_goal(rest, values));
    expand_with(first, &|name| {
        if name == "goal" {
            fallback.as_deref()
        } else {
            values.get(name).map(String::as_str)
        }
    })
    .into_owned()
}

/// Names written as `{{ NAME }}` in `text` (outside raw blocks), with their byte ranges,
/// for the `undefined_variable` rule.
pub fn template_references(text: &str) -> Vec<(&str, std::ops::Range<usize>)> {
    let mut found = Vec::new();
    scan(text, &mut |piece| {
        if let Piece::Template { name, range, .. } = piece {
            found.push((name, range));
        }
    });
    found
}

fn expand_with<'t, 'v>(text: &'t str, lookup: &dyn Fn(&str) -> Option<&'v str>) -> Cow<'t, str> {
    if !text.contains(['$', '{']) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    scan(text, &mut |piece| match piece {
        Piece::Text(text) => out.push_str(text),
        Piece::Dollar { name, raw } | Piece::Template { name, raw, .. } => {
            out.push_str(lookup(name).unwrap_or(raw));
        }
    });
    Cow::Owned(out)
}

enum Piece<'t> {
    Text(&'t str),
    Dollar {
        name: &'t str,
        raw: &'t str,
    },
    Template {
        name: &'t str,
        raw: &'t str,
        range: std::ops::Range<usize>,
    },
}

const RAW_OPEN: &str = "{% raw %}";
const RAW_CLOSE: &str = "{% endraw %}";

/// Splits `text` into literal text and variable references, in order.
fn scan<'t>(text: &'t str, emit: &mut dyn FnMut(Piece<'t>)) {
    let bytes = text.as_bytes();
    let mut position = 0;
    let mut literal_start = 0;
    while position < bytes.len() {
        let rest = &text[position..];
        if rest.starts_with(RAW_OPEN) {
            emit(Piece::Text(&text[literal_start..position]));
            let body_start = position + RAW_OPEN.len();
            let body_end = text[body_start..]
                .find(RAW_CLOSE)
                .map_or(text.len(), |offset| body_start + offset);
            emit(Piece::Text(&text[body_start..body_end]));
            position = (body_end + RAW_CLOSE.len()).min(text.len());
            literal_start = position;
            continue;
        }
        if bytes[position] == b'$' {
            let name_len = identifier_len(&rest[1..]);
            if name_len > 0 {
                emit(Piece::Text(&text[literal_start..position]));
                let end = position + 1 + name_len;
                emit(Piece::Dollar {
                    name: &text[position + 1..end],
                    raw: &text[position..end],
                });
                position = end;
                literal_start = end;
                continue;
            }
        }
        if rest.starts_with("{{") {
            if let Some((name, len)) = template(rest) {
                emit(Piece::Text(&text[literal_start..position]));
                let end = position + len;
                emit(Piece::Template {
                    name,
                    raw: &text[position..end],
                    range: position..end,
                });
                position = end;
                literal_start = end;
                continue;
            }
        }
        position += 1;
        while position < bytes.len() && !text.is_char_boundary(position) {
            position += 1;
        }
    }
    emit(Piece::Text(&text[literal_start..]));
}

fn identifier_len(text: &str) -> usize {
    let bytes = text.as_bytes();
    match bytes.first() {
        Some(b) if b.is_ascii_alphabetic() || *b == b'_' => {}
        _ => return 0,
    }
    bytes
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
        .count()
}

/// Parses `{{ NAME }}` at the start of `text`: the name and the total length.
fn template(text: &str) -> Option<(&str, usize)> {
    let inner = &text[2..];
    let leading = inner.len() - inner.trim_start_matches(' ').len();
    let name_start = 2 + leading;
    let name_len = identifier_len(&text[name_start..]);
    if name_len == 0 {
        return None;
    }
    let after = &text[name_start + name_len..];
    let trailing = after.len() - after.trim_start_matches(' ').len();
    let close = name_start + name_len + trailing;
    text[close..]
        .starts_with("}}")
        .then(|| (&text[name_start..name_start + name_len], close + 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expected: &str) {
        let values = BTreeMap::from([
            ("name".to_owned(), "World".to_owned()),
            ("dir".to_owned(), "src".to_owned()),
        ]);
        let variables = Variables::new("Ship $name", values);
        assert_eq!(variables.expand(text), expected, "expanding {text:?}");
    }

    #[test]
    fn expands_defined_variables_once() {
        check("Hello $name!", "Hello World!");
        check("Hello {{name}} and {{ dir }}", "Hello World and src");
        check("$goal", "Ship $name");
        check("$name_suffix stays", "$name_suffix stays");
    }

    #[test]
    fn leaves_undefined_and_shell_forms_alone() {
        check("cd $HOME && echo ${name}", "cd $HOME && echo ${name}");
        check("{{ missing }} $missing", "{{ missing }} $missing");
        check("{{ name", "{{ name");
        check("$ 5 $", "$ 5 $");
    }

    #[test]
    fn raw_blocks_are_verbatim_and_markers_removed() {
        check(
            "{% raw %}{{ name }} $name{% endraw %} $name",
            "{{ name }} $name World",
        );
        check("{% raw %}unterminated $name", "unterminated $name");
    }

    #[test]
    fn goal_resolution_falls_through_self_references() {
        let values = BTreeMap::new();
        assert_eq!(
            resolve_goal(&["Fix: $goal", "the bug"], &values),
            "Fix: the bug"
        );
        assert_eq!(resolve_goal(&["$goal"], &values), "$goal");
        assert_eq!(resolve_goal(&[], &values), "");
    }

    #[test]
    fn template_references_report_ranges() {
        let text = "a {{ x }} {% raw %}{{ y }}{% endraw %} {{z}}";
        let found: Vec<_> = template_references(text)
            .into_iter()
            .map(|(name, range)| (name, &text[range]))
            .collect();
        assert_eq!(found, [("x", "{{ x }}"), ("z", "{{z}}")]);
    }
}
