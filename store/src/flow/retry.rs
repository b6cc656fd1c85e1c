//! Repairing a run (contract §6, "Repairing a run"). An operator's retry: a `failed` step runs again with a fresh
//! attempt budget, its run reopens and the dependents it had skipped are decided again ([`machine::reopen`]); an
//! `outcome_unknown` step gets a new attempt ([`super::control::operate`]); either may come with repaired args,
//! which replace the step's args on the run (the plan stays as submitted) and give it a new idempotency key. A
//! redrive: every failed and cancelled step of a finished run runs again the same way. A rerun: a new run of a
//! finished run's plan and input from one step, reusing every other step's status and output.

use std::collections::HashMap;

use cairn_core::event::EventKind;
use cairn_core::machine::{self, OperatorAction, Reopening, RunStep};
use cairn_core::state::{RunStatus, StepStatus};
use serde_json::{Value, json};

use super::control::StepDecision;
use super::event;
use super::settle::{after_final, decide};
use crate::error::{StoreError, StoreResult};
use crate::reopen_tx::{ReopenTx, RunStepRow};
use crate::repair::{
    PauseOutcome, RedriveOutcome, RerunOutcome, RetryOutcome, RunPause, RunRedrive, RunRerun, StepRetry,
};
use crate::rows::EventInsert;
use crate::tx::StepTx;
use crate::wait_tx::WaitTx;

/// Applies `req` ([`RetryOutcome`] says what happened; nothing changes unless it is `Retried`).
pub(crate) async fn step_retry<T: StepTx + WaitTx + ReopenTx>(
    tx: &mut T,
    req: &StepRetry<'_>,
    events: &mut Vec<EventInsert>,
) -> StoreResult<RetryOutcome> {
    let StepRetry { run_id, step_id, now_ms: now, .. } = *req;
    let Some((run_status, cancel_requested)) = tx.run_lock(run_id, now).await? else {
        return Ok(RetryOutcome::NoSuchStep);
    };
    let (rows, edges) = tx.run_graph(run_id).await?;
    let graph = graph(&rows, &edges)?;
    let Some(status) = graph.iter().find(|s| s.id == step_id).map(|s| s.status) else {
        return Ok(RetryOutcome::NoSuchStep);
    };
    match status {
        StepStatus::OutcomeUnknown => {
            let args_revision = revise(tx, req).await?;
            let note = retry_note(req, args_revision);
            let decision =
                StepDecision { run_id, step_id, action: OperatorAction::Retry, actor: req.by, note: Some(&note) };
            if !super::control::operate(tx, &decision, now, events).await? {
                return Err(moved(step_id));
            }
            Ok(RetryOutcome::Retried { args_revision, reopened: vec![step_id.to_owned()] })
        }
        StepStatus::Failed if cancel_requested != 0 || run_status == RunStatus::Cancelled.as_str() => {
            Ok(RetryOutcome::RunCancelled)
        }
        StepStatus::Failed => {
            let args_revision = revise(tx, req).await?;
            let reopening = machine::reopen(&graph, &[step_id]).map_err(|e| moved(&e.to_string()))?;
            let data = retry_note(req, args_revision);
            let reopened = apply(tx, run_id, parse_run(&run_status)?, reopening, data, now, events).await?;
            Ok(RetryOutcome::Retried { args_revision, reopened })
        }
        other => Ok(RetryOutcome::WrongState(other)),
    }
}

/// Applies `req` ([`RedriveOutcome`] says what happened; nothing changes unless it is `Redriven`).
pub(crate) async fn run_redrive<T: StepTx + WaitTx + ReopenTx>(
    tx: &mut T,
    req: &RunRedrive<'_>,
    events: &mut Vec<EventInsert>,
) -> StoreResult<RedriveOutcome> {
    let RunRedrive { run_id, now_ms: now, .. } = *req;
    let Some((run_status, _)) = tx.run_lock(run_id, now).await? else {
        return Ok(RedriveOutcome::NoSuchRun);
    };
    let run_status = parse_run(&run_status)?;
    if !matches!(run_status, RunStatus::Failed | RunStatus::Cancelled) {
        return Ok(RedriveOutcome::WrongState(run_status));
    }
    let (rows, edges) = tx.run_graph(run_id).await?;
    let graph = graph(&rows, &edges)?;
    let targets = machine::redrive_targets(&graph);
    let reopening = machine::reopen(&graph, &targets).map_err(|e| moved(&e.to_string()))?;
    let data = note(req.by, req.reason, json!({"redrive": true}));
    let reopened = apply(tx, run_id, run_status, reopening, data, now, events).await?;
    Ok(RedriveOutcome::Redriven { reopened })
}

