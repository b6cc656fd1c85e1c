//! A PostgreSQL server that stops answering without closing the connection (a network cut, a failover, a host
//! that vanished): sqlx sets no TCP keepalive, so without the store's answer deadline (`store/src/postgres/
//! deadline.rs`) the batch writer, a write transaction or a read waits for good; and the server's session, cut
//! off mid-transaction, would hold its locks until TCP keepalive noticed (two hours by default) without the
//! `idle_in_transaction_session_timeout` Cairn's sessions set. The proxy (`pg_proxy`) goes silent on a chosen
//! statement and keeps the server's socket open, as a cut does.

use crate::pg_proxy;

use std::sync::atomic::Ordering;
use std::time::Duration;

use cairn_store::{Report, ReportItem, ReportKind, Store};
use pg_proxy::{Loss, batch, steps_of_r1, store_behind_with};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

/// The answer deadline of these tests' stores.
const DEADLINE: Duration = Duration::from_secs(1);

/// Bound on each test: far past every deadline it waits out, so reaching it means something waited for good.
const HUNG: Duration = Duration::from_secs(20);

/// `work`, or a panic naming `what` when it is still waiting after [`HUNG`].
async fn unless_hung<T>(what: &str, work: impl Future<Output = T>) -> T {
    tokio::time::timeout(HUNG, work).await.unwrap_or_else(|_| panic!("{what} waited for an answer for good"))
}

