//! Reporting an attempt's outcome (`Complete` or `Fail`) as apalis' acknowledgement step.
//!
//! A finished attempt's result is precious: the orchestrator may be restarting (case C14), so a report is
//! retried with exponential backoff (`backon`) on transient errors for up to `give_up_after` in total, while the
//! attempt keeps its worker slot. The backoff is capped at the heartbeat interval (a quarter of the lease TTL;
//! at most twice that with jitter): a restarted orchestrator reaps nothing for one lease TTL, and a report
//! must land within that grace however long the outage was, or the held result is lost (its attempt reaped as
//! `lease_lost`). Resending is safe: every report is fenced by its lease, so a duplicate or late
//! one is answered `STALE` and changes nothing. After giving up, the lease expires and the reaper decides.

use std::sync::Arc;
use std::time::Duration;

use apalis::prelude::{Acknowledge, BoxDynError, ExecutionContext};
use backon::{ExponentialBuilder, Retryable};
use cairn_core::failure::codes;
use cairn_proto::v1::{self as pb, ReportOutcome};
use futures::future::BoxFuture;
use serde_json::Value;

use super::Session;
use super::client::{OrchestratorClient, transient};
use super::fetch::{give_back, return_surplus};
use super::job::{LeaseInfo, take_slot};
use super::outcome::{AttemptError, to_proto};
use crate::action::ActionError;

/// Why a report was not delivered. Not retryable by the caller: the reporter already retried.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReportError {
    /// The orchestrator refused it, or stayed unreachable past the retry budget.
    #[error("the report of {run_id}/{step_id} attempt {attempt} was not delivered: {status}")]
    Undelivered {
        run_id: String,
        step_id: String,
        attempt: u32,
        #[source]
        status: tonic::Status,
    },
    /// The task carried no lease (a runtime bug).
    #[error("the task carries no lease to report under")]
    MissingLease,
}

/// Reports attempt outcomes to the orchestrator.
#[derive(Debug, Clone)]
pub(crate) struct Reporter {
    client: OrchestratorClient,
    /// Where attempts claimed with a completion go, and whether the worker is stopping (then none are asked).
    session: Arc<Session>,
    give_up_after: Duration,
    /// Longest wait between two tries before jitter: the heartbeat interval.
    max_delay: Duration,
}

enum Report {
    Complete(String),
    Fail(pb::Failure),
    /// Hand the attempt back unstarted (`FailRequest.not_started`); the failure is for older orchestrators.
    ReturnUnstarted(pb::Failure),
}

impl Reporter {
    pub(crate) fn new(session: Arc<Session>, give_up_after: Duration, max_delay: Duration) -> Self {
        Self { client: session.client.clone(), session, give_up_after, max_delay }
    }

    async fn deliver(self, info: LeaseInfo, report: Report) -> Result<(), ReportError> {
        if let Report::Fail(failure) = &report {
            tracing::Span::current().record("cairn.failure_code", failure.code.as_str());
        }
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(100).min(self.max_delay))
            .with_max_delay(self.max_delay)
            .with_jitter()
            .without_max_times()
            .with_total_delay(Some(self.give_up_after));
        // A completion asks for one attempt for the slot it frees, unless the worker is stopping.
        let next = u32::from(!self.session.stopping.is_cancelled());
        let send = || async {
            match &report {
                Report::Complete(output) => {
                    let names = &self.session.action_names;
                    self.client.complete(&info.lease, output.clone(), next, names).await
                }
                Report::Fail(failure) => Ok((self.client.fail(&info.lease, failure.clone()).await?, Vec::new())),
                Report::ReturnUnstarted(failure) => {
                    Ok((self.client.return_unstarted(&info.lease, failure.clone()).await?, Vec::new()))
                }
            }
        };
        let outcome = send
            .retry(backoff)
            .when(transient)
            .notify(|status, wait| {
                tracing::warn!(code = ?status.code(), message = status.message(), retry_in_ms = wait.as_millis(),
                    "report not delivered; retrying");
            })
            .await;
        let outcome = outcome.map(|(outcome, next)| {
            self.take_over(&info, next);
            outcome
        });
        match outcome {
            Ok(ReportOutcome::Stale) => {
                tracing::info!("report was stale: the lease had already ended; nothing changed");
                Ok(())
            }
            Ok(outcome) => {
                tracing::debug!(?outcome, "report delivered");
                Ok(())
            }
            Err(status) => {
                tracing::error!(code = ?status.code(), message = status.message(),
                    "giving up on the report; the lease will expire and the orchestrator will decide");
                Err(ReportError::Undelivered {
                    run_id: info.lease.run_id,
                    step_id: info.lease.step_id,
                    attempt: info.lease.attempt,
                    status,
                })
            }
        }
    }
}

impl Reporter {
    /// Gives `next` (claimed with the completion) the reported attempt's slot and queues it for the fetcher.
    /// Anything that cannot start here (no slot left, more than asked) is returned unstarted.
    fn take_over(&self, info: &LeaseInfo, next: Vec<pb::Attempt>) {
        let mut next = next.into_iter();
        if let Some(attempt) = next.next() {
            match take_slot(&info.slot) {
                Some(slot) => self.session.handed.push(attempt, slot),
                None => give_back(&self.session, vec![attempt]),
            }
        }
        return_surplus(&self.session, next.collect());
    }
}

impl Acknowledge<Value> for Reporter {
    type Error = ReportError;
    type Future = BoxFuture<'static, Result<(), ReportError>>;

    fn ack(&mut self, result: &Result<Value, BoxDynError>, ctx: &ExecutionContext) -> Self::Future {
        let Some(info) = ctx.data().get::<LeaseInfo>().cloned() else {
            return Box::pin(async { Err(ReportError::MissingLease) });
        };
        let report = match result {
            Ok(output) => Report::Complete(output.to_string()),
            Err(error) => match error.downcast_ref::<AttemptError>() {
                Some(AttemptError::NotServed(action)) => Report::ReturnUnstarted(to_proto(
                    ActionError::retryable(
                        codes::ACTION_ERROR,
                        format!("this worker does not serve `{action}`; handed back unstarted"),
                    )
                    .did_not_take_effect(),
                )),
                Some(attempt_error) => match attempt_error.failure() {
                    Some(failure) => Report::Fail(failure),
                    None => return Box::pin(async { Ok(()) }),
                },
                // A layer of ours failed in a way it did not type: report it as an action error that may pass.
                None => Report::Fail(to_proto(ActionError::retryable(codes::ACTION_ERROR, error.to_string()))),
            },
        };
        Box::pin(self.clone().deliver(info, report))
    }
}