/// Applies `req` ([`RerunOutcome`] says what happened; nothing changes unless it is `Started`).
pub(crate) async fn run_rerun<T: StepTx + WaitTx + ReopenTx>(
    tx: &mut T,
    req: &RunRerun<'_>,
    events: &mut Vec<EventInsert>,
) -> StoreResult<RerunOutcome> {
    let RunRerun { run_id, new_run_id, from, now_ms: now, .. } = *req;
    let Some((run_status, _)) = tx.run_lock(run_id, now).await? else {
        return Ok(RerunOutcome::NoSuchRun);
    };
    let run_status = parse_run(&run_status)?;
    if !run_status.is_final() {
        return Ok(RerunOutcome::NotFinished(run_status));
    }
    let (rows, edges) = tx.run_graph(run_id).await?;
    let graph = graph(&rows, &edges)?;
    let Ok(rerun) = machine::rerun_from(&graph, from) else {
        return Ok(RerunOutcome::NoSuchStep);
    };
    tx.run_copy(run_id, new_run_id, (rerun.open_steps, rerun.failed_steps), now).await?;
    let data = note(req.by, req.reason, json!({"rerun_of": run_id, "from": from, "steps": rows.len()}));
    events.push(event(new_run_id, None, EventKind::RunCreated, data, now));
    let mut candidates = Vec::new();
    for (step_id, pending_deps) in &rerun.reset {
        tx.step_reset(new_run_id, step_id, *pending_deps, now).await?;
        if *pending_deps == 0 {
            candidates.extend(tx.step_candidate(new_run_id, step_id).await?);
        }
    }
    let finals = decide(tx, new_run_id, candidates, None, now, events).await?;
    if !finals.is_empty() {
        after_final(tx, new_run_id, finals, now, events).await?;
    }
    Ok(RerunOutcome::Started {
        run_id: new_run_id.to_owned(),
        reset: rerun.reset.into_iter().map(|(s, _)| s).collect(),
    })
}

/// Writes a [`Reopening`] of the locked run (its status `run_status`): the steps open again, pending dependents
/// wait longer, the run takes them back, and targets that wait for nothing are decided at once, exactly as a
/// release decides a step. `data` goes into each target's `operator_retry` event. Returns the reopened steps.
async fn apply<T: StepTx + ReopenTx>(
    tx: &mut T,
    run_id: &str,
    run_status: RunStatus,
    reopening: Reopening,
    data: Value,
    now: i64,
    events: &mut Vec<EventInsert>,
) -> StoreResult<Vec<String>> {
    if run_status.is_final() {
        events.push(event(run_id, None, EventKind::RunReopened, data.clone(), now));
    }
    for step in &reopening.steps {
        if !tx.step_reopen(run_id, step, now).await? {
            return Err(moved(&step.step));
        }
        let (kind, recorded) = match (step.target, step.to) {
            (true, StepStatus::OutcomeUnknown) => {
                let cause = "it was cancelled while an attempt ran and is not idempotent: it may have acted";
                let mut recorded = data.clone();
                recorded["cause"] = json!(cause);
                (EventKind::StepOutcomeUnknown, recorded)
            }
            (true, _) => (EventKind::OperatorRetry, data.clone()),
            (false, _) => (EventKind::StepReopened, json!({"was": step.was.as_str()})),
        };
        events.push(event(run_id, Some(&step.step), kind, recorded, now));
    }
    for (waiting, more) in &reopening.waiting_longer {
        tx.step_wait_longer(run_id, waiting, *more, now).await?;
    }
    let goes_on = if run_status.is_final() { RunStatus::Running } else { run_status };
    tx.run_reopen(run_id, goes_on.as_str(), reopening.opened, now).await?;
    let mut candidates = Vec::new();
    for step in reopening.steps.iter().filter(|s| s.target && s.to == StepStatus::Pending && s.pending_deps == 0) {
        candidates.extend(tx.step_candidate(run_id, &step.step).await?);
    }
    let finals = decide(tx, run_id, candidates, None, now, events).await?;
    if !finals.is_empty() {
        after_final(tx, run_id, finals, now, events).await?;
    }
    Ok(reopening.steps.into_iter().map(|s| s.step).collect())
}

