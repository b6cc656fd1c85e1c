//! The batch writer (`Store::batch_writer`) decides every batch as `Store::write_batch` does. On PostgreSQL a
//! batch of one completion and the claim riding on it goes through `cairn_complete_and_claim`, one call instead
//! of four round trips, when the completed step's one dependent needs no decision in Rust; these behaviours
//! check that it is taken, and that the rows (every column a completion or a claim writes) and the events
//! (kind, step, data as JSON, time, in order) it leaves are those of the general path.

use cairn_store::Batch;
use cairn_store::{BatchOutcome, BatchWriter, ClaimRequest, Lease, Report, ReportItem, ReportKind, Store};
use serde_json::{Value, json};

use super::support::{LIMITS, T0, TTL, batch, create, events, new_run, noop, run, steps, submit};

pub(super) fn complete(lease: &Lease, output: Value) -> ReportItem {
    ReportItem { lease: lease.clone(), kind: ReportKind::Complete(output) }
}

pub(super) fn request(limit: u32) -> ClaimRequest {
    ClaimRequest { worker_id: "w1".into(), actions: vec!["noop".into()], limit, now_ms: 0 }
}

/// Every column of the run's steps, attempts and run row that a completion or a claim writes, one line per row,
/// with the run id replaced by `RUN` (lease ids contain it).
pub(super) async fn rows(store: &Store, run_id: &str) -> Vec<String> {
    const STEPS: &str = "SELECT step_id, status, attempt, pending_deps, available_at, lease_id, lease_owner, \
         lease_expires_at, deadline_at, heartbeat_at, started_at, finished_at, updated_at, output, error \
         FROM steps WHERE run_id = $1 ORDER BY step_id";
    const ATTEMPTS: &str = "SELECT step_id || '/' || attempt, lease_id, action, worker_id, status, started_at, \
         ended_at FROM attempts WHERE run_id = $1 ORDER BY step_id, attempt";
    const RUN: &str = "SELECT status, open_steps, updated_at, finished_at FROM runs WHERE id = $1";
    type Text = Option<String>;
    type Ms = Option<i64>;
    type Attempt = (String, Text, String, Text, String, Ms, Ms);
    type Run = (String, i64, i64, Ms);
    macro_rules! read {
        ($pool:expr, $db:ty) => {{
            let mut lines = Vec::new();
            for row in sqlx::query_as::<$db, StepRow>(STEPS).bind(run_id).fetch_all($pool).await.expect("steps") {
                lines.push(format!("step {row:?}"));
            }
            for row in sqlx::query_as::<$db, Attempt>(ATTEMPTS).bind(run_id).fetch_all($pool).await.expect("attempts") {
                lines.push(format!("attempt {row:?}"));
            }
            let run = sqlx::query_as::<$db, Run>(RUN).bind(run_id).fetch_one($pool).await.expect("run");
            lines.push(format!("run {run:?}"));
            lines
        }};
    }
    let lines = match store {
        Store::Sqlite(pool) => read!(pool, sqlx::Sqlite),
        Store::Postgres(pool) => read!(pool, sqlx::Postgres),
    };
    lines.into_iter().map(|line| line.replace(run_id, "RUN")).collect()
}

/// The columns of a step row that completions and claims write.
#[derive(Debug, sqlx::FromRow)]
#[allow(dead_code)] // read by `Debug`
struct StepRow {
    step_id: String,
    status: String,
    attempt: i64,
    pending_deps: i64,
    available_at: Option<i64>,
    lease_id: Option<String>,
    lease_owner: Option<String>,
    lease_expires_at: Option<i64>,
    deadline_at: Option<i64>,
    heartbeat_at: Option<i64>,
    started_at: Option<i64>,
    finished_at: Option<i64>,
    updated_at: i64,
    output: Option<String>,
    error: Option<String>,
}

/// The run's events as `(step, kind, data, at)`, in id order.
pub(super) async fn history(store: &Store, run_id: &str) -> Vec<(Option<String>, String, Value, i64)> {
    events(store, run_id).await.into_iter().map(|e| (e.step_id, e.kind.to_string(), e.data, e.at_ms)).collect()
}

