//! What running final steps again does to their run (an operator's retry of a failed step, a redrive of a
//! failed or cancelled run): which steps open again, how many dependencies each then waits for, which waiting
//! dependents wait for one more, and how the run's counters change. Pure; the stores apply the [`Reopening`] and
//! then [`super::decide`] the reopened steps that wait for nothing, exactly as a release would.
//!
//! Rules:
//! - A target must be `failed` or `cancelled`; it opens again with a fresh attempt budget. A redrive's targets
//!   are every failed and cancelled step of the run ([`redrive_targets`]).
//! - A non-idempotent target cancelled while one of its attempts ran may have acted: it opens as
//!   `outcome_unknown`, for an operator to retry, skip or fail, never blindly run again.
//! - A `skipped` dependent of a step that opens again opens again too (transitively): it was skipped because of
//!   what its dependencies did, and they will now do something else. Its trigger rule and `when` are decided
//!   again once its dependencies are final.
//! - `succeeded` steps never open again (their outputs stand); other final dependents (a `failed` one that ran,
//!   say) keep their status: running them again is a redrive's, or an operator's, separate decision.
//! - A `pending` dependent that had counted a reopened step as final waits for it again.

use std::collections::{HashMap, HashSet};

use super::StepsClosed;
use crate::state::StepStatus;

/// One step of a run as a reopening sees it.
#[derive(Debug, Clone)]
pub struct RunStep<'a> {
    /// Step id.
    pub id: &'a str,
    /// Its status now.
    pub status: StepStatus,
    /// The steps it depends on.
    pub parents: Vec<&'a str>,
    /// Whether it is idempotent.
    pub idempotent: bool,
    /// Whether it was cancelled while one of its attempts ran.
    pub interrupted: bool,
}

/// A step that opens again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reopened {
    /// Step id.
    pub step: String,
    /// Its status before it opened again.
    pub was: StepStatus,
    /// The status it opens with: `pending` (decided once its dependencies are final), or `outcome_unknown`.
    pub to: StepStatus,
    /// Dependencies it waits for now (those not final, and those opening again).
    pub pending_deps: i64,
    /// Whether it was asked for (a target: it gets a fresh attempt budget), rather than opened as a dependent.
    pub target: bool,
}

/// The effect of running some final steps of a run again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reopening {
    /// Steps that open again (`pending` with their `pending_deps`), in plan order. Those waiting for nothing are
    /// decided at once.
    pub steps: Vec<Reopened>,
    /// Pending steps that did not open again but now wait for more dependencies: `(step, how many more)`.
    pub waiting_longer: Vec<(String, i64)>,
    /// How the reopened steps had counted against the run when they became final; the run's counters take them
    /// back (open steps up by `steps`, failed steps down by `failed`).
    pub opened: StepsClosed,
}

/// Why a reopening is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReopenRefused {
    /// No step of the run has this id.
    #[error("the run has no step `{0}`")]
    UnknownStep(String),
    /// The step is not in a status that can run again.
    #[error("step `{step}` is {status}; only a failed or cancelled step can run again")]
    NotFinal {
        /// Step id.
        step: String,
        /// Its status.
        status: StepStatus,
    },
}

/// A new run of a finished run's plan and input from one step (`rerun --from`): which steps run again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rerun {
    /// The step and every step that depends on it, directly or not, in plan order, each `pending` with the
    /// number of its dependencies that run again; every other step keeps the old run's status and output.
    pub reset: Vec<(String, i64)>,
    /// The new run's open steps (those that run again).
    pub open_steps: i64,
    /// The new run's failed steps (failed steps it keeps).
    pub failed_steps: i64,
}

