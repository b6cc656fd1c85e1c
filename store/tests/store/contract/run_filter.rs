//! Finding runs (contract §5, "Finding runs"): labels and goals stored with the run, every filter of
//! [`RunFilter`] alone and together, keyset pages without gaps or repeats (creation-time ties included), counts,
//! and the runs that need attention with each step's reason.

use cairn_core::state::RunStatus;
use cairn_store::{AttentionReason, Batch, NewRun, PageStart, Report, RunFilter, RunPage, Store, WORKER_WAIT_MS};
use serde_json::{Value, json};

use super::support::{LIMITS, T0, TTL, action_error, claim_for, create, new_run, noop, run, steps};

fn labelled(run_id: &str, goal: &str, labels: &[(&str, &str)], at: i64, doc_steps: Vec<Value>) -> NewRun {
    let mut new = new_run(run_id, &json!({"goal": goal, "steps": doc_steps}));
    new.labels = labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    new.now_ms = at;
    new
}

async fn ids(store: &Store, filter: &RunFilter) -> Vec<String> {
    let page = store.runs_page(filter, &PageStart::Offset(0), 100).await.expect("runs_page");
    page.runs.into_iter().map(|r| r.id).collect()
}

/// Five runs: three created one by one, two in one batch (PostgreSQL stores those with its array statement).
async fn five_runs(store: &Store) {
    let one = vec![noop("a", &[], json!({}))];
    let notify = vec![json!({"id": "n", "action": "notify.send", "args": {"text": "x"}})];
    create(
        store,
        &labelled("r1", "Remind me: Umbrella in Wuhan", &[("env", "prod"), ("team", "ops")], T0, one.clone()),
    )
    .await;
    create(store, &labelled("r2", "Ümlaut GOAL 50%_off", &[("env", "prod")], T0 + 1, notify.clone())).await;
    create(store, &labelled("r3", "no labels", &[], T0 + 2, one.clone())).await;
    let batch = [
        labelled("r4", "batched umbrella", &[("env", "dev"), ("team", "ops")], T0 + 3, notify),
        labelled("r5", "batched too", &[("env", "prod"), ("team", "ops")], T0 + 3, one),
    ];
    let nobody = |_: usize| Vec::new();
    store
        .write_batch(&Batch {
            runs: &batch,
            reports: &[],
            claims: &[],
            limits: LIMITS,
            lease_ttl_ms: TTL,
            now_ms: T0 + 3,
            handoff: &nobody,
        })
        .await
        .expect("the batch commits");
}

async fn a_run_keeps_its_goal_and_labels(store: Store) {
    five_runs(&store).await;
    let r1 = run(&store, "r1").await;
    assert_eq!(r1.goal.as_deref(), Some("Remind me: Umbrella in Wuhan"));
    assert_eq!(r1.labels.get("team").map(String::as_str), Some("ops"));
    let r4 = run(&store, "r4").await;
    assert_eq!(r4.labels.len(), 2, "a batched run keeps its labels: {:?}", r4.labels);
    assert!(run(&store, "r3").await.labels.is_empty());
}

async fn each_filter_selects_its_runs_and_they_combine(store: Store) {
    five_runs(&store).await;
    let label = |pairs: &[(&str, &str)]| RunFilter {
        labels: pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        ..RunFilter::default()
    };
    assert_eq!(ids(&store, &label(&[("env", "prod")])).await, ["r5", "r2", "r1"], "newest first, ties by id");
    assert_eq!(ids(&store, &label(&[("env", "prod"), ("team", "ops")])).await, ["r5", "r1"], "all labels match");
    assert!(ids(&store, &label(&[("env", "staging")])).await.is_empty());
    let action = RunFilter { action: Some("notify.send".into()), ..RunFilter::default() };
    assert_eq!(ids(&store, &action).await, ["r4", "r2"]);
    let both = RunFilter { action: Some("notify.send".into()), ..label(&[("team", "ops")]) };
    assert_eq!(ids(&store, &both).await, ["r4"], "label and action together");

    let q = |text: &str| RunFilter { q: Some(text.into()), ..RunFilter::default() };
    assert_eq!(ids(&store, &q("UMBRELLA")).await, ["r4", "r1"], "case-insensitive substring of the goal");
    assert_eq!(ids(&store, &q("ümlaut")).await, ["r2"], "case folding is Unicode's on both backends");
    assert_eq!(ids(&store, &q("50%_")).await, ["r2"], "LIKE wildcards in q match themselves");
    assert!(ids(&store, &q("5_%")).await.is_empty());

    let window = RunFilter { created_after: Some(T0 + 1), created_before: Some(T0 + 3), ..RunFilter::default() };
    assert_eq!(ids(&store, &window).await, ["r3", "r2"], "created_after is inclusive, created_before exclusive");
    store.cancel_run("r3", T0 + 4).await.expect("cancel");
    let statuses = RunFilter { statuses: vec![RunStatus::Cancelled, RunStatus::Pending], ..RunFilter::default() };
    assert_eq!(ids(&store, &statuses).await.len(), 5, "any of several statuses");
    let cancelled = RunFilter { statuses: vec![RunStatus::Cancelled], ..RunFilter::default() };
    assert_eq!(ids(&store, &cancelled).await, ["r3"]);
    assert_eq!(store.runs_count(&label(&[("env", "prod")])).await.expect("count"), 3);
    assert_eq!(store.runs_count(&RunFilter::default()).await.expect("count"), 5);
}

