//! The statements a transaction can run, as one trait implemented for both backends' transactions.
//!
//! [`StepTx`] is implemented once per backend: [`impl_step_tx!`] stamps the shared statements (from [`crate::sql`])
//! for `sqlx::Transaction<Sqlite>` and `sqlx::Transaction<Postgres>`, and each backend module adds the
//! dialect-specific ones ([`DialectTx`]: claim, success, heartbeat, expired leases; where PostgreSQL can do in
//! one statement, with data-modifying `WITH`, what SQLite needs several for, each round trip saved shortens
//! every transaction). The algorithms in [`crate::flow`] are
//! written once against these traits, so both backends make the same decisions in the same order.

use std::collections::HashSet;
use std::future::Future;

use cairn_core::machine::{RunCounters, StepsClosed};

use crate::error::StoreResult;
use crate::model::{ClaimRequest, HeartbeatOutcome, Lease};
use crate::rows::{
    AttemptClose, ChildRow, ClaimedRow, EventInsert, LeasedRow, StateRow, StepDecided, StepInsert, StepMoved,
    StepSucceeded,
};

/// The run holding an idempotency key, with what its submission is compared on.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct KeyedRun {
    /// The run.
    pub id: String,
    /// Its plan's content hash.
    pub plan_id: String,
    /// Its input, JSON text.
    pub input: String,
    /// Its plan, JSON text as stored.
    pub body: String,
}

