//! Claiming ready steps and resolving their placeholders (contract §3, §5, §6).

use cairn_store::Store;
use serde_json::json;

use super::support::{T0, claim, claim_for, claim_one, new_run, noop, run_step, status, steps, submit};

async fn claim_returns_only_due_ready_steps_of_the_requested_actions(store: Store) {
    let doc = steps(vec![
        noop("a", &[], json!({})),
        json!({"id": "nap", "action": "sleep", "args": {"duration_ms": 5}}),
        noop("later", &[], json!({})),
        noop("child", &["a"], json!({})),
    ]);
    let mut run = new_run("r1", &doc);
    run.timers[2] = Some((T0 + 60_000, "+1m".into()));
    super::support::create(&store, &run).await;

    let noops = claim_for(&store, "w1", &["noop"], 100, T0).await;

    let ids: Vec<&str> = noops.iter().map(|c| c.lease.step_id.as_str()).collect();
    assert_eq!(
        ids,
        vec!["a"],
        "only due ready steps of the requested actions are claimed (not sleep, not a future timer, not pending)"
    );
    assert_eq!(status(&store, "r1", "nap").await, "ready", "a step of another action stays ready");
    let sleeps = claim_for(&store, "w2", &["sleep"], 100, T0).await;
    assert_eq!(sleeps.len(), 1, "a worker serving `sleep` gets the sleep step");
    assert_eq!(sleeps[0].lease.worker_id, "w2", "the lease names the claimer");
    assert_eq!(sleeps[0].args, json!({"duration_ms": 5}));
    assert!(claim(&store, T0).await.is_empty(), "running, pending and not-yet-due steps are never claimed");
}

async fn claim_respects_the_limit_and_starts_attempt_one(store: Store) {
    let doc = steps((0..5).map(|i| noop(&format!("s{i}"), &[], json!({"i": i}))).collect());
    submit(&store, "r1", &doc).await;

    let first = claim_for(&store, "w1", &["noop"], 2, T0).await;
    let rest = claim_for(&store, "w1", &["noop"], 10, T0).await;

    assert_eq!(first.len(), 2, "claim returns at most `limit` steps");
    assert_eq!(rest.len(), 3, "the remaining ready steps are claimable");
    for c in first.iter().chain(&rest) {
        assert_eq!(c.lease.attempt, 1, "the first claim of a step is attempt 1");
        assert_eq!(c.idempotency_key, format!("r1/{}", c.lease.step_id), "the idempotency key is <run_id>/<step_id>");
        assert_eq!(c.timeout_ms, 20_000, "the default timeout applies");
        assert_eq!(c.deadline_ms, T0 + 20_000, "the deadline is start + timeout_ms");
        assert_eq!(c.checkpoint, None, "a first attempt has no checkpoint");
        assert_eq!(status(&store, "r1", &c.lease.step_id).await, "running");
    }
    assert_eq!(super::support::run(&store, "r1").await.status, "running", "a run is running once a step is claimed");
    let attempts = store.attempts("r1").await.expect("attempts");
    assert_eq!(attempts.len(), 5, "each claim records one attempt");
    assert!(attempts.iter().all(|a| a.status == "running" && a.attempt == 1));
    assert!(
        attempts
            .iter()
            .all(|a| a.worker_id.as_deref() == Some("w1") && a.started_at_ms == T0 && a.ended_at_ms.is_none()),
        "an open attempt names its worker and start: {attempts:?}"
    );
    let s0 = first.iter().chain(&rest).find(|c| c.lease.step_id == "s0").expect("s0 was claimed");
    assert_eq!(super::support::complete(&store, &s0.lease, &json!({}), T0 + 7).await, cairn_store::Report::Succeeded);
    let closed = store.attempts("r1").await.expect("attempts");
    let s0_attempt = closed.iter().find(|a| a.step_id == "s0").expect("s0's attempt");
    assert_eq!(
        (s0_attempt.status.as_str(), s0_attempt.ended_at_ms),
        ("succeeded", Some(T0 + 7)),
        "a success closes it"
    );
    assert_eq!(closed.iter().filter(|a| a.status == "running").count(), 4, "the other attempts stay open");
}

async fn claim_resolves_placeholders_from_persisted_outputs(store: Store) {
    let doc = json!({
        "goal": "placeholders",
        "input": {"city": "Wuhan"},
        "steps": [
            noop("a", &[], json!({})),
            noop("b", &["a"], json!({
                "n": "$a.output.n",
                "obj": "$a.obj",
                "whole": "$a",
                "first": "$a.output.list[0]",
                "msg": "n=${a.output.n} s=${a.s} obj=${a.obj}",
                "city": "$input.city",
                "literal": "costs $$5",
            })),
        ]
    });
    submit(&store, "r1", &doc).await;
    let output = json!({"n": 42, "s": "hi", "obj": {"k": [1, 2]}, "list": [true, null]});
    run_step(&store, T0, &output).await;

    let b = claim_one(&store, T0 + 1).await;

    assert_eq!(
        b.args,
        json!({
            "n": 42,
            "obj": {"k": [1, 2]},
            "whole": output,
            "first": true,
            "msg": "n=42 s=hi obj={\"k\":[1,2]}",
            "city": "Wuhan",
            "literal": "costs $5",
        }),
        "a whole-value placeholder keeps the JSON type; ${{…}} interpolates text; $$ is a literal $"
    );
}

async fn unresolvable_placeholder_fails_the_consumer_instead_of_handing_it_out(store: Store) {
    let doc = steps(vec![
        noop("a", &[], json!({})),
        noop("b", &["a"], json!({"v": "$a.output.missing"})),
        noop("c", &["b"], json!({})),
    ]);
    submit(&store, "r1", &doc).await;
    run_step(&store, T0, &json!({"present": 1})).await;

    let claimed = claim(&store, T0 + 1).await;

    assert!(claimed.is_empty(), "a step whose placeholder cannot be resolved is not handed out: {claimed:?}");
    let b = super::support::step(&store, "r1", "b").await;
    assert_eq!(b.status, "failed", "the consumer fails (never a silent null)");
    let error = b.error.expect("a failed step has a failure record");
    assert_eq!(error["code"], "placeholder_unresolved");
    let attempts = store.attempts("r1").await.expect("attempts");
    let record = attempts
        .iter()
        .find(|a| a.step_id == "b")
        .and_then(|a| a.failure.clone())
        .expect("the attempt carries a failure record");
    assert_eq!(record["code"], "placeholder_unresolved");
    assert_eq!(record["retryable"], false, "an unresolvable placeholder is not retried");
    assert_eq!(status(&store, "r1", "c").await, "skipped", "skip propagates");
    let summary = super::support::run(&store, "r1").await;
    assert_eq!(summary.status, "failed");
    assert_eq!(summary.failure.expect("a failed run names its root cause")["step_id"], "b");
}

contract_tests!(
    claim_returns_only_due_ready_steps_of_the_requested_actions,
    claim_respects_the_limit_and_starts_attempt_one,
    claim_resolves_placeholders_from_persisted_outputs,
    unresolvable_placeholder_fails_the_consumer_instead_of_handing_it_out,
);
