//! The one decision for a step whose dependencies may all be final (contract §5): wait, run (ready or waiting
//! for approval), skip, or fail. Every store and the in-memory model call [`decide`]; nothing else decides it.
//!
//! Order (case C09): the trigger rule first, then `when`, then approval and the `not_before` timer. Placeholders
//! are resolved only for a step that will run, at dispatch, so a skipped producer never fails a consumer whose
//! `when` would have skipped it anyway.
//!
//! `when` needs the outputs of the steps it names, which only a store can read: [`decide`] answers
//! [`Next::When`] instead of reading them, and [`WhenPending::answer`] finishes the decision once the caller has
//! evaluated the expression. Nothing here performs I/O.

use crate::failure::{Failure, codes};
use crate::plan::{Approval, ApprovalReject, ApprovalTimeout, Step, TriggerRule};
use crate::state::StepStatus;

use super::{Readiness, readiness};

/// What [`decide`] needs to know about a step: its rules, as the plan states them.
#[derive(Debug, Clone, Copy)]
pub struct StepRules<'a> {
    /// The effective trigger rule.
    pub trigger_rule: TriggerRule,
    /// The `when` expression, if any.
    pub when: Option<&'a str>,
    /// The approval requirement, if any (one with `required: false` changes nothing).
    pub approval: Option<&'a Approval>,
    /// The `not_before` timer resolved at submission, epoch milliseconds.
    pub not_before_at: Option<i64>,
}

impl<'a> StepRules<'a> {
    /// The rules of a plan step with its resolved timer.
    pub fn of(step: &'a Step, not_before_at: Option<i64>) -> Self {
        StepRules {
            trigger_rule: step.effective_trigger_rule(),
            when: step.when.as_deref(),
            approval: step.approval.as_ref(),
            not_before_at,
        }
    }

    fn approval_required(&self) -> bool {
        self.approval.is_some_and(|a| a.required)
    }
}

/// Why a step was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// Its trigger rule cannot hold (skip propagation).
    TriggerRule,
    /// Its `when` was false.
    WhenFalse,
    /// A person rejected it and its approval says `on_reject: skip`.
    Rejected,
    /// Nobody decided before the approval's deadline and it says `on_timeout: skip`.
    ApprovalTimedOut,
}

impl SkipReason {
    /// The reason as the `step_skipped` event states it.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::TriggerRule => "a dependency did not succeed (trigger rule)",
            SkipReason::WhenFalse => "`when` was false",
            SkipReason::Rejected => "rejected (on_reject: skip)",
            SkipReason::ApprovalTimedOut => "approval timed out (on_timeout: skip)",
        }
    }
}

/// The decision for one step.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Some dependency is not final yet.
    Wait,
    /// The step may be claimed from `available_at` (its timer, or now).
    Ready {
        /// Epoch milliseconds.
        available_at: i64,
    },
    /// The step waits for a human; `deadline` is entry + `approval.timeout_ms`.
    WaitingApproval {
        /// Epoch milliseconds, when the approval has a timeout.
        deadline: Option<i64>,
    },
    /// The step will not run.
    Skipped(SkipReason),
    /// The step failed before running (its `when` could not be evaluated).
    Failed(Failure),
}

impl Decision {
    /// The status the step takes, `None` for [`Decision::Wait`].
    pub fn status(&self) -> Option<StepStatus> {
        match self {
            Decision::Wait => None,
            Decision::Ready { .. } => Some(StepStatus::Ready),
            Decision::WaitingApproval { .. } => Some(StepStatus::WaitingApproval),
            Decision::Skipped(_) => Some(StepStatus::Skipped),
            Decision::Failed(_) => Some(StepStatus::Failed),
        }
    }

    /// Whether the decision makes the step final (its own dependents are decided next).
    pub fn is_final(&self) -> bool {
        self.status().is_some_and(StepStatus::is_final)
    }
}

/// Where a decision stands after the trigger rule.
#[derive(Debug)]
pub enum Next<'a> {
    /// Decided.
    Decided(Decision),
    /// The trigger rule holds and the step has a `when`: evaluate it and call [`WhenPending::answer`].
    When(WhenPending<'a>),
}

/// A decision waiting for the value of the step's `when`.
#[derive(Debug)]
pub struct WhenPending<'a> {
    rules: StepRules<'a>,
    expr: &'a str,
    now: i64,
}

