//! Group commit (issue 8): a batch of reports and claims in one transaction, the hand-off of released steps to
//! waiting claimers in that transaction, and undoing a claim that never reached a worker.

use cairn_store::{ClaimRequest, Lease, Report, ReportItem, ReportKind, Store};
use serde_json::json;

use super::support::{
    LIMITS, T0, action_error, batch, claim, claim_for, claim_one, events, has_event, noop, run, status, step, steps,
    submit,
};

fn complete(lease: &Lease, output: serde_json::Value) -> ReportItem {
    ReportItem { lease: lease.clone(), kind: ReportKind::Complete(output) }
}

fn request(worker: &str, limit: u32) -> ClaimRequest {
    ClaimRequest { worker_id: worker.into(), actions: vec!["noop".into()], limit, now_ms: 0 }
}

async fn a_batch_decides_each_report_as_if_alone_and_hands_released_steps_to_a_waiting_claimer(store: Store) {
    let retry = json!({"max_attempts": 3, "initial_interval_ms": 1000, "backoff_coefficient": 2.0,
                       "max_interval_ms": 60000, "jitter": "none"});
    let doc = steps(vec![
        noop("a", &[], json!({})),
        noop("b", &["a"], json!({})),
        json!({"id": "x", "action": "noop", "args": {}, "retry": retry}),
    ]);
    submit(&store, "r1", &doc).await;
    let claimed = claim(&store, T0).await;
    let lease_of = |id: &str| claimed.iter().find(|c| c.lease.step_id == id).expect("claimed").lease.clone();
    let (a, x) = (lease_of("a"), lease_of("x"));
    let stale = Lease { attempt: a.attempt + 1, ..a.clone() };
    let items = vec![
        complete(&a, json!({"n": 1})),
        complete(&stale, json!({"n": 2})),
        complete(&a, json!({"n": 3})),
        ReportItem { lease: x.clone(), kind: ReportKind::Fail { failure: action_error("flaky"), sample: 0.0 } },
    ];
    let asked = std::sync::Mutex::new(Vec::new());
    let handoff = |due: usize| {
        asked.lock().expect("not poisoned").push(due);
        vec![request("waiting-worker", 4)]
    };

    let outcome = store.write_batch(&batch(&items, &[], T0 + 10, &handoff)).await.expect("the batch commits");

    assert_eq!(
        outcome.reports,
        [Report::Succeeded, Report::Stale, Report::Stale, Report::RetryScheduled],
        "each report is fenced and decided on its own; a duplicate in the same batch is stale"
    );
    assert_eq!(step(&store, "r1", "a").await.output, Some(json!({"n": 1})), "the first report's output is kept");
    assert_eq!(outcome.ready_now, 1, "b became due; x's retry is in backoff, not due");
    assert_eq!(*asked.lock().expect("not poisoned"), [1], "the hand-off is asked once, with the number of due steps");
    assert_eq!(outcome.handed.len(), 1);
    let handed: Vec<&str> = outcome.handed[0].iter().map(|c| c.lease.step_id.as_str()).collect();
    assert_eq!(handed, ["b"], "the released dependent is claimed for the waiting worker in the same transaction");
    assert_eq!(outcome.handed[0][0].lease.worker_id, "waiting-worker");
    assert_eq!(status(&store, "r1", "b").await, "running");
    assert_eq!(status(&store, "r1", "x").await, "ready", "x waits for its retry");
    assert!(has_event(&store, "r1", Some("b"), "step_started").await);
}

async fn claims_in_a_batch_run_after_its_reports_and_see_what_they_released(store: Store) {
    let doc = steps(vec![noop("a", &[], json!({})), noop("b", &["a"], json!({}))]);
    submit(&store, "r1", &doc).await;
    let a = claim_one(&store, T0).await.lease;
    let nobody = |_: usize| Vec::new();

    let outcome = store
        .write_batch(&batch(&[complete(&a, json!({}))], &[request("w2", 8)], T0 + 5, &nobody))
        .await
        .expect("the batch commits");

    assert_eq!(outcome.reports, [Report::Succeeded]);
    assert_eq!(outcome.claimed.len(), 1, "one answer per claim request");
    let claimed: Vec<&str> = outcome.claimed[0].iter().map(|c| c.lease.step_id.as_str()).collect();
    assert_eq!(claimed, ["b"]);
    assert!(outcome.handed.is_empty(), "no waiter was given");
    run_to_end(&store, &outcome.claimed[0][0].lease).await;
}

