//! New runs in a group-commit batch (issue 8): each created exactly as alone, before the batch's reports and
//! claims, and their ready roots handed to waiting claimers in the same transaction.

use cairn_store::Batch;
use cairn_store::{BatchOutcome, ClaimRequest, CreateOutcome, NewRun, ReportItem, ReportKind, Store};
use serde_json::json;

use super::support::{LIMITS, T0, TTL, batch, new_run, noop, run, status, steps};

fn request(worker: &str, limit: u32) -> ClaimRequest {
    ClaimRequest { worker_id: worker.into(), actions: vec!["noop".into()], limit, now_ms: 0 }
}

async fn a_batch_creates_its_runs_and_hands_their_due_roots_to_a_waiting_claimer(store: Store) {
    let chain = new_run("r1", &steps(vec![noop("a", &[], json!({})), noop("b", &["a"], json!({}))]));
    let mut later = new_run("r2", &steps(vec![noop("t", &[], json!({}))]));
    later.timers = vec![Some((T0 + 60_000, "in 1 minute".into()))];
    let asked = std::sync::Mutex::new(Vec::new());
    let handoff = |due: usize| {
        asked.lock().expect("not poisoned").push(due);
        vec![request("waiting-worker", 4)]
    };

    let outcome = store
        .write_batch(&Batch {
            runs: &[chain, later],
            reports: &[],
            claims: &[],
            limits: LIMITS,
            lease_ttl_ms: TTL,
            now_ms: T0 + 5,
            handoff: &handoff,
        })
        .await
        .expect("the batch commits");

    let created: Vec<&CreateOutcome> = outcome.created.iter().map(|(c, _)| c).collect();
    assert_eq!(created, [&CreateOutcome::Created("r1".into()), &CreateOutcome::Created("r2".into())]);
    assert!(outcome.created.iter().all(|(_, detail)| detail.is_some()), "roots needed no decision: detail known");
    assert_eq!(outcome.ready_now, 1, "r1's root is due; r2's waits for its timer");
    assert_eq!(*asked.lock().expect("not poisoned"), [1], "the hand-off is asked with the due roots");
    let handed: Vec<(&str, &str)> =
        outcome.handed[0].iter().map(|c| (c.lease.run_id.as_str(), c.lease.step_id.as_str())).collect();
    assert_eq!(handed, [("r1", "a")], "the new run's root is leased to the waiting worker in its own transaction");
    assert_eq!(status(&store, "r1", "a").await, "running");
    assert_eq!(run(&store, "r1").await.status, "running");
    assert_eq!(status(&store, "r1", "b").await, "pending");
    assert_eq!(status(&store, "r2", "t").await, "ready", "r2's root waits for its timer");
}

/// A run of a one-step plan created at [`T0`] with idempotency key `key`.
fn keyed(run_id: &str, key: &str) -> NewRun {
    let mut run = new_run(run_id, &steps(vec![noop("a", &[], json!({}))]));
    run.idempotency_key = Some(key.into());
    run
}

/// Writes `runs` alone in one batch at [`T0`].
async fn write_runs(store: &Store, runs: &[NewRun]) -> BatchOutcome {
    let nobody = |_: usize| Vec::new();
    store
        .write_batch(&Batch {
            runs,
            reports: &[],
            claims: &[],
            limits: LIMITS,
            lease_ttl_ms: TTL,
            now_ms: T0,
            handoff: &nobody,
        })
        .await
        .expect("the batch commits")
}

async fn runs_in_one_batch_apply_their_idempotency_keys_in_order(store: Store) {
    let with_input = |run_id: &str, input: serde_json::Value| NewRun { input, ..keyed(run_id, "order-7") };
    let runs =
        [with_input("r1", json!({"n": 1})), with_input("r2", json!({"n": 1})), with_input("r3", json!({"n": 2}))];

    let outcome = write_runs(&store, &runs).await;

    let created: Vec<&CreateOutcome> = outcome.created.iter().map(|(c, _)| c).collect();
    assert_eq!(
        created,
        [
            &CreateOutcome::Created("r1".into()),
            &CreateOutcome::Existing("r1".into()),
            &CreateOutcome::Conflict("r1".into())
        ],
        "the second run finds the first (same plan and input); the third conflicts (other input)"
    );
    assert!(outcome.created[1].1.is_none() && outcome.created[2].1.is_none(), "no detail for a run not created");
    assert!(store.run_detail("r2").await.expect("read").is_none(), "nothing stored for the duplicate");
    assert!(store.run_detail("r3").await.expect("read").is_none(), "nothing stored for the conflict");
}

