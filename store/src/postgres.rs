//! The PostgreSQL backend: the statements whose SQL is PostgreSQL's own.
//!
//! Any number of orchestrators may share one database: the claim takes rows with `FOR UPDATE SKIP LOCKED` in
//! the same statement that leases them, so no step is ever leased twice, and every other write is a conditional
//! `UPDATE` fenced by status and attempt number.

use cairn_core::event::EventKind;
use sqlx::Connection;
use sqlx::pool::PoolConnection;
use sqlx::postgres::PgPoolOptions;
use std::collections::HashSet;
use std::time::Duration;

use sqlx::{PgConnection, PgPool, Postgres, Transaction};

use crate::error::StoreResult;
use crate::model::{ClaimRequest, HeartbeatOutcome, Lease};
use crate::rows::{ChildRow, ClaimedRow, EventInsert, LeasedRow, StepSucceeded};
use crate::tx::{DialectTx, impl_step_tx};

impl_step_tx!(
    Postgres,
    release: (crate::sql::RELEASE_POSTGRES, <[&str]>::to_vec),
    events: events_insert,
    steps: steps_insert::run_steps_insert,
    run_insert: runs::run_insert,
    // Not prepared: planned for each batch with its own keys. Batches over several runs mostly take the leaf call
    // on PostgreSQL (`postgres/complete_leaves.rs`), so caching one statement per run count, as SQLite does, has
    // not been shown to pay here.
    lists_prepared: false
);

pub(crate) mod complete_and_claim;
pub(crate) mod complete_leaves;
pub(crate) mod deadline;
pub(crate) mod functions;
pub(crate) mod lost_commit;
#[cfg(test)]
mod plans;
mod runs;
mod steps_insert;
pub(crate) mod writer;

/// The `FROM` item every events insert joins before drawing ids: locks the rows of the runs named by the
/// subquery `$ids` (`FOR NO KEY UPDATE`, in id order, held to the commit). The aggregate completes before the
/// first row is inserted, so before any id is drawn. Ids come from one sequence drawn before the commit, so
/// without the lock two transactions writing events of one run could commit in the other order than their ids,
/// and a reader paging by `id > cursor` (`GET /v1/runs/{id}/events`, its live stream, `cairn logs`) could move
/// past an event still uncommitted and never see it; with it, a run's events become visible in id order. A row
/// lock: other runs do not wait, and the foreign-key checks' `KEY SHARE` locks do not conflict with it.
///
/// The ids are gathered into an array first (`id = ANY (ARRAY(…))`), so every plan reads `runs` by key: written
/// `id IN (…)`, a cached plan made while `runs` was small could join through all of `runs_pkey` instead (a merge
/// join), every time, however large the table grew (`postgres/plans.rs` checks the reads with merge and hash joins
/// allowed).
macro_rules! lock_runs {
    ($ids:literal) => {
        concat!(
            "(SELECT count(*) AS runs_locked FROM (SELECT id FROM runs WHERE id = ANY (ARRAY(",
            $ids,
            ")) ORDER BY id FOR NO KEY UPDATE) AS r) AS l"
        )
    };
}

