//! The batch writer's leaf call: on PostgreSQL a batch of one worker's completions of steps nothing depends on,
//! with the claims riding on them, goes through `cairn_complete_leaves_and_claim`, one call instead of five round
//! trips, when nothing needs deciding in Rust. These behaviours check that it is taken, that the rows and events
//! it leaves are those of the general path (`Store::write_batch`), and that it falls back, writing nothing, where
//! Rust must decide.

use cairn_core::failure::Failure;
use cairn_store::{BatchWriter, ClaimRequest, Lease, NewRun, Report, ReportItem, ReportKind, StepRetry, Store};
use serde_json::json;

use super::support::{T0, create, events, new_run, noop, run, status, steps, submit};
use super::writer::{complete, history, request, rows, write};

/// `(committed, fell_back)` of the writer's leaf calls.
fn leaf_calls(writer: &BatchWriter) -> (u64, u64) {
    let counts = writer.fast_path_counts().leaves;
    (counts.committed, counts.fell_back)
}

fn postgres(store: &Store) -> bool {
    matches!(store, Store::Postgres(_))
}

async fn leaf_batches_through_the_writer_leave_the_rows_and_events_the_general_path_leaves(store: Store) {
    let wide = steps(["a", "b", "c", "d", "e"].iter().map(|id| noop(id, &[], json!({}))).collect());
    let single = steps(vec![noop("x", &[], json!({"note": "déjà vu"}))]);
    let pair = steps(vec![noop("y", &[], json!({})), noop("z", &[], json!({}))]);
    let mut writer = store.batch_writer();
    for path in ["writer", "store"] {
        let (wide_id, single_id, pair_id) = (format!("{path}-wide"), format!("{path}-single"), format!("{path}-pair"));
        submit(&store, &wide_id, &wide).await;
        submit(&store, &single_id, &single).await;
        let mut by = (path == "writer").then_some(&mut writer);
        let mut batch = async |items: Vec<ReportItem>, claim: u32, now: i64| {
            write(&store, by.as_deref_mut(), &items, &[request(claim)], now).await
        };
        let first = batch(Vec::new(), 10, T0).await;
        let lease = |id: &str| {
            let claimed = first.claimed[0].iter().find(|c| c.lease.step_id == id);
            claimed.unwrap_or_else(|| panic!("{path}: {id} was claimed")).lease.clone()
        };
        assert_eq!(first.claimed[0].len(), 6, "{path}: every ready step");

        // Two steps of one run and the only step of another, which ends its run; nothing is left to claim.
        let outcome = batch(
            vec![
                complete(&lease("a"), json!({"n": 1})),
                complete(&lease("x"), json!("ü")),
                complete(&lease("b"), json!(null)),
            ],
            4,
            T0 + 1,
        )
        .await;
        assert_eq!(outcome.reports, [Report::Succeeded; 3], "{path}");
        assert_eq!((outcome.claimed[0].len(), outcome.ready_now), (0, 0), "{path}");
        assert_eq!(run(&store, &single_id).await.status, "succeeded", "{path}");

        // A run submitted meanwhile: the completions' claim leases both its steps.
        create(&store, &NewRun { now_ms: T0 + 2, ..new_run(&pair_id, &pair) }).await;
        let outcome =
            batch(vec![complete(&lease("c"), json!({})), complete(&lease("d"), json!([1, 2]))], 5, T0 + 3).await;
        assert_eq!(outcome.reports, [Report::Succeeded; 2], "{path}");
        let mut leased: Vec<_> = outcome.claimed[0].iter().map(|c| c.lease.clone()).collect();
        leased.sort_by(|l, r| l.step_id.cmp(&r.step_id));
        assert_eq!(leased.iter().map(|l| l.step_id.as_str()).collect::<Vec<_>>(), ["y", "z"], "{path}");
        assert!(outcome.claimed[0].iter().all(|c| c.completion.is_leaf()), "{path}: leaves are marked as such");

        // Two runs end in one batch.
        let items =
            vec![complete(&lease("e"), json!({})), complete(&leased[1], json!({})), complete(&leased[0], json!({}))];
        let outcome = batch(items, 1, T0 + 4).await;
        assert_eq!((outcome.reports.as_slice(), outcome.claimed[0].len()), ([Report::Succeeded; 3].as_slice(), 0));
        assert_eq!(run(&store, &wide_id).await.status, "succeeded", "{path}");
        assert_eq!(run(&store, &pair_id).await.status, "succeeded", "{path}");
    }

    let expected = if postgres(&store) { (3, 0) } else { (0, 0) };
    assert_eq!(leaf_calls(&writer), expected, "the three leaf batches went in one call each on PostgreSQL");
    assert_eq!(writer.fast_path_counts().chain.committed, 0, "no chain step here");
    for run_id in ["wide", "single", "pair"] {
        let (by_writer, by_store) = (format!("writer-{run_id}"), format!("store-{run_id}"));
        let (writer_rows, store_rows) = (rows(&store, &by_writer).await, rows(&store, &by_store).await);
        assert_eq!(writer_rows, store_rows, "{run_id}: the same rows");
        assert_eq!(history(&store, &by_writer).await, history(&store, &by_store).await, "{run_id}: the same events");
    }
}