async fn runs_with_and_without_keys_interleaved_get_their_own_outcomes(store: Store) {
    let doc = steps(vec![noop("a", &[], json!({}))]);
    let runs = [new_run("u1", &doc), keyed("k1", "k"), new_run("u2", &doc), keyed("k2", "k")];

    let outcome = write_runs(&store, &runs).await;

    let created: Vec<&CreateOutcome> = outcome.created.iter().map(|(c, _)| c).collect();
    assert_eq!(
        created,
        [
            &CreateOutcome::Created("u1".into()),
            &CreateOutcome::Created("k1".into()),
            &CreateOutcome::Created("u2".into()),
            &CreateOutcome::Existing("k1".into())
        ],
        "each outcome at its run's place, whichever way it was inserted"
    );
    let details: Vec<Option<&str>> =
        outcome.created.iter().map(|(_, d)| d.as_ref().map(|d| d.run.id.as_str())).collect();
    assert_eq!(details, [Some("u1"), Some("k1"), Some("u2"), None], "each detail is its own run's");
    for run_id in ["u1", "k1", "u2"] {
        assert_eq!(status(&store, run_id, "a").await, "ready", "{run_id} is stored with its step");
    }
    assert!(store.run_detail("k2").await.expect("read").is_none(), "nothing stored for the duplicate");
}

async fn a_batch_creates_runs_before_its_reports_and_claims(store: Store) {
    super::support::submit(&store, "r0", &steps(vec![noop("a", &[], json!({}))])).await;
    let mut writer = store.batch_writer();
    let nobody = |_: usize| Vec::new();
    // Claimed through the writer, so that on PostgreSQL it knows the lease as a leaf's (worth the leaf call).
    let first = writer.write_batch(&batch(&[], &[request("w1", 1)], T0, &nobody)).await.expect("claimed").claimed;
    let fresh = new_run("r1", &steps(vec![noop("x", &[], json!({}))]));
    let report = ReportItem { lease: first[0][0].lease.clone(), kind: ReportKind::Complete(json!({"ok": true})) };

    let outcome = writer
        .write_batch(&Batch {
            runs: &[fresh],
            reports: &[report],
            claims: &[request("w2", 8)],
            limits: LIMITS,
            lease_ttl_ms: TTL,
            now_ms: T0 + 5,
            handoff: &nobody,
        })
        .await
        .expect("the batch commits");

    assert_eq!(outcome.created[0].0, CreateOutcome::Created("r1".into()));
    assert_eq!(outcome.reports, [cairn_store::Report::Succeeded]);
    assert_eq!(run(&store, "r0").await.status, "succeeded", "the report ended its run");
    let claimed: Vec<(&str, &str)> =
        outcome.claimed[0].iter().map(|c| (c.lease.run_id.as_str(), c.lease.step_id.as_str())).collect();
    assert_eq!(claimed, [("r1", "x")], "the batch's claim sees the run created before it");
    let counts = (writer.fast_path_counts().chain, writer.fast_path_counts().leaves);
    let tried = counts.0.committed + counts.0.fell_back + counts.1.committed + counts.1.fell_back;
    assert_eq!(tried, 0, "a batch with new runs takes the general path: the one-call functions know no runs");
}

contract_tests!(
    a_batch_creates_its_runs_and_hands_their_due_roots_to_a_waiting_claimer,
    runs_in_one_batch_apply_their_idempotency_keys_in_order,
    runs_with_and_without_keys_interleaved_get_their_own_outcomes,
    a_batch_creates_runs_before_its_reports_and_claims,
);
