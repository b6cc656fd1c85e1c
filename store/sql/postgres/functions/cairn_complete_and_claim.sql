-- `cairn_complete_and_claim`: a chain step in one round trip (the PostgreSQL fast path, `store/src/postgres/`).
--
-- Accepts a step's success under its lease and leases its one dependent to the same worker, in the single
-- transaction of one call (the caller sends it outside any transaction block, so the call commits on return). It
-- does exactly what the general path (`BEGIN`, the success statement, the claim riding on the completion,
-- `COMMIT`: four round trips) does in the one case where no decision in Rust is needed between those statements,
-- and writes the same rows and events in the same order:
--   - the step row: succeeded, output, lease cleared; its attempt row: succeeded;
--   - its one dependent, when that dependent starts by itself (`steps.starts_itself`, computed at submission by
--     `cairn_core::machine::starts_itself`), depends on nothing else, its `not_before` has passed and the worker
--     serves its action: released and leased at once (`running`, attempt + 1, lease, deadline), with a new
--     attempt row;
--   - the run's open-step counter minus one (the dependent keeps the run open, so the run cannot end here);
--   - events `step_succeeded`, `step_ready`, `step_started`, in that order, after the run row is locked, their
--     payloads in the columns `attempt`, `worker_id` and `available_at` (`cairn_core::event::Progress`; the
--     JSON the API shows is made from them by serde when they are read, so none is built here).
-- Any other case raises SQLSTATE `CRN01` ("take the general path"), which rolls the call back whole: a lease
-- that is not current, a step with no or several dependents, a dependent that waits on other steps or does not
-- start by itself, args that may hold a placeholder (any `$`: resolving one can fail the dependent, and that
-- failure belongs in the same transaction as its claim), a cancel under way, or an older ready step the worker
-- could take (the general claim serves the oldest ready step first; this keeps that order).
--
-- No statement here reads a step's status or rules to decide a transition: the dependent is released by its
-- counter of unfinished dependencies and its `starts_itself` fact (a cancelled step's counter is 0). Status
-- checks that fence a lease are written `(status = '…') IS TRUE`, as everywhere in `store/src/sql.rs`, so that
-- no cached generic plan walks a partial index instead.
CREATE OR REPLACE FUNCTION cairn_complete_and_claim(p_run_id text, p_step_id text, p_attempt bigint, p_worker_id text, p_output text, p_now bigint, p_actions text[], p_lease_ttl_ms bigint)
 RETURNS TABLE(run_id text, step_id text, attempt bigint, action text, args text, timeout_ms bigint, heartbeat_timeout_ms bigint, deadline_at bigint, checkpoint text, available_at bigint, successor_action text, child_count bigint)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
AS $function$
#variable_conflict use_column
DECLARE
    v_children BIGINT;
    v_child steps%ROWTYPE;
    v_open BIGINT;
    v_cancel BIGINT;
    v_status TEXT;
BEGIN
    -- Read-only, so checked first: under a backlog this is the usual reason to fall back.
    IF EXISTS (SELECT 1 FROM steps r WHERE r.status = 'ready' AND r.available_at <= p_now
               AND r.action = ANY (p_actions)
               AND r.run_id NOT IN (SELECT k.id FROM runs k WHERE k.status = 'paused')) THEN
        RAISE EXCEPTION 'cairn: an older ready step comes first' USING ERRCODE = 'CRN01';
    END IF;
    UPDATE steps s SET status = 'succeeded', output = p_output, error = NULL, lease_id = NULL, lease_owner = NULL,
        lease_expires_at = NULL, finished_at = p_now, updated_at = p_now
    WHERE s.run_id = p_run_id AND s.step_id = p_step_id AND s.attempt = p_attempt
        AND (s.status = 'running') IS TRUE AND s.lease_owner = p_worker_id
    RETURNING s.child_count INTO v_children;
    IF NOT FOUND OR v_children <> 1 THEN
        RAISE EXCEPTION 'cairn: not a single-dependent completion under a current lease' USING ERRCODE = 'CRN01';
    END IF;
    UPDATE attempts a SET status = 'succeeded', ended_at = p_now
    WHERE a.run_id = p_run_id AND a.step_id = p_step_id AND a.attempt = p_attempt;

    UPDATE steps s SET pending_deps = 0, status = 'running', attempt = s.attempt + 1, lease_owner = p_worker_id,
        lease_id = s.run_id || '/' || s.step_id || '/' || (s.attempt + 1), started_at = p_now, heartbeat_at = p_now,
        deadline_at = p_now + s.timeout_ms,
        lease_expires_at = LEAST(p_now + s.timeout_ms, p_now + COALESCE(s.heartbeat_timeout_ms, p_lease_ttl_ms)),
        available_at = p_now, updated_at = p_now
    WHERE s.run_id = p_run_id
        AND s.step_id = ANY (ARRAY(SELECT e.child FROM step_edges e WHERE e.run_id = p_run_id AND e.parent = p_step_id))
        AND s.pending_deps = 1 AND s.dep_count = 1 AND s.starts_itself = 1
        AND (s.not_before_at IS NULL OR s.not_before_at <= p_now) AND s.action = ANY (p_actions)
        AND strpos(s.args, '$') = 0 AND s.args_revision = 0
    RETURNING s.* INTO v_child;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'cairn: the dependent needs the general path' USING ERRCODE = 'CRN01';
    END IF;

    UPDATE runs r SET open_steps = r.open_steps - 1, updated_at = p_now WHERE r.id = p_run_id
    RETURNING r.open_steps, r.cancel_requested, r.status INTO v_open, v_cancel, v_status;
    -- A paused run starts no new attempt (`crate::sql::unpaused!`): the general path releases its dependent.
    IF NOT FOUND OR v_open < 1 OR v_cancel <> 0 OR v_status = 'paused' THEN
        RAISE EXCEPTION 'cairn: the run needs the general path' USING ERRCODE = 'CRN01';
    END IF;

    INSERT INTO attempts (run_id, step_id, attempt, lease_id, action, worker_id, status, started_at)
    VALUES (p_run_id, v_child.step_id, v_child.attempt, v_child.lease_id, v_child.action, p_worker_id, 'running',
        p_now);
    -- Ids are drawn in this order, with the run row already locked by the counter update (see `lock_runs!`).
    INSERT INTO run_events (run_id, step_id, kind, attempt, worker_id, available_at, at) VALUES
        (p_run_id, p_step_id, 'step_succeeded', p_attempt, NULL, NULL, p_now),
        (p_run_id, v_child.step_id, 'step_ready', NULL, NULL, p_now, p_now),
        (p_run_id, v_child.step_id, 'step_started', v_child.attempt, p_worker_id, NULL, p_now);

    RETURN QUERY SELECT v_child.run_id, v_child.step_id, v_child.attempt, v_child.action, v_child.args,
        v_child.timeout_ms, v_child.heartbeat_timeout_ms, v_child.deadline_at, v_child.checkpoint,
        v_child.available_at, v_child.successor_action, v_child.child_count;
END;
$function$;