#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
async fn a_batch_whose_commit_gets_no_answer_is_written_again_and_the_cut_sessions_locks_are_freed(
    _pool: PgPoolOptions,
    options: PgConnectOptions,
) {
    let (store, armed) = store_behind_with(&options, b"COMMIT", false, Loss::Silence, DEADLINE).await;
    let mut writer = store.batch_writer();
    armed.store(true, Ordering::SeqCst);

    let first = unless_hung("the batch writer", batch(&mut writer, &[], 1)).await;

    assert!(!armed.load(Ordering::SeqCst), "the proxy went silent at the COMMIT");
    let first = first.expect("past the deadline the batch is read back and written again on a fresh connection");
    let [leased] = first.claimed[0].as_slice() else { panic!("one step leased: {:?}", first.claimed) };
    assert_eq!(leased.lease.attempt, 1, "leased once, by the second try");
    // The cut session never received its `COMMIT` and holds the step it claimed until the server ends it, after
    // `idle_in_transaction_session_timeout` (the deadline, set by the store); then that step is claimable.
    let other = if leased.lease.step_id == "a" { "b" } else { "a" };
    let mut later = Vec::new();
    for now in 2..40 {
        let claimed = unless_hung("a later batch", batch(&mut writer, &[], now)).await.expect("a later batch");
        later.extend(claimed.claimed[0].iter().map(|c| (c.lease.step_id.clone(), c.lease.attempt)));
        if !later.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(later, [(other.to_owned(), 1)], "the cut session's lock was freed and nothing was leased twice");
    let status = steps_of_r1(&store).await;
    assert_eq!(status, [("a".into(), "running".into(), 1), ("b".into(), "running".into(), 1)], "each leased once");
    let events = store.events("r1", 0, 100).await.expect("events");
    assert_eq!(events.iter().filter(|e| e.kind == "step_started").count(), 2, "written once each: {events:?}");
}

#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
async fn a_write_transaction_whose_commit_gets_no_answer_fails_retryably_and_goes_through_again(
    _pool: PgPoolOptions,
    options: PgConnectOptions,
) {
    let (store, armed) = store_behind_with(&options, b"COMMIT", false, Loss::Silence, DEADLINE).await;
    armed.store(true, Ordering::SeqCst);

    let cut = unless_hung("the cancel", store.cancel_run("r1", 2)).await;

    assert!(!armed.load(Ordering::SeqCst), "the proxy went silent at the COMMIT");
    let error = cut.expect_err("no answer within the deadline");
    assert!(error.is_retryable() && error.is_unreachable(), "a lost connection, retryable: {error}");
    // The cut session holds the run's row until the server ends it; the retry waits for that, then cancels.
    let again = unless_hung("the retried cancel", store.cancel_run("r1", 3)).await;
    assert!(matches!(again, Ok(true)), "the retry cancels the run: {again:?}");
    let run = store.run("r1").await.expect("read").expect("r1 exists");
    assert_eq!(run.status, "cancelled");
}

#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
async fn a_read_that_gets_no_answer_fails_retryably_and_the_next_read_is_answered(
    _pool: PgPoolOptions,
    options: PgConnectOptions,
) {
    // The attempts' query is first run here, so sqlx prepares it: its text goes in one write, its execution in the
    // next, where the proxy goes silent.
    let (store, armed) = store_behind_with(&options, b"FROM attempts", true, Loss::Silence, DEADLINE).await;
    armed.store(true, Ordering::SeqCst);

    let cut = unless_hung("the read", store.attempts("r1")).await;

    assert!(!armed.load(Ordering::SeqCst), "the proxy went silent at the read");
    let error = cut.expect_err("no answer within the deadline");
    assert!(error.is_retryable() && error.is_unreachable(), "a lost connection, retryable: {error}");
    let again = unless_hung("the next read", store.attempts("r1")).await;
    assert_eq!(again.expect("answered on another connection").len(), 0, "no attempt yet");
}

#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
async fn a_leaf_call_that_gets_no_answer_is_read_back_and_written_the_general_way(
    _pool: PgPoolOptions,
    options: PgConnectOptions,
) {
    let (store, armed) =
        store_behind_with(&options, b"cairn_complete_leaves_and_claim", true, Loss::Silence, DEADLINE).await;
    let mut writer = store.batch_writer();
    let first = batch(&mut writer, &[], 1).await.expect("a root is claimed").claimed[0][0].clone();
    assert!(first.completion.is_leaf(), "its completion is tried in the leaf call");
    armed.store(true, Ordering::SeqCst);

    let done = ReportItem { lease: first.lease.clone(), kind: ReportKind::Complete(serde_json::json!({"ok": true})) };
    let after = unless_hung("the leaf call", batch(&mut writer, &[done], 2)).await;

    assert!(!armed.load(Ordering::SeqCst), "the proxy went silent at the call");
    let outcome = after.expect("past the deadline, read back, then written the general way");
    assert_eq!(outcome.reports, [Report::Succeeded], "the completion is recorded");
    assert_eq!(outcome.claimed[0].len(), 1, "and its claim got the other root");
    let tried = writer.fast_path_counts().leaves;
    assert_eq!((tried.committed, tried.fell_back, tried.unknown), (0, 1, 0), "the call never reached the server");
    let events = store.events("r1", 0, 100).await.expect("events");
    let kinds = |kind: &str| events.iter().filter(|e| e.kind == kind).count();
    assert_eq!((kinds("step_succeeded"), kinds("step_started")), (1, 2), "written once: {events:?}");
}

/// `idle_in_transaction_session_timeout` of a session of `store`.
async fn idle_in_transaction_timeout(store: &Store) -> String {
    let Store::Postgres(pool) = store else { panic!("a PostgreSQL store") };
    sqlx::query_scalar("SHOW idle_in_transaction_session_timeout").fetch_one(pool).await.expect("shown")
}

#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
async fn sessions_end_idle_transactions_after_the_deadline_unless_the_server_or_url_says_otherwise(
    _pool: PgPoolOptions,
    options: PgConnectOptions,
) {
    let database = options.get_database().expect("sqlx::test names the database").to_owned();
    let base =
        format!("postgres://{}@{}:{}/{database}", options.get_username(), options.get_host(), options.get_port());

    let by_default = Store::connect(&base).await.expect("connects");
    let with_deadline = Store::connect_with(&base, Duration::from_millis(2_500)).await.expect("connects");
    let url_says = format!("{base}?options=-c%20idle_in_transaction_session_timeout%3D7s");
    let from_url = Store::connect_with(&url_says, Duration::from_millis(2_500)).await.expect("connects");

    assert_eq!(idle_in_transaction_timeout(&by_default).await, "30s", "the default deadline");
    assert_eq!(idle_in_transaction_timeout(&with_deadline).await, "2500ms", "the store's deadline");
    assert_eq!(idle_in_transaction_timeout(&from_url).await, "7s", "the URL's own setting is kept");
}

#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
async fn connections_cut_past_the_deadline_are_closed_so_the_pool_never_runs_dry(
    _pool: PgPoolOptions,
    options: PgConnectOptions,
) {
    // Short, so that cutting more connections than the pool holds stays quick.
    let deadline = Duration::from_millis(300);
    let (store, armed) = store_behind_with(&options, b"FROM attempts", true, Loss::Silence, deadline).await;

    // More cuts than the pool's 16 connections. Each cut connection would be pinged on its way back to the pool,
    // and that ping waits for good on a cut: were it handed back, the pool would run out of connections after 16.
    for cut in 0..20 {
        armed.store(true, Ordering::SeqCst);
        let read = unless_hung("a cut read", store.attempts("r1")).await;
        assert!(!armed.load(Ordering::SeqCst), "cut {cut}: the proxy went silent at the read");
        let error = read.expect_err("no answer within the deadline");
        assert!(error.is_unreachable(), "cut {cut}: a lost connection, not a pool run dry: {error}");
    }

    let after = unless_hung("the read after the cuts", store.attempts("r1")).await;
    assert_eq!(after.expect("a connection is still to be had").len(), 0, "no attempt yet");
}
