//! `Complete` and `CompleteBatch`: a worker's successful attempts, each with the claim for the slot it frees.
//!
//! An item of a batch is answered exactly as the same `Complete` would be: fenced by its lease, its claim in the
//! same writer batch as its completion, a resend answered from [`HandedReplies`] while its attempts are young.
//! The batch's items that reach the writer are queued to it as one message ([`Engine::complete_and_claim_all`]),
//! so they are written in one batch of the writer, and the call is answered when its last item is. Every
//! answer that handed out attempts is remembered before anything else is awaited, so a call cut off while
//! attempts claimed for an item are given back still leaves the others to a resend.
//!
//! [`HandedReplies`]: crate::replies::HandedReplies
//! [`Engine::complete_and_claim_all`]: crate::engine::Engine::complete_and_claim_all

use cairn_core::failure::{Failure, codes};
use cairn_proto::MAX_COMPLETE_BATCH_ITEMS;
use cairn_proto::v1::{self as pb, CompleteBatchRequest, CompleteBatchResponse, CompleteRequest, ReportResponse};
use cairn_store::{Claimed, HeartbeatOutcome, Lease, Report, StoreError, StoreResult};
use serde_json::Value;
use tonic::Status;

use super::{WorkerGrpc, attempt, json, lease, outcome, unavailable};
use crate::engine::CompletionAndClaim;

/// A completion checked and not yet written.
enum Prepared {
    /// Answered without the writer: a malformed item, or a resend answered from the first answer.
    Answered(Result<ReportResponse, Status>),
    /// For the writer: the completion and, unless `limit` is 0 (its worker is stopping), the claim for the slot
    /// it frees.
    Write { lease: Lease, output: Value, actions: Vec<String>, limit: u32 },
    /// An output that is not JSON (a NaN, a lone surrogate, truncated text): recorded, after the batch's
    /// completions, as the attempt's failure `invalid_output`, so the step fails (or retries) at once instead of
    /// waiting for its lease to expire — which would park a non-idempotent step as `outcome_unknown`.
    InvalidOutput { lease: Lease, failure: Box<Failure> },
}

/// A written completion's answer, before the attempts of a failed one are given back.
enum Settled {
    Answered(Result<ReportResponse, Status>),
    /// Recorded as a failure of the attempt (see [`Prepared::InvalidOutput`]).
    Fail {
        lease: Lease,
        failure: Box<Failure>,
    },
    /// The completion was not recorded: `claimed` goes back, and the worker gets `status` (and resends).
    GiveBack {
        claimed: Vec<Claimed>,
        status: Status,
    },
}

impl WorkerGrpc {
    /// One completion, as `Complete` answers it (see the protocol file): the outcome and any attempts claimed
    /// with it, or the status the call fails with.
    pub(super) async fn complete_one(&self, req: CompleteRequest) -> Result<ReportResponse, Status> {
        let worker_id = req.worker_id.clone();
        let prepared = self.prepare(req).await;
        let answer = self.answer_all(&worker_id, vec![prepared]).await.pop();
        answer.unwrap_or_else(|| Err(unavailable(&StoreError::Stopped)))
    }

    /// `CompleteBatch`: each item as [`WorkerGrpc::complete_one`] would answer it, in the order given.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for more than [`MAX_COMPLETE_BATCH_ITEMS`] items; everything else is answered per
    /// item.
    pub(super) async fn complete_all(&self, req: CompleteBatchRequest) -> Result<CompleteBatchResponse, Status> {
        if req.items.len() > MAX_COMPLETE_BATCH_ITEMS {
            return Err(Status::invalid_argument(format!(
                "a batch carries at most {MAX_COMPLETE_BATCH_ITEMS} completions, not {}",
                req.items.len()
            )));
        }
        let mut prepared = Vec::with_capacity(req.items.len());
        for item in req.items {
            prepared.push(self.prepare(CompleteRequest { worker_id: req.worker_id.clone(), ..item }).await);
        }
        let answers = self.answer_all(&req.worker_id, prepared).await;
        let results = answers.into_iter().map(|a| pb::CompleteResult { result: Some(item_result(a)) }).collect();
        Ok(CompleteBatchResponse { results })
    }

    /// Writes the completions of `prepared` that need the writer, all as one operation (one batch of the
    /// writer), and answers every item in order.
    async fn answer_all(&self, worker_id: &str, prepared: Vec<Prepared>) -> Vec<Result<ReportResponse, Status>> {
        let writes: Vec<CompletionAndClaim<'_>> = prepared
            .iter()
            .filter_map(|p| match p {
                Prepared::Write { lease, output, actions, limit } => {
                    Some(CompletionAndClaim { lease, output, actions, limit: *limit })
                }
                Prepared::Answered(_) | Prepared::InvalidOutput { .. } => None,
            })
            .collect();
        let mut outcomes = self.engine.complete_and_claim_all(&writes).await.into_iter();
        // Settled (and remembered) all before any give-back is awaited.
        let settled: Vec<Settled> = prepared
            .into_iter()
            .map(|p| match p {
                Prepared::Answered(answer) => Settled::Answered(answer),
                Prepared::InvalidOutput { lease, failure } => Settled::Fail { lease, failure },
                Prepared::Write { lease, .. } => match outcomes.next() {
                    Some((report, claimed)) => self.settle(&lease, report, claimed),
                    None => Settled::Answered(Err(unavailable(&StoreError::Stopped))),
                },
            })
            .collect();
        let mut answers = Vec::with_capacity(settled.len());
        for s in settled {
            let mut answer = self.finish(s).await;
            if let Ok(response) = &mut answer {
                self.add_deliveries(worker_id, &mut response.next).await;
            }
            answers.push(answer);
        }
        answers
    }

