//! Whether a batch transaction whose `COMMIT` answer was lost committed, read from the leases it made.
//!
//! The batch writer's general path computes a batch's whole outcome before it sends `COMMIT`. When the connection
//! is lost while `COMMIT` is under way, the server may have committed or not, and without a way to tell, the
//! steps the batch leased (for the claims riding on it, and hand-offs to waiting polls) would reach no worker:
//! they would sit `running` until their lease expired, and a non-idempotent one would then be parked as
//! `outcome_unknown` although it never started (architecture §6). Those leases identify the transaction: each names a step, its
//! new attempt, the worker and the instant, which only that transaction wrote. So a read of the leased rows on
//! a fresh connection tells the two cases apart, at no cost to batches whose `COMMIT` is answered.

use sqlx::{PgPool, Postgres};

use crate::model::BatchOutcome;

/// The read: how many of the leases are in place as the transaction wrote them. Index: `steps` PK.
const LEASES_IN_PLACE: &str = "SELECT count(*) FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::text[]) \
       AS l(run_id, step_id, attempt, worker_id) \
     JOIN steps s ON s.run_id = l.run_id AND s.step_id = l.step_id \
     WHERE s.attempt = l.attempt AND s.lease_owner = l.worker_id AND s.started_at = $5";

/// Whether the transaction that produced `outcome` at `now_ms` committed, read on a fresh connection from `pool`:
/// `Some(true)` when any step it leased (`claimed` or `handed`) holds that lease, `Some(false)` when none does,
/// `None` when it leased nothing (nothing to read it by: the caller keeps the outcome unknown).
///
/// `Some(false)` means nothing was written, with one exception: a server process that lost its client to a
/// network cut (not a terminated session or a restart) may still be committing when this read runs. A retry of
/// the batch then waits on that transaction's row locks and finds its reports stale; the steps that transaction
/// leased come back by lease expiry, as every lease of a lost `COMMIT` would without this read.
///
/// # Errors
/// sqlx's error when the read fails on a live connection or on every pooled one.
pub(crate) async fn leases_committed(
    pool: &PgPool,
    outcome: &BatchOutcome,
    now_ms: i64,
) -> Result<Option<bool>, sqlx::Error> {
    let leases: Vec<_> = outcome.claimed.iter().chain(&outcome.handed).flatten().map(|c| &c.lease).collect();
    if leases.is_empty() {
        return Ok(None);
    }
    let runs: Vec<&str> = leases.iter().map(|l| l.run_id.as_str()).collect();
    let steps: Vec<&str> = leases.iter().map(|l| l.step_id.as_str()).collect();
    let attempts: Vec<i64> = leases.iter().map(|l| i64::from(l.attempt)).collect();
    let workers: Vec<&str> = leases.iter().map(|l| l.worker_id.as_str()).collect();
    let read = |mut connection: sqlx::pool::PoolConnection<Postgres>| {
        let query = sqlx::query_scalar::<Postgres, i64>(LEASES_IN_PLACE)
            .bind(&runs)
            .bind(&steps)
            .bind(&attempts)
            .bind(&workers)
            .bind(now_ms);
        async move { query.fetch_one(&mut *connection).await }
    };
    // The pool's other connections may have died with the transaction's (a database restart).
    let in_place = super::on_a_live_connection(pool, read).await?;
    Ok(Some(in_place > 0))
}
