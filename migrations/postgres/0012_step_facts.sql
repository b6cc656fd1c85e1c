-- Facts about each step fixed at submission, so that statements decide by comparing counters and flags and never
-- by reading a step's rules (issue "One state machine"; `cairn_core::machine::starts_itself`).
--
-- `starts_itself`: 1 when the step becomes ready with no further decision once every dependency succeeded (its
-- trigger rule holds then, no `when`, no required approval). Steps still pending are given the value the rule
-- this replaces computed (no `when`, no approval at all); finished steps never read it.
ALTER TABLE steps ADD COLUMN starts_itself BIGINT NOT NULL DEFAULT 0;
UPDATE steps SET starts_itself = 1 WHERE status = 'pending' AND when_expr IS NULL AND approval IS NULL;
-- The stored functions that read it are (re)defined from `store/sql/postgres/functions/` after the migrations.
