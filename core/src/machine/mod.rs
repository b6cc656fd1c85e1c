//! The pure state machine of a run (contract §5–6): decisions as functions, no I/O, no clock.
//!
//! - [`after_failure`]: retry (with the delay), fail, or park as `outcome_unknown`.
//! - [`readiness`]: whether a step whose dependencies are final runs or is skipped, per its trigger rule.
//! - [`decide`]: the decision for a pending step (trigger rule, then `when`, then approval and timer), the one
//!   every store calls; [`starts_itself`]: the fact stored at submission that lets a store's statement make a
//!   step ready by comparing counters.
//! - [`run_outcome`]: the final status of a run whose steps are all final; [`run_end`]: whether and how a run
//!   ends, from the counters a store keeps on its row ([`RunCounters`], changed by [`StepsClosed`]).
//! - [`OperatorAction::rule`]: what an operator's retry, skip or fail does to a parked step, and which approval
//!   end an approve or reject is.
//! - [`reopen`]: what running failed or cancelled steps again (an operator's retry, a redrive) opens again,
//!   and how the run's counters take them back; [`rerun_from`]: what a new run from one step runs again.
//! - [`RunGraph`]: a whole run in memory; [`RunGraph::apply`] takes an [`Event`] and returns the
//!   [`Transition`]s it causes, cascading readiness, `when` and skip propagation level by level, in the order of
//!   the stores' events. The stores apply the same [`decide`] incrementally against the database; `RunGraph` is
//!   the model their property test compares them with.
//!
//! Order of decisions for a step whose dependencies are all final (case C09): trigger rule first, then `when`,
//! and only for a step that will run are placeholders resolved (at dispatch). So a skipped producer never makes a
//! consumer fail just because its `when` would have skipped it anyway.

use std::time::Duration;

use serde_json::Value;

use crate::failure::{Failure, codes};
use crate::plan::TriggerRule;
use crate::retry::{self, RetryPolicy};
use crate::state::{RunStatus, StepStatus};

/// What happens to a step after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// Try again after `delay` (`next_attempt_at = now + delay`).
    Retry {
        /// Backoff delay, at least the failure's `retry_after_ms`.
        delay: Duration,
    },
    /// The step is `failed`.
    Fail,
    /// The step is `outcome_unknown`: a non-idempotent attempt ended ambiguously.
    OutcomeUnknown,
}

/// The inputs of [`after_failure`].
#[derive(Debug, Clone, Copy)]
pub struct FailedAttempt<'a> {
    /// The step's retry policy.
    pub policy: &'a RetryPolicy,
    /// The attempt that failed, 1-based, counted within the step's attempt budget: an operator's retry of a
    /// failed step ([`reopen`]) starts a fresh budget, so its first new attempt counts as 1 again.
    pub attempt: u32,
    /// Whether the step is idempotent.
    pub idempotent: bool,
    /// The failure.
    pub failure: &'a Failure,
}

/// Codes whose outcome is ambiguous: the action may or may not have taken effect. `transport_error` is a
/// request that was (or may have been) written before its connection failed: the remote service may have acted
/// on it, exactly as after a `timeout`.
pub fn is_ambiguous(code: &str) -> bool {
    matches!(code, codes::TIMEOUT | codes::HEARTBEAT_TIMEOUT | codes::LEASE_LOST | codes::TRANSPORT_ERROR)
}

/// Decides retry, failure or `outcome_unknown` (contract §6).
///
/// A step may run again only if it is idempotent or the failure says the action certainly did not take effect.
/// A non-idempotent step with an ambiguous failure (timeout, heartbeat timeout, lost lease, transport error) is
/// parked as `outcome_unknown` instead of being re-executed blindly. `sample` is a uniform draw in `[0, 1)` for jitter.
pub fn after_failure(failed: FailedAttempt<'_>, sample: f64) -> AfterFailure {
    let failure = failed.failure;
    let may_repeat = failed.idempotent || failure.did_not_take_effect;
    if !may_repeat {
        return if is_ambiguous(&failure.code) { AfterFailure::OutcomeUnknown } else { AfterFailure::Fail };
    }
    let retryable = failure.retryable || is_ambiguous(&failure.code);
    if retry::should_retry(failed.policy, failed.attempt, &failure.code, retryable) {
        let backoff = retry::delay_from_sample(failed.policy, failed.attempt, sample);
        let after = Duration::from_millis(failure.retry_after_ms.unwrap_or(0));
        return AfterFailure::Retry { delay: backoff.max(after) };
    }
    AfterFailure::Fail
}