async fn run_to_end(store: &Store, lease: &Lease) {
    let nobody = |_: usize| Vec::new();
    let outcome = store
        .write_batch(&batch(&[complete(lease, json!({}))], &[], T0 + 9, &nobody))
        .await
        .expect("the store answers");
    assert_eq!(outcome.reports, [Report::Succeeded]);
    assert_eq!(run(store, &lease.run_id).await.status, "succeeded", "a batch finishes the run like a single report");
}

async fn an_undelivered_claim_is_given_back_without_using_an_attempt(store: Store) {
    let doc = steps(vec![json!({"id": "a", "action": "noop", "args": {}, "retry": {"max_attempts": 1}})]);
    submit(&store, "r1", &doc).await;
    let lease = claim_one(&store, T0).await.lease;
    assert_eq!(lease.attempt, 1);

    assert_eq!(
        store.unclaim(std::slice::from_ref(&lease), "not delivered", T0 + 3).await.expect("the store answers"),
        1
    );

    let a = step(&store, "r1", "a").await;
    assert_eq!(a.status, "ready", "the step is ready again at once");
    assert_eq!(a.attempts, 0, "the attempt number is given back, so max_attempts = 1 still allows a run");
    assert_eq!(a.available_at_ms, Some(T0 + 3));
    assert!(store.attempts("r1").await.expect("the store answers").is_empty(), "the attempt row is removed");
    assert!(events(&store, "r1").await.iter().any(|e| e.kind == "step_unclaimed"));
    assert_eq!(
        store.unclaim(std::slice::from_ref(&lease), "not delivered", T0 + 4).await.expect("the store answers"),
        0,
        "a second undo changes nothing"
    );

    let again = claim_for(&store, "w2", &["noop"], 1, T0 + 5).await;
    assert_eq!(again[0].lease.attempt, 1, "the next claim is attempt 1 again");
    let stale = store.write_batch(&batch(&[complete(&lease, json!({}))], &[], T0 + 6, &|_| Vec::new())).await;
    assert_eq!(
        stale.expect("the batch commits").reports,
        [Report::Stale],
        "a report under the undone lease (worker w1) is stale"
    );
}

async fn completions_accepted_together_end_as_they_would_one_by_one(store: Store) {
    let join = json!({"id": "j", "action": "noop", "args": {}, "depends_on": ["a", "b"]});
    let doc = steps(vec![noop("a", &[], json!({})), noop("b", &[], json!({})), noop("c", &[], json!({})), join]);
    submit(&store, "r1", &doc).await;
    submit(&store, "r2", &steps(vec![noop("d", &[], json!({}))])).await;
    let claimed = claim(&store, T0).await;
    let lease_of = |id: &str| claimed.iter().find(|c| c.lease.step_id == id).expect("claimed").lease.clone();
    let (a, b, c, d) = (lease_of("a"), lease_of("b"), lease_of("c"), lease_of("d"));
    for run_id in ["r1", "r2"] {
        assert_eq!(run(&store, run_id).await.status, "running", "one claim starts both runs");
    }
    let foreign = Lease { worker_id: "intruder".into(), ..c.clone() };
    let huge = json!({"text": "x".repeat(LIMITS.max_output_bytes)});
    let items = vec![
        complete(&a, json!({"n": 1})),
        complete(&foreign, json!({"n": 0})),
        complete(&b, json!({"n": 2})),
        complete(&c, json!({"n": 3})),
        complete(&d, huge),
        complete(&a, json!({"n": 9})),
    ];
    let nobody = |_: usize| Vec::new();

    let outcome = store.write_batch(&batch(&items, &[], T0 + 10, &nobody)).await.expect("the batch commits");

    assert_eq!(
        outcome.reports,
        [Report::Succeeded, Report::Stale, Report::Succeeded, Report::Succeeded, Report::Failed, Report::Stale],
        "fenced per lease: a foreign worker's report is stale and does not hide the holder's; an oversized output \
         fails its step; a repeated lease is stale"
    );
    for (id, n) in [("a", 1), ("b", 2), ("c", 3)] {
        assert_eq!(step(&store, "r1", id).await.output, Some(json!({"n": n})), "{id} keeps its own output");
    }
    let attempts = store.attempts("r1").await.expect("the store answers");
    let closed: Vec<(&str, &str, Option<i64>)> =
        attempts.iter().map(|t| (t.step_id.as_str(), t.status.as_str(), t.ended_at_ms)).collect();
    let at = Some(T0 + 10);
    assert_eq!(closed, [("a", "succeeded", at), ("b", "succeeded", at), ("c", "succeeded", at)]);
    assert_eq!(outcome.ready_now, 1, "the join is released once, by its last parent");
    assert_eq!(status(&store, "r1", "j").await, "ready");
    assert_eq!(run(&store, "r2").await.status, "failed", "output_too_large fails d and its run");
    assert_eq!(run(&store, "r1").await.status, "running", "j is still open");
    let position = |history: &[cairn_store::RunEvent], kind: &str, step: Option<&str>| {
        history.iter().position(|e| e.kind == kind && e.step_id.as_deref() == step).expect("event recorded")
    };
    let (r1, r2) = (events(&store, "r1").await, events(&store, "r2").await);
    assert!(
        position(&r1, "step_succeeded", Some("a")) < position(&r1, "step_ready", Some("j"))
            && position(&r1, "step_succeeded", Some("b")) < position(&r1, "step_ready", Some("j"))
            && position(&r2, "step_failed", Some("d")) < position(&r2, "run_failed", None),
        "a batch's events are recorded in the order they happened: {r1:?} {r2:?}"
    );
    let j = claim_one(&store, T0 + 11).await.lease;
    assert_eq!(j.step_id, "j");
    run_to_end(&store, &j).await;
}

