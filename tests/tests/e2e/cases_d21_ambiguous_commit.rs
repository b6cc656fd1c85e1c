//! Case D21 (`cases2.md`): a write that timed out but actually committed must not leave a wait without its
//! timeout. PostgreSQL only: the fault is a lost answer to a `COMMIT` the server ran, which SQLite (embedded, no
//! connection to lose) cannot have.
//!
//! **What is faulted.** The engine's store connects through the lost-answer proxy of
//! `store/tests/store/pg_proxy.rs` in its [`pg_proxy::Loss::CommitAnswerAfter`] mode: armed once, it waits for the
//! first message naming a marker statement, lets that statement and the rest of its transaction through, forwards
//! the transaction's `COMMIT` to the server, and then closes the client's socket instead of passing the answer
//! on. The transaction committed; the engine sees a lost connection. The marker is a statement that only the
//! transition under test runs, its text sent for the first time on that connection (a prepared statement's
//! text crosses a connection once). One test per transition of the case:
//!
//! | transition | marker statement | path that loses the answer |
//! |---|---|---|
//! | `paid` (`event.wait`) starts waiting | `INSERT INTO event_waits` | the submission's start of its `event.wait` root |
//! | `gate` enters `waiting_approval` | the decision of a pending step (`UPDATE steps SET status = $3, available_at = $4`) | the batch writer, completing `prep` |
//! | `later` (`not_before: "+30s"`) becomes `ready` | PostgreSQL's success statement, which releases the dependents (`released AS (UPDATE steps SET`) | the batch writer, completing `prep` |
//! | `flaky` records a failed attempt and its `next_attempt_at` | the requeue for a retry (`UPDATE steps SET status = 'ready', available_at = $4`) | the batch writer, failing attempt 1 |
//! | a run with an `idempotency_key` is created | the run insert (`INSERT INTO runs`) | the batch writer, creating the run |
//!
//! In each, the caller then does what a caller of Cairn does after an ambiguous answer: the waiting loop makes
//! its next pass, the worker resends its report, the client resubmits with the same key.
//!
//! **Expected** (the case's, which is also the contract's: a transition and the records it needs are written in
//! one transaction, and every write is fenced): the retry finds its own earlier commit and changes nothing
//! (the worker's resend is answered `Stale`: its report was recorded); the wait times out at 30 s and fails per
//! `on_timeout: fail`; the approval times out at 30 s; the `not_before` step is claimable at 30 s and not before;
//! the retry is claimable at `next_attempt_at` and not before; the resubmission returns the run the lost answer
//! created. Exactly one timer (`available_at` or the wait's deadline), wait registration (`event_waits` row) and
//! `run_events` entry per transition: none missing, none duplicated. The clock is manual; "at 30 s" is checked
//! as nothing at 29.5 s and the transition at 30 s (the cases' ±500 ms). Each test ends with the invariant
//! sweep.

#![allow(clippy::unwrap_used)]

use crate::pg_proxy;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cairn_core::catalog::StaticCatalog;
use cairn_core::clock::ManualClock;
use cairn_core::failure::Failure;
use cairn_orchestrator::{Engine, EngineConfig, SubmitRequest};
use cairn_store::{Claimed, Report, Store};
use cairn_tests::{TestApp, invariants, raw};
use jiff::Timestamp;
use serde_json::{Value, json};

const START: &str = "2027-06-01T09:00:00Z";
const THIRTY_S: Duration = Duration::from_secs(30);
const HALF_S: Duration = Duration::from_millis(500);