/// Statements shared by both dialects. Every method runs inside the caller's transaction.
pub(crate) trait StepTx: Send {
    fn run_by_key(&mut self, key: &str) -> impl Future<Output = StoreResult<Option<KeyedRun>>> + Send;
    /// Stores the plan unless its content hash is stored already, and the run.
    fn run_insert(&mut self, run: &crate::rows::RunInsert<'_>) -> impl Future<Output = StoreResult<()>> + Send;
    fn steps_insert(
        &mut self,
        run_id: &str,
        rows: &[StepInsert],
        now: i64,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    fn edges_insert(
        &mut self,
        run_id: &str,
        edges: &[(String, String)],
    ) -> impl Future<Output = StoreResult<()>> + Send;
    fn events_insert(&mut self, events: &[EventInsert]) -> impl Future<Output = StoreResult<()>> + Send;
    /// Marks pending runs running (their first claim), in one statement.
    fn runs_mark_running(&mut self, run_ids: &[&str], now: i64) -> impl Future<Output = StoreResult<()>> + Send;
    fn step_leased(&mut self, lease: &Lease) -> impl Future<Output = StoreResult<Option<LeasedRow>>> + Send;
    fn step_finish(
        &mut self,
        lease: &Lease,
        status: &str,
        output: Option<&str>,
        error: Option<&str>,
        now: i64,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    /// Runs the fenced success statement [`crate::sql::STEP_SUCCEED`] (the step row only): `Some(child_count)`
    /// when the lease was current and the step is now succeeded.
    fn step_succeed(
        &mut self,
        lease: &Lease,
        output: &str,
        now: i64,
    ) -> impl Future<Output = StoreResult<Option<i64>>> + Send;
    fn step_unclaim(&mut self, lease: &Lease, now: i64) -> impl Future<Output = StoreResult<bool>> + Send;
    fn attempt_delete(&mut self, lease: &Lease) -> impl Future<Output = StoreResult<()>> + Send;
    fn step_requeue(
        &mut self,
        lease: &Lease,
        at: i64,
        error: &str,
        now: i64,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    fn attempt_close(
        &mut self,
        lease: &Lease,
        close: &AttemptClose,
        now: i64,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// Decrements the pending-dependency count of every dependent of `parents` (by how many of them it depends
    /// on) and returns the dependents' rows with their new counts and statuses, in no particular order. Locks
    /// each dependent row, so parents finishing at once in concurrent transactions serialise on a shared child
    /// and exactly one sees 0. Index: `step_edges` PK (run_id, parent), then `steps` PK.
    ///
    /// `succeeded_at`: `Some(now)` when every one of `parents` succeeded. A dependent that then has nothing left
    /// to decide is made ready in the same statement (status `ready`, `available_at` = its `not_before` or
    /// `now`, whichever is later): it was pending, all its dependencies are among `parents` (so all succeeded,
    /// which lets every trigger rule run), and it has no `when` and no approval. That is the decision
    /// [`crate::flow::settle`] would take, without a statement of its own (a chain step's dependent).
    fn children_release(
        &mut self,
        run_id: &str,
        parents: &[&str],
        succeeded_at: Option<i64>,
    ) -> impl Future<Output = StoreResult<Vec<ChildRow>>> + Send;
    fn parent_statuses(&mut self, run_id: &str, child: &str) -> impl Future<Output = StoreResult<Vec<String>>> + Send;
    fn step_state(&mut self, run_id: &str, step_id: &str)
    -> impl Future<Output = StoreResult<Option<StateRow>>> + Send;
    /// Writes a decision for a step still `pending` ([`crate::sql::STEP_DECIDE`]); false when it was not.
    fn step_decide(&mut self, d: &StepDecided<'_>, now: i64) -> impl Future<Output = StoreResult<bool>> + Send;
    /// Runs [`crate::sql::RUN_CLOSE_STEPS`]: the run's counters after `closed` were counted, `None` when the run
    /// is gone.
    fn run_close_steps(
        &mut self,
        run_id: &str,
        closed: StepsClosed,
        now: i64,
    ) -> impl Future<Output = StoreResult<Option<RunCounters>>> + Send;
    fn run_failed_steps(
        &mut self,
        run_id: &str,
    ) -> impl Future<Output = StoreResult<Vec<(String, Option<String>)>>> + Send;
    fn run_finish(
        &mut self,
        run_id: &str,
        status: &str,
        failure: Option<&str>,
        now: i64,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    fn run_input(&mut self, run_id: &str) -> impl Future<Output = StoreResult<Option<String>>> + Send;
    fn run_cancel(&mut self, run_id: &str, now: i64) -> impl Future<Output = StoreResult<bool>> + Send;
    /// Cancels the run's open steps ([`crate::sql::STEPS_CANCEL`]): returns `(step_id, attempt)` of each, in plan
    /// order (the order of their `step_cancelled` events).
    fn steps_cancel(&mut self, run_id: &str, now: i64) -> impl Future<Output = StoreResult<Vec<(String, i64)>>> + Send;
    /// Closes the running attempts of a cancelled run, and ends the event waits of its `event.wait` attempts.
    fn attempts_cancel(&mut self, run_id: &str, now: i64) -> impl Future<Output = StoreResult<()>> + Send;
    /// Moves a step from `from` to `to` for an operator ([`crate::sql::STEP_OPERATOR`]); false when it was not in
    /// `from`.
    fn step_operator(&mut self, m: &StepMoved<'_>, now: i64) -> impl Future<Output = StoreResult<bool>> + Send;
}

/// Statements whose SQL differs between SQLite and PostgreSQL.
pub(crate) trait DialectTx: StepTx + crate::runs_tx::RunsTx {
    /// Leases up to `limit` ready, due steps of the given actions, inserts their attempt rows, marks the runs
    /// they start `running` (except those in `running`, known to be running already), and records a
    /// `step_started` event per leased step after the events already queued in `events`. Returns the leased
    /// rows, in no particular order. PostgreSQL: one statement, which also writes the queued events and the
    /// `step_started` ones and leaves `events` empty (the commit's events insert is then one round trip saved);
    /// SQLite: the claim statement (whose trigger opens the attempt rows), one more for runs not yet running,
    /// and the `step_started` events are appended to `events` for the commit.
    fn claim(
        &mut self,
        req: &ClaimRequest,
        lease_ttl_ms: i64,
        running: &HashSet<&str>,
        events: &mut Vec<EventInsert>,
    ) -> impl Future<Output = StoreResult<Vec<ClaimedRow>>> + Send;
    /// Marks the step under `lease` succeeded with `output`, and its attempt row: `Some` when the lease was
    /// current (fenced by attempt, status and owner), `None` (nothing written) when it was not. PostgreSQL: one
    /// statement, which also counts the step against its run ([`StepSucceeded::run_counter`]); SQLite: one (its
    /// trigger closes the attempt), and the run is counted later by the cascade.
    fn succeed(
        &mut self,
        lease: &Lease,
        output: &str,
        now: i64,
    ) -> impl Future<Output = StoreResult<Option<StepSucceeded>>> + Send;
    /// [`DialectTx::succeed`] for many leases naming distinct steps: returns `(run_id, step_id, child_count)` of
    /// the steps whose lease was current, in no particular order. PostgreSQL: one statement (leases as arrays);
    /// SQLite: one (`UPDATE … FROM (VALUES …)`, its trigger closing the attempts).
    fn succeed_many(
        &mut self,
        done: &[(&Lease, &str)],
        now: i64,
    ) -> impl Future<Output = StoreResult<Vec<(String, String, i64)>>> + Send;
    /// Extends a lease (and saves a checkpoint).
    fn heartbeat(
        &mut self,
        lease: &Lease,
        checkpoint: Option<&str>,
        lease_ttl_ms: i64,
        now: i64,
    ) -> impl Future<Output = StoreResult<HeartbeatOutcome>> + Send;
    /// Running steps whose lease expired at or before `now`.
    fn expired(&mut self, now: i64, limit: i64) -> impl Future<Output = StoreResult<Vec<LeasedRow>>> + Send;
}

/// Implements [`StepTx`] for `sqlx::Transaction<'_, $db>` with the shared SQL. Per dialect: the release
/// statement and how its parents are bound, the events insert, the run insert (its plan, the run, its labels
/// and actions), and `lists_prepared`: whether a statement whose text varies with the number of runs it names is prepared and
/// cached, one per count.
macro_rules! impl_step_tx {
    ($db:ty, release: ($release_sql:expr, $release_parents:expr), events: $events:path, steps: $steps:path, run_insert: $run_insert:path, lists_prepared: $lists_prepared:expr) => {
        impl $crate::tx::StepTx for sqlx::Transaction<'_, $db> {
            async fn run_by_key(&mut self, key: &str) -> $crate::error::StoreResult<Option<$crate::tx::KeyedRun>> {
                Ok(sqlx::query_as::<$db, $crate::tx::KeyedRun>($crate::sql::RUN_BY_KEY)
                    .bind(key)
                    .fetch_optional(&mut **self)
                    .await?)
            }
            async fn run_insert(&mut self, run: &$crate::rows::RunInsert<'_>) -> $crate::error::StoreResult<()> {
                $run_insert(self, run).await
            }
            async fn steps_insert(
                &mut self,
                run_id: &str,
                rows: &[$crate::rows::StepInsert],
                now: i64,
            ) -> $crate::error::StoreResult<()> {
                $steps(self, run_id, rows, now).await
            }
            async fn edges_insert(
                &mut self,
                run_id: &str,
                edges: &[(String, String)],
            ) -> $crate::error::StoreResult<()> {
                for chunk in edges.chunks(5000) {
                    let mut q = sqlx::QueryBuilder::<$db>::new("INSERT INTO step_edges (run_id, parent, child) ");
                    q.push_values(chunk, |mut b, (parent, child)| {
                        b.push_bind(run_id).push_bind(parent.as_str()).push_bind(child.as_str());
                    });
                    q.build().execute(&mut **self).await?;
                }
                Ok(())
            }
            async fn events_insert(&mut self, events: &[$crate::rows::EventInsert]) -> $crate::error::StoreResult<()> {
                $events(self, events).await
            }
            async fn runs_mark_running(&mut self, run_ids: &[&str], now: i64) -> $crate::error::StoreResult<()> {
                if let [run_id] = run_ids {
                    sqlx::query::<$db>($crate::sql::RUN_MARK_RUNNING)
                        .bind(*run_id)
                        .bind(now)
                        .execute(&mut **self)
                        .await?;
                    return Ok(());
                }
                for chunk in run_ids.chunks(1000) {
                    let mut q = sqlx::QueryBuilder::<$db>::new("UPDATE runs SET status = 'running', updated_at = ");
                    q.push_bind(now).push(" WHERE (status = 'pending') IS TRUE AND id IN (");
                    let mut ids = q.separated(", ");
                    for run_id in chunk {
                        ids.push_bind(*run_id);
                    }
                    q.push(")");
                    q.build().persistent($lists_prepared).execute(&mut **self).await?;
                }
                Ok(())
            }
            async fn step_leased(
                &mut self,
                lease: &$crate::model::Lease,
            ) -> $crate::error::StoreResult<Option<$crate::rows::LeasedRow>> {
                Ok(sqlx::query_as::<$db, $crate::rows::LeasedRow>($crate::sql::STEP_LEASED)
                    .bind(&lease.run_id)
                    .bind(&lease.step_id)
                    .bind(i64::from(lease.attempt))
                    .fetch_optional(&mut **self)
                    .await?)
            }
            async fn step_finish(
                &mut self,
                lease: &$crate::model::Lease,
                status: &str,
                output: Option<&str>,
                error: Option<&str>,
                now: i64,
            ) -> $crate::error::StoreResult<bool> {
                let done = sqlx::query::<$db>($crate::sql::STEP_FINISH)
                    .bind(&lease.run_id)
                    .bind(&lease.step_id)
                    .bind(i64::from(lease.attempt))
                    .bind(status)
                    .bind(output)
                    .bind(error)
                    .bind(now)
                    .execute(&mut **self)
                    .await?;
                Ok(done.rows_affected() == 1)
            }
            async fn step_succeed(
                &mut self,
                lease: &$crate::model::Lease,
                output: &str,
                now: i64,
            ) -> $crate::error::StoreResult<Option<i64>> {
                Ok(sqlx::query_scalar::<$db, i64>($crate::sql::STEP_SUCCEED)
                    .bind(&lease.run_id)
                    .bind(&lease.step_id)
                    .bind(i64::from(lease.attempt))
                    .bind(&lease.worker_id)
                    .bind(output)
                    .bind(now)
                    .fetch_optional(&mut **self)
                    .await?)
            }
            async fn step_unclaim(
                &mut self,
                lease: &$crate::model::Lease,
                now: i64,
            ) -> $crate::error::StoreResult<bool> {
                let done = sqlx::query::<$db>($crate::sql::STEP_UNCLAIM)
                    .bind(&lease.run_id)
                    .bind(&lease.step_id)
                    .bind(i64::from(lease.attempt))
                    .bind(&lease.worker_id)
                    .bind(now)
                    .execute(&mut **self)
                    .await?;
                Ok(done.rows_affected() == 1)
            }
            async fn attempt_delete(&mut self, lease: &$crate::model::Lease) -> $crate::error::StoreResult<()> {
                sqlx::query::<$db>($crate::sql::ATTEMPT_DELETE)
                    .bind(&lease.run_id)
                    .bind(&lease.step_id)
                    .bind(i64::from(lease.attempt))
                    .execute(&mut **self)
                    .await?;
                Ok(())
            }
            async fn step_requeue(
                &mut self,
                lease: &$crate::model::Lease,
                at: i64,
                error: &str,
                now: i64,
            ) -> $crate::error::StoreResult<bool> {
                let done = sqlx::query::<$db>($crate::sql::STEP_REQUEUE)
                    .bind(&lease.run_id)
                    .bind(&lease.step_id)
                    .bind(i64::from(lease.attempt))
                    .bind(at)
                    .bind(error)
                    .bind(now)
                    .execute(&mut **self)
                    .await?;
                Ok(done.rows_affected() == 1)
            }
            async fn attempt_close(
                &mut self,
                lease: &$crate::model::Lease,
                c: &$crate::rows::AttemptClose,
                now: i64,
            ) -> $crate::error::StoreResult<()> {
                sqlx::query::<$db>($crate::sql::ATTEMPT_CLOSE)
                    .bind(&lease.run_id)
                    .bind(&lease.step_id)
                    .bind(i64::from(lease.attempt))
                    .bind(c.status)
                    .bind(now)
                    .bind(c.failure_code.as_deref())
                    .bind(c.failure_message.as_deref())
                    .bind(c.failure_details.as_deref())
                    .bind(c.retryable)
                    .bind(c.retry_after_ms)
                    .bind(c.suggestion.as_deref())
                    .bind(c.degraded)
                    .execute(&mut **self)
                    .await?;
                Ok(())
            }
            async fn children_release(
                &mut self,
                run_id: &str,
                parents: &[&str],
                succeeded_at: Option<i64>,
            ) -> $crate::error::StoreResult<Vec<$crate::rows::ChildRow>> {
                // One text whatever the number of parents, so it is prepared once per connection. PostgreSQL
                // keeps a generic plan after five runs; the transaction's settings (see `postgres::BEGIN`) keep
                // that plan on the keys, whatever the statistics said when it was made.
                Ok(sqlx::query_as::<$db, $crate::rows::ChildRow>($release_sql)
                    .bind(run_id)
                    .bind(($release_parents)(parents))
                    .bind(succeeded_at)
                    .fetch_all(&mut **self)
                    .await?)
            }
            async fn parent_statuses(&mut self, run_id: &str, child: &str) -> $crate::error::StoreResult<Vec<String>> {
                // Not prepared: a generic plan chosen while the tables were small could scan them all.
                Ok(sqlx::query_scalar::<$db, String>($crate::sql::PARENT_STATUSES)
                    .persistent(false)
                    .bind(run_id)
                    .bind(child)
                    .fetch_all(&mut **self)
                    .await?)
            }
            async fn step_state(
                &mut self,
                run_id: &str,
                step_id: &str,
            ) -> $crate::error::StoreResult<Option<$crate::rows::StateRow>> {
                Ok(sqlx::query_as::<$db, $crate::rows::StateRow>($crate::sql::STEP_STATE)
                    .bind(run_id)
                    .bind(step_id)
                    .fetch_optional(&mut **self)
                    .await?)
            }
            async fn step_decide(
                &mut self,
                d: &$crate::rows::StepDecided<'_>,
                now: i64,
            ) -> $crate::error::StoreResult<bool> {
                let done = sqlx::query::<$db>($crate::sql::STEP_DECIDE)
                    .bind(d.run_id)
                    .bind(d.step_id)
                    .bind(d.status.as_str())
                    .bind(d.available_at)
                    .bind(d.error)
                    .bind(d.finished_at)
                    .bind(now)
                    .execute(&mut **self)
                    .await?;
                Ok(done.rows_affected() == 1)
            }
            async fn run_close_steps(
                &mut self,
                run_id: &str,
                closed: cairn_core::machine::StepsClosed,
                now: i64,
            ) -> $crate::error::StoreResult<Option<cairn_core::machine::RunCounters>> {
                let row = sqlx::query_as::<$db, (i64, i64, i64)>($crate::sql::RUN_CLOSE_STEPS)
                    .bind(run_id)
                    .bind(closed.steps)
                    .bind(closed.failed)
                    .bind(now)
                    .fetch_optional(&mut **self)
                    .await?;
                Ok(row.map($crate::rows::run_counters))
            }
            async fn run_failed_steps(
                &mut self,
                run_id: &str,
            ) -> $crate::error::StoreResult<Vec<(String, Option<String>)>> {
                Ok(sqlx::query_as::<$db, (String, Option<String>)>($crate::sql::RUN_FAILED_STEPS)
                    .bind(run_id)
                    .fetch_all(&mut **self)
                    .await?)
            }
            async fn run_finish(
                &mut self,
                run_id: &str,
                status: &str,
                failure: Option<&str>,
                now: i64,
            ) -> $crate::error::StoreResult<bool> {
                let done = sqlx::query::<$db>($crate::sql::RUN_FINISH)
                    .bind(run_id)
                    .bind(status)
                    .bind(failure)
                    .bind(now)
                    .execute(&mut **self)
                    .await?;
                Ok(done.rows_affected() == 1)
            }
            async fn run_input(&mut self, run_id: &str) -> $crate::error::StoreResult<Option<String>> {
                Ok(sqlx::query_scalar::<$db, String>($crate::sql::RUN_INPUT)
                    .bind(run_id)
                    .fetch_optional(&mut **self)
                    .await?)
            }
            async fn run_cancel(&mut self, run_id: &str, now: i64) -> $crate::error::StoreResult<bool> {
                let done =
                    sqlx::query::<$db>($crate::sql::RUN_CANCEL).bind(run_id).bind(now).execute(&mut **self).await?;
                Ok(done.rows_affected() == 1)
            }
            async fn steps_cancel(&mut self, run_id: &str, now: i64) -> $crate::error::StoreResult<Vec<(String, i64)>> {
                let mut rows = sqlx::query_as::<$db, (String, i64, i64)>($crate::sql::STEPS_CANCEL)
                    .bind(run_id)
                    .bind(now)
                    .fetch_all(&mut **self)
                    .await?;
                // `RETURNING` gives rows in no particular order.
                rows.sort_by_key(|(_, _, position)| *position);
                Ok(rows.into_iter().map(|(step_id, attempt, _)| (step_id, attempt)).collect())
            }
            async fn attempts_cancel(&mut self, run_id: &str, now: i64) -> $crate::error::StoreResult<()> {
                sqlx::query::<$db>($crate::sql::ATTEMPTS_CANCEL).bind(run_id).bind(now).execute(&mut **self).await?;
                sqlx::query::<$db>($crate::sql::WAITS_CANCEL).bind(run_id).execute(&mut **self).await?;
                Ok(())
            }
            async fn step_operator(
                &mut self,
                m: &$crate::rows::StepMoved<'_>,
                now: i64,
            ) -> $crate::error::StoreResult<bool> {
                let done = sqlx::query::<$db>($crate::sql::STEP_OPERATOR)
                    .bind(m.run_id)
                    .bind(m.step_id)
                    .bind(m.from.as_str())
                    .bind(m.to.as_str())
                    .bind(m.available_at)
                    .bind(m.finished_at)
                    .bind(now)
                    .execute(&mut **self)
                    .await?;
                Ok(done.rows_affected() == 1)
            }
        }
    };
}

pub(crate) use impl_step_tx;
