//! `event.wait` steps, run by the orchestrator itself (contract §10, "Waiting").
//!
//! Start: a ready `event.wait` step is claimed like any step (attempt row, `step_started`, placeholders resolved)
//! by the owner [`WAIT_OWNER`]; in the same transaction its lease expiry is cleared (the reaper leaves it alone:
//! the wait has its own deadline) and stored events of the same name received since `start - lookback_ms` are
//! checked. A match completes the step with the payload; otherwise an `event_waits` row is written. Delivery:
//! `POST /v1/events` stores the event and completes every waiting step it matches, in one transaction. Timeout:
//! waits past their deadline end per `on_timeout`. Every completion goes through the normal lease-fenced paths,
//! so a wait that was cancelled, or already matched by a concurrent delivery, changes nothing.
//!
//! Delivery and start take a per-name lock ([`WaitTx::lock_event_name`]) before reading, so an event committed
//! while a wait starts is seen by one of the two.

use cairn_core::event::EventKind;
use std::collections::HashSet;

use cairn_core::event_wait::{self, EventFilter, WaitArgs, WaitTimeout};
use cairn_core::failure::{Failure, codes};
use cairn_core::state::StepStatus;
use serde_json::{Value, json};

use super::claim::claim;
use super::event;
use super::finish::{Report, ReportLimits, complete, fail};
use super::settle::{Finished, after_final};
use crate::error::{StoreError, StoreResult};
use crate::model::{ClaimRequest, Lease};
use crate::rows::{AttemptClose, EventInsert};
use crate::tx::DialectTx;
use crate::wait_tx::{EventInRow, WaitRow, WaitTx};
use crate::waiting::Delivery;

/// The lease owner of `event.wait` attempts.
pub const WAIT_OWNER: &str = "cairn-orchestrator/event.wait";

/// Most stored events examined for one wait's lookback.
const LOOKBACK_SCAN: i64 = 1000;

fn lease_of(w: &WaitRow) -> StoreResult<Lease> {
    Ok(Lease {
        run_id: w.run_id.clone(),
        step_id: w.step_id.clone(),
        attempt: u32::try_from(w.attempt).map_err(|e| StoreError::corrupt("event_waits.attempt", e))?,
        worker_id: WAIT_OWNER.to_owned(),
    })
}

fn payload_of(e: &EventInRow) -> StoreResult<Value> {
    serde_json::from_str(&e.payload).map_err(|err| StoreError::corrupt("events_in.payload", err))
}

/// Whether an event matches a wait's key and filter; a filter that cannot be evaluated is no match.
fn matches(key: Option<&str>, filter: Option<&EventFilter>, e: &EventInRow, payload: &Value) -> bool {
    if key.is_some() && key != e.key.as_deref() {
        return false;
    }
    match filter.map(|f| f.matches(&e.name, e.key.as_deref(), payload)) {
        None | Some(Ok(true)) => true,
        Some(Ok(false)) => false,
        Some(Err(reason)) => {
            tracing::debug!(event_id = %e.id, %reason, "event filter did not evaluate: no match");
            false
        }
    }
}

/// Completes a waiting step with the matched event's payload.
async fn deliver_to<T: DialectTx + WaitTx>(
    tx: &mut T,
    lease: &Lease,
    e: &EventInRow,
    payload: &Value,
    limits: ReportLimits,
    now: i64,
    events: &mut Vec<EventInsert>,
) -> StoreResult<Report> {
    let report = complete(tx, lease, payload, limits, now, events).await?;
    if report != Report::Stale {
        let data = json!({"event_id": e.id, "name": e.name, "key": e.key, "received_at": e.received_at});
        events.push(event(&lease.run_id, Some(&lease.step_id), EventKind::StepEventReceived, data, now));
    }
    Ok(report)
}

/// Claims up to `limit` ready `event.wait` steps and starts their waits. Returns how many were claimed.
pub(crate) async fn start<T: DialectTx + WaitTx>(
    tx: &mut T,
    now: i64,
    limit: u32,
    limits: ReportLimits,
    events: &mut Vec<EventInsert>,
) -> StoreResult<usize> {
    let req = ClaimRequest {
        worker_id: WAIT_OWNER.to_owned(),
        actions: vec![event_wait::ACTION.to_owned()],
        limit,
        now_ms: now,
    };
    let claimed = claim(tx, &req, 1000, &HashSet::new(), events).await?;
    let count = claimed.len();
    for c in claimed {
        let args = match WaitArgs::from_value(&c.args) {
            Ok(args) => args,
            Err(message) => {
                fail(tx, &c.lease, &Failure::new(codes::INVALID_ARGS, message, false), 0.0, now, events).await?;
                continue;
            }
        };
        let filter = args.filter.as_deref().map(EventFilter::compile).transpose().ok().flatten();
        let lookback = i64::try_from(args.lookback_ms).unwrap_or(i64::MAX);
        let since = now.saturating_sub(lookback);
        tx.lock_event_name(&args.name).await?;
        let mut matched = false;
        // Without a lookback only events delivered after this start count. One stored before it — even in the
        // same millisecond, as the event that released this step from an earlier wait often is — is in the past:
        // delivery and start hold the name's lock, so every event is either stored before the wait exists or
        // delivered to it (case D10 b).
        let earlier = if lookback > 0 {
            tx.events_since(&args.name, since, args.key.as_deref(), LOOKBACK_SCAN).await?
        } else {
            Vec::new()
        };
        for e in earlier {
            let payload = payload_of(&e)?;
            if matches(args.key.as_deref(), filter.as_ref(), &e, &payload) {
                deliver_to(tx, &c.lease, &e, &payload, limits, now, events).await?;
                matched = true;
                break;
            }
        }
        if matched {
            continue;
        }
        let deadline = args.timeout_ms.map(|ms| now.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX)));
        let attempt = i64::from(c.lease.attempt);
        tx.step_wait_arm(&c.lease.run_id, &c.lease.step_id, attempt, deadline).await?;
        let row = WaitRow {
            run_id: c.lease.run_id.clone(),
            step_id: c.lease.step_id.clone(),
            attempt,
            name: args.name.clone(),
            key: args.key.clone(),
            filter: args.filter.clone(),
            since_at: since,
            deadline_at: deadline,
            on_timeout: args.on_timeout.as_str().to_owned(),
            timeout_output: Some(args.timeout_output().to_string()),
        };
        tx.wait_insert(&row, now).await?;
        let data = json!({"name": args.name, "key": args.key, "since": since, "deadline": deadline});
        events.push(event(&c.lease.run_id, Some(&c.lease.step_id), EventKind::StepWaitingEvent, data, now));
    }
    Ok(count)
}

