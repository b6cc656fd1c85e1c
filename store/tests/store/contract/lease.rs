//! Leases: the reaper, heartbeats and checkpoints, `outcome_unknown` and operator decisions (contract §6).

use cairn_store::{ClaimRequest, HeartbeatOutcome, OperatorAction, ReapRequest, Report, Store};
use serde_json::{Value, json};

use super::support::{T0, claim, claim_one, complete, noop, run, status, step, steps, submit};

fn retry_once_after_1s() -> Value {
    json!({"max_attempts": 3, "initial_interval_ms": 1000, "backoff_coefficient": 2.0,
           "max_interval_ms": 60000, "jitter": "none"})
}

/// One idempotent noop step `a` (retried after 1 s), claimed at T0 by `w1` with a 5 s lease.
async fn claimed_with_short_lease(store: &Store) {
    let doc = steps(vec![json!({"id": "a", "action": "noop", "args": {}, "retry": retry_once_after_1s()})]);
    submit(store, "r1", &doc).await;
    let req = ClaimRequest { worker_id: "w1".into(), actions: vec!["noop".into()], limit: 10, now_ms: T0 };
    let claimed = store.claim(&req, 5_000).await.expect("claim");
    assert_eq!(claimed.len(), 1, "test set-up: one step claimed");
}

async fn expired_lease_is_reaped_once_and_counts_an_attempt(store: Store) {
    claimed_with_short_lease(&store).await;

    let early = store.reap(ReapRequest::at(T0 + 4_999, 100)).await.expect("reap");
    let reaped = store.reap(ReapRequest::at(T0 + 5_000, 100)).await.expect("reap");
    let again = store.reap(ReapRequest::at(T0 + 5_000, 100)).await.expect("reap");

    assert_eq!(early, 0, "a lease is not reaped before it expires");
    assert_eq!(reaped, 1, "an expired lease is reaped");
    assert_eq!(again, 0, "reaping twice reaps once");
    let a = step(&store, "r1", "a").await;
    assert_eq!(a.status, "ready", "an idempotent step is retried after a lost lease");
    assert_eq!(a.available_at_ms, Some(T0 + 6_000), "the retry waits its backoff");
    let attempts = store.attempts("r1").await.expect("attempts");
    let record = attempts[0].failure.clone().expect("the lost attempt has a failure record");
    assert_eq!(record["code"], "lease_lost", "no heartbeat timeout and deadline not reached: lease_lost");
    let next = claim_one(&store, T0 + 6_000).await;
    assert_eq!(next.lease.attempt, 2, "the reaped attempt counts: the next claim is attempt 2");
}

async fn concurrent_reapers_reap_an_expired_lease_once(store: Store) {
    claimed_with_short_lease(&store).await;
    let other = store.clone();

    let (one, two) =
        tokio::join!(store.reap(ReapRequest::at(T0 + 5_000, 100)), other.reap(ReapRequest::at(T0 + 5_000, 100)));

    let total = one.expect("reap") + two.expect("reap");
    assert_eq!(total, 1, "two concurrent reapers reap an expired lease once between them");
    let retries =
        super::support::events(&store, "r1").await.into_iter().filter(|e| e.kind == "step_retry_scheduled").count();
    assert_eq!(retries, 1, "exactly one failure was recorded");
    assert_eq!(claim_one(&store, T0 + 6_000).await.lease.attempt, 2);
}

/// A non-idempotent `notify.send` step (with a dependent) whose lease expired and was reaped.
pub(super) async fn parked_as_outcome_unknown(store: &Store) {
    let doc = steps(vec![
        json!({"id": "notify", "action": "notify.send", "args": {"text": "take an umbrella"}}),
        noop("after", &["notify"], json!({})),
    ]);
    submit(store, "r1", &doc).await;
    let c = claim_one(store, T0).await;
    assert_eq!(c.deadline_ms, T0 + 20_000, "test set-up: default timeout");
    // A lease that reached the deadline is reaped a tenth of the timeout later (the worker enforces the timeout).
    assert_eq!(store.reap(ReapRequest::at(T0 + 21_999, 100)).await.expect("reap"), 0, "within the backstop's tenth");
    assert_eq!(store.reap(ReapRequest::at(T0 + 22_000, 100)).await.expect("reap"), 1);
}

