//! Durable waiting in the store (contract §10, "Waiting"): schedules and their ticks, approval decisions and timeouts, external
//! events and `event.wait` steps. Writes run in one transaction each (the flows in `flow::schedule`,
//! `flow::approval`, `flow::event_wait`); reads and schedule definitions are single statements, the same SQL on
//! both backends. Times are epoch milliseconds, named `*_ms`.

use cairn_core::plan::ApprovalTimeout;
use cairn_core::schedule::{Misfire, Overlap, TickOutcome};
use serde::Serialize;
use serde_json::Value;

use crate::error::{StoreError, StoreResult};
// `sqlite`, `tx`, `StoreResult`, `StoreError` and `conflict_pause` are named by `in_tx!`.
use crate::conflict_pause;
use crate::flow::finish::ReportLimits;
use crate::model::NewRun;
use crate::rows::name;
use crate::wait_tx::EventInRow;
use crate::{Store, flow, tx};

pub use crate::flow::event_wait::WAIT_OWNER;

/// Insert a schedule unless its id is taken. Index: PK.
const SCHEDULE_INSERT: &str = "INSERT INTO schedules (id, cron, timezone, plan, input, overlap, misfire, \
     catch_up_max, paused, next_fire_at, created_at, updated_at, labels) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11, $12) \
     ON CONFLICT (id) DO NOTHING";

/// Replace a schedule's definition and next fire time (a running tick pass fenced on the old one then changes
/// nothing). Index: PK.
const SCHEDULE_UPDATE: &str = "UPDATE schedules SET cron = $2, timezone = $3, plan = $4, input = $5, overlap = $6, \
     misfire = $7, catch_up_max = $8, next_fire_at = $9, updated_at = $10, labels = $11 WHERE id = $1";

/// Pause: the tick loop skips the schedule. Index: PK.
const SCHEDULE_PAUSE: &str = "UPDATE schedules SET paused = 1, updated_at = $2 WHERE id = $1";

/// Resume from `$2` (ticks that fell in the pause do not fire). Index: PK.
const SCHEDULE_RESUME: &str = "UPDATE schedules SET paused = 0, next_fire_at = $2, updated_at = $3 WHERE id = $1";

/// Delete a schedule and its ticks (runs it started stay). Index: PK.
const SCHEDULE_DELETE: &str = "DELETE FROM schedules WHERE id = $1";

/// The columns of [`ScheduleRow`].
macro_rules! schedule_select {
    () => {
        "SELECT id, cron, timezone, plan, input, overlap, misfire, catch_up_max, paused, next_fire_at, \
         last_fire_at, last_run_id, created_at, updated_at, labels FROM schedules"
    };
}

/// One schedule. Index: PK.
const SCHEDULE_GET: &str = concat!(schedule_select!(), " WHERE id = $1");

/// Every schedule. Index: PK.
const SCHEDULES_LIST: &str = concat!(schedule_select!(), " ORDER BY id");

/// Active schedules due at `$1`. Index: `schedules_due_idx`.
const SCHEDULES_DUE: &str =
    concat!(schedule_select!(), " WHERE paused = 0 AND next_fire_at <= $1 ORDER BY next_fire_at LIMIT $2 + 0");

/// Ticks of a schedule, newest first. Index: `schedule_ticks` PK prefix.
const TICKS_OF: &str = "SELECT fire_at, run_id, outcome, detail, created_at FROM schedule_ticks \
     WHERE schedule_id = $1 ORDER BY fire_at DESC LIMIT $2 + 0";

/// Steps waiting for approval across runs, oldest first. Index: `steps_approval_idx`.
const APPROVALS_PENDING: &str = "SELECT run_id, step_id, action, approval, available_at, updated_at FROM steps \
     WHERE status = 'waiting_approval' ORDER BY updated_at, run_id, step_id LIMIT $1 + 0";

