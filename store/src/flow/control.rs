//! Cancellation, operator decisions, approvals and the lease reaper.

use cairn_core::event::EventKind;
use cairn_core::failure::{Failure, codes};
use cairn_core::machine::{ApprovalEnd, OperatorAction, OperatorRule};
use cairn_core::state::StepStatus;
use serde_json::json;

use super::event;
use super::finish::{Report, fail};
use super::settle::{Finished, after_final};
use crate::error::StoreResult;
use crate::model::{Lease, ReapRequest};
use crate::rows::{EventInsert, StepMoved};
use crate::tx::{DialectTx, StepTx};
use crate::wait_tx::WaitTx;
use crate::waiting::ApprovalOutcome;

/// Cancels a run and every open step: pending, ready (including those waiting on a timer or a retry backoff),
/// running (the lease ends, late reports are ignored, heartbeats answer "gone"), waiting for approval, and parked
/// as `outcome_unknown`. Returns false when the run does not exist or already finished.
pub(crate) async fn cancel_run<T: StepTx>(
    tx: &mut T,
    run_id: &str,
    note: Option<&serde_json::Value>,
    now: i64,
    events: &mut Vec<EventInsert>,
) -> StoreResult<bool> {
    if !tx.run_cancel(run_id, now).await? {
        return Ok(false);
    }
    for (step_id, attempt) in tx.steps_cancel(run_id, now).await? {
        events.push(event(run_id, Some(&step_id), EventKind::StepCancelled, json!({"attempt": attempt}), now));
    }
    tx.attempts_cancel(run_id, now).await?;
    events.push(event(run_id, None, EventKind::RunCancelled, note.cloned().unwrap_or_else(|| json!({})), now));
    Ok(true)
}

/// An operator's decision on a step.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StepDecision<'a> {
    pub(crate) run_id: &'a str,
    pub(crate) step_id: &'a str,
    pub(crate) action: OperatorAction,
    /// Who decided.
    pub(crate) actor: &'a str,
    /// What the parked step's event records (`{"by": actor}` when `None`).
    pub(crate) note: Option<&'a serde_json::Value>,
}

/// Applies an operator decision ([`OperatorAction::rule`]); false when the step is not in the state the action
/// applies to. Approve and reject are the approval decisions of [`super::approval::decide`], deadline included.
pub(crate) async fn operate<T: StepTx + WaitTx>(
    tx: &mut T,
    d: &StepDecision<'_>,
    now: i64,
    events: &mut Vec<EventInsert>,
) -> StoreResult<bool> {
    let StepDecision { run_id, step_id, action, actor, .. } = *d;
    let to = match action.rule(actor) {
        OperatorRule::Approval(end) => {
            let approve = end == ApprovalEnd::Approved;
            let outcome = super::approval::decide(tx, run_id, step_id, approve, actor, now, events).await?;
            return Ok(outcome == ApprovalOutcome::Decided);
        }
        OperatorRule::Parked { to } => to,
    };
    let kind = match to {
        StepStatus::Ready => EventKind::OperatorRetry,
        StepStatus::Skipped => EventKind::OperatorSkip,
        _ => EventKind::OperatorFail,
    };
    // Ready now, or at the step's `not_before` timer if that is later (applied in `STEP_OPERATOR`).
    let available_at = (to == StepStatus::Ready).then_some(now);
    let finished_at = to.is_final().then_some(now);
    let moved = StepMoved { run_id, step_id, from: StepStatus::OutcomeUnknown, to, available_at, finished_at };
    if !tx.step_operator(&moved, now).await? {
        return Ok(false);
    }
    let note = d.note.cloned().unwrap_or_else(|| json!({"by": actor}));
    events.push(event(run_id, Some(step_id), kind, note, now));
    if to.is_final() {
        after_final(tx, run_id, vec![Finished::new(step_id, to)], now, events).await?;
    }
    Ok(true)
}

/// Fails attempts whose lease expired: `timeout` past the deadline, `heartbeat_timeout` when the step declares
/// one, `lease_lost` otherwise. Each goes through the normal failure path (retry, fail or `outcome_unknown`),
/// fenced by attempt number, so two reapers on two orchestrators reap an attempt once. Returns how many.
pub(crate) async fn reap<T: DialectTx>(
    tx: &mut T,
    request: &ReapRequest,
    events: &mut Vec<EventInsert>,
) -> StoreResult<usize> {
    let ReapRequest { now_ms: now, expired_by_ms, limit, sample } = *request;
    let mut reaped = 0;
    for row in tx.expired(expired_by_ms.min(now), limit).await? {
        // Which limit ended the lease first: the deadline when the lease was held to it, the heartbeat timeout
        // (or the lease TTL) when it ran out earlier, however late the reaper looks (after an outage, both).
        let held_to_deadline = matches!((row.lease_expires_at, row.deadline_at), (Some(l), Some(d)) if l >= d);
        let (code, message) =
            if held_to_deadline || row.lease_expires_at.is_none() && row.deadline_at.is_some_and(|d| now >= d) {
                (codes::TIMEOUT, "the attempt ran past timeout_ms".to_owned())
            } else if let Some(ms) = row.heartbeat_timeout_ms {
                (codes::HEARTBEAT_TIMEOUT, format!("no heartbeat for {ms} ms (heartbeat_timeout_ms)"))
            } else {
                (codes::LEASE_LOST, "the worker stopped renewing its lease (crashed, frozen or partitioned)".to_owned())
            };
        let Some(worker_id) = row.lease_owner.clone() else {
            continue;
        };
        let attempt = u32::try_from(row.attempt).unwrap_or(u32::MAX);
        let lease = Lease { run_id: row.run_id.clone(), step_id: row.step_id.clone(), attempt, worker_id };
        let failure = Failure::new(code, message, true);
        if fail(tx, &lease, &failure, sample, now, events).await? != Report::Stale {
            reaped += 1;
        }
    }
    Ok(reaped)
}
