//! Deciding steps: `not_before` timers, `when` and skip propagation, and a large fan-out (contract §5, §7).

use cairn_store::{Report, Store};
use serde_json::json;

use super::support::{
    T0, claim, claim_for, claim_one, complete, events, new_run, noop, run, run_step, status, step, steps, submit,
};

const HOUR: i64 = 3_600_000;

async fn not_before_timer_holds_a_step_until_its_instant(store: Store) {
    let doc = json!({"goal": "remind", "context": {"timezone": "Asia/Shanghai"}, "steps": [
        noop("remind", &[], json!({"text": "take an umbrella"})),
        noop("later", &["remind"], json!({})),
    ]});
    let mut new = new_run("r1", &doc);
    new.timers[0] = Some((T0 + HOUR, "tomorrow 08:00 Asia/Shanghai".into()));
    new.timers[1] = Some((T0 + 2 * HOUR, "tomorrow 09:00 Asia/Shanghai".into()));
    super::support::create(&store, &new).await;

    let remind = step(&store, "r1", "remind").await;
    assert_eq!(remind.status, "ready", "a root with a timer is ready, waiting on its time");
    assert_eq!(remind.available_at_ms, Some(T0 + HOUR));
    assert_eq!(remind.not_before_at_ms, Some(T0 + HOUR), "steps() shows the timer instant");
    assert_eq!(
        remind.not_before_local.as_deref(),
        Some("tomorrow 08:00 Asia/Shanghai"),
        "steps() shows the timer as written, with its zone"
    );
    assert_eq!(store.next_due().await.expect("next_due"), Some(T0 + HOUR));
    assert!(claim(&store, T0 + HOUR - 1).await.is_empty(), "a step is not claimable before its not_before instant");
    let lease = claim_one(&store, T0 + HOUR).await.lease;
    assert_eq!(lease.step_id, "remind", "the step is claimable exactly at its instant");
    assert_eq!(complete(&store, &lease, &json!({}), T0 + HOUR + 5).await, Report::Succeeded);
    let later = step(&store, "r1", "later").await;
    assert_eq!(later.status, "ready");
    assert_eq!(later.available_at_ms, Some(T0 + 2 * HOUR), "a dependent released before its timer waits for the timer");
    assert!(claim(&store, T0 + 2 * HOUR - 1).await.is_empty());
    run_step(&store, T0 + 2 * HOUR, &json!({})).await;
    assert_eq!(run(&store, "r1").await.status, "succeeded");
}

async fn false_when_skips_the_step_and_the_skip_propagates(store: Store) {
    let doc = json!({"goal": "conditional", "input": {"enabled": false}, "steps": [
        json!({"id": "gated", "action": "noop", "args": {}, "when": "$input.enabled"}),
        noop("after_gated", &["gated"], json!({})),
        noop("check", &[], json!({})),
        json!({"id": "act", "action": "noop", "args": {}, "depends_on": ["check"],
               "when": "steps.check.output.rainy"}),
        noop("after_act", &["act"], json!({})),
        json!({"id": "done", "action": "noop", "args": {}, "depends_on": ["act"],
               "trigger_rule": "all_done"}),
    ]});
    submit(&store, "r1", &doc).await;

    assert_eq!(status(&store, "r1", "gated").await, "skipped", "a root whose `when` is false is skipped at creation");
    assert_eq!(status(&store, "r1", "after_gated").await, "skipped", "its skip propagates at creation");
    run_step(&store, T0 + 1, &json!({"rainy": false})).await;

    assert_eq!(status(&store, "r1", "act").await, "skipped", "`when` false skips the step");
    assert_eq!(
        status(&store, "r1", "after_act").await,
        "skipped",
        "under all_success a skipped dependency skips the dependent"
    );
    assert_eq!(status(&store, "r1", "done").await, "ready", "all_done runs after a skip");
    run_step(&store, T0 + 2, &json!({})).await;
    let summary = run(&store, "r1").await;
    assert_eq!(summary.status, "succeeded", "skips do not fail the run");
    assert_eq!(summary.open_steps, 0);
    let reason = events(&store, "r1")
        .await
        .into_iter()
        .find(|e| e.kind == "step_skipped" && e.step_id.as_deref() == Some("act"))
        .map(|e| e.data["reason"].clone());
    assert_eq!(reason, Some(json!("`when` was false")), "the skip records why");
}

