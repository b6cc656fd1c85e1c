//! Completions under a lease: the cascade, fencing, output limits and byte-exact outputs (contract §3, §5, §6).

use cairn_store::{Lease, Report, ReportLimits, Store};
use serde_json::{Value, json};

use super::support::{
    T0, action_error, claim, claim_one, complete, has_event, noop, run, run_step, status, step, steps, submit,
};

async fn completion_releases_dependents_in_the_same_transaction_and_finishes_the_run(store: Store) {
    let doc = steps(vec![
        noop("a", &[], json!({})),
        noop("b", &["a"], json!({})),
        noop("c", &["a"], json!({})),
        noop("d", &["b", "c"], json!({})),
    ]);
    submit(&store, "r1", &doc).await;

    run_step(&store, T0 + 10, &json!({"a": 1})).await;

    for id in ["b", "c"] {
        assert_eq!(
            status(&store, "r1", id).await,
            "ready",
            "completing a parent makes its dependents ready in the completing call ({id})"
        );
        assert_eq!(step(&store, "r1", id).await.available_at_ms, Some(T0 + 10));
    }
    assert_eq!(status(&store, "r1", "d").await, "pending");
    let ab = claim(&store, T0 + 20).await;
    assert_eq!(ab.len(), 2, "both released dependents are claimable");
    assert_eq!(complete(&store, &ab[0].lease, &json!({}), T0 + 30).await, Report::Succeeded);
    assert_eq!(status(&store, "r1", "d").await, "pending", "a join waits for every dependency");
    assert_eq!(complete(&store, &ab[1].lease, &json!({}), T0 + 30).await, Report::Succeeded);
    assert_eq!(status(&store, "r1", "d").await, "ready", "the last parent releases the join");
    assert_eq!(run(&store, "r1").await.status, "running");
    run_step(&store, T0 + 40, &json!({"done": true})).await;

    let summary = run(&store, "r1").await;
    assert_eq!(summary.status, "succeeded", "the run succeeds when every step succeeded");
    assert_eq!(summary.open_steps, 0);
    assert_eq!(summary.finished_at_ms, Some(T0 + 40));
    assert_eq!(summary.failure, None);
    assert_eq!(step(&store, "r1", "d").await.output, Some(json!({"done": true})));
    assert!(has_event(&store, "r1", None, "run_succeeded").await);
}

async fn replayed_late_or_foreign_completion_is_stale_and_changes_nothing(store: Store) {
    let retry = json!({"max_attempts": 3, "initial_interval_ms": 1000, "backoff_coefficient": 2.0,
                       "max_interval_ms": 60000, "jitter": "none"});
    let doc = steps(vec![json!({"id": "a", "action": "noop", "args": {}, "retry": retry})]);
    submit(&store, "r1", &doc).await;
    let first = claim_one(&store, T0).await.lease;
    let foreign = Lease { worker_id: "intruder".into(), ..first.clone() };

    assert_eq!(
        complete(&store, &foreign, &json!({"x": "foreign"}), T0 + 1).await,
        Report::Stale,
        "a worker that does not hold the lease cannot complete the step"
    );
    assert_eq!(status(&store, "r1", "a").await, "running", "a foreign report changes nothing");
    let failed = store.fail(&first, &action_error("boom"), 0.0, T0 + 2).await.expect("fail");
    assert_eq!(failed, Report::RetryScheduled);
    assert_eq!(
        complete(&store, &first, &json!({"x": "late"}), T0 + 3).await,
        Report::Stale,
        "a report for a failed attempt is stale while the retry waits"
    );
    let second = claim_one(&store, T0 + 1002).await.lease;
    assert_eq!(second.attempt, 2);
    assert_eq!(
        complete(&store, &first, &json!({"x": "older"}), T0 + 1003).await,
        Report::Stale,
        "a report from an older attempt is stale while a newer one runs"
    );
    let late = action_error("late");
    let older_fail = store.fail(&first, &late, 0.0, T0 + 1003).await;
    assert_eq!(older_fail.expect("fail"), Report::Stale, "a failure from an older attempt is stale");
    assert_eq!(complete(&store, &second, &json!({"x": "real"}), T0 + 1004).await, Report::Succeeded);
    assert_eq!(
        complete(&store, &second, &json!({"x": "replay"}), T0 + 1005).await,
        Report::Stale,
        "a replayed completion is a no-op"
    );

    let a = step(&store, "r1", "a").await;
    assert_eq!(a.output, Some(json!({"x": "real"})), "only the live lease's output is stored");
    let succeeded =
        super::support::events(&store, "r1").await.into_iter().filter(|e| e.kind == "step_succeeded").count();
    assert_eq!(succeeded, 1, "stale reports append no events");
    assert_eq!(run(&store, "r1").await.status, "succeeded");
}