/// Leases due ready steps, inserts their attempt rows, marks the runs they start running, and appends the
/// transaction's queued events ($6–$13, as [`EVENTS_INSERT`] binds them) followed by one `step_started` event (the
/// kind in $14) per leased step: one statement, one round trip fewer per transaction than a separate events insert.
/// Rows locked by another claimer are skipped, not waited for. Index: `steps_ready_idx`, then primary keys.
///
/// The runs it starts are found by key only: their ids arrive as an array computed first, and their status is
/// tested as `(status = 'pending') IS TRUE`, a form no index can serve. Written `status = 'pending' AND id IN
/// (…)`, the generic plan made while few runs were pending walked `runs_status_created_idx` through every pending
/// run and joined each against the leased steps: with a backlog of 3,000 submitted runs (`cairn bench dispatch`
/// once the workers fell behind) each claim took 16–130 ms instead of well under one, so the backlog grew.
///
/// The events get their `id`s in the order the insert's `ORDER BY n` gives: the queued ones in the order given,
/// then the `step_started` ones in claim order (due time, then run and step id: the order the leased steps are
/// returned in); their runs are locked first ([`lock_runs!`]). Their payload is the columns `attempt` and
/// `worker_id` (`cairn_core::event::Progress::Started`), with `data` NULL.
const CLAIM: &str = concat!(
    "WITH picked AS (SELECT run_id, step_id FROM steps WHERE status = 'ready' AND available_at <= $2 \
       AND action = ANY($4) AND ",
    crate::sql::unpaused!(),
    " ORDER BY available_at LIMIT $5 FOR UPDATE SKIP LOCKED), \
     leased AS (UPDATE steps s SET status = 'running', attempt = s.attempt + 1, lease_owner = $1, \
       lease_id = s.run_id || '/' || s.step_id || '/' || (s.attempt + 1), started_at = $2, heartbeat_at = $2, \
       deadline_at = $2 + s.timeout_ms, lease_expires_at = LEAST($2 + s.timeout_ms, $2 + COALESCE(s.heartbeat_timeout_ms, $3)), \
       updated_at = $2 \
     FROM picked WHERE s.run_id = picked.run_id AND s.step_id = picked.step_id \
     RETURNING s.run_id, s.step_id, s.attempt, s.action, s.args, s.timeout_ms, s.heartbeat_timeout_ms, s.deadline_at, \
       s.checkpoint, s.available_at, s.lease_id, s.successor_action, s.child_count, s.args_revision), \
     opened AS (INSERT INTO attempts (run_id, step_id, attempt, lease_id, action, worker_id, status, started_at) \
       SELECT run_id, step_id, attempt, lease_id, action, $1, 'running', $2 FROM leased), \
     started AS (UPDATE runs SET status = 'running', updated_at = $2 \
       WHERE id = ANY (ARRAY(SELECT run_id FROM leased)) AND (status = 'pending') IS TRUE), \
     logged AS (INSERT INTO run_events (run_id, step_id, kind, data, attempt, worker_id, available_at, at) \
       SELECT run_id, step_id, kind, data, attempt, worker_id, available_at, at FROM ( \
         SELECT run_id, step_id, kind, data, attempt, worker_id, available_at, at, n \
           FROM UNNEST($6::text[], $7::text[], $8::text[], $9::text[], $10::int8[], $11::text[], $12::int8[], \
             $13::int8[]) WITH ORDINALITY AS q(run_id, step_id, kind, data, attempt, worker_id, available_at, at, n) \
         UNION ALL \
         SELECT run_id, step_id, $14, NULL, attempt, $1, NULL, $2, \
             cardinality($6::text[]) + row_number() OVER (ORDER BY available_at, run_id, step_id) \
           FROM leased) AS e, ",
    lock_runs!("SELECT run_id FROM leased UNION SELECT unnest($6::text[])"),
    " ORDER BY n) \
     SELECT run_id, step_id, attempt, action, args, timeout_ms, heartbeat_timeout_ms, deadline_at, checkpoint, \
       available_at, successor_action, child_count, args_revision FROM leased ORDER BY available_at, run_id, step_id"
);

/// Marks many steps succeeded under their leases and closes their attempts: one statement whose text does not
/// depend on the batch size (the leases arrive as arrays, one per column), so it is prepared once per connection
/// instead of parsed and planned per batch (a `VALUES` list of 5 parameters per step was). Returns
/// `(run_id, step_id, child_count)` of the steps whose lease was current. Index: the primary keys of steps and
/// attempts.
const SUCCEED_MANY: &str = "WITH v AS (SELECT * FROM UNNEST($2::text[], $3::text[], $4::int8[], $5::text[], $6::text[]) \
       AS v(run_id, step_id, attempt, worker_id, output)), \
     done AS (UPDATE steps SET status = 'succeeded', output = v.output, error = NULL, lease_id = NULL, \
       lease_owner = NULL, lease_expires_at = NULL, finished_at = $1, updated_at = $1 FROM v \
       WHERE steps.run_id = v.run_id AND steps.step_id = v.step_id AND steps.attempt = v.attempt \
       AND (steps.status = 'running') IS TRUE AND steps.lease_owner = v.worker_id \
       RETURNING steps.run_id, steps.step_id, steps.child_count, steps.attempt), \
     closed AS (UPDATE attempts SET status = 'succeeded', ended_at = $1 FROM done \
       WHERE attempts.run_id = done.run_id AND attempts.step_id = done.step_id AND attempts.attempt = done.attempt) \
     SELECT run_id, step_id, child_count FROM done";

