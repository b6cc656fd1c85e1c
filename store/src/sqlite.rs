//! The SQLite backend: connection settings and the statements whose SQL is SQLite's own.
//!
//! Settings: WAL journal (readers never block the writer), `synchronous=FULL` (a committed transaction survives
//! power loss, which is the point of a durable orchestrator; NORMAL could lose the last commits), `busy_timeout`
//! 10 s, foreign keys on. Write transactions start with `BEGIN IMMEDIATE` so a transaction that reads before it
//! writes never fails to upgrade its lock. SQLite serves one orchestrator process, through one connection.
//!
//! A statement SQLite runs never binds its `LIMIT` bare (`LIMIT $5`), but as `LIMIT $5 + 0` (and `OFFSET` the
//! same way, for consistency): the planner of the SQLite bundled here (3.51.3) reads a bare `LIMIT` parameter's
//! value, so each new binding expires the statement and it is prepared again on every execution (about 75 µs of
//! the claim's 165 µs here). `store/tests/store/sqlite_limits.rs` checks the rule.

use cairn_core::event::Progress;
use std::collections::HashSet;
use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, SqlitePool, Transaction};

use crate::error::{StoreError, StoreResult};
use crate::model::{ClaimRequest, HeartbeatOutcome, Lease};
use crate::rows::{ClaimedRow, EventInsert, LeasedRow, StepSucceeded};
use crate::tx::{DialectTx, StepTx, impl_step_tx};

impl_step_tx!(Sqlite, release: (crate::sql::RELEASE_SQLITE, |parents: &[&str]| {
    serde_json::Value::from(parents.to_vec()).to_string()
}), events: events_insert, steps: steps_insert, run_insert: run_insert, lists_prepared: true);
// Statements over several runs are prepared and cached per count: preparing them for every batch took three
// prepares per batch in `cairn bench dispatch` (about 2,600 batches in a run, counted with a uprobe on
// `sqlite3_prepare_v3`). sqlx keeps the connection's 100 most recently used statements, so sizes seen once
// make room for one another, not for the claim and the other statements every batch uses. SQLite plans them on
// the keys whatever the table sizes, so a cached plan stays right.
crate::runs_tx::impl_runs_tx!(Sqlite, lists_prepared: true);

/// Leases due ready steps in one `UPDATE … RETURNING` (SQLite has one writer, so no row can be taken twice).
/// Index: `steps_ready_idx`.
const CLAIM: &str = concat!(
    "UPDATE steps SET status = 'running', attempt = attempt + 1, lease_owner = $1, \
     lease_id = run_id || '/' || step_id || '/' || (attempt + 1), started_at = $2, heartbeat_at = $2, \
     deadline_at = $2 + timeout_ms, lease_expires_at = MIN($2 + timeout_ms, $2 + COALESCE(heartbeat_timeout_ms, $3)), \
     updated_at = $2 \
     WHERE rowid IN (SELECT rowid FROM steps WHERE status = 'ready' AND available_at <= $2 \
       AND action IN (SELECT value FROM json_each($4)) AND ",
    crate::sql::unpaused!(),
    " ORDER BY available_at LIMIT $5 + 0) \
     RETURNING run_id, step_id, attempt, action, args, timeout_ms, heartbeat_timeout_ms, deadline_at, checkpoint, \
     available_at, successor_action, child_count, args_revision"
);

/// Extends a lease, never past the attempt deadline. Index: `steps` PK.
const HEARTBEAT: &str = "UPDATE steps SET heartbeat_at = $4, \
     lease_expires_at = MIN(deadline_at, $4 + COALESCE(heartbeat_timeout_ms, $5)), \
     checkpoint = COALESCE($6, checkpoint), updated_at = $4 \
     WHERE run_id = $1 AND step_id = $2 AND attempt = $3 AND status = 'running' AND lease_owner = $7 \
     RETURNING lease_expires_at";

/// Running steps with an expired lease ([`crate::sql::expired_select`]).
const EXPIRED: &str = crate::sql::expired_select!("LIMIT $2 + 0");

/// Insert a run. Index: `runs` PK, `runs.idempotency_key` UNIQUE (a concurrent twin fails here).
const RUN_INSERT: &str = "INSERT INTO runs (id, plan_id, status, input, context, idempotency_key, step_count, \
     open_steps, created_at, updated_at, goal, goal_search, labels) \
     VALUES ($1, $2, 'pending', $3, $4, $5, $6, $6, $7, $7, $8, $9, $10)";

