//! Group commit: many new runs, reports and claims in one transaction, and the steps the runs make ready and the
//! dependents the reports release claimed in that same transaction for workers already waiting
//! (`docs/design/group-commit.md`).
//!
//! Every run, report and claim keeps its own semantics (a run is created exactly as `Store::create_run` would,
//! idempotency key included; a report is fenced by its lease and decided as if alone; runs come first, then
//! reports, then claims, each in order); only the commit is shared, so one `fsync` covers the whole batch. Nothing is acknowledged before the commit: the caller answers each
//! report, and hands the claimed steps to their waiters, only after this transaction committed. A hand-off claim
//! is the ordinary claim statement (`FOR UPDATE SKIP LOCKED` / `UPDATE … RETURNING`), so a step handed off can
//! never also be claimed by a poller, and a chain step costs one commit instead of two (complete, then claim).

use cairn_core::event::EventKind;
use std::collections::{HashMap, HashSet};

use super::settle::{Finished, close_runs, release};
use super::{claim, finish, submit};
use crate::ReportLimits;
use crate::error::StoreResult;
use crate::flow::finish::Report;
use crate::model::{BatchOutcome, ClaimRequest, Claimed, Lease, NewRun, ReportItem, ReportKind};
use crate::rows::EventInsert;
use crate::tx::DialectTx;

/// Chooses waiting claimers once the batch's effects are known: given how many steps became due, returns the
/// claim requests to serve in the same transaction (possibly none). Called again with the same count when the
/// transaction is retried after a conflict, and must then return the same requests.
pub type Handoff<'a> = &'a (dyn Fn(usize) -> Vec<ClaimRequest> + Send + Sync);

/// One batch of group commit ([`crate::Store::write_batch`], [`crate::BatchWriter::write_batch`]): applied in
/// one transaction, runs first, then reports, then claims, then the hand-off.
#[derive(Clone, Copy)]
pub struct Batch<'a> {
    /// New runs, created in order.
    pub runs: &'a [NewRun],
    /// Workers' reports, applied in order.
    pub reports: &'a [ReportItem],
    /// Claims, served in order.
    pub claims: &'a [ClaimRequest],
    /// Limits on what a report may carry.
    pub limits: ReportLimits,
    /// The lease TTL given to every step claimed.
    pub lease_ttl_ms: i64,
    /// The time of the batch (the orchestrator's clock).
    pub now_ms: i64,
    /// The waiting claimers to serve with what the batch made due.
    pub handoff: Handoff<'a>,
}

impl std::fmt::Debug for Batch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("runs", &self.runs.len())
            .field("reports", &self.reports.len())
            .field("claims", &self.claims.len())
            .field("now_ms", &self.now_ms)
            .finish_non_exhaustive()
    }
}

/// Creates the batch's runs in order, applies its reports in order, then its claims in order, then serves the
/// hand-off requests.
pub(crate) async fn report_batch<T: DialectTx>(
    tx: &mut T,
    batch: &Batch<'_>,
    events: &mut Vec<EventInsert>,
) -> StoreResult<BatchOutcome> {
    let Batch { runs, reports: items, claims, limits, lease_ttl_ms, now_ms: now, handoff } = *batch;
    let created = submit::create_all(tx, runs, events).await?;
    let mut decided = complete_together(tx, items, limits, now, events).await?;
    let mut reports = Vec::with_capacity(items.len());
    for (item, done) in items.iter().zip(decided.iter_mut()) {
        let report = match (done.take(), &item.kind) {
            (Some(report), _) => report,
            (None, ReportKind::Complete(output)) => {
                finish::complete(tx, &item.lease, output, limits, now, events).await?
            }
            (None, ReportKind::Fail { failure, sample }) => {
                finish::fail(tx, &item.lease, failure, *sample, now, events).await?
            }
        };
        reports.push(report);
    }
    let released = due_now(events, now);
    // A run with a step reported here (not stale) was marked running when that step was claimed.
    let running: HashSet<&str> = items
        .iter()
        .zip(&reports)
        .filter(|(_, report)| **report != Report::Stale)
        .map(|(item, _)| item.lease.run_id.as_str())
        .collect();
    let claimed = claim_all(tx, claims, lease_ttl_ms, now, &running, events).await?;
    // What the batch released and its own claims did not take is what waiting polls can have.
    let taken = claimed
        .iter()
        .flatten()
        .filter(|c| released.contains(&(c.lease.run_id.clone(), c.lease.step_id.clone())))
        .count();
    let ready_now = released.len().saturating_sub(taken);
    let handed = if ready_now > 0 {
        claim_all(tx, &handoff(ready_now), lease_ttl_ms, now, &running, events).await?
    } else {
        Vec::new()
    };
    Ok(BatchOutcome { created, reports, claimed, ready_now, handed })
}

