//! Structured output of LLM nodes (SPEC 7.3, 7.4): validated routing directives for
//! `output_schema="routing"`, JSON Schema validation for custom schemas, and the
//! corrective message of the repair loop.

use fabro_language::StageStatus;
use serde_json::{Map, Value};

use crate::routing::{self, Directive};

/// Validation errors quoted in one repair message.
const MAX_QUOTED_ERRORS: usize = 5;

/// Routing fields whose presence as a quoted key marks a malformed directive (SPEC 7.3).
const ROUTING_FIELDS: &[&str] = &[
    "outcome",
    "status",
    "failure_reason",
    "preferred_next_label",
    "preferred_label",
    "suggested_next_ids",
    "context_updates",
];

/// What validated routing found in one source.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RoutingCheck {
    /// A well-typed directive.
    Valid(Directive),
    /// A malformed or wrongly typed directive: the repair loop starts.
    Invalid(Vec<String>),
    /// Nothing that looks like a directive: the next source is consulted.
    Absent,
}

/// Validated routing of `text` (SPEC 7.3): the last parsable object with a recognised
/// field must have correctly typed fields and a canonical status, alias or `retry` as
/// outcome; without one, a balanced span that does not parse but quotes a routing field
/// as a key is malformed.
pub(crate) fn check_routing(text: &str) -> RoutingCheck {
    let directive = routing::json_objects(text)
        .into_iter()
        .rev()
        .find(|object| {
            ROUTING_FIELDS
                .iter()
                .any(|field| object.contains_key(*field))
        });
    if let Some(object) = directive {
        let errors = routing_type_errors(&object);
        return if errors.is_empty() {
            RoutingCheck::Valid(routing::directive_from(&object))
        } else {
            RoutingCheck::Invalid(errors)
        };
    }
    match malformed_span(text) {
        Some(error) => RoutingCheck::Invalid(vec![error]),
        None => RoutingCheck::Absent,
    }
}

fn routing_type_errors(object: &Map<String, Value>) -> Vec<String> {
    let mut errors = Vec::new();
    for (key, value) in object {
        let problem = match key.as_str() {
            "outcome" | "status" => match value.as_str() {
                None => Some(format!("'{key}' must be a string")),
                Some(text) if StageStatus::parse(text).is_none() => Some(format!(
                    "'{key}' must be a status (success, partial_success, fail, retry, skipped), not '{text}'"
                )),
                Some(_) => None,
            },
            "failure_reason" | "preferred_next_label" | "preferred_label" | "notes" => {
                (!value.is_string()).then(|| format!("'{key}' must be a string"))
            }
            "suggested_next_ids" => {
                let strings = value
                    .as_array()
                    .is_some_and(|items| items.iter().all(Value::is_string));
                (!strings).then(|| format!("'{key}' must be an array of strings"))
            }
            "context_updates" => {
                (!value.is_object()).then(|| format!("'{key}' must be an object"))
            }
            _ => None,
        };
        errors.extend(problem);
    }
    errors
}

/// The error of the first balanced `{…}` span that does not parse as JSON but quotes a
/// routing field as a key.
fn malformed_span(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut position = 0;
    while let Some(offset) = bytes[position..].iter().position(|&b| b == b'{') {
        let start = position + offset;
        position = start + 1;
        let Some(end) = routing::matching_brace(bytes, start) else {
            continue;
        };
        let span = &text[start..=end];
        if let Err(error) = serde_json::from_str::<Value>(span) {
            if ROUTING_FIELDS.iter().any(|field| quotes_key(span, field)) {
                return Some(format!("the routing object is not valid JSON: {error}"));
            }
        }
    }
    None
}

/// Whether `span` contains `"{field}"` followed by optional whitespace and `:`.
fn quotes_key(span: &str, field: &str) -> bool {
    let quoted = format!("\"{field}\"");
    span.match_indices(&quoted)
        .any(|(index, _)| span[index + quoted.len()..].trim_start().starts_with(':'))
}

