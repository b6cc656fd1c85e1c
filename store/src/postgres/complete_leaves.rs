//! Leaf completions and their claims in one round trip: the batch writer's path for a batch of successes of steps
//! nothing depends on, with the claims riding on them and any polls (`docs/design/fast-path.md`).
//!
//! The general path for that batch is `BEGIN`, the success statement, the runs' counters, the claim, `COMMIT`:
//! five round trips, with the batch's workers waiting on all of them. When every succeeded step is a leaf, every
//! run they end ends clean (no failed step, no cancel) and no leased step has a placeholder to resolve, nothing
//! needs deciding in Rust between those statements, and the PL/pgSQL function `cairn_complete_leaves_and_claim`
//! (migration `0005_complete_leaves_and_claim.sql`) does them all in one call outside any transaction block: its
//! own transaction, committed before it returns, writing the same rows and events in the same order. In every
//! other case it raises SQLSTATE `CRN01`, which rolls the call back whole, and the writer takes the general path.
//! Independent steps (`cairn bench throughput`) and single-step runs (`cairn bench dispatch`) are this case.
//!
//! The function joins by key: migration `0007_leaf_call_joins_by_key.sql` turns merge and hash joins off for it
//! (and nested loops on), because the writer's session caches the function's plans for its whole life, and a
//! plan made while `runs` was small walked all of `runs_pkey` on every call once the table had grown (the one
//! case left is in the migration's comment). Migration `0008_leaf_call_generic_plans.sql` makes those plans
//! generic: under the default plan cache mode each call planned its success update again for its arrays, 171 µs
//! of a call of about 1.6 ms.

use sqlx::{PgConnection, Postgres};

use super::complete_and_claim::GENERAL_PATH;
use crate::error::{StoreError, StoreResult};
use crate::flow::claim;
use crate::flow::finish::{Report, ReportLimits};
use crate::model::{BatchOutcome, ClaimRequest, Claimed, Lease, ReportItem, ReportKind};
use crate::rows::ClaimedRow;

mod read_back;
pub(crate) use read_back::committed;

/// The call: one prepared text whatever the batch's size (the leases and claim groups arrive as arrays, one per
/// column).
const CALL: &str = "SELECT claim_group, run_id, step_id, attempt, action, args, timeout_ms, heartbeat_timeout_ms, \
     deadline_at, checkpoint, available_at, successor_action, child_count \
     FROM cairn_complete_leaves_and_claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";

/// A batch this path can serve: completions only, at least one, under leases that `is_leaf` accepts, each for a
/// different step and with an output within the limit; and any claims (grouped by worker and actions as the
/// general path's claim groups them).
pub(crate) struct LeafBatch<'a> {
    leases: Vec<&'a Lease>,
    outputs: Vec<String>,
    claims: &'a [ClaimRequest],
    /// The claim groups in order of first appearance: the worker, its actions, and the indexes of its requests.
    groups: Vec<(&'a str, &'a [String], Vec<usize>)>,
}

impl<'a> LeafBatch<'a> {
    /// The leaf batch `items` and `claims` make, if they have that shape (`is_leaf` is asked before any output is
    /// serialized to measure it).
    pub(crate) fn of(
        items: &'a [ReportItem],
        claims: &'a [ClaimRequest],
        limits: ReportLimits,
        is_leaf: impl Fn(&Lease) -> bool,
    ) -> Option<Self> {
        let mut steps = std::collections::HashSet::new();
        let shape = !items.is_empty()
            && items.iter().all(|item| {
                matches!(item.kind, ReportKind::Complete(_))
                    && is_leaf(&item.lease)
                    && steps.insert((&item.lease.run_id, &item.lease.step_id))
            });
        if !shape {
            return None;
        }
        let mut outputs = Vec::with_capacity(items.len());
        for item in items {
            let ReportKind::Complete(output) = &item.kind else { return None };
            let text = output.to_string();
            if text.len() > limits.max_output_bytes {
                return None;
            }
            outputs.push(text);
        }
        let mut groups: Vec<(&str, &[String], Vec<usize>)> = Vec::new();
        for (i, claim) in claims.iter().enumerate() {
            match groups.iter_mut().find(|(w, a, _)| *w == claim.worker_id && *a == claim.actions.as_slice()) {
                Some(group) => group.2.push(i),
                None => groups.push((&claim.worker_id, &claim.actions, vec![i])),
            }
        }
        Some(LeafBatch { leases: items.iter().map(|i| &i.lease).collect(), outputs, claims, groups })
    }
}