/// A schedule definition to store.
#[derive(Debug, Clone)]
pub struct NewSchedule {
    /// Id (unique).
    pub id: String,
    /// Cron expression.
    pub cron: String,
    /// IANA zone name.
    pub timezone: String,
    /// The plan document (validated by the caller).
    pub plan: Value,
    /// Run input; `None`: the plan's input.
    pub input: Option<Value>,
    /// Overlap policy.
    pub overlap: Overlap,
    /// Misfire policy.
    pub misfire: Misfire,
    /// Most runs for missed ticks under `catch_up`.
    pub catch_up_max: i64,
    /// Created paused.
    pub paused: bool,
    /// Labels put on every run the schedule starts (checked by the caller).
    pub labels: cairn_core::labels::Labels,
    /// Nominal instant of the first tick.
    pub next_fire_at_ms: Option<i64>,
    /// Now.
    pub now_ms: i64,
}

/// A stored schedule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScheduleRecord {
    /// Id.
    pub id: String,
    /// Cron expression.
    pub cron: String,
    /// IANA zone name.
    pub timezone: String,
    /// The plan document.
    pub plan: Value,
    /// Run input, when set.
    pub input: Option<Value>,
    /// Overlap policy.
    pub overlap: Overlap,
    /// Misfire policy.
    pub misfire: Misfire,
    /// Most catch-up runs.
    pub catch_up_max: i64,
    /// Paused.
    pub paused: bool,
    /// Nominal instant of the next tick (`None`: never fires again).
    pub next_fire_at_ms: Option<i64>,
    /// Nominal instant of the last tick that started a run.
    pub last_fire_at_ms: Option<i64>,
    /// The last run started.
    pub last_run_id: Option<String>,
    /// Creation time.
    pub created_at_ms: i64,
    /// Last change.
    pub updated_at_ms: i64,
    /// Labels put on every run the schedule starts.
    pub labels: cairn_core::labels::Labels,
}

/// One handled tick.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScheduleTick {
    /// Nominal UTC instant (the tick's identity).
    pub fire_at_ms: i64,
    /// The run started, if any.
    pub run_id: Option<String>,
    /// What the tick did.
    pub outcome: TickOutcome,
    /// Why no run was started.
    pub detail: Option<Value>,
    /// When the tick was handled.
    pub created_at_ms: i64,
}

/// One tick to fire in a pass: the run to create, or why the plan could not become a run.
#[derive(Debug, Clone)]
pub struct TickRun {
    /// Nominal UTC instant.
    pub fire_at_ms: i64,
    /// The prepared run, or the validation failure as text.
    pub run: Result<NewRun, String>,
}

/// A tick pass for one schedule.
#[derive(Debug, Clone)]
pub struct ScheduleFire {
    /// The schedule.
    pub schedule_id: String,
    /// `next_fire_at` as read: the pass happens only if it is still this.
    pub expected_next_ms: i64,
    /// `next_fire_at` after the pass.
    pub next_fire_at_ms: Option<i64>,
    /// Overlap policy.
    pub overlap: Overlap,
    /// Ticks to fire, oldest first (may be empty: missed ticks dropped by the misfire policy).
    pub ticks: Vec<TickRun>,
    /// Now.
    pub now_ms: i64,
}

/// A "run now" of a schedule: one run started at `now_ms` under the schedule's overlap policy, as a tick.
#[derive(Debug, Clone)]
pub struct ScheduleTrigger {
    /// The schedule.
    pub schedule_id: String,
    /// Its overlap policy.
    pub overlap: Overlap,
    /// The run to start (its `fire_at_ms` is now), or why its plan does not validate.
    pub tick: TickRun,
    /// Now.
    pub now_ms: i64,
}

/// What a tick pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FireOutcome {
    /// False when another orchestrator handled the pass (nothing changed).
    pub claimed: bool,
    /// `(nominal instant, run id)` of runs started.
    pub started: Vec<(i64, String)>,
    /// Ticks skipped because a previous run was open (`overlap: skip`).
    pub skipped: Vec<i64>,
    /// Ticks whose plan no longer validates.
    pub invalid: Vec<i64>,
    /// Runs cancelled by `overlap: cancel_previous`.
    pub cancelled: Vec<String>,
}

