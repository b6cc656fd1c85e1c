//! `cairn-store`: Cairn's persistence. Every SQL statement lives here; nothing else talks to the database.
//!
//! One interface, [`Store`], over two backends: SQLite (embedded default, one orchestrator process) and
//! PostgreSQL (production, many orchestrators). The transactional algorithms are written once in [`flow`]
//! against the statement traits in [`tx`]; each backend implements those traits with its own SQL where the
//! dialects differ (`sqlite.rs`, `postgres.rs`) and the shared SQL otherwise (`sql.rs`).
//!
//! Module map:
//! - [`model`]: data in and out (leases, claims, summaries); times are epoch milliseconds.
//! - [`error`]: [`StoreError`], with which failures are retryable.
//! - `flow`: submit, claim, finish (complete/fail), settle (the cascade), control (cancel, operator, reaper).
//! - `read`: queries for the API and CLI (runs, steps, attempts, events).
//! - `waiting`, `wait_tx`: durable waiting (contract §10, "Waiting"): schedules and ticks, approval decisions and
//!   deadlines, external events and `event.wait` steps.
//! - `tx`, `sql`, `rows`, `sqlite`, `postgres`: statements and rows.
//! - `peers`: messages between orchestrators sharing a PostgreSQL database (`LISTEN`/`NOTIFY`).
//! - `recipients`, `deliveries`, `ledger_tx`: who `notify.send` delivers to, and the per-step delivery ledger.
//!
//! Every method takes `now` from the caller (the orchestrator's injected clock): SQL never decides with `now()`.

/// Runs `$body` with `$pool` bound to the backend's pool (SQLite) or to a connection of it (PostgreSQL, within the
/// answer deadline: `postgres/deadline.rs`), and `$db` aliased to its database type. `$body` uses `$pool` once,
/// as the executor of one statement.
macro_rules! on_pool {
    ($self:expr, $db:ident, $pool:ident => $body:expr) => {
        match $self {
            Store::Sqlite($pool) => {
                #[allow(dead_code)]
                type $db = sqlx::Sqlite;
                $body
            }
            Store::Postgres(pool) => {
                #[allow(dead_code)]
                type $db = sqlx::Postgres;
                $crate::postgres::deadline::on_connection(pool, async |$pool| Ok::<_, $crate::StoreError>($body))
                    .await?
            }
        }
    };
}

mod catalog;
pub mod error;
mod flow;
pub mod model;
mod peers;
mod postgres;
mod read;
mod recipients;
mod reopen_tx;
mod rows;
mod run_filter;
mod run_query;
mod runs_tx;
mod sql;
mod sqlite;
pub mod stats;
mod tx;
mod workers;
mod writer;

use cairn_core::event::EventKind;
use sqlx::{PgPool, SqlitePool};

pub use cairn_core::machine::OperatorAction;
pub use catalog::{ActionWorker, StoredAction};
pub use error::{ErrorClass, StoreError, StoreResult};
pub use flow::batch::{Batch, Handoff};
pub use flow::finish::{Report, ReportLimits};
pub use model::*;
pub use peers::{PEER_CHANNEL, PeerListener};
pub use postgres::deadline::DEFAULT_ANSWER_DEADLINE;
pub use recipients::{MAX_RECIPIENTS_PAGE, StoredRecipient};
pub use run_filter::{
    AttentionReason, AttentionStep, CursorError, PageStart, RunCursor, RunFilter, RunPage, WORKER_WAIT_MS,
};
pub use workers::WorkerLoad;
pub use writer::{BatchWriter, FastPathCounts, OneCallCounts};

/// SQLite migrations (`migrations/sqlite`), embedded in the binary.
pub static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");
/// PostgreSQL migrations (`migrations/postgres`), embedded in the binary.
pub static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

/// The store: one of the two backends. Cheap to clone (pools are shared).
#[derive(Debug, Clone)]
pub enum Store {
    /// Embedded SQLite.
    Sqlite(SqlitePool),
    /// PostgreSQL.
    Postgres(PgPool),
}

