//! Pausing a run (contract §6, "Repairing a run"): while paused no new attempt of its steps starts, through any
//! claim path (the store's claim, the batch writer's, PostgreSQL's fast path); running attempts finish and are
//! recorded; retry backoffs and approval deadlines that come due wait for the resume, which makes them happen.

use cairn_core::state::RunStatus;
use cairn_store::{PauseOutcome, Report, RunPause, Store};
use serde_json::json;

use super::support::{T0, action_error, claim, claim_one, complete, events, noop, run, status, steps, submit};
use super::writer::{complete as report, request, write};

fn hold(run_id: &str, now_ms: i64) -> RunPause<'_> {
    RunPause { run_id, by: "ops", reason: Some("maintenance"), now_ms }
}

async fn a_paused_run_starts_no_attempt_until_it_is_resumed_and_then_runs_what_came_due(store: Store) {
    let retry = json!({"max_attempts": 2, "initial_interval_ms": 1000, "jitter": "none"});
    let doc = steps(vec![
        noop("a", &[], json!({})),
        noop("b", &["a"], json!({})),
        json!({"id": "c", "action": "noop", "args": {}, "retry": retry}),
    ]);
    submit(&store, "r1", &doc).await;
    let running = claim(&store, T0).await;
    assert_eq!(store.run_pause(&hold("r1", T0 + 1)).await.expect("pause"), PauseOutcome::Done);
    assert_eq!(run(&store, "r1").await.status, RunStatus::Paused);

    for c in &running {
        if c.lease.step_id == "a" {
            assert_eq!(complete(&store, &c.lease, &json!({}), T0 + 2).await, Report::Succeeded, "running ones finish");
        } else {
            let report = store.fail(&c.lease, &action_error("503"), 0.0, T0 + 2).await.expect("fail");
            assert_eq!(report, Report::RetryScheduled);
        }
    }
    assert_eq!(status(&store, "r1", "b").await, "ready", "b was released");
    assert!(claim(&store, T0 + 60_000).await.is_empty(), "nothing of a paused run is claimed, however late");
    assert_eq!(store.next_due().await.expect("next_due"), None, "and the dispatcher has nothing to wait for");

    assert_eq!(store.run_resume(&hold("r1", T0 + 60_000)).await.expect("resume"), PauseOutcome::Done);
    let mut resumed: Vec<String> = claim(&store, T0 + 60_000).await.into_iter().map(|c| c.lease.step_id).collect();
    resumed.sort();
    assert_eq!(resumed, ["b", "c"], "b and c's retry, due during the pause, start on resume");
    let kinds: Vec<String> = events(&store, "r1").await.into_iter().map(|e| e.kind.to_string()).collect();
    assert!(kinds.contains(&"run_paused".to_owned()) && kinds.contains(&"run_resumed".to_owned()), "{kinds:?}");
}

async fn a_pause_applies_to_open_runs_and_a_resume_to_paused_ones(store: Store) {
    submit(&store, "r1", &steps(vec![noop("a", &[], json!({}))])).await;
    assert_eq!(store.run_resume(&hold("r1", T0)).await.expect("resume"), PauseOutcome::WrongState(RunStatus::Pending));
    assert_eq!(store.run_pause(&hold("r1", T0)).await.expect("pause"), PauseOutcome::Done);
    assert_eq!(store.run_pause(&hold("r1", T0)).await.expect("pause"), PauseOutcome::WrongState(RunStatus::Paused));
    assert_eq!(store.run_pause(&hold("nope", T0)).await.expect("pause"), PauseOutcome::NoSuchRun);
    assert!(store.cancel_run("r1", T0 + 1).await.expect("cancel"), "a paused run can be cancelled");
    let cancelled = run(&store, "r1").await;
    assert_eq!((cancelled.status, cancelled.open_steps), (RunStatus::Cancelled, 0));
    let finished = store.run_pause(&hold("r1", T0 + 2)).await.expect("pause");
    assert_eq!(finished, PauseOutcome::WrongState(RunStatus::Cancelled));
}

async fn a_paused_runs_last_running_step_still_ends_the_run(store: Store) {
    submit(&store, "r1", &steps(vec![noop("a", &[], json!({}))])).await;
    let a = claim_one(&store, T0).await;
    store.run_pause(&hold("r1", T0 + 1)).await.expect("pause");
    assert_eq!(complete(&store, &a.lease, &json!({}), T0 + 2).await, Report::Succeeded);
    assert_eq!(run(&store, "r1").await.status, RunStatus::Succeeded, "nothing is left to start: the run ends");
}

async fn an_approval_deadline_that_passes_during_a_pause_applies_on_resume(store: Store) {
    let doc = steps(vec![json!({"id": "x", "action": "noop", "args": {},
        "approval": {"required": true, "timeout_ms": 1000, "on_timeout": "fail"}})]);
    submit(&store, "r1", &doc).await;
    assert_eq!(status(&store, "r1", "x").await, "waiting_approval");
    store.run_pause(&hold("r1", T0 + 1)).await.expect("pause");
    assert_eq!(store.expire_approvals(T0 + 5_000, 100).await.expect("expire"), 0, "not while paused");
    assert_eq!(status(&store, "r1", "x").await, "waiting_approval");
    store.run_resume(&hold("r1", T0 + 6_000)).await.expect("resume");
    assert_eq!(store.expire_approvals(T0 + 6_000, 100).await.expect("expire"), 1, "on resume");
    assert_eq!(status(&store, "r1", "x").await, "failed");
}

async fn the_batch_writer_claims_nothing_of_a_paused_run_whatever_path_it_takes(store: Store) {
    submit(&store, "r1", &steps(vec![noop("a", &[], json!({})), noop("b", &["a"], json!({}))])).await;
    let mut writer = store.batch_writer();
    let first = write(&store, Some(&mut writer), &[], &[request(1)], T0).await;
    let a = first.claimed[0][0].lease.clone();
    store.run_pause(&hold("r1", T0 + 1)).await.expect("pause");

    let outcome = write(&store, Some(&mut writer), &[report(&a, json!({}))], &[request(1)], T0 + 2).await;

    assert_eq!(outcome.reports, [Report::Succeeded]);
    assert!(outcome.claimed[0].is_empty(), "b, released, is not claimed with the completion: {outcome:?}");
    assert_eq!(status(&store, "r1", "b").await, "ready");
    store.run_resume(&hold("r1", T0 + 3)).await.expect("resume");
    let b = claim_one(&store, T0 + 3).await;
    assert_eq!(b.lease.step_id, "b");
}

contract_tests!(
    a_paused_run_starts_no_attempt_until_it_is_resumed_and_then_runs_what_came_due,
    a_pause_applies_to_open_runs_and_a_resume_to_paused_ones,
    a_paused_runs_last_running_step_still_ends_the_run,
    an_approval_deadline_that_passes_during_a_pause_applies_on_resume,
    the_batch_writer_claims_nothing_of_a_paused_run_whatever_path_it_takes,
);
