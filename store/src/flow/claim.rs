//! Claiming ready steps and resolving their placeholders (contract §3, §6).
//!
//! The claim itself is one statement per dialect (PostgreSQL `FOR UPDATE SKIP LOCKED`, SQLite `UPDATE …
//! RETURNING`), so two claimers never lease the same step. In the same transaction each claimed step gets an
//! attempt row and a `step_started` event, and its args are resolved from persisted outputs. A step whose args
//! cannot be resolved fails right there with `placeholder_unresolved` (not retried) and is not handed out.

use cairn_core::event::EventKind;
use std::collections::{HashMap, HashSet};

use cairn_core::failure::{Failure, codes};
use cairn_core::placeholder::{self, Producer, Root, Scope};
use cairn_core::state::StepStatus;
use serde_json::{Value, json};

use super::event;
use super::finish::fail;
use crate::error::{StoreError, StoreResult};
use crate::model::{ClaimRequest, Claimed, CompletionHint, Lease};
use crate::rows::{ClaimedRow, EventInsert};
use crate::tx::DialectTx;

/// Leases up to `req.limit` due steps and returns them with resolved args. `running`: runs the caller knows are
/// already `running` (a step of theirs was reported in this transaction), whose status need not be written.
pub(crate) async fn claim<T: DialectTx>(
    tx: &mut T,
    req: &ClaimRequest,
    lease_ttl_ms: i64,
    running: &HashSet<&str>,
    events: &mut Vec<EventInsert>,
) -> StoreResult<Vec<Claimed>> {
    // Attempt rows, run statuses and `step_started` events are the claim's own (see `DialectTx::claim`).
    let rows = tx.claim(req, lease_ttl_ms, running, events).await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        if let Some(claimed) = take(tx, row, &req.worker_id, req.now_ms, events).await? {
            out.push(claimed);
        }
    }
    Ok(out)
}

/// The step of a claimed `row`, leased to `worker_id`, with its args resolved; `None` when a placeholder cannot
/// be resolved: the step then failed in `tx` (`placeholder_unresolved`, not retried) and is not handed out.
pub(crate) async fn take<T: DialectTx>(
    tx: &mut T,
    row: ClaimedRow,
    worker_id: &str,
    now: i64,
    events: &mut Vec<EventInsert>,
) -> StoreResult<Option<Claimed>> {
    let lease = lease_of(&row, worker_id)?;
    match resolve(tx, &row).await? {
        Ok(args) => Ok(Some(claimed(row, lease, args, now)?)),
        Err(failure) => {
            fail(tx, &lease, &failure, 0.0, now, events).await?;
            Ok(None)
        }
    }
}

/// The lease under which `worker_id` holds the claimed `row`.
pub(crate) fn lease_of(row: &ClaimedRow, worker_id: &str) -> StoreResult<Lease> {
    Ok(Lease {
        run_id: row.run_id.clone(),
        step_id: row.step_id.clone(),
        attempt: u32::try_from(row.attempt).map_err(|e| StoreError::corrupt("steps.attempt", e))?,
        worker_id: worker_id.to_owned(),
    })
}

/// A step's idempotency key (contract §6): `<run>/<step>`, the same for every attempt and every retry with the
/// plan's args; `<run>/<step>/<revision>` once an operator repaired its args, a different request.
pub(crate) fn idempotency_key(run_id: &str, step_id: &str, args_revision: i64) -> String {
    if args_revision == 0 { format!("{run_id}/{step_id}") } else { format!("{run_id}/{step_id}/{args_revision}") }
}