/// One batch through `writer`, or through `Store::write_batch` when there is none.
pub(super) async fn write(
    store: &Store,
    writer: Option<&mut BatchWriter>,
    items: &[ReportItem],
    claims: &[ClaimRequest],
    now: i64,
) -> BatchOutcome {
    let nobody = |_: usize| Vec::new();
    let outcome = match writer {
        Some(writer) => {
            writer
                .write_batch(&Batch {
                    runs: &[],
                    reports: items,
                    claims,
                    limits: LIMITS,
                    lease_ttl_ms: TTL,
                    now_ms: now,
                    handoff: &nobody,
                })
                .await
        }
        None => {
            store
                .write_batch(&Batch {
                    runs: &[],
                    reports: items,
                    claims,
                    limits: LIMITS,
                    lease_ttl_ms: TTL,
                    now_ms: now,
                    handoff: &nobody,
                })
                .await
        }
    };
    outcome.expect("the batch commits")
}

async fn a_chain_through_the_writer_leaves_the_rows_and_events_the_general_path_leaves(store: Store) {
    // c → d has a placeholder, so on PostgreSQL that step takes the general path even in the writer.
    let doc = steps(vec![
        noop("a", &[], json!({})),
        noop("b", &["a"], json!({"note": "déjà vu"})),
        noop("c", &["b"], json!({})),
        noop("d", &["c"], json!({"n": "$c.output.n"})),
    ]);
    let mut writer = store.batch_writer();
    for run_id in ["by-writer", "by-store"] {
        submit(&store, run_id, &doc).await;
        let mut by = (run_id == "by-writer").then_some(&mut writer);
        let mut batch = async |items: Vec<ReportItem>, claims: Vec<ClaimRequest>, now: i64| {
            write(&store, by.as_deref_mut(), &items, &claims, now).await
        };
        let first = batch(Vec::new(), vec![request(4)], T0).await;
        let mut lease = first.claimed[0][0].lease.clone();
        for (now, output) in [(T0 + 1, json!({"s": "a"})), (T0 + 2, json!({"s": "b"})), (T0 + 3, json!({"n": 3}))] {
            let outcome = batch(vec![complete(&lease, output)], vec![request(2)], now).await;
            assert_eq!(outcome.reports, [Report::Succeeded], "{run_id}");
            assert_eq!(outcome.claimed[0].len(), 1, "{run_id}: the completion's claim takes the dependent");
            assert_eq!((outcome.ready_now, outcome.handed.len()), (0, 0), "{run_id}: nothing left for others");
            lease = outcome.claimed[0][0].lease.clone();
        }
        assert_eq!(lease.step_id, "d");
        let last = batch(vec![complete(&lease, json!({"n": 3}))], vec![request(2)], T0 + 4).await;
        assert_eq!((last.reports.as_slice(), last.claimed[0].len()), ([Report::Succeeded].as_slice(), 0));
        assert_eq!(run(&store, run_id).await.status, "succeeded");
    }

    let tried = writer.fast_path_counts().chain;
    let expected = if matches!(store, Store::Postgres(_)) { (2, 0) } else { (0, 0) };
    assert_eq!((tried.committed, tried.fell_back), expected, "a → b and b → c went in one call on PostgreSQL");
    assert_eq!(rows(&store, "by-writer").await, rows(&store, "by-store").await, "the same rows");
    assert_eq!(history(&store, "by-writer").await, history(&store, "by-store").await, "the same events in order");
}

async fn a_one_call_that_falls_back_leaves_the_general_path_to_serve_the_oldest_ready_step(store: Store) {
    // a → b qualifies for the one call, but `z` (a `sleep`, which the completion's claim also serves) has been
    // ready since T0: the general claim serves it first, so the call must fall back and write nothing.
    let doc = steps(vec![
        noop("a", &[], json!({})),
        noop("b", &["a"], json!({})),
        json!({"id": "z", "action": "sleep", "args": {"duration_ms": 1}}),
    ]);
    submit(&store, "r1", &doc).await;
    let nobody = |_: usize| Vec::new();
    let mut writer = store.batch_writer();
    let first = writer.write_batch(&batch(&[], &[request(1)], T0, &nobody)).await.expect("commits");
    let a = first.claimed[0][0].lease.clone();
    assert_eq!(a.step_id, "a", "the root claim serves `noop` only");
    let both = ClaimRequest { actions: vec!["noop".into(), "sleep".into()], ..request(1) };

    let outcome =
        writer.write_batch(&batch(&[complete(&a, json!({}))], &[both], T0 + 1, &nobody)).await.expect("commits");

    assert_eq!(outcome.reports, [Report::Succeeded]);
    let claimed: Vec<&str> = outcome.claimed[0].iter().map(|c| c.lease.step_id.as_str()).collect();
    assert_eq!(claimed, ["z"], "the oldest ready step first");
    assert_eq!(outcome.ready_now, 1, "b is left ready for waiting claimers");
    let kinds: Vec<String> = events(&store, "r1").await.into_iter().map(|e| e.kind.to_string()).collect();
    assert_eq!(kinds.iter().filter(|k| *k == "step_succeeded").count(), 1, "written once: {kinds:?}");
    let tried = writer.fast_path_counts().chain;
    if matches!(store, Store::Postgres(_)) {
        assert_eq!((tried.committed, tried.fell_back), (0, 1), "PostgreSQL tried the call, which fell back");
    } else {
        assert_eq!((tried.committed, tried.fell_back), (0, 0), "SQLite has no one-call path");
    }
}

