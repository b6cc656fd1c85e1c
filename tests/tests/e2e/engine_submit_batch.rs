//! Small submissions in the group-commit writer's batches (issue 8), through the real engine and PostgreSQL: a
//! run that fails its batch (its idempotency key taken by a concurrent transaction) fails only itself.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use cairn_orchestrator::{SubmitError, SubmitRequest};
use cairn_store::{Report, Store};
use cairn_tests::http::within;
use cairn_tests::{Backend, TestApp};
use serde_json::json;

const START: &str = "2027-03-14T12:00:00Z";
const LIMIT: Duration = Duration::from_secs(20);

/// Waits until some session of the app's database waits for a lock: a batch blocked on a held key.
async fn until_a_session_waits_for_a_lock(pool: &sqlx::PgPool, what: &str) {
    within(LIMIT, what, || async {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        (waiting > 0).then_some(())
    })
    .await;
}

/// Another session's uncommitted run holding idempotency key `key`.
async fn hold_key(pool: &sqlx::PgPool, key: &str) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut tx = pool.begin().await.unwrap();
    // A plan of its own: two sessions inserting one plan id would wait on each other.
    sqlx::query("INSERT INTO plans (id, body, created_at) VALUES ($1, '{}', 0)")
        .bind(format!("p-{key}"))
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO runs (id, plan_id, status, input, context, idempotency_key, step_count, open_steps, \
         created_at, updated_at) VALUES ($1, $2, 'pending', '{}', '{}', $3, 0, 0, 0, 0)",
    )
    .bind(format!("held-{key}"))
    .bind(format!("p-{key}"))
    .bind(key)
    .execute(&mut *tx)
    .await
    .unwrap();
    tx
}

fn keyed(key: &str) -> SubmitRequest {
    SubmitRequest {
        plan: json!({"steps": [{"id": "a", "action": "noop", "args": {}}]}),
        input: None,
        idempotency_key: Some(key.into()),
        labels: Default::default(),
    }
}

#[tokio::test]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: a concurrent transaction holding a key needs PostgreSQL")]
async fn a_run_whose_key_a_concurrent_transaction_took_fails_only_itself_not_its_batch() {
    let app = TestApp::new(Backend::Postgres, START).await;
    let Store::Postgres(pool) = app.store().clone() else { unreachable!("a PostgreSQL app") };
    app.submit(json!({"steps": [{"id": "s", "action": "noop", "args": {}}]})).await;
    let claimed = app.engine.claim("w1", &["noop".to_owned()], 1).await.unwrap();
    let (first, second) = (hold_key(&pool, "first").await, hold_key(&pool, "second").await);
    let engine = app.engine.clone();
    // The writer's first batch waits on the key `first` holds.
    let blocked = tokio::spawn(async move { engine.submit(&keyed("first")).await });
    until_a_session_waits_for_a_lock(&pool, "the first batch waits on the key `first` holds").await;
    // Both queue behind it, so they share the next batch.
    let engine = app.engine.clone();
    let racing = tokio::spawn(async move { engine.submit(&keyed("second")).await });
    let (engine, lease) = (app.engine.clone(), claimed[0].lease.clone());
    let report = tokio::spawn(async move { engine.complete(&lease, &json!({"ok": true})).await });
    // Nothing outside the writer shows its queue: this pause is the time the two calls get to reach it.
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The first batch goes on and creates its run; the next one then waits on `second`'s key.
    first.rollback().await.unwrap();
    within(LIMIT, "the first batch created its run", || async { blocked.is_finished().then_some(()) }).await;
    until_a_session_waits_for_a_lock(&pool, "the next batch waits on the key `second` holds").await;
    // `second` commits: the next batch's insert of the run with that key fails.
    second.commit().await.unwrap();

    let created = tokio::time::timeout(Duration::from_secs(20), blocked).await.unwrap().unwrap().unwrap();
    assert!(!created.existing, "the first keyed run is created once `first` let go of its key");
    let racing = tokio::time::timeout(Duration::from_secs(20), racing).await.unwrap().unwrap();
    assert!(
        matches!(&racing, Err(SubmitError::Conflict { run_id }) if run_id == "held-second"),
        "the run whose key was taken is answered as alone: a conflict with the committed run, {racing:?}"
    );
    let report = tokio::time::timeout(Duration::from_secs(20), report).await.unwrap().unwrap();
    assert_eq!(report.unwrap(), Report::Succeeded, "the completion in the failed batch is written again, not refused");
}
