//! PostgreSQL connections that die under the store: the pool does not ping a busy connection before each
//! transaction (`store/src/postgres.rs`), and the batch writer keeps its connection between batches
//! (`store/src/writer.rs`), so a write transaction whose connection was closed by the server must begin again on
//! another one instead of failing; so must a chain step or a leaf batch whose one call (`cairn_complete_and_claim`,
//! `cairn_complete_leaves_and_claim`) meets a closed connection; and a leaf call whose answer is lost after it
//! committed is answered from what it wrote.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cairn_store::{
    BatchOutcome, BatchWriter, ClaimRequest, NewRun, Report, ReportItem, ReportKind, ReportLimits, Store, StoreResult,
};
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

/// Creates run `r1` at time 1: two `noop` roots `a` and `b`, or, with `chain`, `a` → `b`.
async fn create_r1(store: &Store, chain: bool) {
    let depends_on: &[&str] = if chain { &["a"] } else { &[] };
    let doc = serde_json::json!({"steps": [
        {"id": "a", "action": "noop", "args": {}},
        {"id": "b", "action": "noop", "args": {}, "depends_on": depends_on},
    ]});
    let limits = cairn_core::validate::Limits::default();
    let plan = cairn_core::validate::validate_value(&doc, &cairn_core::catalog::StaticCatalog::builtin(), &limits)
        .plan
        .expect("the plan validates");
    let run = NewRun {
        run_id: "r1".into(),
        plan,
        input: serde_json::json!({}),
        idempotency_key: None,
        timers: vec![],
        now_ms: 1,
    };
    store.create_run(&run).await.expect("created");
}

/// One batch through `writer` at `now`: `items` and a claim by `w1` for one `noop` step.
async fn batch(writer: &mut BatchWriter, items: &[ReportItem], now: i64) -> StoreResult<BatchOutcome> {
    let request = ClaimRequest { worker_id: "w1".into(), actions: vec!["noop".into()], limit: 1, now_ms: now };
    let nobody = |_: usize| Vec::new();
    writer.write_batch(&[], items, &[request], ReportLimits { max_output_bytes: 1024 }, 30_000, now, &nobody).await
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
    assert_eq!(a.successor_action.as_deref(), Some("noop"), "a's completion would be tried in one call");
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
    let tried = writer.one_call_counts();
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
    assert!(first.leaf, "its completion would be tried in the leaf call");
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
    let tried = writer.leaf_call_counts();
    assert_eq!((tried.committed, tried.fell_back), (0, 1), "the call met the closed connection and wrote nothing");
}

/// A TCP proxy to PostgreSQL that, once armed (the returned flag), forwards the next statement naming
/// `cairn_complete_leaves_and_claim` and its execution, then closes the client's socket as soon as the server
/// answers the execution, without passing the answer on: the call has committed (it is its own transaction) and
/// the client sees a lost connection. Returns the proxy's port and the flag (unarmed: the migrations name the function too).
async fn proxy_losing_the_leaf_calls_answer(server: std::net::SocketAddr) -> (u16, Arc<AtomicBool>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let port = listener.local_addr().expect("an address").port();
    let armed = Arc::new(AtomicBool::new(false));
    let arm = armed.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(upstream) = tokio::net::TcpStream::connect(server).await else { continue };
            let (mut client_read, mut client_write) = client.into_split();
            let (mut server_read, mut server_write) = upstream.into_split();
            let doomed = Arc::new(AtomicBool::new(false));
            let (armed, doomed_up) = (armed.clone(), doomed.clone());
            tokio::spawn(async move {
                let mut buf = vec![0_u8; 64 * 1024];
                // sqlx prepares a statement (`Parse`, `Describe`, `Sync`) in one write and runs it (`Bind`,
                // `Execute`, `Sync`) in the next: the call runs with the write after the one naming it.
                let mut prepared = false;
                while let Ok(n) = client_read.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    if prepared {
                        prepared = false;
                        doomed_up.store(true, Ordering::SeqCst);
                    }
                    let call = buf[..n].windows(31).any(|w| w == b"cairn_complete_leaves_and_claim");
                    if call && armed.swap(false, Ordering::SeqCst) {
                        prepared = true;
                    }
                    if server_write.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
            tokio::spawn(async move {
                let mut buf = vec![0_u8; 64 * 1024];
                while let Ok(n) = server_read.read(&mut buf).await {
                    // The server answered the doomed call: it committed. Drop both sockets unanswered.
                    if n == 0 || doomed.load(Ordering::SeqCst) {
                        break;
                    }
                    if client_write.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    (port, arm)
}

#[sqlx::test(migrations = false)]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
async fn a_leaf_call_that_committed_before_its_answer_was_lost_is_answered_from_the_read_back(
    _pool: PgPoolOptions,
    options: PgConnectOptions,
) {
    let database = options.get_database().expect("sqlx::test names the database").to_owned();
    let server = tokio::net::lookup_host((options.get_host(), options.get_port()))
        .await
        .expect("the server resolves")
        .next()
        .expect("an address");
    let (port, armed) = proxy_losing_the_leaf_calls_answer(server).await;
    let url = format!("postgres://{}@127.0.0.1:{port}/{database}", options.get_username());
    let store = Store::connect(&url).await.expect("the store connects through the proxy");
    store.migrate().await.expect("migrations apply");
    create_r1(&store, false).await;
    let mut writer = store.batch_writer();
    let first = batch(&mut writer, &[], 1).await;
    let first = first.expect("a root is claimed").claimed[0][0].clone();
    armed.store(true, Ordering::SeqCst);

    let done = ReportItem { lease: first.lease.clone(), kind: ReportKind::Complete(serde_json::json!({"ok": true})) };
    let after = batch(&mut writer, &[done], 2).await;

    assert!(!armed.load(Ordering::SeqCst), "the proxy lost the call's answer");
    let outcome = after.expect("the batch is answered from the read-back");
    assert_eq!(outcome.reports, [Report::Succeeded], "the completion committed: not answered stale");
    assert_eq!(outcome.claimed, [Vec::new()], "what the call leased is not known, so nothing is handed out");
    let tried = writer.leaf_call_counts();
    assert_eq!((tried.committed, tried.fell_back, tried.unknown), (1, 0, 0), "counted as the call that committed");
    let steps = store.steps("r1").await.expect("steps");
    let status: Vec<(&str, &str)> = steps.iter().map(|s| (s.id.as_str(), s.status.as_str())).collect();
    assert_eq!(status, [("a", "succeeded"), ("b", "running")], "the call's writes, once: b waits for lease expiry");
    let events = store.events("r1", 0, 100).await.expect("events");
    let kinds = |kind: &str| events.iter().filter(|e| e.kind == kind).count();
    assert_eq!((kinds("step_succeeded"), kinds("step_started")), (1, 2), "written once: {events:?}");
}
