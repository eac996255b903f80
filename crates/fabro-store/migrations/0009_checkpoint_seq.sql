-- Issue 31 (acceptance 5): a run's whole checkpoint is stored only every so many journal
-- records and at the run's end; `seq` is the journal record it is the state after, and a
-- reader replays the records after it onto it. Checkpoints stored before were the newest.
ALTER TABLE run_checkpoints ADD COLUMN seq BIGINT;
UPDATE run_checkpoints c
   SET seq = (SELECT max(j.seq) FROM run_journal j WHERE j.run_id = c.run_id);
