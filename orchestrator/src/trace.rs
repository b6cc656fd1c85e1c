//! The orchestrator's spans of a run: one root span when the run is submitted, and one span per step attempt
//! from its claim to its report, all in the run's trace (see `cairn_telemetry`).
//!
//! An attempt span lives in memory between two worker calls (poll, then complete or fail), keyed by lease.
//! Its id is derived from the attempt, which is also what the attempt's `traceparent` names, so the worker's
//! span is its child whether or not this process still holds it. Consequences, by design:
//! - an attempt claimed before a restart (or by another orchestrator) and reported here has no orchestrator
//!   span, but its worker spans still join the run's trace, under the attempt's id; nothing is re-emitted for
//!   work done before the restart;
//! - attempts whose lease expires (a crashed worker) are closed by the reaper's pass with `cairn.report =
//!   "expired"` and the likely code (`timeout` past the deadline, else `lease_lost`); the store's failure record
//!   is the authority. An attempt claimed here but heartbeated and reported to another orchestrator sharing the
//!   database ends the same way here (workers normally keep one connection, so this is rare).

use std::collections::HashMap;
use std::sync::Mutex;

use cairn_store::{Claimed, Lease};
use cairn_telemetry as telemetry;
use tracing::Span;
use tracing::field::Empty;

/// (run, step, attempt).
type AttemptKey = (String, String, u32);

/// An attempt between its claim and its report.
#[derive(Debug)]
struct OpenAttempt {
    span: Span,
    action: String,
    claimed_at_ms: i64,
    /// When the lease runs out unless heartbeats extend it.
    expires_at_ms: i64,
    deadline_ms: i64,
}

/// What a closed attempt tells the metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClosedAttempt {
    /// Action name.
    pub(crate) action: String,
    /// When it was claimed (epoch ms).
    pub(crate) claimed_at_ms: i64,
}

/// The open attempt spans of this process.
#[derive(Debug, Default)]
pub(crate) struct AttemptSpans {
    open: Mutex<HashMap<AttemptKey, OpenAttempt>>,
}

fn key(lease: &Lease) -> AttemptKey {
    (lease.run_id.clone(), lease.step_id.clone(), lease.attempt)
}

/// Emits the root span of a newly submitted run.
pub(crate) fn run_submitted(run_id: &str) {
    let span = tracing::info_span!(parent: None, "run", cairn.run_id = %run_id);
    telemetry::start_run_span(&span, run_id);
}

impl AttemptSpans {
    fn open(&self) -> std::sync::MutexGuard<'_, HashMap<AttemptKey, OpenAttempt>> {
        self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Opens the span of a just-claimed attempt at `now_ms`; its lease lives `lease_ttl_ms` unless the step
    /// sets a heartbeat timeout.
    pub(crate) fn claimed(&self, claimed: &Claimed, now_ms: i64, lease_ttl_ms: i64) {
        let lease = &claimed.lease;
        // No contextual parent: the poll request that claimed it is not part of the run.
        let span = tracing::info_span!(
            parent: None,
            "attempt",
            otel.name = %format!("attempt {}", lease.step_id),
            cairn.run_id = %lease.run_id,
            cairn.step_id = %lease.step_id,
            cairn.attempt = lease.attempt,
            cairn.action = %claimed.action,
            cairn.worker_id = %lease.worker_id,
            cairn.report = Empty,
            cairn.failure_code = Empty,
            otel.status_code = Empty,
        );
        telemetry::start_attempt_span(&span, &lease.run_id, &lease.step_id, lease.attempt);
        let ttl = claimed.heartbeat_timeout_ms.unwrap_or(lease_ttl_ms);
        let attempt = OpenAttempt {
            span,
            action: claimed.action.clone(),
            claimed_at_ms: now_ms,
            expires_at_ms: claimed.deadline_ms.min(now_ms.saturating_add(ttl)),
            deadline_ms: claimed.deadline_ms,
        };
        self.open().insert(key(lease), attempt);
    }

    /// A heartbeat moved the lease's expiry to `expires_at_ms`.
    pub(crate) fn extended(&self, lease: &Lease, expires_at_ms: i64) {
        if let Some(attempt) = self.open().get_mut(&key(lease)) {
            attempt.expires_at_ms = expires_at_ms;
        }
    }

    /// Closes the attempt's span: `report` is how it ended (`succeeded`, `retry_scheduled`, `failed`,
    /// `outcome_unknown`, `stale`, `gone`), `failure_code` the code of a failed attempt. `None` when this process
    /// holds no span for it.
    pub(crate) fn closed(&self, lease: &Lease, report: &str, failure_code: Option<&str>) -> Option<ClosedAttempt> {
        let attempt = self.open().remove(&key(lease))?;
        end(&attempt.span, report, failure_code);
        Some(ClosedAttempt { action: attempt.action, claimed_at_ms: attempt.claimed_at_ms })
    }

    /// Closes the spans of attempts whose lease expired by `now_ms` (the reaper fails those attempts). Returns
    /// how many.
    pub(crate) fn expired(&self, now_ms: i64) -> usize {
        let mut open = self.open();
        let before = open.len();
        open.retain(|_, attempt| {
            if attempt.expires_at_ms > now_ms {
                return true;
            }
            let code = if attempt.expires_at_ms >= attempt.deadline_ms {
                cairn_core::failure::codes::TIMEOUT
            } else {
                cairn_core::failure::codes::LEASE_LOST
            };
            end(&attempt.span, "expired", Some(code));
            false
        });
        before - open.len()
    }
}

fn end(span: &Span, report: &str, failure_code: Option<&str>) {
    span.record("cairn.report", report);
    if let Some(code) = failure_code {
        span.record("cairn.failure_code", code);
        span.record("otel.status_code", "ERROR");
    }
    // The span ends when its last handle (the one in the map) is dropped, right after this.
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claimed(step: &str, deadline_ms: i64) -> Claimed {
        Claimed {
            lease: Lease { run_id: "r".into(), step_id: step.into(), attempt: 1, worker_id: "w".into() },
            action: "noop".into(),
            args: serde_json::Value::Null,
            idempotency_key: format!("r/{step}"),
            deadline_ms,
            due_at_ms: 0,
            timeout_ms: deadline_ms,
            heartbeat_timeout_ms: None,
            checkpoint: None,
            completion: cairn_store::CompletionHint::default(),
        }
    }

    #[test]
    fn a_report_closes_the_attempt_it_names_once() {
        let spans = AttemptSpans::default();
        let c = claimed("a", 60_000);
        spans.claimed(&c, 100, 10_000);
        let closed = spans.closed(&c.lease, "succeeded", None);
        assert_eq!(closed, Some(ClosedAttempt { action: "noop".into(), claimed_at_ms: 100 }), "the claim is known");
        assert_eq!(spans.closed(&c.lease, "stale", None), None, "a replayed report finds nothing open");
    }

    #[test]
    fn only_attempts_past_their_lease_expire() {
        let spans = AttemptSpans::default();
        let (short, long) = (claimed("short", 60_000), claimed("long", 60_000));
        spans.claimed(&short, 0, 10_000);
        spans.claimed(&long, 0, 10_000);
        spans.extended(&long.lease, 30_000);
        assert_eq!(spans.expired(20_000), 1, "the lease that was not extended expired");
        assert!(spans.closed(&long.lease, "succeeded", None).is_some(), "the extended one is still open");
    }
}
