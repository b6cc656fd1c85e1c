//! A chain step in one round trip: the batch writer's path for a batch that is one completion with the claim
//! riding on it (`docs/design/fast-path.md`).
//!
//! The general path for that batch is `BEGIN`, the success statement, the claim, `COMMIT`: four round trips to
//! the server, each a wake-up of both processes. When the completed step has one dependent that the success
//! makes ready with nothing to decide in Rust, the PL/pgSQL function `cairn_complete_and_claim` (migration
//! `0004_complete_and_claim.sql`, replaced by `0006_chain_call_child_count.sql` to return the dependent's
//! `child_count` too) does all of it in one call outside any transaction block, so the call is
//! its own transaction and commits before it returns: the same rows and the same events in the same order as
//! the general path, and the same "finished and released in one transaction" (contract §6). In every other
//! case the function raises SQLSTATE `CRN01`, which rolls the call back whole, and the writer takes the general
//! path.

use sqlx::{PgConnection, PgPool, Postgres};

use crate::error::{StoreError, StoreResult};
use crate::flow::claim;
use crate::flow::finish::{Report, ReportLimits};
use crate::model::{BatchOutcome, ClaimRequest, Lease, ReportItem, ReportKind};
use crate::rows::ClaimedRow;

/// SQLSTATE `cairn_complete_and_claim` raises when the general path must decide (nothing was written).
pub(crate) const GENERAL_PATH: &str = "CRN01";

/// The call: one prepared text (the function's own statements are planned once per connection).
const CALL: &str = "SELECT run_id, step_id, attempt, action, args, timeout_ms, heartbeat_timeout_ms, deadline_at, \
     checkpoint, available_at, successor_action, child_count \
     FROM cairn_complete_and_claim($1, $2, $3, $4, $5, $6, $7, $8)";

/// A batch this path can serve: one completion whose output fits the limit, and one claim for at least one
/// step by the same worker (the claim a worker sends with its completion), which `worth_a_call` accepts.
pub(crate) struct Candidate<'a> {
    lease: &'a Lease,
    output: String,
    claim: &'a ClaimRequest,
}

impl<'a> Candidate<'a> {
    /// The candidate in a batch of `items` and `claims`, if the batch has that shape and `worth_a_call` accepts
    /// the completion's lease and the claim (checked before the output is serialized to measure it).
    pub(crate) fn of(
        items: &'a [ReportItem],
        claims: &'a [ClaimRequest],
        limits: ReportLimits,
        worth_a_call: impl FnOnce(&Lease, &ClaimRequest) -> bool,
    ) -> Option<Self> {
        let ([item], [claim]) = (items, claims) else { return None };
        let ReportKind::Complete(output) = &item.kind else { return None };
        if claim.worker_id != item.lease.worker_id || claim.limit == 0 || !worth_a_call(&item.lease, claim) {
            return None;
        }
        let output = output.to_string();
        (output.len() <= limits.max_output_bytes).then_some(Candidate { lease: &item.lease, output, claim })
    }
}

/// Runs the function on `connection`, which must not be inside a transaction block. Returns the dependent's
/// row once the call committed (the completion succeeded, the claim got the dependent: see [`outcome`]), or
/// `None` when the general path must decide and nothing was written.
///
/// # Errors
/// sqlx's error. Any error but a lost connection rolled the call back; after a lost connection, [`committed`]
/// tells whether the call committed.
pub(crate) async fn complete_and_claim(
    connection: &mut PgConnection,
    candidate: &Candidate<'_>,
    lease_ttl_ms: i64,
    now: i64,
) -> Result<Option<ClaimedRow>, sqlx::Error> {
    let Candidate { lease, output, claim } = candidate;
    let result = leased_by(CALL, lease)
        .bind(output)
        .bind(now)
        .bind(&claim.actions)
        .bind(lease_ttl_ms)
        .fetch_one(connection)
        .await;
    match result {
        Ok(row) => Ok(Some(row)),
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(GENERAL_PATH) => Ok(None),
        Err(e) => Err(e),
    }
}

