//! `event.wait` steps through the real engine and store on every available backend, with a manual clock: an
//! event before the wait (inside and outside the lookback), after the wait, with a non-matching key or filter,
//! and each timeout outcome. The matched payload is the step's output and reaches dependents through
//! placeholders. The orchestrator's waiting pass is driven directly (`start_event_waits`, `expire_event_waits`).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use cairn_orchestrator::waits::EventIn;
use cairn_tests::{Backend, TestApp, TestWorker, invariants, on_both_backends};
use serde_json::{Value, json};

const MINUTE_MS: u64 = 60_000;

/// `wait` for `payment.received` with `extra` args merged in; `after` uses the payload.
fn plan(extra: Value) -> Value {
    let mut args = json!({"name": "payment.received", "key": "order-1", "lookback_ms": 10 * MINUTE_MS,
        "timeout_ms": 60 * MINUTE_MS});
    for (k, v) in extra.as_object().unwrap() {
        args[k] = v.clone();
    }
    json!({"steps": [
        {"id": "wait", "action": "event.wait", "args": args},
        {"id": "after", "action": "notify.send", "args": {"text": "paid ${wait.output.amount}"}, "depends_on": ["wait"]}]})
}

fn event(key: &str, payload: Value) -> EventIn {
    EventIn { name: "payment.received".into(), key: Some(key.into()), id: None, payload }
}

/// Runs the worker and returns the text `after` was called with, if it ran.
async fn after_text(app: &TestApp) -> Option<String> {
    let w = TestWorker::new("w").echo("notify.send");
    w.run_until_idle(&app.engine).await;
    w.calls_for("after").first().map(|c| c.args["text"].as_str().unwrap().to_owned())
}

on_both_backends!(an_event_before_the_wait_counts_only_inside_the_lookback);
async fn an_event_before_the_wait_counts_only_inside_the_lookback(backend: Backend) {
    let app = TestApp::new(backend, "2027-06-01T09:00:00Z").await;
    let delivered = app.engine.deliver_event(&event("order-1", json!({"amount": 120}))).await.unwrap();
    assert!(delivered.matched.is_empty(), "{backend:?}: nobody waits yet; the event is stored");
    app.advance(Duration::from_millis(5 * MINUTE_MS));
    let inside = app.submit(plan(json!({}))).await;
    assert_eq!(app.engine.start_event_waits().await.unwrap(), 0, "{backend:?}: the submission started it");
    app.advance(Duration::from_millis(6 * MINUTE_MS)); // 11 min after the event
    let outside = app.submit(plan(json!({}))).await;
    assert_eq!(app.engine.start_event_waits().await.unwrap(), 0, "{backend:?}: the submission started it");
    let wait = app.step(&inside, "wait").await;
    assert_eq!((wait.status.as_str(), wait.output), ("succeeded", Some(json!({"amount": 120}))), "{backend:?}");
    assert_eq!(after_text(&app).await.as_deref(), Some("paid 120"), "{backend:?}: the payload is the output");
    assert_eq!(app.run(&inside).await.status, "succeeded", "{backend:?}");
    assert_eq!(app.status(&outside, "wait").await, "running", "{backend:?}: 11 min > 10 min lookback: waits");
}

on_both_backends!(an_event_after_the_wait_started_completes_it_and_survives_the_reaper);
async fn an_event_after_the_wait_started_completes_it_and_survives_the_reaper(backend: Backend) {
    let app = TestApp::new(backend, "2027-06-01T09:00:00Z").await;
    let run = app.submit(plan(json!({"lookback_ms": 0}))).await;
    app.engine.start_event_waits().await.unwrap();
    app.advance(Duration::from_millis(30 * MINUTE_MS)); // far past any lease TTL
    assert_eq!(app.reap().await, 0, "{backend:?}: the reaper leaves a waiting step alone");
    assert_eq!(app.status(&run, "wait").await, "running", "{backend:?}");
    let delivered = app.engine.deliver_event(&event("order-1", json!({"amount": 7}))).await.unwrap();
    assert_eq!(delivered.matched.len(), 1, "{backend:?}");
    assert_eq!((delivered.matched[0].run_id.as_str(), delivered.matched[0].step_id.as_str()), (run.as_str(), "wait"));
    assert_eq!(after_text(&app).await.as_deref(), Some("paid 7"), "{backend:?}");
    assert_eq!(app.run(&run).await.status, "succeeded", "{backend:?}");
    let again = app.engine.deliver_event(&event("order-1", json!({"amount": 8}))).await.unwrap();
    assert!(again.matched.is_empty(), "{backend:?}: a finished wait takes no second event");
}

