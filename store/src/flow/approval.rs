//! Approval decisions and approval timeouts (contract §2 `approval`, §10 "Waiting").
//!
//! A step entering `waiting_approval` keeps its decision deadline (entry + `timeout_ms`) in `available_at`. A
//! person's decision is accepted only before the deadline; at or after it, the declared `on_timeout` applies
//! (`fail`, `skip`, `proceed`), either in the timeout pass or, when a decision arrives first, right then, and the
//! decision is refused as timed out. Both paths use one conditional update fenced on the status and on which
//! side of the deadline `now` is, so a decision and a timeout never both apply.

use cairn_core::event::{EventKind, Progress};
use cairn_core::machine::{ApprovalEnd, Decision, StepRules, after_approval};
use cairn_core::plan::{Approval, TriggerRule};
use serde_json::{Value, json};

use super::event;
use super::settle::{Finished, after_final};
use crate::error::{StoreError, StoreResult};
use crate::rows::EventInsert;
use crate::wait_tx::{ApprovalDecide, ApprovalRow, WaitTx};
use crate::waiting::ApprovalOutcome;

fn approval_of(row: &ApprovalRow) -> StoreResult<Option<Approval>> {
    row.approval
        .as_deref()
        .map(|text| serde_json::from_str::<Approval>(text).map_err(|e| StoreError::corrupt("steps.approval", e)))
        .transpose()
}

/// The rules a decision needs, from the row.
fn rules<'a>(row: &ApprovalRow, approval: Option<&'a Approval>) -> StepRules<'a> {
    StepRules { trigger_rule: TriggerRule::default(), when: None, approval, not_before_at: row.not_before_at }
}

/// What a decision of [`after_approval`] writes: status, `available_at`, failure record.
fn written(decision: &Decision) -> StoreResult<(&'static str, Option<i64>, Option<String>)> {
    Ok(match decision {
        Decision::Ready { available_at } => ("ready", Some(*available_at), None),
        Decision::Skipped(_) => ("skipped", None, None),
        Decision::Failed(f) => {
            let record = json!({"code": f.code, "message": f.message, "retryable": false, "suggestion": "ask_user"});
            ("failed", None, Some(record.to_string()))
        }
        Decision::Wait | Decision::WaitingApproval { .. } => {
            return Err(StoreError::corrupt("approval", "an approval's end decided that the step keeps waiting"));
        }
    })
}

/// Applies a person's decision. `approve`: the step becomes ready (at its `not_before` timer if later); reject:
/// failed (code `approval_rejected`) or skipped, per `approval.on_reject`.
pub(crate) async fn decide<T: WaitTx>(
    tx: &mut T,
    run_id: &str,
    step_id: &str,
    approve: bool,
    actor: &str,
    now: i64,
    events: &mut Vec<EventInsert>,
) -> StoreResult<ApprovalOutcome> {
    let Some(row) = tx.approval_row(run_id, step_id).await? else {
        let timed_out = tx.approval_timed_out(run_id, step_id).await?;
        return Ok(if timed_out { ApprovalOutcome::TimedOut } else { ApprovalOutcome::WrongState });
    };
    if row.available_at.is_some_and(|deadline| deadline <= now) {
        // The deadline passed before the timeout pass got to it: the declared outcome applies, not this decision.
        expire(tx, &row, now, events).await?;
        return Ok(ApprovalOutcome::TimedOut);
    }
    let approval = approval_of(&row)?;
    let end = if approve { ApprovalEnd::Approved } else { ApprovalEnd::Rejected { by: actor.to_owned() } };
    let decision = after_approval(&rules(&row, approval.as_ref()), &end, now);
    let (status, available_at, error) = written(&decision)?;
    let error = error.as_deref();
    let kind = if approve { EventKind::StepApproved } else { EventKind::StepRejected };
    let d = ApprovalDecide { run_id, step_id, status, available_at, error, before_deadline: true };
    if !tx.approval_decide(&d, now).await? {
        return Ok(ApprovalOutcome::WrongState);
    }
    events.push(event(run_id, Some(step_id), kind, json!({"by": actor, "outcome": status}), now));
    if let Some(to) = decision.status().filter(|s| s.is_final()) {
        after_final(tx, run_id, vec![Finished::new(step_id, to)], now, events).await?;
    }
    Ok(ApprovalOutcome::Decided)
}

/// Applies `on_timeout` to up to `limit` approvals whose deadline passed. Returns how many.
pub(crate) async fn expire_due<T: WaitTx>(
    tx: &mut T,
    now: i64,
    limit: i64,
    events: &mut Vec<EventInsert>,
) -> StoreResult<usize> {
    let mut expired = 0;
    for row in tx.approvals_due(now, limit).await? {
        if expire(tx, &row, now, events).await? {
            expired += 1;
        }
    }
    Ok(expired)
}

/// Applies `on_timeout` to one approval past its deadline; false when it was decided or expired meanwhile.
async fn expire<T: WaitTx>(
    tx: &mut T,
    row: &ApprovalRow,
    now: i64,
    events: &mut Vec<EventInsert>,
) -> StoreResult<bool> {
    let approval = approval_of(row)?;
    let on_timeout = approval.as_ref().map(|a| a.on_timeout).unwrap_or_default();
    let decision = after_approval(&rules(row, approval.as_ref()), &ApprovalEnd::TimedOut, now);
    let (status, available_at, error) = written(&decision)?;
    let error = error.as_deref();
    let d = ApprovalDecide {
        run_id: &row.run_id,
        step_id: &row.step_id,
        status,
        available_at,
        error,
        before_deadline: false,
    };
    if !tx.approval_decide(&d, now).await? {
        return Ok(false);
    }
    let on_timeout_name = serde_json::to_value(on_timeout).unwrap_or(Value::Null);
    let data = json!({"on_timeout": on_timeout_name, "deadline": row.available_at, "outcome": status});
    events.push(event(&row.run_id, Some(&row.step_id), EventKind::StepApprovalTimedOut, data, now));
    let step = Some(row.step_id.as_str());
    events.push(match &decision {
        Decision::Failed(f) => {
            event(&row.run_id, step, EventKind::StepFailed, json!({"code": f.code, "message": f.message}), now)
        }
        Decision::Skipped(reason) => {
            event(&row.run_id, step, EventKind::StepSkipped, json!({"reason": reason.as_str()}), now)
        }
        _ => EventInsert::progress(&row.run_id, step, Progress::Ready { available_at }, now),
    });
    if let Some(to) = decision.status().filter(|s| s.is_final()) {
        after_final(tx, &row.run_id, vec![Finished::new(row.step_id.clone(), to)], now, events).await?;
    }
    Ok(true)
}
