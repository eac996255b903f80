//! The run context (SPEC 6): string keys to JSON values, shared by all top-level stages.
//!
//! The run loop owns the context; handlers read a borrowed snapshot and return their
//! updates in the [`Outcome`](crate::Outcome). Parallel branches work on a deep copy.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// Keys that routing JSON and agent-written files may not set (SPEC 6.1).
pub(crate) fn is_reserved_key(key: &str) -> bool {
    const EXACT: &[&str] = &[
        "current_node",
        "outcome",
        "preferred_label",
        "failure_class",
        "failure_signature",
        "last_stage",
        "last_response",
    ];
    const PREFIXES: &[&str] = &["internal.", "graph.", "response.", "output."];
    EXACT.contains(&key) || PREFIXES.iter().any(|prefix| key.starts_with(prefix))
}

/// The run context.
#[derive(Debug, Clone, Default)]
pub(crate) struct Context {
    values: BTreeMap<String, Value>,
    /// Keys set or removed since [`Context::take_changed`], for cheap checkpoints.
    changed: BTreeSet<String>,
}

impl PartialEq for Context {
    fn eq(&self, other: &Context) -> bool {
        self.values == other.values
    }
}

impl Context {
    /// An empty context.
    pub(crate) fn new() -> Context {
        Context::default()
    }

    /// The value of `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        self.values.get(key)
    }

    /// The value of `key` as a string, if it is one.
    pub(crate) fn get_str(&self, key: &str) -> Option<&str> {
        self.values.get(key).and_then(Value::as_str)
    }

    /// Sets `key`.
    pub(crate) fn set(&mut self, key: impl Into<String>, value: impl Into<Value>) {
        let key = key.into();
        if !self.changed.contains(&key) {
            self.changed.insert(key.clone());
        }
        self.values.insert(key, value.into());
    }

    /// Removes `key`.
    pub(crate) fn remove(&mut self, key: &str) {
        if self.values.remove(key).is_some() && !self.changed.contains(key) {
            self.changed.insert(key.to_owned());
        }
    }

    /// Keys set or removed since the last call.
    pub(crate) fn take_changed(&mut self) -> BTreeSet<String> {
        std::mem::take(&mut self.changed)
    }

    /// Keys set or removed since [`Context::take_changed`] was last called.
    pub(crate) fn changed(&self) -> &BTreeSet<String> {
        &self.changed
    }

    /// All entries in key order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&String, &Value)> {
        self.values.iter()
    }

    /// The entries as a map (for checkpoints).
    pub(crate) fn values(&self) -> &BTreeMap<String, Value> {
        &self.values
    }

    /// Builds a context from saved entries.
    pub(crate) fn from_values(values: BTreeMap<String, Value>) -> Context {
        Context {
            values,
            changed: BTreeSet::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_keys() {
        for key in [
            "outcome",
            "internal.run_id",
            "graph.goal",
            "response.plan",
            "output.x",
            "last_response",
        ] {
            assert!(is_reserved_key(key), "{key}");
        }
        for key in ["tests_passed", "outcomes", "graphics", "command.output"] {
            assert!(!is_reserved_key(key), "{key}");
        }
    }
}
