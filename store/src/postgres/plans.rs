//! The plans PostgreSQL makes for the hot statements when its statistics are stale: a prepared statement
//! switches to a generic plan built from the statistics of the moment and keeps it until the next `ANALYZE` of
//! its tables (see `crate::sql` on writing status checks as `IS TRUE`).

use sqlx::pool::PoolConnection;
use sqlx::{Connection, PgConnection, PgPool, Postgres};

use super::runs::{RUNS_CLOSE_STEPS, RUNS_FAILED_STEPS, RUNS_SUCCEED};
use super::{BEGIN, CLAIM, SUCCEED, SUCCEED_MANY};
use crate::Store;

/// Runs `setup` on a migrated database, then, inside a write transaction (so with [`BEGIN`]'s settings) and
/// with generic plans forced, runs `prepare` (a `PREPARE` with the parameter types sqlx binds) and `explain` (an
/// `EXPLAIN (FORMAT JSON) EXECUTE`), and returns the names of the indexes the plan reads, in plan order.
async fn generic_plan_indexes(
    pool: &PgPool,
    setup: &[&'static str],
    prepare: String,
    explain: &'static str,
) -> Vec<String> {
    let mut conn = set_up(pool, setup).await;
    let plan = generic_plan(&mut conn, prepare, explain).await;
    let mut names = Vec::new();
    collect_indexes(&plan, &mut names);
    names
}

/// Migrates the database, runs `setup` and returns the connection it ran on.
async fn set_up(pool: &PgPool, setup: &[&'static str]) -> PoolConnection<Postgres> {
    Store::Postgres(pool.clone()).migrate().await.expect("migrations apply");
    let mut conn: PoolConnection<Postgres> = pool.acquire().await.expect("a connection");
    for sql in setup {
        sqlx::raw_sql(*sql).execute(&mut *conn).await.expect(sql);
    }
    conn
}

/// `prepare` then `explain` (as [`generic_plan_indexes`] says) in a write transaction with generic plans forced,
/// rolled back; the plan as `EXPLAIN (FORMAT JSON)` gives it.
async fn generic_plan(conn: &mut PgConnection, prepare: String, explain: &'static str) -> serde_json::Value {
    let mut tx = conn.begin_with(BEGIN).await.expect("a write transaction");
    sqlx::raw_sql("SET LOCAL plan_cache_mode = force_generic_plan").execute(&mut *tx).await.expect("generic");
    sqlx::raw_sql(sqlx::AssertSqlSafe(prepare)).execute(&mut *tx).await.expect("the statement prepares");
    let plan = sqlx::query_scalar(explain).fetch_one(&mut *tx).await.expect("explained");
    tx.rollback().await.expect("rolled back");
    plan
}

/// Every `"Index Name"` in an `EXPLAIN (FORMAT JSON)` plan, in plan order.
fn collect_indexes(node: &serde_json::Value, names: &mut Vec<String>) {
    match node {
        serde_json::Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("Index Name", serde_json::Value::String(name)) => names.push(name.clone()),
                    _ => collect_indexes(value, names),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|item| collect_indexes(item, names)),
        _ => {}
    }
}

/// 5,000 runs and, for the tests that need them, one `succeeded` step each; each test analyses them, then moves
/// them to another status without a new `ANALYZE`.
const STALE_RUNS: [&str; 3] = [
    "INSERT INTO plans (id, body, created_at) VALUES ('p', '{}', 0)",
    "INSERT INTO runs (id, plan_id, status, input, context, step_count, open_steps, created_at, updated_at) \
     SELECT 'r' || g, 'p', 'succeeded', '{}', '{}', 1, 1, g, g FROM generate_series(1, 5000) AS g",
    "INSERT INTO steps (run_id, step_id, position, action, status, args, trigger_rule, idempotent, timeout_ms, \
     retry, dep_count, pending_deps, attempt, updated_at, child_count) \
     SELECT 'r' || g, 's', 0, 'noop', 'succeeded', '{}', 'all_success', 1, 1000, '{}', 0, 0, 1, 0, 0 \
     FROM generate_series(1, 5000) AS g",
];

/// [`STALE_RUNS`] with their steps, analysed while every run had finished, then every run moved to `running`.
const STALE_RUNNING: [&str; 6] = [
    STALE_RUNS[0],
    STALE_RUNS[1],
    STALE_RUNS[2],
    "ANALYZE runs",
    "ANALYZE steps",
    "UPDATE runs SET status = 'running'",
];

/// With statistics taken when no run was pending and 5,000 pending now (a backlog of submissions the workers
/// have not reached), the claim's generic plan must find the runs it starts by key, never by walking
/// `runs_status_created_idx` through every pending run (3,000 of them made each claim 16–130 ms).
#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
async fn the_claims_generic_plan_starts_runs_by_key_whatever_the_statistics_say(pool: PgPool) {
    let setup = [STALE_RUNS[0], STALE_RUNS[1], "ANALYZE runs", "ANALYZE steps", "UPDATE runs SET status = 'pending'"];
    let prepare = format!(
        "PREPARE claim(text, int8, int8, text[], int8, text[], text[], text[], text[], int8[], text[], int8[], int8[], text) AS {CLAIM}"
    );
    let explain = "EXPLAIN (FORMAT JSON) EXECUTE claim('w', 0, 30000, '{noop}', 16, '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', 'k')";

    let indexes = generic_plan_indexes(&pool, &setup, prepare, explain).await;

    // The events' run lock reads `runs` by key in any case: count the reads of `runs` by index. The paused runs
    // it leaves out (`crate::sql::unpaused!`) are read once per statement from the status index's `paused`
    // entries, which a backlog of pending runs does not lengthen.
    let of_runs: Vec<&str> = indexes.iter().map(String::as_str).filter(|i| i.starts_with("runs_")).collect();
    let expected = ["runs_status_created_idx", "runs_pkey", "runs_pkey"];
    assert_eq!(of_runs, expected, "the paused runs, then the runs it starts and the runs it locks, both by key");
}

/// With statistics taken when no step was running and 5,000 running now (long actions in flight), a completion
/// must find its step, attempt and run by key, never by walking `steps_lease_idx` through every running step.
#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
async fn the_completions_generic_plan_reads_by_key_whatever_the_statistics_say(pool: PgPool) {
    let mut setup = STALE_RUNNING.to_vec();
    setup.push("UPDATE steps SET status = 'running', lease_owner = 'w', lease_expires_at = 5");
    let prepare = format!("PREPARE succeed(text, text, int8, text, text, int8) AS {SUCCEED}");
    let explain = "EXPLAIN (FORMAT JSON) EXECUTE succeed('r7', 's', 1, 'w', '{}', 10)";

    let indexes = generic_plan_indexes(&pool, &setup, prepare, explain).await;

    assert!(!indexes.is_empty(), "the plan reads indexes");
    let by_key = ["steps_pkey", "attempts_pkey", "step_edges_pkey", "runs_pkey"];
    assert!(indexes.iter().all(|i| by_key.contains(&i.as_str())), "every read is by key: {indexes:?}");
}

/// `n` runs `{prefix}1…{prefix}n` of plan `p` (which must exist), each `running` with one step `s` of
/// `step_status`, due at the run's number.
fn runs_with_a_step(prefix: &str, n: u32, step_status: &str) -> [String; 2] {
    [
        format!(
            "INSERT INTO runs (id, plan_id, status, input, context, step_count, open_steps, created_at, updated_at) \
             SELECT '{prefix}' || g, 'p', 'running', '{{}}', '{{}}', 1, 1, g, g FROM generate_series(1, {n}) AS g"
        ),
        format!(
            "INSERT INTO steps (run_id, step_id, position, action, status, args, trigger_rule, idempotent, \
             timeout_ms, retry, dep_count, pending_deps, attempt, available_at, updated_at, child_count) \
             SELECT '{prefix}' || g, 's', 0, 'noop', '{step_status}', '{{}}', 'all_success', 1, 1000, '{{}}', 0, 0, \
             0, g, 0, 0 FROM generate_series(1, {n}) AS g"
        ),
    ]
}

/// Entries of the index `index` that index scans returned in the current transaction so far.
async fn entries_read(conn: &mut PgConnection, index: &str) -> i64 {
    sqlx::query_scalar("SELECT pg_stat_get_xact_tuples_returned($1::regclass)")
        .bind(index)
        .fetch_one(conn)
        .await
        .expect("the transaction's index statistics")
}

/// 20,000 finished runs (`grown1…`) and two with a ready `noop` step (`zz1`, `zz2`, which sort after them), on a
/// connection whose planner avoids nested loops: the plan a statement may get from statistics taken while
/// `runs` was small (a merge join over all of `runs_pkey` was seen in `cairn bench dispatch`, made when a
/// session's plans were cached early and kept while the table grew to 11,000 runs).
async fn runs_and_a_planner_that_avoids_nested_loops(pool: &PgPool) -> PoolConnection<Postgres> {
    Store::Postgres(pool.clone()).migrate().await.expect("migrations apply");
    let [grown_runs, grown_steps] = runs_with_a_step("grown", 20_000, "succeeded");
    let [ready_runs, ready_steps] = runs_with_a_step("zz", 2, "ready");
    for sql in [STALE_RUNS[0].to_string(), grown_runs, grown_steps, ready_runs, ready_steps] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(pool).await.expect("setup");
    }
    let mut conn = pool.acquire().await.expect("a connection");
    sqlx::raw_sql("SET enable_nestloop = off").execute(&mut *conn).await.expect("nested loops avoided");
    conn
}

