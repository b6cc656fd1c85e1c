//! Finding runs: [`RunFilter`] (what `GET /v1/runs` and the bulk operations filter on), keyset pages newest
//! first ([`RunCursor`]), and the runs that need an operator's attention.
//!
//! Every filter is served by an index on both backends; [`crate::run_query`] chooses which one drives a listing
//! and writes the statements.

use std::fmt;
use std::str::FromStr;

use cairn_core::state::RunStatus;
use sqlx::Connection;

use crate::Store;
use crate::error::StoreResult;
use crate::model::RunSummary;
use crate::read::run_summary;
use crate::rows::RunRow;
use crate::run_query::{
    Bind, Driver, Statement, attention_steps, choose, count_statement, estimates, obvious, page_statement,
};

/// A step that is due but not taken this long (ms) is "waiting for a worker" and needs attention.
pub const WORKER_WAIT_MS: i64 = 60_000;

/// Which runs to list. Every field given must hold (AND); labels must all match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    /// Any of these statuses (none: any status).
    pub statuses: Vec<RunStatus>,
    /// Labels `(key, value)` the run carries, all of them.
    pub labels: Vec<(String, String)>,
    /// A case-insensitive substring of the goal.
    pub q: Option<String>,
    /// An action one of the run's steps uses.
    pub action: Option<String>,
    /// Created at or after (ms).
    pub created_after: Option<i64>,
    /// Created before (ms).
    pub created_before: Option<i64>,
    /// The run-level idempotency key.
    pub idempotency_key: Option<String>,
    /// Only runs that need attention as of this instant (ms): a step `outcome_unknown`, waiting for approval,
    /// ready again after a failed attempt (a retry in backoff or due), or due for [`WORKER_WAIT_MS`] and not taken.
    pub attention_at: Option<i64>,
}

/// Where a page of runs starts: after the run with this creation time and id (newest first). Its text form
/// (`next_cursor`) is `<created_at>.<id>`; clients treat it as opaque.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunCursor {
    /// The last listed run's creation time.
    pub created_at_ms: i64,
    /// The last listed run's id.
    pub run_id: String,
}

impl fmt::Display for RunCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.created_at_ms, self.run_id)
    }
}

/// A cursor that is not one [`RunCursor`] wrote.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`cursor` is not a cursor this API returned (`next_cursor`)")]
pub struct CursorError;

impl FromStr for RunCursor {
    type Err = CursorError;

    fn from_str(text: &str) -> Result<Self, CursorError> {
        let (at, id) = text.split_once('.').ok_or(CursorError)?;
        let created_at_ms = at.parse().map_err(|_| CursorError)?;
        if id.is_empty() || cairn_core::text::RUN_ID.check(id).is_err() {
            return Err(CursorError);
        }
        Ok(RunCursor { created_at_ms, run_id: id.to_owned() })
    }
}

/// Where a page starts: a cursor, or an offset into the filtered runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageStart {
    /// After this run.
    After(RunCursor),
    /// Skipping this many runs.
    Offset(i64),
}

/// One page of runs, newest first, and the cursor of the next page when there may be one.
#[derive(Debug, Clone, PartialEq)]
pub struct RunPage {
    /// The runs.
    pub runs: Vec<RunSummary>,
    /// Where the next page starts; `None` on the last page.
    pub next_cursor: Option<RunCursor>,
}

/// Why a step needs attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AttentionReason {
    /// A non-idempotent attempt ended ambiguously: retry, skip or fail it.
    OutcomeUnknown,
    /// Waiting for an approval.
    WaitingApproval,
    /// Ready again after a failed attempt: in backoff, or due.
    Retrying,
    /// Due for [`WORKER_WAIT_MS`] or more and not taken: no worker serves its action, or all are busy.
    WaitingForWorker,
}

/// A step that needs attention, and since when (its deadline or due time, when it has one).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AttentionStep {
    /// The run.
    pub run_id: String,
    /// The step.
    pub step_id: String,
    /// Why.
    pub reason: AttentionReason,
    /// For a ready step, when it is (or was) due; for an approval, its deadline.
    pub available_at_ms: Option<i64>,
}

