//! Statements of durable waiting (schedules, approval deadlines, event waits) as one trait, [`WaitTx`],
//! implemented for both backends' transactions by [`impl_wait_tx!`]. Same SQL on both (`$N` parameters); the only
//! dialect difference is [`WaitTx::lock_event_name`] (a PostgreSQL advisory lock; SQLite already serialises
//! writers with `BEGIN IMMEDIATE`). Each statement says what it locks and which index serves it.

use std::future::Future;

use cairn_core::event::EventKind;
use cairn_core::schedule::TickOutcome;

use crate::error::StoreResult;
use crate::tx::StepTx;

/// Claim a due tick: move the schedule's next fire time on, fenced on the value read and on not paused. Locks the
/// schedule row, so of two orchestrators handling the same tick exactly one sees a row updated. Index: PK.
pub(crate) const SCHEDULE_ADVANCE: &str = "UPDATE schedules SET next_fire_at = $3, updated_at = $4 \
     WHERE id = $1 AND next_fire_at = $2 AND paused = 0";

/// Lock a schedule (a "run now" against a tick pass of the same schedule). Index: PK.
pub(crate) const SCHEDULE_LOCK: &str = "UPDATE schedules SET updated_at = $2 WHERE id = $1";

/// Record the last started run. Index: PK.
pub(crate) const SCHEDULE_LAST_RUN: &str =
    "UPDATE schedules SET last_fire_at = $2, last_run_id = $3, updated_at = $4 WHERE id = $1";

/// Record a tick; a second insert of the same (schedule, nominal instant) changes nothing. Index: PK.
pub(crate) const TICK_INSERT: &str = "INSERT INTO schedule_ticks (schedule_id, fire_at, run_id, outcome, detail, \
     created_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (schedule_id, fire_at) DO NOTHING";

/// Open runs started by a schedule. Index: `schedule_ticks` PK prefix, then `runs` PK.
pub(crate) const SCHEDULE_OPEN_RUNS: &str = "SELECT t.run_id FROM schedule_ticks t JOIN runs r ON r.id = t.run_id \
     WHERE t.schedule_id = $1 AND (r.status IN ('pending', 'running', 'paused')) IS TRUE ORDER BY t.fire_at";

/// Approvals whose deadline passed, except in paused runs (their deadlines apply on resume). Index:
/// `steps_approval_idx`.
pub(crate) const APPROVALS_DUE: &str = concat!(
    "SELECT run_id, step_id, approval, not_before_at, available_at FROM steps \
     WHERE status = 'waiting_approval' AND available_at <= $1 AND ",
    crate::sql::unpaused!(),
    " ORDER BY available_at LIMIT $2 + 0"
);

/// One step's approval state. Index: `steps` PK.
pub(crate) const APPROVAL_ROW: &str = "SELECT run_id, step_id, approval, not_before_at, available_at FROM steps \
     WHERE run_id = $1 AND step_id = $2 AND (status = 'waiting_approval') IS TRUE";

/// Decide a waiting approval. `$8 = 1`: only before the deadline (a decision by a person); `$8 = 0`: only at or
/// after it (the timeout). Locks the step row; fenced on the status. Index: `steps` PK.
pub(crate) const APPROVAL_DECIDE: &str = "UPDATE steps SET status = $3, available_at = $4, error = $5, \
     finished_at = $6, updated_at = $7 WHERE run_id = $1 AND step_id = $2 AND (status = 'waiting_approval') IS TRUE \
     AND ((CAST($8 AS BIGINT) = 1 AND (available_at IS NULL OR available_at > $7)) \
       OR (CAST($8 AS BIGINT) = 0 AND available_at <= $7))";

/// Whether a step's approval timed out (its history holds an event of kind `$3`, `step_approval_timed_out`). Index: its run's prefix of `run_events_pkey`
/// (PostgreSQL) or of `run_events_run_idx` (SQLite).
pub(crate) const APPROVAL_TIMED_OUT: &str = "SELECT COUNT(*) FROM run_events WHERE run_id = $1 AND step_id = $2 \
     AND kind = $3";

/// Store an external event, with the caller's dedupe id if any. Index: PK, `events_in_dedupe_idx`.
pub(crate) const EVENT_INSERT: &str =
    "INSERT INTO events_in (id, name, key, payload, received_at, dedupe_id) VALUES ($1, $2, $3, $4, $5, $6)";

/// The stored event of a name with a caller's dedupe id. Index: `events_in_dedupe_idx`.
pub(crate) const EVENT_BY_DEDUPE_ID: &str = "SELECT id FROM events_in WHERE name = $1 AND dedupe_id = $2";

