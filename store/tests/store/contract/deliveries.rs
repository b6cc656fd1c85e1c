//! The delivery ledger (migration 0017): a report is refused for a step that does not exist or has not reached
//! the attempt; tries are counted once per step attempt (a resent report adds nothing, a newer attempt adds its
//! own, an older one nothing); `delivered` is final, and reached even from an older attempt; errors are cut to
//! their bound; the ledger goes with its run but outlives a deleted recipient.

use cairn_core::delivery::{DeliveryRecord, DeliveryStatus, MAX_ERROR_BYTES, MAX_PROVIDER_ID_BYTES};
use cairn_store::{DeliveryRecorded, DeliveryRow, DeliveryWrite, Store};
use serde_json::json;

use super::support::{T0, action_error, claim_one, execute_sql, noop, steps, submit};

/// Submits the run `run_id` of one step `a` (retried up to 5 times) and runs it to its `attempt`-th attempt: the
/// earlier ones fail, the last one is left running.
async fn step_at_attempt(store: &Store, run_id: &str, attempt: u32) {
    let retry = json!({"max_attempts": 5, "initial_interval_ms": 1000, "backoff_coefficient": 1.0,
                       "max_interval_ms": 1000, "jitter": "none"});
    submit(store, run_id, &steps(vec![json!({"id": "a", "action": "noop", "args": {}, "retry": retry})])).await;
    for n in 1..=attempt {
        let now = T0 + i64::from(n) * 10_000;
        let lease = claim_one(store, now).await.lease;
        assert_eq!(lease.attempt, n, "test set-up: attempt {n} is leased");
        if n < attempt {
            store.fail(&lease, &action_error("try again"), 0.5, now + 1).await.expect("fail");
        }
    }
}

/// A report of step `a` of `r1`, channel `telegram` of `alice`, from `attempt`.
fn report(attempt: u32, status: DeliveryStatus, tries: u32, now: i64) -> DeliveryWrite {
    DeliveryWrite {
        run_id: "r1".into(),
        step_id: "a".into(),
        step_attempt: attempt,
        recipient_id: "alice".into(),
        channel: "telegram".into(),
        status,
        tries,
        last_error: None,
        provider_message_id: None,
        now_ms: now,
    }
}

fn failed(attempt: u32, tries: u32, error: &str, now: i64) -> DeliveryWrite {
    DeliveryWrite { last_error: Some(error.into()), ..report(attempt, DeliveryStatus::Failed, tries, now) }
}

fn delivered(attempt: u32, tries: u32, provider_id: &str, now: i64) -> DeliveryWrite {
    DeliveryWrite {
        provider_message_id: Some(provider_id.into()),
        ..report(attempt, DeliveryStatus::Delivered, tries, now)
    }
}

/// Records `write`, which must be accepted: the row, whether it became delivered, the tries it added.
async fn record(store: &Store, write: &DeliveryWrite) -> (DeliveryRow, bool, u32) {
    match store.delivery_record(write).await.expect("delivery_record") {
        DeliveryRecorded::Recorded { row, newly_delivered, added_tries } => (row, newly_delivered, added_tries),
        DeliveryRecorded::NoSuchAttempt => panic!("the step has reached attempt {}", write.step_attempt),
    }
}

async fn a_report_without_its_step_attempt_is_refused_and_writes_nothing(store: Store) {
    let missing = store.delivery_record(&failed(1, 1, "x", T0)).await.expect("delivery_record");
    assert_eq!(missing, DeliveryRecorded::NoSuchAttempt, "no such run");
    submit(&store, "r1", &steps(vec![noop("a", &[], json!({}))])).await;
    let unclaimed = store.delivery_record(&failed(1, 1, "x", T0)).await.expect("delivery_record");
    assert_eq!(unclaimed, DeliveryRecorded::NoSuchAttempt, "the step has made no attempt yet");
    claim_one(&store, T0).await;

    for (write, why) in [
        (DeliveryWrite { step_id: "b".into(), ..failed(1, 1, "x", T0) }, "no such step"),
        (failed(2, 1, "x", T0), "an attempt the step has not started"),
        (failed(0, 1, "x", T0), "attempts are numbered from 1"),
    ] {
        assert_eq!(
            store.delivery_record(&write).await.expect("delivery_record"),
            DeliveryRecorded::NoSuchAttempt,
            "{why}"
        );
    }

    assert!(store.run_deliveries("r1").await.expect("run_deliveries").is_empty(), "nothing was written");
    let (row, newly_delivered, added) = record(&store, &failed(1, 1, "x", T0 + 1)).await;
    assert_eq!((row.attempts, row.step_attempt, newly_delivered, added), (1, 1, false, 1), "attempt 1 reports");
}