/// Reads a listing of `$filter` on one connection: chooses the driver (counting the candidates when the filter
/// alone does not say), builds the statement with `$make(driver, sqlite)` and runs `$run` on it. PostgreSQL reads
/// in a read-only transaction whose planner settings keep the plan on the driver's index ([`PG_LISTING`]); the
/// trigram index, which only a bitmap scan reads, stays usable where the goal drives.
macro_rules! listing {
    ($store:expr, $filter:expr, $make:expr, |$st:ident: Statement, $db:ident, $conn:ident| $run:expr) => {
        match $store {
            Store::Sqlite(pool) => {
                #[allow(dead_code)]
                type $db = sqlx::Sqlite;
                let mut $conn = pool.acquire().await?;
                let driver = driver!($db, $conn, $filter, true);
                let $st = $make(driver, true);
                $run
            }
            Store::Postgres(pool) => {
                crate::postgres::deadline::on_connection(pool, async |connection| {
                    #[allow(dead_code)]
                    type $db = sqlx::Postgres;
                    let mut $conn = connection.begin_with(PG_LISTING).await?;
                    let driver = driver!($db, $conn, $filter, false);
                    if driver != Driver::Goal {
                        sqlx::query("SET LOCAL enable_bitmapscan = off").execute(&mut *$conn).await?;
                    }
                    let $st = $make(driver, false);
                    let out = $run;
                    $conn.commit().await?;
                    Ok::<_, crate::StoreError>(out)
                })
                .await?
            }
        }
    };
}

/// The driver of `$filter` ([`crate::run_query::choose`]), counting the candidates on `$conn`.
macro_rules! driver {
    ($db:ty, $conn:ident, $filter:expr, $sqlite:expr) => {
        match obvious($filter) {
            Some(driver) => driver,
            None => {
                let mut counted = Vec::new();
                for (driver, st) in estimates($filter, $sqlite) {
                    let n: i64 =
                        bound!(sqlx::query_scalar::<$db, i64>(sqlx::AssertSqlSafe(st.text.as_str())), &st.binds)
                            .fetch_one(&mut *$conn)
                            .await?;
                    counted.push((driver, n));
                }
                choose($filter, &counted)
            }
        }
    };
}

/// How PostgreSQL reads a listing: read-only, with no sequential scan and no hash or merge join, so that even
/// without statistics (a fresh database, or autovacuum off) the plan walks the driver's index in order and reads
/// runs by key. Without them, one `GET /v1/runs` with two labels took 0.3–0.6 s over 100,000 runs (a nested loop
/// over every run of the common label), against 3 ms.
const PG_LISTING: &str = "BEGIN READ ONLY; SET LOCAL enable_seqscan = off; SET LOCAL enable_hashjoin = off; \
     SET LOCAL enable_mergejoin = off";

/// Binds `binds` to the sqlx query `$q`, in order. The statement's text is Cairn's own: every value in it is a
/// bind.
macro_rules! bound {
    ($q:expr, $binds:expr) => {{
        let mut q = $q;
        for b in $binds {
            q = match b {
                Bind::Int(v) => q.bind(*v),
                Bind::Text(v) => q.bind(v.as_str()),
            };
        }
        q
    }};
}

impl Store {
    /// A page of the runs `filter` matches, newest first (creation time, then id), at most `limit` of them.
    ///
    /// # Errors
    /// [`crate::StoreError::Database`] (retryable), [`crate::StoreError::Corrupt`].
    pub async fn runs_page(&self, filter: &RunFilter, start: &PageStart, limit: i64) -> StoreResult<RunPage> {
        let (after, offset) = match start {
            PageStart::After(cursor) => (Some(cursor), 0),
            PageStart::Offset(offset) => (None, *offset),
        };
        let page = |driver, sqlite| page_statement(filter, driver, sqlite, after, offset, limit);
        let rows: Vec<RunRow> = listing!(self, filter, page, |st: Statement, Db, conn| {
            bound!(sqlx::query_as::<Db, RunRow>(sqlx::AssertSqlSafe(st.text.as_str())), &st.binds)
                .fetch_all(&mut *conn)
                .await?
        });
        let mut runs = rows.into_iter().map(run_summary).collect::<StoreResult<Vec<_>>>()?;
        let more = i64::try_from(runs.len()).unwrap_or(i64::MAX) > limit;
        runs.truncate(usize::try_from(limit).unwrap_or(0));
        let next_cursor = more
            .then(|| runs.last().map(|r| RunCursor { created_at_ms: r.created_at_ms, run_id: r.id.clone() }))
            .flatten();
        Ok(RunPage { runs, next_cursor })
    }