pub(crate) fn claimed(row: ClaimedRow, lease: Lease, args: Value, now_ms: i64) -> StoreResult<Claimed> {
    let checkpoint = match row.checkpoint.as_deref() {
        Some(text) => Some(serde_json::from_str(text).map_err(|e| StoreError::corrupt("steps.checkpoint", e))?),
        None => None,
    };
    Ok(Claimed {
        idempotency_key: idempotency_key(&row.run_id, &row.step_id, row.args_revision),
        lease,
        action: row.action,
        args,
        deadline_ms: row.deadline_at,
        // Never null for a claimed step (the claim selects `available_at <= now`).
        due_at_ms: row.available_at.unwrap_or(now_ms),
        timeout_ms: row.timeout_ms,
        heartbeat_timeout_ms: row.heartbeat_timeout_ms,
        checkpoint,
        completion: CompletionHint { successor_action: row.successor_action, leaf: row.child_count == Some(0) },
    })
}

/// Producers' statuses and outputs, as read in the claiming transaction.
struct Outputs {
    input: Value,
    steps: HashMap<String, (String, Value)>,
}

impl Scope for Outputs {
    fn input(&self) -> &Value {
        &self.input
    }
    fn producer(&self, step_id: &str) -> Producer<'_> {
        match self.steps.get(step_id) {
            Some((status, output)) => Producer::of(status.parse().unwrap_or(StepStatus::Pending), Some(output)),
            None => Producer::Pending,
        }
    }
}

/// Resolves the row's args; `Ok(Err(failure))` when a placeholder cannot be resolved.
async fn resolve<T: DialectTx>(tx: &mut T, row: &ClaimedRow) -> StoreResult<Result<Value, Failure>> {
    let args: Value = serde_json::from_str(&row.args).map_err(|e| StoreError::corrupt("steps.args", e))?;
    let found = placeholder::references(&args);
    if found.is_empty() {
        return Ok(Ok(args));
    }
    let mut outputs = Outputs { input: Value::Null, steps: HashMap::new() };
    let mut needs_input = false;
    for reference in found.iter().filter_map(|f| f.result.as_ref().ok()) {
        match &reference.root {
            Root::Input => needs_input = true,
            Root::Step(id) if !outputs.steps.contains_key(id) => {
                if let Some(state) = tx.step_state(&row.run_id, id).await? {
                    let output = match state.output.as_deref() {
                        Some(text) => serde_json::from_str(text).map_err(|e| StoreError::corrupt("steps.output", e))?,
                        None => Value::Null,
                    };
                    outputs.steps.insert(id.clone(), (state.status, output));
                }
            }
            Root::Step(_) => {}
        }
    }
    if needs_input {
        let text = tx.run_input(&row.run_id).await?.unwrap_or_else(|| "null".into());
        outputs.input = serde_json::from_str(&text).map_err(|e| StoreError::corrupt("runs.input", e))?;
    }
    Ok(placeholder::resolve_args(&args, &outputs).map_err(|e| {
        let mut failure = Failure::new(codes::PLACEHOLDER_UNRESOLVED, e.to_string(), false);
        failure.details = json!({"placeholder": e.placeholder, "arg_path": e.arg_path, "reason": e.kind});
        failure
    }))
}

/// Undoes claims whose attempts never started (the call they were handed to had ended, or the worker returned
/// them unstarted; `reason` goes into each `step_unclaimed` event): each step goes back to ready, due now, with its attempt number and attempt row given back, so the attempt
/// neither counts against `max_attempts` nor waits for its lease to expire. Returns how many were undone (a
/// lease that already ended is left alone).
pub(crate) async fn unclaim<T: DialectTx>(
    tx: &mut T,
    leases: &[Lease],
    reason: &str,
    now: i64,
    events: &mut Vec<EventInsert>,
) -> StoreResult<usize> {
    let mut undone = 0;
    for lease in leases {
        if tx.step_unclaim(lease, now).await? {
            tx.attempt_delete(lease).await?;
            let data = json!({"attempt": lease.attempt, "reason": reason});
            events.push(event(&lease.run_id, Some(&lease.step_id), EventKind::StepUnclaimed, data, now));
            undone += 1;
        }
    }
    Ok(undone)
}
