//! Completions and failures reported under a lease (contract §6).
//!
//! Every report is fenced: the step must still be `running` with the same attempt number, and held by the same
//! worker. A replayed, late or foreign report finds nothing to update and changes nothing ([`Report::Stale`]).

use cairn_core::event::{EventKind, Progress};
use cairn_core::failure::{Failure, FailureRecord, codes};
use cairn_core::machine::{AfterFailure, FailedAttempt, after_failure};
use cairn_core::retry::RetryPolicy;
use cairn_core::state::StepStatus;
use serde_json::{Value, json};

use super::settle::{Finished, after_final, after_succeeded};
use super::{event, rfc3339};
use crate::error::{StoreError, StoreResult};
use crate::model::Lease;
use crate::rows::{AttemptClose, EventInsert, LeasedRow};
use crate::tx::{DialectTx, StepTx};

/// What became of a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// The step succeeded.
    Succeeded,
    /// The failure was recorded and a retry scheduled.
    RetryScheduled,
    /// The step failed for good.
    Failed,
    /// The step is parked as `outcome_unknown` for an operator.
    OutcomeUnknown,
    /// The lease is gone (replayed, late, cancelled or foreign report): nothing changed.
    Stale,
}

/// Limits applied to reports.
#[derive(Debug, Clone, Copy)]
pub struct ReportLimits {
    /// Largest accepted output, in bytes of its JSON text.
    pub max_output_bytes: usize,
}

async fn leased<T: StepTx>(tx: &mut T, lease: &Lease) -> StoreResult<Option<LeasedRow>> {
    let row = tx.step_leased(lease).await?;
    Ok(row.filter(|r| r.lease_owner.as_deref() == Some(lease.worker_id.as_str())))
}

/// Accepts a successful result. An output larger than the limit fails the step instead (not retried: the same
/// input yields the same size), and the oversized output is never written.
pub(crate) async fn complete<T: DialectTx>(
    tx: &mut T,
    lease: &Lease,
    output: &Value,
    limits: ReportLimits,
    now: i64,
    events: &mut Vec<EventInsert>,
) -> StoreResult<Report> {
    let text = output.to_string();
    if text.len() > limits.max_output_bytes {
        let Some(row) = leased(tx, lease).await? else {
            return Ok(Report::Stale);
        };
        let mut failure = Failure::new(
            codes::OUTPUT_TOO_LARGE,
            format!("output of {} bytes exceeds the limit of {} bytes", text.len(), limits.max_output_bytes),
            false,
        );
        failure.details = json!({"size_bytes": text.len(), "limit_bytes": limits.max_output_bytes});
        return fail_row(tx, lease, &row, &failure, 0.0, now, events).await;
    }
    // The usual case reads nothing: the fenced update is the lease check.
    let Some(done) = tx.succeed(lease, &text, now).await? else {
        return Ok(Report::Stale);
    };
    let finished = succeeded(lease, done.child_count, now, events);
    after_succeeded(tx, &lease.run_id, finished, done, now, events).await?;
    Ok(Report::Succeeded)
}

/// Records the `step_succeeded` event of a step whose row and attempt were just marked succeeded, and returns it
/// for the cascade (with its number of dependents, so a leaf skips the release).
pub(crate) fn succeeded(lease: &Lease, child_count: i64, now: i64, events: &mut Vec<EventInsert>) -> Finished {
    let succeeded = Progress::Succeeded { attempt: lease.attempt };
    events.push(EventInsert::progress(&lease.run_id, Some(&lease.step_id), succeeded, now));
    Finished { step_id: lease.step_id.clone(), status: StepStatus::Succeeded, children: Some(child_count) }
}

/// Records a failed attempt and decides retry, failure or `outcome_unknown`. `sample` ∈ `[0, 1)` drives jitter.
pub(crate) async fn fail<T: StepTx>(
    tx: &mut T,
    lease: &Lease,
    failure: &Failure,
    sample: f64,
    now: i64,
    events: &mut Vec<EventInsert>,
) -> StoreResult<Report> {
    let Some(row) = leased(tx, lease).await? else {
        return Ok(Report::Stale);
    };
    fail_row(tx, lease, &row, failure, sample, now, events).await
}

