-- Cairn schema v4 (SQLite): a step's attempt row is opened by the statement that claims the step and closed by
-- the statement that marks it succeeded, through these triggers, instead of by one more statement each (issue 8).
-- Every SQLite statement is a hand-off to sqlx's connection thread (50-80 us on the development VM), and a chain
-- step made nine of them; PostgreSQL does the same in the claim's and the success's own data-modifying WITH.
-- Failures, expiries and undone claims still write their attempt rows from the store, as before.

-- A claim (ready -> running, attempt already incremented, lease_id = run_id/step_id/attempt) opens the attempt.
CREATE TRIGGER steps_attempt_open AFTER UPDATE OF status ON steps
WHEN NEW.status = 'running' AND OLD.status <> 'running'
BEGIN
    INSERT INTO attempts (run_id, step_id, attempt, lease_id, action, worker_id, status, started_at)
    VALUES (NEW.run_id, NEW.step_id, NEW.attempt, NEW.lease_id, NEW.action, NEW.lease_owner, 'running',
            NEW.started_at);
END;

-- A success under the lease (running -> succeeded, finished_at = the report's time) closes that attempt.
CREATE TRIGGER steps_attempt_succeeded AFTER UPDATE OF status ON steps
WHEN NEW.status = 'succeeded' AND OLD.status = 'running'
BEGIN
    UPDATE attempts SET status = 'succeeded', ended_at = NEW.finished_at, failure_code = NULL,
        failure_message = NULL, failure_details = NULL, retryable = NULL, retry_after_ms = NULL, suggestion = NULL,
        degraded = NULL
    WHERE run_id = NEW.run_id AND step_id = NEW.step_id AND attempt = NEW.attempt;
END;
