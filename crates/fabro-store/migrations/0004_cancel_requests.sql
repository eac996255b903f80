-- SPEC 18.2: a cancel is written to the store, for whichever process executes the run;
-- the request lasts until the run next starts (a resume).
ALTER TABLE runs ADD COLUMN cancel_requested BOOLEAN NOT NULL DEFAULT false;