/// Runs `$body` with `$tx` bound to a new write transaction, appends the collected `$events`, and commits.
macro_rules! in_tx {
    ($self:expr, |$tx:ident, $events:ident| $body:expr) => {
        match $self {
            Store::Sqlite(pool) => {
                let mut $tx = $crate::sqlite::begin(pool).await?;
                let mut $events = Vec::new();
                let out = $body;
                tx::StepTx::events_insert(&mut $tx, &$events).await?;
                $tx.commit().await?;
                Ok(out)
            }
            Store::Postgres(pool) => {
                // Concurrent transactions may lock the same rows in different orders (a cancel locks the run
                // first, a completion its steps first); PostgreSQL then aborts one with a deadlock. Nothing was
                // committed, so the whole transaction is run again, a few times, after a short pause.
                let mut tries = 0u32;
                loop {
                    tries += 1;
                    // Within the answer deadline: a server that vanished mid-transaction fails it as a lost
                    // connection instead of stalling this caller for good (`postgres/deadline.rs`).
                    let result: StoreResult<_> =
                        $crate::postgres::deadline::in_transaction(pool, async |mut $tx| {
                            let mut $events = Vec::new();
                            let out = $body;
                            tx::StepTx::events_insert(&mut $tx, &$events).await?;
                            $tx.commit().await?;
                            Ok(out)
                        })
                        .await;
                    match result {
                        Err(e) => match conflict_pause(&e, tries) {
                            Some(pause) => {
                                tracing::debug!(error = %e, tries, "transaction conflict; retrying");
                                tokio::time::sleep(pause).await;
                            }
                            None => break Err(e),
                        },
                        ok => break ok,
                    }
                }
            }
        }
    };
}

// Durable waiting, repairs and the delivery ledger; declared after `in_tx!` so they can use it.
mod deliveries;
mod ledger_tx;
mod repair;
mod wait_tx;
mod waiting;
pub use deliveries::{DeliveryRecorded, DeliveryRow, DeliveryWrite, MAX_LEDGER_ROWS};
pub use repair::{PauseOutcome, RedriveOutcome, RerunOutcome, RetryOutcome, RunPause, RunRedrive, RunRerun, StepRetry};
pub use waiting::{
    ApprovalOutcome, Delivery, FireOutcome, NewEvent, NewSchedule, PendingApproval, ScheduleFire, ScheduleRecord,
    ScheduleTick, ScheduleTrigger, TickRun, WAIT_OWNER,
};

impl Store {
    /// Connects to `url` (`sqlite:PATH`, `sqlite::memory:`, `postgres://…`) and applies pending migrations.
    ///
    /// # Errors
    /// [`StoreError::UnsupportedUrl`] for another scheme; [`StoreError::Database`] when the database cannot be
    /// reached (retryable); [`StoreError::Migrate`] when migrations fail.
    pub async fn connect(url: &str) -> StoreResult<Store> {
        Store::connect_with(url, DEFAULT_ANSWER_DEADLINE).await
    }

    /// As [`Store::connect`], with PostgreSQL's answer deadline (`docs/architecture.md` §10, "A database that
    /// stops answering"): how long any connection, transaction, read or batch waits for PostgreSQL before it
    /// fails as a lost connection (retryable), and the `idle_in_transaction_session_timeout` of Cairn's sessions
    /// where the server sets none. Ignored for SQLite (embedded: nothing to wait for across a network).
    ///
    /// # Errors
    /// As [`Store::connect`].
    pub async fn connect_with(url: &str, answer_deadline: std::time::Duration) -> StoreResult<Store> {
        let store = if url.starts_with("sqlite:") {
            Store::Sqlite(sqlite::connect(url).await?)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Store::Postgres(postgres::connect(url, answer_deadline).await?)
        } else {
            return Err(StoreError::UnsupportedUrl(url.to_owned()));
        };
        store.migrate().await?;
        Ok(store)
    }

    /// Applies pending migrations, then (PostgreSQL) defines the stored functions from their files (idempotent).
    ///
    /// # Errors
    /// [`StoreError::Migrate`].
    pub async fn migrate(&self) -> StoreResult<()> {
        match self {
            Store::Sqlite(pool) => SQLITE_MIGRATIONS.run(pool).await?,
            Store::Postgres(pool) => {
                POSTGRES_MIGRATIONS.run(pool).await?;
                postgres::functions::define(pool).await?;
            }
        }
        Ok(())
    }

