//! Arrange helpers shared by the contract behaviours: fresh databases, plans built through validation, and short
//! forms of the store calls the tests repeat. Nothing here asserts a contract; failures here are set-up bugs.

use std::path::PathBuf;

use cairn_core::catalog::StaticCatalog;
use cairn_core::failure::Failure;
use cairn_core::plan::Plan;
use cairn_core::validate::{Limits, validate_value};
use cairn_store::{
    ClaimRequest, Claimed, CreateOutcome, Lease, NewRun, Report, ReportLimits, RunEvent, RunSummary, StepSummary, Store,
};
use serde_json::{Value, json};

/// 2026-01-01T00:00:00Z: the start of every test's timeline.
pub const T0: i64 = 1_767_225_600_000;
/// Lease time-to-live passed to `claim` and `heartbeat`, in ms.
pub const TTL: i64 = 30_000;
/// Report limits generous enough never to matter unless a test says so.
pub const LIMITS: ReportLimits = ReportLimits { max_output_bytes: 1 << 20 };
/// Every built-in action, for claims that should see every ready step.
pub const ALL_ACTIONS: &[&str] =
    &["noop", "sleep", "condition.eval", "http.request", "weather.forecast", "notify.send", "llm.chat"];

/// A SQLite store on a file in a temporary directory that is removed when this value drops.
pub struct SqliteDb {
    /// The connected, migrated store.
    pub store: Store,
    dir: PathBuf,
}