/// Appends events in the order given (their `id`s follow it): one prepared text for any number of rows, the
/// columns bound as arrays. Their runs are locked first ([`lock_runs!`]), as [`CLAIM`] does for the events it
/// writes.
const EVENTS_INSERT: &str = concat!(
    "INSERT INTO run_events (run_id, step_id, kind, data, attempt, worker_id, available_at, at) \
     SELECT run_id, step_id, kind, data, attempt, worker_id, available_at, at \
     FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[], $6::text[], $7::int8[], $8::int8[]) \
       WITH ORDINALITY AS e(run_id, step_id, kind, data, attempt, worker_id, available_at, at, n), ",
    lock_runs!("SELECT unnest($1::text[])"),
    " ORDER BY n"
);

/// Runs [`EVENTS_INSERT`].
async fn events_insert(tx: &mut Transaction<'_, Postgres>, events: &[EventInsert]) -> StoreResult<()> {
    if events.is_empty() {
        return Ok(());
    }
    let columns = EventColumns::of(events);
    sqlx::query::<Postgres>(EVENTS_INSERT)
        .bind(columns.runs)
        .bind(columns.steps)
        .bind(columns.kinds)
        .bind(columns.data)
        .bind(columns.attempts)
        .bind(columns.workers)
        .bind(columns.available_at)
        .bind(columns.at)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Events as one array per column, the way [`EVENTS_INSERT`] and [`CLAIM`] bind them.
struct EventColumns<'a> {
    runs: Vec<&'a str>,
    steps: Vec<Option<&'a str>>,
    kinds: Vec<&'a str>,
    data: Vec<Option<&'a str>>,
    attempts: Vec<Option<i64>>,
    workers: Vec<Option<&'a str>>,
    available_at: Vec<Option<i64>>,
    at: Vec<i64>,
}

impl<'a> EventColumns<'a> {
    fn of(events: &'a [EventInsert]) -> Self {
        EventColumns {
            runs: events.iter().map(|e| e.run_id.as_str()).collect(),
            steps: events.iter().map(|e| e.step_id.as_deref()).collect(),
            kinds: events.iter().map(|e| e.kind.as_str()).collect(),
            data: events.iter().map(|e| e.data.as_deref()).collect(),
            attempts: events.iter().map(|e| e.attempt).collect(),
            workers: events.iter().map(|e| e.worker_id.as_deref()).collect(),
            available_at: events.iter().map(|e| e.available_at).collect(),
            at: events.iter().map(|e| e.at).collect(),
        }
    }
}

/// Marks a step succeeded under its lease (fenced like every report), closes its attempt, releases its
/// dependents (the shared release update with `now` in `$6`: the step succeeded) and counts the step against its
/// run: the cascade's first level and the run's counter cost no statement of their own. One row per dependent
/// (NULL dependent columns for a step without any); no row when the lease was not current; NULL counters when
/// the run vanished.
///
/// Lock order: the step, its dependents, then the run, as on every other completion path (the parts of a
/// data-modifying `WITH` have no order of their own, so the run's update reads the release's rows to wait for
/// them; the attempt row is only ever locked after its step row). A step without dependents skips the release
/// with a one-time filter: a plan made without statistics reads the dependents through the `run_id` prefix of
/// the `steps` key (see [`crate::sql`]'s `release!`). Index: the primary keys of steps, attempts, runs and
/// step_edges.
const SUCCEED: &str = concat!(
    "WITH done AS (UPDATE steps SET status = 'succeeded', output = $5, error = NULL, \
       lease_id = NULL, lease_owner = NULL, lease_expires_at = NULL, finished_at = $6, updated_at = $6 \
       WHERE run_id = $1 AND step_id = $2 AND attempt = $3 AND (status = 'running') IS TRUE AND lease_owner = $4 \
       RETURNING child_count), \
     closed AS (UPDATE attempts SET status = 'succeeded', ended_at = $6 \
       WHERE run_id = $1 AND step_id = $2 AND attempt = $3 AND EXISTS (SELECT 1 FROM done)), \
     released AS (UPDATE steps SET ",
    crate::sql::release!(@set "$6", "1"),
    " WHERE EXISTS (SELECT 1 FROM done WHERE child_count <> 0) AND steps.run_id = $1 \
       AND steps.step_id = ANY (ARRAY(SELECT child FROM step_edges WHERE run_id = $1 AND parent = $2)) \
     RETURNING ",
    crate::sql::release!(@returning),
    "), counted AS (UPDATE runs SET open_steps = open_steps - 1, updated_at = $6 \
       WHERE id = $1 AND EXISTS (SELECT 1 FROM done) AND (SELECT COUNT(*) FROM released) >= 0 \
       RETURNING open_steps, failed_steps, cancel_requested) \
     SELECT done.child_count, counted.open_steps, counted.failed_steps, counted.cancel_requested, r.step_id, r.dep_count, \
       r.pending_deps, r.trigger_rule, r.when_expr, r.approval, r.not_before_at, r.status, r.available_at \
     FROM done LEFT JOIN counted ON true LEFT JOIN released r ON true"
);

