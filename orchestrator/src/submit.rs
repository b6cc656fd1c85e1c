//! From a plan document to a stored run: validate, resolve `not_before` timers, store.
//!
//! Timers are resolved once, at submission, against `context.now` (when the plan pins it) or the engine clock,
//! in `context.timezone` (UTC when absent). The stored step keeps both the instant and the spec as written with
//! its zone, so a DST change or a restart never moves a timer (case C20).

use cairn_core::catalog::ActionCatalog;
use cairn_core::diagnostic::{Code, Diagnostic};
use cairn_core::plan::Plan;
use cairn_core::time_spec;
use cairn_core::validate::{Limits, validate_value};
use cairn_store::{CreateOutcome, NewRun, RunDetail, StoreError};
use jiff::Timestamp;
use serde_json::Value;

/// A run to submit.
#[derive(Debug, Clone)]
pub struct SubmitRequest {
    /// The plan document (JSON value; YAML is converted by the caller).
    pub plan: Value,
    /// Run input; the plan's `input` when absent.
    pub input: Option<Value>,
    /// Run-level idempotency key.
    pub idempotency_key: Option<String>,
    /// The run's labels, checked by the caller ([`cairn_core::labels::check`]).
    pub labels: cairn_core::labels::Labels,
}

/// A stored (or found) run.
#[derive(Debug, Clone, PartialEq)]
pub struct Submitted {
    /// The run id.
    pub run_id: String,
    /// True when the idempotency key matched an existing run with the same plan and input.
    pub existing: bool,
    /// The new run as committed, when that is known without reading it back
    /// ([`cairn_store::Store::create_run_detailed`]); `None` for an existing run, a root that needed a decision
    /// (`when`, approval) or an `event.wait` step (started after the commit). Steps may have moved on since.
    pub created: Option<RunDetail>,
}

/// Why a submission was refused.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The plan is invalid; nothing was stored. Not retryable without fixing the plan (HTTP 422).
    #[error("the plan is invalid ({} error(s))", .0.iter().filter(|d| d.is_error()).count())]
    Invalid(Vec<Diagnostic>),
    /// The idempotency key belongs to a run of a different plan or input. Not retryable (HTTP 409).
    #[error("idempotency key already used by run {run_id} with a different plan or input")]
    Conflict {
        /// The run that holds the key.
        run_id: String,
    },
    /// The store failed; retryable when the inner error is.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Validates `req.plan` and builds the run to store.
pub(crate) fn prepare(
    req: &SubmitRequest,
    catalog: &dyn ActionCatalog,
    limits: &Limits,
    run_id: String,
    now: Timestamp,
) -> Result<NewRun, SubmitError> {
    let report = validate_value(&req.plan, catalog, limits);
    let Some(plan) = report.plan.filter(|_| report.valid) else {
        return Err(SubmitError::Invalid(report.diagnostics));
    };
    let timers = resolve_timers(&plan, now).map_err(SubmitError::Invalid)?;
    let input = req.input.clone().or_else(|| plan.input.clone()).unwrap_or(Value::Object(Default::default()));
    Ok(NewRun {
        run_id,
        plan,
        input,
        idempotency_key: req.idempotency_key.clone(),
        labels: req.labels.clone(),
        timers,
        now_ms: now.as_millisecond(),
    })
}

/// Resolves every `not_before` to (instant in ms, spec with zone as written).
fn resolve_timers(plan: &Plan, clock_now: Timestamp) -> Result<Vec<Option<(i64, String)>>, Vec<Diagnostic>> {
    let zone_name = plan.context.timezone.as_deref().unwrap_or("UTC");
    let zone = time_spec::zone(zone_name).map_err(|e| vec![timer_diagnostic("/context/timezone", None, e)])?;
    let now = match plan.context.now.as_deref() {
        Some(text) => text.parse::<Timestamp>().unwrap_or(clock_now),
        None => clock_now,
    };
    let mut out = Vec::with_capacity(plan.steps.len());
    let mut errors = Vec::new();
    for (i, step) in plan.steps.iter().enumerate() {
        let Some(spec) = &step.not_before else {
            out.push(None);
            continue;
        };
        let resolved = time_spec::parse(spec).and_then(|parsed| time_spec::resolve(&parsed, now, &zone));
        match resolved {
            Ok(r) => {
                let local = r.local.unwrap_or_else(|| spec.clone());
                out.push(Some((r.at.as_millisecond(), local)));
            }
            Err(e) => {
                errors.push(timer_diagnostic(&format!("/steps/{i}/not_before"), Some(&step.id), e));
                out.push(None);
            }
        }
    }
    if errors.is_empty() { Ok(out) } else { Err(errors) }
}

fn timer_diagnostic(pointer: &str, step: Option<&str>, e: time_spec::TimeSpecError) -> Diagnostic {
    let d = Diagnostic::error(Code::InvalidTime, pointer, e.to_string());
    match step {
        Some(id) => d.step(id),
        None => d,
    }
}

/// Maps the store's answer to the caller's.
pub(crate) fn outcome(created: CreateOutcome, detail: Option<RunDetail>) -> Result<Submitted, SubmitError> {
    match created {
        CreateOutcome::Created(run_id) => Ok(Submitted { run_id, existing: false, created: detail }),
        CreateOutcome::Existing(run_id) => Ok(Submitted { run_id, existing: true, created: None }),
        CreateOutcome::Conflict(run_id) => Err(SubmitError::Conflict { run_id }),
    }
}