async fn tries_count_once_per_report_and_step_attempt(store: Store) {
    step_at_attempt(&store, "r1", 2).await;

    let (first, _, added) = record(&store, &failed(1, 2, "timeout", T0 + 1)).await;
    assert_eq!((first.attempts, first.step_attempt, added), (2, 1, 2), "a first report counts its tries");
    assert_eq!((first.first_attempt_at, first.last_attempt_at), (T0 + 1, T0 + 1));
    let (resent, _, added) = record(&store, &failed(1, 2, "timeout", T0 + 2)).await;
    assert_eq!((resent.attempts, added), (2, 0), "a resent report is counted once");
    assert_eq!(resent.last_attempt_at, T0 + 1, "a report that adds nothing does not move last_attempt_at");
    let (more, _, added) = record(&store, &failed(1, 3, "refused", T0 + 3)).await;
    assert_eq!((more.attempts, added, more.last_error.as_deref()), (3, 1, Some("refused")), "one more try");

    let (newer, _, added) = record(&store, &failed(2, 1, "503", T0 + 4)).await;
    assert_eq!((newer.attempts, newer.step_attempt, added), (4, 2, 1), "a newer attempt adds its own tries");
    let (older, newly_delivered, added) = record(&store, &failed(1, 9, "stale", T0 + 5)).await;

    assert_eq!((older.attempts, older.step_attempt, added, newly_delivered), (4, 2, 0, false), "older adds nothing");
    assert_eq!(older, newer, "a failed report from an older attempt changes nothing");
    assert_eq!(
        older.record(),
        DeliveryRecord {
            recipient_id: "alice".into(),
            channel: "telegram".into(),
            status: DeliveryStatus::Failed,
            attempts: 4,
            last_error: Some("503".into()),
            provider_message_id: None,
        }
    );
}

async fn delivered_is_final(store: Store) {
    step_at_attempt(&store, "r1", 2).await;
    record(&store, &failed(1, 1, "timeout", T0 + 1)).await;

    let (row, newly_delivered, added) = record(&store, &delivered(1, 2, "m-1", T0 + 2)).await;

    assert!(newly_delivered, "the report that delivers says so");
    assert_eq!((row.status, row.attempts, added), (DeliveryStatus::Delivered, 2, 1));
    assert_eq!((row.provider_message_id.as_deref(), row.delivered_at), (Some("m-1"), Some(T0 + 2)));
    assert_eq!(row.last_error.as_deref(), Some("timeout"), "why it failed before is kept");
    for write in [failed(2, 1, "late failure", T0 + 3), delivered(2, 1, "m-2", T0 + 4), failed(1, 2, "stale", T0 + 5)] {
        let (after, newly_delivered, _) = record(&store, &write).await;
        assert!(!newly_delivered, "it was delivered already");
        assert_eq!(after.status, DeliveryStatus::Delivered, "a delivered row stays delivered");
        assert_eq!(after.provider_message_id.as_deref(), Some("m-1"), "the first provider id is kept");
        assert_eq!(after.delivered_at, Some(T0 + 2), "the first delivery time is kept");
    }
    let ledger = store.step_deliveries("r1", "a").await.expect("step_deliveries");
    assert_eq!(ledger.len(), 1, "one row per channel");
    assert_eq!(ledger[0].record().status, DeliveryStatus::Delivered);
}

async fn an_older_attempts_delivery_still_delivers(store: Store) {
    step_at_attempt(&store, "r1", 2).await;
    record(&store, &failed(2, 2, "e2", T0 + 1)).await;

    let (row, newly_delivered, added) = record(&store, &delivered(1, 1, "late", T0 + 2)).await;

    assert!(newly_delivered, "the message went out, whichever attempt sent it");
    assert_eq!((row.status, row.attempts, row.step_attempt, added), (DeliveryStatus::Delivered, 2, 2, 0));
    assert_eq!((row.provider_message_id.as_deref(), row.delivered_at), (Some("late"), Some(T0 + 2)));
    assert_eq!((row.last_error.as_deref(), row.last_attempt_at), (Some("e2"), T0 + 2), "its error stays");
}

