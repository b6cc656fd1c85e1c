//! Read queries for the API and the CLI, and the start-up integrity check. Same SQL on both backends.

use serde_json::{Value, json};
use sqlx::{Connection, Postgres};

use crate::error::{StoreError, StoreResult};
use crate::model::{AttemptRecord, RunDetail, RunEvent, RunSummary, StepSummary};
use crate::rows::{AttemptRow, EventRow, RunRow, StepRow, name};
use crate::{Store, sql};

fn json_opt(what: &'static str, text: Option<String>) -> StoreResult<Option<Value>> {
    text.map(|t| serde_json::from_str(&t).map_err(|e| StoreError::corrupt(what, e))).transpose()
}

pub(crate) fn run_summary(row: RunRow) -> StoreResult<RunSummary> {
    Ok(RunSummary {
        status: name("runs.status", &row.status)?,
        id: row.id,
        plan_id: row.plan_id,
        step_count: row.step_count,
        open_steps: row.open_steps,
        failure: json_opt("runs.failure", row.failure)?,
        created_at_ms: row.created_at,
        finished_at_ms: row.finished_at,
        rerun_of: row.rerun_of,
        goal: row.goal,
        labels: serde_json::from_str(&row.labels).map_err(|e| StoreError::corrupt("runs.labels", e))?,
    })
}

/// Reads a run's row, steps and attempts through the transaction `$tx` of database `$db`, then ends it.
macro_rules! snapshot {
    ($db:ty, $tx:expr, $run_id:expr) => {{
        let mut tx = $tx;
        let run = sqlx::query_as::<$db, RunRow>(sql::RUN_GET).bind($run_id).fetch_optional(&mut *tx).await?;
        let steps = sqlx::query_as::<$db, StepRow>(sql::STEPS_OF_RUN).bind($run_id).fetch_all(&mut *tx).await?;
        let attempts =
            sqlx::query_as::<$db, AttemptRow>(sql::ATTEMPTS_OF_RUN).bind($run_id).fetch_all(&mut *tx).await?;
        tx.commit().await?;
        (run, steps, attempts)
    }};
}

fn step_summary(r: StepRow) -> StoreResult<StepSummary> {
    Ok(StepSummary {
        id: r.step_id,
        action: r.action,
        status: name("steps.status", &r.status)?,
        attempts: u32::try_from(r.attempt).unwrap_or(u32::MAX),
        output: json_opt("steps.output", r.output)?,
        error: json_opt("steps.error", r.error)?,
        available_at_ms: r.available_at,
        not_before_at_ms: r.not_before_at,
        not_before_local: r.not_before_local,
        checkpoint: json_opt("steps.checkpoint", r.checkpoint)?,
        args_revision: r.args_revision,
        args: serde_json::from_str(&r.args).map_err(|e| StoreError::corrupt("steps.args", e))?,
        started_at_ms: r.started_at,
        finished_at_ms: r.finished_at,
    })
}

fn attempt_record(run_id: &str, r: AttemptRow) -> StoreResult<AttemptRecord> {
    let failure = match r.failure_code {
        None => None,
        Some(code) => Some(json!({
            "run_id": run_id, "step_id": r.step_id, "attempt": r.attempt, "action": r.action,
            "worker_id": r.worker_id, "code": code, "message": r.failure_message,
            "details": json_opt("attempts.failure_details", r.failure_details)?.unwrap_or(Value::Null),
            "retryable": r.retryable.map(|v| v != 0), "retry_after_ms": r.retry_after_ms,
            "suggestion": r.suggestion, "degraded": r.degraded.map(|v| v != 0),
            "started_at_ms": r.started_at, "ended_at_ms": r.ended_at,
        })),
    };
    Ok(AttemptRecord {
        step_id: r.step_id,
        attempt: u32::try_from(r.attempt).unwrap_or(u32::MAX),
        status: name("attempts.status", &r.status)?,
        worker_id: r.worker_id,
        started_at_ms: r.started_at,
        ended_at_ms: r.ended_at,
        failure,
    })
}

impl Store {
    /// One run, or `None`.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable), [`StoreError::Corrupt`].
    pub async fn run(&self, run_id: &str) -> StoreResult<Option<RunSummary>> {
        let row = on_pool!(self, Db, pool => sqlx::query_as::<Db, RunRow>(sql::RUN_GET).bind(run_id).fetch_optional(pool).await?);
        row.map(run_summary).transpose()
    }

    /// A run's plan as submitted (JSON), or `None` when the run does not exist.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable), [`StoreError::Corrupt`].
    pub async fn run_plan(&self, run_id: &str) -> StoreResult<Option<serde_json::Value>> {
        let text = on_pool!(self, Db, pool => sqlx::query_scalar::<Db, String>(sql::RUN_PLAN).bind(run_id)
            .fetch_optional(pool).await?);
        text.map(|t| serde_json::from_str(&t).map_err(|e| StoreError::corrupt("plans.body", e))).transpose()
    }

    /// The steps of a run in plan order.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable), [`StoreError::Corrupt`].
    pub async fn steps(&self, run_id: &str) -> StoreResult<Vec<StepSummary>> {
        let rows = on_pool!(self, Db, pool => sqlx::query_as::<Db, StepRow>(sql::STEPS_OF_RUN).bind(run_id).fetch_all(pool).await?);
        rows.into_iter().map(step_summary).collect()
    }