async fn a_workers_claims_in_one_batch_share_out_the_leased_steps_and_the_hand_off_gets_only_the_rest(store: Store) {
    let doc = steps(vec![
        noop("a", &[], json!({})),
        noop("b1", &["a"], json!({})),
        noop("b2", &["a"], json!({})),
        noop("b3", &["a"], json!({})),
    ]);
    submit(&store, "r1", &doc).await;
    let a = claim_one(&store, T0).await.lease;
    let claims = [request("w1", 1), request("w2", 1), request("w1", 1)];
    let asked = std::sync::Mutex::new(Vec::new());
    let handoff = |due: usize| {
        asked.lock().expect("not poisoned").push(due);
        vec![request("waiting-worker", 4)]
    };

    let outcome = store
        .write_batch(&batch(&[complete(&a, json!({}))], &claims, T0 + 5, &handoff))
        .await
        .expect("the batch commits");

    let owners: Vec<Vec<&str>> =
        outcome.claimed.iter().map(|c| c.iter().map(|s| s.lease.worker_id.as_str()).collect()).collect();
    assert_eq!(owners, [vec!["w1"], vec!["w2"], vec!["w1"]], "one answer per request, each within its limit");
    let mut leased: Vec<&str> = outcome.claimed.iter().flatten().map(|s| s.lease.step_id.as_str()).collect();
    leased.sort_unstable();
    assert_eq!(leased, ["b1", "b2", "b3"], "w1's two requests share one claim and deal its steps out: none twice");
    assert_eq!(outcome.ready_now, 0, "the batch's own claims took every step it released");
    assert!(asked.lock().expect("not poisoned").is_empty(), "so no waiting poll is asked");
    assert!(outcome.handed.is_empty());
}

async fn a_cascade_from_a_batch_releases_level_by_level_and_skips_propagate_through_shared_dependents(store: Store) {
    // a and b finish in one batch. Level 1 releases c (its `when` is false: skipped) and takes e from 2 pending
    // to 1; level 2 (c) releases d (skipped: c did not succeed) and e (b succeeded, c skipped: skipped); level 3
    // (d, e) has nothing left. Every step is decided exactly once and the run ends.
    let doc = steps(vec![
        noop("a", &[], json!({})),
        noop("b", &[], json!({})),
        json!({"id": "c", "action": "noop", "args": {}, "depends_on": ["a"], "when": "steps.a.output.go"}),
        noop("d", &["c"], json!({})),
        noop("e", &["b", "c"], json!({})),
    ]);
    submit(&store, "r1", &doc).await;
    let claimed = claim(&store, T0).await;
    let lease_of = |id: &str| claimed.iter().find(|c| c.lease.step_id == id).expect("claimed").lease.clone();
    let items = vec![complete(&lease_of("a"), json!({"go": false})), complete(&lease_of("b"), json!({}))];
    let nobody = |_: usize| Vec::new();

    let outcome = store.write_batch(&batch(&items, &[], T0 + 10, &nobody)).await.expect("the batch commits");

    assert_eq!(outcome.reports, [Report::Succeeded, Report::Succeeded]);
    assert_eq!(outcome.ready_now, 0, "nothing became runnable");
    for id in ["c", "d", "e"] {
        assert_eq!(status(&store, "r1", id).await, "skipped", "{id}");
    }
    let skips: Vec<String> = events(&store, "r1")
        .await
        .iter()
        .filter(|e| e.kind == "step_skipped")
        .filter_map(|e| e.step_id.clone())
        .collect();
    assert_eq!(skips, ["c", "d", "e"], "one decision per step, level by level");
    let summary = run(&store, "r1").await;
    assert_eq!((summary.status.as_str(), summary.open_steps), ("succeeded", 0), "the run ends with its last decision");
}

