//! The rows of an imported run: what a [`PgRunStore`](crate::PgRunStore) that had
//! executed the run would hold, written in one transaction. Each table is filled as the
//! store fills it: `runs` as `write_records`, `register_start` and `register_end` leave
//! it (the times and the run directory being the run's own), `run_children` as
//! `write_records`, `run_events` as the event log (the envelopes' lines under their
//! ids), `run_journal` and `run_checkpoints` as the checkpoint log, `run_stages` and
//! `stage_files` as `save_stage`, `rewound_stages` as `rewind_stages`.

use std::time::UNIX_EPOCH;

use fabro_engine::RunStatus;
use sqlx::postgres::PgPool;

use super::LocalRun;

/// Whether the store has a run with this id.
pub(super) async fn has_run(pool: &PgPool, run_id: &str) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM runs WHERE run_id = $1)")
        .bind(run_id)
        .fetch_one(pool)
        .await
}

/// Writes `run` in one transaction; `false` (and nothing written) when the store has a
/// run with its id already.
pub(super) async fn write_run(pool: &PgPool, run: &LocalRun) -> Result<bool, sqlx::Error> {
    let run_id = run.record.run_id.as_str();
    let mut transaction = pool.begin().await?;
    // An interrupted run is one whose row says `running` and whose lock nobody holds,
    // as the store lists it; it has no end time.
    let status = match run.record.status {
        RunStatus::Interrupted => RunStatus::Running,
        status => status,
    };
    let pending_rewind = run
        .pending_rewind
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|error| sqlx::Error::Encode(Box::new(error)))?;
    let inserted = sqlx::query(
        "INSERT INTO runs (run_id, workflow_name, workflow_path, status, created_at, \
         started_at, finished_at, run_dir, manifest, config, graph, pending_rewind, goal, \
         parent_run_id) \
         VALUES ($1, $2, $3, $4, coalesce(to_timestamp($5), now()), $6, $7, $8, $9, $10, \
         $11, $12, $13, $14) ON CONFLICT (run_id) DO NOTHING",
    )
    .bind(run_id)
    .bind(&run.manifest.workflow_name)
    .bind(&run.manifest.workflow_path)
    .bind(status.as_str())
    .bind(epoch_seconds(&run.manifest.started_at))
    .bind(&run.manifest.started_at)
    .bind(&run.record.finished_at)
    .bind(run.record.run_dir.display().to_string())
    .bind(&run.manifest_text)
    .bind(&run.config_text)
    .bind(&run.graph)
    .bind(&pending_rewind)
    .bind(&run.manifest.goal)
    .bind(&run.manifest.parent_run_id)
    .execute(&mut *transaction)
    .await?
    .rows_affected();
    if inserted == 0 {
        transaction.rollback().await?;
        return Ok(false);
    }
    for (name, text) in &run.children {
        sqlx::query("INSERT INTO run_children (run_id, name, text) VALUES ($1, $2, $3)")
            .bind(run_id)
            .bind(name)
            .bind(text)
            .execute(&mut *transaction)
            .await?;
    }
    let (ids, envelopes): (Vec<i64>, Vec<&str>) = run
        .events
        .iter()
        .map(|(id, line)| (i64::try_from(*id).unwrap_or(i64::MAX), line.as_str()))
        .unzip();
    sqlx::query(
        "INSERT INTO run_events (run_id, id, envelope) \
         SELECT $1, id, envelope FROM UNNEST($2::BIGINT[], $3::TEXT[]) AS event (id, envelope)",
    )
    .bind(run_id)
    .bind(&ids)
    .bind(&envelopes)
    .execute(&mut *transaction)
    .await?;
    sqlx::query(
        "INSERT INTO run_journal (run_id, seq, record) \
         SELECT $1, seq, record FROM UNNEST($2::TEXT[]) WITH ORDINALITY AS journal (record, seq)",
    )
    .bind(run_id)
    .bind(&run.journal)
    .execute(&mut *transaction)
    .await?;
    if let Some((checkpoint, timestamp)) = &run.checkpoint {
        sqlx::query(
            "INSERT INTO run_checkpoints (run_id, checkpoint, updated_at, seq) \
             VALUES ($1, $2, coalesce(to_timestamp($3), now()), $4)",
        )
        .bind(run_id)
        .bind(checkpoint)
        .bind(epoch_seconds(timestamp))
        .bind(i64::try_from(run.journal.len()).unwrap_or(i64::MAX))
        .execute(&mut *transaction)
        .await?;
    }
    write_stages(&mut transaction, run).await?;
    // The servers on the store list the run as soon as it is committed.
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(crate::postgres::RUNS_CHANNEL)
        .bind(run_id)
        .execute(&mut *transaction)
        .await?;
    transaction.commit().await?;
    Ok(true)
}

/// The run's stages and their files, and the stages its rewinds moved away (rows only:
/// the store serves no file of them), as `save_stage` and `rewind_stages` write them.
async fn write_stages(
    transaction: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    run: &LocalRun,
) -> Result<(), sqlx::Error> {
    let run_id = run.record.run_id.as_str();
    for stage in &run.stages {
        let rank = i64::from(stage.rank);
        sqlx::query(
            "INSERT INTO run_stages (run_id, rank, node_id, visit, status, files) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(run_id)
        .bind(rank)
        .bind(&stage.node_id)
        .bind(i64::from(stage.visit))
        .bind(&stage.status)
        .bind(&stage.files)
        .execute(&mut **transaction)
        .await?;
        for (name, bytes) in &stage.contents {
            sqlx::query("INSERT INTO stage_files (run_id, path, content) VALUES ($1, $2, $3)")
                .bind(run_id)
                .bind(format!("{rank}/{name}"))
                .bind(bytes)
                .execute(&mut **transaction)
                .await?;
        }
    }
    for (k, stages) in &run.rewound {
        for stage in stages {
            let status = stage
                .status
                .as_ref()
                .map(serde_json::to_string)
                .transpose()
                .map_err(|error| sqlx::Error::Encode(Box::new(error)))?;
            sqlx::query(
                "INSERT INTO rewound_stages (run_id, k, rank, node_id, visit, status, files) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
            )
            .bind(run_id)
            .bind(i64::from(*k))
            .bind(i64::from(stage.rank))
            .bind(&stage.node_id)
            .bind(i64::from(stage.visit))
            .bind(&status)
            .bind(&stage.files)
            .execute(&mut **transaction)
            .await?;
        }
    }
    Ok(())
}

/// An RFC 3339 time as seconds since the epoch, for `to_timestamp`; `None` when it does
/// not parse (the row then takes the time of the import).
fn epoch_seconds(time: &str) -> Option<f64> {
    let time = fabro_engine::parse_rfc3339(time)?;
    Some(time.duration_since(UNIX_EPOCH).ok()?.as_secs_f64())
}