/// What [`Rerun`] runs again of the finished run `steps` (plan order) from step `from`.
///
/// # Errors
/// [`ReopenRefused::UnknownStep`] when the run has no step `from`.
pub fn rerun_from(steps: &[RunStep<'_>], from: &str) -> Result<Rerun, ReopenRefused> {
    let start = steps.iter().find(|s| s.id == from).ok_or_else(|| ReopenRefused::UnknownStep(from.to_owned()))?;
    let mut children: HashMap<&str, Vec<&str>> = HashMap::new();
    for step in steps {
        for parent in &step.parents {
            children.entry(*parent).or_default().push(step.id);
        }
    }
    let mut again: HashSet<&str> = HashSet::from([start.id]);
    let mut queue = vec![start.id];
    while let Some(id) = queue.pop() {
        for child in children.get(id).into_iter().flatten() {
            if again.insert(child) {
                queue.push(child);
            }
        }
    }
    let mut reset = Vec::new();
    let mut failed_steps = 0;
    for step in steps {
        if again.contains(step.id) {
            let waits = step.parents.iter().filter(|p| again.contains(*p)).count();
            reset.push((step.id.to_owned(), i64::try_from(waits).unwrap_or(i64::MAX)));
        } else if step.status == StepStatus::Failed {
            failed_steps += 1;
        }
    }
    let open_steps = i64::try_from(reset.len()).unwrap_or(i64::MAX);
    Ok(Rerun { reset, open_steps, failed_steps })
}

/// A redrive's targets: every failed and cancelled step, in plan order.
pub fn redrive_targets<'a>(steps: &[RunStep<'a>]) -> Vec<&'a str> {
    steps.iter().filter(|s| reopenable(s.status)).map(|s| s.id).collect()
}

/// Whether a step in `status` can be a target of [`reopen`].
pub fn reopenable(status: StepStatus) -> bool {
    matches!(status, StepStatus::Failed | StepStatus::Cancelled)
}

