//! Row shapes shared by both backends (decoded with `sqlx::FromRow`; both dialects store the same types), and
//! the decoding of the names they store into `core`'s enums.

use cairn_core::event::{EventKind, Progress};
use cairn_core::plan::TriggerRule;
use cairn_core::state::StepStatus;
use serde::de::DeserializeOwned;
use serde::de::value::{Error as NameError, StrDeserializer};

use crate::error::{StoreError, StoreResult};
use crate::model::RunEvent;

/// Reads a stored name (a status, an event kind, a policy) as the `core` enum whose serde names are the stored
/// ones; a name the enum does not know is a [`StoreError::Corrupt`] naming `column`.
pub(crate) fn name<T: DeserializeOwned>(column: &'static str, text: &str) -> StoreResult<T> {
    T::deserialize(StrDeserializer::<NameError>::new(text)).map_err(|e| StoreError::corrupt(column, e))
}

use cairn_core::machine::RunCounters;

/// A step just claimed.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct ClaimedRow {
    pub run_id: String,
    pub step_id: String,
    pub attempt: i64,
    pub action: String,
    pub args: String,
    pub timeout_ms: i64,
    pub heartbeat_timeout_ms: Option<i64>,
    pub deadline_at: i64,
    pub checkpoint: Option<String>,
    pub available_at: Option<i64>,
    pub successor_action: Option<String>,
    /// How many steps depend on this one (`None` only where a statement does not say).
    #[sqlx(default)]
    pub child_count: Option<i64>,
    /// How many times an operator repaired its args (0 where a statement does not say: the PostgreSQL fast
    /// path leaves a step with repaired args to the general claim).
    #[sqlx(default)]
    pub args_revision: i64,
}

/// A running step with what deciding its failure needs.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct LeasedRow {
    pub run_id: String,
    pub step_id: String,
    pub attempt: i64,
    /// The attempts used before an operator last retried the step (its budget counts from there).
    pub attempt_base: i64,
    pub action: String,
    pub idempotent: i64,
    pub retry: String,
    pub lease_owner: Option<String>,
    pub started_at: Option<i64>,
    pub deadline_at: Option<i64>,
    pub heartbeat_timeout_ms: Option<i64>,
    pub lease_expires_at: Option<i64>,
}

/// A step just marked succeeded under its lease (`DialectTx::succeed`).
#[derive(Debug, Clone)]
pub(crate) struct StepSucceeded {
    /// How many steps depend on it.
    pub child_count: i64,
    /// Its run's counters after the step was counted against it, when the success statement did so; `None`
    /// when the caller must count it.
    pub run_counter: Option<cairn_core::machine::RunCounters>,
    /// Its dependents as the release left them (`StepTx::children_release` with the step succeeded), when the
    /// success statement released them; `None` when the caller must.
    pub released: Option<Vec<ChildRow>>,
}

/// A dependent whose pending-dependency count was just decremented.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct ChildRow {
    pub step_id: String,
    pub dep_count: i64,
    pub pending_deps: i64,
    pub trigger_rule: String,
    pub when_expr: Option<String>,
    pub approval: Option<String>,
    pub not_before_at: Option<i64>,
    /// Its status after the release (`ready` when the release decided it, see `StepTx::children_release`).
    pub status: String,
    pub available_at: Option<i64>,
}

/// Status and output of one step (for `when` and placeholder resolution).
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct StateRow {
    pub status: String,
    pub output: Option<String>,
}

/// A run as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct RunRow {
    pub id: String,
    pub plan_id: String,
    pub status: String,
    pub input: String,
    pub step_count: i64,
    pub open_steps: i64,
    pub failure: Option<String>,
    pub created_at: i64,
    pub finished_at: Option<i64>,
    pub rerun_of: Option<String>,
    pub goal: Option<String>,
    pub labels: String,
}

