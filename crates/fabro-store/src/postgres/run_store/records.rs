//! A run's records (manifest, configuration, graph, children) as one transaction of
//! [`RunStore::write_records`](fabro_engine::RunStore::write_records), which can be
//! written twice: it is written again while the store's connection is lost.

use sqlx::postgres::PgPool;

use super::RUNS_CHANNEL;

/// The columns and rows of a run's records.
pub(super) struct Records {
    pub(super) run_id: String,
    pub(super) name: String,
    pub(super) path: String,
    pub(super) started: String,
    pub(super) manifest: String,
    pub(super) config: String,
    pub(super) graph: String,
    pub(super) goal: String,
    pub(super) parent: Option<String>,
    pub(super) run_dir: Option<String>,
    pub(super) children: Vec<(String, String)>,
    /// The lease epoch a worker writes under (SPEC 18.2).
    pub(super) epoch: Option<i64>,
}

impl Records {
    /// Writes the records in one transaction; the rows of `runs` it changed (0 when the
    /// run's lease moved on from the epoch, and nothing was written).
    pub(super) async fn write(&self, pool: &PgPool) -> Result<u64, sqlx::Error> {
        let mut transaction = pool.begin().await?;
        let updated = sqlx::query(
            "INSERT INTO runs (run_id, workflow_name, workflow_path, status, started_at, \
             manifest, config, graph, goal, parent_run_id, run_dir) \
             VALUES ($1, $2, $3, 'running', $4, $5, $6, $7, $8, $9, coalesce($10, '')) \
             ON CONFLICT (run_id) DO UPDATE SET workflow_name = $2, workflow_path = $3, \
             started_at = $4, manifest = $5, config = $6, graph = $7, goal = $8, \
             parent_run_id = $9, run_dir = coalesce($10, runs.run_dir) \
             WHERE $11::bigint IS NULL OR runs.lease_epoch = $11",
        )
        .bind(&self.run_id)
        .bind(&self.name)
        .bind(&self.path)
        .bind(&self.started)
        .bind(&self.manifest)
        .bind(&self.config)
        .bind(&self.graph)
        .bind(&self.goal)
        .bind(&self.parent)
        .bind(&self.run_dir)
        .bind(self.epoch)
        .execute(&mut *transaction)
        .await?
        .rows_affected();
        if updated == 0 {
            return Ok(0);
        }
        for (child, text) in &self.children {
            sqlx::query(
                "INSERT INTO run_children (run_id, name, text) VALUES ($1, $2, $3) \
                 ON CONFLICT (run_id, name) DO UPDATE SET text = $3",
            )
            .bind(&self.run_id)
            .bind(child)
            .bind(text)
            .execute(&mut *transaction)
            .await?;
        }
        sqlx::query(
            "WITH changed AS (UPDATE runs SET revision = revision + 1 WHERE run_id = $1 \
             RETURNING run_id) SELECT pg_notify($2, run_id) FROM changed",
        )
        .bind(&self.run_id)
        .bind(RUNS_CHANNEL)
        .execute(&mut *transaction)
        .await?;
        transaction.commit().await?;
        Ok(updated)
    }
}
