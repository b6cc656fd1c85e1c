//! Plain data passed in and out of the store. Times are milliseconds since the Unix epoch (UTC), named `*_ms`.

use cairn_core::event::EventKind;
use cairn_core::state::{AttemptStatus, RunStatus, StepStatus};
use serde::Serialize;
use serde_json::Value;

/// A reaper pass ([`crate::Store::reap`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReapRequest {
    /// The time of the pass (epoch ms): an attempt past its deadline at this time fails with `timeout`.
    pub now_ms: i64,
    /// Only leases that expired at or before this time are failed (at most `now_ms`): the orchestrator spares
    /// leases that expired while the store was silent, for one lease TTL after it answers again.
    pub expired_by_ms: i64,
    /// Most attempts failed in one pass.
    pub limit: i64,
    /// Jitter sample in `[0, 1)` for the retry delays the pass schedules.
    pub sample: f64,
}

impl ReapRequest {
    /// A pass at `now_ms` that fails every lease expired by then, up to `limit`, with jitter sample 0.
    pub fn at(now_ms: i64, limit: i64) -> Self {
        Self { now_ms, expired_by_ms: now_ms, limit, sample: 0.0 }
    }
}

/// Identifies one attempt of one step: the fencing token. A report carrying an older attempt number, or from a
/// worker that no longer holds the lease, changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Lease {
    /// Run id.
    pub run_id: String,
    /// Step id.
    pub step_id: String,
    /// Attempt number (1-based) the lease was granted for.
    pub attempt: u32,
    /// Worker holding the lease.
    pub worker_id: String,
}

/// A run to create (the plan is already validated and its timers resolved).
#[derive(Debug, Clone)]
pub struct NewRun {
    /// Fresh run id.
    pub run_id: String,
    /// The validated plan, defaults applied.
    pub plan: cairn_core::plan::Plan,
    /// Run input.
    pub input: Value,
    /// Run-level idempotency key.
    pub idempotency_key: Option<String>,
    /// Labels ([`cairn_core::labels`], checked by the caller).
    pub labels: cairn_core::labels::Labels,
    /// Resolved `not_before` per step index: (instant in ms, the spec as written with its zone).
    pub timers: Vec<Option<(i64, String)>>,
    /// Creation time.
    pub now_ms: i64,
}

/// Result of creating a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateOutcome {
    /// A new run was stored.
    Created(String),
    /// The idempotency key was used before with the same plan and input: the existing run.
    Existing(String),
    /// The idempotency key was used before with a different plan or input.
    Conflict(String),
}

/// A step handed to a worker.
#[derive(Debug, Clone, PartialEq)]
pub struct Claimed {
    /// The lease to report under.
    pub lease: Lease,
    /// Action name.
    pub action: String,
    /// Resolved args (placeholders substituted).
    pub args: Value,
    /// `<run_id>/<step_id>`, stable across attempts.
    pub idempotency_key: String,
    /// Attempt deadline (start + `timeout_ms`).
    pub deadline_ms: i64,
    /// When the step became claimable (`available_at`: ready, timer or backoff passed); the claim time minus
    /// this is the dispatch latency.
    pub due_at_ms: i64,
    /// `timeout_ms` of the step.
    pub timeout_ms: i64,
    /// `heartbeat_timeout_ms` of the step.
    pub heartbeat_timeout_ms: Option<i64>,
    /// Last checkpoint saved by an earlier attempt.
    pub checkpoint: Option<Value>,
    /// What the claim learned about completing this lease, for the store's own use
    /// ([`CompletionHint::default`] when a `Claimed` is made outside the store).
    pub completion: CompletionHint,
}

/// What a claim learned about completing a lease, which the batch writer uses to try PostgreSQL's fast path
/// (`crate::BatchWriter`). Opaque outside the store, but for reading.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompletionHint {
    pub(crate) successor_action: Option<String>,
    pub(crate) leaf: bool,
}

impl CompletionHint {
    /// The action of the one step that depends on this one, when that dependent depends on nothing else and
    /// starts by itself with no `not_before` timer or `$` in its args: completing this step may then also lease
    /// the dependent in the same call, which the writer tries when the claim riding on the completion serves this
    /// action. `None` otherwise, and for steps stored before the column existed.
    #[must_use]
    pub fn successor_action(&self) -> Option<&str> {
        self.successor_action.as_deref()
    }

    /// Whether no step depends on this one: completing it releases nothing, which the writer needs to know
    /// before trying several such completions and their claims in one call.
    #[must_use]
    pub fn is_leaf(&self) -> bool {
        self.leaf
    }
}

/// What a claimer asks for.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    /// The claiming worker.
    pub worker_id: String,
    /// Actions the worker serves.
    pub actions: Vec<String>,
    /// Most steps to claim.
    pub limit: u32,
    /// Current time.
    pub now_ms: i64,
}

