//! The bytes of `checkpoint.json`, kept as serialised fragments per map entry and list
//! item, so that replacing the file after a stage costs a copy of the bytes plus the
//! serialisation of what changed, not a serialisation of the whole state.
//!
//! The image follows the journal: [`CheckpointImage::apply`] takes each delta the
//! journal appends. [`CheckpointImage::render`] produces exactly what
//! `serde_json::to_vec(&checkpoint)` would (tested below).

use std::collections::BTreeMap;

use serde::Serialize;

use super::{CheckpointDelta, ListChange, MapChange};
use crate::record::{Checkpoint, CheckpointView};

/// Serialised `,"key":value` fragments of one map, in key order, in one buffer.
///
/// Rendering is one copy of the buffer, whatever the number of entries (a run of
/// 1,000 stages renders maps of 1,000 entries after every stage). A change splices
/// its fragment into the buffer and shifts the offsets of the entries after it.
#[derive(Debug, Default)]
struct MapImage {
    /// The keys, sorted as `BTreeMap<String, _>` sorts them.
    keys: Vec<String>,
    /// Where each key's fragment starts in `bytes`; it ends where the next starts.
    starts: Vec<usize>,
    /// Every fragment, each with its leading comma.
    bytes: Vec<u8>,
}

impl MapImage {
    fn of<V: Serialize>(map: &BTreeMap<String, V>) -> MapImage {
        let mut image = MapImage::default();
        for (key, value) in map {
            image.keys.push(key.clone());
            image.starts.push(image.bytes.len());
            write_fragment(&mut image.bytes, key, value);
        }
        image
    }

    fn apply<V: Serialize>(&mut self, change: &MapChange<V>) {
        let mut fragment = Vec::new();
        for key in &change.removed {
            if let Ok(index) = self.keys.binary_search(key) {
                self.splice(index, &[]);
                self.keys.remove(index);
                self.starts.remove(index);
            }
        }
        for (key, value) in &change.set {
            fragment.clear();
            write_fragment(&mut fragment, key, value);
            match self.keys.binary_search(key) {
                Ok(index) => self.splice(index, &fragment),
                Err(index) => {
                    let start = self.starts.get(index).copied().unwrap_or(self.bytes.len());
                    self.keys.insert(index, key.clone());
                    self.starts.insert(index, start);
                    // The new entry is empty until spliced.
                    self.splice(index, &fragment);
                }
            }
        }
    }

    /// Replaces the fragment of entry `index` with `fragment`.
    fn splice(&mut self, index: usize, fragment: &[u8]) {
        let start = self.starts[index];
        let end = self
            .starts
            .get(index + 1)
            .copied()
            .unwrap_or(self.bytes.len());
        self.bytes.splice(start..end, fragment.iter().copied());
        let (grown, shrunk) = (fragment.len(), end - start);
        for later in &mut self.starts[index + 1..] {
            *later = *later + grown - shrunk;
        }
    }

    fn render(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        // Skip the first fragment's comma.
        out.extend_from_slice(self.bytes.get(1..).unwrap_or_default());
        out.push(b'}');
    }
}

/// Serialised items of a list of strings.
#[derive(Debug, Default)]
struct ListImage {
    /// The items, comma-separated, without brackets.
    bytes: Vec<u8>,
    empty: bool,
}

impl ListImage {
    fn of(items: &[String]) -> ListImage {
        let mut image = ListImage {
            bytes: Vec::new(),
            empty: true,
        };
        image.append(items);
        image
    }

    fn append(&mut self, items: &[String]) {
        for item in items {
            if !self.empty {
                self.bytes.push(b',');
            }
            self.empty = false;
            let _ = serde_json::to_writer(&mut self.bytes, item);
        }
    }

    fn apply(&mut self, change: &ListChange) {
        match change {
            ListChange::Append(items) => self.append(items),
            ListChange::Replace(items) => *self = ListImage::of(items),
        }
    }

    fn render(&self, out: &mut Vec<u8>) {
        out.push(b'[');
        out.extend_from_slice(&self.bytes);
        out.push(b']');
    }
}

