//! Failed attempts: durable retries with backoff, and exhaustion (contract §2 `retry`, §5, §6).

use cairn_core::failure::Failure;
use cairn_store::{Report, Store};
use serde_json::{Value, json};

use super::support::{T0, action_error, claim, claim_one, has_event, noop, run, status, step, steps, submit};

fn policy(max_attempts: u32) -> Value {
    json!({"max_attempts": max_attempts, "initial_interval_ms": 1000, "backoff_coefficient": 10.0,
           "max_interval_ms": 5000, "jitter": "none"})
}

async fn failure_with_retry_policy_schedules_the_next_attempt_per_policy(store: Store) {
    let doc = steps(vec![json!({"id": "a", "action": "noop", "args": {}, "retry": policy(5)})]);
    submit(&store, "r1", &doc).await;
    let first = claim_one(&store, T0).await.lease;

    let report = store.fail(&first, &action_error("upstream 503"), 0.5, T0 + 100).await.expect("fail");

    assert_eq!(report, Report::RetryScheduled);
    let a = step(&store, "r1", "a").await;
    assert_eq!(a.status, "ready", "a retried step goes back to ready");
    assert_eq!(
        a.available_at_ms,
        Some(T0 + 100 + 1000),
        "after attempt 1 the delay is initial_interval_ms (jitter none)"
    );
    assert_eq!(a.error.expect("failure record kept")["code"], "action_error");
    assert!(
        claim(&store, T0 + 1099).await.is_empty(),
        "a step in backoff is not claimable before its next attempt time"
    );
    let second = claim_one(&store, T0 + 1100).await.lease;
    assert_eq!(second.attempt, 2, "the retry is attempt 2");

    store.fail(&second, &action_error("upstream 503"), 0.5, T0 + 1200).await.expect("fail");

    assert_eq!(
        step(&store, "r1", "a").await.available_at_ms,
        Some(T0 + 1200 + 5000),
        "after attempt 2 the delay is min(max_interval_ms, initial × coefficient) = 5000"
    );
    let mut later = Failure::new("rate_limited", "slow down", true);
    later.retry_after_ms = Some(9000);
    let third = claim_one(&store, T0 + 6200).await.lease;
    store.fail(&third, &later, 0.5, T0 + 6300).await.expect("fail");
    assert_eq!(
        step(&store, "r1", "a").await.available_at_ms,
        Some(T0 + 6300 + 9000),
        "retry_after_ms longer than the backoff wins"
    );
    let scheduled: Vec<Value> = super::support::events(&store, "r1")
        .await
        .into_iter()
        .filter(|e| e.kind == "step_retry_scheduled")
        .map(|e| e.data["next_attempt_at"].clone())
        .collect();
    assert_eq!(
        scheduled,
        vec![json!(T0 + 1100), json!(T0 + 6200), json!(T0 + 15_300)],
        "each retry records its next attempt time"
    );
    let attempts = store.attempts("r1").await.expect("attempts");
    assert_eq!(attempts.len(), 3, "each failed attempt keeps its own record");
    assert!(attempts.iter().all(|a| a.status == "failed" && a.failure.is_some()));
}

async fn exhausted_retries_fail_the_step_skip_dependents_and_fail_the_run(store: Store) {
    let doc = steps(vec![
        json!({"id": "a", "action": "noop", "args": {}, "retry": policy(2)}),
        noop("ok", &[], json!({})),
        noop("b", &["a"], json!({})),
        noop("c", &["b"], json!({})),
    ]);
    submit(&store, "r1", &doc).await;
    let first = claim(&store, T0).await;
    assert_eq!(first.len(), 2);
    for c in &first {
        if c.lease.step_id == "a" {
            store.fail(&c.lease, &action_error("boom"), 0.0, T0 + 1).await.expect("fail");
        } else {
            super::support::complete(&store, &c.lease, &json!({}), T0 + 1).await;
        }
    }
    let second = claim_one(&store, T0 + 1001).await.lease;

    let report = store.fail(&second, &action_error("boom again"), 0.0, T0 + 1002).await.expect("fail");

    assert_eq!(report, Report::Failed, "the last allowed attempt failing fails the step");
    let a = step(&store, "r1", "a").await;
    assert_eq!(a.status, "failed");
    assert_eq!(a.attempts, 2, "both attempts were used");
    assert_eq!(status(&store, "r1", "b").await, "skipped", "a failed dependency skips (all_success)");
    assert_eq!(status(&store, "r1", "c").await, "skipped", "the skip propagates transitively");
    assert_eq!(status(&store, "r1", "ok").await, "succeeded");
    let summary = run(&store, "r1").await;
    assert_eq!(summary.status, "failed", "a run with a failed step fails");
    assert_eq!(summary.finished_at_ms, Some(T0 + 1002));
    let failure = summary.failure.expect("a failed run records its root cause");
    assert_eq!(failure["step_id"], "a", "the root cause names the failed step");
    assert_eq!(failure["code"], "action_error");
    assert!(
        failure["message"].as_str().is_some_and(|m| m.contains("retries exhausted")),
        "the message says retries were exhausted: {failure}"
    );
    assert!(has_event(&store, "r1", Some("a"), "step_failed").await);
    assert!(has_event(&store, "r1", None, "run_failed").await);
}

async fn non_idempotent_step_is_retried_only_when_the_failure_did_not_take_effect(store: Store) {
    let notify = |id: &str| json!({"id": id, "action": "notify.send", "args": {"text": "hello"}, "retry": policy(3)});
    submit(&store, "r1", &steps(vec![notify("safe"), notify("unsure"), notify("timed_out")])).await;
    let claimed = claim(&store, T0).await;
    let lease = |id: &str| claimed.iter().find(|c| c.lease.step_id == id).map(|c| c.lease.clone()).expect("claimed");
    let mut safe = action_error("connection refused");
    safe.did_not_take_effect = true;
    let timeout = Failure::new("timeout", "the action ran past timeout_ms", true);

    let safe = store.fail(&lease("safe"), &safe, 0.0, T0 + 1).await.expect("fail");
    let unsure = store.fail(&lease("unsure"), &action_error("500"), 0.0, T0 + 1).await.expect("fail");
    let timed_out = store.fail(&lease("timed_out"), &timeout, 0.0, T0 + 1).await.expect("fail");

    assert_eq!(
        safe,
        Report::RetryScheduled,
        "a non-idempotent step may be retried when the action certainly did not take effect"
    );
    assert_eq!(
        unsure,
        Report::Failed,
        "a non-idempotent step is never re-executed blindly after a failure that may have taken effect"
    );
    assert_eq!(
        timed_out,
        Report::OutcomeUnknown,
        "an ambiguous failure of a non-idempotent step parks it as outcome_unknown"
    );
    assert_eq!(status(&store, "r1", "safe").await, "ready");
    assert_eq!(status(&store, "r1", "unsure").await, "failed");
    assert_eq!(status(&store, "r1", "timed_out").await, "outcome_unknown");
}

contract_tests!(
    failure_with_retry_policy_schedules_the_next_attempt_per_policy,
    non_idempotent_step_is_retried_only_when_the_failure_did_not_take_effect,
    exhausted_retries_fail_the_step_skip_dependents_and_fail_the_run,
);