on_both_backends!(events_with_another_key_or_failing_the_filter_do_not_match);
async fn events_with_another_key_or_failing_the_filter_do_not_match(backend: Backend) {
    let app = TestApp::new(backend, "2027-06-01T09:00:00Z").await;
    let run = app.submit(plan(json!({"filter": "payload.amount >= 100"}))).await;
    app.engine.start_event_waits().await.unwrap();
    let other_key = app.engine.deliver_event(&event("order-2", json!({"amount": 500}))).await.unwrap();
    assert!(other_key.matched.is_empty(), "{backend:?}: another key");
    let too_small = app.engine.deliver_event(&event("order-1", json!({"amount": 50}))).await.unwrap();
    assert!(too_small.matched.is_empty(), "{backend:?}: filter false");
    let no_field = app.engine.deliver_event(&event("order-1", json!({"currency": "EUR"}))).await.unwrap();
    assert!(no_field.matched.is_empty(), "{backend:?}: a filter that cannot be evaluated is no match");
    let other_name = EventIn {
        name: "payment.refunded".into(),
        key: Some("order-1".into()),
        id: None,
        payload: json!({"amount": 500}),
    };
    assert!(app.engine.deliver_event(&other_name).await.unwrap().matched.is_empty(), "{backend:?}: another name");
    assert_eq!(app.status(&run, "wait").await, "running", "{backend:?}");
    let good = app.engine.deliver_event(&event("order-1", json!({"amount": 150}))).await.unwrap();
    assert_eq!(good.matched.len(), 1, "{backend:?}");
    assert_eq!(app.step(&run, "wait").await.output, Some(json!({"amount": 150})), "{backend:?}");
}

on_both_backends!(a_wait_without_a_key_matches_any_key);
async fn a_wait_without_a_key_matches_any_key(backend: Backend) {
    let app = TestApp::new(backend, "2027-06-01T09:00:00Z").await;
    let plan = json!({"steps": [{"id": "wait", "action": "event.wait", "args": {"name": "door.opened"}}]});
    let run = app.submit(plan).await;
    app.engine.start_event_waits().await.unwrap();
    let e = EventIn { name: "door.opened".into(), key: Some("front".into()), id: None, payload: json!({"by": "ann"}) };
    assert_eq!(app.engine.deliver_event(&e).await.unwrap().matched.len(), 1, "{backend:?}");
    assert_eq!(app.run(&run).await.status, "succeeded", "{backend:?}");
}

on_both_backends!(a_timeout_ends_the_wait_with_the_declared_outcome);
async fn a_timeout_ends_the_wait_with_the_declared_outcome(backend: Backend) {
    let app = TestApp::new(backend, "2027-06-01T09:00:00Z").await;
    let fail = app.submit(plan(json!({}))).await;
    let skip = app.submit(plan(json!({"on_timeout": "skip"}))).await;
    let succeed = app.submit(plan(json!({"on_timeout": "succeed", "timeout_output": {"amount": 0}}))).await;
    app.engine.start_event_waits().await.unwrap();
    app.advance(Duration::from_millis(60 * MINUTE_MS - 1));
    assert_eq!(app.engine.expire_event_waits().await.unwrap(), 0, "{backend:?}: not before the timeout");
    app.advance(Duration::from_millis(1));
    assert_eq!(app.engine.expire_event_waits().await.unwrap(), 3, "{backend:?}");
    let wait = app.step(&fail, "wait").await;
    assert_eq!(wait.status, "failed", "{backend:?}");
    assert_eq!(wait.error.unwrap()["code"], "event_timeout", "{backend:?}");
    assert_eq!(wait.attempts, 1, "{backend:?}: a timed-out wait is not retried");
    assert_eq!(app.run(&fail).await.status, "failed", "{backend:?}");
    assert_eq!(app.status(&skip, "wait").await, "skipped", "{backend:?}");
    assert_eq!(app.status(&skip, "after").await, "skipped", "{backend:?}: the skip propagates");
    assert_eq!(app.step(&succeed, "wait").await.output, Some(json!({"amount": 0})), "{backend:?}");
    assert_eq!(after_text(&app).await.as_deref(), Some("paid 0"), "{backend:?}");
    let late = app.engine.deliver_event(&event("order-1", json!({"amount": 1}))).await.unwrap();
    assert!(late.matched.is_empty(), "{backend:?}: an event after the timeout changes nothing");
}

on_both_backends!(a_cancelled_wait_ignores_later_events);
/// A cancel ends the wait in its own transaction: no `event_waits` row (a timer, by its deadline) is left on the
/// cancelled step (the invariant sweep), and a later event matches nothing.
async fn a_cancelled_wait_ignores_later_events(backend: Backend) {
    let app = TestApp::new(backend, "2027-06-01T09:00:00Z").await;
    let run = app.submit(plan(json!({}))).await;
    app.engine.start_event_waits().await.unwrap();
    assert!(app.engine.cancel_run(&run).await.unwrap());
    invariants::assert_hold(app.store(), &format!("{backend:?}: the cancel ended the wait")).await;
    let e = app.engine.deliver_event(&event("order-1", json!({"amount": 1}))).await.unwrap();
    assert!(e.matched.is_empty(), "{backend:?}");
    assert_eq!(app.status(&run, "wait").await, "cancelled", "{backend:?}");
}