/// Appends `,"key":value` to `out`.
fn write_fragment<V: Serialize>(out: &mut Vec<u8>, key: &str, value: &V) {
    out.push(b',');
    // Serialising strings and already-valid values cannot fail.
    let _ = serde_json::to_writer(&mut *out, key);
    out.push(b':');
    let _ = serde_json::to_writer(&mut *out, value);
}

/// The growing parts of a checkpoint, serialised.
#[derive(Debug, Default)]
pub(crate) struct CheckpointImage {
    completed_nodes: ListImage,
    node_retries: MapImage,
    node_visits: MapImage,
    epoch_node_visits: MapImage,
    node_outcomes: MapImage,
    context_values: MapImage,
    logs: ListImage,
}

impl CheckpointImage {
    /// The image of `checkpoint`.
    pub(crate) fn of(checkpoint: &Checkpoint) -> CheckpointImage {
        CheckpointImage {
            completed_nodes: ListImage::of(&checkpoint.completed_nodes),
            node_retries: MapImage::of(&checkpoint.node_retries),
            node_visits: MapImage::of(&checkpoint.node_visits),
            epoch_node_visits: MapImage::of(&checkpoint.epoch_node_visits),
            node_outcomes: MapImage::of(&checkpoint.node_outcomes),
            context_values: MapImage::of(&checkpoint.context_values),
            logs: ListImage::of(&checkpoint.logs),
        }
    }

    /// Follows `delta`.
    pub(crate) fn apply(&mut self, delta: &CheckpointDelta) {
        self.completed_nodes.apply(&delta.completed_nodes);
        self.node_retries.apply(&delta.node_retries);
        self.node_visits.apply(&delta.node_visits);
        self.epoch_node_visits.apply(&delta.epoch_node_visits);
        self.node_outcomes.apply(&delta.node_outcomes);
        self.context_values.apply(&delta.context_values);
        self.logs.apply(&delta.logs);
    }

    /// Writes `checkpoint` as compact JSON into `out`, taking the growing parts from the
    /// image (which must describe the same state) and the rest from `checkpoint`.
    pub(crate) fn render(&self, checkpoint: &CheckpointView<'_>, out: &mut Vec<u8>) {
        let field = |out: &mut Vec<u8>, name: &str, first: bool| {
            if !first {
                out.push(b',');
            }
            out.push(b'"');
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b"\":");
        };
        let value = |out: &mut Vec<u8>, value: &dyn erased::Value| value.write(out);
        out.push(b'{');
        field(out, "version", true);
        value(out, &checkpoint.version);
        field(out, "run_id", false);
        value(out, &checkpoint.run_id);
        field(out, "timestamp", false);
        value(out, &checkpoint.timestamp);
        field(out, "current_node", false);
        value(out, &checkpoint.current_node);
        field(out, "next_node_id", false);
        value(out, &checkpoint.next_node_id);
        field(out, "completed_nodes", false);
        self.completed_nodes.render(out);
        field(out, "node_retries", false);
        self.node_retries.render(out);
        field(out, "node_visits", false);
        self.node_visits.render(out);
        field(out, "epoch_node_visits", false);
        self.epoch_node_visits.render(out);
        field(out, "node_outcomes", false);
        self.node_outcomes.render(out);
        field(out, "context_values", false);
        self.context_values.render(out);
        field(out, "logs", false);
        self.logs.render(out);
        field(out, "git_commit_sha", false);
        value(out, &checkpoint.git_commit_sha);
        field(out, "loop_failure_signatures", false);
        value(out, &checkpoint.loop_failure_signatures);
        field(out, "restart_failure_signatures", false);
        value(out, &checkpoint.restart_failure_signatures);
        field(out, "restart_count", false);
        value(out, &checkpoint.restart_count);
        field(out, "stage_rank", false);
        value(out, &checkpoint.stage_rank);
        field(out, "simulated_cursors", false);
        value(out, &checkpoint.simulated_cursors);
        if checkpoint.llm_tokens != 0 {
            field(out, "llm_tokens", false);
            value(out, &checkpoint.llm_tokens);
        }
        if checkpoint.llm_cost_usd != 0.0 {
            field(out, "llm_cost_usd", false);
            value(out, &checkpoint.llm_cost_usd);
        }
        field(out, "run_status", false);
        value(out, &checkpoint.run_status);
        out.push(b'}');
    }
}

