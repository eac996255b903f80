-- Issue 30: readers reach a run's stages and questions through the store.
-- A run's stages as the engine saves them when each starts and ends (SPEC 7.5): the
-- stage of a rank is the one saved last (a resumed stage runs again under its rank);
-- `status` is the text of its status.json once it ended, `files` the stage files it has
-- (SPEC 11.1), whose bytes are in stage_files under `{rank}/{name}`.
CREATE TABLE run_stages (
    run_id  TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    rank    BIGINT NOT NULL,
    node_id TEXT NOT NULL,
    visit   BIGINT NOT NULL,
    status  TEXT,
    files   TEXT[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (run_id, rank)
);

-- SPEC 5.5, 17.4: a question is open until closed (answered, timed out, cancelled); an
-- answer filed for it waits until the run takes it (`taken_at`) or its author withdraws
-- it (the answer cleared).
ALTER TABLE questions ADD COLUMN closed_at TIMESTAMPTZ;
ALTER TABLE questions ADD COLUMN taken_at TIMESTAMPTZ;
