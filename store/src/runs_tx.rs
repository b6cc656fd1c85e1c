//! Set-based statements over several runs at once, for a batch whose completions belong to many runs (many
//! small runs: one step each, say). One run at a time, closing a batch of 16 such runs cost 48 statements
//! (open-step counter, failed steps, finish, per run); these do it in three. New runs of a batch are inserted
//! together the same way. SQLite's statements are written here with lists (and its inserts run per run);
//! PostgreSQL binds arrays instead (`postgres/runs.rs`).

use std::future::Future;

use cairn_core::machine::{RunCounters, StepsClosed};

use crate::error::StoreResult;

/// Run statements over several runs. Every method runs inside the caller's transaction.
pub(crate) trait RunsTx: Send {
    /// Stores each run and its plan (unless the plan's content hash is stored already), as
    /// [`crate::tx::StepTx::run_insert`] would one by one.
    fn runs_insert(&mut self, runs: &[crate::rows::RunInsert<'_>]) -> impl Future<Output = StoreResult<()>> + Send;
    /// Inserts each `(run_id, rows, now)`'s steps, `now` the run's creation time, as
    /// [`crate::tx::StepTx::steps_insert`] would one by one.
    fn runs_steps_insert(
        &mut self,
        runs: &[(&str, &[crate::rows::StepInsert], i64)],
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// Counts each `(run_id, closed)`'s steps against its run, as [`crate::tx::StepTx::run_close_steps`] does:
    /// returns each run found with its counters, in no particular order. Locks the run rows.
    fn runs_close_steps(
        &mut self,
        closing: &[(&str, StepsClosed)],
        now: i64,
    ) -> impl Future<Output = StoreResult<Vec<(String, RunCounters)>>> + Send;
    /// Failed steps of the runs, as `(run_id, step_id, error)`, by run and then plan position.
    fn runs_failed_steps(
        &mut self,
        run_ids: &[&str],
    ) -> impl Future<Output = StoreResult<Vec<(String, String, Option<String>)>>> + Send;
    /// Finishes the runs as `succeeded` (their counters said so, `cairn_core::machine::run_end`) unless they
    /// already finished; returns the ids finished now, in no particular order.
    fn runs_succeed(&mut self, run_ids: &[&str], now: i64) -> impl Future<Output = StoreResult<Vec<String>>> + Send;
}

/// Implements [`RunsTx`] for `sqlx::Transaction<'_, $db>` with `VALUES` and `IN (…)` lists. `lists_prepared`:
/// whether statements whose text varies with the number of runs are prepared and cached, one per count.
macro_rules! impl_runs_tx {
    ($db:ty, lists_prepared: $lists_prepared:expr) => {
        impl $crate::runs_tx::RunsTx for sqlx::Transaction<'_, $db> {
            // One statement per run: SQLite runs them in process, with no round trip to save.
            async fn runs_insert(&mut self, runs: &[$crate::rows::RunInsert<'_>]) -> $crate::error::StoreResult<()> {
                for run in runs {
                    $crate::tx::StepTx::run_insert(self, run).await?;
                }
                Ok(())
            }
            async fn runs_steps_insert(
                &mut self,
                runs: &[(&str, &[$crate::rows::StepInsert], i64)],
            ) -> $crate::error::StoreResult<()> {
                for (run_id, rows, now) in runs {
                    $crate::tx::StepTx::steps_insert(self, run_id, rows, *now).await?;
                }
                Ok(())
            }
            async fn runs_close_steps(
                &mut self,
                closing: &[(&str, cairn_core::machine::StepsClosed)],
                now: i64,
            ) -> $crate::error::StoreResult<Vec<(String, cairn_core::machine::RunCounters)>> {
                let mut counted = Vec::with_capacity(closing.len());
                // 3 binds per run: 1000 runs stay far under either database's parameter limit.
                for chunk in closing.chunks(1000) {
                    let mut q = sqlx::QueryBuilder::<$db>::new(
                        "UPDATE runs SET open_steps = open_steps - v.column2, failed_steps = failed_steps + v.column3, ",
                    );
                    q.push("updated_at = ").push_bind(now).push(" FROM (");
                    q.push_values(chunk, |mut b, (run_id, closed)| {
                        b.push_bind(*run_id).push_bind(closed.steps).push_bind(closed.failed);
                    });
                    q.push(
                        ") AS v WHERE runs.id = v.column1 \
                         RETURNING runs.id, runs.open_steps, runs.failed_steps, runs.cancel_requested",
                    );
                    let query = q.build_query_as::<(String, i64, i64, i64)>().persistent($lists_prepared);
                    let rows = query.fetch_all(&mut **self).await?;
                    counted.extend(rows.into_iter().map(|(id, open, failed, cancel)| {
                        (id, $crate::rows::run_counters((open, failed, cancel)))
                    }));
                }
                Ok(counted)
            }
            async fn runs_failed_steps(
                &mut self,
                run_ids: &[&str],
            ) -> $crate::error::StoreResult<Vec<(String, String, Option<String>)>> {
                let mut failed = Vec::new();
                for chunk in run_ids.chunks(1000) {
                    let mut q = sqlx::QueryBuilder::<$db>::new(
                        "SELECT run_id, step_id, error FROM steps WHERE status = 'failed' \
                         AND run_id IN (",
                    );
                    let mut ids = q.separated(", ");
                    for run_id in chunk {
                        ids.push_bind(*run_id);
                    }
                    q.push(") ORDER BY run_id, position");
                    let query = q.build_query_as::<(String, String, Option<String>)>().persistent($lists_prepared);
                    failed.extend(query.fetch_all(&mut **self).await?);
                }
                Ok(failed)
            }
            async fn runs_succeed(&mut self, run_ids: &[&str], now: i64) -> $crate::error::StoreResult<Vec<String>> {
                let mut finished = Vec::with_capacity(run_ids.len());
                for chunk in run_ids.chunks(1000) {
                    let mut q = sqlx::QueryBuilder::<$db>::new(
                        "UPDATE runs SET status = 'succeeded', failure = NULL, finished_at = ",
                    );
                    q.push_bind(now).push(", updated_at = ").push_bind(now);
                    q.push(" WHERE (status IN ('pending', 'running', 'paused')) IS TRUE AND id IN (");
                    let mut ids = q.separated(", ");
                    for run_id in chunk {
                        ids.push_bind(*run_id);
                    }
                    q.push(") RETURNING id");
                    let query = q.build_query_scalar::<String>().persistent($lists_prepared);
                    finished.extend(query.fetch_all(&mut **self).await?);
                }
                Ok(finished)
            }
        }
    };
}

pub(crate) use impl_runs_tx;
