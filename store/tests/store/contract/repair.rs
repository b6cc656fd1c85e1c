//! Repairing a run (contract §6, "Repairing a run"). An operator's retry of a failed step: the run reopens, the
//! step gets a fresh attempt budget, the dependents it skipped are decided again, succeeded steps never run again;
//! repaired args replace the step's and give it a new idempotency key. A redrive of a failed or cancelled run: its
//! failed and cancelled steps run again, a non-idempotent one cancelled while it ran waits for an operator. A
//! rerun from a step: a new run in which it and its descendants run and the other steps keep their outputs. Every
//! finished run has no open step.

use cairn_core::state::{RunStatus, StepStatus};
use cairn_store::{
    Claimed, RedriveOutcome, Report, RerunOutcome, RetryOutcome, RunRedrive, RunRerun, StepRetry, Store,
};
use serde_json::{Value, json};

use super::support::{T0, action_error, claim, claim_one, complete, events, noop, run, status, step, steps, submit};

fn retry<'a>(step_id: &'a str, args: Option<&'a Value>, now_ms: i64) -> StepRetry<'a> {
    StepRetry { run_id: "r1", step_id, args, by: "alice", reason: Some("endpoint fixed"), now_ms }
}

fn once() -> Value {
    json!({"max_attempts": 2, "initial_interval_ms": 1000, "jitter": "none"})
}

/// Runs `a` (succeeds) and fails `b` until its two attempts are spent; `c` depends on `b`.
async fn a_then_b_fails(store: &Store) {
    let doc = steps(vec![
        noop("a", &[], json!({})),
        json!({"id": "b", "action": "noop", "depends_on": ["a"], "args": {"v": "$a.output.v"}, "retry": once()}),
        noop("c", &["b"], json!({})),
    ]);
    submit(store, "r1", &doc).await;
    let a = claim_one(store, T0).await;
    assert_eq!(complete(store, &a.lease, &json!({"v": 1}), T0).await, Report::Succeeded);
    for (n, at) in [(1, T0 + 10), (2, T0 + 1_010)] {
        let b = claim_one(store, at).await;
        assert_eq!((b.lease.step_id.as_str(), b.lease.attempt), ("b", n));
        store.fail(&b.lease, &action_error("upstream 503"), 0.0, at).await.expect("fail");
    }
    assert_eq!(status(store, "r1", "b").await, "failed");
    assert_eq!(status(store, "r1", "c").await, "skipped");
    assert_eq!(run(store, "r1").await.status, RunStatus::Failed);
}

fn claimed_ids(claimed: &[Claimed]) -> Vec<&str> {
    claimed.iter().map(|c| c.lease.step_id.as_str()).collect()
}

async fn a_retried_failed_step_reopens_its_run_with_a_fresh_budget_and_no_succeeded_step_runs_again(store: Store) {
    a_then_b_fails(&store).await;
    let outcome = store.step_retry(&retry("b", None, T0 + 5_000)).await.expect("retry");
    assert_eq!(outcome, RetryOutcome::Retried { args_revision: 0, reopened: vec!["b".into(), "c".into()] });
    let reopened = run(&store, "r1").await;
    assert_eq!((reopened.status, reopened.open_steps, reopened.failure), (RunStatus::Running, 2, None));
    assert_eq!(status(&store, "r1", "c").await, "pending", "the dependent b skipped is decided again");

    let third = claim(&store, T0 + 5_000).await;
    assert_eq!(claimed_ids(&third), ["b"], "only b runs: a keeps its output");
    let b = &third[0];
    assert_eq!((b.lease.attempt, b.idempotency_key.as_str()), (3, "r1/b"), "same args, same key");
    assert_eq!(b.args, json!({"v": 1}), "its placeholders still resolve from a's output");
    store.fail(&b.lease, &action_error("upstream 503"), 0.0, T0 + 5_010).await.expect("fail");
    assert_eq!(status(&store, "r1", "b").await, "ready", "attempt 3 is the first of a fresh budget of 2: retried");
    let b = claim_one(&store, T0 + 6_010).await;
    assert_eq!(complete(&store, &b.lease, &json!({}), T0 + 6_010).await, Report::Succeeded);
    let c = claim_one(&store, T0 + 6_020).await;
    assert_eq!(c.lease.step_id, "c");
    assert_eq!(complete(&store, &c.lease, &json!({}), T0 + 6_020).await, Report::Succeeded);

    let done = run(&store, "r1").await;
    assert_eq!((done.status, done.open_steps), (RunStatus::Succeeded, 0));
    assert_eq!(step(&store, "r1", "a").await.attempts, 1, "a succeeded once and never ran again");
    let history: Vec<(String, Option<String>)> = events(&store, "r1")
        .await
        .into_iter()
        .filter(|e| ["run_reopened", "operator_retry", "step_reopened"].contains(&e.kind.as_str()))
        .map(|e| (e.kind.to_string(), e.step_id))
        .collect();
    let expected = [("run_reopened", None), ("operator_retry", Some("b")), ("step_reopened", Some("c"))];
    assert_eq!(history, expected.map(|(k, s)| (k.to_owned(), s.map(str::to_owned))));
    let retried = events(&store, "r1").await.into_iter().find(|e| e.kind == "operator_retry").expect("recorded");
    assert_eq!(retried.data, json!({"by": "alice", "reason": "endpoint fixed", "args_revision": 0}));
}