fn limited(bytes: usize) -> ReportLimits {
    ReportLimits { max_output_bytes: bytes }
}

/// An object `{"s":"xx…"}` whose JSON text is exactly `bytes` long.
fn output_of(bytes: usize) -> Value {
    let padding = bytes - r#"{"s":""}"#.len();
    json!({"s": "x".repeat(padding)})
}

async fn output_over_the_limit_fails_the_step_and_skips_dependents(store: Store) {
    let doc = steps(vec![noop("a", &[], json!({})), noop("b", &["a"], json!({}))]);
    submit(&store, "r1", &doc).await;
    let lease = claim_one(&store, T0).await.lease;

    let report = store.complete(&lease, &output_of(65), limited(64), T0 + 1).await.expect("complete");

    assert_eq!(report, Report::Failed, "an oversized output fails the step (not retried)");
    let a = step(&store, "r1", "a").await;
    assert_eq!(a.status, "failed");
    assert_eq!(a.output, None, "an oversized output is never stored");
    let error = a.error.expect("failure record");
    assert_eq!(error["code"], "output_too_large");
    assert_eq!(error["details"]["size_bytes"], 65, "details carry the size");
    assert_eq!(error["details"]["limit_bytes"], 64, "details carry the limit");
    assert_eq!(status(&store, "r1", "b").await, "skipped", "dependents are skipped");
    let summary = run(&store, "r1").await;
    assert_eq!(summary.status, "failed");
    let failure = summary.failure.expect("root cause");
    assert_eq!(failure["step_id"], "a");
    assert_eq!(failure["code"], "output_too_large");
}

async fn output_exactly_at_the_limit_succeeds(store: Store) {
    submit(&store, "r1", &steps(vec![noop("a", &[], json!({}))])).await;
    let lease = claim_one(&store, T0).await.lease;
    let output = output_of(64);
    assert_eq!(output.to_string().len(), 64, "test set-up: the output is 64 bytes");

    let report = store.complete(&lease, &output, limited(64), T0 + 1).await.expect("complete");

    assert_eq!(report, Report::Succeeded, "an output exactly at the limit is accepted");
    assert_eq!(step(&store, "r1", "a").await.output, Some(output));
    assert_eq!(run(&store, "r1").await.status, "succeeded");
}

async fn unicode_output_round_trips_byte_identically_into_a_dependent(store: Store) {
    let text = "明天有雨 🌧️，记得带伞";
    let family = "👩\u{200D}👩\u{200D}👧\u{200D}👦";
    let nfd = "Ame\u{0301}lie e\u{0301}te\u{0301}";
    assert!(text.contains('\u{FE0F}'), "test set-up: the rain emoji carries VS16");
    let doc = steps(vec![
        noop("a", &[], json!({})),
        noop(
            "b",
            &["a"],
            json!({"whole": "$a", "text": "$a.text", "family": "$a.output.family",
                                 "nfd": "$a.nfd", "msg": "提醒：${a.text}"}),
        ),
    ]);
    submit(&store, "r1", &doc).await;
    let output = json!({"text": text, "family": family, "nfd": nfd});

    run_step(&store, T0, &output).await;
    let b = claim_one(&store, T0 + 1).await;

    let stored = step(&store, "r1", "a").await.output.expect("output stored");
    assert_eq!(stored, output, "the stored output equals the reported one");
    let bytes = |v: &Value| v.as_str().map(|s| s.as_bytes().to_vec());
    assert_eq!(bytes(&b.args["text"]), Some(text.as_bytes().to_vec()), "CJK + emoji + VS16 byte-identical");
    assert_eq!(bytes(&b.args["family"]), Some(family.as_bytes().to_vec()), "ZWJ sequence byte-identical");
    assert_eq!(
        bytes(&b.args["nfd"]),
        Some(nfd.as_bytes().to_vec()),
        "NFD text is not normalised to NFC on the way through"
    );
    assert_eq!(b.args["whole"], output, "the whole output resolves unchanged");
    assert_eq!(b.args["msg"], json!(format!("提醒：{text}")), "interpolation keeps the bytes");
}

contract_tests!(
    completion_releases_dependents_in_the_same_transaction_and_finishes_the_run,
    replayed_late_or_foreign_completion_is_stale_and_changes_nothing,
    output_over_the_limit_fails_the_step_and_skips_dependents,
    output_exactly_at_the_limit_succeeds,
    unicode_output_round_trips_byte_identically_into_a_dependent,
);
