//! Cases D14 and D15 of `../shared/cases/cases2.md`, and D16 variants b and c (variant a, with real processes,
//! is `cases_d16_retry_timeouts.rs`): leases against attempts, retries and the reaper, in-process with a manual
//! clock on both backends.
//!
//! - D14 (Sidekiq #4069): a job that kills its worker is retried forever when attempts are counted on failure
//!   only. Cairn counts an attempt when it is leased: a step whose every attempt loses its worker ends after
//!   `max_attempts`, with backoff between them, while a healthy run completes; non-idempotent, after one.
//! - D15 (River #1302): the reaper must never overwrite a completion that committed after it looked. Every
//!   reaper and completion write is a compare-and-set on (step, attempt, lease owner).
//! - D16 b, c (LittleHorse #2339): the timeout of a retry attempt is its own — a heartbeat timeout on attempt 2
//!   only, and an orchestrator restart during attempt 2.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use cairn_core::failure::Failure;
use cairn_store::{HeartbeatOutcome, Lease, Report};
use cairn_tests::{Backend, Outcome, TestApp, TestWorker, on_both_backends};
use serde_json::{Value, json};

const START: &str = "2027-03-14T12:00:00Z";

fn advance_ms(app: &TestApp, ms: u64) {
    app.advance(Duration::from_millis(ms));
}

async fn claim(app: &TestApp, worker: &str, action: &str) -> Vec<Lease> {
    app.engine.claim(worker, &[action.to_owned()], 8).await.unwrap().into_iter().map(|c| c.lease).collect()
}

async fn codes(app: &TestApp, run: &str, step: &str) -> Vec<(u32, Value)> {
    let attempts = app.store().attempts(run).await.unwrap();
    attempts
        .into_iter()
        .filter(|a| a.step_id == step)
        .map(|a| (a.attempt, a.failure.map_or(Value::Null, |f| f["code"].clone())))
        .collect()
}

fn crunch(idempotent: bool) -> Value {
    json!({"steps": [{"id": "crunch", "action": "http.request", "args": {"url": "http://127.0.0.1:9/poison"},
        "idempotent": idempotent, "heartbeat_timeout_ms": 3000,
        "retry": {"max_attempts": 3, "initial_interval_ms": 1000, "backoff_coefficient": 2, "max_interval_ms": 10000,
                  "jitter": "none"}}]})
}

on_both_backends!(d14_an_attempt_counts_when_leased_so_a_worker_killing_step_ends_after_max_attempts);
async fn d14_an_attempt_counts_when_leased_so_a_worker_killing_step_ends_after_max_attempts(backend: Backend) {
    let app = TestApp::new(backend, START).await;
    advance_ms(&app, 60_000); // past the start-up grace: the reaper is fully active
    let run = app.submit(crunch(true)).await;
    let healthy = app
        .submit(json!({"steps": (0..100).map(|i| json!({"id": format!("n{i}"), "action": "noop",
            "args": {}})).collect::<Vec<_>>()}))
        .await;
    let mut leased = Vec::new();

    for (attempt, backoff) in [(1, 1_000), (2, 2_000), (3, 0)] {
        let leases = claim(&app, "w1", "http.request").await;
        assert_eq!(leases.len(), 1, "{backend:?}: attempt {attempt} is dispatched once");
        assert_eq!(leases[0].attempt, attempt, "{backend:?}: numbered when leased");
        leased.push(leases[0].clone());
        advance_ms(&app, 3_000); // the worker died: no heartbeat
        assert_eq!(app.reap().await, 1, "{backend:?}: attempt {attempt} reaped at its heartbeat timeout");
        if backoff > 0 {
            advance_ms(&app, backoff - 1);
            assert!(claim(&app, "w1", "http.request").await.is_empty(), "{backend:?}: backoff is respected");
            advance_ms(&app, 1);
        }
    }
    TestWorker::new("w2").echo("noop").run_until_idle(&app.engine).await;

    assert!(claim(&app, "w1", "http.request").await.is_empty(), "{backend:?}: no fourth dispatch");
    assert_eq!(app.status(&run, "crunch").await, "failed", "{backend:?}");
    let records = codes(&app, &run, "crunch").await;
    assert_eq!(records.len(), 3, "{backend:?}: one failure record per attempt: {records:?}");
    assert!(records.iter().all(|(_, code)| code == "heartbeat_timeout"), "{backend:?}: {records:?}");
    assert_eq!(app.run(&healthy).await.status, "succeeded", "{backend:?}: the healthy run completed meanwhile");
    let late = app.engine.complete(&leased[0], &json!({})).await.unwrap();
    assert_eq!(late, Report::Stale, "{backend:?}: (b) a resumed worker's late report is ignored");
}

