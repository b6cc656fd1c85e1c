//! Group commit: many reports and claims in one transaction, and the dependents the reports release claimed in
//! that same transaction for workers already waiting (issue 8).
//!
//! Every report and claim keeps its own semantics (fenced by its lease, decided as if alone; claims run after
//! the reports, in order); only the commit is shared, so one `fsync` covers the whole batch. Nothing is acknowledged before the commit: the caller answers each
//! report, and hands the claimed steps to their waiters, only after this transaction committed. A hand-off claim
//! is the ordinary claim statement (`FOR UPDATE SKIP LOCKED` / `UPDATE … RETURNING`), so a step handed off can
//! never also be claimed by a poller, and a chain step costs one commit instead of two (complete, then claim).

use serde_json::Value;

use super::{claim, finish};
use crate::ReportLimits;
use crate::error::StoreResult;
use crate::model::{BatchOutcome, ClaimRequest, ReportItem, ReportKind};
use crate::rows::EventInsert;
use crate::tx::DialectTx;

/// Chooses waiting claimers once the batch's effects are known: given how many steps became due, returns the
/// claim requests to serve in the same transaction (possibly none). Called again with the same count when the
/// transaction is retried after a conflict, and must then return the same requests.
pub type Handoff<'a> = &'a (dyn Fn(usize) -> Vec<ClaimRequest> + Send + Sync);

/// Applies `items` in order, then the `claims` in order, then serves the hand-off requests.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn report_batch<T: DialectTx>(
    tx: &mut T,
    items: &[ReportItem],
    claims: &[ClaimRequest],
    limits: ReportLimits,
    lease_ttl_ms: i64,
    now: i64,
    handoff: Handoff<'_>,
    events: &mut Vec<EventInsert>,
) -> StoreResult<BatchOutcome> {
    let mut reports = Vec::with_capacity(items.len());
    for item in items {
        let report = match &item.kind {
            ReportKind::Complete(output) => finish::complete(tx, &item.lease, output, limits, now, events).await?,
            ReportKind::Fail { failure, sample } => {
                finish::fail(tx, &item.lease, failure, *sample, now, events).await?
            }
        };
        reports.push(report);
    }
    let ready_now = due_now(events, now);
    let mut claimed = Vec::with_capacity(claims.len());
    for request in claims {
        let request = ClaimRequest { now_ms: now, ..request.clone() };
        claimed.push(claim::claim(tx, &request, lease_ttl_ms, events).await?);
    }
    let mut handed = Vec::new();
    if ready_now > 0 {
        for mut request in handoff(ready_now) {
            request.now_ms = now;
            handed.push(claim::claim(tx, &request, lease_ttl_ms, events).await?);
        }
    }
    Ok(BatchOutcome { reports, claimed, ready_now, handed })
}

/// Steps made ready in this transaction whose time has come (a dependent with a future `not_before` or a retry
/// in backoff is not due yet).
fn due_now(events: &[EventInsert], now: i64) -> usize {
    events
        .iter()
        .filter(|e| e.kind == "step_ready")
        .filter(|e| {
            serde_json::from_str::<Value>(&e.data)
                .ok()
                .and_then(|d| d.get("available_at").and_then(Value::as_i64))
                .is_some_and(|at| at <= now)
        })
        .count()
}