async fn a_batch_finishing_many_runs_closes_each_as_it_would_alone(store: Store) {
    // r1 and r2: one step each; r3: c completes here after x failed for good earlier; r4: e and g complete
    // (two steps of one run in one batch), f stays.
    let once = json!({"max_attempts": 1});
    submit(&store, "r1", &steps(vec![noop("a", &[], json!({}))])).await;
    submit(&store, "r2", &steps(vec![noop("b", &[], json!({}))])).await;
    let x = json!({"id": "x", "action": "noop", "args": {}, "retry": once});
    submit(&store, "r3", &steps(vec![noop("c", &[], json!({})), x])).await;
    submit(&store, "r4", &steps(vec![noop("e", &[], json!({})), noop("f", &[], json!({})), noop("g", &[], json!({}))]))
        .await;
    let claimed = claim(&store, T0).await;
    let lease_of = |id: &str| claimed.iter().find(|c| c.lease.step_id == id).expect("claimed").lease.clone();
    let failed =
        ReportItem { lease: lease_of("x"), kind: ReportKind::Fail { failure: action_error("no"), sample: 0.0 } };
    let nobody = |_: usize| Vec::new();
    let first = store.write_batch(&batch(&[failed], &[], T0 + 1, &nobody)).await.expect("the batch commits");
    assert_eq!(first.reports, [Report::Failed]);
    let items: Vec<ReportItem> =
        ["a", "b", "c", "e", "g"].iter().map(|id| complete(&lease_of(id), json!({}))).collect();

    let outcome = store.write_batch(&batch(&items, &[], T0 + 10, &nobody)).await.expect("the batch commits");

    assert_eq!(outcome.reports, [Report::Succeeded; 5]);
    for run_id in ["r1", "r2"] {
        let summary = run(&store, run_id).await;
        assert_eq!((summary.status.as_str(), summary.open_steps), ("succeeded", 0), "{run_id}");
        assert!(has_event(&store, run_id, None, "run_succeeded").await, "{run_id}");
    }
    let r3 = run(&store, "r3").await;
    assert_eq!(r3.status, "failed", "x failed, so r3 fails once c is done");
    assert_eq!(r3.failure.as_ref().and_then(|f| f.get("step_id")).and_then(|v| v.as_str()), Some("x"));
    assert!(has_event(&store, "r3", None, "run_failed").await);
    let r4 = run(&store, "r4").await;
    assert_eq!((r4.status.as_str(), r4.open_steps), ("running", 1), "f is still open");
    assert!(!has_event(&store, "r4", None, "run_succeeded").await);
}

