//! Statements that run final steps again ([`cairn_core::machine::reopen`]: an operator's retry of a failed step,
//! a redrive), as one trait, [`ReopenTx`], implemented for both backends' transactions by [`impl_reopen_tx!`].
//! Same SQL on both (`$N` parameters). Each statement says what it locks and which index serves it.

use std::future::Future;

use cairn_core::machine::{Reopened, StepsClosed};

use crate::error::StoreResult;
use crate::rows::ChildRow;

/// Lock a run and read what a reopening needs (status, cancel under way). Locks the run row first, so concurrent
/// completions of its steps wait. Index: `runs` PK.
pub(crate) const RUN_LOCK: &str = "UPDATE runs SET updated_at = $2 WHERE id = $1 RETURNING status, cancel_requested";

/// The run's steps in plan order: status, idempotent, and whether it was cancelled while an attempt ran (that
/// attempt closed by the cancel). Index: `steps` PK prefix, `attempts` PK.
pub(crate) const RUN_STEPS: &str = "SELECT s.step_id, s.status, s.idempotent, CAST(CASE WHEN EXISTS (SELECT 1 \
     FROM attempts a WHERE a.run_id = s.run_id AND a.step_id = s.step_id AND a.attempt = s.attempt \
     AND a.failure_code = 'cancelled') THEN 1 ELSE 0 END AS BIGINT) AS interrupted \
     FROM steps s WHERE s.run_id = $1 ORDER BY s.position";

/// A step of [`RUN_STEPS`].
pub(crate) type RunStepRow = (String, String, i64, i64);

/// A run's steps ([`RunStepRow`]) and its edges as `(parent, child)`.
pub(crate) type RunGraphRows = (Vec<RunStepRow>, Vec<(String, String)>);

/// The run's dependency edges. Index: `step_edges` PK prefix.
pub(crate) const RUN_EDGES: &str = "SELECT parent, child FROM step_edges WHERE run_id = $1";

/// Open a final step again as `$7` (`pending`, or `outcome_unknown`), waiting for `$3` dependencies; a target
/// (`$4 = 1`) starts a fresh attempt budget from the attempts it used. Fenced on the status it was read with.
/// Index: `steps` PK.
pub(crate) const STEP_REOPEN: &str = "UPDATE steps SET status = $7, pending_deps = $3, \
     attempt_base = CASE WHEN $4 = 1 THEN attempt ELSE attempt_base END, output = NULL, available_at = NULL, \
     finished_at = NULL, updated_at = $6 WHERE run_id = $1 AND step_id = $2 AND status = $5";

/// A pending step waits for `$3` more dependencies. Index: `steps` PK.
pub(crate) const STEP_WAIT_LONGER: &str = "UPDATE steps SET pending_deps = pending_deps + $3, updated_at = $4 \
     WHERE run_id = $1 AND step_id = $2 AND status = 'pending'";

/// Replace a step's args (an operator's repair); returns its new revision. Index: `steps` PK.
pub(crate) const STEP_ARGS_REVISE: &str = "UPDATE steps SET args = $3, args_revision = args_revision + 1, \
     updated_at = $4 WHERE run_id = $1 AND step_id = $2 RETURNING args_revision";

/// A step's args revision. Index: `steps` PK.
pub(crate) const STEP_ARGS_REVISION: &str = "SELECT args_revision FROM steps WHERE run_id = $1 AND step_id = $2";

/// The run takes back steps that open again: `$2` (the status it goes on with), `$3` more open steps, `$4` fewer
/// failed ones; no longer finished or cancelled. Index: `runs` PK.
pub(crate) const RUN_REOPEN: &str = "UPDATE runs SET status = $2, open_steps = open_steps + $3, \
     failed_steps = failed_steps - $4, cancel_requested = 0, failure = NULL, finished_at = NULL, updated_at = $5 \
     WHERE id = $1";

/// Set a run's status (a pause or a resume, decided by the caller from the locked row). Index: `runs` PK.
pub(crate) const RUN_STATUS_SET: &str = "UPDATE runs SET status = $2, updated_at = $3 WHERE id = $1";

/// A pending step as a release returns it, for the decision. Index: `steps` PK.
pub(crate) const STEP_CANDIDATE: &str = "SELECT step_id, dep_count, pending_deps, trigger_rule, when_expr, approval, \
     not_before_at, status, available_at FROM steps WHERE run_id = $1 AND step_id = $2 AND status = 'pending'";

/// A rerun's run row: the old run's plan, input and context, `$3` open and `$4` failed steps, linked to it.
/// Index: `runs` PK.
pub(crate) const RUN_COPY: &str = "INSERT INTO runs (id, plan_id, status, input, context, step_count, open_steps, \
     failed_steps, rerun_of, created_at, updated_at, goal, goal_search, labels) SELECT $2, plan_id, 'pending', input, \
     context, step_count, $3, $4, id, $5, $5, goal, goal_search, labels FROM runs WHERE id = $1";

