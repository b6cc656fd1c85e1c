//! When a run ends, decided from the counters its store keeps on the run row, so that no statement has to read
//! the run's steps to know.
//!
//! A store adds each step that becomes final to [`StepsClosed`] (the one rule of which final statuses count as
//! failed), subtracts it from the run's open steps and adds the failed ones to its failed steps in the same
//! statement, and asks [`run_end`] what the counters it got back mean.

use super::run_outcome;
use crate::state::{RunStatus, StepStatus};

/// A run's counters as its store keeps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunCounters {
    /// Steps not yet final.
    pub open_steps: i64,
    /// Steps that ended `failed`.
    pub failed_steps: i64,
    /// A cancel is under way (it finishes the run itself).
    pub cancel_requested: bool,
}

/// Steps that just became final, as they count against their run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepsClosed {
    /// Steps that became final.
    pub steps: i64,
    /// Of which `failed`.
    pub failed: i64,
}

impl StepsClosed {
    /// Counts one step that became final with `status`.
    pub fn count(&mut self, status: StepStatus) {
        self.steps += 1;
        if status == StepStatus::Failed {
            self.failed += 1;
        }
    }

    /// The count of steps that became final with these statuses.
    pub fn of(statuses: impl IntoIterator<Item = StepStatus>) -> Self {
        let mut closed = StepsClosed::default();
        for status in statuses {
            closed.count(status);
        }
        closed
    }

    /// Both counts together.
    pub fn add(&mut self, other: StepsClosed) {
        self.steps += other.steps;
        self.failed += other.failed;
    }
}

/// How the run ends now, or `None` while a step is open or when a cancel under way finishes it instead.
pub fn run_end(counters: RunCounters) -> Option<RunStatus> {
    if counters.open_steps > 0 || counters.cancel_requested {
        return None;
    }
    Some(run_outcome(false, usize::try_from(counters.failed_steps).unwrap_or(usize::MAX)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(open_steps: i64, failed_steps: i64, cancel_requested: bool) -> RunCounters {
        RunCounters { open_steps, failed_steps, cancel_requested }
    }

    #[test]
    fn a_run_ends_when_no_step_is_open_and_no_cancel_is_under_way() {
        assert_eq!(run_end(counters(1, 0, false)), None, "a step is open");
        assert_eq!(run_end(counters(0, 0, true)), None, "the cancel finishes it");
        assert_eq!(run_end(counters(0, 0, false)), Some(RunStatus::Succeeded));
        assert_eq!(run_end(counters(0, 2, false)), Some(RunStatus::Failed));
    }

    #[test]
    fn only_failed_steps_count_as_failed() {
        let closed = StepsClosed::of([
            StepStatus::Succeeded,
            StepStatus::Failed,
            StepStatus::Skipped,
            StepStatus::Cancelled,
            StepStatus::Failed,
        ]);
        assert_eq!(closed, StepsClosed { steps: 5, failed: 2 });
    }
}
