//! Tool-based file tracking for the api backend (SPEC 7.6).

use std::collections::HashMap;

/// Paths written by `write_file`, `edit_file` and `apply_patch`: pending when the
/// call starts, confirmed when it completes without error.
#[derive(Debug, Clone, Default)]
pub struct FileTracker {
    pending: HashMap<String, Vec<String>>,
    confirmed: Vec<String>,
    last: Option<String>,
}

impl FileTracker {
    /// Marks the paths of call `call_id` pending.
    pub fn start(&mut self, call_id: &str, paths: Vec<String>) {
        if !paths.is_empty() {
            self.pending.insert(call_id.to_owned(), paths);
        }
    }

    /// Confirms (`success`) or discards the pending paths of `call_id`.
    pub fn complete(&mut self, call_id: &str, success: bool) {
        let Some(paths) = self.pending.remove(call_id) else {
            return;
        };
        if !success {
            return;
        }
        for path in paths {
            if !self.confirmed.contains(&path) {
                self.confirmed.push(path.clone());
            }
            self.last = Some(path);
        }
    }

    /// Confirmed paths, deduplicated, in order of first confirmation.
    pub fn files(&self) -> &[String] {
        &self.confirmed
    }

    /// The path of the most recently confirmed call.
    pub fn last_touched(&self) -> Option<&str> {
        self.last.as_deref()
    }

    /// The File Operations section of a compaction summary (SPEC 6.8).
    pub fn render(&self) -> String {
        self.confirmed
            .iter()
            .map(|path| format!("- modified: {path}"))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_calls_are_discarded_and_order_is_first_confirmation() {
        let mut tracker = FileTracker::default();
        tracker.start("1", vec!["b.txt".to_owned()]);
        tracker.start("2", vec!["a.txt".to_owned()]);
        tracker.start("3", vec!["c.txt".to_owned()]);
        tracker.complete("2", true);
        tracker.complete("3", false);
        tracker.complete("1", true);
        tracker.start("4", vec!["a.txt".to_owned()]);
        tracker.complete("4", true);
        assert_eq!(tracker.files(), ["a.txt", "b.txt"]);
        assert_eq!(tracker.last_touched(), Some("a.txt"));
        assert_eq!(tracker.render(), "- modified: a.txt\n- modified: b.txt");
    }
}
