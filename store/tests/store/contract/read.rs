//! Reads and the start-up integrity check: run listings, event paging, corrupt runs (contract §5).

use cairn_core::state::RunStatus;
use cairn_store::Store;
use serde_json::json;

use super::support::{T0, action_error, claim, claim_one, execute_sql, new_run, noop, run, status, steps, submit};

fn two_steps() -> serde_json::Value {
    steps(vec![noop("a", &[], json!({})), noop("b", &["a"], json!({}))])
}

async fn integrity_check_fails_a_run_with_a_missing_step_row(store: Store) {
    super::support::submit(&store, "broken", &two_steps()).await;
    super::support::submit(&store, "healthy", &two_steps()).await;
    let deleted = execute_sql(&store, "DELETE FROM steps WHERE run_id = $1 AND step_id = $2", &["broken", "b"]).await;
    assert_eq!(deleted, 1, "test set-up: one step row deleted");

    let failed = store.integrity_check(T0 + 5).await.expect("integrity_check");

    assert_eq!(failed, vec!["broken".to_owned()], "only the run missing a step row is reported");
    let summary = run(&store, "broken").await;
    assert_eq!(summary.status, "failed", "a corrupt run is failed, not left pending forever");
    assert_eq!(summary.failure.expect("root cause")["code"], "integrity_error");
    assert_eq!(status(&store, "broken", "a").await, "cancelled", "its open steps are cancelled");
    let claimed = claim(&store, T0 + 10).await;
    let ids: Vec<(&str, &str)> = claimed.iter().map(|c| (c.lease.run_id.as_str(), c.lease.step_id.as_str())).collect();
    assert_eq!(ids, vec![("healthy", "a")], "nothing of the corrupt run is dispatched; healthy runs are");
    assert!(
        store.integrity_check(T0 + 20).await.expect("integrity_check").is_empty(),
        "a run already failed is not reported again"
    );
}

const BROKEN_RUNS: usize = 501;

async fn integrity_check_finds_every_broken_run_beyond_one_page(store: Store) {
    for i in 0..BROKEN_RUNS {
        let mut new = new_run(&format!("r{i:04}"), &two_steps());
        new.now_ms = T0 + i as i64;
        super::support::create(&store, &new).await;
    }
    let deleted = execute_sql(&store, "DELETE FROM steps WHERE step_id = $1", &["b"]).await;
    assert_eq!(deleted, BROKEN_RUNS as u64, "test set-up");

    let failed = store.integrity_check(T0 + 10_000).await.expect("integrity_check");

    assert_eq!(failed.len(), BROKEN_RUNS, "every broken run is found, even past the first page of open runs");
    let open = store.runs(Some(RunStatus::Pending), 1000, 0).await.expect("runs");
    assert!(open.is_empty(), "no broken run is left pending: {} left", open.len());
}

async fn runs_filter_by_status_and_paginate_newest_first(store: Store) {
    for (i, id) in ["r1", "r2", "r3", "r4"].iter().enumerate() {
        let mut new = new_run(id, &steps(vec![noop("a", &[], json!({}))]));
        new.now_ms = T0 + i as i64;
        super::support::create(&store, &new).await;
    }
    let first = claim(&store, T0 + 10).await;
    for c in first.iter().filter(|c| c.lease.run_id == "r1") {
        super::support::complete(&store, &c.lease, &json!({}), T0 + 11).await;
    }
    store.cancel_run("r2", T0 + 12).await.expect("cancel_run");
    let ids = |runs: Vec<cairn_store::RunSummary>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();

    let cancelled = ids(store.runs(Some(RunStatus::Cancelled), 10, 0).await.expect("runs"));
    let succeeded = ids(store.runs(Some(RunStatus::Succeeded), 10, 0).await.expect("runs"));
    let running = ids(store.runs(Some(RunStatus::Running), 10, 0).await.expect("runs"));
    let page1 = ids(store.runs(None, 2, 0).await.expect("runs"));
    let page2 = ids(store.runs(None, 2, 2).await.expect("runs"));
    let page3 = ids(store.runs(None, 2, 4).await.expect("runs"));

    assert_eq!(cancelled, vec!["r2"], "the status filter returns only runs in that status");
    assert_eq!(succeeded, vec!["r1"]);
    assert_eq!(running, vec!["r4", "r3"], "claimed runs are running, newest first");
    assert_eq!(page1, vec!["r4", "r3"], "pages are newest first");
    assert_eq!(page2, vec!["r2", "r1"], "the offset continues where the last page ended");
    assert!(page3.is_empty(), "past the end is empty");
    let r1 = run(&store, "r1").await;
    assert_eq!((r1.step_count, r1.open_steps), (1, 0));
    assert_eq!(r1.created_at_ms, T0);
}

