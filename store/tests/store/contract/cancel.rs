//! Cancelling a run (contract §5 states, §6 leases).

use cairn_store::{HeartbeatOutcome, ReapRequest, Report, Store};
use serde_json::json;

use super::support::{T0, action_error, claim, complete, has_event, new_run, noop, run, status, steps};

async fn cancel_run_cancels_pending_backoff_timer_and_running_steps(store: Store) {
    let retry = json!({"max_attempts": 3, "initial_interval_ms": 60000, "max_interval_ms": 60000,
                       "jitter": "none"});
    let doc = steps(vec![
        noop("running", &[], json!({})),
        json!({"id": "backoff", "action": "noop", "args": {}, "retry": retry}),
        noop("timer", &[], json!({})),
        noop("pending", &["running"], json!({})),
    ]);
    let mut new = new_run("r1", &doc);
    new.timers[2] = Some((T0 + 3_600_000, "+1h".into()));
    super::support::create(&store, &new).await;
    let claimed = claim(&store, T0).await;
    assert_eq!(claimed.len(), 2, "test set-up: running and backoff claimed");
    let lease_of = |id: &str| claimed.iter().find(|c| c.lease.step_id == id).map(|c| c.lease.clone()).expect("claimed");
    let (running, backoff) = (lease_of("running"), lease_of("backoff"));
    let retried = store.fail(&backoff, &action_error("503"), 0.0, T0 + 1).await;
    assert_eq!(retried.expect("fail"), Report::RetryScheduled);

    let cancelled = store.cancel_run("r1", T0 + 10).await.expect("cancel_run");

    assert!(cancelled, "an open run can be cancelled");
    for id in ["running", "backoff", "timer", "pending"] {
        assert_eq!(
            status(&store, "r1", id).await,
            "cancelled",
            "cancel reaches every open step: running, ready in backoff, ready on a timer, pending ({id})"
        );
    }
    let summary = run(&store, "r1").await;
    assert_eq!(summary.status, "cancelled");
    assert_eq!(summary.finished_at_ms, Some(T0 + 10));
    assert_eq!(
        complete(&store, &running, &json!({"late": true}), T0 + 11).await,
        Report::Stale,
        "a completion arriving after cancel is stale"
    );
    assert_eq!(status(&store, "r1", "running").await, "cancelled", "the late report changed nothing");
    let beat = store.heartbeat(&running, None, 30_000, T0 + 12).await.expect("heartbeat");
    assert_eq!(beat, HeartbeatOutcome::Gone, "a heartbeat after cancel tells the worker to stop");
    assert!(claim(&store, T0 + 86_400_000).await.is_empty(), "nothing of a cancelled run is claimable, ever");
    assert_eq!(store.reap(ReapRequest::at(T0 + 86_400_000, 100)).await.expect("reap"), 0, "no lease survives cancel");
    let attempts = store.attempts("r1").await.expect("attempts");
    let open = attempts.iter().find(|a| a.step_id == "running").expect("attempt");
    assert_eq!(open.status, "failed", "the running attempt is closed");
    assert_eq!(open.failure.as_ref().map(|f| f["code"].clone()), Some(json!("cancelled")));
    assert!(has_event(&store, "r1", None, "run_cancelled").await);
    assert!(!store.cancel_run("r1", T0 + 20).await.expect("cancel_run"), "cancelling a finished run reports false");
    assert_eq!(run(&store, "r1").await.status, "cancelled", "the run stays cancelled");
    assert!(!store.cancel_run("missing", T0).await.expect("cancel_run"), "cancelling an unknown run reports false");
}

contract_tests!(cancel_run_cancels_pending_backoff_timer_and_running_steps);