/// A rerun's labels and actions, as the old run's (`$1`), for the new run `$2` created at `$3`: the rerun is found
/// by the same filters. Index: `run_labels` and `run_actions` PK prefixes.
pub(crate) const LABELS_COPY: &str = "INSERT INTO run_labels (run_id, key, value, created_at) \
     SELECT $2, key, value, $3 FROM run_labels WHERE run_id = $1";
pub(crate) const ACTIONS_COPY: &str = "INSERT INTO run_actions (run_id, action, created_at) \
     SELECT $2, action, $3 FROM run_actions WHERE run_id = $1";

/// A rerun's steps as the old run left them (status, args, output, failure record; no attempt, lease or
/// checkpoint); those that run again are then reset ([`STEP_RESET`]). Index: `steps` PK prefix.
pub(crate) const STEPS_COPY: &str = "INSERT INTO steps (run_id, step_id, position, action, status, args, when_expr, \
     trigger_rule, idempotent, timeout_ms, heartbeat_timeout_ms, retry, approval, dep_count, pending_deps, \
     not_before_at, not_before_local, output, error, finished_at, updated_at, child_count, successor_action, \
     starts_itself, args_revision) SELECT $2, step_id, position, action, status, args, when_expr, trigger_rule, \
     idempotent, timeout_ms, heartbeat_timeout_ms, retry, approval, dep_count, 0, not_before_at, not_before_local, \
     output, error, finished_at, $3, child_count, successor_action, starts_itself, args_revision \
     FROM steps WHERE run_id = $1";

/// A rerun's dependency edges. Index: `step_edges` PK prefix.
pub(crate) const EDGES_COPY: &str =
    "INSERT INTO step_edges (run_id, parent, child) SELECT $2, parent, child FROM step_edges WHERE run_id = $1";

/// A step of a rerun that runs again: `pending`, waiting for `$3` dependencies. Index: `steps` PK.
pub(crate) const STEP_RESET: &str = "UPDATE steps SET status = 'pending', pending_deps = $3, output = NULL, \
     error = NULL, finished_at = NULL, updated_at = $4 WHERE run_id = $1 AND step_id = $2";

