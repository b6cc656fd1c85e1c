//! [`RunGraph`]: a whole run in memory, driven by [`Event`]s (the reference model of the state machine).

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::decide::{ApprovalEnd, Decision, Next, StepRules, after_approval, decide, starts_itself};
use super::operator::{OperatorAction, OperatorRule};
use super::run_end::{RunCounters, StepsClosed, run_end};
use super::{AfterFailure, Event, FailedAttempt, Transition, after_failure};
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
    /// The counters a store keeps on the run row, kept the same way ([`StepsClosed`]).
    counters: RunCounters,
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
            counters: RunCounters {
                open_steps: i64::try_from(n).unwrap_or(i64::MAX),
                failed_steps: 0,
                cancel_requested: false,
            },
        };
        let mut out = vec![Transition::Run(RunStatus::Running)];
        // As a submission does: the roots that start by themselves are inserted ready (plan order), then the
        // other roots are decided (plan order).
        let (ready, decided): (Vec<usize>, Vec<usize>) = (0..n)
            .filter(|&i| graph.deps[i].is_empty())
            .partition(|&i| starts_itself(&StepRules::of(&graph.plan.steps[i], None), 0));
        for i in ready {
            graph.set(i, StepStatus::Ready, &mut out);
        }
        graph.settle(decided, &mut out);
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
            Event::SucceededTogether(reports) => {
                let mut done = Vec::new();
                for (id, output) in reports {
                    if let Some(i) = self.index_in(&id, StepStatus::Running) {
                        self.outputs[i] = Some(output);
                        self.set(i, StepStatus::Succeeded, &mut out);
                        done.push(i);
                    }
                }
                let next = self.candidates(&done);
                self.settle(next, &mut out);
            }
            Event::Failed(id, failure) => {
                if let Some(i) = self.index_in(&id, StepStatus::Running) {
                    self.fail(i, &failure, sample, &mut out);
                }
            }
            Event::Approved(id) => self.end_approval(&id, &ApprovalEnd::Approved, &mut out),
            Event::Rejected(id) => {
                self.end_approval(&id, &ApprovalEnd::Rejected { by: "operator".into() }, &mut out);
            }
            Event::Operator(id, action) => self.operate(&id, action, &mut out),
            Event::RunCancelled => self.cancel(&mut out),
        }
        out
    }

    fn operate(&mut self, id: &str, action: OperatorAction, out: &mut Vec<Transition>) {
        match action.rule("operator") {
            OperatorRule::Approval(end) => self.end_approval(id, &end, out),
            OperatorRule::Parked { to } => {
                let Some(i) = self.index_in(id, StepStatus::OutcomeUnknown) else { return };
                if to.is_final() {
                    self.finish(i, to, out);
                } else {
                    self.set(i, to, out);
                }
            }
        }
    }

    fn end_approval(&mut self, id: &str, end: &ApprovalEnd, out: &mut Vec<Transition>) {
        let Some(i) = self.index_in(id, StepStatus::WaitingApproval) else { return };
        let decision = after_approval(&StepRules::of(&self.plan.steps[i], None), end, 0);
        let Some(to) = decision.status() else { return };
        if decision.is_final() {
            self.finish(i, to, out);
        } else {
            self.set(i, to, out);
        }
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
        let next = self.candidates(&[i]);
        self.settle(next, out);
    }

    /// Decides the candidates with [`decide`], level by level as the stores do: a level's candidates in step id
    /// order, and the steps that level made final (skips, `when` failures) give the next level's candidates. So
    /// a long chain of skips never recurses, and the transitions come in the order of the stores' events.
    fn settle(&mut self, first: Vec<usize>, out: &mut Vec<Transition>) {
        let mut level = first;
        while !level.is_empty() {
            // A level's candidates are those whose dependencies were all final when it began: a store releases
            // a level's dependents in one statement, before deciding any of them, so a candidate made final
            // within the level releases its own dependents in the next one.
            level.retain(|&c| {
                self.status[c] == StepStatus::Pending && self.deps[c].iter().all(|&d| self.status[d].is_final())
            });
            let mut finals = Vec::new();
            for c in level {
                let decision = self.decision(c);
                let Some(to) = decision.status() else { continue };
                self.set(c, to, out);
                if decision.is_final() {
                    finals.push(c);
                }
            }
            level = self.candidates(&finals);
        }
        if self.run == RunStatus::Running
            && let Some(end) = run_end(self.counters)
        {
            self.run = end;
            out.push(Transition::Run(end));
        }
    }

    /// The dependents of `finished`, once each, in step id order.
    fn candidates(&self, finished: &[usize]) -> Vec<usize> {
        let mut next: Vec<usize> = finished.iter().flat_map(|&f| self.dependents[f].iter().copied()).collect();
        next.sort_by(|&a, &b| self.plan.steps[a].id.cmp(&self.plan.steps[b].id));
        next.dedup();
        next
    }

    fn decision(&self, c: usize) -> Decision {
        let rules = StepRules::of(&self.plan.steps[c], None);
        match decide(rules, self.deps[c].iter().map(|&d| self.status[d]), 0) {
            Next::Decided(decision) => decision,
            Next::When(pending) => {
                let value = self.evaluate(pending.expr());
                pending.answer(value)
            }
        }
    }

    /// The value of a `when` over the referenced steps' outputs and statuses and the run input.
    fn evaluate(&self, expr: &str) -> Result<bool, String> {
        let condition = Condition::compile(expr).map_err(|e| e.to_string())?;
        let mut steps = Map::new();
        for id in condition.step_references() {
            if let Some(p) = self.index(&id) {
                let output = self.outputs[p].clone().unwrap_or(Value::Null);
                steps.insert(id, json!({"output": output, "status": self.status[p].as_str()}));
            }
        }
        let scope = ConditionScope { input: self.input.clone(), steps };
        condition.evaluate(&scope).map_err(|e| e.to_string())
    }

    fn set(&mut self, i: usize, to: StepStatus, out: &mut Vec<Transition>) {
        if to.is_final() && !self.status[i].is_final() {
            let closed = StepsClosed::of([to]);
            self.counters.open_steps -= closed.steps;
            self.counters.failed_steps += closed.failed;
        }
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
