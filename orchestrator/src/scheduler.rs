//! Cron schedules (contract §10, "Waiting"): definitions (create, update, pause, resume, delete, preview) and the tick pass that
//! starts their runs, plus the background loop that drives every kind of durable wait once a second.
//!
//! A schedule's next fire time is a nominal UTC instant computed once with DST-aware arithmetic
//! ([`cairn_core::schedule`]) and stored. [`Engine::tick_schedules`] takes every due schedule, decides with the
//! misfire policy which ticks get a run ([`CronSchedule::due`]), validates the plan for each, and hands the pass
//! to the store, which moves `next_fire_at` on, records each tick under its (schedule, instant) key and creates
//! its run in one transaction: a tick creates at most one run, however many orchestrators tick, and a restart or
//! a recompute never changes a tick's identity (case C18).

use std::time::Duration;

use cairn_core::diagnostic::Diagnostic;
use cairn_core::schedule::{CronSchedule, MAX_CATCH_UP, Misfire, MisfirePolicy, Overlap, ScheduleError};
use cairn_store::{NewSchedule, ScheduleFire, ScheduleRecord, ScheduleTrigger, StoreError, StoreResult, TickRun};
use jiff::{SignedDuration, Timestamp};
use serde::Deserialize;
use serde_json::Value;
use tokio::task::JoinHandle;

use crate::engine::Engine;
use crate::submit::{self, SubmitError, SubmitRequest};

/// A tick found at most this long after its nominal time is on time; later ones are misfires.
pub const MISFIRE_GRACE: Duration = Duration::from_secs(60);

/// How often the waiting loop runs (schedules, approval timeouts, event waits).
pub const WAIT_INTERVAL: Duration = Duration::from_secs(1);

/// Most schedules handled per tick pass.
const TICK_BATCH: i64 = 100;

/// Default `catch_up_max`.
const DEFAULT_CATCH_UP: u32 = 10;

/// A schedule as submitted (`POST /v1/schedules`). `schedule_id` and `tz` are accepted for `id` and
/// `timezone`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// Id; generated when absent. `[A-Za-z0-9_.-]{1,64}`.
    #[serde(default, alias = "schedule_id")]
    pub id: Option<String>,
    /// Cron expression (5 fields, or 6 with leading seconds).
    pub cron: String,
    /// IANA zone; UTC when absent.
    #[serde(default, alias = "tz")]
    pub timezone: Option<String>,
    /// The plan document each tick runs.
    pub plan: Value,
    /// Run input; the plan's own when absent.
    #[serde(default)]
    pub input: Option<Value>,
    /// Overlap policy; `skip` by default.
    #[serde(default)]
    pub overlap: Option<Overlap>,
    /// Misfire policy; `fire_once` by default.
    #[serde(default)]
    pub misfire: Option<Misfire>,
    /// Most runs for missed ticks under `catch_up` (1–100, default 10).
    #[serde(default)]
    pub catch_up_max: Option<u32>,
    /// Create paused.
    #[serde(default)]
    pub paused: bool,
    /// Labels put on every run the schedule starts.
    #[serde(default)]
    pub labels: cairn_core::labels::Labels,
}

/// Changes to a schedule (`PATCH /v1/schedules/{id}`); absent fields keep their value.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulePatch {
    /// New cron expression.
    #[serde(default)]
    pub cron: Option<String>,
    /// New zone.
    #[serde(default, alias = "tz")]
    pub timezone: Option<String>,
    /// New plan.
    #[serde(default)]
    pub plan: Option<Value>,
    /// New input.
    #[serde(default)]
    pub input: Option<Value>,
    /// New overlap policy.
    #[serde(default)]
    pub overlap: Option<Overlap>,
    /// New misfire policy.
    #[serde(default)]
    pub misfire: Option<Misfire>,
    /// New `catch_up_max`.
    #[serde(default)]
    pub catch_up_max: Option<u32>,
    /// New labels (replacing them all).
    #[serde(default)]
    pub labels: Option<cairn_core::labels::Labels>,
}