/// `sql`, returning [`ClaimedRow`]s, with the lease bound as `$1` run, `$2` step, `$3` attempt, `$4` worker.
fn leased_by<'q>(
    sql: &'static str,
    lease: &'q Lease,
) -> sqlx::query::QueryAs<'q, Postgres, ClaimedRow, sqlx::postgres::PgArguments> {
    sqlx::query_as::<Postgres, ClaimedRow>(sql)
        .bind(&lease.run_id)
        .bind(&lease.step_id)
        .bind(i64::from(lease.attempt))
        .bind(&lease.worker_id)
}

/// Whether a call for `candidate` at `now` committed, read on a fresh connection from `pool` after the call's
/// connection was lost: the dependent's row as the call returned it if so (the completed step succeeded under
/// the candidate's attempt at `now`, and its dependent is running under the same worker, started at `now`: the
/// call's own writes, which nothing else makes at that instant for that lease), `None` if the read does not
/// find them. `None` means nothing was written except in two rare cases: a server process that still runs the
/// call after losing its client (a network cut, not a terminated session) commits after this read; or the
/// dependent left `running` in between (a cancel, or its lease expired during a slow reconnect). Then the general
/// path finds the completion stale and the dependent ends by cancel or lease expiry, as it would have before
/// this read existed.
///
/// # Errors
/// sqlx's error when the read fails on a live connection, or on every pooled one (the outcome is then unknown,
/// as after a lost `COMMIT`).
pub(crate) async fn committed(
    pool: &PgPool,
    candidate: &Candidate<'_>,
    now: i64,
) -> Result<Option<ClaimedRow>, sqlx::Error> {
    let Candidate { lease, .. } = candidate;
    // The pool's other connections may have died with the call's (a database restart).
    super::on_a_live_connection(pool, |mut c| {
        let query = leased_by(COMMITTED, lease).bind(now);
        async move { query.fetch_optional(&mut *c).await }
    })
    .await
}

/// The read of [`committed`]. Index: `steps` PK, `step_edges` PK.
const COMMITTED: &str = "SELECT d.run_id, d.step_id, d.attempt, d.action, d.args, d.timeout_ms, \
     d.heartbeat_timeout_ms, d.deadline_at, d.checkpoint, d.available_at, d.successor_action, d.child_count \
     FROM steps p JOIN step_edges e ON e.run_id = p.run_id AND e.parent = p.step_id \
     JOIN steps d ON d.run_id = e.run_id AND d.step_id = e.child \
     WHERE p.run_id = $1 AND p.step_id = $2 AND p.attempt = $3 AND (p.status = 'succeeded') IS TRUE \
       AND p.finished_at = $5 AND (d.status = 'running') IS TRUE AND d.lease_owner = $4 AND d.started_at = $5";

