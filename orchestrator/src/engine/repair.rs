//! Repairing a run without starting over (contract §6, "Repairing a run"): an operator's retry of a failed or
//! `outcome_unknown` step, optionally with repaired args, which are validated as a submission validates its plan
//! (the action's schema, the plan's references) before anything changes; a redrive of a failed or cancelled run;
//! a rerun of a finished run from one step.

use cairn_core::diagnostic::Diagnostic;
use cairn_core::state::RunStatus;
use cairn_core::state::StepStatus;
use cairn_core::validate::validate_value;
use cairn_store::{
    PauseOutcome, RedriveOutcome, RerunOutcome, RetryOutcome, RunPause, RunRedrive, RunRerun, StepRetry, StoreError,
};
use serde_json::Value;

use super::Engine;

/// An operator's retry of a step, as asked for.
#[derive(Debug, Clone, Copy)]
pub struct RetryRequest<'a> {
    /// The run.
    pub run_id: &'a str,
    /// The step.
    pub step_id: &'a str,
    /// Repaired args, replacing the step's (`None`: keep them, and the step's idempotency key).
    pub args: Option<&'a Value>,
    /// Who decided.
    pub by: &'a str,
    /// Why.
    pub reason: Option<&'a str>,
}

/// Why a retry was refused; nothing changed.
#[derive(Debug, thiserror::Error)]
pub enum RetryError {
    /// The repaired args do not validate (HTTP 422).
    #[error("the repaired args are invalid ({} error(s))", .0.iter().filter(|d| d.is_error()).count())]
    InvalidArgs(Vec<Diagnostic>),
    /// No such run or step (HTTP 404).
    #[error("no such run or step")]
    NotFound,
    /// The step is neither failed nor `outcome_unknown` (HTTP 409).
    #[error("the step is {0}; only a failed or outcome_unknown step can be retried")]
    WrongState(StepStatus),
    /// The run was cancelled (HTTP 409).
    #[error("the run was cancelled; redrive it to run its steps again")]
    RunCancelled,
    /// A rerun of a run that has not finished (HTTP 409).
    #[error("the run is {0}; only a finished run can be rerun")]
    NotFinished(RunStatus),
    /// A pause of a run that is neither pending nor running, or a resume of one that is not paused (HTTP 409).
    #[error("the run is {0}; a pause applies to a pending or running run, a resume to a paused one")]
    NotPausable(RunStatus),
    /// A redrive of a run that is neither failed nor cancelled (HTTP 409).
    #[error("the run is {0}; only a failed or cancelled run can be redriven")]
    RunNotFinished(RunStatus),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Engine {
    /// Retries a step; returns its args revision (0: the plan's args) and the steps opened again.
    ///
    /// # Errors
    /// [`RetryError`].
    pub async fn retry_step(&self, req: RetryRequest<'_>) -> Result<(i64, Vec<String>), RetryError> {
        if let Some(args) = req.args {
            self.check_repaired_args(req.run_id, req.step_id, args).await?;
        }
        let retry = StepRetry {
            run_id: req.run_id,
            step_id: req.step_id,
            args: req.args,
            by: req.by,
            reason: req.reason,
            now_ms: self.now_ms(),
        };
        match self.inner.store.step_retry(&retry).await? {
            RetryOutcome::Retried { args_revision, reopened } => {
                tracing::info!(run_id = req.run_id, step_id = req.step_id, args_revision, "step retried");
                self.wake();
                Ok((args_revision, reopened))
            }
            RetryOutcome::NoSuchStep => Err(RetryError::NotFound),
            RetryOutcome::WrongState(status) => Err(RetryError::WrongState(status)),
            RetryOutcome::RunCancelled => Err(RetryError::RunCancelled),
        }
    }

    /// Redrives a failed or cancelled run; returns the steps opened again.
    ///
    /// # Errors
    /// [`RetryError::NotFound`], [`RetryError::RunNotFinished`], [`RetryError::Store`].
    pub async fn redrive_run(&self, run_id: &str, by: &str, reason: Option<&str>) -> Result<Vec<String>, RetryError> {
        let redrive = RunRedrive { run_id, by, reason, now_ms: self.now_ms() };
        match self.inner.store.run_redrive(&redrive).await? {
            RedriveOutcome::Redriven { reopened } => {
                tracing::info!(run_id, steps = reopened.len(), "run redriven");
                self.wake();
                Ok(reopened)
            }
            RedriveOutcome::NoSuchRun => Err(RetryError::NotFound),
            RedriveOutcome::WrongState(status) => Err(RetryError::RunNotFinished(status)),
        }
    }

    /// A new run of a finished run's plan and input from step `from`: it and its descendants run again, every
    /// other step keeps the old run's status and output. Returns the new run's id.
    ///
    /// # Errors
    /// [`RetryError::NotFound`] (no such run or step), [`RetryError::NotFinished`], [`RetryError::Store`].
    pub async fn rerun_run(
        &self,
        run_id: &str,
        from: &str,
        by: &str,
        reason: Option<&str>,
    ) -> Result<String, RetryError> {
        let now_ms = self.now_ms();
        let new_run_id = super::new_run_id(self.inner.clock.now());
        let rerun = RunRerun { run_id, new_run_id: &new_run_id, from, by, reason, now_ms };
        match self.inner.store.run_rerun(&rerun).await? {
            RerunOutcome::Started { run_id: new, reset } => {
                tracing::info!(rerun_of = run_id, run_id = %new, from, steps = reset.len(), "run rerun");
                crate::trace::run_submitted(&new);
                self.wake();
                Ok(new)
            }
            RerunOutcome::NoSuchRun | RerunOutcome::NoSuchStep => Err(RetryError::NotFound),
            RerunOutcome::NotFinished(status) => Err(RetryError::NotFinished(status)),
        }
    }

    /// Pauses (`pause`) or resumes a run: while paused no new attempt starts; on resume what came due meanwhile
    /// happens.
    ///
    /// # Errors
    /// [`RetryError::NotFound`], [`RetryError::NotPausable`], [`RetryError::Store`].
    pub async fn pause_run(&self, run_id: &str, pause: bool, by: &str, reason: Option<&str>) -> Result<(), RetryError> {
        let req = RunPause { run_id, by, reason, now_ms: self.now_ms() };
        let outcome =
            if pause { self.inner.store.run_pause(&req).await? } else { self.inner.store.run_resume(&req).await? };
        match outcome {
            PauseOutcome::Done => {
                tracing::info!(run_id, pause, "run {}", if pause { "paused" } else { "resumed" });
                if !pause {
                    self.wake();
                }
                Ok(())
            }
            PauseOutcome::NoSuchRun => Err(RetryError::NotFound),
            PauseOutcome::WrongState(status) => Err(RetryError::NotPausable(status)),
        }
    }

    /// Validates the run's plan with `args` in place of the step's.
    async fn check_repaired_args(&self, run_id: &str, step_id: &str, args: &Value) -> Result<(), RetryError> {
        let mut plan = self.inner.store.run_plan(run_id).await?.ok_or(RetryError::NotFound)?;
        let step = plan
            .get_mut("steps")
            .and_then(Value::as_array_mut)
            .and_then(|steps| steps.iter_mut().find(|s| s.get("id").and_then(Value::as_str) == Some(step_id)))
            .ok_or(RetryError::NotFound)?;
        step["args"] = args.clone();
        let catalog = self.inner.catalog.snapshot_for(&plan).await;
        let report = validate_value(&plan, &catalog, &self.inner.config.limits);
        if report.valid { Ok(()) } else { Err(RetryError::InvalidArgs(report.diagnostics)) }
    }
}