    /// Backend name: `sqlite` or `postgres`.
    pub fn backend(&self) -> &'static str {
        match self {
            Store::Sqlite(_) => "sqlite",
            Store::Postgres(_) => "postgres",
        }
    }

    /// Stores a validated plan as a new run, deciding its root steps, in one transaction.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable; nothing was stored).
    pub async fn create_run(&self, run: &NewRun) -> StoreResult<CreateOutcome> {
        Ok(self.create_run_detailed(run).await?.0)
    }

    /// [`Store::create_run`], also returning the created run as committed when it is known without reading it
    /// back: `Some` (equal to what [`Store::run_detail`] would read right after the commit) for a created run
    /// whose roots needed no decision, `None` otherwise (an existing run, a conflict, a root with `when` or an
    /// approval).
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable; nothing was stored).
    pub async fn create_run_detailed(&self, run: &NewRun) -> StoreResult<(CreateOutcome, Option<RunDetail>)> {
        match self.create_once(run).await {
            // A concurrent submit with the same idempotency key won the unique index: report its run.
            Err(StoreError::Database(e)) if run.idempotency_key.is_some() && is_unique_violation(&e) => {
                self.create_once(run).await
            }
            other => other,
        }
    }

    async fn create_once(&self, run: &NewRun) -> StoreResult<(CreateOutcome, Option<RunDetail>)> {
        in_tx!(self, |tx, events| flow::submit::create_detailed(&mut tx, run, &mut events).await?)
    }

    /// Leases up to `req.limit` due ready steps of the given actions, with resolved args. Steps whose
    /// placeholders cannot be resolved fail with `placeholder_unresolved` instead of being returned.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable; nothing was leased).
    pub async fn claim(&self, req: &ClaimRequest, lease_ttl_ms: i64) -> StoreResult<Vec<Claimed>> {
        in_tx!(self, |tx, events| flow::claim::claim(
            &mut tx,
            req,
            lease_ttl_ms,
            &std::collections::HashSet::new(),
            &mut events
        )
        .await?)
    }

    /// Accepts a result under `lease`; stale reports change nothing ([`Report::Stale`]).
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable: the report was not recorded; the worker should resend it).
    pub async fn complete(
        &self,
        lease: &Lease,
        output: &serde_json::Value,
        limits: ReportLimits,
        now_ms: i64,
    ) -> StoreResult<Report> {
        in_tx!(self, |tx, events| flow::finish::complete(&mut tx, lease, output, limits, now_ms, &mut events).await?)
    }

    /// Records a failed attempt under `lease` and decides retry, failure or `outcome_unknown`.
    /// `sample` ∈ `[0, 1)` drives jitter.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable).
    pub async fn fail(
        &self,
        lease: &Lease,
        failure: &cairn_core::failure::Failure,
        sample: f64,
        now_ms: i64,
    ) -> StoreResult<Report> {
        in_tx!(self, |tx, events| flow::finish::fail(&mut tx, lease, failure, sample, now_ms, &mut events).await?)
    }

    /// Creates a batch of runs, applies a batch of reports, then of claims, in one transaction (group commit),
    /// then claims up to what `handoff` asks for in the same transaction (the new runs' ready roots and the
    /// reports' released dependents are what it may hand off). Each run is created exactly as
    /// [`Store::create_run_detailed`] would, each report decided as [`Store::complete`] or [`Store::fail`]
    /// would, each claim as [`Store::claim`]; the outcomes come back in input order.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable: nothing of the batch was recorded; resend every report). Any error
    /// rolls back the whole batch; the caller may then apply the operations one by one to isolate a bad one (a
    /// run whose idempotency key a concurrent transaction took meanwhile fails the batch with a unique
    /// violation, which [`Store::create_run_detailed`] alone resolves).
    pub async fn write_batch(&self, batch: &Batch<'_>) -> StoreResult<BatchOutcome> {
        in_tx!(self, |tx, events| flow::batch::report_batch(&mut tx, batch, &mut events).await?)
    }

    /// Undoes claims whose attempts never started: the steps are ready again, due now, and the attempts are
    /// given back. `reason` is recorded in each `step_unclaimed` event. Returns how many were undone; leases
    /// that already ended are left alone.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable). If it cannot be applied, the leases expire and the reaper decides.
    pub async fn unclaim(&self, leases: &[Lease], reason: &str, now_ms: i64) -> StoreResult<usize> {
        in_tx!(self, |tx, events| flow::claim::unclaim(&mut tx, leases, reason, now_ms, &mut events).await?)
    }

    /// Extends `lease` (and saves `checkpoint`); [`HeartbeatOutcome::Gone`] tells the worker to stop.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable).
    pub async fn heartbeat(
        &self,
        lease: &Lease,
        checkpoint: Option<&serde_json::Value>,
        lease_ttl_ms: i64,
        now_ms: i64,
    ) -> StoreResult<HeartbeatOutcome> {
        let checkpoint = checkpoint.map(serde_json::Value::to_string);
        in_tx!(self, |tx, _events| tx::DialectTx::heartbeat(
            &mut tx,
            lease,
            checkpoint.as_deref(),
            lease_ttl_ms,
            now_ms
        )
        .await?)
    }

    /// Fails up to `request.limit` attempts whose lease expired at or before `request.expired_by_ms` (at most
    /// `now_ms`). Returns how many.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable).
    pub async fn reap(&self, request: ReapRequest) -> StoreResult<usize> {
        in_tx!(self, |tx, events| flow::control::reap(&mut tx, &request, &mut events).await?)
    }

    /// Cancels a run and all its open steps; false when it does not exist or already finished.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable).
    pub async fn cancel_run(&self, run_id: &str, now_ms: i64) -> StoreResult<bool> {
        in_tx!(self, |tx, events| flow::control::cancel_run(&mut tx, run_id, None, now_ms, &mut events).await?)
    }

    /// [`Store::cancel_run`] by an operator: `run_cancelled` records who (`by`) and why (`reason`).
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable).
    pub async fn cancel_run_by(&self, run_id: &str, by: &str, reason: Option<&str>, now_ms: i64) -> StoreResult<bool> {
        let mut note = serde_json::json!({"by": by});
        if let Some(reason) = reason {
            note["reason"] = serde_json::json!(reason);
        }
        in_tx!(self, |tx, events| flow::control::cancel_run(&mut tx, run_id, Some(&note), now_ms, &mut events).await?)
    }

    /// Applies an operator or approval decision; false when the step is not in the state it applies to. `reason`
    /// is recorded with `actor` in the history of a parked step's decision (`retry`, `skip`, `fail`).
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable).
    pub async fn operate(
        &self,
        run_id: &str,
        step_id: &str,
        action: OperatorAction,
        actor: &str,
        reason: Option<&str>,
        now_ms: i64,
    ) -> StoreResult<bool> {
        let note = reason.map(|reason| serde_json::json!({"by": actor, "reason": reason}));
        let decision = flow::control::StepDecision { run_id, step_id, action, actor, note: note.as_ref() };
        in_tx!(self, |tx, events| flow::control::operate(&mut tx, &decision, now_ms, &mut events).await?)
    }
}

