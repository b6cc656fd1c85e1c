//! PostgreSQL only: a run's events become visible in id order even when two transactions write them at once.
//!
//! Event ids come from one sequence, drawn before the commit. If a transaction that drew a later id could commit
//! while one that drew an earlier id is still open, a reader paging by `id > cursor` would move past the earlier
//! event and never see it. Every events insert therefore locks its runs first (`FOR NO KEY UPDATE`, held to the
//! commit). Here a raw session plays another writer of the run's history (it follows the same rule: run locked,
//! then an event id drawn, still uncommitted), and the store's own writes of that run must wait for it. SQLite has
//! one writer, so commit order is id order there.

use std::time::{Duration, Instant};

use cairn_store::Store;
use serde_json::json;
use sqlx::{PgPool, Postgres, Transaction};

use super::support::{T0, claim_for, events, noop, steps, submit};

/// Opens the other writer: locks run `r1` and draws an event id for it (of a kind the store reads), uncommitted.
/// Returns the id.
async fn other_writer(pool: &PgPool) -> (Transaction<'static, Postgres>, i64) {
    let mut tx = pool.begin().await.expect("a second session");
    sqlx::query("SELECT id FROM runs WHERE id = 'r1' FOR NO KEY UPDATE")
        .execute(&mut *tx)
        .await
        .expect("the run is locked");
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO run_events (run_id, step_id, kind, data, at) VALUES ('r1', NULL, 'run_cancelled', '{}', 1) \
         RETURNING id",
    )
    .fetch_one(&mut *tx)
    .await
    .expect("an event id is drawn");
    (tx, id)
}

/// Waits until some session of this database waits for a lock (at most 10 s).
async fn until_a_session_waits_for_a_lock(pool: &PgPool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(pool)
        .await
        .expect("pg_stat_activity is readable");
        if waiting > 0 {
            return;
        }
        assert!(Instant::now() < deadline, "the store's write never waited for the run's open writer");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// After both committed: the other writer's event comes before the store's `kind` event for `step`.
async fn ids_follow_commit_order(store: &Store, other_id: i64, kind: &str, step: &str) {
    let history = events(store, "r1").await;
    let ids: Vec<i64> = history.iter().map(|e| e.id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "history in id order: {ids:?}");
    let written: Vec<i64> =
        history.iter().filter(|e| e.kind == kind && e.step_id.as_deref() == Some(step)).map(|e| e.id).collect();
    assert!(!written.is_empty(), "the store wrote {kind}: {history:?}");
    assert!(written.iter().all(|id| *id > other_id), "{kind} ids {written:?} follow the earlier writer's {other_id}");
}

#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL contract tests skipped")]
async fn a_claim_of_a_running_run_waits_for_the_runs_open_history_writer(pool: PgPool) {
    let store = Store::Postgres(pool.clone());
    store.migrate().await.expect("the PostgreSQL migrations apply to a fresh database");
    submit(&store, "r1", &steps(vec![noop("a", &[], json!({})), noop("b", &[], json!({}))])).await;
    // One step claimed first: the run is `running`, so the next claim has no run status of its own to write.
    assert_eq!(claim_for(&store, "w1", &["noop"], 1, T0).await.len(), 1);
    let (other, other_id) = other_writer(&pool).await;

    let claimer = tokio::spawn({
        let store = store.clone();
        async move { claim_for(&store, "w2", &["noop"], 1, T0 + 1).await }
    });
    until_a_session_waits_for_a_lock(&pool).await;

    assert!(!claimer.is_finished(), "the claim waits while an earlier event id of the run is uncommitted");
    other.commit().await.expect("the other writer commits");
    let claimed = claimer.await.expect("the claim task ends");
    assert_eq!(claimed.len(), 1, "then the claim goes through");
    ids_follow_commit_order(&store, other_id, "step_started", &claimed[0].lease.step_id).await;
}

#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL contract tests skipped")]
async fn an_events_insert_waits_for_the_runs_open_history_writer(pool: PgPool) {
    let store = Store::Postgres(pool.clone());
    store.migrate().await.expect("the PostgreSQL migrations apply to a fresh database");
    submit(&store, "r1", &steps(vec![noop("a", &[], json!({}))])).await;
    let lease = claim_for(&store, "w1", &["noop"], 1, T0).await.remove(0).lease;
    let step = lease.step_id.clone();
    let (other, other_id) = other_writer(&pool).await;

    // Undoing a claim writes the step and its attempt, then a `step_unclaimed` event: no run row of its own.
    let undo = tokio::spawn({
        let store = store.clone();
        async move { store.unclaim(std::slice::from_ref(&lease), "not delivered", T0 + 1).await }
    });
    until_a_session_waits_for_a_lock(&pool).await;

    assert!(!undo.is_finished(), "the events insert waits while an earlier event id of the run is uncommitted");
    other.commit().await.expect("the other writer commits");
    assert_eq!(undo.await.expect("the undo task ends").expect("the undo commits"), 1);
    ids_follow_commit_order(&store, other_id, "step_unclaimed", &step).await;
}
