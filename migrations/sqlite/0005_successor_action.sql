-- Cairn schema v5 (SQLite): the action of a step's one dependent when completing the step may lease that
-- dependent in the same call (PostgreSQL's `cairn_complete_and_claim`; see `store/src/flow/submit.rs`). Kept on
-- SQLite too so that both backends store and return the same step rows. NULL: no such dependent, or a step
-- stored before this version.
ALTER TABLE steps ADD COLUMN successor_action TEXT;