/// A fresh PostgreSQL database and an engine over it whose connections all pass through the proxy, losing the
/// answer to the `COMMIT` of the transaction that sends `marker` once the returned flag is set.
async fn engine_behind_proxy(marker: &'static [u8]) -> (TestApp, Arc<AtomicBool>) {
    let direct = cairn_tests::postgres_url().await;
    let options: sqlx::postgres::PgConnectOptions = direct.parse().unwrap();
    let server = tokio::net::lookup_host((options.get_host(), options.get_port())).await.unwrap().next().unwrap();
    let (port, armed) = pg_proxy::proxy(server, marker, false, pg_proxy::Loss::CommitAnswerAfter).await;
    let url = format!("postgres://{}@127.0.0.1:{port}/{}", options.get_username(), options.get_database().unwrap());
    let store = Store::connect(&url).await.unwrap();
    let clock = Arc::new(ManualClock::new(START.parse::<Timestamp>().unwrap()));
    let config = EngineConfig::default();
    let engine = Engine::start(store, clock.clone(), Arc::new(StaticCatalog::builtin()), config.clone()).await.unwrap();
    let database = Arc::new(cairn_tests::Dropped(direct));
    (TestApp { engine, clock, url, config, database }, armed)
}

fn assert_lost(armed: &AtomicBool, what: &str) {
    assert!(!armed.load(Ordering::SeqCst), "the proxy lost the answer to the COMMIT that {what}");
}

/// How many of the run's events are `kind` for `step` (`None`: run-level).
async fn events(app: &TestApp, run: &str, step: Option<&str>, kind: &str) -> Vec<Value> {
    let all = app.store().events(run, 0, 1000).await.unwrap();
    all.into_iter().filter(|e| e.step_id.as_deref() == step && e.kind == kind).map(|e| e.data).collect()
}

/// The one `event_waits` row's deadline for the step, or how many rows there are.
async fn wait_deadlines(app: &TestApp, run: &str, step: &str) -> Vec<i64> {
    let sql = "SELECT run_id, step_id, COALESCE(deadline_at, -1) AS deadline_at FROM event_waits";
    let rows: Vec<(String, String, i64)> = raw::fetch_all(app.store(), sql).await;
    rows.into_iter().filter(|(r, s, _)| r == run && s == step).map(|(_, _, d)| d).collect()
}

async fn claim(app: &TestApp, action: &str) -> Vec<Claimed> {
    app.engine.claim("w1", &[action.to_owned()], 8).await.unwrap()
}

/// Claims the one `action` step due now.
async fn claim_one(app: &TestApp, action: &str) -> Claimed {
    let mut claimed = claim(app, action).await;
    assert_eq!(claimed.len(), 1, "one {action} step is due: {claimed:?}");
    claimed.remove(0)
}

/// The worker's report whose answer was lost, and its resend: the first fails retryably, the resend finds the
/// report recorded by the lost commit and changes nothing.
async fn report_twice(first: cairn_store::StoreResult<Report>, resend: cairn_store::StoreResult<Report>) {
    let error = first.expect_err("the report's answer was lost with its COMMIT's");
    assert!(error.is_retryable(), "a lost answer is retryable for the worker: {error}");
    assert_eq!(resend.unwrap(), Report::Stale, "the resend finds its report already recorded: nothing more");
}

