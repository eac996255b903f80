//! Fuzzes the condition parser and evaluator. Nothing may panic.
#![no_main]

use std::borrow::Cow;

use fabro_language::{Condition, ConditionContext};
use libfuzzer_sys::fuzz_target;

struct Context;

impl ConditionContext for Context {
    fn outcome(&self) -> &str {
        "success"
    }

    fn preferred_label(&self) -> &str {
        "approve"
    }

    fn lookup(&self, key: &str) -> Option<Cow<'_, serde_json::Value>> {
        (key.len() % 2 == 0).then(|| Cow::Owned(serde_json::Value::String(key.to_owned())))
    }
}

fuzz_target!(|text: &str| {
    if let Ok(condition) = Condition::parse(text) {
        let _ = condition.evaluate(&Context);
        let _ = condition.to_string();
    }
});