async fn leaf_batches_of_several_workers_leave_the_rows_and_events_the_general_path_leaves(store: Store) {
    // `w1` serves `noop`, `w2` serves `sleep`, so which worker leases which step does not depend on ties.
    let sleep = |id: &str| json!({"id": id, "action": "sleep", "args": {"duration_ms": 1}});
    let both = steps(vec![
        noop("a", &[], json!({})),
        noop("b", &[], json!({})),
        noop("c", &[], json!({})),
        sleep("d"),
        sleep("e"),
    ]);
    let more = steps(vec![noop("m", &[], json!({})), sleep("n")]);
    let claim = |worker: &str, action: &str, limit: u32| ClaimRequest {
        worker_id: worker.into(),
        actions: vec![action.into()],
        limit,
        now_ms: 0,
    };
    let mut writer = store.batch_writer();
    for path in ["writer", "store"] {
        let (both_id, more_id) = (format!("{path}-both"), format!("{path}-more"));
        submit(&store, &both_id, &both).await;
        let mut by = (path == "writer").then_some(&mut writer);
        let mut batch = async |items: Vec<ReportItem>, claims: Vec<ClaimRequest>, now: i64| {
            write(&store, by.as_deref_mut(), &items, &claims, now).await
        };
        let first = batch(Vec::new(), vec![claim("w1", "noop", 10), claim("w2", "sleep", 10)], T0).await;
        let mut held: Vec<_> = first.claimed.iter().flatten().map(|c| c.lease.clone()).collect();
        let lease = |held: &[Lease], id: &str| held.iter().find(|l| l.step_id == id).expect("leased").clone();
        assert_eq!((first.claimed[0].len(), first.claimed[1].len()), (3, 2), "{path}");

        // Two workers' completions; three claims in two groups, the second group's two requests dealt in order.
        create(&store, &NewRun { now_ms: T0 + 1, ..new_run(&more_id, &more) }).await;
        let claims = vec![claim("w2", "sleep", 1), claim("w1", "noop", 1), claim("w1", "noop", 1)];
        let outcome =
            batch(vec![complete(&lease(&held, "a"), json!(1)), complete(&lease(&held, "d"), json!(2))], claims, T0 + 2)
                .await;
        assert_eq!(outcome.reports, [Report::Succeeded; 2], "{path}");
        let got: Vec<Vec<&str>> =
            outcome.claimed.iter().map(|c| c.iter().map(|s| s.lease.step_id.as_str()).collect()).collect();
        assert_eq!(got, [vec!["n"], vec!["m"], vec![]], "{path}");
        assert_eq!(outcome.claimed[0][0].lease.worker_id, "w2", "{path}");
        held.extend(outcome.claimed.iter().flatten().map(|c| c.lease.clone()));

        // Completions with no claim at all.
        let outcome = batch(
            vec![complete(&lease(&held, "b"), json!({})), complete(&lease(&held, "e"), json!({}))],
            vec![],
            T0 + 3,
        )
        .await;
        assert_eq!(outcome.reports, [Report::Succeeded; 2], "{path}");

        // Both runs end.
        let items = vec![
            complete(&lease(&held, "c"), json!({})),
            complete(&lease(&held, "n"), json!({})),
            complete(&lease(&held, "m"), json!({})),
        ];
        let outcome = batch(items, vec![claim("w1", "noop", 1)], T0 + 4).await;
        assert_eq!(outcome.reports, [Report::Succeeded; 3], "{path}");
        assert_eq!(run(&store, &both_id).await.status, "succeeded", "{path}");
        assert_eq!(run(&store, &more_id).await.status, "succeeded", "{path}");
    }

    let expected = if postgres(&store) { (3, 0) } else { (0, 0) };
    assert_eq!(leaf_calls(&writer), expected, "the three leaf batches went in one call each on PostgreSQL");
    for run_id in ["both", "more"] {
        let (by_writer, by_store) = (format!("writer-{run_id}"), format!("store-{run_id}"));
        assert_eq!(rows(&store, &by_writer).await, rows(&store, &by_store).await, "{run_id}: the same rows");
        assert_eq!(history(&store, &by_writer).await, history(&store, &by_store).await, "{run_id}: the same events");
    }
}

