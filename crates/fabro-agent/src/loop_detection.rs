//! Tool-call loop detection (SPEC 10.4.5).

use std::collections::VecDeque;

use fabro_llm::ToolCall;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The steering message appended when a loop is detected (exact SPEC text).
pub const LOOP_STEERING_MESSAGE: &str = "WARNING: Loop detected. You appear to be repeating the same tool calls. Please try a different approach or ask for clarification.";

/// Turns examined.
const WINDOW: usize = 10;

/// The signature of one assistant turn: (tool name, SHA-256 of canonical arguments).
type TurnSignature = Vec<(String, [u8; 32])>;

/// Remembers the signatures of the newest assistant turns with tool calls.
#[derive(Debug, Clone, Default)]
pub struct LoopDetector {
    window: VecDeque<TurnSignature>,
}

impl LoopDetector {
    /// Records one turn's calls; returns the cycle length (1, 2 or 3) when the newest
    /// 10 turns consist of identical groups of that length, and then clears the window.
    pub fn record(&mut self, calls: &[ToolCall]) -> Option<usize> {
        if calls.is_empty() {
            return None;
        }
        let signature = calls
            .iter()
            .map(|call| {
                let mut canonical = String::new();
                write_canonical(&call.arguments, &mut canonical);
                (
                    call.name.clone(),
                    Sha256::digest(canonical.as_bytes()).into(),
                )
            })
            .collect();
        self.window.push_back(signature);
        while self.window.len() > WINDOW {
            self.window.pop_front();
        }
        if self.window.len() < WINDOW {
            return None;
        }
        let turns: Vec<&TurnSignature> = self.window.iter().rev().collect();
        let found = (1..=3).find(|&length| {
            let groups = WINDOW / length;
            let first = &turns[..length];
            (1..groups).all(|group| &turns[group * length..(group + 1) * length] == first)
        });
        if found.is_some() {
            self.window.clear();
        }
        found
    }
}

/// JSON with object keys sorted and no whitespace.
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (index, key) in keys.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                if let Some(inner) = map.get(key) {
                    write_canonical(inner, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(name: &str, arguments: Value) -> Vec<ToolCall> {
        vec![ToolCall {
            id: "x".to_owned(),
            name: name.to_owned(),
            arguments,
        }]
    }

    fn feed(detector: &mut LoopDetector, turns: &[Vec<ToolCall>]) -> Vec<Option<usize>> {
        turns.iter().map(|turn| detector.record(turn)).collect()
    }

    #[test]
    fn detects_cycles_of_one_two_and_three() {
        for length in 1..=3 {
            let mut detector = LoopDetector::default();
            let pattern: Vec<Vec<ToolCall>> = (0..length)
                .map(|index| call("read_file", json!({"file_path": format!("f{index}")})))
                .collect();
            // Ten turns whose newest one ends a complete cycle.
            let turns: Vec<Vec<ToolCall>> = (0..10)
                .map(|index| pattern[(index + 10 * length + length - 10) % length].clone())
                .collect();
            let results = feed(&mut detector, &turns);
            assert_eq!(results[..9], [None; 9], "length {length}");
            assert_eq!(results[9], Some(length), "length {length}");
            // The window was cleared.
            assert_eq!(detector.record(&pattern[0]), None);
        }
    }

    #[test]
    fn key_order_does_not_matter_but_values_do() {
        let mut detector = LoopDetector::default();
        for index in 0..9 {
            let arguments = if index % 2 == 0 {
                json!({"a": 1, "b": 2})
            } else {
                json!({"b": 2, "a": 1})
            };
            assert_eq!(detector.record(&call("shell", arguments)), None);
        }
        assert_eq!(
            detector.record(&call("shell", json!({"a": 1, "b": 2}))),
            Some(1)
        );
        let mut detector = LoopDetector::default();
        for index in 0..10 {
            assert_eq!(detector.record(&call("shell", json!({"n": index}))), None);
        }
        assert_eq!(detector.record(&[]), None);
    }
}