/// What an `operator_retry` event records: who, why, the args revision, and the repaired args when there are.
fn retry_note(req: &StepRetry<'_>, args_revision: i64) -> Value {
    let mut extra = json!({"args_revision": args_revision});
    if let Some(args) = req.args {
        extra["args"] = args.clone();
    }
    note(req.by, req.reason, extra)
}

/// `extra` with who decided and why.
fn note(by: &str, reason: Option<&str>, mut extra: Value) -> Value {
    extra["by"] = json!(by);
    if let Some(reason) = reason {
        extra["reason"] = json!(reason);
    }
    extra
}

/// Replaces the step's args when the request repairs them; the step's args revision after it.
async fn revise<T: ReopenTx>(tx: &mut T, req: &StepRetry<'_>) -> StoreResult<i64> {
    let Some(args) = req.args else {
        return tx.step_args_revision(req.run_id, req.step_id).await;
    };
    let text = serde_json::to_string(args).map_err(|e| StoreError::corrupt("repaired args", e))?;
    tx.step_args_revise(req.run_id, req.step_id, &text, req.now_ms).await?.ok_or_else(|| moved(req.step_id))
}

fn moved(step_id: &str) -> StoreError {
    StoreError::corrupt("steps", format!("step {step_id} changed while its run was locked"))
}

fn parse_run(status: &str) -> StoreResult<RunStatus> {
    status.parse().map_err(|e| StoreError::corrupt("runs.status", e))
}

/// The run as [`machine::reopen`] reads it.
fn graph<'a>(rows: &'a [RunStepRow], edges: &'a [(String, String)]) -> StoreResult<Vec<RunStep<'a>>> {
    let mut parents: HashMap<&str, Vec<&str>> = HashMap::new();
    for (parent, child) in edges {
        parents.entry(child.as_str()).or_default().push(parent.as_str());
    }
    rows.iter()
        .map(|(id, status, idempotent, interrupted)| {
            Ok(RunStep {
                id,
                status: status.parse().map_err(|e| StoreError::corrupt("steps.status", e))?,
                parents: parents.remove(id.as_str()).unwrap_or_default(),
                idempotent: *idempotent != 0,
                interrupted: *interrupted != 0,
            })
        })
        .collect()
}

/// Pauses (`pause`) or resumes a run ([`PauseOutcome`] says what happened). A pause applies to a pending or
/// running run and a resume to a paused one; a resumed run is `running` again, and what came due while it was
/// paused (timers, backoffs, approval and event deadlines) happens then.
pub(crate) async fn run_pause<T: ReopenTx>(
    tx: &mut T,
    req: &RunPause<'_>,
    pause: bool,
    events: &mut Vec<EventInsert>,
) -> StoreResult<PauseOutcome> {
    let RunPause { run_id, now_ms: now, .. } = *req;
    let Some((status, _)) = tx.run_lock(run_id, now).await? else {
        return Ok(PauseOutcome::NoSuchRun);
    };
    let status = parse_run(&status)?;
    let (applies, to, kind) = if pause {
        (matches!(status, RunStatus::Pending | RunStatus::Running), RunStatus::Paused, EventKind::RunPaused)
    } else {
        (status == RunStatus::Paused, RunStatus::Running, EventKind::RunResumed)
    };
    if !applies {
        return Ok(PauseOutcome::WrongState(status));
    }
    tx.run_status_set(run_id, to.as_str(), now).await?;
    events.push(event(run_id, None, kind, note(req.by, req.reason, json!({})), now));
    Ok(PauseOutcome::Done)
}
