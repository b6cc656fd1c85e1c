-- Cairn schema v8 (PostgreSQL): the leaf call plans its statements once per session (issue 8).
--
-- PL/pgSQL runs the statements of `cairn_complete_leaves_and_claim` (migration 0005) from cached plans. Under the
-- default `plan_cache_mode = auto`, a statement is planned again for each call's parameters for as long as such a
-- plan looks cheaper than the generic one. For the success update, whose batch arrives as arrays with lengths the
-- planner sees only then (a generic plan assumes 10 elements per array), it always did. Measured with
-- `pg_stat_statements` (`track = all`, `track_planning = on`) over `cairn bench throughput`, 1 worker × 16: 1,399
-- calls planned the success update 1,400 times at 171 µs each, and the runs' ending in one call in six; a call
-- executed in 1.59 ms. With generic plans each statement is planned once per session, and a call executed in
-- 1.33 ms.
--
-- Generic plans are safe here: every statement reads its tables by key, or the ready steps through their partial
-- index (migration 0007 leaves the planner nested loops only, 0005 no sequential or bitmap scans), and every
-- status it filters on is a literal, so the partial indexes still match (`store/src/postgres/plans.rs` checks the
-- reads).
ALTER FUNCTION cairn_complete_leaves_and_claim(TEXT[], TEXT[], BIGINT[], TEXT[], TEXT[], BIGINT, TEXT[], TEXT[],
    BIGINT[], BIGINT)
    SET plan_cache_mode = force_generic_plan;
