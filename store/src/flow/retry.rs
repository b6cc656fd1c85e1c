//! An operator's retry of a step (contract §6, "Repairing a run"): a `failed` step runs again with a fresh attempt
//! budget, its run reopens and the dependents it had skipped are decided again ([`machine::reopen`]); an
//! `outcome_unknown` step gets a new attempt ([`super::control::operate`]). Either may come with repaired args,
//! which replace the step's args on the run (the plan stays as submitted) and give it a new idempotency key.

use cairn_core::event::EventKind;
use cairn_core::machine::{self, OperatorAction, RunStep};
use cairn_core::state::{RunStatus, StepStatus};
use serde_json::json;

use super::event;
use super::settle::{after_final, decide};
use crate::error::{StoreError, StoreResult};
use crate::reopen_tx::ReopenTx;
use crate::repair::{RetryOutcome, StepRetry};
use crate::rows::EventInsert;
use crate::tx::StepTx;
use crate::wait_tx::WaitTx;

/// Applies `req` ([`RetryOutcome`] says what happened; nothing changes unless it is `Retried`).
pub(crate) async fn step_retry<T: StepTx + WaitTx + ReopenTx>(
    tx: &mut T,
    req: &StepRetry<'_>,
    events: &mut Vec<EventInsert>,
) -> StoreResult<RetryOutcome> {
    let StepRetry { run_id, step_id, now_ms: now, .. } = *req;
    let Some((run_status, cancel_requested)) = tx.run_lock(run_id, now).await? else {
        return Ok(RetryOutcome::NoSuchStep);
    };
    let run_status: RunStatus = run_status.parse().map_err(|e| StoreError::corrupt("runs.status", e))?;
    let (rows, edges) = tx.run_graph(run_id).await?;
    let mut statuses = Vec::with_capacity(rows.len());
    for (id, status) in &rows {
        statuses.push((id.as_str(), status.parse::<StepStatus>().map_err(|e| StoreError::corrupt("steps.status", e))?));
    }
    let Some(&(_, status)) = statuses.iter().find(|(id, _)| *id == step_id) else {
        return Ok(RetryOutcome::NoSuchStep);
    };
    match status {
        StepStatus::OutcomeUnknown => {
            let args_revision = revise(tx, req).await?;
            if !super::control::operate(tx, run_id, step_id, OperatorAction::Retry, req.by, now, events).await? {
                return Err(StoreError::corrupt("steps.status", format!("step {step_id} moved while locked")));
            }
            Ok(RetryOutcome::Retried { args_revision, reopened: vec![step_id.to_owned()] })
        }
        StepStatus::Failed if cancel_requested != 0 || run_status == RunStatus::Cancelled => {
            Ok(RetryOutcome::RunCancelled)
        }
        StepStatus::Failed => {
            let args_revision = revise(tx, req).await?;
            let graph = graph(&statuses, &edges);
            let reopening =
                machine::reopen(&graph, &[step_id]).map_err(|e| StoreError::corrupt("steps.status", e.to_string()))?;
            if run_status.is_final() {
                events.push(event(run_id, None, EventKind::RunReopened, json!({"by": req.by}), now));
            }
            let mut data = json!({"by": req.by, "args_revision": args_revision});
            if let Some(reason) = req.reason {
                data["reason"] = json!(reason);
            }
            for step in &reopening.steps {
                if !tx.step_reopen(run_id, step, now).await? {
                    return Err(StoreError::corrupt("steps.status", format!("step {} moved while locked", step.step)));
                }
                if step.target {
                    events.push(event(run_id, Some(&step.step), EventKind::OperatorRetry, data.clone(), now));
                } else {
                    let reopened = json!({"after": step_id, "was": step.was.as_str()});
                    events.push(event(run_id, Some(&step.step), EventKind::StepReopened, reopened, now));
                }
            }
            for (waiting, more) in &reopening.waiting_longer {
                tx.step_wait_longer(run_id, waiting, *more, now).await?;
            }
            let goes_on = if run_status.is_final() { RunStatus::Running } else { run_status };
            tx.run_reopen(run_id, goes_on.as_str(), reopening.opened, now).await?;
            // A target that waits for nothing is decided now, exactly as a release decides a step.
            let mut candidates = Vec::new();
            for step in reopening.steps.iter().filter(|s| s.target && s.pending_deps == 0) {
                candidates.extend(tx.step_candidate(run_id, &step.step).await?);
            }
            let finals = decide(tx, run_id, candidates, None, now, events).await?;
            if !finals.is_empty() {
                after_final(tx, run_id, finals, now, events).await?;
            }
            Ok(RetryOutcome::Retried { args_revision, reopened: reopening.steps.into_iter().map(|s| s.step).collect() })
        }
        other => Ok(RetryOutcome::WrongState(other)),
    }
}

/// Replaces the step's args when the request repairs them; the step's args revision after it.
async fn revise<T: ReopenTx>(tx: &mut T, req: &StepRetry<'_>) -> StoreResult<i64> {
    let Some(args) = req.args else {
        return tx.step_args_revision(req.run_id, req.step_id).await;
    };
    let text = serde_json::to_string(args).map_err(|e| StoreError::corrupt("repaired args", e))?;
    tx.step_args_revise(req.run_id, req.step_id, &text, req.now_ms)
        .await?
        .ok_or_else(|| StoreError::corrupt("steps", format!("step {} vanished while locked", req.step_id)))
}

/// The run as [`machine::reopen`] reads it.
fn graph<'a>(statuses: &[(&'a str, StepStatus)], edges: &'a [(String, String)]) -> Vec<RunStep<'a>> {
    let mut parents: std::collections::HashMap<&str, Vec<&str>> = std::collections::HashMap::new();
    for (parent, child) in edges {
        parents.entry(child.as_str()).or_default().push(parent.as_str());
    }
    statuses
        .iter()
        .map(|&(id, status)| RunStep { id, status, parents: parents.remove(id).unwrap_or_default() })
        .collect()
}
