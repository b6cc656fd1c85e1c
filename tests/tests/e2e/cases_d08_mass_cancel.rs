//! Case D08 variant a of `../shared/cases/cases2.md` (Restate #3217): after a mass cancel the dispatcher kept
//! retrying the cancelled work. Here `D08_RUNS` runs (500 in CI; `tests/soak/cases2.sh` runs the case's 20,000)
//! of a retried `f` and its dependent `g` are cancelled while some attempts are in flight and most wait in retry
//! backoff or the queue: afterwards nothing is handed out however far the clock moves, the attempts in flight are
//! told to stop and their late results change nothing, the ready queue is empty, and a new run completes.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use cairn_core::failure::Failure;
use cairn_store::{HeartbeatOutcome, Report};
use cairn_tests::{Backend, TestApp, TestWorker, on_both_backends};
use serde_json::{Value, json};

const START: &str = "2027-03-14T12:00:00Z";

fn runs() -> usize {
    std::env::var("D08_RUNS").ok().and_then(|n| n.parse().ok()).unwrap_or(500)
}

fn plan() -> Value {
    json!({"steps": [
        {"id": "f", "action": "http.request", "args": {"method": "GET", "url": "http://127.0.0.1:9/fail_first"},
         "idempotent": true,
         "retry": {"max_attempts": 5, "initial_interval_ms": 1000, "backoff_coefficient": 2, "max_interval_ms": 10000,
                   "jitter": "none"}},
        {"id": "g", "action": "notify.send", "args": {"text": "done"}, "depends_on": ["f"]}
    ]})
}

on_both_backends!(d08_a_after_a_mass_cancel_nothing_more_is_dispatched);
async fn d08_a_after_a_mass_cancel_nothing_more_is_dispatched(backend: Backend) {
    let app = TestApp::new(backend, START).await;
    app.advance(Duration::from_secs(60));
    let mut run_ids = Vec::new();
    for _ in 0..runs() {
        run_ids.push(app.submit(plan()).await);
    }
    let actions = ["http.request".to_owned(), "notify.send".to_owned()];
    // A third of the runs fail once (retry in 1 s), eight attempts are in flight (8 slots), the rest wait.
    let first = app.engine.claim("w1", &actions, u32::try_from(runs() / 3).unwrap()).await.unwrap();
    for c in &first {
        let report = app.engine.fail(&c.lease, &Failure::new("action_error", "first call fails", true)).await;
        assert_eq!(report.unwrap(), Report::RetryScheduled);
    }
    let in_flight = app.engine.claim("w1", &actions, 8).await.unwrap();
    assert_eq!(in_flight.len(), 8);

    for run_id in &run_ids {
        assert!(app.engine.cancel_run(run_id).await.unwrap(), "{backend:?}: every run is open, so cancelled");
    }

    for c in &in_flight {
        let told = app.engine.heartbeat(&c.lease, None).await.unwrap();
        assert_eq!(told, HeartbeatOutcome::Gone, "{backend:?}: an attempt in flight is told to stop");
        let late = app.engine.complete(&c.lease, &json!({"status": 200})).await.unwrap();
        assert_eq!(late, Report::Stale, "{backend:?}: its late result is ignored");
    }
    for _ in 0..6 {
        app.advance(Duration::from_secs(10));
        assert_eq!(app.reap().await, 0, "{backend:?}: no lease is left to reap");
        let handed = app.engine.claim("w1", &actions, 256).await.unwrap();
        assert!(handed.is_empty(), "{backend:?}: nothing cancelled is dispatched again: {:?}", handed.len());
    }
    let stats = app.store().stats(app.now_ms()).await.unwrap();
    assert_eq!((stats.queue_depth, stats.active_leases), (0, 0), "{backend:?}: the ready queue is empty");
    let fresh = app.submit(plan()).await;
    TestWorker::new("w2").echo("http.request").echo("notify.send").run_until_idle(&app.engine).await;
    assert_eq!(app.run(&fresh).await.status, "succeeded", "{backend:?}: a new run completes in normal time");
}