impl SqliteDb {
    /// Creates `x.db` in a directory unique to this process and test name.
    pub async fn create(test_name: &str) -> SqliteDb {
        let safe: String = test_name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        let dir = std::env::temp_dir().join(format!("cairn-store-contract-{}-{safe}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the temporary directory can be created");
        let url = format!("sqlite:{}", dir.join("x.db").display());
        let store = Store::connect(&url).await.expect("a fresh SQLite file connects and migrates");
        SqliteDb { store, dir }
    }
}

impl Drop for SqliteDb {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Validates `doc` with the built-in catalog and returns the plan with defaults applied.
///
/// # Panics
/// When the document is not a valid plan (a test set-up bug), listing the diagnostics.
pub fn plan(doc: &Value) -> Plan {
    let limits = Limits { max_steps: 10_000, ..Limits::default() };
    let report = validate_value(doc, &StaticCatalog::builtin(), &limits);
    match report.plan {
        Some(plan) => plan,
        None => panic!("test plan must validate: {:#?}", report.errors().collect::<Vec<_>>()),
    }
}

/// A run of `doc` created at [`T0`] with no timers, no idempotency key and the plan's `input` (or `{}`).
pub fn new_run(run_id: &str, doc: &Value) -> NewRun {
    let plan = plan(doc);
    NewRun {
        run_id: run_id.into(),
        input: plan.input.clone().unwrap_or_else(|| json!({})),
        timers: vec![None; plan.steps.len()],
        plan,
        idempotency_key: None,
        labels: Default::default(),
        now_ms: T0,
    }
}

/// Creates `run` and checks it was stored as new.
pub async fn create(store: &Store, run: &NewRun) {
    let outcome = store.create_run(run).await.expect("create_run");
    assert_eq!(
        outcome,
        CreateOutcome::Created(run.run_id.clone()),
        "a run without a reused idempotency key is created"
    );
}

/// Creates a run of `doc` (see [`new_run`]).
pub async fn submit(store: &Store, run_id: &str, doc: &Value) {
    create(store, &new_run(run_id, doc)).await;
}

/// A `noop` step echoing `args`.
pub fn noop(id: &str, depends_on: &[&str], args: Value) -> Value {
    json!({"id": id, "action": "noop", "depends_on": depends_on, "args": args})
}

/// A plan document of these steps.
pub fn steps(steps: Vec<Value>) -> Value {
    json!({"goal": "contract test", "steps": steps})
}

/// Claims up to `limit` steps of `actions` for `worker` at `now`.
pub async fn claim_for(store: &Store, worker: &str, actions: &[&str], limit: u32, now: i64) -> Vec<Claimed> {
    let req = ClaimRequest {
        worker_id: worker.into(),
        actions: actions.iter().map(|a| (*a).to_owned()).collect(),
        limit,
        now_ms: now,
    };
    store.claim(&req, TTL).await.expect("claim")
}

/// Claims up to 1000 due steps of any built-in action for worker `w1` at `now`.
pub async fn claim(store: &Store, now: i64) -> Vec<Claimed> {
    claim_for(store, "w1", ALL_ACTIONS, 1000, now).await
}

/// Claims exactly one step (and no other) at `now`.
pub async fn claim_one(store: &Store, now: i64) -> Claimed {
    let mut claimed = claim(store, now).await;
    assert_eq!(claimed.len(), 1, "exactly one step is due at {now}: {claimed:?}");
    claimed.remove(0)
}

/// Completes under `lease` at `now` with generous limits.
pub async fn complete(store: &Store, lease: &Lease, output: &Value, now: i64) -> Report {
    store.complete(lease, output, LIMITS, now).await.expect("complete")
}

/// Claims the single due step and completes it with `output` at `now`; returns its lease.
pub async fn run_step(store: &Store, now: i64, output: &Value) -> Lease {
    let c = claim_one(store, now).await;
    assert_eq!(
        complete(store, &c.lease, output, now).await,
        Report::Succeeded,
        "a completion under a live lease succeeds"
    );
    c.lease
}

/// A retryable `action_error`.
pub fn action_error(message: &str) -> Failure {
    Failure::new("action_error", message, true)
}

/// One step of a run.
pub async fn step(store: &Store, run_id: &str, step_id: &str) -> StepSummary {
    store
        .steps(run_id)
        .await
        .expect("steps")
        .into_iter()
        .find(|s| s.id == step_id)
        .unwrap_or_else(|| panic!("step {step_id} of run {run_id} exists"))
}

/// Status of one step.
pub async fn status(store: &Store, run_id: &str, step_id: &str) -> String {
    step(store, run_id, step_id).await.status.to_string()
}

/// A run, which must exist.
pub async fn run(store: &Store, run_id: &str) -> RunSummary {
    store.run(run_id).await.expect("run").unwrap_or_else(|| panic!("run {run_id} exists"))
}

/// Every event of a run, oldest first.
pub async fn events(store: &Store, run_id: &str) -> Vec<RunEvent> {
    store.events(run_id, 0, 100_000).await.expect("events")
}

/// Whether the run's history holds an event of `kind` (for `step`, when given).
pub async fn has_event(store: &Store, run_id: &str, step: Option<&str>, kind: &str) -> bool {
    events(store, run_id).await.iter().any(|e| e.kind == kind && (step.is_none() || e.step_id.as_deref() == step))
}

/// Executes one raw SQL statement with text binds on the store's pool (to simulate corruption); rows affected.
pub async fn execute_sql(store: &Store, sql: &'static str, binds: &[&str]) -> u64 {
    match store {
        Store::Sqlite(pool) => {
            let mut q = sqlx::query::<sqlx::Sqlite>(sql);
            for b in binds {
                q = q.bind(*b);
            }
            q.execute(pool).await.expect("raw SQL").rows_affected()
        }
        Store::Postgres(pool) => {
            let mut q = sqlx::query::<sqlx::Postgres>(sql);
            for b in binds {
                q = q.bind(*b);
            }
            q.execute(pool).await.expect("raw SQL").rows_affected()
        }
    }
}

/// A batch of reports and claims (no new runs) with the suite's limits and lease TTL.
pub fn batch<'a>(
    reports: &'a [cairn_store::ReportItem],
    claims: &'a [ClaimRequest],
    now_ms: i64,
    handoff: cairn_store::Handoff<'a>,
) -> cairn_store::Batch<'a> {
    cairn_store::Batch { runs: &[], reports, claims, limits: LIMITS, lease_ttl_ms: TTL, now_ms, handoff }
}