async fn fail_row<T: StepTx>(
    tx: &mut T,
    lease: &Lease,
    row: &LeasedRow,
    failure: &Failure,
    sample: f64,
    now: i64,
    events: &mut Vec<EventInsert>,
) -> StoreResult<Report> {
    let policy: RetryPolicy = serde_json::from_str(&row.retry).map_err(|e| StoreError::corrupt("steps.retry", e))?;
    // Counted within the step's attempt budget: an operator's retry starts a fresh one.
    let attempt = u32::try_from(i64::from(lease.attempt) - row.attempt_base).unwrap_or(lease.attempt);
    let decision =
        after_failure(FailedAttempt { policy: &policy, attempt, idempotent: row.idempotent != 0, failure }, sample);
    let mut record = failure_record(lease, row, failure, now);
    if decision == AfterFailure::Fail && failure.retryable && attempt >= policy.max_attempts {
        record.message = format!("{} (retries exhausted after {attempt} attempt(s))", record.message);
    }
    if decision == AfterFailure::OutcomeUnknown {
        record.suggestion = cairn_core::failure::Suggestion::AskUser;
    }
    let record_text = serde_json::to_string(&record).map_err(|e| StoreError::corrupt("failure record", e))?;
    let close = AttemptClose {
        status: "failed",
        failure_code: Some(record.code.clone()),
        failure_message: Some(record.message.clone()),
        failure_details: Some(record.details.to_string()),
        retryable: Some(i64::from(record.retryable)),
        retry_after_ms: record.retry_after_ms.and_then(|ms| i64::try_from(ms).ok()),
        suggestion: serde_json::to_value(record.suggestion).ok().and_then(|v| v.as_str().map(str::to_owned)),
        degraded: Some(i64::from(record.degraded)),
    };
    let data = json!({"attempt": lease.attempt, "code": record.code, "message": record.message});
    let report = match decision {
        AfterFailure::Retry { delay } => {
            let delay_ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
            let at = now.saturating_add(delay_ms);
            if !tx.step_requeue(lease, at, &record_text, now).await? {
                return Ok(Report::Stale);
            }
            let mut data = data;
            data["next_attempt_at"] = json!(at);
            events.push(event(&lease.run_id, Some(&lease.step_id), EventKind::StepRetryScheduled, data, now));
            Report::RetryScheduled
        }
        AfterFailure::Fail => {
            if !tx.step_finish(lease, "failed", None, Some(&record_text), now).await? {
                return Ok(Report::Stale);
            }
            events.push(event(&lease.run_id, Some(&lease.step_id), EventKind::StepFailed, data, now));
            Report::Failed
        }
        AfterFailure::OutcomeUnknown => {
            if !tx.step_finish(lease, "outcome_unknown", None, Some(&record_text), now).await? {
                return Ok(Report::Stale);
            }
            events.push(event(&lease.run_id, Some(&lease.step_id), EventKind::StepOutcomeUnknown, data, now));
            Report::OutcomeUnknown
        }
    };
    tx.attempt_close(lease, &close, now).await?;
    if report == Report::Failed {
        let finished = Finished::new(lease.step_id.clone(), StepStatus::Failed);
        after_final(tx, &lease.run_id, vec![finished], now, events).await?;
    }
    Ok(report)
}

fn failure_record(lease: &Lease, row: &LeasedRow, failure: &Failure, now: i64) -> FailureRecord {
    FailureRecord {
        run_id: lease.run_id.clone(),
        step_id: lease.step_id.clone(),
        attempt: lease.attempt,
        action: row.action.clone(),
        worker_id: Some(lease.worker_id.clone()),
        code: failure.code.clone(),
        message: failure.message.clone(),
        details: failure.details.clone(),
        retryable: failure.retryable,
        retry_after_ms: failure.retry_after_ms,
        suggestion: failure.suggestion(),
        degraded: failure.degraded,
        started_at: row.started_at.map(rfc3339),
        ended_at: Some(rfc3339(now)),
    }
}