/// A step waiting for approval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PendingApproval {
    /// Run id.
    pub run_id: String,
    /// Step id.
    pub step_id: String,
    /// The step's action.
    pub action: String,
    /// Since when it waits.
    pub waiting_since_ms: i64,
    /// Decision deadline (`approval.timeout_ms` after it started waiting), if any.
    pub deadline_ms: Option<i64>,
    /// What the deadline does, when there is one.
    pub on_timeout: Option<ApprovalTimeout>,
    /// The approval settings as declared.
    pub approval: Option<Value>,
}

/// What became of an approval decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalOutcome {
    /// Applied.
    Decided,
    /// The step is not waiting for approval (or does not exist).
    WrongState,
    /// The decision came after the approval timed out; `on_timeout` applied instead.
    TimedOut,
}

/// An external event.
#[derive(Debug, Clone)]
pub struct NewEvent {
    /// Event id (fresh).
    pub id: String,
    /// Name.
    pub name: String,
    /// Correlation key.
    pub key: Option<String>,
    /// Payload.
    pub payload: Value,
    /// Receipt time.
    pub now_ms: i64,
    /// The caller's dedupe id: an event of the same name and id already stored makes this one a duplicate.
    pub dedupe_id: Option<String>,
}

/// What delivering an external event did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// Stored, and delivered to these waiting steps (`(run_id, step_id)`).
    Delivered {
        /// The steps it completed.
        matched: Vec<(String, String)>,
    },
    /// An event of the same name and dedupe id was stored already (`id`): nothing was stored or delivered.
    Duplicate {
        /// The stored event's id.
        id: String,
    },
}

#[derive(sqlx::FromRow)]
struct ScheduleRow {
    id: String,
    cron: String,
    timezone: String,
    plan: String,
    input: Option<String>,
    overlap: String,
    misfire: String,
    catch_up_max: i64,
    paused: i64,
    next_fire_at: Option<i64>,
    last_fire_at: Option<i64>,
    last_run_id: Option<String>,
    created_at: i64,
    updated_at: i64,
    labels: String,
}

fn labels_text(labels: &cairn_core::labels::Labels) -> String {
    Value::from(labels.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))).collect::<serde_json::Map<_, _>>())
        .to_string()
}

fn json_of(what: &'static str, text: &str) -> StoreResult<Value> {
    serde_json::from_str(text).map_err(|e| StoreError::corrupt(what, e))
}

fn record(r: ScheduleRow) -> StoreResult<ScheduleRecord> {
    Ok(ScheduleRecord {
        plan: json_of("schedules.plan", &r.plan)?,
        input: r.input.as_deref().map(|t| json_of("schedules.input", t)).transpose()?,
        id: r.id,
        cron: r.cron,
        timezone: r.timezone,
        overlap: name("schedules.overlap", &r.overlap)?,
        misfire: name("schedules.misfire", &r.misfire)?,
        catch_up_max: r.catch_up_max,
        paused: r.paused != 0,
        next_fire_at_ms: r.next_fire_at,
        last_fire_at_ms: r.last_fire_at,
        last_run_id: r.last_run_id,
        created_at_ms: r.created_at,
        updated_at_ms: r.updated_at,
        labels: serde_json::from_str(&r.labels).map_err(|e| StoreError::corrupt("schedules.labels", e))?,
    })
}

impl Store {
    /// Stores a new schedule; false when the id is taken.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable).
    pub async fn schedule_insert(&self, s: &NewSchedule) -> StoreResult<bool> {
        let input = s.input.as_ref().map(Value::to_string);
        let done = on_pool!(self, Db, pool => sqlx::query::<Db>(SCHEDULE_INSERT)
            .bind(&s.id).bind(&s.cron).bind(&s.timezone).bind(s.plan.to_string()).bind(input)
            .bind(s.overlap.as_str()).bind(s.misfire.as_str()).bind(s.catch_up_max).bind(i64::from(s.paused))
            .bind(s.next_fire_at_ms).bind(s.now_ms).bind(labels_text(&s.labels)).execute(pool).await?.rows_affected());
        Ok(done == 1)
    }