/// Stores the run's plan (unless stored already), the run, and its label and action rows
/// ([`crate::rows::RunInsert`]).
async fn run_insert(tx: &mut Transaction<'_, Sqlite>, run: &crate::rows::RunInsert<'_>) -> StoreResult<()> {
    sqlx::query(crate::sql::PLAN_INSERT).bind(run.plan_id).bind(run.plan_body).bind(run.now).execute(&mut **tx).await?;
    sqlx::query(RUN_INSERT)
        .bind(run.run_id)
        .bind(run.plan_id)
        .bind(run.input)
        .bind(run.context)
        .bind(run.idempotency_key)
        .bind(run.steps)
        .bind(run.now)
        .bind(run.goal)
        .bind(run.goal_search)
        .bind(run.labels)
        .execute(&mut **tx)
        .await?;
    // At most 16 labels (3 binds each) and one row per distinct action of a plan of at most 10,000 steps: under
    // SQLite's 32,766 parameters.
    if !run.label_rows.is_empty() {
        let mut q = sqlx::QueryBuilder::<Sqlite>::new("INSERT INTO run_labels (run_id, key, value, created_at) ");
        q.push_values(run.label_rows, |mut b, (key, value)| {
            b.push_bind(run.run_id).push_bind(key.as_str()).push_bind(value.as_str()).push_bind(run.now);
        });
        q.build().execute(&mut **tx).await?;
    }
    let mut q = sqlx::QueryBuilder::<Sqlite>::new("INSERT INTO run_actions (run_id, action, created_at) ");
    q.push_values(run.actions, |mut b, action| {
        b.push_bind(run.run_id).push_bind(action.as_str()).push_bind(run.now);
    });
    q.build().execute(&mut **tx).await?;
    Ok(())
}

/// Inserts a new run's steps: multi-row inserts of up to 1,000 rows.
async fn steps_insert(
    tx: &mut Transaction<'_, Sqlite>,
    run_id: &str,
    rows: &[crate::rows::StepInsert],
    now: i64,
) -> StoreResult<()> {
    // 22 binds per row; 1000 rows stay under SQLite's 32766-variable limit.
    for chunk in rows.chunks(1000) {
        let mut q = sqlx::QueryBuilder::<Sqlite>::new(
            "INSERT INTO steps (run_id, step_id, position, action, status, args, when_expr, trigger_rule, \
             idempotent, timeout_ms, heartbeat_timeout_ms, retry, approval, dep_count, pending_deps, \
             available_at, not_before_at, not_before_local, updated_at, child_count, successor_action, starts_itself) ",
        );
        q.push_values(chunk, |mut b, r| {
            b.push_bind(run_id)
                .push_bind(r.step_id.as_str())
                .push_bind(r.position)
                .push_bind(r.action.as_str())
                .push_bind(r.status.as_str())
                .push_bind(r.args.as_str())
                .push_bind(r.when_expr.as_deref())
                .push_bind(r.trigger_rule.as_str())
                .push_bind(r.idempotent)
                .push_bind(r.timeout_ms)
                .push_bind(r.heartbeat_timeout_ms)
                .push_bind(r.retry.as_str())
                .push_bind(r.approval.as_deref())
                .push_bind(r.dep_count)
                .push_bind(r.dep_count)
                .push_bind(r.ready_at(now))
                .push_bind(r.not_before_at)
                .push_bind(r.not_before_local.as_deref())
                .push_bind(now)
                .push_bind(r.child_count)
                .push_bind(r.successor_action.as_deref())
                .push_bind(r.starts_itself);
        });
        q.build().execute(&mut **tx).await?;
    }
    Ok(())
}

/// Appends events in the order given (their `id`s follow it): multi-row inserts of up to 4,000 rows (8 binds a
/// row, under SQLite's 32,766-parameter limit).
async fn events_insert(tx: &mut Transaction<'_, Sqlite>, events: &[EventInsert]) -> StoreResult<()> {
    for chunk in events.chunks(4000) {
        let mut q = sqlx::QueryBuilder::<Sqlite>::new(
            "INSERT INTO run_events (run_id, step_id, kind, data, attempt, worker_id, available_at, at) ",
        );
        q.push_values(chunk, |mut b, e| {
            b.push_bind(e.run_id.as_str())
                .push_bind(e.step_id.as_deref())
                .push_bind(e.kind.as_str())
                .push_bind(e.data.as_deref())
                .push_bind(e.attempt)
                .push_bind(e.worker_id.as_deref())
                .push_bind(e.available_at)
                .push_bind(e.at);
        });
        q.build().execute(&mut **tx).await?;
    }
    Ok(())
}

/// Marks many steps succeeded under their leases in one statement (`UPDATE … FROM (VALUES …)`): returns
/// `(run_id, step_id, child_count)` of the steps whose lease was current, in no particular order. The leases
/// must name distinct steps (a step twice would be updated once, by either row).
async fn steps_succeed(
    tx: &mut Transaction<'_, Sqlite>,
    done: &[(&Lease, &str)],
    now: i64,
) -> StoreResult<Vec<(String, String, i64)>> {
    let mut succeeded = Vec::with_capacity(done.len());
    // 5 binds per row: 1000 rows stay far under SQLite's parameter limit.
    for chunk in done.chunks(1000) {
        let mut q = sqlx::QueryBuilder::<Sqlite>::new(
            "UPDATE steps SET status = 'succeeded', output = v.column5, error = NULL, lease_id = NULL, \
             lease_owner = NULL, lease_expires_at = NULL, finished_at = ",
        );
        q.push_bind(now).push(", updated_at = ").push_bind(now).push(" FROM (");
        q.push_values(chunk, |mut b, (lease, output)| {
            b.push_bind(lease.run_id.as_str())
                .push_bind(lease.step_id.as_str())
                .push_bind(i64::from(lease.attempt))
                .push_bind(lease.worker_id.as_str())
                .push_bind(*output);
        });
        q.push(
            ") AS v WHERE steps.run_id = v.column1 AND steps.step_id = v.column2 \
             AND steps.attempt = v.column3 AND steps.status = 'running' AND steps.lease_owner = v.column4 \
             RETURNING steps.run_id, steps.step_id, steps.child_count",
        );
        // Prepared and cached per row count (sqlx keeps the 100 most recent statements): under load batches
        // come in a few sizes, and preparing this statement again for every batch took 8 % of the
        // orchestrator's CPU in `cairn bench throughput` (1,240 prepares in one run, counted with a uprobe).
        succeeded.extend(q.build_query_as::<(String, String, i64)>().fetch_all(&mut **tx).await?);
    }
    Ok(succeeded)
}

