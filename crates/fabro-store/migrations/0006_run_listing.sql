-- What a run list shows, as columns (SPEC 18.1): a listing reads no manifest. `goal` and
-- `parent_run_id` are the manifest's; `revision` counts the writes that change a run's
-- row or records outside its checkpoints (records, start, end, rewind), so that with
-- the time of the newest checkpoint it tells a reader whether what it built from the
-- run is current.
ALTER TABLE runs
    ADD COLUMN goal          TEXT NOT NULL DEFAULT '',
    ADD COLUMN parent_run_id TEXT,
    ADD COLUMN revision      BIGINT NOT NULL DEFAULT 0;

UPDATE runs
SET goal = coalesce(manifest::json ->> 'goal', ''),
    parent_run_id = manifest::json ->> 'parent_run_id'
WHERE manifest IS NOT NULL;
