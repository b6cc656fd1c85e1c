-- Cairn schema v9 (PostgreSQL): fewer writes for each attempt (issue 8).
--
-- An attempt that succeeds writes, besides its step's two updates, one attempt row (inserted at the claim, closed
-- at the success) and two events (`step_started`, `step_succeeded`). Measured with `auto_explain` over
-- `cairn bench throughput` (4 workers × 64), three costs came from the physical design, not from the work:
--   - the foreign keys of `attempts` and `run_events` to `runs`: each row inserted ran a row trigger reading and
--     locking its run (`SELECT 1 FROM runs … FOR KEY SHARE`), three per attempt, 50,002 in one run of the bench;
--   - the attempt row's close could rarely be a HOT update (the page it was inserted into was full by then), so it
--     added an entry to `attempts_pkey` every time;
--   - every event added an entry to two indexes, `run_events_pkey` (`id`) and `run_events_run_idx`
--     (`run_id, id`), where every read of events is by run (`store/src/sql.rs`, `store/src/wait_tx.rs`).
-- Alternating the bench with and without these changes on one database (fresh, then 10,000 steps run): 17,391–
-- 19,194 steps/s before, 23,753–24,510 after.
--
-- What replaces each:
--   - The two foreign keys go. Their `ON DELETE CASCADE` is kept by a statement trigger on `runs` that deletes the
--     attempts and events of the runs a statement deleted (Cairn itself never deletes a run; an operator may). What
--     is given up is the check that an inserted attempt or event names an existing run: only Cairn's own
--     statements insert them, each in the transaction that holds its run's row (`store/tests/contract/delete.rs`
--     checks the cascade on both backends). `steps`, `step_edges` and `event_waits` keep theirs (written once per
--     step, at the submission).
--   - `attempts` leaves half of each new page free (fillfactor 50), so an attempt's close finds room on its own
--     page and skips the index. Rows stored before this migration keep their pages as they are.
--   - `run_events`' primary key becomes `(run_id, id)`, the one index serving every read; `id` stays unique, from
--     its sequence.
-- Upgrading a database with a long history: the new primary key is built while the migration holds `run_events`
-- exclusively, which takes about as long as building any index over that table (the orchestrator applies
-- migrations before it serves, so nothing waits on it but the start).
ALTER TABLE attempts DROP CONSTRAINT attempts_run_id_fkey;
ALTER TABLE run_events DROP CONSTRAINT run_events_run_id_fkey;

CREATE FUNCTION cairn_runs_deleted() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM attempts a USING deleted_runs d WHERE a.run_id = d.id;
    DELETE FROM run_events e USING deleted_runs d WHERE e.run_id = d.id;
    RETURN NULL;
END;
$$;

CREATE TRIGGER runs_deleted AFTER DELETE ON runs REFERENCING OLD TABLE AS deleted_runs
    FOR EACH STATEMENT EXECUTE FUNCTION cairn_runs_deleted();

ALTER TABLE attempts SET (fillfactor = 50);

DROP INDEX run_events_run_idx;
ALTER TABLE run_events DROP CONSTRAINT run_events_pkey, ADD PRIMARY KEY (run_id, id);