/// A step as stored, for display.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct StepRow {
    pub step_id: String,
    pub action: String,
    pub status: String,
    pub attempt: i64,
    pub output: Option<String>,
    pub error: Option<String>,
    pub available_at: Option<i64>,
    pub not_before_at: Option<i64>,
    pub not_before_local: Option<String>,
    pub checkpoint: Option<String>,
    pub args_revision: i64,
    pub args: String,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
}

/// An attempt as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct AttemptRow {
    pub step_id: String,
    pub attempt: i64,
    pub worker_id: Option<String>,
    pub status: String,
    pub started_at: i64,
    pub ended_at: Option<i64>,
    pub failure_code: Option<String>,
    pub failure_message: Option<String>,
    pub failure_details: Option<String>,
    pub retryable: Option<i64>,
    pub retry_after_ms: Option<i64>,
    pub suggestion: Option<String>,
    pub degraded: Option<i64>,
    pub action: String,
}

/// An event as stored: its payload is `data` (JSON text), or, for a [`Progress`] event, the columns `attempt`,
/// `worker_id` and `available_at` with `data` NULL.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct EventRow {
    pub id: i64,
    pub step_id: Option<String>,
    pub kind: String,
    pub data: Option<String>,
    pub attempt: Option<i64>,
    pub worker_id: Option<String>,
    pub available_at: Option<i64>,
    pub at: i64,
}

impl EventRow {
    /// The event as the API shows it. A row whose payload is neither JSON text nor the columns its kind needs
    /// is [`StoreError::Corrupt`].
    pub(crate) fn into_event(self) -> StoreResult<RunEvent> {
        let kind: EventKind = name("run_events.kind", &self.kind)?;
        let data = match &self.data {
            Some(text) => serde_json::from_str(text).map_err(|e| StoreError::corrupt("run_events.data", e))?,
            None => self.progress(kind)?.to_json(),
        };
        Ok(RunEvent { id: self.id, step_id: self.step_id, kind, data, at_ms: self.at })
    }

    /// The payload of a `kind` event stored in columns.
    fn progress(&self, kind: EventKind) -> StoreResult<Progress> {
        let missing = |column: &'static str| StoreError::corrupt(column, format!("NULL in a {kind} event"));
        let attempt = || -> StoreResult<u32> {
            let attempt = self.attempt.ok_or_else(|| missing("run_events.attempt"))?;
            u32::try_from(attempt).map_err(|e| StoreError::corrupt("run_events.attempt", e))
        };
        Ok(match kind {
            EventKind::StepReady => Progress::Ready { available_at: self.available_at },
            EventKind::StepStarted => Progress::Started {
                attempt: attempt()?,
                worker_id: self.worker_id.clone().ok_or_else(|| missing("run_events.worker_id"))?,
            },
            EventKind::StepSucceeded => Progress::Succeeded { attempt: attempt()? },
            EventKind::RunSucceeded => Progress::RunSucceeded {},
            _ => return Err(missing("run_events.data")),
        })
    }
}

/// One step to insert at submit.
#[derive(Debug, Clone)]
pub(crate) struct StepInsert {
    pub step_id: String,
    pub position: i64,
    pub action: String,
    pub status: StepStatus,
    pub args: String,
    pub when_expr: Option<String>,
    pub trigger_rule: TriggerRule,
    pub idempotent: i64,
    pub timeout_ms: i64,
    pub heartbeat_timeout_ms: Option<i64>,
    pub retry: String,
    pub approval: Option<String>,
    pub dep_count: i64,
    /// 1 when the step becomes ready by itself once every dependency succeeded
    /// (`cairn_core::machine::starts_itself`), else 0.
    pub starts_itself: i64,
    /// Steps that depend on this one.
    pub child_count: i64,
    /// The action of this step's one dependent when completing this step may lease it in the same call (see
    /// [`crate::model::CompletionHint::successor_action`]).
    pub successor_action: Option<String>,
    pub not_before_at: Option<i64>,
    pub not_before_local: Option<String>,
}