async fn dependents_of_a_success_are_decided_by_their_own_rules(store: Store) {
    let doc = json!({"goal": "release", "input": {"go": true}, "steps": [
        noop("a", &[], json!({})),
        noop("b", &[], json!({})),
        noop("plain", &["a"], json!({})),
        noop("timed", &["a"], json!({})),
        json!({"id": "gated", "action": "noop", "args": {}, "depends_on": ["a"], "when": "$input.go"}),
        json!({"id": "approved", "action": "noop", "args": {}, "depends_on": ["a"], "approval": {"required": true}}),
        json!({"id": "optional", "action": "noop", "args": {}, "depends_on": ["a"], "approval": {"required": false}}),
        noop("join", &["a", "b"], json!({})),
    ]});
    let mut new = new_run("r1", &doc);
    new.timers[3] = Some((T0 + 5, "in 5 ms".into()));
    super::support::create(&store, &new).await;
    let roots = claim(&store, T0 + 1).await;
    let lease = |id: &str| roots.iter().find(|c| c.lease.step_id == id).map(|c| c.lease.clone()).expect("root claimed");
    assert_eq!(complete(&store, &lease("a"), &json!({}), T0 + 10).await, Report::Succeeded);

    for (id, expected, available_at) in [
        ("plain", "ready", Some(T0 + 10)),
        ("timed", "ready", Some(T0 + 10)),
        ("gated", "ready", Some(T0 + 10)),
        ("approved", "waiting_approval", None),
        ("optional", "ready", Some(T0 + 10)),
        ("join", "pending", None),
    ] {
        let s = step(&store, "r1", id).await;
        assert_eq!(s.status, expected, "{id} after its dependency `a` succeeded");
        if available_at.is_some() {
            assert_eq!(s.available_at_ms, available_at, "{id} is due from the release (a past not_before included)");
        }
    }
    let ready: Vec<(String, serde_json::Value)> = events(&store, "r1")
        .await
        .into_iter()
        .filter(|e| e.kind == "step_ready" && e.at_ms == T0 + 10)
        .map(|e| (e.step_id.unwrap_or_default(), e.data["available_at"].clone()))
        .collect();
    let expected: Vec<(String, serde_json::Value)> =
        ["gated", "optional", "plain", "timed"].iter().map(|id| ((*id).to_owned(), json!(T0 + 10))).collect();
    assert_eq!(ready, expected, "one step_ready event per released step, in step-id order, with its due instant");
    assert_eq!(complete(&store, &lease("b"), &json!({}), T0 + 12).await, Report::Succeeded);
    assert_eq!(status(&store, "r1", "join").await, "ready", "a join is released by its last dependency");
}

const CHILDREN: usize = 5_000;

async fn five_thousand_step_fan_out_runs_to_completion(store: Store) {
    let mut plan_steps = vec![noop("root", &[], json!({}))];
    let ids: Vec<String> = (0..CHILDREN).map(|i| format!("c{i:04}")).collect();
    plan_steps.extend(ids.iter().map(|id| noop(id, &["root"], json!({"id": id}))));
    let deps: Vec<&str> = ids.iter().map(String::as_str).collect();
    plan_steps.push(noop("join", &deps, json!({})));
    submit(&store, "r1", &steps(plan_steps)).await;

    let mut now = T0;
    let mut completed = 0;
    loop {
        now += 1;
        let batch = claim_for(&store, "w1", &["noop"], 500, now).await;
        if batch.is_empty() {
            break;
        }
        assert!(batch.len() <= 500, "claim respects the batch limit");
        for c in batch {
            let report = complete(&store, &c.lease, &c.args, now).await;
            assert_eq!(report, Report::Succeeded, "{} completes", c.lease.step_id);
            completed += 1;
        }
    }

    assert_eq!(completed, CHILDREN + 2, "root, every child and the join ran exactly once");
    let summary = run(&store, "r1").await;
    assert_eq!(summary.status, "succeeded", "the fan-out run finishes");
    assert_eq!(summary.step_count, (CHILDREN + 2) as i64);
    assert_eq!(summary.open_steps, 0);
    let all = store.steps("r1").await.expect("steps");
    assert!(all.iter().all(|s| s.status == "succeeded" && s.attempts == 1));
    assert_eq!(step(&store, "r1", "c4999").await.output, Some(json!({"id": "c4999"})));
}

contract_tests!(
    not_before_timer_holds_a_step_until_its_instant,
    dependents_of_a_success_are_decided_by_their_own_rules,
    false_when_skips_the_step_and_the_skip_propagates,
    five_thousand_step_fan_out_runs_to_completion,
);