async fn a_claimed_step_names_its_successors_action_only_when_its_completion_may_lease_it(store: Store) {
    let step = |id: &str, action: &str, deps: &[&str], extra: Value| {
        let mut s = json!({"id": id, "action": action, "depends_on": deps, "args": {}});
        let (Some(fields), Some(extra)) = (s.as_object_mut(), extra.as_object()) else { unreachable!("objects") };
        fields.extend(extra.clone());
        s
    };
    let doc = steps(vec![
        step("simple", "noop", &[], json!({})),
        step("simple_next", "condition.eval", &["simple"], json!({"args": {"expr": "true"}})),
        step("leaf", "noop", &[], json!({})),
        step("fan", "noop", &[], json!({})),
        step("fan_1", "noop", &["fan"], json!({})),
        step("fan_2", "noop", &["fan"], json!({})),
        step("join_a", "noop", &[], json!({})),
        step("join_b", "noop", &[], json!({})),
        step("join", "noop", &["join_a", "join_b"], json!({})),
        step("cond", "noop", &[], json!({})),
        step("cond_next", "noop", &["cond"], json!({"when": "true"})),
        step("gate", "noop", &[], json!({})),
        step("gate_next", "noop", &["gate"], json!({"approval": {"required": true}})),
        // An approval that is not required changes nothing, and every trigger rule runs a step whose one
        // dependency succeeded: both start by themselves (`cairn_core::machine::starts_itself`).
        step("open", "noop", &[], json!({})),
        step("open_next", "sleep", &["open"], json!({"approval": {"required": false}, "args": {"duration_ms": 1}})),
        step("ruled", "noop", &[], json!({})),
        step("ruled_next", "noop", &["ruled"], json!({"trigger_rule": "all_done"})),
        step("data", "noop", &[], json!({})),
        step("data_next", "noop", &["data"], json!({"args": {"v": "$data.output"}})),
    ]);
    submit(&store, "r1", &doc).await;
    // A dependent with a `not_before` timer (already due or not, it is left to the general path).
    let mut timed = new_run(
        "r2",
        &steps(vec![step("timed", "noop", &[], json!({})), step("timed_next", "noop", &["timed"], json!({}))]),
    );
    timed.timers[1] = Some((T0, "2026-01-01T00:00:00Z".into()));
    create(&store, &timed).await;

    let claimed = store.claim(&ClaimRequest { now_ms: T0, ..request(100) }, TTL).await.expect("claims");

    let mut successors: Vec<(&str, Option<&str>)> =
        claimed.iter().map(|c| (c.lease.step_id.as_str(), c.completion.successor_action())).collect();
    successors.sort_unstable();
    let expected = [
        ("cond", None),
        ("data", None),
        ("fan", None),
        ("gate", None),
        ("join_a", None),
        ("join_b", None),
        ("leaf", None),
        ("open", Some("sleep")),
        ("ruled", Some("noop")),
        ("simple", Some("condition.eval")),
        ("timed", None),
    ];
    assert_eq!(successors, expected, "only steps whose one dependent starts by itself name its action");
}

contract_tests!(
    a_claimed_step_names_its_successors_action_only_when_its_completion_may_lease_it,
    a_chain_through_the_writer_leaves_the_rows_and_events_the_general_path_leaves,
    a_one_call_that_falls_back_leaves_the_general_path_to_serve_the_oldest_ready_step,
);