impl<'a> WhenPending<'a> {
    /// The expression to evaluate.
    pub fn expr(&self) -> &'a str {
        self.expr
    }

    /// Finishes the decision with the expression's value, or the message of why it could not be evaluated.
    pub fn answer(self, value: Result<bool, String>) -> Decision {
        match value {
            Ok(true) => runnable(&self.rules, self.now),
            Ok(false) => Decision::Skipped(SkipReason::WhenFalse),
            Err(message) => Decision::Failed(Failure::new(codes::CONDITION_ERROR, message, false)),
        }
    }
}

/// Decides a pending step given its dependencies' statuses, at `now`.
pub fn decide<'a>(rules: StepRules<'a>, parents: impl IntoIterator<Item = StepStatus>, now: i64) -> Next<'a> {
    match readiness(rules.trigger_rule, parents) {
        Readiness::Wait => Next::Decided(Decision::Wait),
        Readiness::Skip => Next::Decided(Decision::Skipped(SkipReason::TriggerRule)),
        Readiness::Run => match rules.when {
            Some(expr) => Next::When(WhenPending { rules, expr, now }),
            None => Next::Decided(runnable(&rules, now)),
        },
    }
}

/// A step that will run: waiting for approval, or ready from its timer or now.
fn runnable(rules: &StepRules<'_>, now: i64) -> Decision {
    if rules.approval_required() {
        let timeout = rules.approval.and_then(|a| a.timeout_ms).and_then(|ms| i64::try_from(ms).ok());
        return Decision::WaitingApproval { deadline: timeout.map(|ms| now.saturating_add(ms)) };
    }
    Decision::Ready { available_at: rules.not_before_at.unwrap_or(now).max(now) }
}

/// Whether a step with `dep_count` dependencies becomes ready with no further decision once every dependency
/// succeeded: its trigger rule holds then, it has no `when` and needs no approval. Stored with the step at
/// submission (`steps.starts_itself`) so that a store's statement can make it ready by comparing its counter of
/// unfinished dependencies, without reading its rules; every other step is decided by [`decide`].
pub fn starts_itself(rules: &StepRules<'_>, dep_count: usize) -> bool {
    rules.when.is_none()
        && !rules.approval_required()
        && readiness(rules.trigger_rule, std::iter::repeat_n(StepStatus::Succeeded, dep_count)) == Readiness::Run
}

/// What ended a step's wait for approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalEnd {
    /// A person approved it.
    Approved,
    /// A person (`by`) rejected it.
    Rejected {
        /// Who rejected it.
        by: String,
    },
    /// Its deadline passed without a decision.
    TimedOut,
}

/// Decides a step leaving `waiting_approval`: approved (or timed out with `on_timeout: proceed`), it is ready from
/// its timer or now; rejected or timed out, it fails (`approval_rejected`, `approval_timeout`) or is skipped, as
/// its approval's `on_reject` / `on_timeout` say.
pub fn after_approval(rules: &StepRules<'_>, end: &ApprovalEnd, now: i64) -> Decision {
    let ready = Decision::Ready { available_at: rules.not_before_at.unwrap_or(now).max(now) };
    let approval = rules.approval;
    match end {
        ApprovalEnd::Approved => ready,
        ApprovalEnd::Rejected { by } => match approval.map(|a| a.on_reject).unwrap_or_default() {
            ApprovalReject::Skip => Decision::Skipped(SkipReason::Rejected),
            ApprovalReject::Fail => {
                Decision::Failed(Failure::new(codes::APPROVAL_REJECTED, format!("rejected by {by}"), false))
            }
        },
        ApprovalEnd::TimedOut => match approval.map(|a| a.on_timeout).unwrap_or_default() {
            ApprovalTimeout::Proceed => ready,
            ApprovalTimeout::Skip => Decision::Skipped(SkipReason::ApprovalTimedOut),
            ApprovalTimeout::Fail => {
                let ms = approval.and_then(|a| a.timeout_ms).unwrap_or(0);
                let message = format!("no approval decision within {ms} ms (approval.timeout_ms)");
                Decision::Failed(Failure::new(codes::APPROVAL_TIMEOUT, message, false))
            }
        },
    }
}