async fn a_leaf_batch_whose_claim_meets_a_placeholder_falls_back_and_then_pauses(store: Store) {
    submit(&store, "r1", &steps(vec![noop("a", &[], json!({})), noop("b", &[], json!({}))])).await;
    let mut writer = store.batch_writer();
    let first = write(&store, Some(&mut writer), &[], &[request(2)], T0).await;
    let (a, b) = (first.claimed[0][0].lease.clone(), first.claimed[0][1].lease.clone());
    let mut with_input = new_run("r2", &steps(vec![noop("p", &[], json!({"v": "$input.x"}))]));
    with_input.input = json!({"x": 7});
    with_input.now_ms = T0 + 1;
    create(&store, &with_input).await;

    let outcome = write(&store, Some(&mut writer), &[complete(&a, json!({}))], &[request(1)], T0 + 2).await;

    assert_eq!(outcome.reports, [Report::Succeeded]);
    let p = &outcome.claimed[0][0];
    assert_eq!((p.lease.step_id.as_str(), &p.args), ("p", &json!({"v": 7})), "the general claim resolved it");
    let kinds: Vec<String> = events(&store, "r1").await.into_iter().map(|e| e.kind.to_string()).collect();
    assert_eq!(kinds.iter().filter(|k| *k == "step_succeeded").count(), 1, "written once: {kinds:?}");
    let expected = if postgres(&store) { (0, 1) } else { (0, 0) };
    assert_eq!(leaf_calls(&writer), expected, "PostgreSQL tried the call, which fell back");

    // The next leaf batch goes the general way without asking.
    let outcome = write(&store, Some(&mut writer), &[complete(&b, json!({}))], &[request(1)], T0 + 3).await;
    assert_eq!(outcome.reports, [Report::Succeeded]);
    assert_eq!(leaf_calls(&writer), expected, "paused after the fallback");
    assert_eq!(run(&store, "r1").await.status, "succeeded");
}