/// Events of a name (and key, when given) received since `$2`, oldest first. Index: `events_in_name_idx`.
pub(crate) const EVENTS_SINCE: &str = "SELECT id, name, key, payload, received_at FROM events_in \
     WHERE name = $1 AND received_at >= $2 AND (CAST($3 AS TEXT) IS NULL OR key = CAST($3 AS TEXT)) \
     ORDER BY received_at, id LIMIT $4 + 0";

/// Waits for an event name. Index: `event_waits_name_idx`.
pub(crate) const WAITS_FOR: &str = "SELECT run_id, step_id, attempt, name, key, filter, since_at, deadline_at, \
     on_timeout, timeout_output FROM event_waits WHERE name = $1 ORDER BY created_at, run_id, step_id";

/// Waits whose deadline passed, except in paused runs (their deadlines apply on resume). Index:
/// `event_waits_deadline_idx`.
pub(crate) const WAITS_DUE: &str = concat!(
    "SELECT run_id, step_id, attempt, name, key, filter, since_at, deadline_at, \
     on_timeout, timeout_output FROM event_waits WHERE deadline_at <= $1 AND ",
    crate::sql::unpaused!(),
    " ORDER BY deadline_at LIMIT $2 + 0"
);

/// Start waiting. Index: PK (a re-run attempt replaces the row of the previous one).
pub(crate) const WAIT_INSERT: &str = "INSERT INTO event_waits (run_id, step_id, attempt, name, key, filter, \
     since_at, deadline_at, on_timeout, timeout_output, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
     ON CONFLICT (run_id, step_id) DO UPDATE SET attempt = excluded.attempt, name = excluded.name, key = excluded.key, \
     filter = excluded.filter, since_at = excluded.since_at, deadline_at = excluded.deadline_at, \
     on_timeout = excluded.on_timeout, timeout_output = excluded.timeout_output, created_at = excluded.created_at";

/// Stop waiting. Index: PK.
pub(crate) const WAIT_DELETE: &str = "DELETE FROM event_waits WHERE run_id = $1 AND step_id = $2 AND attempt = $3";

/// Hand a claimed `event.wait` step from the lease machinery to the wait: no lease expiry (the reaper leaves it
/// alone), the wait deadline as the attempt deadline. Fenced on attempt and status. Index: `steps` PK.
pub(crate) const STEP_WAIT_ARM: &str = "UPDATE steps SET lease_expires_at = NULL, deadline_at = $4 \
     WHERE run_id = $1 AND step_id = $2 AND attempt = $3 AND (status = 'running') IS TRUE";

/// A step awaiting an approval, as read for a decision or a timeout.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct ApprovalRow {
    pub run_id: String,
    pub step_id: String,
    pub approval: Option<String>,
    pub not_before_at: Option<i64>,
    pub available_at: Option<i64>,
}

/// A stored external event.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct EventInRow {
    pub id: String,
    pub name: String,
    pub key: Option<String>,
    pub payload: String,
    pub received_at: i64,
}

/// A waiting `event.wait` step.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct WaitRow {
    pub run_id: String,
    pub step_id: String,
    pub attempt: i64,
    pub name: String,
    pub key: Option<String>,
    pub filter: Option<String>,
    pub since_at: i64,
    pub deadline_at: Option<i64>,
    pub on_timeout: String,
    pub timeout_output: Option<String>,
}

/// A tick to record.
#[derive(Debug, Clone)]
pub(crate) struct TickInsert<'a> {
    pub schedule_id: &'a str,
    pub fire_at: i64,
    pub run_id: Option<&'a str>,
    pub outcome: TickOutcome,
    pub detail: Option<&'a str>,
}

/// A decision on a waiting approval.
#[derive(Debug, Clone)]
pub(crate) struct ApprovalDecide<'a> {
    pub run_id: &'a str,
    pub step_id: &'a str,
    pub status: &'static str,
    pub available_at: Option<i64>,
    pub error: Option<&'a str>,
    /// True: a person's decision, accepted only before the deadline; false: the timeout, only after it.
    pub before_deadline: bool,
}