/// The general claim locks the runs of its events by key (`lock_runs!`), whatever join the planner prefers: even
/// with merge and hash joins allowed and nested loops avoided inside the transaction (undoing what [`BEGIN`]
/// sets), so that this checks the lock's own form.
#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
async fn the_claim_locks_runs_by_key_whatever_join_the_planner_prefers(pool: PgPool) {
    let mut conn = runs_and_a_planner_that_avoids_nested_loops(&pool).await;
    let mut tx = conn.begin_with(BEGIN).await.expect("a write transaction");
    sqlx::raw_sql("SET LOCAL enable_nestloop = off; SET LOCAL enable_mergejoin = on; SET LOCAL enable_hashjoin = on")
        .execute(&mut *tx)
        .await
        .expect("joins other than nested loops preferred");
    let before = entries_read(&mut tx, "runs_pkey").await;
    let none: Vec<String> = Vec::new();
    let leased = sqlx::query(CLAIM)
        .bind("w")
        .bind(10_000_i64)
        .bind(30_000_i64)
        .bind(vec!["noop"])
        .bind(1_i64)
        .bind(&none)
        .bind(&none)
        .bind(&none)
        .bind(&none)
        .bind(Vec::<i64>::new())
        .bind(&none)
        .bind(Vec::<i64>::new())
        .bind(Vec::<i64>::new())
        .bind(cairn_core::event::EventKind::StepStarted.as_str())
        .fetch_all(&mut *tx)
        .await
        .expect("the claim runs");
    let read = entries_read(&mut tx, "runs_pkey").await - before;

    assert_eq!(leased.len(), 1, "the claim leases zz1's step");
    assert!(read < 100, "the claim read {read} entries of runs_pkey for one run: it walked the index");
}

