-- Repairing runs. An operator can run a failed step again (`cairn_core::machine::reopen`):
-- `attempt_base`: the attempts the step had used when it was last reopened; its retry policy counts attempts
--   from there, so a retried step gets `max_attempts` again.
-- `args_revision`: how many times an operator replaced its args (a step override on the run; the plan stays as
--   submitted). A revised step's idempotency key is `<run>/<step>/<revision>`.
ALTER TABLE steps ADD COLUMN attempt_base INTEGER NOT NULL DEFAULT 0;
ALTER TABLE steps ADD COLUMN args_revision INTEGER NOT NULL DEFAULT 0;
-- A cancelled run kept its open-step counter; every finished run has none open.
UPDATE runs SET open_steps = 0 WHERE status IN ('succeeded', 'failed', 'cancelled');
-- `rerun_of`: the run a rerun (`POST /v1/runs/{id}:rerun`) was made from; its other steps' outputs were reused.
ALTER TABLE runs ADD COLUMN rerun_of TEXT;
