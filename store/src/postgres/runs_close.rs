//! [`RunsTx`] on PostgreSQL: the set-based run statements with the runs bound as arrays, so each is one prepared
//! statement whatever the number of runs.
//!
//! Why: written as `VALUES` and `IN (…)` lists (as on SQLite), their text changed with the number of runs, so
//! they went unprepared and were parsed, planned and bound for every batch. That was cheap while batches over
//! several runs mostly took the leaf call (`complete_leaves.rs`); since new runs share the writer's batches
//! (which then take the general path), it was measured with statement logging in `cairn bench dispatch`
//! (2026-12-01): the two statements that close and finish the batch's runs cost 1.0 and 0.6 ms a batch, parse
//! and bind 0.3 and 0.4 ms of that.
//!
//! Every statement reads `runs` by key (`id = ANY ($n)`) and `steps` by its `(run_id, …)` primary key prefix.

use sqlx::{Postgres, Transaction};

use crate::error::StoreResult;
use crate::runs_tx::RunsTx;

/// `$1` the time, `$2` the run ids, `$3` the steps closed in each (a run at most once).
pub(super) const RUNS_CLOSE_STEPS: &str = "UPDATE runs SET open_steps = open_steps - v.closed, updated_at = $1 \
     FROM UNNEST($2::text[], $3::int8[]) AS v(id, closed) WHERE runs.id = v.id \
     RETURNING runs.id, runs.open_steps, runs.cancel_requested";

/// `$1` the run ids.
pub(super) const RUNS_FAILED_STEPS: &str = "SELECT run_id, step_id, error FROM steps \
     WHERE run_id = ANY ($1::text[]) AND status = 'failed' ORDER BY run_id, position";

/// `$1` the time, `$2` the run ids.
pub(super) const RUNS_SUCCEED: &str = "UPDATE runs SET status = 'succeeded', failure = NULL, finished_at = $1, updated_at = $1 \
     WHERE id = ANY ($2::text[]) AND (status IN ('pending', 'running')) IS TRUE \
     AND NOT EXISTS (SELECT 1 FROM steps WHERE steps.run_id = runs.id AND steps.status = 'failed') RETURNING id";

impl RunsTx for Transaction<'_, Postgres> {
    async fn runs_close_steps(&mut self, closing: &[(&str, i64)], now: i64) -> StoreResult<Vec<(String, i64, i64)>> {
        let (ids, closed): (Vec<&str>, Vec<i64>) = closing.iter().copied().unzip();
        Ok(sqlx::query_as(RUNS_CLOSE_STEPS).bind(now).bind(ids).bind(closed).fetch_all(&mut **self).await?)
    }

    async fn runs_failed_steps(&mut self, run_ids: &[&str]) -> StoreResult<Vec<(String, String, Option<String>)>> {
        Ok(sqlx::query_as(RUNS_FAILED_STEPS).bind(run_ids).fetch_all(&mut **self).await?)
    }

    async fn runs_succeed(&mut self, run_ids: &[&str], now: i64) -> StoreResult<Vec<String>> {
        Ok(sqlx::query_scalar(RUNS_SUCCEED).bind(now).bind(run_ids).fetch_all(&mut **self).await?)
    }
}