/// Why a schedule operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleOpError {
    /// Bad cron, zone, policy or id (never fires included). Not retryable (HTTP 422).
    #[error(transparent)]
    Invalid(#[from] ScheduleError),
    /// The plan is invalid. Not retryable (HTTP 422 with diagnostics).
    #[error("the plan is invalid")]
    InvalidPlan(Vec<Diagnostic>),
    /// The id is taken (HTTP 409).
    #[error("schedule `{0}` already exists")]
    Exists(String),
    /// No such schedule (HTTP 404).
    #[error("schedule not found")]
    NotFound,
    /// The store failed; retryable when the inner error is.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a "run now" of a schedule did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TriggerOutcome {
    /// A run started; `cancelled`: the open runs `overlap: cancel_previous` cancelled first.
    Started {
        /// The run.
        run_id: String,
        /// Runs cancelled first.
        cancelled: Vec<String>,
    },
    /// Nothing started: a run is still open and the overlap policy is `skip` (a skipped tick is recorded).
    Skipped,
}

/// What one tick pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickSummary {
    /// Runs started: `(schedule id, nominal instant ms, run id)`.
    pub started: Vec<(String, i64, String)>,
    /// Ticks skipped because the previous run was still open.
    pub skipped_overlap: usize,
    /// Missed ticks dropped by the misfire policy.
    pub missed: usize,
}

fn valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