impl StepInsert {
    /// When the step may be claimed if inserted `ready` at `now` (ms): its `not_before` timer, or now if that
    /// has passed; `None` for a step not inserted ready. The insert, its `step_ready` event and the
    /// submission's answer all use this value.
    pub(crate) fn ready_at(&self, now: i64) -> Option<i64> {
        (self.status == StepStatus::Ready).then(|| self.not_before_at.unwrap_or(now).max(now))
    }
}

/// A new run with its plan (content-addressed, stored once).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunInsert<'a> {
    pub run_id: &'a str,
    pub plan_id: &'a str,
    pub plan_body: &'a str,
    pub input: &'a str,
    pub context: &'a str,
    pub idempotency_key: Option<&'a str>,
    pub steps: i64,
    pub now: i64,
    /// The plan's goal, and the same lower-cased for the `q` filter.
    pub goal: Option<&'a str>,
    pub goal_search: Option<&'a str>,
    /// The labels as a JSON object, and one `(key, value)` row each.
    pub labels: &'a str,
    pub label_rows: &'a [(String, String)],
    /// The distinct actions of the plan's steps, sorted.
    pub actions: &'a [String],
}

/// One event to append: JSON text in `data`, or a [`Progress`] payload in its columns (see [`EventRow`]).
#[derive(Debug, Clone)]
pub(crate) struct EventInsert {
    pub run_id: String,
    pub step_id: Option<String>,
    pub kind: EventKind,
    pub data: Option<String>,
    pub attempt: Option<i64>,
    pub worker_id: Option<String>,
    pub available_at: Option<i64>,
    pub at: i64,
}

impl EventInsert {
    /// A progress event, its payload in columns.
    pub(crate) fn progress(run_id: &str, step_id: Option<&str>, payload: Progress, at: i64) -> EventInsert {
        let mut e = EventInsert {
            run_id: run_id.into(),
            step_id: step_id.map(str::to_owned),
            kind: payload.kind(),
            data: None,
            attempt: None,
            worker_id: None,
            available_at: None,
            at,
        };
        match payload {
            Progress::Ready { available_at } => e.available_at = available_at,
            Progress::Started { attempt, worker_id } => {
                (e.attempt, e.worker_id) = (Some(attempt.into()), Some(worker_id))
            }
            Progress::Succeeded { attempt } => e.attempt = Some(attempt.into()),
            Progress::RunSucceeded {} => {}
        }
        e
    }
}

/// The failure columns of an attempt.
#[derive(Debug, Clone)]
pub(crate) struct AttemptClose {
    pub status: &'static str,
    pub failure_code: Option<String>,
    pub failure_message: Option<String>,
    pub failure_details: Option<String>,
    pub retryable: Option<i64>,
    pub retry_after_ms: Option<i64>,
    pub suggestion: Option<String>,
    pub degraded: Option<i64>,
}

/// A run's counters from the `(open_steps, failed_steps, cancel_requested)` columns of its row.
pub(crate) fn run_counters((open_steps, failed_steps, cancel_requested): (i64, i64, i64)) -> RunCounters {
    RunCounters { open_steps, failed_steps, cancel_requested: cancel_requested != 0 }
}

/// A decision for a pending step, as [`crate::tx::StepTx::step_decide`] writes it.
pub(crate) struct StepDecided<'a> {
    pub run_id: &'a str,
    pub step_id: &'a str,
    pub status: cairn_core::state::StepStatus,
    /// When it becomes claimable (ready) or its approval deadline (waiting for approval).
    pub available_at: Option<i64>,
    /// The failure record, when the decision failed it.
    pub error: Option<&'a str>,
    /// Set when the decision is final.
    pub finished_at: Option<i64>,
}

/// An operator's move of a step, as [`crate::tx::StepTx::step_operator`] writes it.
pub(crate) struct StepMoved<'a> {
    pub run_id: &'a str,
    pub step_id: &'a str,
    pub from: cairn_core::state::StepStatus,
    pub to: cairn_core::state::StepStatus,
    /// Ready from now, or from the step's `not_before` timer if later.
    pub available_at: Option<i64>,
    /// Set when `to` is final.
    pub finished_at: Option<i64>,
}