/// Statements of durable waiting. Every method runs inside the caller's transaction.
pub(crate) trait WaitTx: StepTx {
    fn schedule_advance(
        &mut self,
        id: &str,
        expected: i64,
        next: Option<i64>,
        now: i64,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    fn schedule_last_run(
        &mut self,
        id: &str,
        fire_at: i64,
        run_id: &str,
        now: i64,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    fn tick_insert(&mut self, tick: &TickInsert<'_>, now: i64) -> impl Future<Output = StoreResult<bool>> + Send;
    fn schedule_open_runs(&mut self, id: &str) -> impl Future<Output = StoreResult<Vec<String>>> + Send;
    /// Locks the schedule ([`SCHEDULE_LOCK`]); false when it does not exist.
    fn schedule_lock(&mut self, id: &str, now: i64) -> impl Future<Output = StoreResult<bool>> + Send;
    fn approvals_due(&mut self, now: i64, limit: i64) -> impl Future<Output = StoreResult<Vec<ApprovalRow>>> + Send;
    fn approval_row(
        &mut self,
        run_id: &str,
        step_id: &str,
    ) -> impl Future<Output = StoreResult<Option<ApprovalRow>>> + Send;
    fn approval_decide(&mut self, d: &ApprovalDecide<'_>, now: i64) -> impl Future<Output = StoreResult<bool>> + Send;
    fn approval_timed_out(&mut self, run_id: &str, step_id: &str) -> impl Future<Output = StoreResult<bool>> + Send;
    /// Serialises event delivery and wait start for one event name (PostgreSQL advisory lock until commit).
    fn lock_event_name(&mut self, name: &str) -> impl Future<Output = StoreResult<()>> + Send;
    fn event_insert(
        &mut self,
        row: &EventInRow,
        dedupe_id: Option<&str>,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    fn event_by_dedupe_id(
        &mut self,
        name: &str,
        dedupe_id: &str,
    ) -> impl Future<Output = StoreResult<Option<String>>> + Send;
    fn events_since(
        &mut self,
        name: &str,
        since: i64,
        key: Option<&str>,
        limit: i64,
    ) -> impl Future<Output = StoreResult<Vec<EventInRow>>> + Send;
    fn waits_for(&mut self, name: &str) -> impl Future<Output = StoreResult<Vec<WaitRow>>> + Send;
    fn waits_due(&mut self, now: i64, limit: i64) -> impl Future<Output = StoreResult<Vec<WaitRow>>> + Send;
    fn wait_insert(&mut self, row: &WaitRow, now: i64) -> impl Future<Output = StoreResult<()>> + Send;
    fn wait_delete(
        &mut self,
        run_id: &str,
        step_id: &str,
        attempt: i64,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    fn step_wait_arm(
        &mut self,
        run_id: &str,
        step_id: &str,
        attempt: i64,
        deadline: Option<i64>,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
}

/// Implements [`WaitTx`] for `sqlx::Transaction<'_, $db>`; `$lock` is the SQL of [`WaitTx::lock_event_name`]
/// (`None`: no statement).
macro_rules! impl_wait_tx {
    ($db:ty, $lock:expr) => {
        impl WaitTx for sqlx::Transaction<'_, $db> {
            async fn schedule_advance(
                &mut self,
                id: &str,
                expected: i64,
                next: Option<i64>,
                now: i64,
            ) -> StoreResult<bool> {
                let done = sqlx::query::<$db>(SCHEDULE_ADVANCE)
                    .bind(id)
                    .bind(expected)
                    .bind(next)
                    .bind(now)
                    .execute(&mut **self)
                    .await?;
                Ok(done.rows_affected() == 1)
            }
            async fn schedule_last_run(&mut self, id: &str, fire_at: i64, run_id: &str, now: i64) -> StoreResult<()> {
                sqlx::query::<$db>(SCHEDULE_LAST_RUN)
                    .bind(id)
                    .bind(fire_at)
                    .bind(run_id)
                    .bind(now)
                    .execute(&mut **self)
                    .await?;
                Ok(())
            }
            async fn tick_insert(&mut self, t: &TickInsert<'_>, now: i64) -> StoreResult<bool> {
                let done = sqlx::query::<$db>(TICK_INSERT)
                    .bind(t.schedule_id)
                    .bind(t.fire_at)
                    .bind(t.run_id)
                    .bind(t.outcome.as_str())
                    .bind(t.detail)
                    .bind(now)
                    .execute(&mut **self)
                    .await?;
                Ok(done.rows_affected() == 1)
            }
            async fn schedule_lock(&mut self, id: &str, now: i64) -> StoreResult<bool> {
                let done = sqlx::query::<$db>(SCHEDULE_LOCK).bind(id).bind(now).execute(&mut **self).await?;
                Ok(done.rows_affected() == 1)
            }
            async fn schedule_open_runs(&mut self, id: &str) -> StoreResult<Vec<String>> {
                Ok(sqlx::query_scalar::<$db, String>(SCHEDULE_OPEN_RUNS).bind(id).fetch_all(&mut **self).await?)
            }
            async fn approvals_due(&mut self, now: i64, limit: i64) -> StoreResult<Vec<ApprovalRow>> {
                Ok(sqlx::query_as::<$db, ApprovalRow>(APPROVALS_DUE)
                    .bind(now)
                    .bind(limit)
                    .fetch_all(&mut **self)
                    .await?)
            }
            async fn approval_row(&mut self, run_id: &str, step_id: &str) -> StoreResult<Option<ApprovalRow>> {
                Ok(sqlx::query_as::<$db, ApprovalRow>(APPROVAL_ROW)
                    .bind(run_id)
                    .bind(step_id)
                    .fetch_optional(&mut **self)
                    .await?)
            }
            async fn approval_decide(&mut self, d: &ApprovalDecide<'_>, now: i64) -> StoreResult<bool> {
                let finished_at = matches!(d.status, "failed" | "skipped").then_some(now);
                let done = sqlx::query::<$db>(APPROVAL_DECIDE)
                    .bind(d.run_id)
                    .bind(d.step_id)
                    .bind(d.status)
                    .bind(d.available_at)
                    .bind(d.error)
                    .bind(finished_at)
                    .bind(now)
                    .bind(i64::from(d.before_deadline))
                    .execute(&mut **self)
                    .await?;
                Ok(done.rows_affected() == 1)
            }
            async fn approval_timed_out(&mut self, run_id: &str, step_id: &str) -> StoreResult<bool> {
                let n = sqlx::query_scalar::<$db, i64>(APPROVAL_TIMED_OUT)
                    .bind(run_id)
                    .bind(step_id)
                    .bind(EventKind::StepApprovalTimedOut.as_str())
                    .fetch_one(&mut **self)
                    .await?;
                Ok(n > 0)
            }
            async fn lock_event_name(&mut self, name: &str) -> StoreResult<()> {
                let lock: Option<&str> = $lock;
                if let Some(sql) = lock {
                    sqlx::query::<$db>(sql).bind(name).execute(&mut **self).await?;
                }
                Ok(())
            }
            async fn event_insert(&mut self, e: &EventInRow, dedupe_id: Option<&str>) -> StoreResult<()> {
                sqlx::query::<$db>(EVENT_INSERT)
                    .bind(&e.id)
                    .bind(&e.name)
                    .bind(e.key.as_deref())
                    .bind(&e.payload)
                    .bind(e.received_at)
                    .bind(dedupe_id)
                    .execute(&mut **self)
                    .await?;
                Ok(())
            }
            async fn event_by_dedupe_id(&mut self, name: &str, dedupe_id: &str) -> StoreResult<Option<String>> {
                Ok(sqlx::query_scalar::<$db, String>(EVENT_BY_DEDUPE_ID)
                    .bind(name)
                    .bind(dedupe_id)
                    .fetch_optional(&mut **self)
                    .await?)
            }
            async fn events_since(
                &mut self,
                name: &str,
                since: i64,
                key: Option<&str>,
                limit: i64,
            ) -> StoreResult<Vec<EventInRow>> {
                Ok(sqlx::query_as::<$db, EventInRow>(EVENTS_SINCE)
                    .bind(name)
                    .bind(since)
                    .bind(key)
                    .bind(limit)
                    .fetch_all(&mut **self)
                    .await?)
            }
            async fn waits_for(&mut self, name: &str) -> StoreResult<Vec<WaitRow>> {
                Ok(sqlx::query_as::<$db, WaitRow>(WAITS_FOR).bind(name).fetch_all(&mut **self).await?)
            }
            async fn waits_due(&mut self, now: i64, limit: i64) -> StoreResult<Vec<WaitRow>> {
                Ok(sqlx::query_as::<$db, WaitRow>(WAITS_DUE).bind(now).bind(limit).fetch_all(&mut **self).await?)
            }
            async fn wait_insert(&mut self, w: &WaitRow, now: i64) -> StoreResult<()> {
                sqlx::query::<$db>(WAIT_INSERT)
                    .bind(&w.run_id)
                    .bind(&w.step_id)
                    .bind(w.attempt)
                    .bind(&w.name)
                    .bind(w.key.as_deref())
                    .bind(w.filter.as_deref())
                    .bind(w.since_at)
                    .bind(w.deadline_at)
                    .bind(&w.on_timeout)
                    .bind(w.timeout_output.as_deref())
                    .bind(now)
                    .execute(&mut **self)
                    .await?;
                Ok(())
            }
            async fn wait_delete(&mut self, run_id: &str, step_id: &str, attempt: i64) -> StoreResult<()> {
                sqlx::query::<$db>(WAIT_DELETE).bind(run_id).bind(step_id).bind(attempt).execute(&mut **self).await?;
                Ok(())
            }
            async fn step_wait_arm(
                &mut self,
                run_id: &str,
                step_id: &str,
                attempt: i64,
                deadline: Option<i64>,
            ) -> StoreResult<bool> {
                let done = sqlx::query::<$db>(STEP_WAIT_ARM)
                    .bind(run_id)
                    .bind(step_id)
                    .bind(attempt)
                    .bind(deadline)
                    .execute(&mut **self)
                    .await?;
                Ok(done.rows_affected() == 1)
            }
        }
    };
}

impl_wait_tx!(sqlx::Sqlite, None);
// `hashtext` maps the name to the advisory lock key; a collision only serialises two names, never wrongly.
impl_wait_tx!(sqlx::Postgres, Some("SELECT pg_advisory_xact_lock(hashtext($1))"));
