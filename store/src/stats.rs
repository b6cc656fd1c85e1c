//! Aggregate reads for the orchestrator's `/metrics`: counts by status, attempts and failures by action, the
//! ready queue, leases and due timers. Same SQL on both backends; nothing here locks (plain reads at the
//! backend's default isolation, so the numbers of one scrape may straddle a concurrent commit).
//!
//! Cost: the per-status and per-action counts scan their tables (`runs` through `runs_status_created_idx`,
//! `steps` and `attempts` in full), which is fine for a scrape every few seconds over the retained history;
//! the queue, lease and timer figures read only the partial indexes of ready and running steps.

use std::fmt::Debug;

use cairn_core::state::{AttemptStatus, RunStatus, StepStatus};
use serde::de::DeserializeOwned;

use crate::Store;
use crate::error::StoreResult;
use crate::rows::name;

/// Runs by status. Index: `runs_status_created_idx` (index-only).
const RUNS_BY_STATUS: &str = "SELECT status, COUNT(*) FROM runs GROUP BY status";

/// Steps by status. Scans `steps`.
const STEPS_BY_STATUS: &str = "SELECT status, COUNT(*) FROM steps GROUP BY status";

/// Attempts ever started, by action and attempt status. Scans `attempts`.
const ATTEMPTS_BY_ACTION: &str = "SELECT action, status, COUNT(*) FROM attempts GROUP BY action, status";

/// Failed attempts by action and failure code. Scans `attempts`.
const FAILURES_BY_CODE: &str = "SELECT action, failure_code, COUNT(*) FROM attempts \
     WHERE failure_code IS NOT NULL GROUP BY action, failure_code";

/// Ready steps due at `$1` and the earliest due time among them. Index: `steps_ready_idx`.
const READY_QUEUE: &str = "SELECT COUNT(*), MIN(available_at) FROM steps WHERE status = 'ready' AND available_at <= $1";

/// Running steps whose lease has not expired at `$1`. Index: `steps_lease_idx`.
const ACTIVE_LEASES: &str = "SELECT COUNT(*) FROM steps WHERE status = 'running' AND lease_expires_at > $1";

/// Ready steps whose `not_before` timer is due at `$1` but that nobody has claimed yet. Index:
/// `steps_ready_idx` (partial on `status = 'ready'`), then a filter on `not_before_at`.
const TIMERS_DUE: &str = "SELECT COUNT(*) FROM steps WHERE status = 'ready' AND available_at <= $1 \
     AND not_before_at IS NOT NULL AND not_before_at <= $1";

/// A count for one label value (a run's or a step's status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusCount<S> {
    /// The status.
    pub status: S,
    /// How many rows have it.
    pub count: i64,
}

/// Attempts of one action in one attempt status (`running`, `succeeded`, `failed`, `cancelled`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptCount {
    /// Action name.
    pub action: String,
    /// Attempt status.
    pub status: AttemptStatus,
    /// How many attempts.
    pub count: i64,
}

/// Failed attempts of one action with one failure code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureCount {
    /// Action name.
    pub action: String,
    /// Failure code (`timeout`, `action_error`, …).
    pub code: String,
    /// How many attempts failed with it.
    pub count: i64,
}

/// What `/metrics` reads from the database at one instant `now`. Times are epoch milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Runs by status.
    pub runs: Vec<StatusCount<RunStatus>>,
    /// Steps by status.
    pub steps: Vec<StatusCount<StepStatus>>,
    /// Attempts by action and attempt status (monotonic while history is retained).
    pub attempts: Vec<AttemptCount>,
    /// Failed attempts by action and failure code (monotonic while history is retained).
    pub failures: Vec<FailureCount>,
    /// Ready steps due now: the dispatch queue.
    pub queue_depth: i64,
    /// The earliest `available_at` among the due ready steps (`None` when the queue is empty).
    pub oldest_ready_due_ms: Option<i64>,
    /// Running steps with a live lease.
    pub active_leases: i64,
    /// Ready steps whose `not_before` timer is due but that are not claimed yet.
    pub timers_due: i64,
}

/// Runs `$query` (a `query_as` over `$row`) with `$binds` on whichever pool the store has.
macro_rules! fetch {
    ($store:expr, $method:ident, $row:ty, $sql:expr $(, $bind:expr)*) => {
        match $store {
            Store::Sqlite(pool) => sqlx::query_as::<sqlx::Sqlite, $row>($sql)$(.bind($bind))*.$method(pool).await?,
            Store::Postgres(pool) => crate::postgres::deadline::on_connection(pool, async |connection| {
                sqlx::query_as::<sqlx::Postgres, $row>($sql)$(.bind($bind))*.$method(connection).await
            })
            .await?,
        }
    };
}

impl Store {
    /// Counts for `/metrics` as of `now_ms` (see [`StoreStats`]). Seven read statements, no transaction.
    ///
    /// # Errors
    /// [`crate::StoreError::Database`] (retryable: scrape again).
    pub async fn stats(&self, now_ms: i64) -> StoreResult<StoreStats> {
        let runs: Vec<(String, i64)> = fetch!(self, fetch_all, (String, i64), RUNS_BY_STATUS);
        let steps: Vec<(String, i64)> = fetch!(self, fetch_all, (String, i64), STEPS_BY_STATUS);
        let attempts: Vec<(String, String, i64)> = fetch!(self, fetch_all, (String, String, i64), ATTEMPTS_BY_ACTION);
        let failures: Vec<(String, String, i64)> = fetch!(self, fetch_all, (String, String, i64), FAILURES_BY_CODE);
        let (queue_depth, oldest_ready_due_ms): (i64, Option<i64>) =
            fetch!(self, fetch_one, (i64, Option<i64>), READY_QUEUE, now_ms);
        let (active_leases,): (i64,) = fetch!(self, fetch_one, (i64,), ACTIVE_LEASES, now_ms);
        let (timers_due,): (i64,) = fetch!(self, fetch_one, (i64,), TIMERS_DUE, now_ms);
        Ok(StoreStats {
            runs: counts("runs.status", runs)?,
            steps: counts("steps.status", steps)?,
            attempts: attempts
                .into_iter()
                .map(|(action, status, count)| {
                    Ok(AttemptCount { action, status: name("attempts.status", &status)?, count })
                })
                .collect::<StoreResult<_>>()?,
            failures: failures.into_iter().map(|(action, code, count)| FailureCount { action, code, count }).collect(),
            queue_depth,
            oldest_ready_due_ms,
            active_leases,
            timers_due,
        })
    }
}

/// Decodes `(status, count)` rows of `column`.
fn counts<S: DeserializeOwned + Debug>(
    column: &'static str,
    rows: Vec<(String, i64)>,
) -> StoreResult<Vec<StatusCount<S>>> {
    rows.into_iter().map(|(status, count)| Ok(StatusCount { status: name(column, &status)?, count })).collect()
}