impl DialectTx for Transaction<'_, Sqlite> {
    async fn claim(
        &mut self,
        req: &ClaimRequest,
        lease_ttl_ms: i64,
        running: &HashSet<&str>,
        events: &mut Vec<EventInsert>,
    ) -> StoreResult<Vec<ClaimedRow>> {
        let actions = serde_json::to_string(&req.actions).map_err(|e| StoreError::corrupt("actions", e))?;
        let rows = sqlx::query_as::<Sqlite, ClaimedRow>(CLAIM)
            .bind(&req.worker_id)
            .bind(req.now_ms)
            .bind(lease_ttl_ms)
            .bind(actions)
            .bind(i64::from(req.limit))
            .fetch_all(&mut **self)
            .await?;
        // The attempt rows were opened by the claim statement itself (trigger `steps_attempt_open`).
        for row in &rows {
            let attempt = u32::try_from(row.attempt).map_err(|e| StoreError::corrupt("steps.attempt", e))?;
            let started = Progress::Started { attempt, worker_id: req.worker_id.clone() };
            events.push(EventInsert::progress(&row.run_id, Some(&row.step_id), started, req.now_ms));
        }
        let mut seen = HashSet::new();
        let run_ids: Vec<&str> =
            rows.iter().map(|r| r.run_id.as_str()).filter(|id| !running.contains(id) && seen.insert(*id)).collect();
        self.runs_mark_running(&run_ids, req.now_ms).await?;
        Ok(rows)
    }

    async fn succeed(&mut self, lease: &Lease, output: &str, now: i64) -> StoreResult<Option<StepSucceeded>> {
        // The attempt is closed by the same statement (trigger `steps_attempt_succeeded`).
        let Some(child_count) = self.step_succeed(lease, output, now).await? else {
            return Ok(None);
        };
        Ok(Some(StepSucceeded { child_count, run_counter: None, released: None }))
    }

    async fn succeed_many(&mut self, done: &[(&Lease, &str)], now: i64) -> StoreResult<Vec<(String, String, i64)>> {
        // The attempts are closed by the same statement (trigger `steps_attempt_succeeded`).
        steps_succeed(self, done, now).await
    }

    async fn heartbeat(
        &mut self,
        lease: &Lease,
        checkpoint: Option<&str>,
        lease_ttl_ms: i64,
        now: i64,
    ) -> StoreResult<HeartbeatOutcome> {
        let expires = sqlx::query_scalar::<Sqlite, i64>(HEARTBEAT)
            .bind(&lease.run_id)
            .bind(&lease.step_id)
            .bind(i64::from(lease.attempt))
            .bind(now)
            .bind(lease_ttl_ms)
            .bind(checkpoint)
            .bind(&lease.worker_id)
            .fetch_optional(&mut **self)
            .await?;
        Ok(expires.map_or(HeartbeatOutcome::Gone, |lease_expires_ms| HeartbeatOutcome::Extended { lease_expires_ms }))
    }

    async fn expired(&mut self, now: i64, limit: i64) -> StoreResult<Vec<LeasedRow>> {
        Ok(sqlx::query_as::<Sqlite, LeasedRow>(EXPIRED).bind(now).bind(limit).fetch_all(&mut **self).await?)
    }
}

/// Opens (creating if missing) the SQLite database at `url` (`sqlite:PATH` or `sqlite://PATH`).
pub(crate) async fn connect(url: &str) -> StoreResult<SqlitePool> {
    let options = SqliteConnectOptions::from_str(url)?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(Duration::from_secs(10))
        .foreign_keys(true);
    // One connection: SQLite has one writer anyway, and a second connection that finds the write lock taken
    // waits in SQLite's busy handler, which sleeps and polls (1, 2, 5, 10 ms…): that added milliseconds to
    // every step. The pool's queue hands the connection over in order, with no polling.
    Ok(SqlitePoolOptions::new().max_connections(1).connect_with(options).await?)
}

/// Begins a write transaction that takes the write lock up front.
pub(crate) async fn begin(pool: &SqlitePool) -> StoreResult<Transaction<'static, Sqlite>> {
    Ok(pool.begin_with("BEGIN IMMEDIATE").await?)
}