/// One call of `cairn_complete_leaves_and_claim` for worker `w` and action `noop`, claiming one step: completes
/// `done`'s step `s` (attempt 1) when given. Returns the number of rows (successes and leased steps).
async fn leaf_call(conn: &mut PgConnection, done: Option<&str>) -> usize {
    let runs: Vec<&str> = done.into_iter().collect();
    let steps: Vec<&str> = runs.iter().map(|_| "s").collect();
    let rows = sqlx::query("SELECT * FROM cairn_complete_leaves_and_claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)")
        .bind(&runs)
        .bind(steps.clone())
        .bind(runs.iter().map(|_| 1_i64).collect::<Vec<_>>())
        .bind(runs.iter().map(|_| "w").collect::<Vec<_>>())
        .bind(runs.iter().map(|_| "{}").collect::<Vec<_>>())
        .bind(10_000_i64)
        .bind(vec!["w"])
        .bind(vec![r#"["noop"]"#])
        .bind(vec![1_i64])
        .bind(30_000_i64)
        .fetch_all(conn)
        .await
        .expect("the leaf call runs");
    rows.len()
}

/// The leaf call joins its batch against its tables by key (migration 0007), whatever join the planner prefers:
/// a call that completes one leaf (ending its run) and leases one step reads a few entries of `runs_pkey`,
/// `steps_pkey` and `attempts_pkey`, with 20,000 other runs, steps and attempts in them. Its statements run from
/// generic plans (migration 0008), so these are the reads of the plans every call uses.
#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
async fn the_leaf_call_reads_by_key_whatever_join_the_planner_prefers(pool: PgPool) {
    let mut conn = runs_and_a_planner_that_avoids_nested_loops(&pool).await;
    let settings: Vec<String> =
        sqlx::query_scalar("SELECT unnest(proconfig) FROM pg_proc WHERE proname = 'cairn_complete_leaves_and_claim'")
            .fetch_all(&mut *conn)
            .await
            .expect("the leaf call's settings");
    assert!(
        settings.iter().any(|s| s == "plan_cache_mode=force_generic_plan"),
        "the leaf call plans its statements once per session: {settings:?}"
    );
    sqlx::raw_sql(
        "INSERT INTO attempts (run_id, step_id, attempt, lease_id, action, worker_id, status, started_at, ended_at) \
         SELECT 'grown' || g, 's', 1, 'grown' || g || '/s/1', 'noop', 'w', 'succeeded', 0, 0 \
         FROM generate_series(1, 20000) AS g",
    )
    .execute(&mut *conn)
    .await
    .expect("the grown runs' attempts");
    assert_eq!(leaf_call(&mut conn, None).await, 1, "the first call leases zz1's step");

    let indexes = ["runs_pkey", "steps_pkey", "attempts_pkey"];
    let mut tx = conn.begin().await.expect("a transaction");
    let mut before = Vec::new();
    for index in indexes {
        before.push(entries_read(&mut tx, index).await);
    }
    let rows = leaf_call(&mut tx, Some("zz1")).await;

    assert_eq!(rows, 2, "zz1's step succeeded and zz2's was leased");
    for (index, before) in indexes.into_iter().zip(before) {
        let read = entries_read(&mut tx, index).await - before;
        assert!(read < 100, "the call read {read} entries of {index} for two runs: it walked the index");
    }
}

/// The general path's batch success reads its steps by key (a write transaction turns merge and hash joins
/// off, [`BEGIN`]), whatever join the planner would prefer.
#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
async fn the_batch_success_reads_steps_by_key_whatever_join_the_planner_prefers(pool: PgPool) {
    let mut conn = runs_and_a_planner_that_avoids_nested_loops(&pool).await;
    sqlx::raw_sql("UPDATE steps SET status = 'running', attempt = 1, lease_owner = 'w' WHERE run_id = 'zz1'")
        .execute(&mut *conn)
        .await
        .expect("zz1's step is leased");
    let mut tx = conn.begin_with(BEGIN).await.expect("a write transaction");
    let before = entries_read(&mut tx, "steps_pkey").await;
    let done = sqlx::query(SUCCEED_MANY)
        .bind(20_000_i64)
        .bind(vec!["zz1"])
        .bind(vec!["s"])
        .bind(vec![1_i64])
        .bind(vec!["w"])
        .bind(vec!["{}"])
        .fetch_all(&mut *tx)
        .await
        .expect("the success runs");
    let read = entries_read(&mut tx, "steps_pkey").await - before;

    assert_eq!(done.len(), 1, "zz1's step succeeded");
    assert!(read < 100, "the success read {read} entries of steps_pkey for one step: it walked the index");
}

/// The statements closing a batch's runs, as named `PREPARE`s and `EXPLAIN`s of them, with the indexes each may
/// read: runs by key, their steps by the primary key's `run_id` prefix.
fn run_closing_statements() -> [(String, &'static str, &'static [&'static str]); 3] {
    [
        (
            format!("PREPARE close(int8, text[], int8[], int8[]) AS {RUNS_CLOSE_STEPS}"),
            "EXPLAIN (FORMAT JSON) EXECUTE close(9, '{r7,r8}', '{1,1}', '{0,1}')",
            &["runs_pkey"],
        ),
        (
            format!("PREPARE failed(text[]) AS {RUNS_FAILED_STEPS}"),
            "EXPLAIN (FORMAT JSON) EXECUTE failed('{r7,r8}')",
            &["steps_pkey"],
        ),
        (
            format!("PREPARE succeed_runs(int8, text[]) AS {RUNS_SUCCEED}"),
            "EXPLAIN (FORMAT JSON) EXECUTE succeed_runs(9, '{r7,r8}')",
            &["runs_pkey"],
        ),
    ]
}

/// With statistics taken when every run had finished and 5,000 running now, the generic plans that close and
/// finish a batch's runs (`runs.rs`) must read runs and steps by key, never by walking
/// `runs_status_created_idx` through every open run, nor scanning `steps`.
#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
async fn the_run_closing_generic_plans_read_by_key_whatever_the_statistics_say(pool: PgPool) {
    let mut conn = set_up(&pool, &STALE_RUNNING).await;
    for (prepare, explain, by_key) in run_closing_statements() {
        let plan = generic_plan(&mut conn, prepare, explain).await;
        let mut indexes = Vec::new();
        collect_indexes(&plan, &mut indexes);
        let scans = scans(&plan);

        assert!(!indexes.is_empty(), "{explain}: the plan reads an index, not a whole table: {plan}");
        assert!(indexes.iter().all(|i| by_key.contains(&i.as_str())), "{explain}: every read is by key: {indexes:?}");
        assert!(scans.iter().all(|(_, cond)| *cond), "{explain}: every scan has an index condition: {scans:?}");
    }
}

/// Every scan node of an `EXPLAIN (FORMAT JSON)` plan, as its node type and whether it has an index condition
/// (a whole-index walk, as for an `ORDER BY`, has none).
fn scans(node: &serde_json::Value) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut stack = vec![node];
    while let Some(node) = stack.pop() {
        match node {
            serde_json::Value::Object(map) => {
                if let Some(serde_json::Value::String(kind)) = map.get("Node Type")
                    && kind.ends_with("Scan")
                    && !kind.starts_with("Function")
                {
                    out.push((kind.clone(), map.contains_key("Index Cond")));
                }
                stack.extend(map.values());
            }
            serde_json::Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    out
}
