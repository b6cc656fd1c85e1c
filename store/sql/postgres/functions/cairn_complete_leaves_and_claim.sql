-- `cairn_complete_leaves_and_claim`: a batch of leaf completions and the claim riding on them in one round trip
-- (the PostgreSQL fast path, `store/src/postgres/`).
--
-- Accepts workers' successes of steps no other step depends on, under their
-- leases, and leases the steps the workers' claims ask for, in the single transaction of one call (the caller sends it outside
-- any transaction block, so the call commits on return). It does what the general path (`BEGIN`, the success
-- statement, the runs' counters, the claim, `COMMIT`: five round trips) does when no decision in Rust is needed
-- between those statements, and writes the same rows and events in the same order:
--   - each step whose lease is current: succeeded, output, lease cleared; its attempt row: succeeded (a lease that
--     is not current changes nothing and is not returned: the caller answers it stale);
--   - each run's open-step counter minus its steps succeeded here; a run whose counters then say it succeeded
--     (no open step, no failed step, no cancel under way: `cairn_core::machine::run_end`) succeeds
--     (`run_succeeded`), as `RUN_FINISH` in `store/src/sql.rs` does after the general path's count;
--   - one claim per claim group (a worker, its actions as a JSON array, a limit), in the order given: up to the
--     limit of due ready steps serving those actions, oldest first, rows locked by another claimer skipped, each
--     leased with a new attempt row, their runs marked running, as `CLAIM` in `store/src/postgres.rs` does;
--   - events: one `step_succeeded` per success in the order given, one `run_succeeded` per run ended here in the
--     order the runs first appear among the successes, then one `step_started` per leased step, group by group,
--     with their runs locked first (`lock_runs!` in `store/src/postgres.rs`); their payloads are the columns
--     `attempt` and `worker_id` (`cairn_core::event::Progress`: serde makes the API's JSON of them when they are
--     read, so none is built here).
-- Any other case raises SQLSTATE `CRN01` ("take the general path"), which rolls the call back whole: a succeeded
-- step that has dependents (releasing them is decided in Rust), a run that would end with a failed step or had
-- already ended, a run with a cancel under way, a run that vanished, or a leased step whose args may hold a
-- placeholder (any `$`: resolving one can fail the step, and that failure belongs in the same transaction as its
-- claim). The caller sends only batches it knows to be leaves (`child_count` 0 when claimed) and, after a
-- fallback, sends the next few leaf batches the general way without asking (`store/src/writer.rs`).
--
-- Rows: one per success (`claim_group` 0; `run_id`, `step_id`, `attempt`, the rest NULL), then one per leased
-- step (`claim_group` the 1-based index of its claim group), the columns the claim returns plus `child_count`.
--
-- Settings (the `SET` clauses): PL/pgSQL caches the plans of this function for the life of a session, and the
-- orchestrator's writer keeps one session for its whole life. Sequential, bitmap, merge and hash joins are off
-- and nested loops on, so each join is a nested loop over the batch reading the table by key whatever the
-- statistics were when a plan was cached (a plan made while `runs` was small otherwise merge-joined all of
-- `runs_pkey` on every call once the table grew). `plan_cache_mode = force_generic_plan`: statements are planned
-- once per session instead of once per call for the arrays' lengths; generic plans are safe because every
-- statement reads its tables by key or the ready steps through their partial index, and every status it filters
-- on is a literal (`store/src/postgres/plans.rs` checks the reads). One case is left: statistics taken by a manual
-- `ANALYZE` of a nearly empty table can still put the table on the outer side of the loop.
CREATE OR REPLACE FUNCTION cairn_complete_leaves_and_claim(p_run_ids text[], p_step_ids text[], p_attempts bigint[], p_workers text[], p_outputs text[], p_now bigint, p_claim_workers text[], p_claim_actions text[], p_claim_limits bigint[], p_lease_ttl_ms bigint)
 RETURNS TABLE(claim_group integer, run_id text, step_id text, attempt bigint, action text, args text, timeout_ms bigint, heartbeat_timeout_ms bigint, deadline_at bigint, checkpoint text, available_at bigint, successor_action text, child_count bigint)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
 SET enable_mergejoin TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_nestloop TO 'on'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
#variable_conflict use_column
DECLARE
    v_runs TEXT[];
    v_steps TEXT[];
    v_attempts BIGINT[];
    v_branching BOOLEAN;
    v_run_count BIGINT;
    v_counted BIGINT;
    v_unsettled BOOLEAN;
    v_ending TEXT[];
    v_finished BIGINT;
    v_row RECORD;
    v_worker TEXT;
    v_actions TEXT[];
    v_first BOOLEAN;
BEGIN
    WITH v AS (SELECT * FROM UNNEST(p_run_ids, p_step_ids, p_attempts, p_workers, p_outputs) WITH ORDINALITY
                 AS v(run_id, step_id, attempt, worker_id, output, n)),
    done AS (UPDATE steps s SET status = 'succeeded', output = v.output, error = NULL, lease_id = NULL,
            lease_owner = NULL, lease_expires_at = NULL, finished_at = p_now, updated_at = p_now
        FROM v WHERE s.run_id = v.run_id AND s.step_id = v.step_id AND s.attempt = v.attempt
            AND (s.status = 'running') IS TRUE AND s.lease_owner = v.worker_id
        RETURNING s.run_id, s.step_id, s.attempt, s.child_count, v.n)
    SELECT array_agg(done.run_id ORDER BY n), array_agg(done.step_id ORDER BY n),
        array_agg(done.attempt ORDER BY n), bool_or(done.child_count <> 0)
    INTO v_runs, v_steps, v_attempts, v_branching FROM done;
    IF v_branching THEN
        RAISE EXCEPTION 'cairn: a succeeded step has dependents to release' USING ERRCODE = 'CRN01';
    END IF;
    v_runs := COALESCE(v_runs, '{}');
    v_steps := COALESCE(v_steps, '{}');
    v_attempts := COALESCE(v_attempts, '{}');

    UPDATE attempts a SET status = 'succeeded', ended_at = p_now
    FROM UNNEST(v_runs, v_steps, v_attempts) AS d(run_id, step_id, attempt)
    WHERE a.run_id = d.run_id AND a.step_id = d.step_id AND a.attempt = d.attempt;

    SELECT count(DISTINCT r) INTO v_run_count FROM UNNEST(v_runs) AS r;
    -- `first`: where each run first appears among the successes, the order its `run_succeeded` event takes.
    WITH c AS (SELECT r AS id, count(*) AS n, min(i) AS first FROM UNNEST(v_runs) WITH ORDINALITY AS u(r, i)
                 GROUP BY r),
    counted AS (UPDATE runs SET open_steps = runs.open_steps - c.n, updated_at = p_now FROM c WHERE runs.id = c.id
        RETURNING runs.id, runs.open_steps, runs.cancel_requested, c.first)
    SELECT count(*), COALESCE(bool_or(open_steps < 0 OR cancel_requested <> 0), false),
        COALESCE(array_agg(id ORDER BY first) FILTER (WHERE open_steps = 0), '{}')
    INTO v_counted, v_unsettled, v_ending FROM counted;
    IF v_unsettled OR v_counted <> v_run_count THEN
        RAISE EXCEPTION 'cairn: a run needs the general path' USING ERRCODE = 'CRN01';
    END IF;
    -- Runs with no open step left end here when their counters say succeeded (`cairn_core::machine::run_end`:
    -- no failed step); one with a failed step, or already finished, is left to Rust to name its failure.
    WITH finished AS (UPDATE runs SET status = 'succeeded', failure = NULL, finished_at = p_now, updated_at = p_now
        WHERE runs.id = ANY (v_ending) AND (runs.status IN ('pending', 'running', 'paused')) IS TRUE
            AND runs.failed_steps = 0
        RETURNING runs.id)
    SELECT count(*) INTO v_finished FROM finished;
    IF v_finished <> cardinality(v_ending) THEN
        RAISE EXCEPTION 'cairn: a run ends with a failure or had ended' USING ERRCODE = 'CRN01';
    END IF;

    FOR i IN 1 .. cardinality(v_runs) LOOP
        claim_group := 0;
        run_id := v_runs[i];
        step_id := v_steps[i];
        attempt := v_attempts[i];
        RETURN NEXT;
    END LOOP;

    -- Without a claim the events are inserted alone, as `EVENTS_INSERT` in `store/src/postgres.rs` does.
    IF COALESCE(cardinality(p_claim_workers), 0) = 0 THEN
        INSERT INTO run_events (run_id, step_id, kind, attempt, worker_id, at)
        SELECT e.run_id, e.step_id, e.kind, e.attempt, NULL, p_now FROM (
            SELECT q.run_id, q.step_id, 'step_succeeded' AS kind, q.attempt, q.n
            FROM UNNEST(v_runs, v_steps, v_attempts) WITH ORDINALITY AS q(run_id, step_id, attempt, n)
            UNION ALL
            SELECT f.run_id, NULL, 'run_succeeded', NULL, cardinality(v_runs) + f.n
            FROM UNNEST(v_ending) WITH ORDINALITY AS f(run_id, n)) AS e,
            (SELECT count(*) AS runs_locked FROM (SELECT k.id FROM runs k WHERE k.id IN (SELECT unnest(v_runs))
                ORDER BY k.id FOR NO KEY UPDATE) AS k) AS lk
        ORDER BY e.n;
    END IF;

    -- One claim statement per claim group (a worker and its actions), in the order given, as `claim_all` in
    -- `store/src/flow/batch.rs` does: the claim of `store/src/postgres.rs` (`CLAIM`); the first one writes the
    -- successes' events before its own.
    FOR g IN 1 .. COALESCE(cardinality(p_claim_workers), 0) LOOP
        v_worker := p_claim_workers[g];
        v_actions := ARRAY(SELECT jsonb_array_elements_text(p_claim_actions[g]::jsonb));
        v_first := g = 1;
        FOR v_row IN
            -- A paused run's steps are not claimed (`crate::sql::unpaused!`).
            WITH picked AS (SELECT r.run_id, r.step_id FROM steps r WHERE r.status = 'ready'
                AND r.available_at <= p_now AND r.action = ANY (v_actions)
                AND r.run_id NOT IN (SELECT k.id FROM runs k WHERE k.status = 'paused') ORDER BY r.available_at
                LIMIT p_claim_limits[g] FOR UPDATE SKIP LOCKED),
            leased AS (UPDATE steps s SET status = 'running', attempt = s.attempt + 1, lease_owner = v_worker,
                lease_id = s.run_id || '/' || s.step_id || '/' || (s.attempt + 1), started_at = p_now,
                heartbeat_at = p_now, deadline_at = p_now + s.timeout_ms,
                lease_expires_at = LEAST(p_now + s.timeout_ms,
                    p_now + COALESCE(s.heartbeat_timeout_ms, p_lease_ttl_ms)),
                updated_at = p_now
                FROM picked WHERE s.run_id = picked.run_id AND s.step_id = picked.step_id
                RETURNING s.run_id, s.step_id, s.attempt, s.action, s.args, s.timeout_ms, s.heartbeat_timeout_ms,
                    s.deadline_at, s.checkpoint, s.available_at, s.lease_id, s.successor_action, s.child_count,
                    s.args_revision),
            opened AS (INSERT INTO attempts (run_id, step_id, attempt, lease_id, action, worker_id, status,
                    started_at)
                SELECT l.run_id, l.step_id, l.attempt, l.lease_id, l.action, v_worker, 'running', p_now
                FROM leased l),
            started AS (UPDATE runs SET status = 'running', updated_at = p_now
                WHERE runs.id = ANY (ARRAY(SELECT l.run_id FROM leased l)) AND (runs.status = 'pending') IS TRUE),
            queued AS (SELECT q.run_id, q.step_id, 'step_succeeded' AS kind, q.attempt, NULL::text AS worker_id, q.n
                FROM UNNEST(v_runs, v_steps, v_attempts) WITH ORDINALITY AS q(run_id, step_id, attempt, n)
                WHERE v_first
                UNION ALL
                SELECT f.run_id, NULL, 'run_succeeded', NULL, NULL, cardinality(v_runs) + f.n
                FROM UNNEST(v_ending) WITH ORDINALITY AS f(run_id, n) WHERE v_first),
            logged AS (INSERT INTO run_events (run_id, step_id, kind, attempt, worker_id, at)
                SELECT e.run_id, e.step_id, e.kind, e.attempt, e.worker_id, p_now FROM (
                    SELECT * FROM queued
                    UNION ALL
                    SELECT l.run_id, l.step_id, 'step_started', l.attempt, v_worker,
                        (SELECT count(*) FROM queued)
                            + row_number() OVER (ORDER BY l.available_at, l.run_id, l.step_id)
                    FROM leased l) AS e,
                (SELECT count(*) AS runs_locked FROM (SELECT k.id FROM runs k WHERE k.id IN
                    (SELECT l.run_id FROM leased l UNION SELECT q.run_id FROM queued q) ORDER BY k.id
                    FOR NO KEY UPDATE) AS k) AS lk
                ORDER BY e.n)
            SELECT l.run_id, l.step_id, l.attempt, l.action, l.args, l.timeout_ms, l.heartbeat_timeout_ms,
                l.deadline_at, l.checkpoint, l.available_at, l.successor_action, l.child_count, l.args_revision
            FROM leased l
            ORDER BY l.available_at, l.run_id, l.step_id
        LOOP
            IF strpos(v_row.args, '$') <> 0 THEN
                RAISE EXCEPTION 'cairn: a leased step may hold a placeholder' USING ERRCODE = 'CRN01';
            END IF;
            -- Args an operator repaired come with the revised idempotency key, which the general path gives.
            IF v_row.args_revision <> 0 THEN
                RAISE EXCEPTION 'cairn: a leased step has repaired args' USING ERRCODE = 'CRN01';
            END IF;
            claim_group := g;
            run_id := v_row.run_id;
            step_id := v_row.step_id;
            attempt := v_row.attempt;
            action := v_row.action;
            args := v_row.args;
            timeout_ms := v_row.timeout_ms;
            heartbeat_timeout_ms := v_row.heartbeat_timeout_ms;
            deadline_at := v_row.deadline_at;
            checkpoint := v_row.checkpoint;
            available_at := v_row.available_at;
            successor_action := v_row.successor_action;
            child_count := v_row.child_count;
            RETURN NEXT;
        END LOOP;
    END LOOP;
END;
$function$;
