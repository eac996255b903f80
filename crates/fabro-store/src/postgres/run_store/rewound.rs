//! The stages a rewind moved away (SPEC 20.3): rows moved from `run_stages` to
//! `rewound_stages` under the rewind's number, their files renamed in `stage_files`
//! from `{rank}/{name}` to `rewound/{k}/{rank}/{name}`, in one transaction.

use fabro_engine::{RunId, StoreError, StoredStage};

use super::{backend, notify_changed, PgRunStore};

/// A row of `rewound_stages`: k, then a stage row.
type RewoundRow = (i64, i64, String, i64, Option<String>, Vec<String>);

impl PgRunStore {
    /// Moves the stages ranked after `after` to rewind `k`; nothing to move the second
    /// time.
    pub(super) fn move_to_rewound(
        &self,
        run_id: &RunId,
        k: u32,
        after: u32,
    ) -> Result<(), StoreError> {
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let (k, after) = (i64::from(k), i64::from(after));
        let action = format!("cannot keep the rewound stages of run {run_id}");
        self.run(&action.clone(), async move {
            let mut transaction = pool.begin().await.map_err(backend(&action))?;
            sqlx::query(
                "INSERT INTO rewound_stages (run_id, k, rank, node_id, visit, status, files) \
                 SELECT run_id, $2, rank, node_id, visit, status, files FROM run_stages \
                 WHERE run_id = $1 AND rank > $3 ON CONFLICT DO NOTHING",
            )
            .bind(&id)
            .bind(k)
            .bind(after)
            .execute(&mut *transaction)
            .await
            .map_err(backend(&action))?;
            sqlx::query(
                "UPDATE stage_files SET path = 'rewound/' || $2::text || '/' || path \
                 WHERE run_id = $1 AND path ~ '^[0-9]+/' \
                 AND split_part(path, '/', 1)::bigint > $3",
            )
            .bind(&id)
            .bind(k)
            .bind(after)
            .execute(&mut *transaction)
            .await
            .map_err(backend(&action))?;
            sqlx::query("DELETE FROM run_stages WHERE run_id = $1 AND rank > $2")
                .bind(&id)
                .bind(after)
                .execute(&mut *transaction)
                .await
                .map_err(backend(&action))?;
            notify_changed(&mut transaction, &id, &action).await?;
            transaction.commit().await.map_err(backend(&action))
        })?;
        self.listings.changed();
        Ok(())
    }

    /// The rewound stages, `(k, stages)` by `k`.
    pub(super) fn read_rewound(
        &self,
        run_id: &RunId,
    ) -> Result<Vec<(u32, Vec<StoredStage>)>, StoreError> {
        let pool = self.pool.clone();
        let id = run_id.as_str().to_owned();
        let action = format!("cannot read the rewound stages of run {run_id}");
        let rows: Vec<RewoundRow> = self.run(&action.clone(), async move {
            sqlx::query_as(
                "SELECT k, rank, node_id, visit, status, files FROM rewound_stages \
                 WHERE run_id = $1 ORDER BY k, rank",
            )
            .bind(&id)
            .fetch_all(&pool)
            .await
            .map_err(backend(&action))
        })?;
        let mut rewound: Vec<(u32, Vec<StoredStage>)> = Vec::new();
        for (k, rank, node_id, visit, status, files) in rows {
            let k = u32::try_from(k).unwrap_or(u32::MAX);
            let stage = super::stored_stage((rank, node_id, visit, status, files));
            match rewound.last_mut() {
                Some((last, stages)) if *last == k => stages.push(stage),
                _ => rewound.push((k, vec![stage])),
            }
        }
        Ok(rewound)
    }
}