/// Result of a heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeartbeatOutcome {
    /// The lease was extended until `lease_expires_ms`.
    Extended {
        /// New lease expiry.
        lease_expires_ms: i64,
    },
    /// The lease is gone (cancelled, reaped, or superseded): stop the attempt.
    Gone,
}

/// A run as listed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    /// Run id.
    pub id: String,
    /// Status.
    pub status: RunStatus,
    /// Plan id.
    pub plan_id: String,
    /// Steps in the run.
    pub step_count: i64,
    /// Steps not yet final.
    pub open_steps: i64,
    /// Root cause when failed.
    pub failure: Option<Value>,
    /// Creation time.
    pub created_at_ms: i64,
    /// Finish time.
    pub finished_at_ms: Option<i64>,
    /// The run this one reran from a step (`POST /v1/runs/{id}:rerun`), if any.
    pub rerun_of: Option<String>,
    /// The plan's goal.
    pub goal: Option<String>,
    /// The run's labels.
    pub labels: cairn_core::labels::Labels,
}

/// A step as shown by the API.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepSummary {
    /// Step id.
    pub id: String,
    /// Action.
    pub action: String,
    /// Status.
    pub status: StepStatus,
    /// Attempts started.
    pub attempts: u32,
    /// Output when succeeded.
    pub output: Option<Value>,
    /// Last failure record.
    pub error: Option<Value>,
    /// Earliest start (timer or backoff) while ready.
    pub available_at_ms: Option<i64>,
    /// The `not_before` timer: instant.
    pub not_before_at_ms: Option<i64>,
    /// The `not_before` timer as written, with its zone.
    pub not_before_local: Option<String>,
    /// Last checkpoint.
    pub checkpoint: Option<Value>,
    /// How many times an operator repaired its args (0: the plan's args; the `operator_retry` event of each
    /// repair carries the args).
    pub args_revision: i64,
    /// Its args as the run holds them: the plan's, or an operator's repair; placeholders unresolved.
    pub args: Value,
    /// When its current (or last) attempt started.
    pub started_at_ms: Option<i64>,
    /// When it became final.
    pub finished_at_ms: Option<i64>,
}

/// One entry of a run's history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunEvent {
    /// Sequence number (increasing per store).
    pub id: i64,
    /// Step concerned.
    pub step_id: Option<String>,
    /// Event kind, e.g. `step_succeeded`.
    pub kind: EventKind,
    /// Details.
    pub data: Value,
    /// When.
    pub at_ms: i64,
}

/// A failure record as stored for one attempt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttemptRecord {
    /// Step id.
    pub step_id: String,
    /// Attempt number.
    pub attempt: u32,
    /// Worker.
    pub worker_id: Option<String>,
    /// Status.
    pub status: AttemptStatus,
    /// Start time.
    pub started_at_ms: i64,
    /// End time.
    pub ended_at_ms: Option<i64>,
    /// The failure record when failed.
    pub failure: Option<Value>,
}

/// A run with its steps and attempts, read in one snapshot ([`crate::Store::run_detail`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RunDetail {
    /// The run.
    pub run: RunSummary,
    /// Its input.
    pub input: Value,
    /// Its steps in plan order.
    pub steps: Vec<StepSummary>,
    /// Its attempts by step then attempt number.
    pub attempts: Vec<AttemptRecord>,
}

/// One report of a batch ([`crate::Store::write_batch`]).
#[derive(Debug, Clone)]
pub struct ReportItem {
    /// The lease the report was made under.
    pub lease: Lease,
    /// What the worker reported.
    pub kind: ReportKind,
}

/// What a worker reported for an attempt.
#[derive(Debug, Clone)]
pub enum ReportKind {
    /// Success, with the action's output.
    Complete(Value),
    /// Failure; `sample` ∈ `[0, 1)` drives the retry jitter.
    Fail {
        /// The structured failure.
        failure: cairn_core::failure::Failure,
        /// Jitter sample.
        sample: f64,
    },
}

/// What one batch of new runs, reports and claims did, in the order of the batch.
#[derive(Debug, Clone, Default)]
pub struct BatchOutcome {
    /// One outcome per new run ([`crate::Store::write_batch`]'s `runs`), in input order, exactly as
    /// [`crate::Store::create_run_detailed`] would have returned it.
    pub created: Vec<(CreateOutcome, Option<RunDetail>)>,
    /// One outcome per report, in input order.
    pub reports: Vec<crate::Report>,
    /// The steps leased for each claim request, in input order.
    pub claimed: Vec<Vec<Claimed>>,
    /// Steps that became ready and due during the batch (ready roots of new runs, dependents released; not
    /// retries in backoff, nor timers still to come).
    pub ready_now: usize,
    /// Steps claimed in the same transaction for each hand-off request, in the order the requests were given.
    pub handed: Vec<Vec<Claimed>>,
}