async fn non_idempotent_step_with_expired_lease_becomes_outcome_unknown(store: Store) {
    parked_as_outcome_unknown(&store).await;

    let n = step(&store, "r1", "notify").await;
    assert_eq!(
        n.status, "outcome_unknown",
        "a non-idempotent step whose outcome is ambiguous is never re-executed blindly"
    );
    let error = n.error.expect("outcome_unknown carries a failure record");
    assert_eq!(error["code"], "timeout", "the record says which timeout fired");
    assert_eq!(error["suggestion"], "ask_user", "an operator must decide");
    assert!(claim(&store, T0 + 86_400_000).await.is_empty(), "an outcome_unknown step is not claimable");
    assert_eq!(store.reap(ReapRequest::at(T0 + 86_400_000, 100)).await.expect("reap"), 0);
    assert_eq!(status(&store, "r1", "after").await, "pending", "dependents wait for a decision");
    assert_eq!(run(&store, "r1").await.status, "running", "the run is not finished");
}

async fn operator_retry_makes_outcome_unknown_claimable_as_attempt_two(store: Store) {
    parked_as_outcome_unknown(&store).await;

    let retried =
        store.operate("r1", "notify", OperatorAction::Retry, "alice", None, T0 + 30_000).await.expect("operate");

    assert!(retried, "retry applies to an outcome_unknown step");
    let c = claim_one(&store, T0 + 30_000).await;
    assert_eq!(c.lease.step_id, "notify");
    assert_eq!(c.lease.attempt, 2, "the operator's retry is a new attempt");
    let again = store.operate("r1", "notify", OperatorAction::Retry, "alice", None, T0 + 30_001);
    assert!(!again.await.expect("operate"), "retry does not apply to a running step");
    assert_eq!(complete(&store, &c.lease, &json!({}), T0 + 30_002).await, Report::Succeeded);
    super::support::run_step(&store, T0 + 30_003, &json!({})).await;
    assert_eq!(run(&store, "r1").await.status, "succeeded");
    assert!(super::support::has_event(&store, "r1", Some("notify"), "operator_retry").await);
}

async fn operator_skip_skips_outcome_unknown_and_finishes_the_run(store: Store) {
    parked_as_outcome_unknown(&store).await;

    let reason = Some("sent by hand");
    let skipped =
        store.operate("r1", "notify", OperatorAction::Skip, "alice", reason, T0 + 30_000).await.expect("operate");

    assert!(skipped, "skip applies to an outcome_unknown step");
    let events = super::support::events(&store, "r1").await;
    let skip = events.iter().find(|e| e.kind == "operator_skip").expect("the skip is in the history");
    assert_eq!(skip.data, json!({"by": "alice", "reason": "sent by hand"}), "with who and why");
    assert_eq!(status(&store, "r1", "notify").await, "skipped");
    assert_eq!(status(&store, "r1", "after").await, "skipped", "the skip propagates (all_success)");
    let summary = run(&store, "r1").await;
    assert_eq!(summary.status, "succeeded", "skipped steps do not fail the run");
    assert_eq!(summary.finished_at_ms, Some(T0 + 30_000));
    assert!(claim(&store, T0 + 30_000).await.is_empty());
}