/// `paid` is an `event.wait` root (no event is ever sent): the submission starts the wait, and that start's
/// answer is lost. The waiting loop's next pass starts nothing more; the wait still has its 30 s deadline, and
/// at 30 s `paid` fails with `event_timeout` and `after` is skipped.
#[tokio::test]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: a lost COMMIT answer needs PostgreSQL")]
async fn d21_a_wait_whose_start_lost_its_commit_answer_still_times_out_at_30_s() {
    let (app, armed) = engine_behind_proxy(b"INSERT INTO event_waits").await;
    armed.store(true, Ordering::SeqCst);
    let run = app
        .submit(json!({"steps": [
            {"id": "paid", "action": "event.wait",
             "args": {"name": "payment.captured", "key": "o-1", "timeout_ms": 30000}},
            {"id": "after", "action": "notify.send", "args": {"channels": ["stdout"], "text": "continue"},
             "depends_on": ["paid"]}]}))
        .await;
    assert_lost(&armed, "started the wait");
    let deadline = app.now_ms() + 30_000;

    app.engine.waiting_pass().await.unwrap(); // the waiting loop's next pass after the failed start

    assert_eq!(app.status(&run, "paid").await, "running", "the wait committed");
    assert_eq!(wait_deadlines(&app, &run, "paid").await, [deadline], "one wait row, with its 30 s deadline");
    assert_eq!(events(&app, &run, Some("paid"), "step_started").await.len(), 1, "started once");
    let waiting = events(&app, &run, Some("paid"), "step_waiting_event").await;
    assert_eq!(waiting.len(), 1, "one step_waiting_event: {waiting:?}");
    assert_eq!(waiting[0]["deadline"], deadline, "the history names the deadline");
    invariants::assert_hold(app.store(), "d21 wait, waiting").await;

    app.advance(THIRTY_S - HALF_S);
    app.engine.waiting_pass().await.unwrap();
    assert_eq!(app.status(&run, "paid").await, "running", "not timed out at 29.5 s");
    app.advance(HALF_S);
    app.engine.waiting_pass().await.unwrap();

    let paid = app.step(&run, "paid").await;
    assert_eq!(paid.status, "failed", "timed out at 30 s, on_timeout fail");
    assert_eq!(paid.error.unwrap()["code"], "event_timeout");
    assert_eq!(app.status(&run, "after").await, "skipped", "the dependent follows the trigger rule");
    assert_eq!(app.run(&run).await.status, "failed");
    assert_eq!(events(&app, &run, Some("paid"), "step_event_timed_out").await.len(), 1, "timed out once");
    assert_eq!(events(&app, &run, Some("paid"), "step_failed").await.len(), 1, "failed once");
    assert!(wait_deadlines(&app, &run, "paid").await.is_empty(), "the wait row is gone with the wait");
    invariants::assert_hold(app.store(), "d21 wait, timed out").await;
}

/// `gate` needs approval (30 s, on_timeout fail) after `prep`; the completion of `prep`, which puts `gate` into
/// `waiting_approval`, loses its answer. The worker resends; `gate` waits with one deadline, 30 s after the
/// completion, and fails with `approval_timeout` then.
#[tokio::test]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: a lost COMMIT answer needs PostgreSQL")]
async fn d21_an_approval_whose_entry_lost_its_commit_answer_still_times_out_at_30_s() {
    let (app, armed) = engine_behind_proxy(b"UPDATE steps SET status = $3, available_at = $4").await;
    let run = app
        .submit(json!({"steps": [
            {"id": "prep", "action": "noop", "args": {}},
            {"id": "gate", "action": "notify.send", "args": {"channels": ["stdout"], "text": "deploy"},
             "depends_on": ["prep"], "approval": {"required": true, "timeout_ms": 30000, "on_timeout": "fail"}}]}))
        .await;
    let prep = claim_one(&app, "noop").await;
    armed.store(true, Ordering::SeqCst);

    let first = app.engine.complete(&prep.lease, &json!({})).await;
    assert_lost(&armed, "put gate into waiting_approval");
    report_twice(first, app.engine.complete(&prep.lease, &json!({})).await).await;

    let deadline = app.now_ms() + 30_000;
    let gate = app.step(&run, "gate").await;
    assert_eq!((gate.status.as_str(), gate.available_at_ms), ("waiting_approval", Some(deadline)), "one deadline");
    assert_eq!(events(&app, &run, Some("prep"), "step_succeeded").await.len(), 1, "prep succeeded once");
    let entered = events(&app, &run, Some("gate"), "step_waiting_approval").await;
    assert_eq!(entered, [json!({"deadline": deadline})], "gate entered waiting_approval once");
    invariants::assert_hold(app.store(), "d21 approval, waiting").await;

    app.advance(THIRTY_S - HALF_S);
    assert_eq!(app.engine.expire_approvals().await.unwrap(), 0, "not timed out at 29.5 s");
    app.advance(HALF_S);
    assert_eq!(app.engine.expire_approvals().await.unwrap(), 1, "timed out at 30 s");

    let gate = app.step(&run, "gate").await;
    assert_eq!(gate.status, "failed", "on_timeout fail");
    assert_eq!(gate.error.unwrap()["code"], "approval_timeout");
    assert_eq!(app.run(&run).await.status, "failed");
    assert_eq!(events(&app, &run, Some("gate"), "step_approval_timed_out").await.len(), 1, "timed out once");
    assert_eq!(app.engine.expire_approvals().await.unwrap(), 0, "and only once");
    invariants::assert_hold(app.store(), "d21 approval, timed out").await;
}