/// A row of [`SUCCEED`].
#[derive(sqlx::FromRow)]
struct SucceededRow {
    child_count: i64,
    open_steps: Option<i64>,
    failed_steps: Option<i64>,
    cancel_requested: Option<i64>,
    step_id: Option<String>,
    dep_count: Option<i64>,
    pending_deps: Option<i64>,
    trigger_rule: Option<String>,
    when_expr: Option<String>,
    approval: Option<String>,
    not_before_at: Option<i64>,
    status: Option<String>,
    available_at: Option<i64>,
}

impl SucceededRow {
    /// The released dependent of this row, if it names one.
    fn dependent(self) -> Option<ChildRow> {
        Some(ChildRow {
            step_id: self.step_id?,
            dep_count: self.dep_count?,
            pending_deps: self.pending_deps?,
            trigger_rule: self.trigger_rule?,
            when_expr: self.when_expr,
            approval: self.approval,
            not_before_at: self.not_before_at,
            status: self.status?,
            available_at: self.available_at,
        })
    }
}

/// Extends a lease, never past the attempt deadline. Locks the step row. Index: `steps` PK.
const HEARTBEAT: &str = "UPDATE steps SET heartbeat_at = $4, \
     lease_expires_at = LEAST(deadline_at, $4 + COALESCE(heartbeat_timeout_ms, $5)), \
     checkpoint = COALESCE($6, checkpoint), updated_at = $4 \
     WHERE run_id = $1 AND step_id = $2 AND attempt = $3 AND (status = 'running') IS TRUE AND lease_owner = $7 \
     RETURNING lease_expires_at";

/// How write transactions begin: in the same round trip, bitmap scans and sequential scans are turned off
/// until the transaction ends. A write transaction reads and locks rows by key, and the planner's statistics
/// can make it forget that: the claim must walk `steps_ready_idx` in `available_at` order and stop at `LIMIT`,
/// but right after a large submission the statistics still say almost no step is ready, and the planner then
/// preferred a bitmap scan that read every ready row and sorted them (3–5 ms per claim at 10,000 ready steps
/// instead of 0.3 ms, measured with EXPLAIN ANALYZE); and a prepared statement's generic plan, made while the
/// tables were small, scanned `steps` whole and stayed so as they grew (several ms per release). With both off
/// the planner takes an index whenever one applies (a statement no index serves still scans: the settings only
/// make those plans look expensive), so the write statements can be prepared once per connection.
///
/// Joins are nested loops for the same reason (merge and hash joins off, nested loops on whatever the session
/// says): every join in a write transaction is a batch of keys against a table's key, and a plan that hashed or
/// merged instead read the whole index on every execution (the batch success, `SUCCEED_MANY`, read all 20,003
/// entries of `steps_pkey` to succeed one step when the planner was steered away from nested loops, as a
/// generic plan made while the tables were small can be; the leaf call's cached plan did so in
/// `cairn bench dispatch`, migration 0007). `postgres/plans.rs` counts the entries such statements read. Left:
/// statistics from a manual `ANALYZE` of a nearly empty table (a handful of rows; autovacuum analyses only after
/// 50 changed rows) can still make a nested loop walk the table as its outer side.
const BEGIN: &str = "BEGIN; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_seqscan = off; \
     SET LOCAL enable_mergejoin = off; SET LOCAL enable_hashjoin = off; SET LOCAL enable_nestloop = on";

/// Running steps with an expired lease ([`crate::sql::expired_select`]), locked so two reapers split the work.
const EXPIRED: &str = crate::sql::expired_select!("LIMIT $2 FOR UPDATE SKIP LOCKED");

