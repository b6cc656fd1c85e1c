//! Human decisions: approvals before a step runs, and an operator failing a parked step (contract §5, §6).

use cairn_store::{OperatorAction, Store};
use serde_json::json;

use super::lease::parked_as_outcome_unknown;
use super::support::{T0, claim, claim_one, new_run, noop, run, status, steps, submit};

const HOUR: i64 = 3_600_000;

fn approved_step() -> serde_json::Value {
    json!({"id": "pay", "action": "noop", "args": {}, "approval": {"required": true}})
}

async fn approval_waits_for_a_decision_and_approve_keeps_the_timer(store: Store) {
    let doc = steps(vec![approved_step(), noop("after", &["pay"], json!({}))]);
    let mut new = new_run("r1", &doc);
    new.timers[0] = Some((T0 + HOUR, "+1h".into()));
    super::support::create(&store, &new).await;

    assert_eq!(
        status(&store, "r1", "pay").await,
        "waiting_approval",
        "a step requiring approval waits for a human before it is queued"
    );
    assert!(claim(&store, T0 + 2 * HOUR).await.is_empty(), "an unapproved step is never claimed");
    let approved = store.operate("r1", "pay", OperatorAction::Approve, "alice", None, T0 + 10).await.expect("operate");

    assert!(approved, "approve applies to a waiting step");
    let pay = super::support::step(&store, "r1", "pay").await;
    assert_eq!(pay.status, "ready");
    assert_eq!(pay.available_at_ms, Some(T0 + HOUR), "approval does not bypass the step's not_before timer");
    assert!(claim(&store, T0 + HOUR - 1).await.is_empty(), "an approved step still waits for its timer");
    assert_eq!(claim_one(&store, T0 + HOUR).await.lease.step_id, "pay");
    let twice = store.operate("r1", "pay", OperatorAction::Approve, "bob", None, T0 + HOUR);
    assert!(!twice.await.expect("operate"), "a decision applies once");
    assert!(super::support::has_event(&store, "r1", Some("pay"), "step_approved").await);
}

async fn rejected_approval_fails_the_step_and_the_run(store: Store) {
    submit(&store, "r1", &steps(vec![approved_step(), noop("after", &["pay"], json!({}))])).await;

    let rejected = store.operate("r1", "pay", OperatorAction::Reject, "alice", None, T0 + 10).await.expect("operate");

    assert!(rejected, "reject applies to a waiting step");
    assert_eq!(status(&store, "r1", "pay").await, "failed");
    assert_eq!(status(&store, "r1", "after").await, "skipped", "dependents of a rejected step are skipped");
    let summary = run(&store, "r1").await;
    assert_eq!(summary.status, "failed");
    assert_eq!(summary.failure.expect("root cause")["step_id"], "pay");
}

async fn operator_fail_fails_an_outcome_unknown_step_and_the_run(store: Store) {
    parked_as_outcome_unknown(&store).await;

    let failed =
        store.operate("r1", "notify", OperatorAction::Fail, "alice", None, T0 + 30_000).await.expect("operate");

    assert!(failed, "fail applies to an outcome_unknown step");
    assert_eq!(status(&store, "r1", "notify").await, "failed");
    assert_eq!(status(&store, "r1", "after").await, "skipped");
    let summary = run(&store, "r1").await;
    assert_eq!(summary.status, "failed");
    assert_eq!(summary.failure.expect("root cause")["step_id"], "notify");
    let wrong = store.operate("r1", "notify", OperatorAction::Approve, "alice", None, T0 + 30_001);
    assert!(!wrong.await.expect("operate"), "a decision for another state changes nothing");
}

contract_tests!(
    approval_waits_for_a_decision_and_approve_keeps_the_timer,
    rejected_approval_fails_the_step_and_the_run,
    operator_fail_fails_an_outcome_unknown_step_and_the_run,
);
