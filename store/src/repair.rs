//! Repairing a run without starting over (contract §6, "Repairing a run"): an operator's retry of a failed or
//! `outcome_unknown` step, optionally with repaired args; a redrive of a failed or cancelled run; a rerun of a
//! finished run from one step. One transaction each (`flow::retry`).

use cairn_core::state::{RunStatus, StepStatus};
use serde_json::Value;

// `tx`, `StoreResult` and `conflict_pause` are named by `in_tx!`.
use crate::error::StoreResult;
use crate::{Store, conflict_pause, flow, tx};

/// An operator's retry of a step.
#[derive(Debug, Clone, Copy)]
pub struct StepRetry<'a> {
    /// The run.
    pub run_id: &'a str,
    /// The step: `failed` (it reopens the run) or `outcome_unknown`.
    pub step_id: &'a str,
    /// Repaired args (already validated against the action's schema and the plan's references), replacing the
    /// step's; `None` keeps them and the step's idempotency key.
    pub args: Option<&'a Value>,
    /// Who decided (recorded in the run's history).
    pub by: &'a str,
    /// Why (recorded in the run's history).
    pub reason: Option<&'a str>,
    /// Now, epoch milliseconds.
    pub now_ms: i64,
}

/// What a [`StepRetry`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetryOutcome {
    /// The step runs again (`reopened`: it and the skipped dependents decided again with it, in plan order); its
    /// args revision is `args_revision` (0: the plan's args).
    Retried {
        /// The step's args revision after the retry.
        args_revision: i64,
        /// Steps opened again, the retried one included.
        reopened: Vec<String>,
    },
    /// No such run or step.
    NoSuchStep,
    /// The step is neither `failed` nor `outcome_unknown`.
    WrongState(StepStatus),
    /// The run was cancelled: a redrive, not a retry, runs its steps again.
    RunCancelled,
}

/// An operator's redrive of a failed or cancelled run: every failed and cancelled step runs again, with a fresh
/// attempt budget, and the steps they skipped are decided again; a non-idempotent step cancelled while it ran
/// opens as `outcome_unknown` instead.
#[derive(Debug, Clone, Copy)]
pub struct RunRedrive<'a> {
    /// The run.
    pub run_id: &'a str,
    /// Who decided.
    pub by: &'a str,
    /// Why.
    pub reason: Option<&'a str>,
    /// Now, epoch milliseconds.
    pub now_ms: i64,
}

/// What a [`RunRedrive`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedriveOutcome {
    /// The run goes on; `reopened`: the steps opened again, in plan order.
    Redriven {
        /// Steps opened again.
        reopened: Vec<String>,
    },
    /// No such run.
    NoSuchRun,
    /// The run is neither failed nor cancelled.
    WrongState(RunStatus),
}

/// A new run of a finished run's plan and input from one step (`rerun --from`): the step and every step that
/// depends on it run again; every other step keeps the old run's status and output (its args revision too) and
/// does not run. The new run records `rerun_of`.
#[derive(Debug, Clone, Copy)]
pub struct RunRerun<'a> {
    /// The finished run.
    pub run_id: &'a str,
    /// The new run's id.
    pub new_run_id: &'a str,
    /// The step to run again from.
    pub from: &'a str,
    /// Who decided.
    pub by: &'a str,
    /// Why.
    pub reason: Option<&'a str>,
    /// Now, epoch milliseconds.
    pub now_ms: i64,
}

/// What a [`RunRerun`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RerunOutcome {
    /// The new run was created; `reset`: the steps that run again, in plan order.
    Started {
        /// The new run.
        run_id: String,
        /// Steps that run again.
        reset: Vec<String>,
    },
    /// No such run.
    NoSuchRun,
    /// The run has no such step.
    NoSuchStep,
    /// The run has not finished.
    NotFinished(RunStatus),
}

/// An operator's pause or resume of a run: while paused, no new attempt of its steps starts (running ones finish
/// and are recorded); timers, backoffs and approval and event deadlines that come due wait for the resume.
#[derive(Debug, Clone, Copy)]
pub struct RunPause<'a> {
    /// The run.
    pub run_id: &'a str,
    /// Who decided.
    pub by: &'a str,
    /// Why.
    pub reason: Option<&'a str>,
    /// Now, epoch milliseconds.
    pub now_ms: i64,
}

/// What a pause or a resume did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseOutcome {
    /// The run is paused (or running again).
    Done,
    /// No such run.
    NoSuchRun,
    /// A pause of a run that is neither pending nor running, or a resume of one that is not paused.
    WrongState(RunStatus),
}

impl Store {
    /// Retries a step ([`StepRetry`]); nothing changes unless the outcome is [`RetryOutcome::Retried`].
    ///
    /// # Errors
    /// [`crate::StoreError::Database`] (retryable).
    pub async fn step_retry(&self, req: &StepRetry<'_>) -> StoreResult<RetryOutcome> {
        in_tx!(self, |tx, events| flow::retry::step_retry(&mut tx, req, &mut events).await?)
    }

    /// Reruns a finished run from a step ([`RunRerun`]); nothing changes unless the outcome is
    /// [`RerunOutcome::Started`].
    ///
    /// # Errors
    /// [`crate::StoreError::Database`] (retryable).
    pub async fn run_rerun(&self, req: &RunRerun<'_>) -> StoreResult<RerunOutcome> {
        in_tx!(self, |tx, events| flow::retry::run_rerun(&mut tx, req, &mut events).await?)
    }

    /// Pauses a pending or running run ([`RunPause`]).
    ///
    /// # Errors
    /// [`crate::StoreError::Database`] (retryable).
    pub async fn run_pause(&self, req: &RunPause<'_>) -> StoreResult<PauseOutcome> {
        in_tx!(self, |tx, events| flow::retry::run_pause(&mut tx, req, true, &mut events).await?)
    }

    /// Resumes a paused run ([`RunPause`]).
    ///
    /// # Errors
    /// [`crate::StoreError::Database`] (retryable).
    pub async fn run_resume(&self, req: &RunPause<'_>) -> StoreResult<PauseOutcome> {
        in_tx!(self, |tx, events| flow::retry::run_pause(&mut tx, req, false, &mut events).await?)
    }

    /// Redrives a run ([`RunRedrive`]); nothing changes unless the outcome is [`RedriveOutcome::Redriven`].
    ///
    /// # Errors
    /// [`crate::StoreError::Database`] (retryable).
    pub async fn run_redrive(&self, req: &RunRedrive<'_>) -> StoreResult<RedriveOutcome> {
        in_tx!(self, |tx, events| flow::retry::run_redrive(&mut tx, req, &mut events).await?)
    }
}
