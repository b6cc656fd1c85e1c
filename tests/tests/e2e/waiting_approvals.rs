//! Approval steps through the real engine and store on every available backend, with a manual clock: approve,
//! reject (fail or skip), each `on_timeout` outcome at the deadline, a decision after the deadline refused, and the
//! pending-approvals listing across runs.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use cairn_core::plan::ApprovalTimeout;
use cairn_store::ApprovalOutcome;
use cairn_tests::{Backend, TestApp, TestWorker, on_both_backends};
use serde_json::{Value, json};

const HOUR_MS: i64 = 3_600_000;

/// `gate` needs approval (with `approval` as given); `after` depends on it.
fn plan(approval: Value) -> Value {
    json!({"steps": [
        {"id": "gate", "action": "notify.send", "args": {"text": "deploy"}, "approval": approval},
        {"id": "after", "action": "notify.send", "args": {"text": "done"}, "depends_on": ["gate"]}]})
}

async fn kinds(app: &TestApp, run: &str, step: &str) -> Vec<(String, Value)> {
    let events = app.store().events(run, 0, 1000).await.unwrap();
    events.into_iter().filter(|e| e.step_id.as_deref() == Some(step)).map(|e| (e.kind.to_string(), e.data)).collect()
}

on_both_backends!(an_approved_step_runs_and_the_history_says_who_approved_and_when);
async fn an_approved_step_runs_and_the_history_says_who_approved_and_when(backend: Backend) {
    let app = TestApp::new(backend, "2027-06-01T09:00:00Z").await;
    let run = app.submit(plan(json!({"required": true, "timeout_ms": HOUR_MS}))).await;
    let gate = app.step(&run, "gate").await;
    assert_eq!(gate.status, "waiting_approval", "{backend:?}");
    assert_eq!(gate.available_at_ms, Some(app.now_ms() + HOUR_MS), "{backend:?}: the deadline is stored");
    app.advance(Duration::from_secs(600));
    let outcome = app.engine.decide_approval(&run, "gate", true, "alice").await.unwrap();
    assert_eq!(outcome, ApprovalOutcome::Decided, "{backend:?}");
    let w = TestWorker::new("w").echo("notify.send");
    w.run_until_idle(&app.engine).await;
    assert_eq!(app.run(&run).await.status, "succeeded", "{backend:?}");
    let approved = kinds(&app, &run, "gate").await.into_iter().find(|(k, _)| k == "step_approved").unwrap();
    assert_eq!(approved.1["by"], "alice", "{backend:?}: who approved is in the history");
    let at = app.store().events(&run, 0, 1000).await.unwrap().into_iter().find(|e| e.kind == "step_approved");
    assert_eq!(at.unwrap().at_ms, app.now_ms(), "{backend:?}: and when");
    assert_eq!(app.engine.expire_approvals().await.unwrap(), 0, "{backend:?}: nothing left to time out");
}

on_both_backends!(a_rejected_step_fails_or_is_skipped_per_on_reject);
async fn a_rejected_step_fails_or_is_skipped_per_on_reject(backend: Backend) {
    let app = TestApp::new(backend, "2027-06-01T09:00:00Z").await;
    let failing = app.submit(plan(json!({"required": true}))).await;
    let skipping = app.submit(plan(json!({"required": true, "on_reject": "skip"}))).await;
    for run in [&failing, &skipping] {
        let outcome = app.engine.decide_approval(run, "gate", false, "bob").await.unwrap();
        assert_eq!(outcome, ApprovalOutcome::Decided, "{backend:?}");
    }
    let gate = app.step(&failing, "gate").await;
    assert_eq!(gate.status, "failed", "{backend:?}");
    assert_eq!(gate.error.unwrap()["code"], "approval_rejected", "{backend:?}");
    assert_eq!(app.status(&failing, "after").await, "skipped", "{backend:?}");
    let run = app.run(&failing).await;
    assert_eq!(run.status, "failed", "{backend:?}");
    assert_eq!(run.failure.unwrap()["code"], "approval_rejected", "{backend:?}: the root cause says rejected");
    assert_eq!(app.status(&skipping, "gate").await, "skipped", "{backend:?}");
    let rejected = kinds(&app, &skipping, "gate").await.into_iter().find(|(k, _)| k == "step_rejected").unwrap();
    assert_eq!(rejected.1["by"], "bob", "{backend:?}");
    let again = app.engine.decide_approval(&failing, "gate", true, "bob").await.unwrap();
    assert_eq!(again, ApprovalOutcome::WrongState, "{backend:?}: a decided step takes no second decision");
}