    /// How many runs `filter` matches.
    ///
    /// # Errors
    /// [`crate::StoreError::Database`] (retryable).
    pub async fn runs_count(&self, filter: &RunFilter) -> StoreResult<i64> {
        let count = |driver, sqlite| count_statement(filter, driver, sqlite);
        Ok(listing!(self, filter, count, |st: Statement, Db, conn| {
            bound!(sqlx::query_scalar::<Db, i64>(sqlx::AssertSqlSafe(st.text.as_str())), &st.binds)
                .fetch_one(&mut *conn)
                .await?
        }))
    }

    /// The steps of `run_ids` that need attention as of `now` ([`RunFilter::attention_at`]), by run and plan order.
    ///
    /// # Errors
    /// [`crate::StoreError::Database`] (retryable), [`crate::StoreError::Corrupt`].
    pub async fn attention_steps(&self, run_ids: &[&str], now: i64) -> StoreResult<Vec<AttentionStep>> {
        type Row = (String, String, String, i64, i64, Option<i64>);
        let mut found = Vec::new();
        for chunk in run_ids.chunks(500) {
            let mut st = Statement::default();
            let stale = st.bind(Bind::Int(now - WORKER_WAIT_MS));
            let ids: Vec<String> = chunk.iter().map(|id| st.bind(Bind::Text((*id).to_owned()))).collect();
            st.text = format!(
                "SELECT s.run_id, s.step_id, s.status, s.attempt, s.attempt_base, s.available_at FROM steps s \
                 WHERE s.run_id IN ({}) AND {} ORDER BY s.run_id, s.position",
                ids.join(", "),
                attention_steps(&stale)
            );
            let rows: Vec<Row> = on_pool!(self, Db, pool => bound!(sqlx::query_as::<Db, Row>(
                sqlx::AssertSqlSafe(st.text.as_str())), &st.binds).fetch_all(pool).await?);
            for (run_id, step_id, status, attempt, base, available_at) in rows {
                let reason = match crate::rows::name("steps.status", &status)? {
                    cairn_core::state::StepStatus::OutcomeUnknown => AttentionReason::OutcomeUnknown,
                    cairn_core::state::StepStatus::WaitingApproval => AttentionReason::WaitingApproval,
                    _ if attempt > base => AttentionReason::Retrying,
                    _ => AttentionReason::WaitingForWorker,
                };
                found.push(AttentionStep { run_id, step_id, reason, available_at_ms: available_at });
            }
        }
        Ok(found)
    }

    /// Runs, newest first, optionally only those with `status` ([`Store::runs_page`] from an offset).
    ///
    /// # Errors
    /// [`crate::StoreError::Database`] (retryable), [`crate::StoreError::Corrupt`].
    pub async fn runs(&self, status: Option<RunStatus>, limit: i64, offset: i64) -> StoreResult<Vec<RunSummary>> {
        let filter = RunFilter { statuses: status.into_iter().collect(), ..RunFilter::default() };
        Ok(self.runs_page(&filter, &PageStart::Offset(offset), limit).await?.runs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_what_it_wrote_and_nothing_else() {
        let cursor = RunCursor { created_at_ms: 1_733_222_400_000, run_id: "0193-ab.c".into() };
        assert_eq!(cursor.to_string().parse::<RunCursor>(), Ok(cursor));
        for bad in ["", "12", "x.abc", "12.", "-.a"] {
            assert_eq!(bad.parse::<RunCursor>(), Err(CursorError), "{bad:?}");
        }
    }
}
