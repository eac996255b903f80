//! Routing directives in LLM responses (SPEC 7.2): the reverse scan for the last
//! balanced JSON object with a recognised field.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// Fields a directive may carry.
const RECOGNISED: &[&str] = &[
    "outcome",
    "status",
    "failure_reason",
    "preferred_next_label",
    "preferred_label",
    "suggested_next_ids",
    "context_updates",
    "failure_class",
    "notes",
];

/// A routing directive; fields of the wrong type are dropped individually.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Directive {
    /// `outcome` (or `status` from agent-written files).
    pub outcome: Option<String>,
    /// `failure_reason`.
    pub failure_reason: Option<String>,
    /// `preferred_next_label` (alias `preferred_label`).
    pub preferred_label: Option<String>,
    /// `suggested_next_ids`.
    pub suggested_next_ids: Vec<String>,
    /// `context_updates`.
    pub context_updates: BTreeMap<String, Value>,
    /// `failure_class` (agent-written `status.json` only).
    pub failure_class: Option<String>,
    /// `notes`.
    pub notes: Option<String>,
}

/// Every top-level JSON object of `text`, left to right: from each `{` the matching `}`
/// is found with a scanner that respects strings and escapes; a span that parses is a
/// candidate and scanning resumes after it, otherwise one character after the `{`.
pub(crate) fn json_objects(text: &str) -> Vec<Map<String, Value>> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut position = 0;
    while let Some(offset) = bytes[position..].iter().position(|&b| b == b'{') {
        let start = position + offset;
        match matching_brace(bytes, start) {
            Some(end) => match serde_json::from_str::<Value>(&text[start..=end]) {
                Ok(Value::Object(object)) => {
                    found.push(object);
                    position = end + 1;
                }
                _ => position = start + 1,
            },
            None => position = start + 1,
        }
    }
    found
}

/// The index of the `}` closing the `{` at `start`, respecting JSON strings.
pub(crate) fn matching_brace(bytes: &[u8], start: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (index, &byte) in bytes.iter().enumerate().skip(start) {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                (false, _) => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(index);
                }
            }
            _ => {}
        }
    }
    None
}

/// The directive of `text`: the last top-level object with a recognised field.
pub(crate) fn extract(text: &str) -> Option<Directive> {
    json_objects(text)
        .into_iter()
        .rev()
        .find(|object| RECOGNISED.iter().any(|field| object.contains_key(*field)))
        .map(|object| directive_from(&object))
}

/// Reads the recognised fields of `object`, dropping wrongly typed ones.
pub(crate) fn directive_from(object: &Map<String, Value>) -> Directive {
    let string = |key: &str| object.get(key).and_then(Value::as_str).map(str::to_owned);
    Directive {
        outcome: string("outcome").or_else(|| string("status")),
        failure_reason: string("failure_reason"),
        preferred_label: string("preferred_next_label").or_else(|| string("preferred_label")),
        suggested_next_ids: object
            .get("suggested_next_ids")
            .and_then(Value::as_array)
            .map(|ids| {
                ids.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        context_updates: object
            .get("context_updates")
            .and_then(Value::as_object)
            .map(|updates| {
                updates
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default(),
        failure_class: string("failure_class"),
        notes: string("notes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_last_directive_anywhere_in_prose() {
        let text = r#"Plan: {"unrelated": 1}. Looks good overall.
```json
{"outcome": "fail", "failure_reason": "tests fail"}
```
Actually: {"preferred_next_label": "approve", "context_updates": {"score": 9}} done"#;
        let directive = extract(text).expect("found");
        assert_eq!(directive.preferred_label.as_deref(), Some("approve"));
        assert_eq!(directive.outcome, None);
        assert_eq!(directive.context_updates["score"], 9);
    }

    #[test]
    fn strings_with_braces_and_broken_objects_are_handled() {
        let text =
            r#"{"outcome": "succ}ess" garbage {"outcome":"success","notes":"a \"}\" b"} {broken"#;
        let directive = extract(text).expect("found");
        assert_eq!(directive.outcome.as_deref(), Some("success"));
        assert_eq!(directive.notes.as_deref(), Some("a \"}\" b"));
        assert_eq!(extract("no json here {"), None);
        assert_eq!(extract(r#"{"other": 1}"#), None);
    }

    #[test]
    fn wrong_types_are_dropped_individually() {
        let directive = extract(
            r#"{"outcome": 5, "preferred_label": "x", "suggested_next_ids": ["a", 1, "b"]}"#,
        )
        .expect("found");
        assert_eq!(directive.outcome, None);
        assert_eq!(directive.preferred_label.as_deref(), Some("x"));
        assert_eq!(directive.suggested_next_ids, ["a", "b"]);
    }
}