/// Validates the last top-level JSON object of `text` against `schema` (SPEC 7.4):
/// the object, or at most five validation errors.
pub(crate) fn check_custom(text: &str, schema: &Value) -> Result<Value, Vec<String>> {
    let validator = jsonschema::validator_for(schema)
        .map_err(|error| vec![format!("the output schema is invalid: {error}")])?;
    let Some(object) = routing::json_objects(text).pop() else {
        return Err(vec!["the response contains no JSON object".to_owned()]);
    };
    let value = Value::Object(object);
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .take(MAX_QUOTED_ERRORS)
        .map(|error| {
            let path = error.instance_path().to_string();
            if path.is_empty() {
                error.to_string()
            } else {
                format!("{path}: {error}")
            }
        })
        .collect();
    if errors.is_empty() {
        Ok(value)
    } else {
        Err(errors)
    }
}

/// The corrective message of a repair turn (SPEC 7.4).
pub(crate) fn repair_message(errors: &[String]) -> String {
    let quoted: Vec<&str> = errors
        .iter()
        .take(MAX_QUOTED_ERRORS)
        .map(String::as_str)
        .collect();
    format!(
        "Your previous response did not match the required output format: {}. Reply again with a corrected JSON object.",
        quoted.join("; ")
    )
}

/// The failure reason when the repairs ran out (SPEC 7.4).
pub(crate) fn exhausted_reason(repairs: u32) -> String {
    format!("output schema validation failed after {repairs} repair attempt(s)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_routing_directives_pass() {
        let check = check_routing(
            "Done.\n```json\n{\"outcome\": \"success\", \"preferred_next_label\": \"ship\"}\n```",
        );
        match check {
            RoutingCheck::Valid(directive) => {
                assert_eq!(directive.preferred_label.as_deref(), Some("ship"));
            }
            other => panic!("expected a valid directive, got {other:?}"),
        }
        assert!(matches!(
            check_routing(r#"{"outcome": "retry"}"#),
            RoutingCheck::Valid(_)
        ));
    }

    #[test]
    fn wrong_types_and_custom_outcomes_are_invalid() {
        let RoutingCheck::Invalid(errors) =
            check_routing(r#"{"outcome": "needs_review", "suggested_next_ids": [1]}"#)
        else {
            panic!("expected invalid");
        };
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0].contains("'outcome' must be a status"),
            "{errors:?}"
        );
        assert!(errors[1].contains("array of strings"), "{errors:?}");
    }

    #[test]
    fn broken_fragments_count_only_without_a_parsable_directive() {
        assert!(matches!(
            check_routing(r#"Result: {"outcome": "success",}"#),
            RoutingCheck::Invalid(_)
        ));
        assert!(matches!(
            check_routing(r#"{"outcome": "success"} e.g. {"outcome": oops}"#),
            RoutingCheck::Valid(_)
        ));
        assert_eq!(check_routing("no json {here}"), RoutingCheck::Absent);
        assert_eq!(check_routing(r#"{"other": 1}"#), RoutingCheck::Absent);
    }

    #[test]
    fn custom_schemas_validate_the_last_object() {
        let schema = serde_json::json!({
            "type": "object",
            "required": ["score"],
            "properties": {"score": {"type": "integer"}}
        });
        let value = check_custom(r#"{"x": 1} then {"score": 7}"#, &schema).expect("valid");
        assert_eq!(value["score"], 7);
        let errors = check_custom(r#"{"score": "high"}"#, &schema).unwrap_err();
        assert_eq!(errors.len(), 1);
        assert!(errors[0].contains("/score"), "{errors:?}");
        assert_eq!(
            check_custom("none", &schema).unwrap_err(),
            ["the response contains no JSON object"]
        );
    }

    #[test]
    fn repair_messages_quote_at_most_five_errors() {
        let errors: Vec<String> = (1..=7).map(|n| format!("e{n}")).collect();
        assert_eq!(
            repair_message(&errors),
            "Your previous response did not match the required output format: e1; e2; e3; e4; e5. Reply again with a corrected JSON object."
        );
        assert_eq!(
            exhausted_reason(2),
            "output schema validation failed after 2 repair attempt(s)"
        );
    }
}