impl DialectTx for Transaction<'_, Postgres> {
    async fn claim(
        &mut self,
        req: &ClaimRequest,
        lease_ttl_ms: i64,
        _running: &HashSet<&str>,
        events: &mut Vec<EventInsert>,
    ) -> StoreResult<Vec<ClaimedRow>> {
        // Relies on the plan `BEGIN` forces (no bitmap scan). Runs already running cost no round trip here.
        let queued = EventColumns::of(events);
        let rows = sqlx::query_as::<Postgres, ClaimedRow>(CLAIM)
            .bind(&req.worker_id)
            .bind(req.now_ms)
            .bind(lease_ttl_ms)
            .bind(&req.actions)
            .bind(i64::from(req.limit))
            .bind(queued.runs)
            .bind(queued.steps)
            .bind(queued.kinds)
            .bind(queued.data)
            .bind(queued.attempts)
            .bind(queued.workers)
            .bind(queued.available_at)
            .bind(queued.at)
            .bind(EventKind::StepStarted.as_str())
            .fetch_all(&mut **self)
            .await?;
        // Written by the statement: the commit must not write them again.
        events.clear();
        Ok(rows)
    }

    async fn succeed(&mut self, lease: &Lease, output: &str, now: i64) -> StoreResult<Option<StepSucceeded>> {
        let rows = sqlx::query_as::<Postgres, SucceededRow>(SUCCEED)
            .bind(&lease.run_id)
            .bind(&lease.step_id)
            .bind(i64::from(lease.attempt))
            .bind(&lease.worker_id)
            .bind(output)
            .bind(now)
            .fetch_all(&mut **self)
            .await?;
        let Some(first) = rows.first() else { return Ok(None) };
        let counters = first.open_steps.zip(first.failed_steps).zip(first.cancel_requested);
        let child_count = first.child_count;
        let run_counter = counters.map(|((open, failed), cancel)| crate::rows::run_counters((open, failed, cancel)));
        let released = rows.into_iter().filter_map(SucceededRow::dependent).collect();
        Ok(Some(StepSucceeded { child_count, run_counter, released: Some(released) }))
    }

    async fn succeed_many(&mut self, done: &[(&Lease, &str)], now: i64) -> StoreResult<Vec<(String, String, i64)>> {
        let runs: Vec<&str> = done.iter().map(|(l, _)| l.run_id.as_str()).collect();
        let steps: Vec<&str> = done.iter().map(|(l, _)| l.step_id.as_str()).collect();
        let attempts: Vec<i64> = done.iter().map(|(l, _)| i64::from(l.attempt)).collect();
        let workers: Vec<&str> = done.iter().map(|(l, _)| l.worker_id.as_str()).collect();
        let outputs: Vec<&str> = done.iter().map(|(_, output)| *output).collect();
        Ok(sqlx::query_as::<Postgres, (String, String, i64)>(SUCCEED_MANY)
            .bind(now)
            .bind(runs)
            .bind(steps)
            .bind(attempts)
            .bind(workers)
            .bind(outputs)
            .fetch_all(&mut **self)
            .await?)
    }

    async fn heartbeat(
        &mut self,
        lease: &Lease,
        checkpoint: Option<&str>,
        lease_ttl_ms: i64,
        now: i64,
    ) -> StoreResult<HeartbeatOutcome> {
        let expires = sqlx::query_scalar::<Postgres, i64>(HEARTBEAT)
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
        Ok(sqlx::query_as::<Postgres, LeasedRow>(EXPIRED).bind(now).bind(limit).fetch_all(&mut **self).await?)
    }
}