async fn repaired_args_replace_the_steps_args_and_give_it_a_new_idempotency_key(store: Store) {
    a_then_b_fails(&store).await;
    let args = json!({"v": 42});
    let outcome = store.step_retry(&retry("b", Some(&args), T0 + 5_000)).await.expect("retry");
    assert!(matches!(outcome, RetryOutcome::Retried { args_revision: 1, .. }), "{outcome:?}");
    let b = claim_one(&store, T0 + 5_000).await;
    assert_eq!((b.args.clone(), b.idempotency_key.as_str()), (args, "r1/b/1"));
    store.fail(&b.lease, &action_error("still down"), 0.0, T0 + 5_010).await.expect("fail");
    let again = claim_one(&store, T0 + 6_010).await;
    assert_eq!(again.idempotency_key, "r1/b/1", "every attempt of one revision shares its key");
}

async fn a_pending_dependent_waits_for_the_retried_step_again(store: Store) {
    let doc = steps(vec![
        json!({"id": "b", "action": "noop", "args": {}, "retry": {"max_attempts": 1}}),
        noop("x", &[], json!({})),
        noop("j", &["b", "x"], json!({})),
    ]);
    submit(&store, "r1", &doc).await;
    let both = claim(&store, T0).await;
    let (b, x) = if both[0].lease.step_id == "b" { (&both[0], &both[1]) } else { (&both[1], &both[0]) };
    store.fail(&b.lease, &action_error("boom"), 0.0, T0).await.expect("fail");
    let outcome = store.step_retry(&retry("b", None, T0 + 1)).await.expect("retry");
    assert_eq!(outcome, RetryOutcome::Retried { args_revision: 0, reopened: vec!["b".into()] });
    assert_eq!(complete(&store, &x.lease, &json!({}), T0 + 2).await, Report::Succeeded);
    assert_eq!(status(&store, "r1", "j").await, "pending", "j waits for b again, not only for x");
    let b = claim_one(&store, T0 + 3).await;
    assert_eq!(complete(&store, &b.lease, &json!({}), T0 + 3).await, Report::Succeeded);
    let j = claim_one(&store, T0 + 4).await;
    assert_eq!(j.lease.step_id, "j");
    assert_eq!(complete(&store, &j.lease, &json!({}), T0 + 4).await, Report::Succeeded);
    assert_eq!(run(&store, "r1").await.status, RunStatus::Succeeded);
}

