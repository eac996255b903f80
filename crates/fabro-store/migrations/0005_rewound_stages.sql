-- SPEC 20.3: the stages a rewind moved away are kept, under the rewind's number `k`,
-- as the local store keeps them in rewound/{k}/stages/; their files stay in
-- stage_files, under `rewound/{k}/{rank}/{name}`.
CREATE TABLE rewound_stages (
    run_id  TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    k       BIGINT NOT NULL,
    rank    BIGINT NOT NULL,
    node_id TEXT NOT NULL,
    visit   BIGINT NOT NULL,
    status  TEXT,
    files   TEXT[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (run_id, k, rank)
);
