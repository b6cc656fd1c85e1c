//! The cascade after steps become final (contract §5).
//!
//! For each newly final step, every dependent's pending count is decremented (row-locked, so concurrent parents
//! serialise and exactly one sees zero). A dependent reaching zero is decided: trigger rule, then `when`, then
//! approval or ready (with its `not_before` timer). Skips and `when` failures are final too and form the next
//! level of the cascade (one release statement per level), so skip propagation is iterative, never recursive. Finally the run's open-step counter is reduced
//! and the run finishes when it reaches zero.

use std::collections::{HashMap, HashSet};

use cairn_core::condition::{Condition, ConditionScope};
use cairn_core::event::{EventKind, Progress};
use cairn_core::machine::{self, Decision, Next, RunCounters, StepRules, StepsClosed, run_end};
use cairn_core::plan::{Approval, TriggerRule};
use cairn_core::state::{RunStatus, StepStatus};
use serde_json::{Map, Value, json};

use super::event;
use crate::error::{StoreError, StoreResult};
use crate::rows::{ChildRow, EventInsert, StepDecided, StepSucceeded};
use crate::runs_tx::RunsTx;
use crate::tx::StepTx;

/// A step that just became final, with the status it ended with (it counts against its run by it).
pub(crate) struct Finished {
    pub(crate) step_id: String,
    pub(crate) status: StepStatus,
    /// How many steps depend on it, when known (`Some(0)`: nothing to release, the release query is skipped).
    pub(crate) children: Option<i64>,
}

impl Finished {
    /// A step that ended with `status`, its dependents not counted.
    pub(crate) fn new(step_id: impl Into<String>, status: StepStatus) -> Self {
        Finished { step_id: step_id.into(), status, children: None }
    }
}

/// Decides candidates whose dependencies are all final; returns the steps that became final (skipped or
/// failed). `parent` is the status shared by every step that released them, when known: a candidate with a
/// single dependency then needs no read of its parents, which keeps a chain step to one statement per row
/// touched.
pub(crate) async fn decide<T: StepTx>(
    tx: &mut T,
    run_id: &str,
    candidates: Vec<ChildRow>,
    parent: Option<StepStatus>,
    now: i64,
    events: &mut Vec<EventInsert>,
) -> StoreResult<Vec<Finished>> {
    let mut input: Option<Value> = None;
    let mut finals = Vec::new();
    for c in candidates {
        if c.status == "ready" {
            // Decided by the release statement itself (see `StepTx::children_release`).
            let ready = Progress::Ready { available_at: c.available_at };
            events.push(EventInsert::progress(run_id, Some(&c.step_id), ready, now));
            continue;
        }
        let statuses = match (c.dep_count, parent) {
            (0, _) => Vec::new(),
            (1, Some(status)) => vec![status],
            _ => tx
                .parent_statuses(run_id, &c.step_id)
                .await?
                .iter()
                .map(|s| s.parse::<StepStatus>().map_err(|e| StoreError::corrupt("steps.status", e)))
                .collect::<StoreResult<Vec<_>>>()?,
        };
        let rule: TriggerRule = serde_json::from_value(Value::String(c.trigger_rule.clone()))
            .map_err(|e| StoreError::corrupt("steps.trigger_rule", e))?;
        let approval: Option<Approval> = match c.approval.as_deref() {
            Some(text) => Some(serde_json::from_str(text).map_err(|e| StoreError::corrupt("steps.approval", e))?),
            None => None,
        };
        let rules = StepRules {
            trigger_rule: rule,
            when: c.when_expr.as_deref(),
            approval: approval.as_ref(),
            not_before_at: c.not_before_at,
        };
        let decision = match machine::decide(rules, statuses, now) {
            Next::Decided(Decision::Wait) => continue,
            Next::Decided(decision) => decision,
            Next::When(pending) => {
                let value = evaluate_when(tx, run_id, pending.expr(), &mut input).await?;
                pending.answer(value)
            }
        };
        apply(tx, run_id, &c.step_id, decision, now, events, &mut finals).await?;
    }
    Ok(finals)
}

