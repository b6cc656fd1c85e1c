//! PostgreSQL connections that die under the store: the pool does not ping a busy connection before each
//! transaction (`store/src/postgres.rs`), and the batch writer keeps its connection between batches
//! (`store/src/writer.rs`), so a write transaction whose connection was closed by the server must begin again on
//! another one instead of failing; so must a chain step or a leaf batch whose one call (`cairn_complete_and_claim`,
//! `cairn_complete_leaves_and_claim`) meets a closed connection; and a leaf call whose answer is lost after it
//! committed, or a general-path batch whose `COMMIT`'s answer is lost, is answered from what it wrote, leases
//! included (or written again when its `COMMIT` never arrived).

use crate::pg_proxy;

use std::sync::atomic::Ordering;

use cairn_store::{BatchOutcome, Report, ReportItem, ReportKind, Store, StoreResult};
use pg_proxy::{Loss, batch, create_r1, steps_of_r1, store_behind};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgConnection};

/// A store on the test's database, migrated, and the database's name.
async fn store_on(options: &PgConnectOptions) -> (Store, String) {
    let database = options.get_database().expect("sqlx::test names the database").to_owned();
    let url = format!("postgres://{}@{}:{}/{database}", options.get_username(), options.get_host(), options.get_port());
    let store = Store::connect(&url).await.expect("the store connects");
    store.migrate().await.expect("migrations apply");
    (store, database)
}

/// Ends every other session of `database` (the server closes them); returns how many.
async fn end_every_session(admin: &mut PgConnection, database: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
    )
    .bind(database)
    .fetch_one(admin)
    .await
    .expect("sessions ended")
}

#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
async fn a_write_right_after_the_server_ended_every_session_goes_through(
    _pool: PgPoolOptions,
    options: PgConnectOptions,
) {
    let (store, database) = store_on(&options).await;
    for _ in 0..4 {
        assert!(!store.cancel_run("no-such-run", 1).await.expect("a write before"), "nothing to cancel");
    }
    let mut admin = options.connect().await.expect("a separate session");
    let ended = end_every_session(&mut admin, &database).await;
    assert!(ended >= 1, "the store's pooled connections were ended ({ended})");
    admin.close().await.expect("closed");

    let after = store.cancel_run("no-such-run", 2).await;

    assert!(matches!(after, Ok(false)), "the write began again on a new connection: {after:?}");
}

#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
async fn the_batch_writer_begins_on_a_fresh_connection_after_the_server_ended_its_own(
    _pool: PgPoolOptions,
    options: PgConnectOptions,
) {
    let (store, database) = store_on(&options).await;
    let mut writer = store.batch_writer();
    let before = batch(&mut writer, &[], 1).await;
    assert!(before.is_ok(), "a batch before: {before:?}");
    let mut admin = options.connect().await.expect("a separate session");
    let ended = end_every_session(&mut admin, &database).await;
    assert!(ended >= 1, "every session was ended, the writer's among them ({ended})");
    admin.close().await.expect("closed");

    let after = batch(&mut writer, &[], 2).await;

    let claimed = after.expect("the batch began again on a new connection").claimed;
    assert_eq!(claimed.len(), 1, "one answer for the one claim");
    assert!(claimed[0].is_empty(), "nothing is ready in an empty database");
}

#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
async fn a_chain_step_whose_one_call_meets_a_closed_connection_goes_through_the_general_path(
    _pool: PgPoolOptions,
    options: PgConnectOptions,
) {
    let (store, database) = store_on(&options).await;
    create_r1(&store, true).await;
    let mut writer = store.batch_writer();
    let first = batch(&mut writer, &[], 1).await;
    let a = first.expect("a is claimed").claimed[0][0].clone();
    assert_eq!(a.completion.successor_action(), Some("noop"), "a's completion would be tried in one call");
    let mut admin = options.connect().await.expect("a separate session");
    assert!(end_every_session(&mut admin, &database).await >= 1, "the writer's session was ended");
    admin.close().await.expect("closed");

    let done = ReportItem { lease: a.lease.clone(), kind: ReportKind::Complete(serde_json::json!({"ok": true})) };
    let after = batch(&mut writer, &[done], 2).await;

    let outcome = after.expect("the completion went through on a new connection");
    assert_eq!(outcome.reports, [Report::Succeeded]);
    let claimed: Vec<&str> = outcome.claimed[0].iter().map(|c| c.lease.step_id.as_str()).collect();
    assert_eq!(claimed, ["b"], "and its claim got the dependent");
    let events = store.events("r1", 0, 100).await.expect("events");
    let kinds = |kind: &str| events.iter().filter(|e| e.kind == kind).count();
    assert_eq!((kinds("step_succeeded"), kinds("step_started")), (1, 2), "written once: {events:?}");
    let tried = writer.fast_path_counts().chain;
    assert_eq!((tried.committed, tried.fell_back), (0, 1), "the call met the closed connection and wrote nothing");
}

