//! Approval decisions and approval timeouts (contract §2 `approval`, §10 "Waiting").
//!
//! A step entering `waiting_approval` keeps its decision deadline (entry + `timeout_ms`) in `available_at`. A
//! person's decision is accepted only before the deadline; at or after it, the declared `on_timeout` applies
//! (`fail`, `skip`, `proceed`), either in the timeout pass or, when a decision arrives first, right then, and the
//! decision is refused as timed out. Both paths use one conditional update fenced on the status and on which
//! side of the deadline `now` is, so a decision and a timeout never both apply.

use cairn_core::plan::{Approval, ApprovalReject, ApprovalTimeout};
use serde_json::{Value, json};

use super::event;
use super::settle::after_final;
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

fn failure_record(code: &str, message: String) -> Value {
    json!({"code": code, "message": message, "retryable": false, "suggestion": "ask_user"})
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
    let message = format!("rejected by {actor}");
    let record = failure_record("approval_rejected", message).to_string();
    let (status, available_at, error, kind) = if approve {
        ("ready", Some(row.not_before_at.unwrap_or(now).max(now)), None, "step_approved")
    } else if approval.is_some_and(|a| a.on_reject == ApprovalReject::Skip) {
        ("skipped", None, None, "step_rejected")
    } else {
        ("failed", None, Some(record.as_str()), "step_rejected")
    };
    let d = ApprovalDecide { run_id, step_id, status, available_at, error, before_deadline: true };
    if !tx.approval_decide(&d, now).await? {
        return Ok(ApprovalOutcome::WrongState);
    }
    events.push(event(run_id, Some(step_id), kind, json!({"by": actor, "outcome": status}), now));
    if status != "ready" {
        after_final(tx, run_id, vec![step_id.to_owned()], now, events).await?;
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
    let timeout_ms = approval.as_ref().and_then(|a| a.timeout_ms);
    let message = format!("no approval decision within {} ms (approval.timeout_ms)", timeout_ms.unwrap_or(0));
    let record = failure_record("approval_timeout", message.clone()).to_string();
    let (status, available_at, error) = match on_timeout {
        ApprovalTimeout::Fail => ("failed", None, Some(record.as_str())),
        ApprovalTimeout::Skip => ("skipped", None, None),
        ApprovalTimeout::Proceed => ("ready", Some(row.not_before_at.unwrap_or(now).max(now)), None),
    };
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
    events.push(event(&row.run_id, Some(&row.step_id), "step_approval_timed_out", data, now));
    match status {
        "failed" => {
            let data = json!({"code": "approval_timeout", "message": message});
            events.push(event(&row.run_id, Some(&row.step_id), "step_failed", data, now));
        }
        "skipped" => {
            let data = json!({"reason": "approval timed out (on_timeout: skip)"});
            events.push(event(&row.run_id, Some(&row.step_id), "step_skipped", data, now));
        }
        _ => {
            let data = json!({"available_at": available_at});
            events.push(event(&row.run_id, Some(&row.step_id), "step_ready", data, now));
        }
    }
    if status != "ready" {
        after_final(tx, &row.run_id, vec![row.step_id.clone()], now, events).await?;
    }
    Ok(true)
}
