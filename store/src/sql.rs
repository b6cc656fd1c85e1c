//! SQL shared by both backends (`$N` parameters work in PostgreSQL and in SQLite through sqlx).
//!
//! Each statement says what it locks and which index serves it. Dialect-specific statements (claim, lease
//! arithmetic) live in `sqlite.rs` and `postgres.rs`.
//!
//! A statement that finds `steps` or `runs` rows by key and also checks a status an index is built on (for
//! `steps`, the partial indexes' `'ready'`, `'running'` and `'waiting_approval'`; for `runs`, any status, the
//! first column of `runs_status_created_idx`) writes the check as `(status = '…') IS TRUE` (the same test:
//! `status` is never NULL), a form no index can serve, so the key's index is the only one the plan can use.
//! Written `status = 'running'`, the check also matches the predicate of the partial index `steps_lease_idx`
//! (and `'pending'` the leading column of `runs_status_created_idx`):
//! PostgreSQL's generic plan for a prepared statement, made from statistics taken while few steps were running,
//! walked that index through every running step and filtered on the key — one completion reading 5,000 index
//! entries once 5,000 steps were running — until the next `ANALYZE` (`postgres/plans.rs` checks the plans).

/// The columns of [`crate::rows::RunRow`], of table `runs` (`(r)`: aliased `r`).
macro_rules! run_columns {
    () => {
        "id, plan_id, status, input, step_count, open_steps, failure, created_at, finished_at, rerun_of, goal, labels"
    };
    (r) => {
        "r.id, r.plan_id, r.status, r.input, r.step_count, r.open_steps, r.failure, r.created_at, r.finished_at, \
         r.rerun_of, r.goal, r.labels"
    };
}
pub(crate) use run_columns;

/// The claim rule of a paused run (`POST /v1/runs/{id}:pause`): no new attempt of its steps starts. Every claim
/// statement leaves out the runs this lists (PL/pgSQL's `cairn_complete_leaves_and_claim` spells it too, and
/// `cairn_complete_and_claim` leaves a paused run to the general path). Index: `runs_status_created_idx` (with no
/// paused run, one empty probe per statement).
macro_rules! unpaused {
    () => {
        "run_id NOT IN (SELECT id FROM runs WHERE status = 'paused')"
    };
}
pub(crate) use unpaused;

/// Running steps whose lease expired by `$1` (at most `$2` of them, earliest first), for the reaper; `$tail` ends
/// the statement per dialect (row locks on PostgreSQL). A lease that expired because it reached the attempt's
/// deadline counts only once the attempt has outlived `timeout_ms` by a tenth more: the worker enforces
/// `timeout_ms` itself and reports `timeout`, and the orchestrator's clock may run up to 10 % fast while it
/// catches up with a step of its reference (`cairn_orchestrator::clock`), so the backstop must not fire early.
/// Index: `steps_lease_idx`.
macro_rules! expired_select {
    ($tail:literal) => {
        concat!(
            "SELECT run_id, step_id, attempt, attempt_base, action, idempotent, retry, lease_owner, started_at, ",
            "deadline_at, ",
            "heartbeat_timeout_ms, lease_expires_at FROM steps WHERE status = 'running' AND lease_expires_at <= $1 ",
            "AND (deadline_at IS NULL OR lease_expires_at < deadline_at OR deadline_at + timeout_ms / 10 <= $1) ",
            "ORDER BY lease_expires_at ",
            $tail
        )
    };
}
pub(crate) use expired_select;

/// A run's plan. Index: `runs` PK, `plans` PK.
pub(crate) const RUN_PLAN: &str = "SELECT p.body FROM runs r JOIN plans p ON p.id = r.plan_id WHERE r.id = $1";

/// Run by idempotency key. Index: `runs.idempotency_key` UNIQUE.
pub(crate) const RUN_BY_KEY: &str = "SELECT r.id, r.plan_id, r.input, p.body FROM runs r \
     JOIN plans p ON p.id = r.plan_id WHERE r.idempotency_key = $1";

/// Insert a plan unless its content hash is already stored. Index: `plans` PK.
pub(crate) const PLAN_INSERT: &str =
    "INSERT INTO plans (id, body, created_at) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING";

/// Mark runs running on their first claim. Locks the run row. Index: `runs` PK.
pub(crate) const RUN_MARK_RUNNING: &str =
    "UPDATE runs SET status = 'running', updated_at = $2 WHERE id = $1 AND (status = 'pending') IS TRUE";

/// The running step under a lease. Index: `steps` PK.
pub(crate) const STEP_LEASED: &str = "SELECT run_id, step_id, attempt, attempt_base, action, idempotent, retry, lease_owner, \
     started_at, deadline_at, heartbeat_timeout_ms, lease_expires_at FROM steps \
     WHERE run_id = $1 AND step_id = $2 AND attempt = $3 AND (status = 'running') IS TRUE";

