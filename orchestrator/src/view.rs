//! The run as shown to people and scripts (API `GET /v1/runs/{id}`, `cairn show --json`).
//!
//! Shape: `{id, status, plan_id, created_at_ms, finished_at_ms, failure, steps: [{id, action, status, attempts,
//! output, error, failures: [failure records, oldest first], timer: {not_before_at_ms, local} | null,
//! available_at_ms, waiting_for?, attempt_records: [{attempt, status, worker_id, started_at_ms,
//! ended_at_ms}]}]}`. `failure` on the run names the root cause: the first failed step, its code, message and
//! suggestion. A `ready` step whose action no connected worker serves says so: `waiting_for: {kind: "worker",
//! action}`. `attempt_records` are the step's attempts, oldest first (the dashboard's timeline draws one bar per
//! attempt).

use std::collections::HashSet;

use cairn_core::state::StepStatus;
use cairn_store::{RunDetail, StoreResult};
use serde_json::{Value, json};

use crate::engine::Engine;

/// The run with its steps, attempts and failure records; `None` when there is no such run.
///
/// # Errors
/// Store errors.
pub async fn run_view(engine: &Engine, run_id: &str) -> StoreResult<Option<Value>> {
    // One snapshot: a report committed between separate reads showed a step `running` next to the failure of
    // the attempt that had just ended.
    let Some(detail) = engine.store().run_detail(run_id).await? else { return Ok(None) };
    Ok(Some(detail_view(detail, &engine.served_actions().await?)))
}

/// The run's input and its steps' outcomes, as a step's placeholders read them.
struct RunScope<'a> {
    input: &'a Value,
    steps: &'a [cairn_store::StepSummary],
}

impl cairn_core::placeholder::Scope for RunScope<'_> {
    fn input(&self) -> &Value {
        self.input
    }
    fn producer(&self, step_id: &str) -> cairn_core::placeholder::Producer<'_> {
        match self.steps.iter().find(|s| s.id == step_id) {
            Some(s) => cairn_core::placeholder::Producer::of(s.status, s.output.as_ref()),
            None => cairn_core::placeholder::Producer::Pending,
        }
    }
}

/// A step's args with their placeholders resolved against the run as it stands (what an attempt starting now
/// would be given), or `None` while one still waits for its producer or cannot resolve. Args without
/// placeholders are their own resolution.
fn resolved_args(args: &Value, scope: &RunScope<'_>) -> Option<Value> {
    if cairn_core::placeholder::references(args).is_empty() {
        return Some(args.clone());
    }
    cairn_core::placeholder::resolve_args(args, scope).ok()
}

/// The view of a run already read (or known from its creation, [`crate::Submitted::created`]); `served`: the
/// actions a connected worker serves ([`Engine::served_actions`]).
#[must_use]
pub fn detail_view(detail: RunDetail, served: &HashSet<String>) -> Value {
    let resolved: Vec<Option<Value>> = {
        let scope = RunScope { input: &detail.input, steps: &detail.steps };
        detail.steps.iter().map(|s| resolved_args(&s.args, &scope)).collect()
    };
    let RunDetail { run, input, steps, attempts } = detail;
    let steps: Vec<Value> = steps
        .into_iter()
        .zip(resolved)
        .map(|(s, resolved_args)| {
            let own: Vec<&cairn_store::AttemptRecord> = attempts.iter().filter(|a| a.step_id == s.id).collect();
            let failures: Vec<&Value> = own.iter().filter_map(|a| a.failure.as_ref()).collect();
            let attempt_records: Vec<Value> = own
                .iter()
                .map(|a| {
                    json!({"attempt": a.attempt, "status": a.status, "worker_id": a.worker_id,
                        "started_at_ms": a.started_at_ms, "ended_at_ms": a.ended_at_ms})
                })
                .collect();
            let timer = s.not_before_at_ms.map(|at| json!({"not_before_at_ms": at, "local": s.not_before_local}));
            let mut view = json!({
                "id": s.id, "action": s.action, "status": s.status, "attempts": s.attempts,
                "output": s.output, "error": s.error, "failures": failures, "timer": timer,
                "available_at_ms": s.available_at_ms, "checkpoint": s.checkpoint, "args_revision": s.args_revision,
                "args": s.args, "started_at_ms": s.started_at_ms, "finished_at_ms": s.finished_at_ms,
                "attempt_records": attempt_records, "resolved_args": resolved_args,
            });
            let run_by_orchestrator = s.action == cairn_core::event_wait::ACTION;
            if s.status == StepStatus::Ready && !run_by_orchestrator && !served.contains(&s.action) {
                view["waiting_for"] = json!({"kind": "worker", "action": s.action});
            }
            view
        })
        .collect();
    // The summary (as `GET /v1/runs` lists it), plus the input and the steps.
    let mut view = json!(run);
    view["input"] = input;
    view["steps"] = Value::Array(steps);
    view
}