async fn a_leaf_batch_whose_claim_meets_repaired_args_falls_back_and_the_claim_has_the_revised_key(store: Store) {
    submit(&store, "r1", &steps(vec![noop("a", &[], json!({}))])).await;
    let mut writer = store.batch_writer();
    let first = write(&store, Some(&mut writer), &[], &[request(1)], T0).await;
    let a = first.claimed[0][0].lease.clone();
    let once = json!({"id": "q", "action": "noop", "args": {"v": 1}, "retry": {"max_attempts": 1}});
    create(&store, &NewRun { now_ms: T0 + 1, ..new_run("r2", &steps(vec![once])) }).await;
    let q = write(&store, None, &[], &[request(1)], T0 + 1).await.claimed[0][0].lease.clone();
    store.fail(&q, &Failure::new("action_error", "boom", true), 0.0, T0 + 1).await.expect("fail");
    let repaired = json!({"v": 2});
    let retry =
        StepRetry { run_id: "r2", step_id: "q", args: Some(&repaired), by: "ops", reason: None, now_ms: T0 + 2 };
    store.step_retry(&retry).await.expect("retry");

    let outcome = write(&store, Some(&mut writer), &[complete(&a, json!({}))], &[request(1)], T0 + 3).await;

    assert_eq!(outcome.reports, [Report::Succeeded]);
    let claimed = &outcome.claimed[0][0];
    assert_eq!((claimed.lease.step_id.as_str(), &claimed.args), ("q", &repaired));
    assert_eq!(claimed.idempotency_key, "r2/q/1", "the general claim gave the revised key");
    let expected = if postgres(&store) { (0, 1) } else { (0, 0) };
    assert_eq!(leaf_calls(&writer), expected, "PostgreSQL tried the call, which fell back");
}

async fn a_leaf_batch_that_ends_a_run_with_a_failed_step_falls_back_and_the_run_fails(store: Store) {
    submit(&store, "r1", &steps(vec![noop("ok", &[], json!({})), noop("bad", &[], json!({}))])).await;
    let mut writer = store.batch_writer();
    let first = write(&store, Some(&mut writer), &[], &[request(2)], T0).await;
    let lease = |id: &str| first.claimed[0].iter().find(|c| c.lease.step_id == id).expect("claimed").lease.clone();
    let failure = Failure::new("action_error", "boom", false);
    let fail = ReportItem { lease: lease("bad"), kind: ReportKind::Fail { failure, sample: 0.0 } };
    let outcome = write(&store, Some(&mut writer), &[fail], &[], T0 + 1).await;
    assert_eq!(outcome.reports, [Report::Failed]);

    let outcome = write(&store, Some(&mut writer), &[complete(&lease("ok"), json!({}))], &[request(1)], T0 + 2).await;

    assert_eq!(outcome.reports, [Report::Succeeded]);
    assert_eq!(status(&store, "r1", "ok").await, "succeeded");
    let finished = run(&store, "r1").await;
    assert_eq!(finished.status, "failed", "the general path names the failure");
    let expected = if postgres(&store) { (0, 1) } else { (0, 0) };
    assert_eq!(leaf_calls(&writer), expected, "PostgreSQL tried the call, which fell back");
    let kinds: Vec<String> = events(&store, "r1").await.into_iter().map(|e| e.kind.to_string()).collect();
    assert_eq!(kinds.iter().filter(|k| *k == "run_failed").count(), 1, "{kinds:?}");
    assert!(!kinds.iter().any(|k| k == "run_succeeded"), "{kinds:?}");
}

/// Every event of the runs whose id starts with `prefix`, in id order across runs, with the prefix removed.
async fn global_history(store: &Store, prefix: &str) -> Vec<String> {
    const SQL: &str = "SELECT run_id, COALESCE(step_id, '-'), kind, data, attempt, worker_id, available_at, at \
         FROM run_events WHERE run_id LIKE $1 ORDER BY id";
    type Row = (String, String, String, Option<String>, Option<i64>, Option<String>, Option<i64>, i64);
    let pattern = format!("{prefix}%");
    let rows: Vec<Row> = match store {
        Store::Sqlite(pool) => sqlx::query_as(SQL).bind(&pattern).fetch_all(pool).await.expect("events"),
        Store::Postgres(pool) => sqlx::query_as(SQL).bind(&pattern).fetch_all(pool).await.expect("events"),
    };
    rows.into_iter().map(|r| format!("{r:?}").replace(prefix, "")).collect()
}

