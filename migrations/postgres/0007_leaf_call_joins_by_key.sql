-- Cairn schema v7 (PostgreSQL): the leaf call joins by key whatever its cached plans were made from (issue 8).
--
-- PL/pgSQL caches the plans of `cairn_complete_leaves_and_claim` (migration 0005) for the life of a session, and
-- the orchestrator's writer keeps one session for its whole life. A plan made while the `runs` table held a few
-- hundred rows locked the runs of a claim's events with a merge join over all of `runs_pkey`; once the table had
-- grown, every call read the whole index (`cairn bench dispatch`, 11,000 single-step runs: the claim inside the
-- call took 6.5 ms, most of the call). With merge and hash joins off and nested loops on, as sequential and
-- bitmap scans are already off, each join is a nested loop over the batch reading the table by key, whatever
-- the session's settings say (`store/src/postgres/plans.rs` checks the reads). One case is left: statistics
-- taken by a manual `ANALYZE` of a nearly empty table (a handful of rows; autovacuum analyses only after 50
-- changed rows) can still put the table on the outer side of the loop.
ALTER FUNCTION cairn_complete_leaves_and_claim(TEXT[], TEXT[], BIGINT[], TEXT[], TEXT[], BIGINT, TEXT[], TEXT[],
    BIGINT[], BIGINT)
    SET enable_mergejoin = off;
ALTER FUNCTION cairn_complete_leaves_and_claim(TEXT[], TEXT[], BIGINT[], TEXT[], TEXT[], BIGINT, TEXT[], TEXT[],
    BIGINT[], BIGINT)
    SET enable_hashjoin = off;
ALTER FUNCTION cairn_complete_leaves_and_claim(TEXT[], TEXT[], BIGINT[], TEXT[], TEXT[], BIGINT, TEXT[], TEXT[],
    BIGINT[], BIGINT)
    SET enable_nestloop = on;