async fn a_retry_is_refused_for_steps_that_did_not_fail_and_in_cancelled_runs(store: Store) {
    let doc = steps(vec![
        json!({"id": "b", "action": "noop", "args": {}, "retry": {"max_attempts": 1}}),
        noop("x", &[], json!({})),
    ]);
    submit(&store, "r1", &doc).await;
    let both = claim(&store, T0).await;
    let b = both.iter().find(|c| c.lease.step_id == "b").expect("b claimed");
    assert_eq!(
        store.step_retry(&retry("b", None, T0)).await.expect("retry"),
        RetryOutcome::WrongState(StepStatus::Running)
    );
    assert_eq!(store.step_retry(&retry("zz", None, T0)).await.expect("retry"), RetryOutcome::NoSuchStep);
    store.fail(&b.lease, &action_error("boom"), 0.0, T0).await.expect("fail");
    assert!(store.cancel_run("r1", T0 + 1).await.expect("cancel"));
    assert_eq!(store.step_retry(&retry("b", None, T0 + 2)).await.expect("retry"), RetryOutcome::RunCancelled);
    let cancelled = run(&store, "r1").await;
    assert_eq!((cancelled.status, cancelled.open_steps), (RunStatus::Cancelled, 0), "a finished run has none open");
}

async fn a_retry_of_an_outcome_unknown_step_records_who_why_and_the_repaired_args(store: Store) {
    let doc = steps(vec![json!({"id": "pay", "action": "noop", "args": {"n": 1}, "idempotent": false})]);
    submit(&store, "r1", &doc).await;
    let pay = claim_one(&store, T0).await;
    let timeout = cairn_core::failure::Failure::new("timeout", "no answer", true);
    store.fail(&pay.lease, &timeout, 0.0, T0 + 1).await.expect("fail");
    assert_eq!(status(&store, "r1", "pay").await, "outcome_unknown");
    let args = json!({"n": 2});

    let outcome = store.step_retry(&retry("pay", Some(&args), T0 + 2)).await.expect("retry");

    assert_eq!(outcome, RetryOutcome::Retried { args_revision: 1, reopened: vec!["pay".into()] });
    let retried = events(&store, "r1").await.into_iter().find(|e| e.kind == "operator_retry").expect("recorded");
    let expected = json!({"by": "alice", "reason": "endpoint fixed", "args_revision": 1, "args": {"n": 2}});
    assert_eq!(retried.data, expected);
    assert_eq!(step(&store, "r1", "pay").await.args_revision, 1);
    let again = claim_one(&store, T0 + 2).await;
    assert_eq!((again.args, again.idempotency_key), (args, "r1/pay/1".to_owned()));
}

fn redrive(now_ms: i64) -> RunRedrive<'static> {
    RunRedrive { run_id: "r1", by: "ops", reason: Some("fixed upstream"), now_ms }
}

async fn a_redriven_failed_run_reruns_its_failed_steps_and_what_they_skipped_and_nothing_else(store: Store) {
    let one = json!({"max_attempts": 1});
    let doc = steps(vec![
        noop("a", &[], json!({})),
        json!({"id": "b", "action": "noop", "depends_on": ["a"], "args": {}, "retry": one}),
        noop("c", &["b"], json!({})),
        json!({"id": "d", "action": "noop", "args": {}, "retry": one}),
    ]);
    submit(&store, "r1", &doc).await;
    let first = claim(&store, T0).await;
    for c in &first {
        match c.lease.step_id.as_str() {
            "a" => assert_eq!(complete(&store, &c.lease, &json!({}), T0).await, Report::Succeeded),
            _ => assert_eq!(store.fail(&c.lease, &action_error("boom"), 0.0, T0).await.expect("fail"), Report::Failed),
        }
    }
    let b = claim_one(&store, T0 + 1).await;
    store.fail(&b.lease, &action_error("boom"), 0.0, T0 + 1).await.expect("fail");
    assert_eq!(run(&store, "r1").await.status, RunStatus::Failed);

    let outcome = store.run_redrive(&redrive(T0 + 2)).await.expect("redrive");

    assert_eq!(outcome, RedriveOutcome::Redriven { reopened: vec!["b".into(), "c".into(), "d".into()] });
    let reopened = run(&store, "r1").await;
    assert_eq!((reopened.status, reopened.open_steps), (RunStatus::Running, 3));
    let mut again = claimed_ids(&claim(&store, T0 + 2).await).into_iter().map(str::to_owned).collect::<Vec<_>>();
    again.sort();
    assert_eq!(again, ["b", "d"], "a keeps its output; c waits for b");
    assert!(claim(&store, T0 + 2).await.is_empty(), "nothing else is due");
    assert_eq!(step(&store, "r1", "a").await.attempts, 1);
}