    /// Every attempt of a run with its failure record, by step then attempt.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable), [`StoreError::Corrupt`].
    pub async fn attempts(&self, run_id: &str) -> StoreResult<Vec<AttemptRecord>> {
        let rows = on_pool!(self, Db, pool => sqlx::query_as::<Db, AttemptRow>(sql::ATTEMPTS_OF_RUN).bind(run_id).fetch_all(pool).await?);
        rows.into_iter().map(|r| attempt_record(run_id, r)).collect()
    }

    /// A run with its steps and attempts ([`Store::run`], [`Store::steps`], [`Store::attempts`]) read in one
    /// snapshot, so a report committed meanwhile shows entirely or not at all (read one by one, a step could
    /// show `running` next to the failure record of the attempt that had just failed). `None` when there is no
    /// such run. PostgreSQL: a `REPEATABLE READ, READ ONLY` transaction; SQLite: a read transaction on the one
    /// connection.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable), [`StoreError::Corrupt`].
    pub async fn run_detail(&self, run_id: &str) -> StoreResult<Option<RunDetail>> {
        let (run, steps, attempts) = match self {
            Store::Sqlite(pool) => snapshot!(sqlx::Sqlite, pool.begin().await?, run_id),
            Store::Postgres(pool) => {
                crate::postgres::deadline::on_connection(pool, async |connection| {
                    Ok::<_, StoreError>(snapshot!(
                        sqlx::Postgres,
                        connection.begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY").await?,
                        run_id
                    ))
                })
                .await?
            }
        };
        let Some(run) = run else { return Ok(None) };
        let input = serde_json::from_str(&run.input).map_err(|e| StoreError::corrupt("runs.input", e))?;
        Ok(Some(RunDetail {
            input,
            run: run_summary(run)?,
            steps: steps.into_iter().map(step_summary).collect::<StoreResult<_>>()?,
            attempts: attempts.into_iter().map(|r| attempt_record(run_id, r)).collect::<StoreResult<_>>()?,
        }))
    }

    /// Up to `limit` events of a run with a sequence number above `after`, oldest first.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable), [`StoreError::Corrupt`].
    pub async fn events(&self, run_id: &str, after: i64, limit: i64) -> StoreResult<Vec<RunEvent>> {
        let rows = on_pool!(self, Db, pool => sqlx::query_as::<Db, EventRow>(sql::EVENTS_OF_RUN)
            .bind(run_id).bind(after).bind(limit).fetch_all(pool).await?);
        rows.into_iter().map(EventRow::into_event).collect()
    }

    /// The earliest `available_at` of any ready step (due now or later), for the dispatcher's sleep.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable).
    pub async fn next_due(&self) -> StoreResult<Option<i64>> {
        // Not prepared: PostgreSQL keeps a generic plan after five executions, and one made while `steps` was
        // small (a sequential scan) stayed when a large run arrived: 16 ms per call, once per parked poll.
        Ok(on_pool!(self, Db, pool => sqlx::query_scalar::<Db, Option<i64>>(sql::NEXT_DUE)
            .persistent(false).fetch_one(pool).await?))
    }

    /// The database server's clock, in ms since the epoch, where it has its own (PostgreSQL: the reference of
    /// every orchestrator's clock, `cairn_orchestrator::clock`); `None` for SQLite, whose clock is its host's.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable).
    pub async fn database_now_ms(&self) -> StoreResult<Option<i64>> {
        match self {
            Store::Sqlite(_) => Ok(None),
            Store::Postgres(pool) => {
                let query = "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::int8";
                Ok(Some(sqlx::query_scalar::<Postgres, i64>(query).fetch_one(pool).await?))
            }
        }
    }

    /// Registers or refreshes a worker and the actions it serves.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable).
    pub async fn worker_upsert(&self, worker_id: &str, actions: &[String], now_ms: i64) -> StoreResult<()> {
        let actions = serde_json::to_string(actions).map_err(|e| StoreError::corrupt("actions", e))?;
        on_pool!(self, Db, pool => {
            sqlx::query::<Db>(sql::WORKER_UPSERT).bind(worker_id).bind(actions).bind(now_ms).execute(pool).await?;
        });
        Ok(())
    }

    /// Finds open runs whose step rows are missing (store corruption, a manual delete) and fails them with
    /// `integrity_error` instead of leaving them pending forever (case C03 b). Returns the failed run ids.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable).
    pub async fn integrity_check(&self, now_ms: i64) -> StoreResult<Vec<String>> {
        let mut broken = Vec::new();
        // Keyset position (created_at, id) of the last run checked: failing a run removes it from the open set,
        // so paging by OFFSET would skip runs.
        let mut after: (i64, String) = (i64::MIN, String::new());
        loop {
            let open: Vec<(String, i64, i64)> = on_pool!(self, Db, pool => sqlx::query_as::<Db, (String, i64, i64)>(sql::OPEN_RUNS)
                .bind(after.0).bind(after.1.as_str()).bind(500_i64).fetch_all(pool).await?);
            let Some((last_id, _, last_created)) = open.last() else {
                break;
            };
            after = (*last_created, last_id.clone());
            for (run_id, step_count, _) in open {
                let rows: i64 = on_pool!(self, Db, pool => sqlx::query_scalar::<Db, i64>(sql::STEP_ROWS).bind(&run_id).fetch_one(pool).await?);
                if rows != step_count {
                    self.fail_run_integrity(&run_id, step_count, rows, now_ms).await?;
                    broken.push(run_id);
                }
            }
        }
        Ok(broken)
    }
}
