-- The shared store of SPEC 18.1, first version: one row per run (its index entry,
-- its place in the queue and its lease, SPEC 11.4 and 18.2) and the records that
-- describe it. Event envelopes, checkpoints and journal records are kept as the exact
-- text the local store writes, so that clients observe the same bytes (18.1).

CREATE TABLE runs (
    run_id           TEXT PRIMARY KEY,
    workflow_name    TEXT NOT NULL,
    workflow_path    TEXT,
    status           TEXT NOT NULL,
    priority         INTEGER NOT NULL DEFAULT 0,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- RFC 3339 times as the engine writes them (the manifest's start, the end).
    started_at       TEXT,
    finished_at      TEXT,
    -- The run's scratch directory on the machine that executes it.
    run_dir          TEXT NOT NULL DEFAULT '',
    manifest         TEXT,
    config           TEXT,
    graph            TEXT,
    -- The worker that holds the run, its fencing token and when its lease runs out.
    owner            TEXT,
    lease_epoch      BIGINT NOT NULL DEFAULT 0,
    lease_expires_at TIMESTAMPTZ,
    -- The id the run's next event gets: taken and incremented in the transaction that
    -- stores the event, so ids are gap-free and monotonic.
    next_event_id    BIGINT NOT NULL DEFAULT 1
);

CREATE INDEX runs_newest_first ON runs (started_at DESC, run_id DESC);
CREATE INDEX runs_queue ON runs (priority DESC, created_at) WHERE status = 'queued';

CREATE TABLE run_children (
    run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    name   TEXT NOT NULL,
    text   TEXT NOT NULL,
    PRIMARY KEY (run_id, name)
);

CREATE TABLE run_events (
    run_id   TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    id       BIGINT NOT NULL,
    envelope TEXT NOT NULL,
    PRIMARY KEY (run_id, id)
);

CREATE TABLE run_journal (
    run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    seq    BIGINT NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE run_checkpoints (
    run_id     TEXT PRIMARY KEY REFERENCES runs (run_id) ON DELETE CASCADE,
    checkpoint TEXT NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- A stage's files (SPEC 11.1) up to the offload limit of 7.7; larger content is a blob.
CREATE TABLE stage_files (
    run_id  TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    path    TEXT NOT NULL,
    content BYTEA,
    blob    TEXT,
    PRIMARY KEY (run_id, path),
    CHECK ((content IS NULL) <> (blob IS NULL))
);

CREATE TABLE questions (
    run_id      TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    question_id TEXT NOT NULL,
    question    TEXT NOT NULL,
    answer      TEXT,
    asked_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    answered_at TIMESTAMPTZ,
    PRIMARY KEY (run_id, question_id)
);

CREATE TABLE workers (
    name         TEXT PRIMARY KEY,
    host         TEXT NOT NULL,
    concurrency  INTEGER NOT NULL,
    last_renewal TIMESTAMPTZ NOT NULL DEFAULT now()
);
