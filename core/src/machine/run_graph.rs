//! [`RunGraph`]: a whole run in memory, driven by [`Event`]s (the reference model of the state machine).

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::{AfterFailure, Event, FailedAttempt, Readiness, Transition, after_failure, readiness, run_outcome};
use crate::condition::{Condition, ConditionScope};
use crate::plan::Plan;
use crate::retry::RetryPolicy;
use crate::state::{RunStatus, StepStatus};

/// A whole run in memory. Build it from a validated plan with [`RunGraph::new`]; feed it events with
/// [`RunGraph::apply`].
#[derive(Debug)]
pub struct RunGraph {
    plan: Plan,
    input: Value,
    /// Step id → position in the plan (lookups stay O(1) on plans of thousands of steps).
    positions: HashMap<String, usize>,
    deps: Vec<Vec<usize>>,
    dependents: Vec<Vec<usize>>,
    status: Vec<StepStatus>,
    attempts: Vec<u32>,
    outputs: Vec<Option<Value>>,
    run: RunStatus,
}

impl RunGraph {
    /// A new run of a validated plan (unknown dependency ids are ignored: validation rejects them). Returns the
    /// graph and the transitions of starting it (steps without dependencies become ready or are skipped).
    pub fn new(plan: Plan, input: Value) -> (Self, Vec<Transition>) {
        let n = plan.steps.len();
        // The first step of an id wins, as a scan would (validation rejects duplicate ids anyway).
        let mut positions: HashMap<String, usize> = HashMap::with_capacity(n);
        for (i, step) in plan.steps.iter().enumerate() {
            positions.entry(step.id.clone()).or_insert(i);
        }
        let mut deps = vec![Vec::new(); n];
        let mut dependents = vec![Vec::new(); n];
        for (i, step) in plan.steps.iter().enumerate() {
            for dep in &step.depends_on {
                if let Some(&d) = positions.get(dep)
                    && !deps[i].contains(&d)
                {
                    deps[i].push(d);
                    dependents[d].push(i);
                }
            }
        }
        let mut graph = RunGraph {
            plan,
            input,
            positions,
            deps,
            dependents,
            status: vec![StepStatus::Pending; n],
            attempts: vec![0; n],
            outputs: vec![None; n],
            run: RunStatus::Running,
        };
        let mut out = vec![Transition::Run(RunStatus::Running)];
        let roots: Vec<usize> = (0..n).filter(|&i| graph.deps[i].is_empty()).collect();
        graph.settle(roots, &mut out);
        (graph, out)
    }

    /// The status of step `id`.
    pub fn status(&self, id: &str) -> Option<StepStatus> {
        self.index(id).map(|i| self.status[i])
    }

    /// The run's status.
    pub fn run_status(&self) -> RunStatus {
        self.run
    }

    /// Attempts started for step `id`.
    pub fn attempts(&self, id: &str) -> u32 {
        self.index(id).map_or(0, |i| self.attempts[i])
    }

    /// Steps currently `ready`, in plan order.
    pub fn ready(&self) -> Vec<String> {
        (0..self.status.len())
            .filter(|&i| self.status[i] == StepStatus::Ready)
            .map(|i| self.plan.steps[i].id.clone())
            .collect()
    }

    /// Applies an event and returns the transitions it caused, in order. Events that do not fit the current
    /// state (a completion for a step that is not running, anything after the run finished) change nothing.
    /// `sample` is a uniform draw in `[0, 1)` used for retry jitter.
    pub fn apply(&mut self, event: Event, sample: f64) -> Vec<Transition> {
        let mut out = Vec::new();
        if self.run.is_final() {
            return out;
        }
        match event {
            Event::Claimed(id) => {
                if let Some(i) = self.index_in(&id, StepStatus::Ready) {
                    self.attempts[i] += 1;
                    self.set(i, StepStatus::Running, &mut out);
                }
            }
            Event::Succeeded(id, output) => {
                if let Some(i) = self.index_in(&id, StepStatus::Running) {
                    self.outputs[i] = Some(output);
                    self.finish(i, StepStatus::Succeeded, &mut out);
                }
            }
            Event::Failed(id, failure) => {
                if let Some(i) = self.index_in(&id, StepStatus::Running) {
                    self.fail(i, &failure, sample, &mut out);
                }
            }
            Event::Approved(id) => {
                if let Some(i) = self.index_in(&id, StepStatus::WaitingApproval) {
                    self.set(i, StepStatus::Ready, &mut out);
                }
            }
            Event::Rejected(id) => {
                if let Some(i) = self.index_in(&id, StepStatus::WaitingApproval) {
                    self.finish(i, StepStatus::Failed, &mut out);
                }
            }
            Event::RunCancelled => self.cancel(&mut out),
        }
        out
    }