#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
async fn a_leaf_batch_whose_call_meets_a_closed_connection_goes_through_the_general_path(
    _pool: PgPoolOptions,
    options: PgConnectOptions,
) {
    let (store, database) = store_on(&options).await;
    create_r1(&store, false).await;
    let mut writer = store.batch_writer();
    let first = batch(&mut writer, &[], 1).await;
    let first = first.expect("a root is claimed").claimed[0][0].clone();
    assert!(first.completion.is_leaf(), "its completion would be tried in the leaf call");
    let mut admin = options.connect().await.expect("a separate session");
    assert!(end_every_session(&mut admin, &database).await >= 1, "the writer's session was ended");
    admin.close().await.expect("closed");

    let done = ReportItem { lease: first.lease.clone(), kind: ReportKind::Complete(serde_json::json!({"ok": true})) };
    let after = batch(&mut writer, &[done], 2).await;

    let outcome = after.expect("the completion went through on a new connection");
    assert_eq!(outcome.reports, [Report::Succeeded]);
    assert_eq!(outcome.claimed[0].len(), 1, "and its claim got the other root");
    let events = store.events("r1", 0, 100).await.expect("events");
    let kinds = |kind: &str| events.iter().filter(|e| e.kind == kind).count();
    assert_eq!((kinds("step_succeeded"), kinds("step_started")), (1, 2), "written once: {events:?}");
    let tried = writer.fast_path_counts().leaves;
    assert_eq!((tried.committed, tried.fell_back), (0, 1), "the call met the closed connection and wrote nothing");
}

#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
async fn a_leaf_call_that_committed_before_its_answer_was_lost_is_answered_from_the_read_back(
    _pool: PgPoolOptions,
    options: PgConnectOptions,
) {
    let (store, armed) = store_behind(&options, b"cairn_complete_leaves_and_claim", true, Loss::Answer).await;
    let mut writer = store.batch_writer();
    let first = batch(&mut writer, &[], 1).await;
    let first = first.expect("a root is claimed").claimed[0][0].clone();
    armed.store(true, Ordering::SeqCst);

    let done = ReportItem { lease: first.lease.clone(), kind: ReportKind::Complete(serde_json::json!({"ok": true})) };
    let after = batch(&mut writer, &[done], 2).await;

    assert!(!armed.load(Ordering::SeqCst), "the proxy lost the call's answer");
    let outcome = after.expect("the batch is answered from the read-back");
    assert_eq!(outcome.reports, [Report::Succeeded], "the completion committed: not answered stale");
    let handed: Vec<(&str, u32)> =
        outcome.claimed[0].iter().map(|c| (c.lease.step_id.as_str(), c.lease.attempt)).collect();
    assert_eq!(handed, [("b", 1)], "the step the call leased reaches the worker, not lease expiry");
    let tried = writer.fast_path_counts().leaves;
    assert_eq!((tried.committed, tried.fell_back, tried.unknown), (1, 0, 0), "counted as the call that committed");
    let status = steps_of_r1(&store).await;
    assert_eq!(status, [("a".into(), "succeeded".into(), 1), ("b".into(), "running".into(), 1)], "written once");
    let events = store.events("r1", 0, 100).await.expect("events");
    let kinds = |kind: &str| events.iter().filter(|e| e.kind == kind).count();
    assert_eq!((kinds("step_succeeded"), kinds("step_started")), (1, 2), "written once: {events:?}");
}

/// A claim by `w1` through a store whose `COMMIT` the proxy loses (`loss`): the store and the batch's outcome.
async fn claim_losing_the_commit(options: &PgConnectOptions, loss: Loss) -> (Store, StoreResult<BatchOutcome>) {
    let (store, armed) = store_behind(options, b"COMMIT", false, loss).await;
    let mut writer = store.batch_writer();
    armed.store(true, Ordering::SeqCst);
    let claimed = batch(&mut writer, &[], 1).await;
    assert!(!armed.load(Ordering::SeqCst), "the proxy lost the COMMIT or its answer");
    (store, claimed)
}

#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
async fn a_batch_whose_commit_answer_was_lost_is_answered_with_the_leases_it_made(
    _pool: PgPoolOptions,
    options: PgConnectOptions,
) {
    let (store, claimed) = claim_losing_the_commit(&options, Loss::Answer).await;

    let claimed = claimed.expect("the batch is answered from what committed");
    let leased: Vec<(&str, u32)> =
        claimed.claimed[0].iter().map(|c| (c.lease.step_id.as_str(), c.lease.attempt)).collect();
    assert_eq!(leased, [("a", 1)], "the lease the transaction made reaches the worker, not lease expiry");
    let status = steps_of_r1(&store).await;
    assert_eq!(status, [("a".into(), "running".into(), 1), ("b".into(), "ready".into(), 0)], "written once");
}

#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
async fn a_batch_whose_commit_never_reached_the_server_is_written_again(
    _pool: PgPoolOptions,
    options: PgConnectOptions,
) {
    let (store, claimed) = claim_losing_the_commit(&options, Loss::Request).await;

    let claimed = claimed.expect("the batch is written again on a fresh connection");
    let [leased] = claimed.claimed[0].as_slice() else { panic!("one step leased: {:?}", claimed.claimed) };
    assert_eq!(leased.lease.attempt, 1, "leased once, by the second try");
    // The second try may find `a` still locked by the first one's server process, which has not yet noticed its
    // client is gone, and lease `b` instead.
    let other = if leased.lease.step_id == "a" { "b" } else { "a" };
    let mut expected = vec![(leased.lease.step_id.clone(), "running".into(), 1), (other.into(), "ready".into(), 0)];
    expected.sort();
    assert_eq!(steps_of_r1(&store).await, expected, "written once");
    let events = store.events("r1", 0, 100).await.expect("events");
    assert_eq!(events.iter().filter(|e| e.kind == "step_started").count(), 1, "written once: {events:?}");
}