/// The batch's outcome once the call committed `row`: the completion succeeded, and the claim got the
/// dependent, whose args hold no placeholder (the function checks).
pub(crate) fn outcome(row: ClaimedRow, candidate: &Candidate<'_>, now: i64) -> StoreResult<BatchOutcome> {
    let args = serde_json::from_str(&row.args).map_err(|e| StoreError::corrupt("steps.args", e))?;
    let lease = claim::lease_of(&row, &candidate.claim.worker_id)?;
    Ok(BatchOutcome {
        created: Vec::new(),
        reports: vec![Report::Succeeded],
        claimed: vec![vec![claim::claimed(row, lease, args, now)?]],
        ready_now: 0,
        handed: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use crate::Batch;
    use cairn_core::catalog::StaticCatalog;
    use cairn_core::validate::{Limits, validate_value};
    use serde_json::{Value, json};
    use sqlx::PgPool;

    use super::*;
    use crate::{NewRun, Store};

    const T0: i64 = 1_767_225_600_000;
    const LIMITS: ReportLimits = ReportLimits { max_output_bytes: 1 << 20 };

    /// `NewRun::timers`: per step, its `not_before` instant and text.
    type Timers = Vec<Option<(i64, String)>>;

    /// A store holding run `r1` of `steps`, with its root `a` leased to `w1`; returns the store and that lease.
    async fn leased_root(pool: PgPool, steps: Value, timers: Timers) -> (Store, Lease) {
        let store = Store::Postgres(pool);
        store.migrate().await.expect("migrations apply");
        let report =
            validate_value(&json!({"goal": "g", "steps": steps}), &StaticCatalog::builtin(), &Limits::default());
        let errors: Vec<String> = report.errors().map(|e| format!("{e:?}")).collect();
        let plan = report.plan.unwrap_or_else(|| panic!("the plan validates: {errors:?}"));
        let run = NewRun {
            run_id: "r1".into(),
            plan,
            input: json!({}),
            idempotency_key: None,
            labels: Default::default(),
            timers,
            now_ms: T0,
        };
        store.create_run(&run).await.expect("created");
        let claim = ClaimRequest { worker_id: "w1".into(), actions: vec!["noop".into()], limit: 1, now_ms: T0 };
        let claimed = store.claim(&claim, 30_000).await.expect("claimed");
        let a = claimed.into_iter().find(|c| c.lease.step_id == "a").expect("a is leased");
        (store, a.lease)
    }

    /// The call for `lease`'s completion with a claim for `actions`, at `T0 + 1`.
    async fn call(store: &Store, lease: &Lease, actions: &[&str]) -> Option<ClaimedRow> {
        let Store::Postgres(pool) = store else { unreachable!("a PostgreSQL store") };
        let items = [ReportItem { lease: lease.clone(), kind: ReportKind::Complete(json!({"x": 1})) }];
        let actions = actions.iter().map(|a| (*a).to_owned()).collect();
        let claims = [ClaimRequest { worker_id: lease.worker_id.clone(), actions, limit: 1, now_ms: T0 + 1 }];
        let candidate =
            Candidate::of(&items, &claims, LIMITS, |_, _| true).expect("the batch has the candidate's shape");
        let mut connection = pool.acquire().await.expect("a connection");
        complete_and_claim(&mut connection, &candidate, 30_000, T0 + 1).await.expect("no database error")
    }

    fn noop(id: &str, deps: &[&str], args: Value) -> Value {
        json!({"id": id, "action": "noop", "depends_on": deps, "args": args})
    }

    /// A root `sleep` step: ready from the start, never leased by the root's claim (which serves `noop` only).
    fn sleep(id: &str) -> Value {
        json!({"id": id, "action": "sleep", "args": {"duration_ms": 1}})
    }

    /// Everything a call writes, for `r1`: each step's status, attempt, pending dependencies, lease and update
    /// time; each attempt's status; the run's counter and update time; how many events.
    async fn state(store: &Store) -> Vec<String> {
        const STEPS: &str = "SELECT step_id || ' ' || status || ' ' || attempt || ' ' || pending_deps || ' ' || \
             COALESCE(lease_owner, '-') || ' ' || updated_at || ' ' || COALESCE(output, '-') FROM steps \
             WHERE run_id = 'r1' ORDER BY step_id";
        const ATTEMPTS: &str = "SELECT step_id || ' ' || attempt || ' ' || status FROM attempts \
             WHERE run_id = 'r1' ORDER BY step_id, attempt";
        const RUN: &str = "SELECT 'run ' || open_steps || ' ' || updated_at || ' ' || \
             (SELECT count(*) FROM run_events WHERE run_id = 'r1') || ' events' FROM runs WHERE id = 'r1'";
        let Store::Postgres(pool) = store else { unreachable!("a PostgreSQL store") };
        let mut lines = Vec::new();
        for sql in [STEPS, ATTEMPTS, RUN] {
            lines.extend(sqlx::query_scalar::<Postgres, String>(sql).fetch_all(pool).await.expect("read"));
        }
        lines
    }

    #[sqlx::test(migrations = false)]
    #[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
    async fn a_chain_step_is_completed_and_its_dependent_leased_in_one_call(pool: PgPool) {
        let (store, a) =
            leased_root(pool, json!([noop("a", &[], json!({})), noop("b", &["a"], json!({}))]), vec![]).await;

        let row = call(&store, &a, &["noop"]).await.expect("the call takes the chain step");

        assert_eq!((row.step_id.as_str(), row.attempt, row.deadline_at), ("b", 1, T0 + 1 + 20_000));
        assert_eq!(row.child_count, Some(0), "the call says b is a leaf, so its completion can take the leaf call");
        let statuses: Vec<(String, String)> =
            store.steps("r1").await.expect("steps").into_iter().map(|s| (s.id, s.status.to_string())).collect();
        assert_eq!(statuses, [("a".into(), "succeeded".into()), ("b".into(), "running".into())]);
        assert_eq!(run_open_steps(&store).await, 1, "a is counted against the run, b keeps it open");
    }

    async fn run_open_steps(store: &Store) -> i64 {
        store.run("r1").await.expect("run").expect("exists").open_steps
    }

    #[sqlx::test(migrations = false)]
    #[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
    async fn every_case_the_call_cannot_decide_alone_falls_back_with_nothing_written(pool: PgPool) {
        let when = json!({"id": "b", "action": "noop", "depends_on": ["a"], "args": {}, "when": "true"});
        let approval =
            json!({"id": "b", "action": "noop", "depends_on": ["a"], "args": {}, "approval": {"required": true}});
        let unserved = json!({"id": "b", "action": "sleep", "depends_on": ["a"], "args": {"duration_ms": 1}});
        let cases: Vec<(&str, Value, &[&str], Timers)> = vec![
            ("a leaf: the run may end", json!([noop("a", &[], json!({}))]), &["noop"], vec![]),
            (
                "two dependents",
                json!([noop("a", &[], json!({})), noop("b", &["a"], json!({})), noop("c", &["a"], json!({}))]),
                &["noop"],
                vec![],
            ),
            (
                "a dependent with another dependency",
                json!([noop("a", &[], json!({})), sleep("z"), noop("b", &["a", "z"], json!({}))]),
                &["noop"],
                vec![],
            ),
            (
                "a placeholder",
                json!([noop("a", &[], json!({})), noop("b", &["a"], json!({"x": "$a.output.x"}))]),
                &["noop"],
                vec![],
            ),
            ("a `when`", json!([noop("a", &[], json!({})), when]), &["noop"], vec![]),
            ("an approval", json!([noop("a", &[], json!({})), approval]), &["noop"], vec![]),
            ("an action the worker does not serve", json!([noop("a", &[], json!({})), unserved]), &["noop"], vec![]),
            (
                "a timer not yet due",
                json!([noop("a", &[], json!({})), noop("b", &["a"], json!({}))]),
                &["noop"],
                vec![None, Some((T0 + 60_000, "in 1m".into()))],
            ),
            (
                "an older ready step",
                json!([noop("a", &[], json!({})), sleep("z"), noop("b", &["a"], json!({}))]),
                &["noop", "sleep"],
                vec![],
            ),
        ];
        for (case, steps, actions, timers) in cases {
            // Named as the end-to-end harness names its databases, so its sweep drops one a failed run left.
            let db = format!("cairn_t_{}_one_call", std::process::id());
            let (store, a) = leased_root(fresh(&pool, &db).await, steps, timers).await;
            let before = state(&store).await;

            assert!(call(&store, &a, actions).await.is_none(), "{case}: the general path decides");

            assert_eq!(state(&store).await, before, "{case}: nothing was written");
            let Store::Postgres(case_pool) = store else { unreachable!() };
            case_pool.close().await;
            sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {db}"))).execute(&pool).await.expect("dropped");
        }
    }

    #[sqlx::test(migrations = false)]
    #[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
    async fn a_stale_lease_falls_back_with_nothing_written(pool: PgPool) {
        let (store, a) =
            leased_root(pool, json!([noop("a", &[], json!({})), noop("b", &["a"], json!({}))]), vec![]).await;
        let before = state(&store).await;
        let other = Lease { worker_id: "w2".into(), ..a.clone() };
        let later = Lease { attempt: 2, ..a };

        assert!(call(&store, &other, &["noop"]).await.is_none(), "another worker's report");
        assert!(call(&store, &later, &["noop"]).await.is_none(), "another attempt's report");

        assert_eq!(state(&store).await, before);
    }

    #[sqlx::test(migrations = false)]
    #[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
    async fn the_writer_tries_one_call_only_for_steps_whose_successor_the_claim_serves(pool: PgPool) {
        let store = Store::Postgres(pool);
        store.migrate().await.expect("migrations apply");
        let steps = json!([
            noop("a", &[], json!({})), noop("b", &["a"], json!({})),
            {"id": "c", "action": "sleep", "depends_on": ["b"], "args": {"duration_ms": 1}},
            noop("x", &[], json!({})),
            noop("y", &[], json!({})), noop("z", &["y"], json!({"v": "$y.output"})),
        ]);
        let plan = validate_value(&json!({"goal": "g", "steps": steps}), &StaticCatalog::builtin(), &Limits::default())
            .plan
            .expect("the plan validates");
        let run = NewRun {
            run_id: "r1".into(),
            plan,
            input: json!({}),
            idempotency_key: None,
            labels: Default::default(),
            timers: vec![],
            now_ms: T0,
        };
        store.create_run(&run).await.expect("created");
        let mut writer = store.batch_writer();
        let nobody = |_: usize| Vec::new();
        let claim = |limit| [ClaimRequest { worker_id: "w1".into(), actions: vec!["noop".into()], limit, now_ms: 0 }];
        let first = writer
            .write_batch(&Batch {
                runs: &[],
                reports: &[],
                claims: &claim(4),
                limits: LIMITS,
                lease_ttl_ms: 30_000,
                now_ms: T0,
                handoff: &nobody,
            })
            .await
            .expect("commits");
        let lease = |id: &str| first.claimed[0].iter().find(|c| c.lease.step_id == id).expect("leased").lease.clone();
        let (a, x, y) = (lease("a"), lease("x"), lease("y"));

        assert_eq!(
            writer.postgres().expect("a PostgreSQL writer").successor_of(&a),
            Some("noop"),
            "a's one dependent b can be leased with a's completion"
        );
        assert_eq!(
            writer.postgres().expect("a PostgreSQL writer").successor_of(&x),
            None,
            "x is a leaf: its completion goes the general way"
        );
        assert_eq!(
            writer.postgres().expect("a PostgreSQL writer").successor_of(&y),
            None,
            "z has a placeholder to resolve: the general way"
        );

        let complete = |lease: &Lease| [ReportItem { lease: lease.clone(), kind: ReportKind::Complete(json!({})) }];
        let done = writer
            .write_batch(&Batch {
                runs: &[],
                reports: &complete(&a),
                claims: &claim(1),
                limits: LIMITS,
                lease_ttl_ms: 30_000,
                now_ms: T0 + 1,
                handoff: &nobody,
            })
            .await
            .expect("ok");

        let b = &done.claimed[0][0];
        assert_eq!((b.lease.step_id.as_str(), b.completion.successor_action()), ("b", Some("sleep")));
        assert_eq!(
            writer.postgres().expect("a PostgreSQL writer").successor_of(&a),
            None,
            "a reported lease is forgotten"
        );
        assert_eq!(
            writer.postgres().expect("a PostgreSQL writer").successor_of(&b.lease),
            Some("sleep"),
            "the call's own claim is remembered too"
        );
    }

    #[sqlx::test(migrations = false)]
    #[cfg_attr(not(cairn_pg), ignore = "DATABASE_URL is not set: PostgreSQL tests skipped")]
    async fn after_a_lost_connection_the_read_back_finds_the_call_only_if_it_committed(pool: PgPool) {
        let (store, a) =
            leased_root(pool, json!([noop("a", &[], json!({})), noop("b", &["a"], json!({}))]), vec![]).await;
        let Store::Postgres(pool) = &store else { unreachable!("a PostgreSQL store") };
        let items = [ReportItem { lease: a.clone(), kind: ReportKind::Complete(json!({"x": 1})) }];
        let claims =
            [ClaimRequest { worker_id: a.worker_id.clone(), actions: vec!["noop".into()], limit: 1, now_ms: 0 }];
        let candidate = Candidate::of(&items, &claims, LIMITS, |_, _| true).expect("a candidate");

        assert!(committed(pool, &candidate, T0 + 1).await.expect("read").is_none(), "nothing committed yet");
        let mut connection = pool.acquire().await.expect("a connection");
        let row = complete_and_claim(&mut connection, &candidate, 30_000, T0 + 1).await.expect("ok").expect("taken");

        let read = committed(pool, &candidate, T0 + 1).await.expect("read").expect("the call committed");
        assert_eq!(format!("{read:?}"), format!("{row:?}"), "the read gives the row the call returned");
        assert!(committed(pool, &candidate, T0 + 2).await.expect("read").is_none(), "another instant: not this call");
    }

    /// A fresh database `name` on the server behind `pool`, for one case.
    async fn fresh(pool: &PgPool, name: &str) -> PgPool {
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name}")))
            .execute(pool)
            .await
            .expect("dropped");
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(pool).await.expect("created");
        let options = pool.connect_options().as_ref().clone().database(name);
        PgPool::connect_with(options).await.expect("connected")
    }
}