/// Finish a leased step (succeeded, failed, outcome_unknown). Locks the step row; fenced by attempt and status.
pub(crate) const STEP_FINISH: &str = "UPDATE steps SET status = $4, output = $5, error = $6, lease_id = NULL, \
     lease_owner = NULL, lease_expires_at = NULL, finished_at = $7, updated_at = $7 \
     WHERE run_id = $1 AND step_id = $2 AND attempt = $3 AND (status = 'running') IS TRUE";

/// Accept a result: the lease check and the update in one statement (fenced by attempt, status and owner), so a
/// completion costs one round trip instead of a read and a write. Locks the step row.
pub(crate) const STEP_SUCCEED: &str = "UPDATE steps SET status = 'succeeded', output = $5, error = NULL, \
     lease_id = NULL, lease_owner = NULL, lease_expires_at = NULL, finished_at = $6, updated_at = $6 \
     WHERE run_id = $1 AND step_id = $2 AND attempt = $3 AND (status = 'running') IS TRUE AND lease_owner = $4 \
     RETURNING child_count";

/// Undo a claim whose attempt never started (never reached a worker, or returned unstarted): back to ready, due
/// now, the attempt number given back. Fenced like STEP_SUCCEED.
pub(crate) const STEP_UNCLAIM: &str = "UPDATE steps SET status = 'ready', attempt = attempt - 1, \
     lease_id = NULL, lease_owner = NULL, lease_expires_at = NULL, deadline_at = NULL, started_at = NULL, \
     heartbeat_at = NULL, available_at = $5, updated_at = $5 \
     WHERE run_id = $1 AND step_id = $2 AND attempt = $3 AND (status = 'running') IS TRUE AND lease_owner = $4";

/// The attempt row of an undone claim. Index: `attempts` PK.
pub(crate) const ATTEMPT_DELETE: &str =
    "DELETE FROM attempts WHERE run_id = $1 AND step_id = $2 AND attempt = $3 AND status = 'running'";

/// Put a leased step back to ready for a retry at `available_at`. Locks the step row; fenced like STEP_FINISH.
pub(crate) const STEP_REQUEUE: &str = "UPDATE steps SET status = 'ready', available_at = $4, error = $5, \
     lease_id = NULL, lease_owner = NULL, lease_expires_at = NULL, updated_at = $6 \
     WHERE run_id = $1 AND step_id = $2 AND attempt = $3 AND (status = 'running') IS TRUE";

/// Close an attempt with its outcome and failure record. Index: `attempts` PK.
pub(crate) const ATTEMPT_CLOSE: &str = "UPDATE attempts SET status = $4, ended_at = $5, failure_code = $6, \
     failure_message = $7, failure_details = $8, retryable = $9, retry_after_ms = $10, suggestion = $11, \
     degraded = $12 WHERE run_id = $1 AND step_id = $2 AND attempt = $3";

/// Statuses of the dependencies of `child`. Index: `step_edges_child_idx`, then `steps` PK.
pub(crate) const PARENT_STATUSES: &str = "SELECT s.status FROM step_edges e JOIN steps s \
     ON s.run_id = e.run_id AND s.step_id = e.parent WHERE e.run_id = $1 AND e.child = $2";