async fn a_redriven_cancelled_run_leaves_a_non_idempotent_step_cancelled_while_it_ran_to_an_operator(store: Store) {
    let doc = steps(vec![
        json!({"id": "charge", "action": "noop", "args": {}, "idempotent": false}),
        json!({"id": "fetch", "action": "noop", "args": {}, "idempotent": true}),
        noop("after", &["charge"], json!({})),
    ]);
    submit(&store, "r1", &doc).await;
    assert_eq!(claim(&store, T0).await.len(), 2);
    assert!(store.cancel_run("r1", T0 + 1).await.expect("cancel"));

    let outcome = store.run_redrive(&redrive(T0 + 2)).await.expect("redrive");

    assert!(matches!(outcome, RedriveOutcome::Redriven { .. }), "{outcome:?}");
    assert_eq!(status(&store, "r1", "charge").await, "outcome_unknown", "it may have charged: never run blindly");
    assert_eq!(status(&store, "r1", "fetch").await, "ready");
    assert_eq!(status(&store, "r1", "after").await, "pending");
    let reopened = run(&store, "r1").await;
    assert_eq!((reopened.status, reopened.open_steps), (RunStatus::Running, 3));
    let fetch = claim_one(&store, T0 + 2).await;
    assert_eq!(complete(&store, &fetch.lease, &json!({}), T0 + 2).await, Report::Succeeded);
    let retried = store.step_retry(&retry("charge", None, T0 + 3)).await.expect("retry");
    assert!(matches!(retried, RetryOutcome::Retried { .. }), "{retried:?}");
    for now in [T0 + 3, T0 + 4] {
        let c = claim_one(&store, now).await;
        assert_eq!(complete(&store, &c.lease, &json!({}), now).await, Report::Succeeded);
    }
    let done = run(&store, "r1").await;
    assert_eq!((done.status, done.open_steps), (RunStatus::Succeeded, 0));
}

async fn a_redrive_is_refused_for_a_run_that_did_not_fail_or_was_cancelled(store: Store) {
    submit(&store, "r1", &steps(vec![noop("a", &[], json!({}))])).await;
    let refused = store.run_redrive(&redrive(T0)).await.expect("redrive");
    assert_eq!(refused, RedriveOutcome::WrongState(RunStatus::Pending));
    let a = claim_one(&store, T0).await;
    assert_eq!(complete(&store, &a.lease, &json!({}), T0).await, Report::Succeeded);
    let refused = store.run_redrive(&redrive(T0 + 1)).await.expect("redrive");
    assert_eq!(refused, RedriveOutcome::WrongState(RunStatus::Succeeded));
    let missing = RunRedrive { run_id: "nope", ..redrive(T0) };
    assert_eq!(store.run_redrive(&missing).await.expect("redrive"), RedriveOutcome::NoSuchRun);
}

fn rerun<'a>(from: &'a str, now_ms: i64) -> RunRerun<'a> {
    RunRerun { run_id: "r1", new_run_id: "r2", from, by: "ops", reason: None, now_ms }
}