/// What a claim writes and a later completion overwrites (the run marked `running` and its `updated_at`, the
/// lease's expiry) and the order of events across runs are compared after every batch, not only at the end.
async fn leaf_batches_match_the_general_path_after_every_batch(store: Store) {
    let wide = steps(["a", "b", "c"].iter().map(|id| noop(id, &[], json!({}))).collect());
    let single = steps(vec![noop("x", &[], json!({}))]);
    // Timeouts past the lease TTL, so the lease's expiry is the TTL's (`lease_expires_at` shows the difference).
    let long = |id: &str| json!({"id": id, "action": "noop", "args": {}, "timeout_ms": 120_000});
    let pair = steps(vec![long("y"), long("z")]);
    let mut writer = store.batch_writer();
    let mut snapshots: Vec<Vec<String>> = Vec::new();
    for path in ["writer", "store"] {
        let prefix = format!("{path}-");
        let (r1, r2, r3) = (format!("{path}-r1"), format!("{path}-r2"), format!("{path}-r3"));
        submit(&store, &r1, &wide).await;
        submit(&store, &r2, &single).await;
        let mut by = (path == "writer").then_some(&mut writer);
        let mut batch = async |items: Vec<ReportItem>, claim: u32, now: i64| {
            write(&store, by.as_deref_mut(), &items, &[request(claim)], now).await
        };
        let first = batch(Vec::new(), 10, T0).await;
        let lease = |id: &str| first.claimed[0].iter().find(|c| c.lease.step_id == id).expect("claimed").lease.clone();
        let mut snapshot = Vec::new();

        // x ends r2; the claim leases both steps of r3, submitted meanwhile (r3 becomes `running`).
        create(&store, &NewRun { now_ms: T0 + 2, ..new_run(&r3, &pair) }).await;
        let outcome = batch(vec![complete(&lease("a"), json!({})), complete(&lease("x"), json!({}))], 5, T0 + 3).await;
        assert_eq!(outcome.reports, [Report::Succeeded; 2], "{path}");
        let leased: Vec<Lease> = outcome.claimed[0].iter().map(|c| c.lease.clone()).collect();
        assert_eq!(leased.len(), 2, "{path}");
        for run_id in [&r1, &r2, &r3] {
            snapshot.extend(rows(&store, run_id).await);
        }
        snapshot.extend(global_history(&store, &prefix).await);

        // r1 and r3 end in one batch, r1 first seen.
        let items = vec![
            complete(&lease("c"), json!({})),
            complete(&leased[0], json!({})),
            complete(&lease("b"), json!({})),
            complete(&leased[1], json!({})),
        ];
        let outcome = batch(items, 1, T0 + 4).await;
        assert_eq!(outcome.reports, [Report::Succeeded; 4], "{path}");
        for run_id in [&r1, &r2, &r3] {
            snapshot.extend(rows(&store, run_id).await);
        }
        snapshot.extend(global_history(&store, &prefix).await);
        snapshots.push(snapshot);
    }
    let expected = if postgres(&store) { (2, 0) } else { (0, 0) };
    assert_eq!(leaf_calls(&writer), expected, "both leaf batches went in one call on PostgreSQL");
    assert_eq!(snapshots[0], snapshots[1], "the writer's rows and events after each batch are the general path's");
}

contract_tests!(
    leaf_batches_match_the_general_path_after_every_batch,
    leaf_batches_through_the_writer_leave_the_rows_and_events_the_general_path_leaves,
    leaf_batches_of_several_workers_leave_the_rows_and_events_the_general_path_leaves,
    a_leaf_batch_whose_claim_meets_a_placeholder_falls_back_and_then_pauses,
    a_leaf_batch_whose_claim_meets_repaired_args_falls_back_and_the_claim_has_the_revised_key,
    a_leaf_batch_that_ends_a_run_with_a_failed_step_falls_back_and_the_run_fails,
);
