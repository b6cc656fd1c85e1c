-- Cairn schema v6 (PostgreSQL): the chain call also says whether the dependent it leases is a leaf (issue 8).
--
-- `cairn_complete_and_claim` (migration 0004) as it was, but also returning the dependent's `child_count`, so the
-- writer knows whether the step it leases is a leaf and can send its completion through
-- `cairn_complete_leaves_and_claim` (migration 0005: a chain's last step). A function's result type cannot be
-- changed in place, hence the drop.
DROP FUNCTION cairn_complete_and_claim(TEXT, TEXT, BIGINT, TEXT, TEXT, BIGINT, TEXT[], BIGINT);

CREATE FUNCTION cairn_complete_and_claim(
    p_run_id TEXT, p_step_id TEXT, p_attempt BIGINT, p_worker_id TEXT, p_output TEXT, p_now BIGINT,
    p_actions TEXT[], p_lease_ttl_ms BIGINT)
RETURNS TABLE (run_id TEXT, step_id TEXT, attempt BIGINT, action TEXT, args TEXT, timeout_ms BIGINT,
    heartbeat_timeout_ms BIGINT, deadline_at BIGINT, checkpoint TEXT, available_at BIGINT, successor_action TEXT,
    child_count BIGINT)
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_children BIGINT;
    v_child steps%ROWTYPE;
    v_open BIGINT;
    v_cancel BIGINT;
BEGIN
    -- Read-only, so checked first: under a backlog this is the usual reason to fall back.
    IF EXISTS (SELECT 1 FROM steps r WHERE r.status = 'ready' AND r.available_at <= p_now
               AND r.action = ANY (p_actions)) THEN
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
        AND (s.status = 'pending') IS TRUE AND s.pending_deps = 1 AND s.dep_count = 1
        AND s.when_expr IS NULL AND s.approval IS NULL
        AND (s.not_before_at IS NULL OR s.not_before_at <= p_now) AND s.action = ANY (p_actions)
        AND strpos(s.args, '$') = 0
    RETURNING s.* INTO v_child;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'cairn: the dependent needs the general path' USING ERRCODE = 'CRN01';
    END IF;

    UPDATE runs r SET open_steps = r.open_steps - 1, updated_at = p_now WHERE r.id = p_run_id
    RETURNING r.open_steps, r.cancel_requested INTO v_open, v_cancel;
    IF NOT FOUND OR v_open < 1 OR v_cancel <> 0 THEN
        RAISE EXCEPTION 'cairn: the run needs the general path' USING ERRCODE = 'CRN01';
    END IF;

    INSERT INTO attempts (run_id, step_id, attempt, lease_id, action, worker_id, status, started_at)
    VALUES (p_run_id, v_child.step_id, v_child.attempt, v_child.lease_id, v_child.action, p_worker_id, 'running',
        p_now);
    -- Ids are drawn in this order, with the run row already locked by the counter update (see `lock_runs!`).
    INSERT INTO run_events (run_id, step_id, kind, data, at) VALUES
        (p_run_id, p_step_id, 'step_succeeded', '{"attempt":' || p_attempt || '}', p_now),
        (p_run_id, v_child.step_id, 'step_ready', '{"available_at":' || p_now || '}', p_now),
        (p_run_id, v_child.step_id, 'step_started',
            '{"attempt":' || v_child.attempt || ',"worker_id":' || to_json(p_worker_id)::text || '}', p_now);

    RETURN QUERY SELECT v_child.run_id, v_child.step_id, v_child.attempt, v_child.action, v_child.args,
        v_child.timeout_ms, v_child.heartbeat_timeout_ms, v_child.deadline_at, v_child.checkpoint,
        v_child.available_at, v_child.successor_action, v_child.child_count;
END;
$$;