async fn a_run_is_found_by_its_idempotency_key(store: Store) {
    let mut keyed = new_run("k1", &steps(vec![noop("a", &[], json!({}))]));
    keyed.idempotency_key = Some("order-7".into());
    create(&store, &keyed).await;
    create(&store, &new_run("k2", &steps(vec![noop("a", &[], json!({}))]))).await;
    let filter = RunFilter { idempotency_key: Some("order-7".into()), ..RunFilter::default() };
    assert_eq!(ids(&store, &filter).await, ["k1"]);
}

/// Every page of `filter`, two runs at a time, following the cursor.
async fn every_page(store: &Store, filter: &RunFilter) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    let mut start = PageStart::Offset(0);
    loop {
        let RunPage { runs, next_cursor } = store.runs_page(filter, &start, 2).await.expect("runs_page");
        pages.push(runs.into_iter().map(|r| r.id).collect());
        match next_cursor {
            Some(cursor) => start = PageStart::After(cursor),
            None => return pages,
        }
    }
}

async fn cursor_pages_cover_every_run_once_even_with_equal_creation_times(store: Store) {
    five_runs(&store).await;
    assert_eq!(every_page(&store, &RunFilter::default()).await, [vec!["r5", "r4"], vec!["r3", "r2"], vec!["r1"]]);
    let ops = RunFilter { labels: vec![("team".into(), "ops".into())], ..RunFilter::default() };
    assert_eq!(every_page(&store, &ops).await, [vec!["r5", "r4"], vec!["r1"]], "a label's pages");
    let four = RunFilter { created_before: Some(T0 + 3), ..RunFilter::default() };
    assert_eq!(every_page(&store, &four).await, [vec!["r3", "r2"], vec!["r1"]], "no empty page after a full one");
}

async fn runs_needing_attention_are_listed_with_each_steps_reason(store: Store) {
    super::lease::parked_as_outcome_unknown(&store).await; // r1 at T0
    let approval = json!({"id": "gate", "action": "noop", "args": {}, "approval": {"required": true}});
    create(&store, &labelled("r2", "approve me", &[], T0, vec![approval])).await;
    let retry =
        json!({"max_attempts": 3, "initial_interval_ms": 3_600_000, "max_interval_ms": 3_600_000, "jitter": "none"});
    let flaky = json!({"id": "f", "action": "noop", "args": {}, "retry": retry});
    create(&store, &labelled("r3", "flaky", &[], T0, vec![flaky])).await;
    let claimed = claim_for(&store, "w1", &["noop"], 10, T0 + 1).await;
    assert_eq!(claimed.len(), 1, "only r3's step is due: {claimed:?}");
    let report = store.fail(&claimed[0].lease, &action_error("503"), 0.0, T0 + 2).await.expect("fail");
    assert_eq!(report, Report::RetryScheduled);
    let later = T0 + 100_000;
    create(&store, &labelled("r4", "nobody serves me", &[], later, vec![noop("a", &[], json!({}))])).await;
    create(&store, &labelled("r5", "busy", &[], later, vec![noop("a", &[], json!({}))])).await;
    claim_for(&store, "w1", &["noop"], 1, later).await;

    let at = |now: i64| RunFilter { attention_at: Some(now), ..RunFilter::default() };
    let mut soon = ids(&store, &at(later + WORKER_WAIT_MS - 1)).await;
    soon.sort();
    assert_eq!(soon, ["r1", "r2", "r3"], "r4 is not due long enough yet, and a running step needs nothing");
    let mut late = ids(&store, &at(later + WORKER_WAIT_MS)).await;
    late.sort();
    let waiting = if late.contains(&"r4".to_owned()) { "r4" } else { "r5" };
    assert_eq!(late, ["r1", "r2", "r3", waiting], "the unclaimed step waited long enough for a worker");

    let reasons = store.attention_steps(&["r1", "r2", "r3", waiting], later + WORKER_WAIT_MS).await.expect("steps");
    let found: Vec<(&str, &str, AttentionReason)> =
        reasons.iter().map(|s| (s.run_id.as_str(), s.step_id.as_str(), s.reason)).collect();
    assert_eq!(
        found,
        [
            ("r1", "notify", AttentionReason::OutcomeUnknown),
            ("r2", "gate", AttentionReason::WaitingApproval),
            ("r3", "f", AttentionReason::Retrying),
            (waiting, "a", AttentionReason::WaitingForWorker),
        ]
    );
    store.cancel_run("r1", later).await.expect("cancel");
    assert!(!ids(&store, &at(later)).await.contains(&"r1".to_owned()), "a finished run needs no attention");
}

contract_tests!(
    a_run_keeps_its_goal_and_labels,
    each_filter_selects_its_runs_and_they_combine,
    a_run_is_found_by_its_idempotency_key,
    cursor_pages_cover_every_run_once_even_with_equal_creation_times,
    runs_needing_attention_are_listed_with_each_steps_reason,
);