    /// Replaces a schedule's definition and next fire time (not its paused flag); false when it does not exist.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable).
    pub async fn schedule_update(&self, s: &NewSchedule) -> StoreResult<bool> {
        let input = s.input.as_ref().map(Value::to_string);
        let done = on_pool!(self, Db, pool => sqlx::query::<Db>(SCHEDULE_UPDATE)
            .bind(&s.id).bind(&s.cron).bind(&s.timezone).bind(s.plan.to_string()).bind(input)
            .bind(s.overlap.as_str()).bind(s.misfire.as_str()).bind(s.catch_up_max).bind(s.next_fire_at_ms).bind(s.now_ms)
            .bind(labels_text(&s.labels)).execute(pool).await?.rows_affected());
        Ok(done == 1)
    }

    /// Pauses a schedule; false when it does not exist.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable).
    pub async fn schedule_pause(&self, id: &str, now_ms: i64) -> StoreResult<bool> {
        let done = on_pool!(self, Db, pool => sqlx::query::<Db>(SCHEDULE_PAUSE)
            .bind(id).bind(now_ms).execute(pool).await?.rows_affected());
        Ok(done == 1)
    }

    /// Resumes a schedule with its next fire time; false when it does not exist.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable).
    pub async fn schedule_resume(&self, id: &str, next_fire_at_ms: Option<i64>, now_ms: i64) -> StoreResult<bool> {
        let done = on_pool!(self, Db, pool => sqlx::query::<Db>(SCHEDULE_RESUME)
            .bind(id).bind(next_fire_at_ms).bind(now_ms).execute(pool).await?.rows_affected());
        Ok(done == 1)
    }

    /// Deletes a schedule and its tick records (its runs stay); false when it does not exist.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable).
    pub async fn schedule_delete(&self, id: &str) -> StoreResult<bool> {
        let done = on_pool!(self, Db, pool => sqlx::query::<Db>(SCHEDULE_DELETE)
            .bind(id).execute(pool).await?.rows_affected());
        Ok(done == 1)
    }

    /// One schedule.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable), [`StoreError::Corrupt`].
    pub async fn schedule(&self, id: &str) -> StoreResult<Option<ScheduleRecord>> {
        let row = on_pool!(self, Db, pool => sqlx::query_as::<Db, ScheduleRow>(SCHEDULE_GET)
            .bind(id).fetch_optional(pool).await?);
        row.map(record).transpose()
    }

    /// Every schedule, by id.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable), [`StoreError::Corrupt`].
    pub async fn schedules(&self) -> StoreResult<Vec<ScheduleRecord>> {
        let rows = on_pool!(self, Db, pool => sqlx::query_as::<Db, ScheduleRow>(SCHEDULES_LIST)
            .fetch_all(pool).await?);
        rows.into_iter().map(record).collect()
    }

    /// Active schedules whose next tick is due at `now_ms`, earliest first. Index: `schedules_due_idx`.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable), [`StoreError::Corrupt`].
    pub async fn schedules_due(&self, now_ms: i64, limit: i64) -> StoreResult<Vec<ScheduleRecord>> {
        let rows = on_pool!(self, Db, pool => sqlx::query_as::<Db, ScheduleRow>(SCHEDULES_DUE)
            .bind(now_ms).bind(limit).fetch_all(pool).await?);
        rows.into_iter().map(record).collect()
    }

    /// The most recent `limit` ticks of a schedule, newest first.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable), [`StoreError::Corrupt`].
    pub async fn schedule_ticks(&self, id: &str, limit: i64) -> StoreResult<Vec<ScheduleTick>> {
        type Row = (i64, Option<String>, String, Option<String>, i64);
        let rows: Vec<Row> = on_pool!(self, Db, pool => sqlx::query_as::<Db, Row>(TICKS_OF)
            .bind(id).bind(limit).fetch_all(pool).await?);
        rows.into_iter()
            .map(|(fire_at, run_id, outcome, detail, created_at)| {
                Ok(ScheduleTick {
                    fire_at_ms: fire_at,
                    run_id,
                    outcome: name("schedule_ticks.outcome", &outcome)?,
                    detail: detail.as_deref().map(|d| json_of("schedule_ticks.detail", d)).transpose()?,
                    created_at_ms: created_at,
                })
            })
            .collect()
    }

