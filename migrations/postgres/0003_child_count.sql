-- Cairn schema v3 (PostgreSQL): how many steps depend on each step, so finishing a leaf step (most steps of a
-- wide run) skips the release of dependents it does not have. -1: unknown (rows stored before v3), which is
-- treated as "may have dependents".
ALTER TABLE steps ADD COLUMN child_count BIGINT NOT NULL DEFAULT -1;
