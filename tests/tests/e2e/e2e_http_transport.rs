//! Hardening F5 end to end (REST API, the real orchestrator, a real `cairn worker` process, `http.request` to
//! local servers): a non-idempotent request whose connection is reset after the server read it is
//! `outcome_unknown` (the server may have acted; the run waits for an operator, dependents are not skipped),
//! while a refused connection, where nothing was sent, is retried under the step's policy (contract §6).

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use cairn_core::clock::ManualClock;
use cairn_tests::http::{CairnProcess, HttpApp, ResetAfterRead, TempDir, holds_for, step, within_or};
use cairn_tests::{Backend, on_both_backends};
use serde_json::{Value, json};

const START: &str = "2027-03-14T12:00:00Z";
const LIMIT: Duration = Duration::from_secs(60);

fn retry(max_attempts: u32) -> Value {
    json!({"max_attempts": max_attempts, "initial_interval_ms": 1000, "backoff_coefficient": 1.0, "jitter": "none"})
}

on_both_backends!(a_non_idempotent_request_reset_after_the_server_read_it_is_outcome_unknown);
/// Taken for a plain retryable `action_error`, the reset would leave the step `failed`, `receipt` skipped and the
/// run failed, though the server had the charge.
async fn a_non_idempotent_request_reset_after_the_server_read_it_is_outcome_unknown(backend: Backend) {
    let app = HttpApp::start(backend, Arc::new(ManualClock::new(START.parse().unwrap())), None).await;
    let server = ResetAfterRead::start().await;
    let dir = TempDir::new();
    let worker = CairnProcess::worker("worker", &app.grpc_url, dir.path(), &[], &[]);
    let run_id = app
        .submit(json!({"steps": [
            {"id": "charge", "action": "http.request", "idempotent": false, "retry": retry(3),
             "args": {"method": "POST", "url": format!("{}/charge", server.url()), "body": {"amount": 5}}},
            {"id": "receipt", "action": "noop", "depends_on": ["charge"], "args": {}}
        ]}))
        .await;

    let run = within_or(
        LIMIT,
        || async {
            let run = app.run(&run_id).await;
            (step(&run, "charge")["status"] != "running" && step(&run, "charge")["status"] != "ready").then_some(run)
        },
        || format!("{backend:?}: waiting until charge ends; worker log:\n{}", worker.log()),
    )
    .await;

    let charge = step(&run, "charge");
    assert_eq!(charge["status"], "outcome_unknown", "{backend:?}: the server may have charged: {run:#}");
    assert_eq!(charge["attempts"], 1, "{backend:?}: never re-sent: {run:#}");
    assert_eq!(charge["failures"][0]["code"], "transport_error", "{backend:?}: {run:#}");
    assert_eq!(charge["failures"][0]["suggestion"], "ask_user", "{backend:?}: {run:#}");
    assert_eq!(step(&run, "receipt")["status"], "pending", "{backend:?}: the dependent waits, not skipped");
    assert_eq!(run["status"], "running", "{backend:?}: the run waits for an operator, it has not failed");
    // The retry policy allows three attempts; a later backoff must not send the charge again either.
    app.set_time("2027-03-14T12:10:00Z");
    holds_for(Duration::from_millis(500), "the charge is not re-sent", || async {
        server.requests() == 1 && step(&app.run(&run_id).await, "charge")["status"] == "outcome_unknown"
    })
    .await;
}

on_both_backends!(a_non_idempotent_request_whose_connection_is_refused_is_retried);
/// A refused connection sent nothing, so even a non-idempotent step is retried under its policy; here until
/// the attempts run out.
async fn a_non_idempotent_request_whose_connection_is_refused_is_retried(backend: Backend) {
    let app = HttpApp::start(backend, Arc::new(ManualClock::new(START.parse().unwrap())), None).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = TempDir::new();
    let worker = CairnProcess::worker("worker", &app.grpc_url, dir.path(), &[], &[]);
    let run_id = app
        .submit(json!({"steps": [
            {"id": "charge", "action": "http.request", "idempotent": false, "retry": retry(3),
             "args": {"method": "POST", "url": format!("http://127.0.0.1:{closed}/charge")}}
        ]}))
        .await;

    let run = within_or(
        LIMIT,
        || async {
            let run = app.run(&run_id).await;
            if step(&run, "charge")["status"] == "ready" {
                // Waiting out its backoff on the manual clock: move past it.
                app.set_time_ms(app.now_ms() + 1_000);
            }
            run["finished_at_ms"].is_i64().then_some(run)
        },
        || format!("{backend:?}: waiting until the run finishes; worker log:\n{}", worker.log()),
    )
    .await;

    let charge = step(&run, "charge");
    assert_eq!(charge["status"], "failed", "{backend:?}: retries exhausted, never outcome_unknown: {run:#}");
    assert_eq!(charge["attempts"], 3, "{backend:?}: every attempt the policy allows ran: {run:#}");
    let failures = charge["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 3, "{backend:?}: {run:#}");
    for failure in failures {
        assert_eq!(failure["code"], "action_error", "{backend:?}: {run:#}");
        assert_eq!(failure["details"]["request"], "not_sent", "{backend:?}: {run:#}");
    }
}
