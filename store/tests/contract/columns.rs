//! Every column of a new run's steps, as PostgreSQL stores them, against SQLite (issue 8: PostgreSQL inserts the
//! steps as arrays in one statement, SQLite as multi-row `VALUES`; the rows must be the same).

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

async fn rows(store: &Store) -> Vec<String> {
    match store {
        Store::Sqlite(pool) => sqlx::query_scalar(COLUMNS).bind("r1").fetch_all(pool).await.expect("rows"),
        Store::Postgres(pool) => sqlx::query_scalar(COLUMNS).bind("r1").fetch_all(pool).await.expect("rows"),
    }
}

/// Steps that between them set every optional column and leave each unset: a timer, an approval, a `when`, a
/// trigger rule, a heartbeat timeout, a retry policy, unicode args, a chain (a successor) and a fan-in.
async fn store_the_run(store: &Store) {
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
    create(store, &run).await;
}

#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL contract tests skipped")]
async fn postgresql_stores_every_column_of_a_new_step_as_sqlite_does(pool: sqlx::PgPool) {
    let postgres = Store::Postgres(pool);
    postgres.migrate().await.expect("the PostgreSQL migrations apply to a fresh database");
    let sqlite = SqliteDb::create("columns::postgresql_stores_every_column_of_a_new_step_as_sqlite_does").await;

    store_the_run(&postgres).await;
    store_the_run(&sqlite.store).await;

    let (expected, stored) = (rows(&sqlite.store).await, rows(&postgres).await);
    assert_eq!(expected.len(), 5, "{expected:#?}");
    assert!(expected.iter().any(|r| r.contains("武汉")), "unicode args kept: {expected:#?}");
    assert!(expected.iter().any(|r| r.contains("in 1m")), "the timer as written: {expected:#?}");
    assert_eq!(stored, expected, "the same rows on both backends");
}