/// The release statement with `$parents`, the dialect's test that `parent` is one of `$2`, and `$children`,
/// its join of `steps.step_id` to the children in `d`. Binds: `$1` run id, `$2` the parents, `$3`
/// `now` when every parent succeeded (else NULL). Decrements each dependent by how many of the parents it
/// depends on and, with `$3`, makes ready a dependent that has nothing else to decide: all its dependencies are
/// among these parents (`pending_deps` and `dep_count` both equal to their number: none finished earlier, so none
/// failed or was skipped) and it starts by itself (`steps.starts_itself`, the fact `cairn_core::machine` computed
/// at submission). It compares counters and that flag only; every other dependent whose counter reaches zero is
/// decided in Rust by `cairn_core::machine::decide` (see `StepTx::children_release`). A cancelled step's
/// counter is 0 (`STEPS_CANCEL`), so no release makes it ready. Locks each dependent row. Index: `step_edges` PK (run_id, parent), then `steps`
/// PK (run_id, step_id) with the children's ids.
///
/// `MATERIALIZED`: the counts are computed once; inlined, with no statistics yet (a new database, a large first
/// submission), PostgreSQL joined every step of the run to the aggregate and ran it once per step (4–13 ms per
/// release in a 200-step run, against 0.5 ms). The children's ids are also given to the `steps` lookup as a
/// list computed first (`$children`) so that a plan made with statistics looks them up by full key. Without
/// statistics (a new database before its first autoanalyze) PostgreSQL estimates one row for any `run_id` and
/// may still read the run's steps by that key prefix and filter them: a cost per release that grows with the
/// run, until the statistics exist and the cached plan is replaced.
macro_rules! release {
    ($parents:literal, $children:literal) => {
        concat!(
            "WITH d AS MATERIALIZED (SELECT child, COUNT(*) AS n FROM step_edges WHERE run_id = $1 AND ",
            $parents,
            " GROUP BY child) UPDATE steps SET ",
            $crate::sql::release!(@set "$3", "d.n"),
            " FROM d WHERE steps.run_id = $1 AND ",
            $children,
            " RETURNING ",
            $crate::sql::release!(@returning)
        )
    };
    // The assignments of a release: `$now` is the parameter holding `now` when every parent succeeded (else
    // NULL), `$n` how many of the released parents the row depends on. Shared with PostgreSQL's success
    // statement, which releases in the same statement.
    (@set $now:literal, $n:literal) => {
        concat!(
            "pending_deps = steps.pending_deps - ", $n, ", \
             status = CASE WHEN ", $crate::sql::release!(@ready $now, $n), " THEN 'ready' ELSE steps.status END, \
             available_at = CASE WHEN ", $crate::sql::release!(@ready $now, $n), " THEN CASE WHEN steps.not_before_at > ",
            $now, " THEN steps.not_before_at ELSE ", $now, " END ELSE steps.available_at END, \
             updated_at = CASE WHEN ", $crate::sql::release!(@ready $now, $n), " THEN ", $now, " ELSE steps.updated_at END"
        )
    };
    (@ready $now:literal, $n:literal) => {
        concat!(
            $now, " IS NOT NULL AND steps.pending_deps = ", $n, " AND steps.dep_count = ", $n,
            " AND steps.starts_itself = 1"
        )
    };
    (@returning) => {
        "steps.step_id, steps.dep_count, steps.pending_deps, steps.trigger_rule, steps.when_expr, steps.approval, \
         steps.not_before_at, steps.status, steps.available_at"
    };
}
pub(crate) use release;

/// [`release!`] for SQLite: the parents as a JSON array of ids; the children are looked up by key from the join.
pub(crate) const RELEASE_SQLITE: &str =
    release!("parent IN (SELECT value FROM json_each($2))", "steps.step_id = d.child");

/// [`release!`] for PostgreSQL: the parents as a `TEXT[]`; the children as an array computed before the lookup.
pub(crate) const RELEASE_POSTGRES: &str =
    release!("parent = ANY($2)", "steps.step_id = ANY (ARRAY(SELECT child FROM d)) AND steps.step_id = d.child");

/// Decide a pending step: ready (with `available_at`), skipped, failed or waiting_approval. Fenced on pending.
pub(crate) const STEP_DECIDE: &str = "UPDATE steps SET status = $3, available_at = $4, error = $5, \
     finished_at = $6, updated_at = $7 WHERE run_id = $1 AND step_id = $2 AND status = 'pending'";

/// Count final steps (`$2`, of which `$3` failed) against the run and return its counters
/// (`cairn_core::machine::RunCounters`). Locks the run row (serialises run completion).
pub(crate) const RUN_CLOSE_STEPS: &str = "UPDATE runs SET open_steps = open_steps - $2, \
     failed_steps = failed_steps + $3, updated_at = $4 WHERE id = $1 \
     RETURNING open_steps, failed_steps, cancel_requested";

/// Failed steps of a run (once, when it finishes failed, to name the root cause). Index: `steps` PK prefix.
pub(crate) const RUN_FAILED_STEPS: &str =
    "SELECT step_id, error FROM steps WHERE run_id = $1 AND status = 'failed' ORDER BY position";

/// Finish a run unless it already finished. Locks the run row.
pub(crate) const RUN_FINISH: &str = "UPDATE runs SET status = $2, failure = $3, finished_at = $4, updated_at = $4 \
     WHERE id = $1 AND (status IN ('pending', 'running', 'paused')) IS TRUE";

/// The run input (for `when`). Index: `runs` PK.
pub(crate) const RUN_INPUT: &str = "SELECT input FROM runs WHERE id = $1";

/// Request cancellation of a run. Locks the run row.
pub(crate) const RUN_CANCEL: &str = "UPDATE runs SET status = 'cancelled', cancel_requested = 1, open_steps = 0, \
     finished_at = $2, updated_at = $2 WHERE id = $1 AND (status IN ('pending', 'running', 'paused')) IS TRUE";

