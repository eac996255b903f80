//! A stage file of a [`PgRunStore`]: as stored, or, while its stage runs on this
//! machine, where it grows (SPEC 7.5).

use std::path::Path;

use fabro_engine::local::RunPaths;
use fabro_engine::{RunId, StoreError, STAGE_FILES};

use super::{backend, PgRunStore};

/// A stage file as stored, and where its stage runs: the content, the stage's node and
/// visit, whether it runs, the run's directory.
type LiveStageFile = (
    Option<Vec<u8>>,
    Option<String>,
    Option<i64>,
    Option<bool>,
    String,
);

impl PgRunStore {
    /// [`RunStore::stage_file`](fabro_engine::RunStore::stage_file).
    pub(super) fn read_stage_file(
        &self,
        run_id: &RunId,
        rank: u32,
        name: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        if !STAGE_FILES.contains(&name) {
            return Ok(None);
        }
        self.writers.settle(run_id);
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let path = format!("{rank}/{name}");
        let action = format!("cannot read a stage file of run {run_id}");
        let stage = i64::from(rank);
        let row: Option<LiveStageFile> = self.run(&action.clone(), async move {
            sqlx::query_as(
                "SELECT f.content, s.node_id, s.visit, s.status IS NULL AND s.node_id IS NOT NULL, \
                 r.run_dir FROM runs r \
                 LEFT JOIN run_stages s ON s.run_id = r.run_id AND s.rank = $3 \
                 LEFT JOIN stage_files f ON f.run_id = r.run_id AND f.path = $2 \
                 WHERE r.run_id = $1",
            )
            .bind(&id)
            .bind(&path)
            .bind(stage)
            .fetch_optional(&pool)
            .await
            .map_err(backend(&action))
        })?;
        let Some((content, node_id, visit, running, run_dir)) = row else {
            return Ok(None);
        };
        // A running stage's files grow in its directory on the machine that executes
        // it (a command's output, SPEC 7.5); the row has them as they were when it
        // started. On that machine, they are read where they grow.
        if let (Some(node_id), Some(visit), Some(true)) = (node_id, visit, running) {
            let visit = u32::try_from(visit).unwrap_or(u32::MAX);
            let directory = RunPaths::stage_dir_in(Path::new(&run_dir), rank, &node_id, visit);
            if !run_dir.is_empty() {
                if let Ok(bytes) = fs_err::read(directory.join(name)) {
                    return Ok(Some(bytes));
                }
            }
        }
        Ok(content)
    }
}
