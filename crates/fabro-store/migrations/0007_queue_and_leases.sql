-- The queue and the leases of SPEC 18.2. A run accepted by a server without executing it
-- waits as a row of status `queued` with its start request; a worker claims it (and any
-- run whose lease ran out) by setting `owner`, incrementing `lease_epoch` (the fencing
-- token every later write of that worker carries) and setting `lease_expires_at`.
ALTER TABLE runs
    -- The start request a server queued, kept while the run has no checkpoint.
    ADD COLUMN request    TEXT,
    -- The request of a resume queued for the workers, until the run starts again.
    ADD COLUMN resume_request TEXT,
    -- When the run was last claimed, as the claim saw the clock.
    ADD COLUMN claimed_at TIMESTAMPTZ;

-- Runs that a worker holds, by the end of their lease: what failover looks for.
CREATE INDEX runs_leased ON runs (lease_expires_at) WHERE owner IS NOT NULL AND status = 'running';