    /// Runs one tick pass for a schedule in one transaction (see `flow::schedule`).
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable: nothing was fired).
    pub async fn schedule_fire(&self, f: &ScheduleFire) -> StoreResult<FireOutcome> {
        in_tx!(self, |tx, events| flow::schedule::fire(&mut tx, f, &mut events).await?)
    }

    /// Starts a run of a schedule now, under its overlap policy ([`ScheduleTrigger`]); `None` when the schedule
    /// does not exist.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable: nothing was fired).
    pub async fn schedule_trigger(&self, t: &ScheduleTrigger) -> StoreResult<Option<FireOutcome>> {
        in_tx!(self, |tx, events| flow::schedule::trigger(&mut tx, t, &mut events).await?)
    }

    /// Steps waiting for approval across runs, oldest first.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable), [`StoreError::Corrupt`].
    pub async fn approvals_pending(&self, limit: i64) -> StoreResult<Vec<PendingApproval>> {
        type Row = (String, String, String, Option<String>, Option<i64>, i64);
        let rows: Vec<Row> = on_pool!(self, Db, pool => sqlx::query_as::<Db, Row>(APPROVALS_PENDING)
            .bind(limit).fetch_all(pool).await?);
        rows.into_iter()
            .map(|(run_id, step_id, action, approval, deadline, since)| {
                let approval = approval.as_deref().map(|a| json_of("steps.approval", a)).transpose()?;
                let on_timeout = match approval.as_ref().filter(|_| deadline.is_some()) {
                    None => None,
                    Some(a) => Some(match a.get("on_timeout").and_then(Value::as_str) {
                        Some(text) => name("steps.approval", text)?,
                        None => ApprovalTimeout::default(),
                    }),
                };
                Ok(PendingApproval {
                    run_id,
                    step_id,
                    action,
                    waiting_since_ms: since,
                    deadline_ms: deadline,
                    on_timeout,
                    approval,
                })
            })
            .collect()
    }

    /// Approves or rejects a step waiting for approval, before its deadline.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable).
    pub async fn decide_approval(
        &self,
        run_id: &str,
        step_id: &str,
        approve: bool,
        actor: &str,
        now_ms: i64,
    ) -> StoreResult<ApprovalOutcome> {
        in_tx!(self, |tx, events| flow::approval::decide(&mut tx, run_id, step_id, approve, actor, now_ms, &mut events)
            .await?)
    }

    /// Applies `on_timeout` to up to `limit` approvals past their deadline. Returns how many.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable).
    pub async fn expire_approvals(&self, now_ms: i64, limit: i64) -> StoreResult<usize> {
        in_tx!(self, |tx, events| flow::approval::expire_due(&mut tx, now_ms, limit, &mut events).await?)
    }

    /// Claims up to `limit` ready `event.wait` steps and starts their waits (matching stored events within their
    /// lookback). Returns how many were claimed.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable).
    pub async fn start_event_waits(&self, now_ms: i64, limit: u32, limits: ReportLimits) -> StoreResult<usize> {
        in_tx!(self, |tx, events| flow::event_wait::start(&mut tx, now_ms, limit, limits, &mut events).await?)
    }

    /// Stores an external event and completes the waiting steps it matches, unless an event of the same name and
    /// dedupe id was stored already ([`Delivery::Duplicate`]).
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable: the event was not stored).
    pub async fn deliver_event(&self, e: &NewEvent, limits: ReportLimits) -> StoreResult<Delivery> {
        let row = EventInRow {
            id: e.id.clone(),
            name: e.name.clone(),
            key: e.key.clone(),
            payload: e.payload.to_string(),
            received_at: e.now_ms,
        };
        let dedupe_id = e.dedupe_id.as_deref();
        in_tx!(self, |tx, events| flow::event_wait::deliver(&mut tx, &row, dedupe_id, limits, &mut events).await?)
    }

    /// Ends up to `limit` event waits past their deadline per `on_timeout`. Returns how many.
    ///
    /// # Errors
    /// [`StoreError::Database`] (retryable).
    pub async fn expire_event_waits(&self, now_ms: i64, limit: i64, limits: ReportLimits) -> StoreResult<usize> {
        in_tx!(self, |tx, events| flow::event_wait::expire(&mut tx, now_ms, limit, limits, &mut events).await?)
    }
}