on_both_backends!(each_on_timeout_outcome_applies_at_the_deadline_and_not_before);
async fn each_on_timeout_outcome_applies_at_the_deadline_and_not_before(backend: Backend) {
    let app = TestApp::new(backend, "2027-06-01T09:00:00Z").await;
    let fail = app.submit(plan(json!({"required": true, "timeout_ms": HOUR_MS, "on_timeout": "fail"}))).await;
    let skip = app.submit(plan(json!({"required": true, "timeout_ms": HOUR_MS, "on_timeout": "skip"}))).await;
    let proceed = app.submit(plan(json!({"required": true, "timeout_ms": HOUR_MS, "on_timeout": "proceed"}))).await;
    let forever = app.submit(plan(json!({"required": true}))).await;
    app.set_time_ms(app.now_ms() + HOUR_MS - 1);
    assert_eq!(app.engine.expire_approvals().await.unwrap(), 0, "{backend:?}: not before the deadline");
    app.advance(Duration::from_millis(1));
    assert_eq!(app.engine.expire_approvals().await.unwrap(), 3, "{backend:?}: all three at the deadline");
    let gate = app.step(&fail, "gate").await;
    assert_eq!((gate.status.as_str(), gate.error.unwrap()["code"].clone()), ("failed", json!("approval_timeout")));
    assert_eq!(app.run(&fail).await.status, "failed", "{backend:?}");
    assert_eq!(app.status(&skip, "gate").await, "skipped", "{backend:?}");
    assert_eq!(app.status(&proceed, "gate").await, "ready", "{backend:?}: proceed runs it as if approved");
    let w = TestWorker::new("w").echo("notify.send");
    w.run_until_idle(&app.engine).await;
    assert_eq!(app.run(&proceed).await.status, "succeeded", "{backend:?}");
    assert_eq!(app.status(&forever, "gate").await, "waiting_approval", "{backend:?}: no timeout, no deadline");
    let timed_out = kinds(&app, &skip, "gate").await.into_iter().find(|(k, _)| k == "step_approval_timed_out");
    assert_eq!(timed_out.unwrap().1["on_timeout"], "skip", "{backend:?}: the history records the timeout");
}

on_both_backends!(a_decision_after_the_deadline_is_refused_as_timed_out);
async fn a_decision_after_the_deadline_is_refused_as_timed_out(backend: Backend) {
    let app = TestApp::new(backend, "2027-06-01T09:00:00Z").await;
    let late = app.submit(plan(json!({"required": true, "timeout_ms": HOUR_MS, "on_timeout": "fail"}))).await;
    let expired = app.submit(plan(json!({"required": true, "timeout_ms": HOUR_MS, "on_timeout": "skip"}))).await;
    app.set_time_ms(app.now_ms() + HOUR_MS);
    // `late`: the timeout pass has not run yet; `expired`: it has.
    let _ = app.store().expire_approvals(app.now_ms(), 1).await.unwrap();
    let passes = [(&late, true), (&expired, true), (&late, false)];
    for (run, approve) in passes {
        let outcome = app.engine.decide_approval(run, "gate", approve, "carol").await.unwrap();
        assert_eq!(outcome, ApprovalOutcome::TimedOut, "{backend:?}: refused after the deadline");
    }
    assert_eq!(app.status(&late, "gate").await, "failed", "{backend:?}: on_timeout applied, not the approval");
    assert_eq!(app.status(&expired, "gate").await, "skipped", "{backend:?}");
    let by_carol = app.store().events(&late, 0, 1000).await.unwrap().into_iter().any(|e| e.kind == "step_approved");
    assert!(!by_carol, "{backend:?}: no approval recorded");
}

on_both_backends!(pending_approvals_are_listed_across_runs_oldest_first);
async fn pending_approvals_are_listed_across_runs_oldest_first(backend: Backend) {
    let app = TestApp::new(backend, "2027-06-01T09:00:00Z").await;
    let first = app.submit(plan(json!({"required": true, "timeout_ms": HOUR_MS, "on_timeout": "proceed"}))).await;
    app.advance(Duration::from_secs(60));
    let second = app.submit(plan(json!({"required": true}))).await;
    let _plain = app.submit(json!({"steps": [{"id": "x", "action": "noop", "args": {}}]})).await;
    let pending = app.engine.pending_approvals(100).await.unwrap();
    let listed: Vec<(&str, &str)> = pending.iter().map(|p| (p.run_id.as_str(), p.step_id.as_str())).collect();
    assert_eq!(listed, [(first.as_str(), "gate"), (second.as_str(), "gate")], "{backend:?}");
    assert_eq!(pending[0].deadline_ms, Some(pending[0].waiting_since_ms + HOUR_MS), "{backend:?}");
    assert_eq!(pending[0].on_timeout.map(ApprovalTimeout::as_str), Some("proceed"), "{backend:?}");
    assert_eq!(
        (pending[1].deadline_ms, pending[1].on_timeout.map(ApprovalTimeout::as_str)),
        (None, None),
        "{backend:?}"
    );
    assert_eq!(pending[0].action, "notify.send", "{backend:?}");
    app.engine.decide_approval(&first, "gate", true, "dave").await.unwrap();
    let pending = app.engine.pending_approvals(100).await.unwrap();
    assert_eq!(pending.len(), 1, "{backend:?}: a decided approval leaves the list");
    app.engine.cancel_run(&second).await.unwrap();
    assert!(app.engine.pending_approvals(100).await.unwrap().is_empty(), "{backend:?}: so does a cancelled run's");
}