impl LeafBatch<'_> {
    /// The claim groups as the call's columns: each group's worker, and its actions as a JSON array.
    fn group_columns(&self) -> (Vec<&str>, Vec<String>) {
        let workers = self.groups.iter().map(|(worker, _, _)| *worker).collect();
        let actions =
            self.groups.iter().map(|(_, actions, _)| serde_json::Value::from(actions.to_vec()).to_string()).collect();
        (workers, actions)
    }
}

/// A row of [`CALL`]: a success (`claim_group` 0: only the lease's columns are set) or a step leased for the
/// claim group of that 1-based index.
#[derive(sqlx::FromRow)]
pub(crate) struct CallRow {
    claim_group: i32,
    #[sqlx(flatten)]
    step: CallStep,
}

/// The columns of a [`CallRow`] after `succeeded`, NULL where a success row has none.
#[derive(sqlx::FromRow)]
struct CallStep {
    run_id: String,
    step_id: String,
    attempt: i64,
    action: Option<String>,
    args: Option<String>,
    timeout_ms: Option<i64>,
    heartbeat_timeout_ms: Option<i64>,
    deadline_at: Option<i64>,
    checkpoint: Option<String>,
    available_at: Option<i64>,
    successor_action: Option<String>,
    child_count: Option<i64>,
}

