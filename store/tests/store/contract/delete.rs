//! Deleting a run deletes its steps, attempts and events (PostgreSQL keeps this with a statement trigger on
//! `runs`, not with foreign keys, since migration 0009; SQLite with its foreign keys' `ON DELETE CASCADE`).
//! Cairn never deletes a run itself; an operator may, with SQL.

use cairn_store::Store;
use serde_json::json;

use super::support::{T0, claim, complete, create, execute_sql, new_run, noop, steps};

/// How many rows of `run_id` each table holds: steps, attempts, events.
async fn rows_of(store: &Store, run_id: &str) -> (i64, i64, i64) {
    const SQL: &str = "SELECT (SELECT COUNT(*) FROM steps WHERE run_id = $1), \
         (SELECT COUNT(*) FROM attempts WHERE run_id = $1), (SELECT COUNT(*) FROM run_events WHERE run_id = $1)";
    match store {
        Store::Sqlite(pool) => sqlx::query_as(SQL).bind(run_id).fetch_one(pool).await.expect("counts"),
        Store::Postgres(pool) => sqlx::query_as(SQL).bind(run_id).fetch_one(pool).await.expect("counts"),
    }
}

async fn deleting_a_run_deletes_its_attempts_and_events_and_no_other_runs(store: Store) {
    let doc = steps(vec![noop("a", &[], json!({})), noop("b", &[], json!({}))]);
    for run_id in ["r1", "r2", "r3"] {
        create(&store, &new_run(run_id, &doc)).await;
    }
    let claimed = claim(&store, T0).await;
    assert_eq!(claimed.len(), 6, "test set-up: every step leased");
    for c in claimed.iter().filter(|c| c.lease.step_id == "a") {
        complete(&store, &c.lease, &json!({"ok": true}), T0 + 1).await;
    }
    let before = rows_of(&store, "r2").await;
    assert_eq!((before.0, before.1), (2, 2), "test set-up: r2 has its steps and attempts");
    assert!(before.2 >= 4, "test set-up: r2 has events, {before:?}");

    let deleted = execute_sql(&store, "DELETE FROM runs WHERE id IN ($1, $2)", &["r1", "r3"]).await;

    assert_eq!(deleted, 2);
    for run_id in ["r1", "r3"] {
        assert_eq!(rows_of(&store, run_id).await, (0, 0, 0), "nothing of the deleted run {run_id} is left");
    }
    assert_eq!(rows_of(&store, "r2").await, before, "the run not deleted keeps every row");
}

contract_tests!(deleting_a_run_deletes_its_attempts_and_events_and_no_other_runs);
