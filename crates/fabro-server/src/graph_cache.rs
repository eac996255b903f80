//! The laid-out graphs of the runs whose pages were shown: laying out a workflow of
//! 1,000 nodes is most of the cost of its run page, and a run's `graph.fabro` does not
//! change while it runs (a resume may write it again). Each layout is kept with the
//! length and modification time of that file and made again when either differs; only
//! the node statuses are filled in per request.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use crate::engine_bridge::records::{self, GraphLayout};
use crate::error::ApiError;

/// Layouts beyond this many are dropped all at once (a 1,000-node layout is ~0.5 MB).
const MAX_ENTRIES: usize = 64;

/// What a layout was made from.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Source {
    length: u64,
    modified: Option<SystemTime>,
    workflow_name: String,
}

/// The cache, shared by the page handlers.
#[derive(Debug, Default)]
pub struct GraphCache {
    map: Mutex<HashMap<PathBuf, (Source, Arc<GraphLayout>)>>,
}

impl GraphCache {
    /// The layout of the run in `run_dir`, made now if the cache has none for its
    /// current `graph.fabro`.
    pub fn layout(
        &self,
        run_dir: &Path,
        workflow_name: &str,
    ) -> Result<Arc<GraphLayout>, ApiError> {
        let metadata = fs_err::metadata(run_dir.join("graph.fabro"))
            .map_err(|_| ApiError::not_found("the run has no stored graph"))?;
        let source = Source {
            length: metadata.len(),
            modified: metadata.modified().ok(),
            workflow_name: workflow_name.to_owned(),
        };
        if let Some((cached, layout)) = self.lock().get(run_dir) {
            if *cached == source {
                return Ok(Arc::clone(layout));
            }
        }
        let layout = Arc::new(records::graph_layout(run_dir, workflow_name)?);
        let mut map = self.lock();
        if map.len() >= MAX_ENTRIES {
            map.clear();
        }
        map.insert(run_dir.to_path_buf(), (source, Arc::clone(&layout)));
        Ok(layout)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, (Source, Arc<GraphLayout>)>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str =
        "digraph two {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  start -> exit\n}\n";
    const THREE: &str = "digraph three {\n  start [shape=Mdiamond]\n  middle [shape=box, prompt=\"p\"]\n  exit [shape=Msquare]\n  start -> middle -> exit\n}\n";

    /// A stage row of `node_id` with `status`, the rest empty.
    fn stage_row(node_id: &str, status: &str) -> fabro_api::StageRow {
        fabro_api::StageRow {
            rank: 1,
            node_id: node_id.to_owned(),
            visit: 1,
            handler: None,
            status: status.to_owned(),
            attempts: None,
            started_at: None,
            finished_at: None,
            duration_ms: None,
            model: None,
            usage: None,
            cost_usd: None,
            files_touched: Vec::new(),
            files: Vec::new(),
        }
    }

    #[test]
    fn a_layout_is_made_once_per_version_of_the_graph() {
        let directory = tempfile::tempdir().expect("a temporary directory");
        let run_dir = directory.path();
        fs_err::write(run_dir.join("graph.fabro"), TWO).expect("graph.fabro is written");
        let cache = GraphCache::default();
        let first = cache.layout(run_dir, "two").expect("a layout");
        let again = cache.layout(run_dir, "two").expect("a layout");
        assert!(Arc::ptr_eq(&first, &again));
        let statuses = records::node_statuses(&[
            stage_row("start", "success"),
            stage_row("exit", "retry"),
            stage_row("exit", "incomplete"),
        ]);
        let svg = first.annotate(&statuses);
        assert!(
            svg.contains("<g class=\"node status-success\" data-visits=\"1\" id=\"node-start\""),
            "{svg}"
        );
        assert!(
            svg.contains("<g class=\"node status-pending\" data-visits=\"2\" id=\"node-exit\""),
            "{svg}"
        );
        assert!(!svg.contains("node-middle"));

        // A graph written again (a resume) is laid out again.
        fs_err::write(run_dir.join("graph.fabro"), THREE).expect("graph.fabro is written");
        let changed = cache.layout(run_dir, "two").expect("a layout");
        assert!(!Arc::ptr_eq(&first, &changed));
        assert!(changed.annotate(&statuses).contains("node-middle"));
    }

    #[test]
    fn a_run_without_a_graph_is_not_found() {
        let directory = tempfile::tempdir().expect("a temporary directory");
        let error = GraphCache::default()
            .layout(directory.path(), "none")
            .expect_err("no graph");
        assert_eq!(error.status(), axum::http::StatusCode::NOT_FOUND);
    }
}