async fn a_batchs_events_are_recorded_once_each_in_order_with_every_claims_step_started(store: Store) {
    let doc = steps(vec![noop("a", &[], json!({})), noop("b1", &["a"], json!({})), noop("b2", &["a"], json!({}))]);
    submit(&store, "r1", &doc).await;
    let a = claim_one(&store, T0).await.lease;
    // A worker id that JSON must escape: the `step_started` data is written by SQL on PostgreSQL.
    let worker = "w\"2\\é";
    let handoff = |_: usize| vec![request("waiting-worker", 4)];

    let outcome = store
        .write_batch(&batch(&[complete(&a, json!({}))], &[request(worker, 1)], T0 + 5, &handoff))
        .await
        .expect("the batch commits");

    assert_eq!(outcome.claimed[0].len(), 1, "the worker's claim takes one of the released steps");
    assert_eq!(outcome.handed[0].len(), 1, "the hand-off takes the other");
    let claimed = &outcome.claimed[0][0];
    let handed = &outcome.handed[0][0];
    let history = events(&store, "r1").await;
    let position = |kind: &str, step: &str| {
        let found: Vec<usize> = history
            .iter()
            .enumerate()
            .filter(|(_, e)| e.kind == kind && e.step_id.as_deref() == Some(step))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(found.len(), 1, "exactly one {kind} event for {step}: {history:?}");
        found[0]
    };
    let (claimed_id, handed_id) = (claimed.lease.step_id.as_str(), handed.lease.step_id.as_str());
    assert!(
        position("step_started", "a") < position("step_succeeded", "a")
            && position("step_succeeded", "a") < position("step_ready", claimed_id)
            && position("step_ready", claimed_id) < position("step_started", claimed_id)
            && position("step_ready", handed_id) < position("step_started", claimed_id)
            && position("step_started", claimed_id) < position("step_started", handed_id),
        "reports' events, then the claim's, then the hand-off's: {history:?}"
    );
    let started = |step: &str| history.iter().find(|e| e.kind == "step_started" && e.step_id.as_deref() == Some(step));
    let ours = started(claimed_id).expect("recorded");
    assert_eq!(ours.data, json!({"attempt": 1, "worker_id": worker}), "the worker id survives escaping");
    assert_eq!(ours.at_ms, T0 + 5);
    assert_eq!(started(handed_id).expect("recorded").data, json!({"attempt": 1, "worker_id": "waiting-worker"}));
    let ids: Vec<i64> = history.iter().map(|e| e.id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "event ids increase in history order: {ids:?}");
}

async fn a_batch_writer_runs_a_chain_to_its_end_deciding_each_batch_as_the_store_does(store: Store) {
    let doc = steps(vec![noop("a", &[], json!({})), noop("b", &["a"], json!({})), noop("c", &["b"], json!({}))]);
    submit(&store, "r1", &doc).await;
    let mut writer = store.batch_writer();
    let nobody = |_: usize| Vec::new();
    let first = writer.write_batch(&batch(&[], &[request("w1", 4)], T0, &nobody)).await.expect("commits");
    let mut lease = first.claimed[0][0].lease.clone();
    assert_eq!(lease.step_id, "a", "a claim alone leases the root");

    for (now, next) in [(T0 + 1, "b"), (T0 + 2, "c")] {
        let outcome = writer
            .write_batch(&batch(&[complete(&lease, json!({"done": lease.step_id}))], &[request("w1", 1)], now, &nobody))
            .await
            .expect("the batch commits");
        assert_eq!(outcome.reports, [Report::Succeeded]);
        let claimed: Vec<&str> = outcome.claimed[0].iter().map(|c| c.lease.step_id.as_str()).collect();
        assert_eq!(claimed, [next], "the completion's claim takes the dependent it released");
        lease = outcome.claimed[0][0].lease.clone();
    }
    let last = writer.write_batch(&batch(&[complete(&lease, json!({}))], &[], T0 + 3, &nobody)).await;

    assert_eq!(last.expect("the last batch commits").reports, [Report::Succeeded]);
    assert_eq!(run(&store, "r1").await.status, "succeeded", "the writer's batches finished the run");
    assert_eq!(step(&store, "r1", "b").await.output, Some(json!({"done": "b"})), "outputs are the writer's");
    let again = writer.write_batch(&batch(&[complete(&lease, json!({}))], &[], T0 + 4, &nobody)).await;
    assert_eq!(
        again.expect("answers").reports,
        [Report::Stale],
        "a repeated report is fenced on the held connection too"
    );
}

contract_tests!(
    a_batch_writer_runs_a_chain_to_its_end_deciding_each_batch_as_the_store_does,
    a_batchs_events_are_recorded_once_each_in_order_with_every_claims_step_started,
    a_batch_finishing_many_runs_closes_each_as_it_would_alone,
    a_cascade_from_a_batch_releases_level_by_level_and_skips_propagate_through_shared_dependents,
    a_workers_claims_in_one_batch_share_out_the_leased_steps_and_the_hand_off_gets_only_the_rest,
    completions_accepted_together_end_as_they_would_one_by_one,
    a_batch_decides_each_report_as_if_alone_and_hands_released_steps_to_a_waiting_claimer,
    claims_in_a_batch_run_after_its_reports_and_see_what_they_released,
    an_undelivered_claim_is_given_back_without_using_an_attempt,
);
