//! Run and step statuses (contract §5) and their stable names.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The status of one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Dependencies unfinished.
    Pending,
    /// Queued; `available_at` may still be in the future (timer or backoff).
    Ready,
    /// Leased to a worker.
    Running,
    /// Waiting for a human decision.
    WaitingApproval,
    /// Finished with an output.
    Succeeded,
    /// Finished without an output; a failure record says why.
    Failed,
    /// Not run: `when` was false, or the trigger rule could not be met (skip propagation).
    Skipped,
    /// Cancelled by an operator or with its run.
    Cancelled,
    /// A non-idempotent attempt ended ambiguously; waits for an operator (`retry`, `skip`, `fail`).
    OutcomeUnknown,
}

impl StepStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [StepStatus; 9] = [
        StepStatus::Pending,
        StepStatus::Ready,
        StepStatus::Running,
        StepStatus::WaitingApproval,
        StepStatus::Succeeded,
        StepStatus::Failed,
        StepStatus::Skipped,
        StepStatus::Cancelled,
        StepStatus::OutcomeUnknown,
    ];

    /// The stable snake_case name stored in the database and shown by the API.
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Pending => "pending",
            StepStatus::Ready => "ready",
            StepStatus::Running => "running",
            StepStatus::WaitingApproval => "waiting_approval",
            StepStatus::Succeeded => "succeeded",
            StepStatus::Failed => "failed",
            StepStatus::Skipped => "skipped",
            StepStatus::Cancelled => "cancelled",
            StepStatus::OutcomeUnknown => "outcome_unknown",
        }
    }

    /// Final statuses never change again (except by an explicit operator action on a failed step).
    /// `outcome_unknown` is not final: it waits for an operator.
    pub fn is_final(self) -> bool {
        matches!(self, StepStatus::Succeeded | StepStatus::Failed | StepStatus::Skipped | StepStatus::Cancelled)
    }
}

/// The status of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Accepted, nothing started yet.
    Pending,
    /// At least one step started or is ready.
    Running,
    /// An operator paused it: no new attempt starts, running ones finish; it is not final.
    Paused,
    /// Every step finished and none failed.
    Succeeded,
    /// Every step finished and at least one failed (or the run's state was found inconsistent).
    Failed,
    /// Cancelled by an operator.
    Cancelled,
}

impl RunStatus {
    /// Every run status.
    pub const ALL: [RunStatus; 6] = [
        RunStatus::Pending,
        RunStatus::Running,
        RunStatus::Paused,
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::Cancelled,
    ];

    /// The stable snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Pending => "pending",
            RunStatus::Running => "running",
            RunStatus::Paused => "paused",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    /// Whether the run has finished.
    pub fn is_final(self) -> bool {
        matches!(self, RunStatus::Succeeded | RunStatus::Failed | RunStatus::Cancelled)
    }
}

/// The status of one attempt of a step (`attempts.status`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::Display,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum AttemptStatus {
    /// Leased to a worker, not reported yet.
    Running,
    /// The worker reported success.
    Succeeded,
    /// Failed: reported, timed out, lost its lease, or cancelled with its run.
    Failed,
}

impl AttemptStatus {
    /// The stable snake_case name stored in `attempts.status`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Lets a stored enum be compared with its stable name (`status == "running"`), as the tests and the CLI's
/// filters do with names they read.
macro_rules! compares_with_names {
    ($($t:ty),*) => {$(
        impl PartialEq<str> for $t {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }
        impl PartialEq<&str> for $t {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }
    )*};
}
pub(crate) use compares_with_names;

compares_with_names!(StepStatus, RunStatus, AttemptStatus);

/// An unknown status name read back from storage.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown status `{0}`")]
pub struct UnknownStatus(pub String);

impl FromStr for StepStatus {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        StepStatus::ALL.into_iter().find(|st| st.as_str() == s).ok_or_else(|| UnknownStatus(s.into()))
    }
}

impl FromStr for RunStatus {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RunStatus::ALL.into_iter().find(|st| st.as_str() == s).ok_or_else(|| UnknownStatus(s.into()))
    }
}

impl fmt::Display for StepStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_status_names_round_trip() {
        for status in StepStatus::ALL {
            assert_eq!(status.as_str().parse::<StepStatus>(), Ok(status));
            assert_eq!(serde_json::to_value(status).ok(), Some(serde_json::json!(status.as_str())));
        }
    }

    #[test]
    fn attempt_status_names_agree_with_serde() {
        use strum::VariantArray;
        for status in AttemptStatus::VARIANTS {
            assert_eq!(serde_json::to_value(status).ok(), Some(serde_json::json!(status.as_str())));
            assert_eq!(status.to_string(), status.as_str());
        }
    }
}