/// Reopening statements. Every method runs inside the caller's transaction.
pub(crate) trait ReopenTx: Send {
    /// Locks the run; its `(status, cancel_requested)`, `None` when it does not exist.
    fn run_lock(&mut self, run_id: &str, now: i64) -> impl Future<Output = StoreResult<Option<(String, i64)>>> + Send;
    /// The run's steps in plan order ([`RUN_STEPS`]) and its edges as `(parent, child)`.
    fn run_graph(&mut self, run_id: &str) -> impl Future<Output = StoreResult<RunGraphRows>> + Send;
    /// Opens `step` again ([`STEP_REOPEN`]); false when its status changed since it was read.
    fn step_reopen(
        &mut self,
        run_id: &str,
        step: &Reopened,
        now: i64,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    /// A pending step waits for `more` dependencies.
    fn step_wait_longer(
        &mut self,
        run_id: &str,
        step_id: &str,
        more: i64,
        now: i64,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// Replaces a step's args with `args` (JSON text); its new revision, `None` when the step does not exist.
    fn step_args_revise(
        &mut self,
        run_id: &str,
        step_id: &str,
        args: &str,
        now: i64,
    ) -> impl Future<Output = StoreResult<Option<i64>>> + Send;
    /// A step's args revision (0 when it has its plan's args or does not exist).
    fn step_args_revision(&mut self, run_id: &str, step_id: &str) -> impl Future<Output = StoreResult<i64>> + Send;
    /// The run goes on as `status` with the reopened steps counted open again.
    fn run_reopen(
        &mut self,
        run_id: &str,
        status: &str,
        opened: StepsClosed,
        now: i64,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// Copies run `old` into a new run `new` ([`RUN_COPY`], [`STEPS_COPY`], [`EDGES_COPY`], [`LABELS_COPY`],
    /// [`ACTIONS_COPY`]) with these counters.
    fn run_copy(
        &mut self,
        old: &str,
        new: &str,
        counters: (i64, i64),
        now: i64,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// Resets a step of a rerun ([`STEP_RESET`]).
    fn step_reset(
        &mut self,
        run_id: &str,
        step_id: &str,
        pending_deps: i64,
        now: i64,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// Sets the locked run's status ([`RUN_STATUS_SET`]).
    fn run_status_set(&mut self, run_id: &str, status: &str, now: i64) -> impl Future<Output = StoreResult<()>> + Send;
    /// A pending step as a release returns it, `None` when it is not pending.
    fn step_candidate(
        &mut self,
        run_id: &str,
        step_id: &str,
    ) -> impl Future<Output = StoreResult<Option<ChildRow>>> + Send;
}

/// Implements [`ReopenTx`] for `sqlx::Transaction<'_, $db>`.
macro_rules! impl_reopen_tx {
    ($db:ty) => {
        impl ReopenTx for sqlx::Transaction<'_, $db> {
            async fn run_lock(&mut self, run_id: &str, now: i64) -> StoreResult<Option<(String, i64)>> {
                Ok(sqlx::query_as::<$db, (String, i64)>(RUN_LOCK)
                    .bind(run_id)
                    .bind(now)
                    .fetch_optional(&mut **self)
                    .await?)
            }
            async fn run_graph(&mut self, run_id: &str) -> StoreResult<RunGraphRows> {
                let steps = sqlx::query_as::<$db, RunStepRow>(RUN_STEPS).bind(run_id).fetch_all(&mut **self).await?;
                let edges =
                    sqlx::query_as::<$db, (String, String)>(RUN_EDGES).bind(run_id).fetch_all(&mut **self).await?;
                Ok((steps, edges))
            }
            async fn step_reopen(&mut self, run_id: &str, step: &Reopened, now: i64) -> StoreResult<bool> {
                let done = sqlx::query::<$db>(STEP_REOPEN)
                    .bind(run_id)
                    .bind(&step.step)
                    .bind(step.pending_deps)
                    .bind(i64::from(step.target))
                    .bind(step.was.as_str())
                    .bind(now)
                    .bind(step.to.as_str())
                    .execute(&mut **self)
                    .await?;
                Ok(done.rows_affected() == 1)
            }
            async fn step_wait_longer(&mut self, run_id: &str, step_id: &str, more: i64, now: i64) -> StoreResult<()> {
                sqlx::query::<$db>(STEP_WAIT_LONGER)
                    .bind(run_id)
                    .bind(step_id)
                    .bind(more)
                    .bind(now)
                    .execute(&mut **self)
                    .await?;
                Ok(())
            }
            async fn step_args_revise(
                &mut self,
                run_id: &str,
                step_id: &str,
                args: &str,
                now: i64,
            ) -> StoreResult<Option<i64>> {
                Ok(sqlx::query_scalar::<$db, i64>(STEP_ARGS_REVISE)
                    .bind(run_id)
                    .bind(step_id)
                    .bind(args)
                    .bind(now)
                    .fetch_optional(&mut **self)
                    .await?)
            }
            async fn step_args_revision(&mut self, run_id: &str, step_id: &str) -> StoreResult<i64> {
                Ok(sqlx::query_scalar::<$db, i64>(STEP_ARGS_REVISION)
                    .bind(run_id)
                    .bind(step_id)
                    .fetch_optional(&mut **self)
                    .await?
                    .unwrap_or(0))
            }
            async fn run_reopen(
                &mut self,
                run_id: &str,
                status: &str,
                opened: StepsClosed,
                now: i64,
            ) -> StoreResult<()> {
                sqlx::query::<$db>(RUN_REOPEN)
                    .bind(run_id)
                    .bind(status)
                    .bind(opened.steps)
                    .bind(opened.failed)
                    .bind(now)
                    .execute(&mut **self)
                    .await?;
                Ok(())
            }
            async fn run_copy(&mut self, old: &str, new: &str, counters: (i64, i64), now: i64) -> StoreResult<()> {
                let (open, failed) = counters;
                sqlx::query::<$db>(RUN_COPY)
                    .bind(old)
                    .bind(new)
                    .bind(open)
                    .bind(failed)
                    .bind(now)
                    .execute(&mut **self)
                    .await?;
                sqlx::query::<$db>(STEPS_COPY).bind(old).bind(new).bind(now).execute(&mut **self).await?;
                sqlx::query::<$db>(EDGES_COPY).bind(old).bind(new).execute(&mut **self).await?;
                sqlx::query::<$db>(LABELS_COPY).bind(old).bind(new).bind(now).execute(&mut **self).await?;
                sqlx::query::<$db>(ACTIONS_COPY).bind(old).bind(new).bind(now).execute(&mut **self).await?;
                Ok(())
            }
            async fn step_reset(
                &mut self,
                run_id: &str,
                step_id: &str,
                pending_deps: i64,
                now: i64,
            ) -> StoreResult<()> {
                sqlx::query::<$db>(STEP_RESET)
                    .bind(run_id)
                    .bind(step_id)
                    .bind(pending_deps)
                    .bind(now)
                    .execute(&mut **self)
                    .await?;
                Ok(())
            }
            async fn run_status_set(&mut self, run_id: &str, status: &str, now: i64) -> StoreResult<()> {
                sqlx::query::<$db>(RUN_STATUS_SET).bind(run_id).bind(status).bind(now).execute(&mut **self).await?;
                Ok(())
            }
            async fn step_candidate(&mut self, run_id: &str, step_id: &str) -> StoreResult<Option<ChildRow>> {
                Ok(sqlx::query_as::<$db, ChildRow>(STEP_CANDIDATE)
                    .bind(run_id)
                    .bind(step_id)
                    .fetch_optional(&mut **self)
                    .await?)
            }
        }
    };
}

impl_reopen_tx!(sqlx::Sqlite);
impl_reopen_tx!(sqlx::Postgres);
