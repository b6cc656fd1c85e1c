//! What an operator's (or an approver's) action does to a step.

use super::decide::ApprovalEnd;
use crate::state::StepStatus;

/// What an operator (or an approver) decides about a parked step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorAction {
    /// `outcome_unknown` → run it again (a new attempt).
    Retry,
    /// `outcome_unknown` → `skipped` (dependents follow their trigger rules).
    Skip,
    /// `outcome_unknown` → `failed`.
    Fail,
    /// `waiting_approval` → what [`super::after_approval`] decides for an approval.
    Approve,
    /// `waiting_approval` → what [`super::after_approval`] decides for a rejection (`on_reject`).
    Reject,
}

/// The rule an [`OperatorAction`] follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperatorRule {
    /// A step parked as `outcome_unknown` moves to `to` (`ready` gets a new attempt; `skipped` and `failed` are
    /// final and release its dependents).
    Parked {
        /// The status the step moves to.
        to: StepStatus,
    },
    /// A step waiting for approval ends as [`super::after_approval`] decides for this end.
    Approval(ApprovalEnd),
}

impl OperatorAction {
    /// The rule this action follows; `by` names who decided (recorded with a rejection).
    pub fn rule(self, by: &str) -> OperatorRule {
        match self {
            OperatorAction::Retry => OperatorRule::Parked { to: StepStatus::Ready },
            OperatorAction::Skip => OperatorRule::Parked { to: StepStatus::Skipped },
            OperatorAction::Fail => OperatorRule::Parked { to: StepStatus::Failed },
            OperatorAction::Approve => OperatorRule::Approval(ApprovalEnd::Approved),
            OperatorAction::Reject => OperatorRule::Approval(ApprovalEnd::Rejected { by: by.to_owned() }),
        }
    }
}