async fn apply<T: StepTx>(
    tx: &mut T,
    run_id: &str,
    step_id: &str,
    decision: Decision,
    now: i64,
    events: &mut Vec<EventInsert>,
    finals: &mut Vec<Finished>,
) -> StoreResult<()> {
    let step = Some(step_id);
    let (status, available_at, error, recorded) = match &decision {
        Decision::Wait => return Ok(()),
        Decision::Ready { available_at } => {
            let ready = Progress::Ready { available_at: Some(*available_at) };
            (StepStatus::Ready, Some(*available_at), None, EventInsert::progress(run_id, step, ready, now))
        }
        Decision::WaitingApproval { deadline } => {
            let data = json!({"deadline": deadline});
            let recorded = event(run_id, step, EventKind::StepWaitingApproval, data, now);
            (StepStatus::WaitingApproval, *deadline, None, recorded)
        }
        Decision::Skipped(reason) => {
            let data = json!({"reason": reason.as_str()});
            (StepStatus::Skipped, None, None, event(run_id, step, EventKind::StepSkipped, data, now))
        }
        Decision::Failed(f) => {
            let record = json!({"code": f.code, "message": f.message, "retryable": false, "suggestion": "replan"});
            let text = record.to_string();
            (StepStatus::Failed, None, Some(text), event(run_id, step, EventKind::StepFailed, record, now))
        }
    };
    let is_final = decision.is_final();
    let finished_at = is_final.then_some(now);
    let decided = StepDecided { run_id, step_id, status, available_at, error: error.as_deref(), finished_at };
    if tx.step_decide(&decided, now).await? {
        events.push(recorded);
        if is_final {
            finals.push(Finished::new(step_id, status));
        }
    }
    Ok(())
}