async fn a_huge_error_and_provider_id_are_cut_to_their_bounds(store: Store) {
    step_at_attempt(&store, "r1", 1).await;
    let error = format!("x{}", "é".repeat(5_000));
    record(&store, &failed(1, 1, &error, T0)).await;

    let (row, _, _) = record(&store, &delivered(1, 2, &"p".repeat(5_000), T0 + 1)).await;

    let kept = row.last_error.expect("the error is kept");
    assert_eq!(kept.len(), MAX_ERROR_BYTES - 1, "cut at the last character boundary within the bound");
    assert!(error.starts_with(&kept), "the start of the error is kept");
    assert_eq!(row.provider_message_id.expect("the id is kept").len(), MAX_PROVIDER_ID_BYTES);
}

async fn the_ledger_is_read_in_order_and_goes_with_its_run_not_its_recipient(store: Store) {
    let doc = steps(vec![noop("a", &[], json!({})), noop("b", &[], json!({}))]);
    submit(&store, "r1", &doc).await;
    submit(&store, "r2", &doc).await;
    super::support::claim(&store, T0).await;
    store.recipient_put("alice", "{}", T0).await.expect("recipient_put");
    for (run_id, step_id, recipient_id, channel) in [
        ("r1", "b", "", "stdout"),
        ("r1", "a", "alice", "telegram"),
        ("r1", "a", "alice", "email"),
        ("r1", "a", "", "file"),
        ("r2", "a", "alice", "email"),
    ] {
        let write = DeliveryWrite {
            run_id: run_id.into(),
            step_id: step_id.into(),
            recipient_id: recipient_id.into(),
            channel: channel.into(),
            ..delivered(1, 1, "m", T0 + 1)
        };
        record(&store, &write).await;
    }
    let keys = |rows: Vec<DeliveryRow>| -> Vec<(String, String, String)> {
        rows.into_iter().map(|r| (r.step_id, r.recipient_id, r.channel)).collect()
    };
    let key = |s: &str, r: &str, c: &str| (s.to_owned(), r.to_owned(), c.to_owned());

    assert_eq!(
        keys(store.run_deliveries("r1").await.expect("run_deliveries")),
        [key("a", "", "file"), key("a", "alice", "email"), key("a", "alice", "telegram"), key("b", "", "stdout")],
        "by step, recipient, channel"
    );
    assert_eq!(keys(store.step_deliveries("r1", "b").await.expect("step_deliveries")), [key("b", "", "stdout")]);

    assert!(store.recipient_delete("alice").await.expect("recipient_delete"));
    assert_eq!(store.run_deliveries("r1").await.expect("run_deliveries").len(), 4, "the ledger outlives a recipient");
    assert_eq!(execute_sql(&store, "DELETE FROM runs WHERE id = $1", &["r1"]).await, 1);
    assert!(store.run_deliveries("r1").await.expect("run_deliveries").is_empty(), "the ledger goes with its run");
    assert_eq!(store.run_deliveries("r2").await.expect("run_deliveries").len(), 1, "other runs keep theirs");
}

async fn racing_reports_of_one_row_count_once_and_deliver_once(store: Store) {
    step_at_attempt(&store, "r1", 2).await;
    let writes: Vec<DeliveryWrite> = (0..8u32)
        .map(|n| match n % 4 {
            0 => delivered(2, 3, "m-2", T0 + 1),
            1 => failed(2, 3, "resent", T0 + 2),
            2 => delivered(1, 2, "m-1", T0 + 3),
            _ => failed(1, 2, "stale", T0 + 4),
        })
        .collect();
    let mut tasks = Vec::new();
    for write in writes {
        let store = store.clone();
        tasks.push(tokio::spawn(async move { record(&store, &write).await }));
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.expect("the report task ends"));
    }

    let delivering = outcomes.iter().filter(|(_, newly_delivered, _)| *newly_delivered).count();
    assert_eq!(delivering, 1, "exactly one of the racing reports made the row delivered");
    let added: u32 = outcomes.iter().map(|(_, _, added)| added).sum();
    let row = store.step_deliveries("r1", "a").await.expect("step_deliveries").remove(0);
    assert_eq!(added, row.attempts, "the tries each report says it added sum to the row's count");
    assert_eq!(row.status, DeliveryStatus::Delivered);
}

contract_tests!(
    a_report_without_its_step_attempt_is_refused_and_writes_nothing,
    tries_count_once_per_report_and_step_attempt,
    delivered_is_final,
    an_older_attempts_delivery_still_delivers,
    a_huge_error_and_provider_id_are_cut_to_their_bounds,
    the_ledger_is_read_in_order_and_goes_with_its_run_not_its_recipient,
    racing_reports_of_one_row_count_once_and_deliver_once,
);