/// Opens `targets` of the run `steps` (in plan order) again, with the dependents that follow them.
///
/// # Errors
/// [`ReopenRefused`] when a target does not exist or is not [`reopenable`].
pub fn reopen(steps: &[RunStep<'_>], targets: &[&str]) -> Result<Reopening, ReopenRefused> {
    let by_id: HashMap<&str, &RunStep<'_>> = steps.iter().map(|s| (s.id, s)).collect();
    let mut children: HashMap<&str, Vec<&str>> = HashMap::new();
    for step in steps {
        for parent in &step.parents {
            children.entry(*parent).or_default().push(step.id);
        }
    }
    let mut open: HashSet<&str> = HashSet::new();
    let mut queue: Vec<&str> = Vec::new();
    for target in targets {
        let step = by_id.get(target).ok_or_else(|| ReopenRefused::UnknownStep((*target).to_owned()))?;
        if !reopenable(step.status) {
            return Err(ReopenRefused::NotFinal { step: (*target).to_owned(), status: step.status });
        }
        if open.insert(step.id) {
            queue.push(step.id);
        }
    }
    // Iterative, never recursive: a plan may be 10,000 steps deep.
    while let Some(id) = queue.pop() {
        for child in children.get(id).into_iter().flatten() {
            if by_id[child].status == StepStatus::Skipped && open.insert(child) {
                queue.push(child);
            }
        }
    }
    let targets: HashSet<&str> = targets.iter().copied().collect();
    let waits_for = |parent: &str| open.contains(parent) || !by_id[parent].status.is_final();
    let mut reopened = Vec::new();
    let mut waiting_longer = Vec::new();
    for step in steps {
        if open.contains(step.id) {
            let pending_deps = step.parents.iter().filter(|p| waits_for(p)).count();
            let may_have_acted = step.status == StepStatus::Cancelled && step.interrupted && !step.idempotent;
            reopened.push(Reopened {
                step: step.id.to_owned(),
                was: step.status,
                to: if may_have_acted { StepStatus::OutcomeUnknown } else { StepStatus::Pending },
                pending_deps: i64::try_from(pending_deps).unwrap_or(i64::MAX),
                target: targets.contains(step.id),
            });
        } else if step.status == StepStatus::Pending {
            let more = step.parents.iter().filter(|p| open.contains(*p)).count();
            if more > 0 {
                waiting_longer.push((step.id.to_owned(), i64::try_from(more).unwrap_or(i64::MAX)));
            }
        }
    }
    let opened = StepsClosed::of(reopened.iter().map(|r| r.was));
    Ok(Reopening { steps: reopened, waiting_longer, opened })
}

#[cfg(test)]
mod tests {
    use super::*;
    use StepStatus::*;

    fn step<'a>(id: &'a str, status: StepStatus, parents: &[&'a str]) -> RunStep<'a> {
        RunStep { id, status, parents: parents.to_vec(), idempotent: true, interrupted: false }
    }

    #[test]
    fn a_failed_step_reopens_with_the_dependents_it_skipped_and_succeeded_steps_stay() {
        // a ✓ → b ✗ → c (skipped) → d (skipped); e (all_done on b) succeeded.
        let steps = [
            step("a", Succeeded, &[]),
            step("b", Failed, &["a"]),
            step("c", Skipped, &["b"]),
            step("d", Skipped, &["c", "a"]),
            step("e", Succeeded, &["b"]),
        ];
        let r = reopen(&steps, &["b"]).expect("b failed");
        let got: Vec<(&str, i64, bool)> = r.steps.iter().map(|s| (s.step.as_str(), s.pending_deps, s.target)).collect();
        assert_eq!(got, [("b", 0, true), ("c", 1, false), ("d", 1, false)]);
        assert!(r.waiting_longer.is_empty());
        assert_eq!(r.opened, StepsClosed { steps: 3, failed: 1 });
    }

    #[test]
    fn a_pending_dependent_that_counted_the_failure_waits_for_it_again() {
        // b failed while x still runs; j waits for both.
        let steps = [step("b", Failed, &[]), step("x", Running, &[]), step("j", Pending, &["b", "x"])];
        let r = reopen(&steps, &["b"]).expect("b failed");
        assert_eq!(r.steps.len(), 1);
        assert_eq!(r.waiting_longer, [("j".to_owned(), 1)]);
        assert_eq!(r.opened, StepsClosed { steps: 1, failed: 1 });
    }

    #[test]
    fn a_redrive_reopens_cancelled_steps_waiting_for_their_reopened_dependencies() {
        let steps = [step("a", Failed, &[]), step("b", Cancelled, &["a"]), step("c", Skipped, &["b"])];
        let r = reopen(&steps, &["a", "b"]).expect("a failed, b cancelled");
        let got: Vec<(&str, i64)> = r.steps.iter().map(|s| (s.step.as_str(), s.pending_deps)).collect();
        assert_eq!(got, [("a", 0), ("b", 1), ("c", 1)]);
    }

    #[test]
    fn a_redrive_never_runs_blindly_a_non_idempotent_step_cancelled_while_it_ran() {
        let charge = RunStep { interrupted: true, idempotent: false, ..step("charge", Cancelled, &[]) };
        let fetch = RunStep { interrupted: true, ..step("fetch", Cancelled, &[]) };
        let steps =
            [step("ok", Succeeded, &[]), charge, fetch, step("bad", Failed, &[]), step("c", Cancelled, &["charge"])];
        let targets = redrive_targets(&steps);
        assert_eq!(targets, ["charge", "fetch", "bad", "c"]);
        let r = reopen(&steps, &targets).expect("all reopenable");
        let got: Vec<(&str, StepStatus, i64)> =
            r.steps.iter().map(|s| (s.step.as_str(), s.to, s.pending_deps)).collect();
        let expected = [("charge", OutcomeUnknown, 0), ("fetch", Pending, 0), ("bad", Pending, 0), ("c", Pending, 1)];
        assert_eq!(got, expected);
        assert_eq!(r.opened, StepsClosed { steps: 4, failed: 1 });
    }

    #[test]
    fn a_rerun_from_a_step_runs_it_and_its_descendants_and_keeps_the_rest() {
        // a ✓ → b ✓ → c ✗; a → d ✓; e ✗ on its own.
        let steps = [
            step("a", Succeeded, &[]),
            step("b", Succeeded, &["a"]),
            step("c", Failed, &["b"]),
            step("d", Succeeded, &["a"]),
            step("e", Failed, &[]),
        ];
        let r = rerun_from(&steps, "b").expect("b exists");
        assert_eq!(r.reset, [("b".to_owned(), 0), ("c".to_owned(), 1)]);
        assert_eq!((r.open_steps, r.failed_steps), (2, 1), "e stays failed in the new run");
        assert_eq!(rerun_from(&steps, "z"), Err(ReopenRefused::UnknownStep("z".into())));
    }

    #[test]
    fn only_failed_or_cancelled_steps_can_run_again() {
        let steps = [step("a", Succeeded, &[]), step("b", Running, &[])];
        assert_eq!(reopen(&steps, &["a"]), Err(ReopenRefused::NotFinal { step: "a".into(), status: Succeeded }));
        assert!(matches!(reopen(&steps, &["b"]), Err(ReopenRefused::NotFinal { .. })));
        assert_eq!(reopen(&steps, &["z"]), Err(ReopenRefused::UnknownStep("z".into())));
    }
}