/// Stores an event and completes every waiting step it matches. Returns `(run_id, step_id)` of those steps.
pub(crate) async fn deliver<T: DialectTx + WaitTx>(
    tx: &mut T,
    e: &EventInRow,
    dedupe_id: Option<&str>,
    limits: ReportLimits,
    events: &mut Vec<EventInsert>,
) -> StoreResult<Delivery> {
    let now = e.received_at;
    tx.lock_event_name(&e.name).await?;
    // Under the name's lock, so two deliveries of one id cannot both find it missing.
    if let Some(dedupe_id) = dedupe_id
        && let Some(id) = tx.event_by_dedupe_id(&e.name, dedupe_id).await?
    {
        return Ok(Delivery::Duplicate { id });
    }
    tx.event_insert(e, dedupe_id).await?;
    let payload = payload_of(e)?;
    let mut matched = Vec::new();
    for w in tx.waits_for(&e.name).await? {
        let filter = w.filter.as_deref().map(EventFilter::compile).transpose().ok().flatten();
        if w.since_at > now || !matches(w.key.as_deref(), filter.as_ref(), e, &payload) {
            continue;
        }
        let lease = lease_of(&w)?;
        let report = deliver_to(tx, &lease, e, &payload, limits, now, events).await?;
        tx.wait_delete(&w.run_id, &w.step_id, w.attempt).await?;
        if report != Report::Stale {
            matched.push((w.run_id, w.step_id));
        }
    }
    Ok(Delivery::Delivered { matched })
}

/// Ends up to `limit` waits past their deadline per `on_timeout`. Returns how many ended.
pub(crate) async fn expire<T: DialectTx + WaitTx>(
    tx: &mut T,
    now: i64,
    limit: i64,
    limits: ReportLimits,
    events: &mut Vec<EventInsert>,
) -> StoreResult<usize> {
    let mut ended = 0;
    for w in tx.waits_due(now, limit).await? {
        let lease = lease_of(&w)?;
        let on_timeout: WaitTimeout = serde_json::from_value(Value::String(w.on_timeout.clone()))
            .map_err(|e| StoreError::corrupt("event_waits.on_timeout", e))?;
        let waited = w.deadline_at.unwrap_or(now).saturating_sub(w.since_at);
        let message = format!("no `{}` event matched within the wait's timeout_ms", w.name);
        let data = json!({"name": w.name, "key": w.key, "on_timeout": on_timeout.as_str(), "waited_ms": waited});
        let report = match on_timeout {
            WaitTimeout::Fail => {
                let failure = Failure::new(event_wait::TIMEOUT_CODE, message, false);
                fail(tx, &lease, &failure, 0.0, now, events).await?
            }
            WaitTimeout::Skip => skip(tx, &lease, &message, now, events).await?,
            WaitTimeout::Succeed => {
                let output = match w.timeout_output.as_deref() {
                    Some(text) => serde_json::from_str(text).map_err(|e| StoreError::corrupt("timeout_output", e))?,
                    None => json!({"timed_out": true}),
                };
                complete(tx, &lease, &output, limits, now, events).await?
            }
        };
        tx.wait_delete(&w.run_id, &w.step_id, w.attempt).await?;
        if report != Report::Stale {
            events.push(event(&w.run_id, Some(&w.step_id), EventKind::StepEventTimedOut, data, now));
            ended += 1;
        }
    }
    Ok(ended)
}

/// Ends a leased step as `skipped` (a wait that timed out with `on_timeout: skip`).
async fn skip<T: WaitTx>(
    tx: &mut T,
    lease: &Lease,
    message: &str,
    now: i64,
    events: &mut Vec<EventInsert>,
) -> StoreResult<Report> {
    if !tx.step_finish(lease, "skipped", None, None, now).await? {
        return Ok(Report::Stale);
    }
    let close = AttemptClose {
        status: "failed",
        failure_code: Some(event_wait::TIMEOUT_CODE.to_owned()),
        failure_message: Some(message.to_owned()),
        failure_details: None,
        retryable: Some(0),
        retry_after_ms: None,
        suggestion: Some("skip".to_owned()),
        degraded: Some(0),
    };
    tx.attempt_close(lease, &close, now).await?;
    let data = json!({"reason": "the event wait timed out (on_timeout: skip)"});
    events.push(event(&lease.run_id, Some(&lease.step_id), EventKind::StepSkipped, data, now));
    after_final(tx, &lease.run_id, vec![Finished::new(lease.step_id.clone(), StepStatus::Skipped)], now, events)
        .await?;
    Ok(Report::Succeeded)
}