on_both_backends!(d14_c_a_non_idempotent_step_that_kills_its_worker_is_never_dispatched_twice);
async fn d14_c_a_non_idempotent_step_that_kills_its_worker_is_never_dispatched_twice(backend: Backend) {
    let app = TestApp::new(backend, START).await;
    advance_ms(&app, 60_000);
    let run = app.submit(crunch(false)).await;

    assert_eq!(claim(&app, "w1", "http.request").await.len(), 1);
    advance_ms(&app, 3_000);
    assert_eq!(app.reap().await, 1);
    advance_ms(&app, 60_000);

    assert!(claim(&app, "w1", "http.request").await.is_empty(), "{backend:?}: no second dispatch");
    assert_eq!(app.status(&run, "crunch").await, "outcome_unknown", "{backend:?}: an operator decides");
}

fn slow_then_notify() -> Value {
    json!({"steps": [
        {"id": "a", "action": "http.request", "args": {"url": "http://127.0.0.1:9/slow"}, "heartbeat_timeout_ms": 2000,
         "idempotent": true, "retry": {"max_attempts": 3, "initial_interval_ms": 100}},
        {"id": "b", "action": "notify.send", "args": {"text": "a done"}, "depends_on": ["a"]}
    ]})
}

on_both_backends!(d15_i_a_completion_after_the_lease_expired_but_before_any_reaper_acted_wins);
async fn d15_i_a_completion_after_the_lease_expired_but_before_any_reaper_acted_wins(backend: Backend) {
    let app = TestApp::new(backend, START).await;
    advance_ms(&app, 60_000);
    let run = app.submit(slow_then_notify()).await;
    let lease = claim(&app, "w1", "http.request").await.remove(0);
    advance_ms(&app, 3_000); // frozen: the lease looks expired, nobody reclaimed it yet

    let report = app.engine.complete(&lease, &json!({"status": 200})).await.unwrap();
    let reaped = app.reap().await;
    let notified = TestWorker::new("w2").echo("notify.send");
    notified.run_until_idle(&app.engine).await;

    assert_eq!(report, Report::Succeeded, "{backend:?}: whichever transition commits first wins");
    assert_eq!(reaped, 0, "{backend:?}: the reaper's update matches nothing");
    assert_eq!(app.status(&run, "a").await, "succeeded");
    assert_eq!(codes(&app, &run, "a").await, [(1, Value::Null)], "{backend:?}: one attempt, no lease_lost");
    assert_eq!(notified.calls_for("b").len(), 1, "{backend:?}: calls(b) == 1");
}

on_both_backends!(d15_ii_iii_a_reaped_attempt_cannot_touch_the_next_one_and_its_late_success_is_refused);
async fn d15_ii_iii_a_reaped_attempt_cannot_touch_the_next_one_and_its_late_success_is_refused(backend: Backend) {
    let app = TestApp::new(backend, START).await;
    advance_ms(&app, 60_000);
    let run = app.submit(slow_then_notify()).await;
    let first = claim(&app, "w1", "http.request").await.remove(0);
    advance_ms(&app, 3_000);
    assert_eq!(app.reap().await, 1, "(iii) the reaper goes first: attempt 1 is lost");
    advance_ms(&app, 100);
    let second = claim(&app, "w2", "http.request").await.remove(0);
    assert_eq!(second.attempt, 2);

    let stale_decision = app.engine.fail(&first, &Failure::new("lease_lost", "a stale reaper decision", true)).await;
    let late_success = app.engine.complete(&first, &json!({"late": true})).await.unwrap();
    let told_to_stop = app.engine.heartbeat(&first, None).await.unwrap();

    assert_eq!(stale_decision.unwrap(), Report::Stale, "{backend:?}: (ii) attempt 2 is not touched");
    assert_eq!(late_success, Report::Stale, "{backend:?}: (iii) the late success changes nothing");
    assert_eq!(told_to_stop, HeartbeatOutcome::Gone, "{backend:?}: its action is told to stop");
    assert_eq!(app.status(&run, "a").await, "running", "{backend:?}: attempt 2 runs");
    assert_eq!(app.engine.complete(&second, &json!({"status": 200})).await.unwrap(), Report::Succeeded);
    advance_ms(&app, 86_400_000);
    assert_eq!(app.reap().await, 0, "{backend:?}: never a succeeded step moved back by the reaper");
    let notified = TestWorker::new("w3").echo("notify.send");
    notified.run_until_idle(&app.engine).await;
    assert_eq!(app.status(&run, "a").await, "succeeded");
    assert_eq!(notified.calls_for("b").len(), 1, "{backend:?}: calls(b) == 1");
}