/// Cancel every open step of a run, including ready steps waiting on a timer or a retry backoff and running steps
/// (their leases end: late reports are ignored, heartbeats answer "gone"). Index: `steps` PK prefix.
pub(crate) const STEPS_CANCEL: &str = "UPDATE steps SET status = 'cancelled', pending_deps = 0, lease_id = NULL, \
     lease_owner = NULL, lease_expires_at = NULL, finished_at = $2, updated_at = $2 WHERE run_id = $1 \
     AND status IN ('pending', 'ready', 'running', 'waiting_approval', 'outcome_unknown') RETURNING step_id, attempt, position";

/// Close the running attempts of a cancelled run. Index: `attempts` PK prefix.
pub(crate) const ATTEMPTS_CANCEL: &str = "UPDATE attempts SET status = 'failed', ended_at = $2, \
     failure_code = 'cancelled', failure_message = 'the run was cancelled', retryable = 0, suggestion = 'skip', \
     degraded = 0 WHERE run_id = $1 AND status = 'running'";

/// End the event waits of a cancelled run, whose `event.wait` attempts [`ATTEMPTS_CANCEL`] closed: a wait row
/// belongs to its attempt, and one left behind is a timer (its deadline) on a final step. Index: `event_waits`
/// PK prefix.
pub(crate) const WAITS_CANCEL: &str = "DELETE FROM event_waits WHERE run_id = $1";

/// Operator decision on a step parked as outcome_unknown (or waiting approval). Fenced on the expected status.
/// A step made ready is due at `$5` or at its `not_before` timer, whichever is later: an approval given before
/// the timer must not let the step run early. Locks the step row. Index: `steps` PK.
pub(crate) const STEP_OPERATOR: &str = "UPDATE steps SET status = $4, \
     available_at = CASE WHEN $5 IS NOT NULL AND not_before_at > $5 THEN not_before_at ELSE $5 END, \
     finished_at = $6, updated_at = $7 WHERE run_id = $1 AND step_id = $2 AND status = $3";

/// Status and output of the named steps. Index: `steps` PK.
pub(crate) const STEP_STATE: &str = "SELECT step_id, status, output FROM steps WHERE run_id = $1 AND step_id = $2";

/// One run. Index: `runs` PK.
pub(crate) const RUN_GET: &str = concat!("SELECT ", run_columns!(), " FROM runs WHERE id = $1");

/// Steps of a run in plan order. Index: `steps` PK prefix.
pub(crate) const STEPS_OF_RUN: &str = "SELECT step_id, action, status, attempt, output, error, available_at, \
     not_before_at, not_before_local, checkpoint, args_revision, args, started_at, finished_at FROM steps \
     WHERE run_id = $1 ORDER BY position";

/// Attempts of a run. Index: `attempts` PK prefix.
pub(crate) const ATTEMPTS_OF_RUN: &str = "SELECT step_id, attempt, worker_id, status, started_at, ended_at, \
     failure_code, failure_message, failure_details, retryable, retry_after_ms, suggestion, degraded, action \
     FROM attempts WHERE run_id = $1 ORDER BY step_id, attempt";

/// Events of a run after a sequence number. Index: `run_events_pkey` on PostgreSQL, `run_events_run_idx` on
/// SQLite.
pub(crate) const EVENTS_OF_RUN: &str = "SELECT id, step_id, kind, data, attempt, worker_id, available_at, at FROM run_events WHERE run_id = $1 AND id > $2 ORDER BY id LIMIT $3 + 0";

/// Number of step rows of a run (integrity check). Index: `steps` PK prefix.
pub(crate) const STEP_ROWS: &str = "SELECT COUNT(*) FROM steps WHERE run_id = $1";

/// Open runs after the key `($1 created_at, $2 id)`, in key order (for the integrity check at start-up). Keyset
/// paging, not OFFSET: the check fails broken runs as it goes, which removes them from this set, so an offset
/// would skip as many open runs as were failed on the previous page. Index: `runs_status_created_idx`.
pub(crate) const OPEN_RUNS: &str = "SELECT id, step_count, created_at FROM runs WHERE status IN ('pending', 'running', 'paused') \
     AND (created_at > $1 OR (created_at = $1 AND id > $2)) ORDER BY created_at, id LIMIT $3 + 0";

/// Register or refresh a worker. Index: `workers` PK.
pub(crate) const WORKER_UPSERT: &str = "INSERT INTO workers (id, actions, registered_at, last_seen_at) \
     VALUES ($1, $2, $3, $3) ON CONFLICT (id) DO UPDATE SET actions = excluded.actions, last_seen_at = excluded.last_seen_at";

/// Earliest due time of a ready step (for the dispatcher's sleep). `event.wait` steps are started by the
/// orchestrator's waiting loop, never claimed by workers, so they do not count; nor do paused runs' steps, which
/// no claim takes. Index: `steps_ready_idx`.
pub(crate) const NEXT_DUE: &str =
    concat!("SELECT MIN(available_at) FROM steps WHERE status = 'ready' AND action <> 'event.wait' AND ", unpaused!());
