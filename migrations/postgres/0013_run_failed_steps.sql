-- A counter of each run's failed steps beside its open steps, so that the end of a run is decided from the run
-- row (`cairn_core::machine::run_end`) and no statement reads the run's steps by status to know whether it
-- failed (issue "One state machine"). Runs already there are counted once.
ALTER TABLE runs ADD COLUMN failed_steps BIGINT NOT NULL DEFAULT 0;
UPDATE runs SET failed_steps = (SELECT count(*) FROM steps WHERE steps.run_id = runs.id AND steps.status = 'failed');
