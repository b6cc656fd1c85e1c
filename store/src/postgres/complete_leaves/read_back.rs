//! What a leaf call committed, read after its answer was lost (see [`committed`]).

use sqlx::Postgres;

use super::{CallRow, LeafBatch};

/// Whether a call for `batch` at `now` committed, read on a fresh connection from `pool` after the call's
/// connection was lost: the rows the call would have returned if any lease of the batch is found succeeded at
/// `now` (the call's own write, assuming no other orchestrator completed a lease of the batch at the same
/// millisecond: a worker reports to the orchestrator that handed out its lease), `None` if none is. The steps the
/// call leased are found by the transaction that wrote them: a running step leased at `now` to one of the claim
/// groups' workers whose row version the same transaction wrote as the successes' (`xmin`: the call is one
/// transaction without subtransactions). They are returned in claim order, each under the first claim group of
/// its worker that serves its action, so they reach the workers that asked instead of waiting for lease expiry
/// (where a non-idempotent step would be parked as `outcome_unknown` though it never started).
///
/// `None` also when the call committed with no current lease (every report stale), in which case its claims'
/// steps come back by lease expiry; and a server process that still runs the call after losing its client (a
/// network cut, not a terminated session) may commit after this read. The usual case, a connection that was
/// already closed when the call was sent (a database restart, a terminated session), reads `None`, and the
/// general path then writes the batch on a fresh connection.
///
/// # Errors
/// sqlx's error when the read fails on a live connection, or on every pooled one (the outcome is then unknown,
/// as after a lost `COMMIT`).
pub(crate) async fn committed(
    pool: &sqlx::PgPool,
    batch: &LeafBatch<'_>,
    now: i64,
) -> Result<Option<Vec<CallRow>>, sqlx::Error> {
    let runs: Vec<&str> = batch.leases.iter().map(|l| l.run_id.as_str()).collect();
    let steps: Vec<&str> = batch.leases.iter().map(|l| l.step_id.as_str()).collect();
    let attempts: Vec<i64> = batch.leases.iter().map(|l| i64::from(l.attempt)).collect();
    let (claim_workers, claim_actions) = batch.group_columns();
    // The pool's other connections may have died with the call's (a database restart).
    let read = |mut connection: sqlx::pool::PoolConnection<Postgres>| {
        let query = sqlx::query_as::<Postgres, CallRow>(COMMITTED)
            .bind(&runs)
            .bind(&steps)
            .bind(&attempts)
            .bind(now)
            .bind(&claim_workers)
            .bind(&claim_actions);
        async move { query.fetch_all(&mut *connection).await }
    };
    let mut rows = crate::postgres::on_a_live_connection(pool, read).await?;
    if !rows.iter().any(|row| row.claim_group == 0) {
        return Ok(None);
    }
    deal_to_groups(&mut rows, batch);
    Ok(Some(rows))
}

/// Gives each leased row of `rows` (in claim order, each marked with the first claim group of its worker that
/// serves its action) the group that leased it, as the call's claims did: groups of one worker whose actions
/// overlap take the steps they serve oldest first, each up to the sum of its requests' limits. Then sorts the
/// rows by group, keeping claim order within each.
fn deal_to_groups(rows: &mut [CallRow], batch: &LeafBatch<'_>) {
    let mut room: Vec<u64> = batch
        .groups
        .iter()
        .map(|(_, _, requests)| requests.iter().map(|&i| u64::from(batch.claims[i].limit)).sum())
        .collect();
    for row in rows.iter_mut() {
        let first = usize::try_from(row.claim_group - 1).ok().filter(|&g| g < batch.groups.len());
        let Some(first) = first else { continue };
        let worker = batch.groups[first].0;
        let serves = |g: &usize| {
            let (w, actions, _) = &batch.groups[*g];
            *w == worker && row.step.action.as_ref().is_some_and(|a| actions.contains(a))
        };
        let group = (0..batch.groups.len()).filter(serves).find(|&g| room[g] > 0).unwrap_or(first);
        room[group] = room[group].saturating_sub(1);
        row.claim_group = i32::try_from(group + 1).unwrap_or(row.claim_group);
    }
    rows.sort_by_key(|row| row.claim_group);
}

/// The read of [`committed`], shaped as the call's rows: the successes (claim group 0), then the leased steps in
/// claim order, each under the first claim group of its worker that serves its action ([`deal_to_groups`] then
/// deals them as the call did). The leased steps are read only when every success has the same writing
/// transaction, the call's. Index: `steps` PK for the successes, `steps_lease_idx` for the leased steps.
const COMMITTED: &str = "WITH done AS (SELECT s.run_id, s.step_id, s.attempt, s.xmin::text AS writer \
       FROM UNNEST($1::text[], $2::text[], $3::int8[]) AS l(run_id, step_id, attempt) \
       JOIN steps s ON s.run_id = l.run_id AND s.step_id = l.step_id AND s.attempt = l.attempt \
       WHERE (s.status = 'succeeded') IS TRUE AND s.finished_at = $4), \
     call AS (SELECT min(writer) AS writer FROM done HAVING count(DISTINCT writer) = 1), \
     leased AS (SELECT (SELECT min(g) FROM generate_subscripts($5::text[], 1) AS g \
           WHERE ($5::text[])[g] = s.lease_owner \
             AND s.action IN (SELECT jsonb_array_elements_text((($6::text[])[g])::jsonb)))::int4 AS claim_group, \
         s.run_id, s.step_id, s.attempt, s.action, s.args, s.timeout_ms, s.heartbeat_timeout_ms, s.deadline_at, \
         s.checkpoint, s.available_at, s.successor_action, s.child_count \
       FROM call c JOIN steps s ON s.xmin::text = c.writer \
       WHERE s.status = 'running' AND s.lease_expires_at > $4 AND s.started_at = $4 \
         AND s.lease_owner = ANY ($5::text[])) \
     SELECT 0 AS claim_group, run_id, step_id, attempt, NULL::text AS action, NULL::text AS args, \
       NULL::int8 AS timeout_ms, NULL::int8 AS heartbeat_timeout_ms, NULL::int8 AS deadline_at, \
       NULL::text AS checkpoint, NULL::int8 AS available_at, NULL::text AS successor_action, \
       NULL::int8 AS child_count FROM done \
     UNION ALL \
     SELECT * FROM leased WHERE claim_group IS NOT NULL \
     ORDER BY available_at, run_id, step_id";
