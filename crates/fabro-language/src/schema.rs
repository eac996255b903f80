//! Output schemas: checking that an `output_schema` is a usable JSON Schema (SPEC 7.4).

/// Parses `text` as JSON and checks it against the JSON Schema meta-schema (draft
/// 2020-12 unless `$schema` says otherwise). Returns the schema or a one-line reason.
pub fn parse_schema(text: &str) -> Result<serde_json::Value, String> {
    let schema: serde_json::Value =
        serde_json::from_str(text).map_err(|error| format!("invalid JSON: {error}"))?;
    check_schema(&schema)?;
    Ok(schema)
}

/// Checks an already parsed schema.
pub fn check_schema(schema: &serde_json::Value) -> Result<(), String> {
    if !schema.is_object() {
        return Err("a schema must be a JSON object".to_owned());
    }
    jsonschema::meta::validate(schema).map_err(|error| error.to_string())?;
    jsonschema::validator_for(schema).map_err(|error| error.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_valid_schemas() {
        let schema = parse_schema(r#"{"type":"object","required":["a"]}"#).expect("valid");
        assert_eq!(schema["type"], "object");
    }

    #[test]
    fn rejects_invalid_json_and_invalid_schemas() {
        assert!(parse_schema("{not json")
            .unwrap_err()
            .contains("invalid JSON"));
        assert!(parse_schema("[1]").unwrap_err().contains("object"));
        assert!(parse_schema(r#"{"type": 5}"#).is_err());
        assert!(parse_schema(r#"{"type":"string","pattern":"(("}"#).is_err());
    }
}
