//! Case D23 of `../shared/cases/cases2.md`: a NUL character or a NaN in a step output wedged runs on PostgreSQL
//! (Kestra #10326, Prefect #6439, Argo #13711). One shared test, run on SQLite and on PostgreSQL.
//!
//! Cairn's rule (`docs/architecture.md` §10, "Values a database refuses"): JSON values may hold any Unicode, U+0000
//! included, stored as JSON text and returned as written (a) and interpolated unchanged; an output that is not
//! JSON at all — NaN or Infinity (b), a lone surrogate (c) — fails its attempt at once with `invalid_output`,
//! naming where the text stops being JSON, whatever the step's idempotency; the same values in a run's input (d)
//! or an event payload (e) are refused with 4xx before anything is stored, since they are not JSON. The case
//! expects NUL in an input to be refused too; Cairn accepts it faithfully, as JSON allows, and refuses NUL only
//! where a value becomes an identifier (an event name or key: `api_bad_input.rs`).

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use cairn_core::clock::ManualClock;
use cairn_proto::v1::worker_service_client::WorkerServiceClient;
use cairn_proto::v1::{CompleteRequest, PollRequest, ReportOutcome};
use cairn_tests::http::{HttpApp, step};
use cairn_tests::{Backend, on_both_backends};
use serde_json::{Value, json};

const START: &str = "2027-03-14T12:00:00Z";

/// A run of `emit` (non-idempotent `noop`, completed by this test's own worker with `output_json`) and `say`,
/// which interpolates `emit`'s output (an action this worker does not poll for, so every poll gets an `emit`);
/// returns the report's outcome and the run afterwards.
async fn emit(app: &HttpApp, output_json: &str) -> (ReportOutcome, Value) {
    let run = app
        .submit(json!({"steps": [
            {"id": "emit", "action": "noop", "args": {}, "idempotent": false},
            {"id": "say", "action": "condition.eval", "depends_on": ["emit"], "args": {"expr": "'got ${emit.output.s}' != ''"}}
        ]}))
        .await;
    let mut worker = WorkerServiceClient::connect(app.grpc_url.clone()).await.unwrap();
    let poll = PollRequest { worker_id: "w1".into(), actions: vec!["noop".into()], max_attempts: 1, wait_ms: 1000 };
    let attempt = worker.poll(poll).await.unwrap().into_inner().attempts.remove(0);
    let report = CompleteRequest {
        worker_id: "w1".into(),
        lease: attempt.lease,
        output_json: output_json.into(),
        next_max_attempts: 0,
        next_actions: Vec::new(),
    };
    let outcome = worker.complete(report).await.unwrap().into_inner().outcome();
    (outcome, app.run(&run).await)
}

on_both_backends!(nul_nan_and_lone_surrogates_never_wedge_a_run_and_behave_alike_on_both_backends);
async fn nul_nan_and_lone_surrogates_never_wedge_a_run_and_behave_alike_on_both_backends(backend: Backend) {
    let app = HttpApp::start(backend, Arc::new(ManualClock::new(START.parse().unwrap())), None).await;

    let (outcome, run) = emit(&app, r#"{"s": "a\u0000b"}"#).await;
    assert_eq!(outcome, ReportOutcome::Succeeded, "{backend:?}: (a) NUL in a JSON string is a value");
    assert_eq!(step(&run, "emit")["output"]["s"], "a\u{0}b", "{backend:?}: (a) returned as written");

    for (what, text) in [
        ("(b) NaN", r#"{"s": NaN}"#),
        ("(b) Infinity", r#"{"s": Infinity}"#),
        ("(c) a lone surrogate", r#"{"s": "\ud800"}"#),
    ] {
        let (outcome, run) = emit(&app, text).await;
        assert_eq!(outcome, ReportOutcome::Failed, "{backend:?}: {what}: the attempt fails at once");
        let emitted = step(&run, "emit");
        assert_eq!(emitted["status"], "failed", "{backend:?}: {what}: not outcome_unknown, not running: {run:#}");
        assert_eq!(emitted["error"]["code"], "invalid_output", "{backend:?}: {what}: {emitted:#}");
        assert!(emitted["error"]["message"].as_str().unwrap().contains("column"), "{what}: says where: {emitted:#}");
        assert_eq!(run["status"], "failed", "{backend:?}: {what}: the run ends");
    }

    for (what, body) in [
        ("(d) NaN in an input", r#"{"plan": {"steps": [{"id": "a", "action": "noop"}]}, "input": {"x": NaN}}"#),
        (
            "(d) a lone surrogate in an input",
            r#"{"plan": {"steps": [{"id": "a", "action": "noop"}]}, "input": {"x": "\ud800"}}"#,
        ),
    ] {
        let (status, answer) = app.post_bytes("/v1/runs", Some("application/json"), body.as_bytes().to_vec()).await;
        assert_eq!((status, answer["code"].as_str()), (400, Some("malformed_json")), "{backend:?}: {what}: {answer:#}");
    }
    let body = r#"{"name": "paid", "payload": {"amount": Infinity}}"#;
    let (status, answer) = app.post_bytes("/v1/events", Some("application/json"), body.as_bytes().to_vec()).await;
    assert_eq!(status, 400, "{backend:?}: (e) Infinity in an event payload: {answer:#}");

    let (status, listed) = app.get("/v1/runs").await;
    assert_eq!(status, 200, "{backend:?}: listing still works");
    assert_eq!(listed["runs"].as_array().map(Vec::len), Some(4), "{backend:?}: every run is listed");
    let (status, failed) = app.get("/v1/runs?status=failed").await;
    assert_eq!((status, failed["runs"].as_array().map(Vec::len)), (200, Some(3)), "{backend:?}: {failed:#}");
}
