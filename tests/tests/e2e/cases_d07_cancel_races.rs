//! Case D07 of `../shared/cases/cases2.md`: a cancel that lands just before completion is overwritten by success
//! (DBOS PR #703, Mastra #17908). Cairn's rule (contract §5): `cancelled` is final, and a report whose lease the
//! cancel ended changes nothing (it is answered `STALE`; Cairn records no `result_ignored` event: the contract
//! says such a report changes nothing, history included).
//!
//! Variant a races a completion on one orchestrator against a cancel on another (two engines on one database on
//! PostgreSQL; on SQLite, one engine: it serves one orchestrator), `D07_ITERATIONS` times (20 in CI;
//! `tests/soak/cases2.sh` runs the case's 500). Variant c: a durable timer (`not_before`) that comes due after the
//! cancel starts nothing. Variant d: cancelling a finished run is 409 and changes nothing; two cancels at once
//! record one cancellation.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use cairn_core::catalog::StaticCatalog;
use cairn_orchestrator::Engine;
use cairn_store::{Report, Store};
use cairn_tests::{Backend, Outcome, TestApp, TestWorker, on_both_backends};
use serde_json::{Value, json};

const START: &str = "2027-03-14T12:00:00Z";

fn iterations() -> usize {
    std::env::var("D07_ITERATIONS").ok().and_then(|n| n.parse().ok()).unwrap_or(20)
}

fn plan() -> Value {
    json!({"steps": [
        {"id": "a", "action": "noop", "args": {}, "idempotent": true},
        {"id": "b", "action": "notify.send", "args": {"channels": ["stdout"], "text": "after a"}, "depends_on": ["a"],
         "idempotent": false}
    ]})
}

/// A second engine over `app`'s database and clock (PostgreSQL: a second orchestrator); `app`'s own on SQLite.
async fn other_orchestrator(app: &TestApp, backend: Backend) -> Engine {
    if backend == Backend::Sqlite {
        return app.engine.clone();
    }
    let store = Store::connect(&app.url).await.unwrap();
    Engine::start(store, app.clock.clone(), Arc::new(StaticCatalog::builtin()), app.config.clone()).await.unwrap()
}

async fn kinds(app: &TestApp, run_id: &str) -> Vec<String> {
    app.store().events(run_id, 0, 10_000).await.unwrap().into_iter().map(|e| e.kind.to_string()).collect()
}

on_both_backends!(d07_a_a_completion_racing_a_cancel_ends_in_one_consistent_outcome);
async fn d07_a_a_completion_racing_a_cancel_ends_in_one_consistent_outcome(backend: Backend) {
    let app = TestApp::new(backend, START).await;
    let other = other_orchestrator(&app, backend).await;
    let (mut cancel_won, mut completion_won) = (0, 0);
    for i in 0..iterations() {
        let run_id = app.submit(plan()).await;
        let lease = app.engine.claim("w1", &["noop".to_owned()], 1).await.unwrap().remove(0).lease;

        let output = json!({"i": i});
        let (report, cancelled) = tokio::join!(app.engine.complete(&lease, &output), other.cancel_run(&run_id));
        let (report, cancelled) = (report.unwrap(), cancelled.unwrap());

        let run = app.run(&run_id).await;
        let (a, b) = (app.status(&run_id, "a").await, app.status(&run_id, "b").await);
        let claimed_b = app.engine.claim("w2", &["notify.send".to_owned()], 1).await.unwrap();
        assert!(claimed_b.is_empty(), "{backend:?} #{i}: calls(b) == 0 either way: b is never handed out");
        assert_eq!(run.status, "cancelled", "{backend:?} #{i}: the run was open, so the cancel applies");
        assert!(cancelled, "{backend:?} #{i}: the cancel answers that it cancelled");
        match report {
            Report::Stale => {
                cancel_won += 1;
                assert_eq!(a, "cancelled", "{backend:?} #{i}: cancel first: a is cancelled, the result ignored");
            }
            Report::Succeeded => {
                completion_won += 1;
                assert_eq!(a, "succeeded", "{backend:?} #{i}: completion first: a keeps its success");
            }
            other => panic!("{backend:?} #{i}: unexpected report {other:?}"),
        }
        assert_eq!(b, "cancelled", "{backend:?} #{i}: the cancel stops b");
        let history = kinds(&app, &run_id).await;
        let cancelled_at = history.iter().position(|k| k == "run_cancelled").unwrap();
        assert!(
            !history[cancelled_at..].iter().any(|k| k == "step_started" || k == "step_succeeded"),
            "{backend:?} #{i}: nothing starts or succeeds after the cancellation: {history:?}"
        );
    }
    eprintln!("{backend:?}: cancel first {cancel_won}, completion first {completion_won}");
}

on_both_backends!(d07_c_a_timer_that_comes_due_after_the_cancel_starts_nothing);
async fn d07_c_a_timer_that_comes_due_after_the_cancel_starts_nothing(backend: Backend) {
    let app = TestApp::new(backend, START).await;
    let worker = TestWorker::new("w1").on("noop", |_| Outcome::Succeed(json!({}))).echo("notify.send");
    let run_id = app
        .submit(json!({"steps": [
            {"id": "a", "action": "noop", "args": {}, "not_before": "+10s"},
            {"id": "b", "action": "notify.send", "args": {"text": "after a"}, "depends_on": ["a"]}
        ]}))
        .await;

    app.advance(Duration::from_secs(5));
    assert!(app.engine.cancel_run(&run_id).await.unwrap(), "{backend:?}: cancelled at 5 s");
    app.advance(Duration::from_secs(6));
    worker.run_until_idle(&app.engine).await;

    assert!(worker.calls().is_empty(), "{backend:?}: calls(a) == calls(b) == 0 after the clock passed 10 s");
    assert_eq!(app.run(&run_id).await.status, "cancelled");
    assert_eq!(app.status(&run_id, "a").await, "cancelled", "{backend:?}: the timer is void");
}

on_both_backends!(d07_d_a_finished_run_cannot_be_cancelled_and_two_cancels_record_one);
async fn d07_d_a_finished_run_cannot_be_cancelled_and_two_cancels_record_one(backend: Backend) {
    let app = TestApp::new(backend, START).await;
    let worker = TestWorker::new("w1").echo("noop").echo("notify.send");
    let done = app.submit(plan()).await;
    worker.run_until_idle(&app.engine).await;
    assert_eq!(app.run(&done).await.status, "succeeded");
    let before = kinds(&app, &done).await;

    assert!(!app.engine.cancel_run(&done).await.unwrap(), "{backend:?}: a finished run is not cancelled");
    assert_eq!(kinds(&app, &done).await, before, "{backend:?}: its history is unchanged");
    assert_eq!(app.run(&done).await.status, "succeeded");

    let open = app.submit(plan()).await;
    let other = other_orchestrator(&app, backend).await;
    let (one, two) = tokio::join!(app.engine.cancel_run(&open), other.cancel_run(&open));
    let answers = [one.unwrap(), two.unwrap()];
    let history = kinds(&app, &open).await;

    assert_eq!(answers.iter().filter(|a| **a).count(), 1, "{backend:?}: one cancel applies: {answers:?}");
    assert_eq!(history.iter().filter(|k| *k == "run_cancelled").count(), 1, "{backend:?}: {history:?}");
}