    /// Checks `req` and answers a resend; what is left for the writer otherwise.
    async fn prepare(&self, req: CompleteRequest) -> Prepared {
        let lease = match lease(&req.worker_id, req.lease) {
            Ok(lease) => lease,
            Err(status) => return Prepared::Answered(Err(status)),
        };
        let output = match output(&req.output_json) {
            Ok(output) => output,
            Err(failure) => return Prepared::InvalidOutput { lease, failure },
        };
        if req.next_max_attempts == 0 {
            return Prepared::Write { lease, output, actions: Vec::new(), limit: 0 };
        }
        if let Some(answer) = self.replay(&lease).await {
            return Prepared::Answered(answer);
        }
        Prepared::Write { lease, output, actions: req.next_actions, limit: req.next_max_attempts.clamp(1, 256) }
    }

    /// The first answer to a resent completion whose answer never reached the worker, with the attempts it
    /// handed out that are still current; `None` when `lease`'s completion was not answered with attempts
    /// lately.
    async fn replay(&self, lease: &Lease) -> Option<Result<ReportResponse, Status>> {
        let now = self.engine.now_ms();
        let (report, next) = self.replies.replay(lease, now)?;
        // Each attempt is handed again only if its lease is still current (a heartbeat checks and extends it).
        let mut current = Vec::with_capacity(next.len());
        for c in next {
            match self.engine.heartbeat(&c.lease, None).await {
                Ok(HeartbeatOutcome::Extended { .. }) => current.push(c),
                Ok(HeartbeatOutcome::Gone) => {}
                Err(e) => return Some(Err(unavailable(&e))),
            }
        }
        tracing::info!(run_id = %lease.run_id, step_id = %lease.step_id, attempt = lease.attempt,
            handed = current.len(), "completion resent; answered as the first time");
        let mut response = outcome(report);
        response.next = current.into_iter().map(|c| attempt(c, now)).collect();
        Some(Ok(response))
    }

    /// The answer to a written completion and its claim, remembered for a resend; or, when the completion was
    /// not recorded, the attempts claimed with it to give back.
    fn settle(&self, lease: &Lease, report: StoreResult<Report>, claimed: StoreResult<Vec<Claimed>>) -> Settled {
        // A failed claim costs the worker nothing but this shortcut: its slot goes back to polling.
        let claimed = claimed.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "claim after a completion failed; the worker polls instead");
            Vec::new()
        });
        let report = match report {
            Ok(report) => report,
            Err(e) => return Settled::GiveBack { claimed, status: unavailable(&e) },
        };
        let now = self.engine.now_ms();
        let lease_ttl_ms = i64::try_from(self.engine.config().lease_ttl.as_millis()).unwrap_or(i64::MAX);
        self.replies.remember(lease, report, &claimed, now, lease_ttl_ms);
        let mut response = outcome(report);
        response.next = claimed.into_iter().map(|c| attempt(c, now)).collect();
        Settled::Answered(Ok(response))
    }

    async fn finish(&self, settled: Settled) -> Result<ReportResponse, Status> {
        match settled {
            Settled::Answered(answer) => answer,
            Settled::Fail { lease, failure } => {
                tracing::warn!(run_id = %lease.run_id, step_id = %lease.step_id, attempt = lease.attempt,
                    message = %failure.message, "a completion's output is not JSON; recorded as invalid_output");
                self.engine.fail(&lease, &failure).await.map(outcome).map_err(|e| unavailable(&e))
            }
            Settled::GiveBack { claimed, status } => {
                // The worker resends the report; the attempts claimed for it would otherwise wait unseen for
                // their leases to expire.
                self.engine.give_back(claimed, "not delivered: the completion it came with was not recorded").await;
                Err(status)
            }
        }
    }
}

/// The output of a completion as JSON, or the failure `invalid_output` naming where the text stops being JSON
/// (an empty output is `null`). Not retryable: the action would likely produce the same text again.
fn output(text: &str) -> Result<Value, Box<Failure>> {
    json("output_json", text).map_err(|status| {
        Box::new(Failure {
            code: codes::INVALID_OUTPUT.to_owned(),
            message: status.message().to_owned(),
            details: serde_json::json!({"output_bytes": text.len()}),
            retryable: false,
            retry_after_ms: None,
            did_not_take_effect: false,
            degraded: false,
        })
    })
}

/// One item's answer in a `CompleteBatchResponse`: its response, or the status its own call would have failed
/// with.
fn item_result(answer: Result<ReportResponse, Status>) -> pb::complete_result::Result {
    match answer {
        Ok(response) => pb::complete_result::Result::Response(response),
        Err(status) => pb::complete_result::Result::Error(pb::ItemError {
            code: i32::from(status.code()),
            message: status.message().to_owned(),
        }),
    }
}