/// `later` (`not_before: "+30s"`, resolved at submission) depends on `prep`; the completion of `prep`, which
/// makes `later` ready with its timer, loses its answer. The worker resends; `later` is ready once, due at 30 s,
/// and is handed out then, not before.
#[tokio::test]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: a lost COMMIT answer needs PostgreSQL")]
async fn d21_a_not_before_step_whose_release_lost_its_commit_answer_starts_at_30_s() {
    let (app, armed) = engine_behind_proxy(b"released AS (UPDATE steps SET").await;
    let run = app
        .submit(json!({"steps": [
            {"id": "prep", "action": "noop", "args": {}},
            {"id": "later", "action": "notify.send", "args": {"channels": ["stdout"], "text": "later"},
             "depends_on": ["prep"], "not_before": "+30s"}]}))
        .await;
    let due = app.now_ms() + 30_000;
    let prep = claim_one(&app, "noop").await;
    armed.store(true, Ordering::SeqCst);

    let first = app.engine.complete(&prep.lease, &json!({})).await;
    assert_lost(&armed, "made later ready");
    report_twice(first, app.engine.complete(&prep.lease, &json!({})).await).await;

    let later = app.step(&run, "later").await;
    assert_eq!((later.status.as_str(), later.available_at_ms), ("ready", Some(due)), "one timer, at 30 s");
    assert_eq!(events(&app, &run, Some("prep"), "step_succeeded").await.len(), 1, "prep succeeded once");
    let ready = events(&app, &run, Some("later"), "step_ready").await;
    assert_eq!(ready, [json!({"available_at": due})], "later became ready once");
    invariants::assert_hold(app.store(), "d21 not_before, ready").await;

    app.advance(THIRTY_S - HALF_S);
    assert!(claim(&app, "notify.send").await.is_empty(), "not claimable at 29.5 s");
    app.advance(HALF_S);
    let started = claim_one(&app, "notify.send").await;

    assert_eq!((started.lease.step_id.as_str(), started.lease.attempt), ("later", 1), "starts at 30 s");
    assert_eq!(started.due_at_ms, due);
    let report = app.engine.complete(&started.lease, &json!({"deliveries": []})).await.unwrap();
    assert_eq!(report, Report::Succeeded);
    assert_eq!(app.run(&run).await.status, "succeeded");
    assert_eq!(events(&app, &run, Some("later"), "step_started").await.len(), 1, "started once");
    invariants::assert_hold(app.store(), "d21 not_before, done").await;
}