async fn events_page_by_id_without_gaps_or_repeats(store: Store) {
    super::support::submit(&store, "r1", &two_steps()).await;
    super::support::submit(&store, "other", &two_steps()).await;
    for now in [T0 + 1, T0 + 2, T0 + 3, T0 + 4] {
        let claimed = claim(&store, now).await;
        for c in claimed {
            super::support::complete(&store, &c.lease, &json!({}), now).await;
        }
    }
    let all = store.events("r1", 0, 1000).await.expect("events");
    assert!(all.len() > 5, "test set-up: enough events to page");

    let mut paged = Vec::new();
    let mut after = 0;
    loop {
        let page = store.events("r1", after, 2).await.expect("events");
        assert!(page.len() <= 2, "a page holds at most `limit` events");
        let Some(last) = page.last() else { break };
        after = last.id;
        paged.extend(page);
    }

    assert_eq!(paged, all, "paging by id yields every event once, in order");
    assert!(all.windows(2).all(|w| w[0].id < w[1].id), "event ids increase");
    let kinds: Vec<&str> = all.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds.first(), Some(&"run_created"));
    assert_eq!(kinds.last(), Some(&"run_succeeded"), "the history ends with the run's outcome");
    let other = store.events("other", 0, 1000).await.expect("events");
    assert!(other.iter().all(|e| all.iter().all(|a| a.id != e.id)), "a run's history holds only its own events");
}

/// While a worker keeps failing and retrying a step, every `run_detail` shows one consistent moment: a `running`
/// step's current attempt has no failure yet, and every earlier attempt has one.
async fn run_detail_reads_one_snapshot_while_reports_commit(store: Store) {
    const ATTEMPTS: i64 = 60;
    let retry = json!({"max_attempts": ATTEMPTS, "initial_interval_ms": 1, "backoff_coefficient": 1.0,
        "max_interval_ms": 1, "jitter": "none"});
    submit(&store, "r1", &steps(vec![json!({"id": "flaky", "action": "noop", "args": {}, "retry": retry})])).await;
    let worker = {
        let store = store.clone();
        tokio::spawn(async move {
            for i in 0..ATTEMPTS {
                let now = T0 + i * 10;
                let lease = claim_one(&store, now).await.lease;
                store.fail(&lease, &action_error("flaky"), 0.5, now + 1).await.expect("the failure is recorded");
            }
        })
    };
    let mut reads = 0;
    while !worker.is_finished() {
        let detail = store.run_detail("r1").await.expect("run_detail").expect("the run exists");
        let step = &detail.steps[0];
        let failed = detail.attempts.iter().filter(|a| a.failure.is_some()).count();
        let finished = if step.status == "running" { step.attempts - 1 } else { step.attempts };
        assert_eq!(
            failed, finished as usize,
            "read {reads}: step {} at attempt {} with {failed} failure records",
            step.status, step.attempts
        );
        reads += 1;
        tokio::task::yield_now().await;
    }
    worker.await.expect("the worker task");
    assert!(reads > 0, "the reader read while the worker reported");
    assert_eq!(run(&store, "r1").await.status, "failed", "the retries ran out");
}

contract_tests!(
    run_detail_reads_one_snapshot_while_reports_commit,
    integrity_check_fails_a_run_with_a_missing_step_row,
    integrity_check_finds_every_broken_run_beyond_one_page,
    runs_filter_by_status_and_paginate_newest_first,
    events_page_by_id_without_gaps_or_repeats,
);