/// Small values serialised straight into the output.
mod erased {
    pub(super) trait Value {
        fn write(&self, out: &mut Vec<u8>);
    }

    impl<T: serde::Serialize> Value for T {
        fn write(&self, out: &mut Vec<u8>) {
            let _ = serde_json::to_writer(out, self);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::CheckpointDelta;
    use crate::outcome::Outcome;

    fn sample(step: u32) -> Checkpoint {
        let nodes: Vec<String> = (0..step).map(|index| format!("n\"{index}")).collect();
        Checkpoint {
            version: 1,
            run_id: crate::id::RunId::from("R"),
            timestamp: format!("t{step}"),
            current_node: nodes.last().cloned(),
            next_node_id: (!step.is_multiple_of(3)).then(|| "next".to_owned()),
            completed_nodes: nodes.clone(),
            node_retries: nodes.iter().map(|node| (node.clone(), step % 2)).collect(),
            node_visits: nodes.iter().map(|node| (node.clone(), step)).collect(),
            epoch_node_visits: if step.is_multiple_of(4) {
                BTreeMap::new()
            } else {
                nodes.iter().map(|node| (node.clone(), 1)).collect()
            },
            node_outcomes: nodes
                .iter()
                .map(|node| {
                    (
                        node.clone(),
                        Outcome::success().with_notes(format!("é\n{step}")),
                    )
                })
                .collect(),
            context_values: BTreeMap::from([
                ("a".to_owned(), serde_json::json!({"x": [step, "y"]})),
                (format!("k{step}"), serde_json::json!(null)),
            ]),
            logs: (0..step % 3).map(|index| format!("log {index}")).collect(),
            git_commit_sha: step.is_multiple_of(2).then(|| format!("{step:040}")),
            loop_failure_signatures: BTreeMap::from([("s".to_owned(), step)]),
            restart_failure_signatures: BTreeMap::new(),
            restart_count: step / 4,
            stage_rank: step,
            simulated_cursors: BTreeMap::from([("n".to_owned(), u64::from(step))]),
            llm_tokens: 0,
            llm_cost_usd: 0.0,
            run_status: crate::run_index::RunStatus::Running,
        }
    }

    #[test]
    fn rendered_images_match_serde_json_through_a_run() {
        let mut last = sample(0);
        let mut image = CheckpointImage::of(&last);
        for step in 1..12 {
            let next = sample(step);
            let delta = CheckpointDelta::between(&last, &next.view());
            image.apply(&delta);
            delta.apply(&mut last);
            assert_eq!(last, next);
            let mut rendered = Vec::new();
            image.render(&next.view(), &mut rendered);
            assert_eq!(
                String::from_utf8(rendered).expect("utf-8"),
                serde_json::to_string(&next).expect("serialises"),
                "step {step}"
            );
        }
    }

    proptest::proptest! {
        /// A map image follows any sequence of changes, including removals of missing
        /// keys, and renders what `serde_json` renders for the map.
        #[test]
        fn map_images_match_serde_json(
            start in proptest::collection::btree_map("[a-d\"é]{0,3}", 0u32..50, 0..8),
            changes in proptest::collection::vec(
                (
                    proptest::collection::btree_map("[a-d\"é]{0,3}", 0u32..5000, 0..4),
                    proptest::collection::vec("[a-d\"é]{0,3}", 0..3),
                ),
                0..12,
            ),
        ) {
            let mut map = start;
            let mut image = MapImage::of(&map);
            for (set, removed) in changes {
                for key in &removed {
                    map.remove(key);
                }
                map.extend(set.clone());
                image.apply(&MapChange { set, removed });
                let mut rendered = Vec::new();
                image.render(&mut rendered);
                proptest::prop_assert_eq!(
                    String::from_utf8(rendered).expect("utf-8"),
                    serde_json::to_string(&map).expect("serialises")
                );
            }
        }
    }
}