fn heartbeating_call() -> Value {
    json!({"steps": [{"id": "call", "action": "http.request", "args": {"url": "http://127.0.0.1:9/slow"},
        "timeout_ms": 2000, "heartbeat_timeout_ms": 1000, "idempotent": true,
        "retry": {"max_attempts": 3, "initial_interval_ms": 500, "backoff_coefficient": 2, "max_interval_ms": 5000,
                  "jitter": "none"}}]})
}

on_both_backends!(d16_b_a_heartbeat_timeout_on_attempt_2_fires_for_attempt_2_only);
async fn d16_b_a_heartbeat_timeout_on_attempt_2_fires_for_attempt_2_only(backend: Backend) {
    let app = TestApp::new(backend, START).await;
    advance_ms(&app, 60_000);
    let run = app.submit(heartbeating_call()).await;

    let one = claim(&app, "w1", "http.request").await.remove(0);
    for _ in 0..4 {
        advance_ms(&app, 500);
        assert!(matches!(app.engine.heartbeat(&one, None).await.unwrap(), HeartbeatOutcome::Extended { .. }));
        assert_eq!(app.reap().await, 0, "{backend:?}: attempt 1 heartbeats");
    }
    advance_ms(&app, 200);
    assert_eq!(app.reap().await, 1, "{backend:?}: attempt 1 reaches its timeout (plus the backstop's tenth)");
    advance_ms(&app, 500);
    let two = claim(&app, "w1", "http.request").await.remove(0);
    advance_ms(&app, 999);
    assert_eq!(app.reap().await, 0, "{backend:?}: attempt 2 gets its own full heartbeat timeout");
    advance_ms(&app, 1);
    assert_eq!(app.reap().await, 1, "{backend:?}: attempt 2 ends 1 s after its last heartbeat (its start)");

    assert_eq!(two.attempt, 2);
    let records = codes(&app, &run, "call").await;
    assert_eq!(records, [(1, json!("timeout")), (2, json!("heartbeat_timeout"))], "{backend:?}");
}

on_both_backends!(d16_c_after_a_restart_during_attempt_2_its_timeout_still_fires_for_it);
async fn d16_c_after_a_restart_during_attempt_2_its_timeout_still_fires_for_it(backend: Backend) {
    let app = TestApp::new(backend, START).await;
    advance_ms(&app, 60_000);
    let run = app.submit(heartbeating_call()).await;
    let worker = TestWorker::new("w1").on("http.request", |_| Outcome::Hang);
    worker.run_until_idle(&app.engine).await;
    advance_ms(&app, 1_000);
    assert_eq!(app.reap().await, 1, "attempt 1: heartbeat timeout");
    advance_ms(&app, 500);
    worker.run_until_idle(&app.engine).await;
    assert_eq!(worker.calls().last().unwrap().lease.attempt, 2);

    let app = app.restart().await;
    advance_ms(&app, 500);
    assert_eq!(app.reap().await, 0, "{backend:?}: within the restart's start-up grace");
    advance_ms(&app, 10_000); // past the grace (one lease TTL)

    assert_eq!(app.reap().await, 1, "{backend:?}: attempt 2's lease, reloaded from the store, expires");
    let records = codes(&app, &run, "call").await;
    assert_eq!(records, [(1, json!("heartbeat_timeout")), (2, json!("heartbeat_timeout"))], "{backend:?}");
    assert!(app.engine.claim("w1", &["http.request".to_owned()], 1).await.unwrap().is_empty(), "backoff 1 s");
}
