//! Creating runs (contract §5 states, §6 idempotency keys).

use cairn_store::{CreateOutcome, Store};
use serde_json::json;

use super::support::{T0, new_run, noop, run, status, steps, submit};

async fn create_run_makes_roots_ready_and_others_pending_and_records_events(store: Store) {
    let doc = steps(vec![noop("a", &[], json!({})), noop("b", &[], json!({})), noop("c", &["a", "b"], json!({}))]);

    submit(&store, "r1", &doc).await;

    assert_eq!(status(&store, "r1", "a").await, "ready", "a root is ready");
    assert_eq!(status(&store, "r1", "b").await, "ready", "a root is ready");
    assert_eq!(status(&store, "r1", "c").await, "pending", "a step with unfinished dependencies is pending");
    let a = super::support::step(&store, "r1", "a").await;
    assert_eq!(a.available_at_ms, Some(T0), "a root without a timer is due at creation");
    let summary = run(&store, "r1").await;
    assert_eq!(summary.status, "pending", "a new run is pending");
    assert_eq!(summary.step_count, 3, "the run counts its steps");
    assert_eq!(summary.open_steps, 3, "no step is final yet");
    let kinds: Vec<(Option<String>, String)> = store
        .events("r1", 0, 100)
        .await
        .expect("events")
        .into_iter()
        .map(|e| (e.step_id, e.kind.to_string()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (None, "run_created".to_owned()),
            (Some("a".to_owned()), "step_ready".to_owned()),
            (Some("b".to_owned()), "step_ready".to_owned()),
        ],
        "creation records run_created and one step_ready per root, in order"
    );
}

async fn create_run_detailed_returns_the_run_as_a_read_after_the_commit_finds_it(store: Store) {
    let doc =
        steps(vec![noop("a", &[], json!({})), noop("b", &[], json!({"t": "☂"})), noop("c", &["a", "b"], json!({}))]);
    let mut timed = new_run("r1", &doc);
    // A timer in the future and one already past: both roots ready, due at the later of the timer and now.
    timed.timers[0] = Some((T0 + 60_000, "in 1 minute".into()));
    timed.timers[1] = Some((T0 - 60_000, "a minute ago".into()));
    timed.idempotency_key = Some("key-1".into());

    let (outcome, detail) = store.create_run_detailed(&timed).await.expect("create_run_detailed");

    assert_eq!(outcome, CreateOutcome::Created("r1".into()));
    let detail = detail.expect("roots that need no decision give the created run without a read");
    let read = store.run_detail("r1").await.expect("run_detail").expect("the run exists");
    assert_eq!(detail, read, "the returned run is field for field what the database holds");
    assert_eq!(read.steps[0].available_at_ms, Some(T0 + 60_000), "a future timer sets the due time");
    assert_eq!(read.steps[1].available_at_ms, Some(T0), "a past timer is due now");

    let decided = new_run("r2", &steps(vec![json!({"id": "a", "action": "noop", "args": {}, "when": "1 == 2"})]));
    let (outcome, detail) = store.create_run_detailed(&decided).await.expect("create_run_detailed");
    assert_eq!(outcome, CreateOutcome::Created("r2".into()));
    assert_eq!(detail, None, "a root decided in the transaction (here skipped) is read back, not assumed");
    let mut again = new_run("r3", &doc);
    again.idempotency_key = Some("key-1".into());
    let (outcome, replay) = store.create_run_detailed(&again).await.expect("create_run_detailed");
    assert_eq!(outcome, CreateOutcome::Existing("r1".into()));
    assert_eq!(replay, None, "an existing run is not described by the submission that found it");
}

async fn same_idempotency_key_and_plan_returns_the_existing_run(store: Store) {
    let doc = steps(vec![noop("a", &[], json!({"x": 1}))]);
    let mut first = new_run("r1", &doc);
    first.idempotency_key = Some("key-1".into());
    let mut again = new_run("r2", &doc);
    again.idempotency_key = Some("key-1".into());

    let created = store.create_run(&first).await.expect("create_run");
    let replayed = store.create_run(&again).await.expect("create_run");

    assert_eq!(created, CreateOutcome::Created("r1".into()));
    assert_eq!(
        replayed,
        CreateOutcome::Existing("r1".into()),
        "the same key with the same plan and input returns the existing run"
    );
    assert!(store.run("r2").await.expect("run").is_none(), "a replayed submission stores no second run");
    assert_eq!(store.runs(None, 100, 0).await.expect("runs").len(), 1, "exactly one run exists");
}

async fn same_idempotency_key_with_a_different_plan_or_input_conflicts(store: Store) {
    let mut first = new_run("r1", &steps(vec![noop("a", &[], json!({"x": 1}))]));
    first.idempotency_key = Some("key-1".into());
    let mut other_plan = new_run("r2", &steps(vec![noop("a", &[], json!({"x": 2}))]));
    other_plan.idempotency_key = Some("key-1".into());
    let mut other_input = first.clone();
    other_input.run_id = "r3".into();
    other_input.input = json!({"different": true});

    store.create_run(&first).await.expect("create_run");
    let conflict = store.create_run(&other_plan).await.expect("create_run");
    let input_conflict = store.create_run(&other_input).await.expect("create_run");

    assert_eq!(
        conflict,
        CreateOutcome::Conflict("r1".into()),
        "the same key with a different plan is a conflict naming the existing run"
    );
    assert_eq!(
        input_conflict,
        CreateOutcome::Conflict("r1".into()),
        "the same key with a different input is a conflict"
    );
    for id in ["r2", "r3"] {
        assert!(store.run(id).await.expect("run").is_none(), "a conflicting submission stores nothing ({id})");
    }
    assert_eq!(store.runs(None, 100, 0).await.expect("runs").len(), 1);
}

async fn concurrent_submissions_with_one_idempotency_key_store_one_run(store: Store) {
    let doc = steps(vec![noop("a", &[], json!({}))]);
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        let mut run = new_run(&format!("r{i}"), &doc);
        run.idempotency_key = Some("key-1".into());
        tasks.push(tokio::spawn(async move { store.create_run(&run).await }));
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(
            task.await
                .expect("a submitting task does not panic")
                .expect("a racing submission is answered, not an error"),
        );
    }

    let created: Vec<&String> = outcomes
        .iter()
        .filter_map(|o| match o {
            CreateOutcome::Created(id) => Some(id),
            _ => None,
        })
        .collect();
    assert_eq!(created.len(), 1, "exactly one racing submission creates the run: {outcomes:?}");
    let winner = created[0].clone();
    assert!(
        outcomes
            .iter()
            .all(|o| *o == CreateOutcome::Created(winner.clone()) || *o == CreateOutcome::Existing(winner.clone())),
        "every other racing submission returns the winner: {outcomes:?}"
    );
    assert_eq!(store.runs(None, 100, 0).await.expect("runs").len(), 1, "one run is stored");
    assert_eq!(store.steps(&winner).await.expect("steps").len(), 1, "the winner's steps are stored once");
}

contract_tests!(
    create_run_makes_roots_ready_and_others_pending_and_records_events,
    create_run_detailed_returns_the_run_as_a_read_after_the_commit_finds_it,
    concurrent_submissions_with_one_idempotency_key_store_one_run,
    same_idempotency_key_and_plan_returns_the_existing_run,
    same_idempotency_key_with_a_different_plan_or_input_conflicts,
);
