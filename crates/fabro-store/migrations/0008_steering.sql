-- Issue 32, SPEC 18.2 and 20.1: steering reaches the worker that executes a run through
-- the store. A message is `posted` by the server a person steers through, `queued` once
-- the run accepted it (a sender that gives up deletes it while still `posted`), and
-- `delivered` just before the agent reads it; each change is one conditional update.
CREATE TABLE steering_messages (
    run_id     TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    message_id BIGSERIAL NOT NULL,
    source     TEXT NOT NULL,
    text       TEXT NOT NULL,
    state      TEXT NOT NULL DEFAULT 'posted'
               CHECK (state IN ('posted', 'queued', 'delivered')),
    posted_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, message_id)
);

-- The agent stages a run runs now (a JSON list of {node_id, backend}), written by its
-- executor whenever one starts or ends; trusted only while the run's lease is live.
ALTER TABLE runs ADD COLUMN agent_stages TEXT;