/// Runs the function on `connection`, which must not be inside a transaction block. Returns its rows once the
/// call committed (see [`outcome`]), or `None` when the general path must decide and nothing was written.
///
/// # Errors
/// sqlx's error. Any error but a lost connection rolled the call back; after a lost connection the outcome is
/// unknown, as after a `COMMIT` lost on the general path.
pub(crate) async fn complete_leaves_and_claim(
    connection: &mut PgConnection,
    batch: &LeafBatch<'_>,
    lease_ttl_ms: i64,
    now: i64,
) -> Result<Option<Vec<CallRow>>, sqlx::Error> {
    let runs: Vec<&str> = batch.leases.iter().map(|l| l.run_id.as_str()).collect();
    let steps: Vec<&str> = batch.leases.iter().map(|l| l.step_id.as_str()).collect();
    let attempts: Vec<i64> = batch.leases.iter().map(|l| i64::from(l.attempt)).collect();
    let workers: Vec<&str> = batch.leases.iter().map(|l| l.worker_id.as_str()).collect();
    let (claim_workers, claim_actions) = batch.group_columns();
    let claim_limits: Vec<i64> = batch
        .groups
        .iter()
        .map(|(_, _, requests)| requests.iter().map(|&i| batch.claims[i].limit).fold(0_u32, u32::saturating_add))
        .map(i64::from)
        .collect();
    let result = sqlx::query_as::<Postgres, CallRow>(CALL)
        .bind(runs)
        .bind(steps)
        .bind(attempts)
        .bind(workers)
        .bind(&batch.outputs)
        .bind(now)
        .bind(claim_workers)
        .bind(claim_actions)
        .bind(claim_limits)
        .bind(lease_ttl_ms)
        .fetch_all(connection)
        .await;
    match result {
        Ok(rows) => Ok(Some(rows)),
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(GENERAL_PATH) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The batch's outcome once the call committed `rows`: each report `Succeeded` when its lease is among the
/// successes, `Stale` otherwise (its lease was not current: nothing changed, as on the general path); each claim
/// group's leased steps dealt out to its requests in order, each taking at most its limit, as the general path's
/// `claim_all` does.
pub(crate) fn outcome(rows: Vec<CallRow>, batch: &LeafBatch<'_>, now: i64) -> StoreResult<BatchOutcome> {
    let mut succeeded = std::collections::HashSet::new();
    let mut leased: Vec<Vec<Claimed>> = batch.groups.iter().map(|_| Vec::new()).collect();
    for row in rows {
        if row.claim_group == 0 {
            succeeded.insert((row.step.run_id, row.step.step_id, row.step.attempt));
            continue;
        }
        let group = usize::try_from(row.claim_group - 1).ok().filter(|&g| g < batch.groups.len());
        let Some(group) = group else { return Err(StoreError::corrupt("claim_group", row.claim_group)) };
        leased[group].push(row.step.claimed(batch.groups[group].0, now)?);
    }
    let reports = batch
        .leases
        .iter()
        .map(|l| {
            let key = (l.run_id.clone(), l.step_id.clone(), i64::from(l.attempt));
            if succeeded.contains(&key) { Report::Succeeded } else { Report::Stale }
        })
        .collect();
    let mut claimed: Vec<Vec<Claimed>> = batch.claims.iter().map(|_| Vec::new()).collect();
    for ((_, _, requests), steps) in batch.groups.iter().zip(leased) {
        let mut steps = steps.into_iter();
        for &i in requests {
            claimed[i] = steps.by_ref().take(usize::try_from(batch.claims[i].limit).unwrap_or(usize::MAX)).collect();
        }
    }
    Ok(BatchOutcome { created: Vec::new(), reports, claimed, ready_now: 0, handed: Vec::new() })
}

impl CallStep {
    /// The leased step, leased to `worker_id`; its args hold no placeholder (the function checks).
    fn claimed(self, worker_id: &str, now: i64) -> StoreResult<Claimed> {
        let missing = |column| StoreError::corrupt(column, "NULL in a leased step's row");
        let row = ClaimedRow {
            run_id: self.run_id,
            step_id: self.step_id,
            attempt: self.attempt,
            action: self.action.ok_or_else(|| missing("steps.action"))?,
            args: self.args.ok_or_else(|| missing("steps.args"))?,
            timeout_ms: self.timeout_ms.ok_or_else(|| missing("steps.timeout_ms"))?,
            heartbeat_timeout_ms: self.heartbeat_timeout_ms,
            deadline_at: self.deadline_at.ok_or_else(|| missing("steps.deadline_at"))?,
            checkpoint: self.checkpoint,
            available_at: self.available_at,
            successor_action: self.successor_action,
            child_count: self.child_count,
            // The function leaves steps with repaired args to the general path.
            args_revision: 0,
        };
        let args = serde_json::from_str(&row.args).map_err(|e| StoreError::corrupt("steps.args", e))?;
        let lease = claim::lease_of(&row, worker_id)?;
        claim::claimed(row, lease, args, now)
    }
}

#[cfg(test)]
mod tests {
    use cairn_core::catalog::StaticCatalog;
    use cairn_core::validate::{Limits, validate_value};
    use serde_json::{Value, json};
    use sqlx::PgPool;

    use super::*;
    use crate::{NewRun, Store};

    const T0: i64 = 1_767_225_600_000;
    const LIMITS: ReportLimits = ReportLimits { max_output_bytes: 1 << 20 };

    fn noop(id: &str, deps: &[&str], args: Value) -> Value {
        json!({"id": id, "action": "noop", "depends_on": deps, "args": args})
    }

    /// Creates run `run_id` of `steps` at `now` with input `{"x": 1}`.
    async fn submit(store: &Store, run_id: &str, steps: Value, now: i64) {
        let doc = json!({"goal": "g", "steps": steps});
        let plan = validate_value(&doc, &StaticCatalog::builtin(), &Limits::default()).plan.expect("validates");
        let timers = vec![None; plan.steps.len()];
        let run = NewRun {
            run_id: run_id.into(),
            plan,
            input: json!({"x": 1}),
            idempotency_key: None,
            labels: Default::default(),
            timers,
            now_ms: now,
        };
        store.create_run(&run).await.expect("created");
    }

    /// A store holding run `r1` of `steps`, every step of it leased to `w1`; returns the store and the leases.
    async fn leased(pool: PgPool, steps: Value) -> (Store, Vec<Lease>) {
        let store = Store::Postgres(pool);
        store.migrate().await.expect("migrations apply");
        submit(&store, "r1", steps, T0).await;
        let claim = ClaimRequest { worker_id: "w1".into(), actions: vec!["noop".into()], limit: 100, now_ms: T0 };
        let claimed = store.claim(&claim, 30_000).await.expect("claimed");
        (store, claimed.into_iter().map(|c| c.lease).collect())
    }

    /// The call completing `leases` with a claim for up to 4 `noop` steps, at `T0 + 1`.
    async fn call(store: &Store, leases: &[&Lease]) -> Option<BatchOutcome> {
        let Store::Postgres(pool) = store else { unreachable!("a PostgreSQL store") };
        let items: Vec<ReportItem> = leases
            .iter()
            .map(|l| ReportItem { lease: (*l).clone(), kind: ReportKind::Complete(json!({"x": 1})) })
            .collect();
        let claims = [ClaimRequest { worker_id: "w1".into(), actions: vec!["noop".into()], limit: 4, now_ms: 0 }];
        let batch = LeafBatch::of(&items, &claims, LIMITS, |_| true).expect("a leaf batch's shape");
        let mut connection = pool.acquire().await.expect("a connection");
        let rows = complete_leaves_and_claim(&mut connection, &batch, 30_000, T0 + 1).await.expect("no database error");
        rows.map(|rows| outcome(rows, &batch, T0 + 1).expect("an outcome"))
    }

    /// Everything a call writes: every step's status, attempt, lease and update time; every attempt's status;
    /// every run's status, counter and update time; how many events.
    async fn state(store: &Store) -> Vec<String> {
        const STEPS: &str = "SELECT run_id || ' ' || step_id || ' ' || status || ' ' || attempt || ' ' || \
             COALESCE(lease_owner, '-') || ' ' || updated_at || ' ' || COALESCE(output, '-') FROM steps \
             ORDER BY run_id, step_id";
        const ATTEMPTS: &str = "SELECT run_id || ' ' || step_id || ' ' || attempt || ' ' || status FROM attempts \
             ORDER BY run_id, step_id, attempt";
        const RUNS: &str = "SELECT id || ' ' || status || ' ' || open_steps || ' ' || updated_at FROM runs ORDER BY id";
        const EVENTS: &str = "SELECT count(*)::text || ' events' FROM run_events";
        let Store::Postgres(pool) = store else { unreachable!("a PostgreSQL store") };
        let mut lines = Vec::new();
        for sql in [STEPS, ATTEMPTS, RUNS, EVENTS] {
            lines.extend(sqlx::query_scalar::<Postgres, String>(sql).fetch_all(pool).await.expect("read"));
        }
        lines
    }

    #[sqlx::test(migrations = false)]
    #[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
    async fn leaves_are_completed_and_the_next_steps_leased_in_one_call(pool: PgPool) {
        let (store, leases) = leased(pool, json!([noop("a", &[], json!({})), noop("b", &[], json!({}))])).await;
        submit(&store, "r2", json!([noop("c", &[], json!({}))]), T0).await;
        let stale = Lease { attempt: 2, ..leases[1].clone() };

        let outcome = call(&store, &[&leases[0], &stale]).await.expect("the call takes the batch");

        assert_eq!(outcome.reports, [Report::Succeeded, Report::Stale], "the other attempt's report changes nothing");
        let claimed: Vec<&str> = outcome.claimed[0].iter().map(|c| c.lease.step_id.as_str()).collect();
        assert_eq!(claimed, ["c"]);
        assert!(outcome.claimed[0][0].completion.is_leaf());
        let statuses: Vec<(String, String)> =
            store.steps("r1").await.expect("steps").into_iter().map(|s| (s.id, s.status.to_string())).collect();
        assert_eq!(statuses, [("a".into(), "succeeded".into()), ("b".into(), "running".into())]);
        assert_eq!(store.run("r1").await.expect("run").expect("exists").open_steps, 1, "b keeps r1 open");
    }

    #[sqlx::test(migrations = false)]
    #[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
    async fn after_a_lost_connection_the_read_back_finds_the_call_only_if_it_committed(pool: PgPool) {
        let (store, leases) = leased(pool, json!([noop("a", &[], json!({})), noop("b", &[], json!({}))])).await;
        submit(&store, "r2", json!([noop("c", &[], json!({}))]), T0).await;
        let Store::Postgres(pg) = &store else { unreachable!("a PostgreSQL store") };
        let stale = Lease { attempt: 2, ..leases[1].clone() };
        let items: Vec<ReportItem> = [&leases[0], &stale]
            .iter()
            .map(|l| ReportItem { lease: (*l).clone(), kind: ReportKind::Complete(json!({})) })
            .collect();
        let claims = [ClaimRequest { worker_id: "w1".into(), actions: vec!["noop".into()], limit: 1, now_ms: 0 }];
        let batch = LeafBatch::of(&items, &claims, LIMITS, |_| true).expect("a leaf batch's shape");
        assert!(committed(pg, &batch, T0 + 1).await.expect("read").is_none(), "nothing committed yet");

        let mut connection = pg.acquire().await.expect("a connection");
        let rows = complete_leaves_and_claim(&mut connection, &batch, 30_000, T0 + 1).await.expect("ok");
        assert_eq!(outcome(rows.expect("taken"), &batch, T0 + 1).expect("an outcome").claimed[0].len(), 1);

        let rows = committed(pg, &batch, T0 + 1).await.expect("read").expect("the call committed");
        let read = outcome(rows, &batch, T0 + 1).expect("an outcome");
        assert_eq!(read.reports, [Report::Succeeded, Report::Stale], "answered as the call would have");
        let leased: Vec<(&str, u32)> =
            read.claimed[0].iter().map(|c| (c.lease.step_id.as_str(), c.lease.attempt)).collect();
        assert_eq!(leased, [("c", 1)], "the step the call leased is handed out, not left to lease expiry");
        sqlx::query("UPDATE steps SET heartbeat_at = heartbeat_at WHERE run_id = 'r2'").execute(pg).await.expect("ok");
        let rows = committed(pg, &batch, T0 + 1).await.expect("read").expect("the call committed");
        assert_eq!(
            outcome(rows, &batch, T0 + 1).expect("an outcome").claimed,
            [Vec::new()],
            "a row version another transaction wrote is not the call's"
        );
        assert!(committed(pg, &batch, T0 + 2).await.expect("read").is_none(), "another instant: not this call");
        sqlx::query("UPDATE steps SET status = 'failed' WHERE run_id = 'r1' AND step_id = 'a'")
            .execute(pg)
            .await
            .expect("updated");
        assert!(committed(pg, &batch, T0 + 1).await.expect("read").is_none(), "only a succeeded step counts");
    }

    #[sqlx::test(migrations = false)]
    #[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
    async fn the_read_back_deals_leased_steps_as_the_call_did_and_only_for_one_writing_transaction(pool: PgPool) {
        let (store, leases) = leased(pool, json!([noop("a", &[], json!({})), noop("b", &[], json!({}))])).await;
        let sleep = json!({"id": "s1", "action": "sleep", "args": {"duration_ms": 1}});
        // Ready oldest first: n1, n2, s1. The first group serves noop only, the second noop and sleep.
        submit(&store, "r2", json!([noop("n1", &[], json!({}))]), T0 - 3).await;
        submit(&store, "r3", json!([noop("n2", &[], json!({}))]), T0 - 2).await;
        submit(&store, "r4", json!([sleep]), T0 - 1).await;
        let Store::Postgres(pg) = &store else { unreachable!("a PostgreSQL store") };
        let items: Vec<ReportItem> =
            leases.iter().map(|l| ReportItem { lease: l.clone(), kind: ReportKind::Complete(json!({})) }).collect();
        let claim = |actions: &[&str], limit| ClaimRequest {
            worker_id: "w1".into(),
            actions: actions.iter().map(|a| (*a).to_owned()).collect(),
            limit,
            now_ms: 0,
        };
        let claims = [claim(&["noop"], 1), claim(&["noop", "sleep"], 2)];
        let batch = LeafBatch::of(&items, &claims, LIMITS, |_| true).expect("a leaf batch's shape");
        let mut connection = pg.acquire().await.expect("a connection");
        let rows = complete_leaves_and_claim(&mut connection, &batch, 30_000, T0 + 1).await.expect("ok");
        let answered = outcome(rows.expect("taken"), &batch, T0 + 1).expect("an outcome");
        let ids = |outcome: &BatchOutcome| -> Vec<Vec<String>> {
            outcome.claimed.iter().map(|c| c.iter().map(|s| s.lease.step_id.clone()).collect()).collect()
        };
        assert_eq!(ids(&answered), [vec!["n1"], vec!["n2", "s1"]], "the call's own answer");

        let rows = committed(pg, &batch, T0 + 1).await.expect("read").expect("the call committed");
        let read = outcome(rows, &batch, T0 + 1).expect("an outcome");

        assert_eq!(ids(&read), ids(&answered), "each step goes to the claim group that leased it");
        sqlx::query("UPDATE steps SET updated_at = updated_at WHERE run_id = 'r1' AND step_id = 'a'")
            .execute(pg)
            .await
            .expect("a written again");
        let rows = committed(pg, &batch, T0 + 1).await.expect("read").expect("successes are still found");
        let read = outcome(rows, &batch, T0 + 1).expect("an outcome");
        assert_eq!(read.reports, [Report::Succeeded, Report::Succeeded]);
        assert_eq!(read.claimed, [Vec::new(), Vec::new()], "two writing transactions: which leased is not known");
    }

    #[sqlx::test(migrations = false)]
    #[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
    async fn a_step_with_a_dependent_falls_back_with_nothing_written(pool: PgPool) {
        let (store, leases) = leased(pool, json!([noop("a", &[], json!({})), noop("b", &["a"], json!({}))])).await;
        let before = state(&store).await;

        assert!(call(&store, &[&leases[0]]).await.is_none(), "releasing b is decided in Rust");

        assert_eq!(state(&store).await, before);
    }

    #[sqlx::test(migrations = false)]
    #[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
    async fn a_cancel_under_way_falls_back_with_nothing_written(pool: PgPool) {
        let (store, leases) = leased(pool, json!([noop("a", &[], json!({})), noop("b", &[], json!({}))])).await;
        let Store::Postgres(pg) = &store else { unreachable!() };
        sqlx::query("UPDATE runs SET cancel_requested = 1 WHERE id = 'r1'").execute(pg).await.expect("marked");
        let before = state(&store).await;

        assert!(call(&store, &[&leases[0]]).await.is_none(), "the cancel decides");

        assert_eq!(state(&store).await, before);
    }

    #[sqlx::test(migrations = false)]
    #[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
    async fn a_leased_step_with_a_placeholder_falls_back_with_nothing_written(pool: PgPool) {
        let (store, leases) = leased(pool, json!([noop("a", &[], json!({})), noop("b", &[], json!({}))])).await;
        submit(&store, "r2", json!([noop("p", &[], json!({"v": "$input.x"}))]), T0).await;
        let before = state(&store).await;

        assert!(call(&store, &[&leases[0]]).await.is_none(), "resolving p belongs to the claim's transaction");

        assert_eq!(state(&store).await, before);
    }
}