/// Serves `claims` in order with one claim statement per worker and action list: a worker's requests in one
/// batch (the claim riding on each of its completions, a poll) share the statement, and the leased steps, in
/// claim order, are dealt out in request order, each request taking at most its limit. Returns one list per
/// request.
async fn claim_all<T: DialectTx>(
    tx: &mut T,
    claims: &[ClaimRequest],
    lease_ttl_ms: i64,
    now: i64,
    running: &HashSet<&str>,
    events: &mut Vec<EventInsert>,
) -> StoreResult<Vec<Vec<Claimed>>> {
    let mut out: Vec<Vec<Claimed>> = claims.iter().map(|_| Vec::new()).collect();
    let mut served = vec![false; claims.len()];
    for first in 0..claims.len() {
        if served[first] {
            continue;
        }
        let same = |c: &ClaimRequest| c.worker_id == claims[first].worker_id && c.actions == claims[first].actions;
        let group: Vec<usize> = (first..claims.len()).filter(|&j| !served[j] && same(&claims[j])).collect();
        let limit = group.iter().map(|&j| claims[j].limit).fold(0_u32, u32::saturating_add);
        let request = ClaimRequest { now_ms: now, limit, ..claims[first].clone() };
        let mut leased = claim::claim(tx, &request, lease_ttl_ms, running, events).await?.into_iter();
        for j in group {
            served[j] = true;
            out[j] = leased.by_ref().take(usize::try_from(claims[j].limit).unwrap_or(usize::MAX)).collect();
        }
    }
    Ok(out)
}

/// Steps made ready in this transaction whose time has come, as `(run_id, step_id)` (a dependent with a future
/// `not_before` or a retry in backoff is not due yet).
fn due_now(events: &[EventInsert], now: i64) -> HashSet<(String, String)> {
    events
        .iter()
        .filter(|e| e.kind == EventKind::StepReady)
        .filter(|e| e.available_at.is_some_and(|at| at <= now))
        .filter_map(|e| Some((e.run_id.clone(), e.step_id.clone()?)))
        .collect()
}

/// Accepts the batch's plain completions together: steps and attempts with [`DialectTx::succeed_many`], one
/// cascade per run (one release per level), then the runs' counters and finishes set-based ([`close_runs`]). Returns, per
/// item, the report when decided here; `None` items are left to the one-by-one path, in order: failures,
/// outputs over the limit (they fail the step), a second report for a step already in the set, and batches
/// with fewer than two plain completions (the prepared single-step statement is as fast).
///
/// A report repeating an earlier item's lease is [`Report::Stale`]: the earlier report used the lease up, as
/// it would one by one.
async fn complete_together<T: DialectTx>(
    tx: &mut T,
    items: &[ReportItem],
    limits: ReportLimits,
    now: i64,
    events: &mut Vec<EventInsert>,
) -> StoreResult<Vec<Option<Report>>> {
    let mut decided = vec![None; items.len()];
    let mut leases: HashSet<&Lease> = HashSet::new();
    let mut steps: HashSet<(&str, &str)> = HashSet::new();
    let mut plain: Vec<(usize, String)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        if !leases.insert(&item.lease) {
            decided[i] = Some(Report::Stale);
            continue;
        }
        let ReportKind::Complete(output) = &item.kind else { continue };
        let text = output.to_string();
        if text.len() <= limits.max_output_bytes && steps.insert((&item.lease.run_id, &item.lease.step_id)) {
            plain.push((i, text));
        }
    }
    if plain.len() < 2 {
        return Ok(decided);
    }
    let done: Vec<(&Lease, &str)> = plain.iter().map(|(i, text)| (&items[*i].lease, text.as_str())).collect();
    let children: HashMap<(String, String), i64> =
        tx.succeed_many(&done, now).await?.into_iter().map(|(run, step, count)| ((run, step), count)).collect();
    // Runs in first-seen order, so the cascades run in a deterministic order.
    let mut runs: Vec<(&str, Vec<Finished>)> = Vec::new();
    let mut run_index: HashMap<&str, usize> = HashMap::new();
    for (i, _) in &plain {
        let lease = &items[*i].lease;
        let Some(&count) = children.get(&(lease.run_id.clone(), lease.step_id.clone())) else {
            decided[*i] = Some(Report::Stale);
            continue;
        };
        decided[*i] = Some(Report::Succeeded);
        let finished = finish::succeeded(lease, count, now, events);
        match run_index.get(lease.run_id.as_str()) {
            Some(&at) => runs[at].1.push(finished),
            None => {
                run_index.insert(&lease.run_id, runs.len());
                runs.push((&lease.run_id, vec![finished]));
            }
        }
    }
    let mut closing = Vec::with_capacity(runs.len());
    for (run_id, finished) in runs {
        closing.push((run_id, release(tx, run_id, finished, now, events).await?));
    }
    close_runs(tx, &closing, now, events).await?;
    Ok(decided)
}