/// Runs `attempt` (one statement on the connection of `pool` it is given) within the answer deadline, again while
/// it fails because the connection was closed, up to once per pooled connection: after a database restart or
/// ended sessions the pool still holds dead connections, which sqlx drops as each one fails. A connection that
/// gave no answer is not tried again on another: the next would likely wait out the same deadline. Each
/// connection is closed after its try, never handed back: on a cut, sqlx's ping of a returned connection would
/// wait until the kernel gives up (`postgres/deadline.rs`), and this runs only after a connection was lost. Only
/// for work that a closed connection cannot have half applied (a read).
pub(crate) async fn on_a_live_connection<T, F: Future<Output = Result<T, sqlx::Error>>>(
    pool: &PgPool,
    mut attempt: impl FnMut(PoolConnection<Postgres>) -> F,
) -> Result<T, sqlx::Error> {
    let limit = deadline::answer_deadline(pool);
    let mut tries = 0;
    loop {
        tries += 1;
        let mut connection = pool.acquire().await?;
        connection.close_on_drop();
        let answer = tokio::time::timeout(limit, attempt(connection)).await;
        match answer.unwrap_or_else(|_| Err(deadline::no_answer(limit))) {
            Err(e) if tries <= MAX_CONNECTIONS && lost_connection(&e) && !deadline::is_no_answer(&e) => {
                tracing::debug!(error = %e, tries, "a pooled connection was closed; trying another");
            }
            other => return other,
        }
    }
}

/// Begins a write transaction (see [`BEGIN`]) on the connection `held`, first taking one from `pool` when none is
/// held. The error is sqlx's own, so the caller can tell a connection that was already closed at `BEGIN`
/// ([`lost_connection`]: nothing was applied; drop it and begin again) from another failure.
pub(crate) async fn begin_on<'c>(
    held: &'c mut Option<PoolConnection<Postgres>>,
    pool: &PgPool,
) -> Result<Transaction<'c, Postgres>, sqlx::Error> {
    let connection = match held {
        Some(connection) => connection,
        None => held.insert(pool.acquire().await?),
    };
    connection.begin_with(BEGIN).await
}

/// Whether `e` says the connection itself is gone (not that the database refused something).
pub(crate) fn lost_connection(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Io(_))
        || matches!(e, sqlx::Error::Database(db) if db.code().is_some_and(|c| c.starts_with("57P")))
}

/// Size of the connection pool (the orchestrator's batch writer and its listener to other orchestrators each
/// hold one).
pub(crate) const MAX_CONNECTIONS: u32 = 16;

/// A pooled connection idle longer than this is pinged before it is handed out.
pub(crate) const PING_AFTER_IDLE: Duration = Duration::from_secs(1);

/// Longest wait for a ping's answer (at most the answer deadline). Past it the connection is closed and another
/// one taken: an idle backend answers a ping at once, so a silent one is cut off, and one cut connection then
/// costs this, not a whole answer deadline.
const PING_DEADLINE: Duration = Duration::from_secs(2);

/// Pings `connection` within [`PING_DEADLINE`] (or `pool`'s answer deadline, if shorter).
pub(crate) async fn ping_within_deadline(connection: &mut PgConnection, pool: &PgPool) -> Result<(), sqlx::Error> {
    ping_within(connection, PING_DEADLINE.min(deadline::answer_deadline(pool))).await
}

async fn ping_within(connection: &mut PgConnection, limit: Duration) -> Result<(), sqlx::Error> {
    tokio::time::timeout(limit, connection.ping()).await.unwrap_or_else(|_| Err(deadline::no_answer(limit)))
}

/// Connects to PostgreSQL, waiting at most `answer_deadline` for a connection and, in every transaction, read
/// and batch, for an answer ([`deadline`]).
pub(crate) async fn connect(url: &str, answer_deadline: Duration) -> StoreResult<PgPool> {
    let idle_in_transaction = deadline::idle_in_transaction_setting(answer_deadline);
    // Pinged before use only after an idle second (see `deadline::in_transaction`): a busy connection skips the
    // round trip, one that sat idle through a database restart is found dead and replaced before any statement
    // uses it.
    let pool = PgPoolOptions::new()
        .max_connections(MAX_CONNECTIONS)
        .acquire_timeout(answer_deadline)
        .test_before_acquire(false)
        .after_connect(move |conn, _| {
            let setting = idle_in_transaction.clone();
            Box::pin(async move {
                sqlx::Executor::execute(conn, sqlx::raw_sql(sqlx::AssertSqlSafe(setting))).await?;
                Ok(())
            })
        })
        .before_acquire(move |conn, meta| {
            Box::pin(async move {
                if meta.idle_for > PING_AFTER_IDLE {
                    // An error closes this connection and the pool hands out another.
                    ping_within(conn, PING_DEADLINE.min(answer_deadline)).await?;
                }
                Ok(true)
            })
        })
        .connect(url)
        .await?;
    Ok(pool)
}