fn timestamp(ms: i64) -> Timestamp {
    Timestamp::from_millisecond(ms).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// A time-ordered id (UUID v7 from the engine clock), as the engine makes run ids.
fn new_id(now_ms: i64) -> String {
    let secs = u64::try_from(now_ms.div_euclid(1000)).unwrap_or(0);
    let nanos = u32::try_from(now_ms.rem_euclid(1000) * 1_000_000).unwrap_or(0);
    uuid::Uuid::new_v7(uuid::Timestamp::from_unix(uuid::NoContext, secs, nanos)).to_string()
}

fn grace() -> SignedDuration {
    SignedDuration::try_from(MISFIRE_GRACE).unwrap_or(SignedDuration::ZERO)
}

impl Engine {
    /// Validates the plan as a submission at `now` would (the same validation a tick applies).
    fn check_plan(&self, plan: &Value, input: Option<&Value>, now: Timestamp) -> Result<(), Vec<Diagnostic>> {
        let req = SubmitRequest {
            plan: plan.clone(),
            input: input.cloned(),
            idempotency_key: None,
            labels: Default::default(),
        };
        match submit::prepare(&req, &self.catalog().snapshot(), &self.config().limits, String::new(), now) {
            Ok(_) => Ok(()),
            Err(SubmitError::Invalid(diagnostics)) => Err(diagnostics),
            Err(_) => Ok(()),
        }
    }

    /// Validates a definition and computes its first fire time after now.
    fn schedule_definition(&self, def: NewSchedule) -> Result<NewSchedule, ScheduleOpError> {
        let now = timestamp(def.now_ms);
        if !valid_id(&def.id) {
            return Err(ScheduleError::InvalidPolicy(format!(
                "invalid schedule id `{}`: use 1 to 64 of A-Z a-z 0-9 _ - .",
                def.id
            ))
            .into());
        }
        if !(1..=i64::from(MAX_CATCH_UP)).contains(&def.catch_up_max) {
            return Err(ScheduleError::InvalidPolicy(format!("catch_up_max must be 1 to {MAX_CATCH_UP}")).into());
        }
        cairn_core::labels::check(&def.labels).map_err(|e| ScheduleError::InvalidPolicy(e.to_string()))?;
        let cron = CronSchedule::new(&def.cron, &def.timezone, now)?;
        self.check_plan(&def.plan, def.input.as_ref(), now).map_err(ScheduleOpError::InvalidPlan)?;
        let next = cron.next_after(now).map(|t| t.as_millisecond());
        Ok(NewSchedule { timezone: cron.zone_name().to_owned(), next_fire_at_ms: next, ..def })
    }

    /// Creates a schedule; its first tick is the first fire time after now.
    ///
    /// # Errors
    /// [`ScheduleOpError::Invalid`] (bad cron or zone, never fires, bad policy or id),
    /// [`ScheduleOpError::InvalidPlan`], [`ScheduleOpError::Exists`], [`ScheduleOpError::Store`].
    pub async fn create_schedule(&self, spec: &ScheduleSpec) -> Result<ScheduleRecord, ScheduleOpError> {
        // Actions registered through another orchestrator are known before the plan is checked.
        let _ = self.catalog().snapshot_for(&spec.plan).await;
        let now_ms = self.now_ms();
        let def = NewSchedule {
            id: spec.id.clone().unwrap_or_else(|| new_id(now_ms)),
            cron: spec.cron.clone(),
            timezone: spec.timezone.clone().unwrap_or_else(|| "UTC".into()),
            plan: spec.plan.clone(),
            input: spec.input.clone(),
            overlap: spec.overlap.unwrap_or_default(),
            misfire: spec.misfire.unwrap_or_default(),
            catch_up_max: i64::from(spec.catch_up_max.unwrap_or(DEFAULT_CATCH_UP)),
            paused: spec.paused,
            labels: spec.labels.clone(),
            next_fire_at_ms: None,
            now_ms,
        };
        let def = self.schedule_definition(def)?;
        if !self.store().schedule_insert(&def).await? {
            return Err(ScheduleOpError::Exists(def.id));
        }
        tracing::info!(schedule_id = %def.id, cron = %def.cron, timezone = %def.timezone, next_fire_at_ms = ?def.next_fire_at_ms, "schedule created");
        self.store().schedule(&def.id).await?.ok_or(ScheduleOpError::NotFound)
    }

    /// Changes a schedule; the next tick is recomputed from now.
    ///
    /// # Errors
    /// As [`Engine::create_schedule`], and [`ScheduleOpError::NotFound`].
    pub async fn update_schedule(&self, id: &str, patch: &SchedulePatch) -> Result<ScheduleRecord, ScheduleOpError> {
        let current = self.store().schedule(id).await?.ok_or(ScheduleOpError::NotFound)?;
        if let Some(plan) = &patch.plan {
            let _ = self.catalog().snapshot_for(plan).await;
        }
        let def = NewSchedule {
            id: current.id,
            cron: patch.cron.clone().unwrap_or(current.cron),
            timezone: patch.timezone.clone().unwrap_or(current.timezone),
            plan: patch.plan.clone().unwrap_or(current.plan),
            input: patch.input.clone().or(current.input),
            overlap: patch.overlap.unwrap_or(current.overlap),
            misfire: patch.misfire.unwrap_or(current.misfire),
            catch_up_max: patch.catch_up_max.map_or(current.catch_up_max, i64::from),
            paused: current.paused,
            labels: patch.labels.clone().unwrap_or(current.labels),
            next_fire_at_ms: None,
            now_ms: self.now_ms(),
        };
        let def = self.schedule_definition(def)?;
        if !self.store().schedule_update(&def).await? {
            return Err(ScheduleOpError::NotFound);
        }
        self.store().schedule(id).await?.ok_or(ScheduleOpError::NotFound)
    }

    /// Pauses a schedule: no tick fires until it is resumed.
    ///
    /// # Errors
    /// [`ScheduleOpError::NotFound`], [`ScheduleOpError::Store`].
    pub async fn pause_schedule(&self, id: &str) -> Result<ScheduleRecord, ScheduleOpError> {
        if !self.store().schedule_pause(id, self.now_ms()).await? {
            return Err(ScheduleOpError::NotFound);
        }
        self.store().schedule(id).await?.ok_or(ScheduleOpError::NotFound)
    }

    /// Resumes a schedule from now: ticks that fell inside the pause do not fire.
    ///
    /// # Errors
    /// [`ScheduleOpError::NotFound`], [`ScheduleOpError::Invalid`] (a stored expression that no longer parses),
    /// [`ScheduleOpError::Store`].
    pub async fn resume_schedule(&self, id: &str) -> Result<ScheduleRecord, ScheduleOpError> {
        let current = self.store().schedule(id).await?.ok_or(ScheduleOpError::NotFound)?;
        let now_ms = self.now_ms();
        let next = if current.paused {
            let cron = CronSchedule::parse(&current.cron, &current.timezone)?;
            cron.next_after(timestamp(now_ms)).map(|t| t.as_millisecond())
        } else {
            current.next_fire_at_ms
        };
        if !self.store().schedule_resume(id, next, now_ms).await? {
            return Err(ScheduleOpError::NotFound);
        }
        self.store().schedule(id).await?.ok_or(ScheduleOpError::NotFound)
    }

    /// Deletes a schedule (its runs stay). False when there was none.
    ///
    /// # Errors
    /// Store errors.
    pub async fn delete_schedule(&self, id: &str) -> StoreResult<bool> {
        self.store().schedule_delete(id).await
    }

    /// The next `count` fire times of a schedule: from its stored next tick, or from now when paused.
    ///
    /// # Errors
    /// [`ScheduleOpError::NotFound`], [`ScheduleOpError::Invalid`], [`ScheduleOpError::Store`].
    pub async fn schedule_upcoming(&self, id: &str, count: usize) -> Result<Vec<Timestamp>, ScheduleOpError> {
        let s = self.store().schedule(id).await?.ok_or(ScheduleOpError::NotFound)?;
        let cron = CronSchedule::parse(&s.cron, &s.timezone)?;
        let mut out = Vec::with_capacity(count);
        let from = match s.next_fire_at_ms.filter(|_| !s.paused) {
            Some(next) if count > 0 => {
                out.push(timestamp(next));
                timestamp(next)
            }
            Some(_) => return Ok(out),
            None if s.paused => timestamp(self.now_ms()),
            None => return Ok(out),
        };
        out.extend(cron.upcoming(from, count - out.len()));
        Ok(out)
    }

    /// One tick pass: starts the runs of every due schedule per its misfire and overlap policies.
    ///
    /// # Errors
    /// Store errors (retryable; the schedules not handled are due again on the next pass).
    pub async fn tick_schedules(&self) -> StoreResult<TickSummary> {
        let now_ms = self.now_ms();
        let now = timestamp(now_ms);
        let mut summary = TickSummary::default();
        for s in self.store().schedules_due(now_ms, TICK_BATCH).await? {
            let Some(expected) = s.next_fire_at_ms else { continue };
            let cron = match CronSchedule::parse(&s.cron, &s.timezone) {
                Ok(cron) => cron,
                Err(e) => {
                    tracing::error!(schedule_id = %s.id, error = %e, "stored schedule no longer parses; skipped");
                    continue;
                }
            };
            let (misfire, overlap) = (s.misfire, s.overlap);
            let catch_up_max = u32::try_from(s.catch_up_max).unwrap_or(1);
            let plan = cron.due(timestamp(expected), now, MisfirePolicy { misfire, catch_up_max, grace: grace() });
            // The actions its plan uses, registered through any orchestrator, before its runs are validated.
            let _ = self.catalog().snapshot_for(&s.plan).await;
            let ticks = plan.fire.iter().map(|at| self.tick_run(&s, at.as_millisecond(), now)).collect();
            let fire = ScheduleFire {
                schedule_id: s.id.clone(),
                expected_next_ms: expected,
                next_fire_at_ms: plan.next_fire_at.map(|t| t.as_millisecond()),
                overlap,
                ticks,
                now_ms,
            };
            let out = self.store().schedule_fire(&fire).await?;
            if !out.claimed {
                continue; // another orchestrator handled this pass
            }
            if plan.missed > 0 {
                tracing::warn!(schedule_id = %s.id, missed = plan.missed, misfire = misfire.as_str(), "missed ticks");
            }
            for (fire_at, run_id) in &out.started {
                tracing::info!(schedule_id = %s.id, fire_at = %timestamp(*fire_at), run_id = %run_id, "scheduled run started");
            }
            summary.missed += plan.missed;
            summary.skipped_overlap += out.skipped.len();
            summary.started.extend(out.started.into_iter().map(|(at, run)| (s.id.clone(), at, run)));
        }
        if !summary.started.is_empty() {
            self.wake();
        }
        Ok(summary)
    }

    /// "Run now" (`POST /v1/schedules/{id}:trigger`): starts a run of the schedule at once, even while it is
    /// paused, under its overlap policy exactly as a tick (case D19): with `skip` and a run still open, nothing
    /// starts and a skipped tick is recorded; with `cancel_previous` the open runs are cancelled first.
    ///
    /// # Errors
    /// [`ScheduleOpError::NotFound`], [`ScheduleOpError::InvalidPlan`], [`ScheduleOpError::Store`].
    pub async fn trigger_schedule(&self, id: &str) -> Result<TriggerOutcome, ScheduleOpError> {
        let s = self.store().schedule(id).await?.ok_or(ScheduleOpError::NotFound)?;
        let now_ms = self.now_ms();
        let now = timestamp(now_ms);
        let req = SubmitRequest {
            plan: s.plan.clone(),
            input: s.input.clone(),
            idempotency_key: None,
            labels: s.labels.clone(),
        };
        let catalog = self.catalog().snapshot_for(&s.plan).await;
        let run = submit::prepare(&req, &catalog, &self.config().limits, new_id(now_ms), now).map_err(|e| match e {
            SubmitError::Invalid(diagnostics) => ScheduleOpError::InvalidPlan(diagnostics),
            SubmitError::Store(e) => ScheduleOpError::Store(e),
            // `prepare` only validates: a conflict is the store's answer to a submission with a key, and a
            // scheduled run has none.
            SubmitError::Conflict { .. } => ScheduleOpError::InvalidPlan(Vec::new()),
        })?;
        let trigger = ScheduleTrigger {
            schedule_id: s.id.clone(),
            overlap: s.overlap,
            tick: TickRun { fire_at_ms: now_ms, run: Ok(run) },
            now_ms,
        };
        let out = self.store().schedule_trigger(&trigger).await?.ok_or(ScheduleOpError::NotFound)?;
        if let Some((_, run_id)) = out.started.into_iter().next() {
            tracing::info!(schedule_id = %s.id, run_id = %run_id, "schedule triggered");
            self.wake();
            return Ok(TriggerOutcome::Started { run_id, cancelled: out.cancelled });
        }
        tracing::info!(schedule_id = %s.id, "schedule trigger skipped: a run is still open (overlap: skip)");
        Ok(TriggerOutcome::Skipped)
    }

    /// The run one tick starts, or why its plan does not validate any more.
    fn tick_run(&self, s: &ScheduleRecord, fire_at_ms: i64, now: Timestamp) -> TickRun {
        let req = SubmitRequest {
            plan: s.plan.clone(),
            input: s.input.clone(),
            idempotency_key: None,
            labels: s.labels.clone(),
        };
        let run_id = new_id(now.as_millisecond());
        let run = submit::prepare(&req, &self.catalog().snapshot(), &self.config().limits, run_id, now).map_err(|e| {
            tracing::error!(schedule_id = %s.id, error = %e, "scheduled plan is invalid; tick recorded without a run");
            match e {
                SubmitError::Invalid(diagnostics) => serde_json::json!({"diagnostics": diagnostics}).to_string(),
                other => serde_json::json!({"message": other.to_string()}).to_string(),
            }
        });
        TickRun { fire_at_ms, run }
    }

    /// One pass of every durable wait: schedule ticks, approval timeouts, `event.wait` starts and timeouts.
    ///
    /// # Errors
    /// The first store error (the other passes still ran).
    pub async fn waiting_pass(&self) -> StoreResult<()> {
        let ticks = self.tick_schedules().await.map(|_| ());
        let approvals = self.expire_approvals().await.map(|_| ());
        let started = self.start_event_waits().await.map(|_| ());
        let expired = self.expire_event_waits().await.map(|_| ());
        ticks.and(approvals).and(started).and(expired)
    }
}

/// Spawns the waiting loop ([`Engine::waiting_pass`] every [`WAIT_INTERVAL`]); it ends between passes once `stop`
/// is cancelled (or when the handle is aborted).
/// Safe in every orchestrator at once. Store errors are logged and retried on the next pass.
pub fn spawn(engine: Engine, stop: tokio_util::sync::CancellationToken) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(WAIT_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = stop.cancelled() => return,
            }
            if let Err(e) = engine.waiting_pass().await {
                tracing::warn!(error = %e, retryable = e.is_retryable(), "waiting pass failed");
            }
        }
    })
}