/// `flaky` fails its first attempt (retryable; backoff 30 s, no jitter); the report, which records the failure
/// and `next_attempt_at`, loses its answer. The worker resends; the failure is recorded once, and attempt 2 is
/// handed out at `next_attempt_at`, not before.
#[tokio::test]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: a lost COMMIT answer needs PostgreSQL")]
async fn d21_a_retry_whose_failure_lost_its_commit_answer_happens_at_next_attempt_at() {
    let (app, armed) = engine_behind_proxy(b"UPDATE steps SET status = 'ready', available_at = $4").await;
    let run = app
        .submit(json!({"steps": [{"id": "flaky", "action": "noop", "args": {}, "idempotent": true,
            "retry": {"max_attempts": 3, "initial_interval_ms": 30000, "jitter": "none"}}]}))
        .await;
    let attempt1 = claim_one(&app, "noop").await;
    let failure = Failure::new("action_error", "the upstream answered 503", true);
    armed.store(true, Ordering::SeqCst);

    let first = app.engine.fail(&attempt1.lease, &failure).await;
    assert_lost(&armed, "recorded the failure and next_attempt_at");
    report_twice(first, app.engine.fail(&attempt1.lease, &failure).await).await;

    let next_attempt_at = app.now_ms() + 30_000;
    let flaky = app.step(&run, "flaky").await;
    assert_eq!((flaky.status.as_str(), flaky.available_at_ms), ("ready", Some(next_attempt_at)), "one timer");
    let scheduled = events(&app, &run, Some("flaky"), "step_retry_scheduled").await;
    assert_eq!(scheduled.len(), 1, "one step_retry_scheduled: {scheduled:?}");
    assert_eq!(scheduled[0]["next_attempt_at"], next_attempt_at);
    let attempts = app.store().attempts(&run).await.unwrap();
    let closed: Vec<(u32, &str)> = attempts.iter().map(|a| (a.attempt, a.status.as_str())).collect();
    assert_eq!(closed, [(1, "failed")], "the failure recorded once, on attempt 1");
    invariants::assert_hold(app.store(), "d21 retry, in backoff").await;

    app.advance(THIRTY_S - HALF_S);
    assert!(claim(&app, "noop").await.is_empty(), "not retried at 29.5 s");
    app.advance(HALF_S);
    let attempt2 = claim_one(&app, "noop").await;

    assert_eq!(attempt2.lease.attempt, 2, "the retry is attempt 2, at next_attempt_at");
    assert_eq!(attempt2.due_at_ms, next_attempt_at);
    assert_eq!(app.engine.complete(&attempt2.lease, &json!({})).await.unwrap(), Report::Succeeded);
    assert_eq!(app.run(&run).await.status, "succeeded");
    assert_eq!(events(&app, &run, Some("flaky"), "step_started").await.len(), 2, "two attempts, no more");
    invariants::assert_hold(app.store(), "d21 retry, done").await;
}

/// A run submitted with an `idempotency_key`, whose creating batch loses its `COMMIT` answer: the engine finds
/// the run the batch committed and answers it as created; the client's retry of the submission (as after a
/// timeout) returns that run as existing. One run, created once.
#[tokio::test]
#[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: a lost COMMIT answer needs PostgreSQL")]
async fn d21_a_submission_whose_commit_answer_was_lost_is_one_run_and_its_retry_returns_it() {
    let (app, armed) = engine_behind_proxy(b"INSERT INTO runs").await;
    let plan = json!({"steps": [{"id": "charge", "action": "noop", "args": {"order": "o-1"}}]});
    let request =
        SubmitRequest { plan, input: None, idempotency_key: Some("order-o-1".into()), labels: Default::default() };
    armed.store(true, Ordering::SeqCst);

    let first = app.engine.submit(&request).await.unwrap();
    assert_lost(&armed, "created the run");
    let retried = app.engine.submit(&request).await.unwrap();

    assert!(!first.existing, "the first answer names the run its lost commit created");
    assert_eq!(retried.run_id, first.run_id, "the retried submission returns the existing run");
    assert!(retried.existing, "and says it existed");
    let runs = app.store().runs(None, 10, 0).await.unwrap();
    assert_eq!(runs.len(), 1, "one run: {runs:?}");
    let run = &first.run_id;
    assert_eq!(events(&app, run, None, "run_created").await.len(), 1, "created once");
    assert_eq!(events(&app, run, Some("charge"), "step_ready").await.len(), 1, "its step ready once");
    let charge = claim_one(&app, "noop").await;
    assert_eq!(app.engine.complete(&charge.lease, &json!({})).await.unwrap(), Report::Succeeded);
    assert!(claim(&app, "noop").await.is_empty(), "and no second copy of it to run");
    assert_eq!(app.run(run).await.status, "succeeded");
    invariants::assert_hold(app.store(), "d21 idempotent submission").await;
}
