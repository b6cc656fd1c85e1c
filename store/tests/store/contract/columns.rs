//! Every column of a new run's steps, as PostgreSQL stores them, against SQLite (issue 8: PostgreSQL inserts the
//! steps as arrays in one statement, SQLite as multi-row `VALUES`; the rows must be the same), for a run created
//! alone and for runs created together in a group-commit batch (PostgreSQL: one insert for all their plans and
//! runs, one for all their steps).

use cairn_store::Batch;
use cairn_store::Store;
use serde_json::json;

use super::support::{SqliteDb, T0, create, new_run};

/// Each step's columns as one text (`-` for NULL), in position order.
const COLUMNS: &str = "SELECT step_id || '|' || CAST(position AS TEXT) || '|' || action || '|' || status || '|' || \
     args || '|' || COALESCE(when_expr, '-') || '|' || trigger_rule || '|' || CAST(idempotent AS TEXT) || '|' || \
     CAST(timeout_ms AS TEXT) || '|' || COALESCE(CAST(heartbeat_timeout_ms AS TEXT), '-') || '|' || retry || '|' \
     || COALESCE(approval, '-') || '|' || CAST(dep_count AS TEXT) || '|' || CAST(pending_deps AS TEXT) || '|' || \
     COALESCE(CAST(available_at AS TEXT), '-') || '|' || COALESCE(CAST(not_before_at AS TEXT), '-') || '|' || \
     COALESCE(not_before_local, '-') || '|' || CAST(updated_at AS TEXT) || '|' || CAST(child_count AS TEXT) || \
     '|' || COALESCE(successor_action, '-') || '|' || CAST(attempt AS TEXT) AS row \
     FROM steps WHERE run_id = $1 ORDER BY position";

/// Each run's columns as one text, and its plan's (`-` for NULL).
const RUN_COLUMNS: &str = "SELECT runs.id || '|' || plan_id || '|' || status || '|' || input || '|' || context || \
     '|' || COALESCE(idempotency_key, '-') || '|' || CAST(step_count AS TEXT) || '|' || CAST(open_steps AS TEXT) || \
     '|' || CAST(cancel_requested AS TEXT) || '|' || CAST(runs.created_at AS TEXT) || '|' || \
     CAST(updated_at AS TEXT) || '|' || plans.body || '|' || CAST(plans.created_at AS TEXT) AS row \
     FROM runs JOIN plans ON plans.id = runs.plan_id WHERE runs.id = $1";

async fn rows(store: &Store) -> Vec<String> {
    rows_of(store, COLUMNS, "r1").await
}

async fn rows_of(store: &Store, sql: &'static str, run_id: &str) -> Vec<String> {
    match store {
        Store::Sqlite(pool) => sqlx::query_scalar(sql).bind(run_id).fetch_all(pool).await.expect("rows"),
        Store::Postgres(pool) => sqlx::query_scalar(sql).bind(run_id).fetch_all(pool).await.expect("rows"),
    }
}

/// Steps that between them set every optional column and leave each unset: a timer, an approval, a `when`, a
/// trigger rule, a heartbeat timeout, a retry policy, unicode args, a chain (a successor) and a fan-in.
async fn store_the_run(store: &Store) {
    create(store, &the_run()).await;
}

fn the_run() -> cairn_store::NewRun {
    let doc = json!({"steps": [
        {"id": "a", "action": "noop", "args": {"city": "武汉", "n": 1.5}, "timeout_ms": 5000,
         "heartbeat_timeout_ms": 2000, "retry": {"max_attempts": 3}, "idempotent": false},
        {"id": "b", "action": "noop", "args": {}, "depends_on": ["a"], "when": "$input.enabled"},
        {"id": "c", "action": "noop", "args": {}, "approval": {"required": true}},
        {"id": "d", "action": "noop", "args": {}, "depends_on": ["b", "c"], "trigger_rule": "all_done"},
        {"id": "e", "action": "noop", "args": {}}
    ]});
    let mut run = new_run("r1", &doc);
    run.timers[4] = Some((T0 + 60_000, "in 1m".to_owned()));
    run
}

/// [`the_run`] with two more created in the same batch: one of the same plan (later), one of another plan.
async fn store_runs_together(store: &Store) {
    let mut same_plan = the_run();
    same_plan.run_id = "r2".into();
    same_plan.now_ms = T0 + 7;
    let doc = json!({"context": {"timezone": "Asia/Shanghai"}, "steps": [{"id": "x", "action": "noop", "args": {}}]});
    let mut other = new_run("r3", &doc);
    other.now_ms = T0 + 3;
    other.input = json!({"city": "武汉"});
    let nobody = |_: usize| Vec::new();
    let outcome = store
        .write_batch(&Batch {
            runs: &[the_run(), same_plan, other],
            reports: &[],
            claims: &[],
            limits: super::support::LIMITS,
            lease_ttl_ms: 30_000,
            now_ms: T0 + 9,
            handoff: &nobody,
        })
        .await
        .expect("the batch commits");
    assert_eq!(outcome.created.len(), 3);
}

/// The migrated PostgreSQL store on `pool`, and a fresh SQLite store for test `name`.
async fn both(pool: sqlx::PgPool, name: &str) -> (Store, SqliteDb) {
    let postgres = Store::Postgres(pool);
    postgres.migrate().await.expect("the PostgreSQL migrations apply to a fresh database");
    (postgres, SqliteDb::create(&format!("columns::{name}")).await)
}

#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL contract tests skipped")]
async fn postgresql_stores_runs_created_together_as_sqlite_does(pool: sqlx::PgPool) {
    let (postgres, sqlite) = both(pool, "postgresql_stores_runs_created_together_as_sqlite_does").await;

    store_runs_together(&postgres).await;
    store_runs_together(&sqlite.store).await;

    for run_id in ["r1", "r2", "r3"] {
        let expected = rows_of(&sqlite.store, COLUMNS, run_id).await;
        assert!(!expected.is_empty(), "{run_id} has steps");
        assert_eq!(rows_of(&postgres, COLUMNS, run_id).await, expected, "{run_id}: the same steps on both backends");
        let expected = rows_of(&sqlite.store, RUN_COLUMNS, run_id).await;
        assert_eq!(expected.len(), 1, "{run_id} is stored with its plan");
        assert_eq!(rows_of(&postgres, RUN_COLUMNS, run_id).await, expected, "{run_id}: the same run and plan");
    }
    let r2 = rows_of(&postgres, COLUMNS, "r2").await;
    assert!(r2.iter().all(|r| r.contains(&(T0 + 7).to_string())), "r2's steps carry its own creation time: {r2:#?}");
}

#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL contract tests skipped")]
async fn postgresql_stores_every_column_of_a_new_step_as_sqlite_does(pool: sqlx::PgPool) {
    let (postgres, sqlite) = both(pool, "postgresql_stores_every_column_of_a_new_step_as_sqlite_does").await;

    store_the_run(&postgres).await;
    store_the_run(&sqlite.store).await;

    let (expected, stored) = (rows(&sqlite.store).await, rows(&postgres).await);
    assert_eq!(expected.len(), 5, "{expected:#?}");
    assert!(expected.iter().any(|r| r.contains("武汉")), "unicode args kept: {expected:#?}");
    assert!(expected.iter().any(|r| r.contains("in 1m")), "the timer as written: {expected:#?}");
    assert_eq!(stored, expected, "the same rows on both backends");
}