async fn heartbeat_extends_the_lease_within_the_deadline_and_saves_a_checkpoint(store: Store) {
    let doc = steps(vec![json!({"id": "a", "action": "noop", "args": {}, "timeout_ms": 60_000,
                                "retry": retry_once_after_1s()})]);
    submit(&store, "r1", &doc).await;
    let req = ClaimRequest { worker_id: "w1".into(), actions: vec!["noop".into()], limit: 1, now_ms: T0 };
    let lease = store.claim(&req, 10_000).await.expect("claim").remove(0).lease;
    let checkpoint = json!({"page": 3, "cursor": "页码"});

    let first = store.heartbeat(&lease, Some(&checkpoint), 10_000, T0 + 5_000).await.expect("heartbeat");
    let reaped = store.reap(ReapRequest::at(T0 + 14_999, 100)).await.expect("reap");
    let last = store.heartbeat(&lease, None, 10_000, T0 + 55_000).await.expect("heartbeat");

    assert_eq!(
        first,
        HeartbeatOutcome::Extended { lease_expires_ms: T0 + 15_000 },
        "a heartbeat extends the lease by the TTL"
    );
    assert_eq!(reaped, 0, "an extended lease is not reaped at its original expiry");
    assert_eq!(
        last,
        HeartbeatOutcome::Extended { lease_expires_ms: T0 + 60_000 },
        "a heartbeat never extends the lease past the attempt deadline"
    );
    let foreign = cairn_store::Lease { worker_id: "intruder".into(), ..lease.clone() };
    let gone = store.heartbeat(&foreign, None, 10_000, T0 + 55_001).await.expect("heartbeat");
    assert_eq!(gone, HeartbeatOutcome::Gone, "a worker without the lease is told to stop");
    assert_eq!(
        step(&store, "r1", "a").await.checkpoint,
        Some(checkpoint.clone()),
        "the checkpoint is saved, and a heartbeat without one keeps it"
    );
    assert_eq!(store.reap(ReapRequest::at(T0 + 60_000, 100)).await.expect("reap"), 0, "the deadline's tenth");
    assert_eq!(store.reap(ReapRequest::at(T0 + 66_000, 100)).await.expect("reap"), 1);
    let next = claim_one(&store, T0 + 67_000).await;
    assert_eq!(next.lease.attempt, 2);
    assert_eq!(next.checkpoint, Some(checkpoint), "the next attempt receives the last checkpoint");
    let stale = store.heartbeat(&lease, None, 10_000, T0 + 67_001).await.expect("heartbeat");
    assert_eq!(stale, HeartbeatOutcome::Gone, "an older attempt's heartbeat is gone");
}

async fn reaper_records_which_timeout_fired(store: Store) {
    let doc = steps(vec![
        json!({"id": "slow", "action": "noop", "args": {}, "timeout_ms": 5_000}),
        json!({"id": "silent", "action": "noop", "args": {}, "heartbeat_timeout_ms": 5_000}),
        json!({"id": "lost", "action": "noop", "args": {}}),
    ]);
    submit(&store, "r1", &doc).await;
    let req = ClaimRequest { worker_id: "w1".into(), actions: vec!["noop".into()], limit: 10, now_ms: T0 };
    assert_eq!(store.claim(&req, 5_000).await.expect("claim").len(), 3);

    let at_deadline = store.reap(ReapRequest::at(T0 + 5_000, 100)).await.expect("reap");
    let reaped = store.reap(ReapRequest::at(T0 + 5_500, 100)).await.expect("reap");

    assert_eq!(at_deadline, 2, "the leases not held to the deadline are reaped at once");
    assert_eq!(reaped, 1, "the one that reached its deadline a tenth of its timeout later");
    let codes: Vec<(String, Value)> = store
        .attempts("r1")
        .await
        .expect("attempts")
        .into_iter()
        .map(|a| (a.step_id, a.failure.map_or(Value::Null, |f| f["code"].clone())))
        .collect();
    assert_eq!(
        codes,
        vec![
            ("lost".to_owned(), json!("lease_lost")),
            ("silent".to_owned(), json!("heartbeat_timeout")),
            ("slow".to_owned(), json!("timeout")),
        ],
        "the failure record says which limit fired: deadline, heartbeat timeout, or a lease not renewed"
    );
}

contract_tests!(
    expired_lease_is_reaped_once_and_counts_an_attempt,
    reaper_records_which_timeout_fired,
    concurrent_reapers_reap_an_expired_lease_once,
    non_idempotent_step_with_expired_lease_becomes_outcome_unknown,
    operator_retry_makes_outcome_unknown_claimable_as_attempt_two,
    operator_skip_skips_outcome_unknown_and_finishes_the_run,
    heartbeat_extends_the_lease_within_the_deadline_and_saves_a_checkpoint,
);
