//! The laid-out graphs of the runs whose pages were shown: laying out a workflow of
//! 1,000 nodes is most of the cost of its run page, and a run's stored workflow does not
//! change while it runs (a resume may store it again). Each layout is kept with the
//! graph's text, read through the run store on each request, and made again when the
//! text differs; only the node statuses are filled in per request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use fabro_engine::RunRecord;
use fabro_engine::{RunId, RunStore};

use crate::engine_bridge::records::{self, GraphLayout};
use crate::error::ApiError;

/// Layouts beyond this many are dropped all at once (a 1,000-node layout is ~0.5 MB).
const MAX_ENTRIES: usize = 64;

/// What a layout was made from.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Source {
    graph: String,
    workflow_name: String,
}

/// The cache, shared by the page handlers.
#[derive(Debug, Default)]
pub struct GraphCache {
    map: Mutex<HashMap<String, (Source, Arc<GraphLayout>)>>,
}

impl GraphCache {
    /// The layout of the run `record` lists, made now if the cache has none for the
    /// graph `store` keeps of it; 404 when it keeps none.
    pub fn layout(
        &self,
        store: &dyn RunStore,
        record: &RunRecord,
    ) -> Result<Arc<GraphLayout>, ApiError> {
        let workflow = store
            .read_workflow(&RunId::from(record.run_id.as_str()))
            .map_err(|_| ApiError::not_found("the run has no stored graph"))?;
        let source = Source {
            graph: workflow.graph,
            workflow_name: record.workflow_name.clone(),
        };
        if let Some((cached, layout)) = self.lock().get(&record.run_id) {
            if *cached == source {
                return Ok(Arc::clone(layout));
            }
        }
        let layout = Arc::new(records::graph_layout(
            &record.run_dir,
            &source.graph,
            &source.workflow_name,
        )?);
        let mut map = self.lock();
        if map.len() >= MAX_ENTRIES {
            map.clear();
        }
        map.insert(record.run_id.clone(), (source, Arc::clone(&layout)));
        Ok(layout)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Source, Arc<GraphLayout>)>> {
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

    /// A file store over `root` and the record of its run `r`, whose graph is `graph`.
    fn run(root: &std::path::Path, graph: &str) -> (fabro_engine::FsRunStore, RunRecord) {
        let paths = fabro_engine::local::RunPaths::new(root, "r");
        fs_err::create_dir_all(paths.run_dir()).expect("a run directory");
        fs_err::write(paths.graph(), graph).expect("the graph is written");
        let record = RunRecord {
            run_id: "r".to_owned(),
            workflow_name: "two".to_owned(),
            workflow_path: "two.fabro".to_owned(),
            goal: String::new(),
            status: fabro_engine::RunStatus::Success,
            started_at: String::new(),
            finished_at: None,
            run_dir: paths.run_dir().to_path_buf(),
            parent_run_id: None,
            reason: None,
            worker: None,
        };
        (fabro_engine::FsRunStore::new(root), record)
    }

    #[test]
    fn a_layout_is_made_once_per_version_of_the_graph() {
        let directory = tempfile::tempdir().expect("a temporary directory");
        let (store, record) = run(directory.path(), TWO);
        let cache = GraphCache::default();
        let first = cache.layout(&store, &record).expect("a layout");
        let again = cache.layout(&store, &record).expect("a layout");
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

        // A graph stored again (a resume) is laid out again.
        let (store, record) = run(directory.path(), THREE);
        let changed = cache.layout(&store, &record).expect("a layout");
        assert!(!Arc::ptr_eq(&first, &changed));
        assert!(changed.annotate(&statuses).contains("node-middle"));
    }

    #[test]
    fn a_run_without_a_graph_is_not_found() {
        let directory = tempfile::tempdir().expect("a temporary directory");
        let (store, record) = run(directory.path(), TWO);
        fs_err::remove_file(record.run_dir.join("graph.fabro")).expect("removed");
        let error = GraphCache::default()
            .layout(&store, &record)
            .expect_err("no graph");
        assert_eq!(error.status(), axum::http::StatusCode::NOT_FOUND);
    }
}
