-- SPEC 20.3: a rewind records itself before its first step, so that an interrupted
-- rewind can be finished; the record is the JSON the local store keeps in rewind.json.
ALTER TABLE runs ADD COLUMN pending_rewind TEXT;