async fn a_rerun_from_a_step_runs_it_and_its_descendants_and_reuses_every_other_output(store: Store) {
    let doc = steps(vec![
        noop("a", &[], json!({})),
        noop("b", &["a"], json!({"v": "$a.output.v"})),
        json!({"id": "c", "action": "noop", "depends_on": ["b"], "args": {}, "retry": {"max_attempts": 1}}),
        noop("d", &["a"], json!({})),
    ]);
    let mut labelled = super::support::new_run("r1", &doc);
    labelled.labels.insert("env".into(), "prod".into());
    super::support::create(&store, &labelled).await;
    let a = claim_one(&store, T0).await;
    assert_eq!(complete(&store, &a.lease, &json!({"v": 7}), T0).await, Report::Succeeded);
    for c in claim(&store, T0 + 1).await {
        assert_eq!(complete(&store, &c.lease, &json!({"done": c.lease.step_id}), T0 + 1).await, Report::Succeeded);
    }
    let c = claim_one(&store, T0 + 2).await;
    store.fail(&c.lease, &action_error("boom"), 0.0, T0 + 2).await.expect("fail");
    assert_eq!(run(&store, "r1").await.status, RunStatus::Failed);
    assert_eq!(
        store.run_rerun(&rerun("zz", T0 + 3)).await.expect("rerun"),
        RerunOutcome::NoSuchStep,
        "an unknown step is refused"
    );

    let outcome = store.run_rerun(&rerun("b", T0 + 3)).await.expect("rerun");

    assert_eq!(outcome, RerunOutcome::Started { run_id: "r2".into(), reset: vec!["b".into(), "c".into()] });
    let new = run(&store, "r2").await;
    assert_eq!((new.rerun_of.as_deref(), new.open_steps, new.status), (Some("r1"), 2, RunStatus::Pending));
    assert_eq!((new.goal.as_deref(), new.labels.get("env").map(String::as_str)), (Some("contract test"), Some("prod")));
    let filters = [
        cairn_store::RunFilter { labels: vec![("env".into(), "prod".into())], ..Default::default() },
        cairn_store::RunFilter { q: Some("contract".into()), ..Default::default() },
        cairn_store::RunFilter { action: Some("noop".into()), ..Default::default() },
    ];
    for filter in &filters {
        let page = store.runs_page(filter, &cairn_store::PageStart::Offset(0), 10).await.expect("runs_page");
        let found: Vec<&str> = page.runs.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(found, ["r2", "r1"], "the rerun is found as its run is: {filter:?}");
    }
    assert_eq!(step(&store, "r2", "a").await.output, Some(json!({"v": 7})), "a's output is reused");
    assert_eq!(status(&store, "r2", "d").await, "succeeded", "d is not a descendant of b: kept");
    let b = claim_one(&store, T0 + 3).await;
    assert_eq!((b.lease.run_id.as_str(), b.lease.step_id.as_str()), ("r2", "b"), "only b runs");
    assert_eq!(b.args, json!({"v": 7}), "its placeholder resolves from the reused output");
    assert_eq!(complete(&store, &b.lease, &json!({}), T0 + 3).await, Report::Succeeded);
    let c = claim_one(&store, T0 + 4).await;
    assert_eq!(complete(&store, &c.lease, &json!({}), T0 + 4).await, Report::Succeeded);
    let done = run(&store, "r2").await;
    assert_eq!((done.status, done.open_steps), (RunStatus::Succeeded, 0));
    assert_eq!(run(&store, "r1").await.status, RunStatus::Failed, "the old run is untouched");
    let again = RunRerun { new_run_id: "r3", ..rerun("a", T0 + 5) };
    submit(&store, "r4", &steps(vec![noop("x", &[], json!({}))])).await;
    let open = RunRerun { run_id: "r4", ..again };
    assert_eq!(
        store.run_rerun(&open).await.expect("rerun"),
        RerunOutcome::NotFinished(RunStatus::Pending),
        "a run still open is not rerun"
    );
}

contract_tests!(
    a_retried_failed_step_reopens_its_run_with_a_fresh_budget_and_no_succeeded_step_runs_again,
    repaired_args_replace_the_steps_args_and_give_it_a_new_idempotency_key,
    a_pending_dependent_waits_for_the_retried_step_again,
    a_retry_is_refused_for_steps_that_did_not_fail_and_in_cancelled_runs,
    a_redriven_failed_run_reruns_its_failed_steps_and_what_they_skipped_and_nothing_else,
    a_redriven_cancelled_run_leaves_a_non_idempotent_step_cancelled_while_it_ran_to_an_operator,
    a_redrive_is_refused_for_a_run_that_did_not_fail_or_was_cancelled,
    a_rerun_from_a_step_runs_it_and_its_descendants_and_reuses_every_other_output,
    a_retry_of_an_outcome_unknown_step_records_who_why_and_the_repaired_args,
);
