//! Case D10 of `../shared/cases/cases2.md` (variants a, b, c, d): a retried "send event" must be delivered once, also
//! after the run finished (Temporal PR #11968, #4028, #2140).
//!
//! `POST /v1/events` takes the caller's dedupe `id`: an event of the same `name` and `id` received again is
//! answered `duplicate: true` with the first event's id and delivered to nothing, for as long as the event is kept
//! (events are kept with the database; the window outlives every run). An empty `id` is refused with 422 (never a
//! key shared by every such event); events without an `id` are never deduplicated. Variant c: the dedupe
//! survives a retry of the failed `file` step and an orchestrator restart.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use cairn_core::clock::ManualClock;
use cairn_core::failure::Failure;
use cairn_tests::http::{HttpApp, step};
use cairn_tests::{Backend, Outcome, TestWorker, on_both_backends};
use serde_json::{Value, json};

const START: &str = "2027-03-14T12:00:00Z";

fn plan() -> Value {
    json!({"steps": [
        {"id": "w1", "action": "event.wait", "args": {"name": "doc.signed", "key": "$input.doc"}},
        {"id": "w2", "action": "event.wait", "depends_on": ["w1"], "args": {"name": "doc.signed", "key": "$input.doc"}},
        {"id": "file", "action": "noop", "depends_on": ["w2"], "idempotent": false, "args": {"signed": "$w2.output.by"}}
    ]})
}

async fn send(app: &HttpApp, id: Option<&str>, by: &str) -> Value {
    let mut body = json!({"name": "doc.signed", "key": "d9", "payload": {"by": by}});
    if let Some(id) = id {
        body["id"] = json!(id);
    }
    let (status, answer) = app.post("/v1/events", &body).await;
    assert_eq!(status, 202, "the event is accepted: {answer:#}");
    answer
}

fn matched(answer: &Value) -> Vec<String> {
    answer["matched"].as_array().unwrap().iter().map(|m| m["step_id"].as_str().unwrap().to_owned()).collect()
}

on_both_backends!(d10_a_retried_event_is_delivered_once_before_and_after_the_run_finished);
async fn d10_a_retried_event_is_delivered_once_before_and_after_the_run_finished(backend: Backend) {
    let app = HttpApp::start(backend, Arc::new(ManualClock::new(START.parse().unwrap())), None).await;
    let submit = json!({"plan": plan(), "input": {"doc": "d9"}, "idempotency_key": "doc-9"});
    let (status, run) = app.post("/v1/runs", &submit).await;
    assert_eq!(status, 201, "{run:#}");
    let run_id = run["id"].as_str().unwrap().to_owned();
    let worker = TestWorker::new("w1").echo("noop");

    let first = send(&app, Some("s1"), "ann").await;
    let again = send(&app, Some("s1"), "ann").await;

    assert_eq!(matched(&first), ["w1"], "{backend:?}: s1 satisfies w1");
    assert_eq!(first["duplicate"], false);
    assert_eq!((again["duplicate"].as_bool(), &again["id"]), (Some(true), &first["id"]), "{backend:?}: {again:#}");
    assert!(matched(&again).is_empty(), "{backend:?}: (b) the retried s1 does not satisfy w2");
    let view = app.run(&run_id).await;
    assert_eq!(step(&view, "w2")["status"], "running", "{backend:?}: (b) w2 still waits: {view:#}");

    let second = send(&app, Some("s2"), "bob").await;
    assert_eq!(matched(&second), ["w2"], "{backend:?}: s2 satisfies w2");
    worker.run_until_idle(app.engine()).await;
    let done = app.run(&run_id).await;
    assert_eq!(done["status"], "succeeded", "{backend:?}: {done:#}");

    let late = send(&app, Some("s1"), "ann").await;
    let (status, resubmitted) = app.post("/v1/runs", &submit).await;
    worker.run_until_idle(app.engine()).await;

    assert_eq!((late["duplicate"].as_bool(), &late["id"]), (Some(true), &first["id"]), "{backend:?}: after the end");
    assert_eq!((status, &resubmitted["id"]), (200, &run["id"]), "{backend:?}: the retried submission is the run");
    assert_eq!(worker.calls_for("file").len(), 1, "{backend:?}: calls(file) == 1");
    assert_eq!(app.runs().await.len(), 1, "{backend:?}: no new run");
}

on_both_backends!(d10_c_the_dedupe_survives_a_retry_of_the_failed_step_and_a_restart);
async fn d10_c_the_dedupe_survives_a_retry_of_the_failed_step_and_a_restart(backend: Backend) {
    let app = HttpApp::start(backend, Arc::new(ManualClock::new(START.parse().unwrap())), None).await;
    let mut doc = plan();
    doc["steps"][2]["retry"] = json!({"max_attempts": 1});
    let submit = json!({"plan": doc, "input": {"doc": "d9"}, "idempotency_key": "doc-9"});
    let (status, run) = app.post("/v1/runs", &submit).await;
    assert_eq!(status, 201, "{run:#}");
    let run_id = run["id"].as_str().unwrap().to_owned();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let worker = TestWorker::new("w1").on("noop", move |c| {
        if counted.fetch_add(1, Ordering::SeqCst) == 0 {
            Outcome::Fail(Failure::new("http_status", "the service answered 500", true))
        } else {
            Outcome::Succeed(c.args.clone())
        }
    });
    let first = send(&app, Some("s1"), "ann").await;
    let second = send(&app, Some("s2"), "bob").await;
    worker.run_until_idle(app.engine()).await;
    assert_eq!(app.run(&run_id).await["status"], "failed", "{backend:?}: file failed its one attempt");

    let (status, retried) = app.post(&format!("/v1/runs/{run_id}/steps/file:retry"), &json!({"by": "ops"})).await;
    assert_eq!(status, 200, "{backend:?}: {retried:#}");
    let app = app.restart().await;
    let again = [send(&app, Some("s1"), "ann").await, send(&app, Some("s2"), "bob").await];
    worker.run_until_idle(app.engine()).await;

    for (retry, original) in again.iter().zip([&first, &second]) {
        assert_eq!((retry["duplicate"].as_bool(), &retry["id"]), (Some(true), &original["id"]), "{backend:?}");
        assert!(matched(retry).is_empty(), "{backend:?}: a duplicate satisfies nothing");
    }
    let done = app.run(&run_id).await;
    assert_eq!(done["status"], "succeeded", "{backend:?}: {done:#}");
    assert_eq!(worker.calls_for("file").len(), 2, "{backend:?}: calls(file) == 2, the failed one and the retry");
    assert_eq!(worker.calls_for("file")[1].args, json!({"signed": "bob"}), "{backend:?}: the original payload");
}

on_both_backends!(d10_d_an_empty_id_is_refused_and_events_without_one_are_never_deduplicated);
async fn d10_d_an_empty_id_is_refused_and_events_without_one_are_never_deduplicated(backend: Backend) {
    let app = HttpApp::start(backend, Arc::new(ManualClock::new(START.parse().unwrap())), None).await;

    let (status, empty) = app.post("/v1/events", &json!({"name": "doc.signed", "id": ""})).await;
    let first = send(&app, None, "ann").await;
    let second = send(&app, None, "ann").await;

    assert_eq!((status, empty["code"].as_str()), (422, Some("invalid_request")), "{backend:?}: {empty:#}");
    assert_eq!((first["duplicate"].as_bool(), second["duplicate"].as_bool()), (Some(false), Some(false)));
    assert_ne!(first["id"], second["id"], "{backend:?}: two events stored");
}