impl Store {
    /// Fails a run whose persisted steps are incomplete: open steps are cancelled (so nothing else is
    /// dispatched) and the run is `failed` with an `integrity_error` root cause.
    async fn fail_run_integrity(&self, run_id: &str, expected: i64, found: i64, now_ms: i64) -> StoreResult<()> {
        let failure = serde_json::json!({
            "step_id": null, "code": cairn_core::failure::codes::INTEGRITY_ERROR,
            "message": format!("the run has {found} step rows but its plan has {expected}: persisted state is corrupt"),
            "suggestion": "replan",
        });
        let text = failure.to_string();
        in_tx!(self, |tx, events| {
            for (step_id, _) in tx::StepTx::steps_cancel(&mut tx, run_id, now_ms).await? {
                events.push(flow::event(
                    run_id,
                    Some(&step_id),
                    EventKind::StepCancelled,
                    serde_json::json!({"reason": "integrity_error"}),
                    now_ms,
                ));
            }
            tx::StepTx::attempts_cancel(&mut tx, run_id, now_ms).await?;
            if tx::StepTx::run_finish(&mut tx, run_id, "failed", Some(&text), now_ms).await? {
                events.push(flow::event(run_id, None, EventKind::RunFailed, failure.clone(), now_ms));
            }
        })
    }
}

/// Tries of a write transaction that fails with a deadlock or serialization failure, the first included.
const CONFLICT_TRIES: u32 = 5;

/// After the `tries`-th try of a write transaction failed with `error`: the pause before running the whole
/// transaction again (5 ms × `tries`), or `None` when it must not run again (not a conflict, or
/// [`CONFLICT_TRIES`] reached). Shared by `in_tx!` and the batch writer.
fn conflict_pause(error: &StoreError, tries: u32) -> Option<std::time::Duration> {
    match error {
        StoreError::Database(e) if tries < CONFLICT_TRIES && is_transient_conflict(e) => {
            Some(std::time::Duration::from_millis(u64::from(tries) * 5))
        }
        _ => None,
    }
}

/// PostgreSQL deadlock (`40P01`) or serialization failure (`40001`): the transaction was rolled back and may be
/// run again as a whole.
pub(crate) fn is_transient_conflict(e: &sqlx::Error) -> bool {
    e.as_database_error().and_then(|d| d.code()).is_some_and(|code| code == "40P01" || code == "40001")
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    e.as_database_error().is_some_and(|d| d.is_unique_violation())
}