/// Whether a step may run once its dependencies are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// Some dependency is not final yet (`outcome_unknown` counts as not final).
    Wait,
    /// The trigger rule holds; evaluate `when` next.
    Run,
    /// The trigger rule cannot hold; the step is skipped (skip propagation).
    Skip,
}

/// Applies the trigger rule to the dependencies' statuses.
///
/// `all_success`: every dependency succeeded. `all_done`: every dependency final. `none_failed`: no dependency
/// failed or was cancelled (skipped is fine). `one_success`: at least one succeeded, judged once all are final.
pub fn readiness(rule: TriggerRule, parents: impl IntoIterator<Item = StepStatus>) -> Readiness {
    let (mut succeeded, mut failed, mut other, mut open) = (0usize, 0usize, 0usize, 0usize);
    for status in parents {
        match status {
            StepStatus::Succeeded => succeeded += 1,
            StepStatus::Failed | StepStatus::Cancelled => failed += 1,
            StepStatus::Skipped => other += 1,
            _ => open += 1,
        }
    }
    if open > 0 {
        return Readiness::Wait;
    }
    let total = succeeded + failed + other;
    let runs = match rule {
        TriggerRule::AllSuccess => succeeded == total,
        TriggerRule::AllDone => true,
        TriggerRule::NoneFailed => failed == 0,
        TriggerRule::OneSuccess => succeeded > 0 || total == 0,
    };
    if runs { Readiness::Run } else { Readiness::Skip }
}

/// The final status of a run whose steps are all final.
pub fn run_outcome(cancelled: bool, failed_steps: usize) -> RunStatus {
    match (cancelled, failed_steps) {
        (true, _) => RunStatus::Cancelled,
        (false, 0) => RunStatus::Succeeded,
        _ => RunStatus::Failed,
    }
}

/// Something that happened to a run.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A worker took the step (ready → running).
    Claimed(String),
    /// The current attempt succeeded.
    Succeeded(String, Value),
    /// Several steps' current attempts succeeded together (a store's batch of completions): each becomes
    /// succeeded, in order, then their dependents are decided as one level.
    SucceededTogether(Vec<(String, Value)>),
    /// The current attempt failed (reported by the worker or detected: timeout, lease lost).
    Failed(String, Failure),
    /// A human approved a step waiting for approval.
    Approved(String),
    /// A human rejected a step waiting for approval.
    Rejected(String),
    /// An operator acted on a step parked as `outcome_unknown` (retry, skip or fail).
    Operator(String, OperatorAction),
    /// The whole run was cancelled.
    RunCancelled,
}

/// A state change caused by an event.
#[derive(Debug, Clone, PartialEq)]
pub enum Transition {
    /// A step changed status.
    Step {
        /// Step id.
        step: String,
        /// New status.
        to: StepStatus,
    },
    /// A failed attempt will be retried after `delay` (the step stays `ready`).
    RetryScheduled {
        /// Step id.
        step: String,
        /// Backoff delay.
        delay: Duration,
    },
    /// The run changed status.
    Run(RunStatus),
}

mod decide;
mod operator;
mod reopen;
mod run_end;
mod run_graph;

pub use decide::{
    ApprovalEnd, Decision, Next, SkipReason, StepRules, WhenPending, after_approval, decide, starts_itself,
};
pub use operator::{OperatorAction, OperatorRule};
pub use reopen::{ReopenRefused, Reopened, Reopening, Rerun, RunStep, redrive_targets, reopen, reopenable, rerun_from};
pub use run_end::{RunCounters, StepsClosed, run_end};
pub use run_graph::RunGraph;