/// Evaluates `when` over the referenced steps' outputs and statuses and the run input.
/// `Ok(Err(message))` is an expression that cannot be evaluated (the decision fails the step, not the
/// transaction).
async fn evaluate_when<T: StepTx>(
    tx: &mut T,
    run_id: &str,
    expr: &str,
    input: &mut Option<Value>,
) -> StoreResult<Result<bool, String>> {
    let condition = match Condition::compile(expr) {
        Ok(c) => c,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let mut steps = Map::new();
    for id in condition.step_references() {
        if let Some(state) = tx.step_state(run_id, &id).await? {
            let output = match state.output {
                Some(text) => serde_json::from_str(&text).map_err(|e| StoreError::corrupt("steps.output", e))?,
                None => Value::Null,
            };
            steps.insert(id, json!({"output": output, "status": state.status}));
        }
    }
    if input.is_none() {
        let text = tx.run_input(run_id).await?.unwrap_or_else(|| "null".into());
        *input = Some(serde_json::from_str(&text).map_err(|e| StoreError::corrupt("runs.input", e))?);
    }
    let scope = ConditionScope { input: input.clone().unwrap_or(Value::Null), steps };
    Ok(condition.evaluate(&scope).map_err(|e| e.to_string()))
}

/// The cascade: `finished` steps just became final (their own rows already updated by the caller). Releases
/// dependents transitively, then counts every step made final against the run and closes it if nothing is
/// open.
///
/// Releases level by level: the dependents of all of a level's steps are decremented in one statement (a
/// 200-wide fan-out finishing in one batch updates its join once, not 200 times), and the steps that level's
/// decisions made final (skips, `when` failures) form the next level.
pub(crate) async fn after_final<T: StepTx>(
    tx: &mut T,
    run_id: &str,
    finished: Vec<Finished>,
    now: i64,
    events: &mut Vec<EventInsert>,
) -> StoreResult<()> {
    let closed = release(tx, run_id, finished, now, events).await?;
    close_run(tx, run_id, closed, now, events).await
}

/// The cascade of [`after_final`] without closing the run: returns the run's steps that became final (the
/// `finished` ones and those the cascade decided), for [`close_runs`].
pub(crate) async fn release<T: StepTx>(
    tx: &mut T,
    run_id: &str,
    finished: Vec<Finished>,
    now: i64,
    events: &mut Vec<EventInsert>,
) -> StoreResult<StepsClosed> {
    release_from(tx, run_id, finished, None, now, events).await
}

/// [`release`], with the first level's dependents already released (`first_level`: the rows
/// `StepTx::children_release` would have returned for `finished`) when the caller's statement did it.
async fn release_from<T: StepTx>(
    tx: &mut T,
    run_id: &str,
    finished: Vec<Finished>,
    mut first_level: Option<Vec<ChildRow>>,
    now: i64,
    events: &mut Vec<EventInsert>,
) -> StoreResult<StepsClosed> {
    let mut closed = StepsClosed::of(finished.iter().map(|f| f.status));
    let mut level = finished;
    loop {
        // Leaves have nothing to release (most steps of a wide run).
        level.retain(|f| f.children != Some(0));
        if level.is_empty() {
            break;
        }
        let parents: Vec<&str> = level.iter().map(|f| f.step_id.as_str()).collect();
        // A dependent with one dependency depends on one of this level's steps: its status is known without a
        // read when the whole level shares it. When that status is success, the release itself makes ready the
        // dependents with nothing else to decide.
        let first = level[0].status;
        let shared = level.iter().all(|f| f.status == first).then_some(first);
        let succeeded_at = (shared == Some(StepStatus::Succeeded)).then_some(now);
        let released = match first_level.take() {
            Some(rows) => rows,
            None => tx.children_release(run_id, &parents, succeeded_at).await?,
        };
        let mut ready: Vec<ChildRow> = released.into_iter().filter(|c| c.pending_deps == 0).collect();
        // The database returns rows in no particular order; decisions (and their events) follow step ids.
        ready.sort_by(|a, b| a.step_id.cmp(&b.step_id));
        let finals = decide(tx, run_id, ready, shared, now, events).await?;
        closed.add(StepsClosed::of(finals.iter().map(|f| f.status)));
        level = finals;
    }
    Ok(closed)
}

/// [`after_final`] for one step that just succeeded under its lease, with what the dialect's success
/// statement already did ([`StepSucceeded`]): when it released the step's dependents, the cascade starts from
/// those rows; when it counted the step against the run, the run's counter is written again only if the
/// cascade made more steps final (skips, `when` failures).
pub(crate) async fn after_succeeded<T: StepTx>(
    tx: &mut T,
    run_id: &str,
    finished: Finished,
    done: StepSucceeded,
    now: i64,
    events: &mut Vec<EventInsert>,
) -> StoreResult<()> {
    let mut closed = release_from(tx, run_id, vec![finished], done.released, now, events).await?;
    match done.run_counter {
        // The success statement counted the step itself (a success: not a failed one).
        Some(counters) if closed.steps == 1 => finish_if_done(tx, run_id, counters, now, events).await,
        Some(_) => {
            closed.steps -= 1;
            close_run(tx, run_id, closed, now, events).await
        }
        None => close_run(tx, run_id, closed, now, events).await,
    }
}

/// Counts `closed` against the run and finishes it when nothing is open.
async fn close_run<T: StepTx>(
    tx: &mut T,
    run_id: &str,
    closed: StepsClosed,
    now: i64,
    events: &mut Vec<EventInsert>,
) -> StoreResult<()> {
    let Some(counters) = tx.run_close_steps(run_id, closed, now).await? else {
        return Err(vanished(run_id));
    };
    finish_if_done(tx, run_id, counters, now, events).await
}

/// Finishes the run as its counters say ([`run_end`]): not while a step is open or a cancel (which finishes
/// the run itself) is under way; succeeded in one statement; failed after reading its failed steps to name
/// the root cause.
async fn finish_if_done<T: StepTx>(
    tx: &mut T,
    run_id: &str,
    counters: RunCounters,
    now: i64,
    events: &mut Vec<EventInsert>,
) -> StoreResult<()> {
    match run_end(counters) {
        None => Ok(()),
        Some(RunStatus::Succeeded) => {
            if tx.run_finish(run_id, RunStatus::Succeeded.as_str(), None, now).await? {
                events.push(EventInsert::progress(run_id, None, Progress::RunSucceeded {}, now));
            }
            Ok(())
        }
        Some(_) => {
            let failed = tx.run_failed_steps(run_id).await?;
            finish_failed(tx, run_id, &failed, now, events).await
        }
    }
}

fn vanished(run_id: &str) -> StoreError {
    StoreError::corrupt("runs", format!("run {run_id} vanished while finishing a step"))
}

/// Finishes a run its counters said failed (`failed`: its failed steps as `(step_id, error)` in plan order, the
/// first one named in the run's failure).
async fn finish_failed<T: StepTx>(
    tx: &mut T,
    run_id: &str,
    failed: &[(String, Option<String>)],
    now: i64,
    events: &mut Vec<EventInsert>,
) -> StoreResult<()> {
    let failure = match failed.first() {
        Some((step_id, error)) => {
            let record = error.as_deref().and_then(|e| serde_json::from_str::<Value>(e).ok()).unwrap_or(Value::Null);
            json!({"step_id": step_id, "code": record.get("code"), "message": record.get("message"),
                   "suggestion": record.get("suggestion"), "failed_steps": failed.len()})
        }
        None => json!({}),
    };
    let failure_text = failure.to_string();
    if tx.run_finish(run_id, RunStatus::Failed.as_str(), Some(&failure_text), now).await? {
        events.push(event(run_id, None, EventKind::RunFailed, failure, now));
    }
    Ok(())
}

/// [`close_run`] for several runs (`(run_id, closed)`, distinct runs) with set-based statements: one counter
/// update for all, one finish of those their counters say succeeded, and only when some failed, one read of
/// their failed steps (those are finished one by one). `run_failed` events come first, then `run_succeeded`
/// ones, each in `closing`'s order.
pub(crate) async fn close_runs<T: StepTx + RunsTx>(
    tx: &mut T,
    closing: &[(&str, StepsClosed)],
    now: i64,
    events: &mut Vec<EventInsert>,
) -> StoreResult<()> {
    if let [(run_id, closed)] = closing {
        return close_run(tx, run_id, *closed, now, events).await;
    }
    let counters: HashMap<String, RunCounters> = tx.runs_close_steps(closing, now).await?.into_iter().collect();
    let (mut succeeding, mut failing) = (Vec::new(), Vec::new());
    for (run_id, _) in closing {
        match counters.get(*run_id).map(|c| run_end(*c)) {
            None => return Err(vanished(run_id)),
            Some(Some(RunStatus::Succeeded)) => succeeding.push(*run_id),
            Some(Some(_)) => failing.push(*run_id),
            Some(None) => {}
        }
    }
    if !failing.is_empty() {
        let mut failed: HashMap<String, Vec<(String, Option<String>)>> = HashMap::new();
        for (run_id, step_id, error) in tx.runs_failed_steps(&failing).await? {
            failed.entry(run_id).or_default().push((step_id, error));
        }
        for run_id in failing {
            finish_failed(tx, run_id, failed.get(run_id).map_or(&[][..], Vec::as_slice), now, events).await?;
        }
    }
    if succeeding.is_empty() {
        return Ok(());
    }
    let succeeded: HashSet<String> = tx.runs_succeed(&succeeding, now).await?.into_iter().collect();
    for run_id in succeeding.into_iter().filter(|id| succeeded.contains(*id)) {
        events.push(EventInsert::progress(run_id, None, Progress::RunSucceeded {}, now));
    }
    Ok(())
}