    fn fail(&mut self, i: usize, failure: &crate::failure::Failure, sample: f64, out: &mut Vec<Transition>) {
        let default_policy = RetryPolicy::default();
        let step = &self.plan.steps[i];
        let failed = FailedAttempt {
            policy: step.retry.as_ref().unwrap_or(&default_policy),
            attempt: self.attempts[i],
            idempotent: step.idempotent.unwrap_or(false),
            failure,
        };
        match after_failure(failed, sample) {
            AfterFailure::Retry { delay } => {
                self.set(i, StepStatus::Ready, out);
                out.push(Transition::RetryScheduled { step: self.plan.steps[i].id.clone(), delay });
            }
            AfterFailure::Fail => self.finish(i, StepStatus::Failed, out),
            AfterFailure::OutcomeUnknown => self.set(i, StepStatus::OutcomeUnknown, out),
        }
    }

    fn cancel(&mut self, out: &mut Vec<Transition>) {
        for i in 0..self.status.len() {
            if !self.status[i].is_final() {
                self.set(i, StepStatus::Cancelled, out);
            }
        }
        self.run = RunStatus::Cancelled;
        out.push(Transition::Run(RunStatus::Cancelled));
    }

    /// Marks `i` final and settles its dependents; finishes the run when nothing is open.
    fn finish(&mut self, i: usize, to: StepStatus, out: &mut Vec<Transition>) {
        self.set(i, to, out);
        let next = self.dependents[i].clone();
        self.settle(next, out);
    }

    /// Decides every candidate whose dependencies are final: skip, fail (bad `when`), wait for approval or ready.
    /// Skips cascade through a worklist, so a long chain of skips never recurses.
    fn settle(&mut self, mut work: Vec<usize>, out: &mut Vec<Transition>) {
        while let Some(c) = work.pop() {
            if self.status[c] != StepStatus::Pending {
                continue;
            }
            let rule = self.plan.steps[c].effective_trigger_rule();
            let decided = match readiness(rule, self.deps[c].iter().map(|&d| self.status[d])) {
                Readiness::Wait => continue,
                Readiness::Skip => StepStatus::Skipped,
                Readiness::Run => self.when_holds(c),
            };
            if decided.is_final() {
                self.set(c, decided, out);
                work.extend(self.dependents[c].iter().copied());
            } else {
                let approval = self.plan.steps[c].approval.as_ref().is_some_and(|a| a.required);
                let to = if approval { StepStatus::WaitingApproval } else { StepStatus::Ready };
                self.set(c, to, out);
            }
        }
        if self.run == RunStatus::Running && self.status.iter().all(|s| s.is_final()) {
            let failed = self.status.iter().filter(|s| **s == StepStatus::Failed).count();
            self.run = run_outcome(false, failed);
            out.push(Transition::Run(self.run));
        }
    }

    /// `Ready` when `when` is absent or true, `Skipped` when false, `Failed` when it cannot be evaluated.
    fn when_holds(&self, c: usize) -> StepStatus {
        let Some(expr) = &self.plan.steps[c].when else {
            return StepStatus::Ready;
        };
        let Ok(condition) = Condition::compile(expr) else {
            return StepStatus::Failed;
        };
        let mut steps = Map::new();
        for id in condition.step_references() {
            if let Some(p) = self.index(&id) {
                let output = self.outputs[p].clone().unwrap_or(Value::Null);
                steps.insert(id, json!({"output": output, "status": self.status[p].as_str()}));
            }
        }
        let scope = ConditionScope { input: self.input.clone(), steps };
        match condition.evaluate(&scope) {
            Ok(true) => StepStatus::Ready,
            Ok(false) => StepStatus::Skipped,
            Err(_) => StepStatus::Failed,
        }
    }

    fn set(&mut self, i: usize, to: StepStatus, out: &mut Vec<Transition>) {
        self.status[i] = to;
        out.push(Transition::Step { step: self.plan.steps[i].id.clone(), to });
    }

    fn index(&self, id: &str) -> Option<usize> {
        self.positions.get(id).copied()
    }

    fn index_in(&self, id: &str, status: StepStatus) -> Option<usize> {
        self.index(id).filter(|&i| self.status[i] == status)
    }
}
