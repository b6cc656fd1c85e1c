//! `Complete` and `CompleteBatch`: a worker's successful attempts, each with the claim for the slot it frees.
//!
//! An item of a batch is answered exactly as the same `Complete` would be: fenced by its lease, its claim in the
//! same writer batch as its completion, a resend answered from [`HandedReplies`] while its attempts are young.
//! The batch's fresh items are queued to the writer as one message ([`Engine::complete_and_claim_all`]), so they
//! share a transaction whenever the writer is idle, and the call is answered when its last item is.
//!
//! [`HandedReplies`]: crate::replies::HandedReplies

use cairn_proto::v1::{self as pb, CompleteBatchRequest, CompleteBatchResponse, CompleteRequest, ReportResponse};
use cairn_store::{Claimed, HeartbeatOutcome, Lease, Report, StoreResult};
use serde_json::Value;
use tonic::Status;

use crate::engine::CompletionAndClaim;
use crate::grpc::{WorkerGrpc, attempt, json, lease, outcome, unavailable};

/// Most items a `CompleteBatch` may carry (the protocol's limit).
pub const MAX_BATCH_ITEMS: usize = 256;

/// A completion checked and not yet written.
enum Prepared {
    /// Answered without the writer: a malformed item, or a resend answered from the first answer.
    Answered(Result<ReportResponse, Status>),
    /// A completion that asks for no attempt (its worker is stopping).
    Alone { lease: Lease, output: Value },
    /// A completion and the claim for the slot it frees.
    WithClaim { lease: Lease, output: Value, actions: Vec<String>, limit: u32 },
}

impl WorkerGrpc {
    /// One completion, as `Complete` answers it (see the protocol file): the outcome and any attempts claimed
    /// with it, or the status the call fails with.
    pub(crate) async fn complete_one(&self, req: CompleteRequest) -> Result<ReportResponse, Status> {
        match self.prepare(req).await {
            Prepared::Answered(answer) => answer,
            Prepared::Alone { lease, output } => self.complete_alone(&lease, &output).await,
            Prepared::WithClaim { lease, output, actions, limit } => {
                // One operation for the writer: the claim sees what the completion released, in the same batch.
                let (report, claimed) = self.engine.complete_and_claim(&lease, &output, &actions, limit).await;
                self.answer(&lease, report, claimed).await
            }
        }
    }

    /// `CompleteBatch`: each item as [`WorkerGrpc::complete_one`] would answer it, in the order given.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for more than [`MAX_BATCH_ITEMS`] items; everything else is answered per item.
    pub(crate) async fn complete_all(&self, req: CompleteBatchRequest) -> Result<CompleteBatchResponse, Status> {
        if req.items.len() > MAX_BATCH_ITEMS {
            return Err(Status::invalid_argument(format!(
                "a batch carries at most {MAX_BATCH_ITEMS} completions, not {}",
                req.items.len()
            )));
        }
        let mut prepared = Vec::with_capacity(req.items.len());
        for item in req.items {
            prepared.push(self.prepare(CompleteRequest { worker_id: req.worker_id.clone(), ..item }).await);
        }
        let calls: Vec<CompletionAndClaim<'_>> = prepared
            .iter()
            .filter_map(|p| match p {
                Prepared::WithClaim { lease, output, actions, limit } => {
                    Some(CompletionAndClaim { lease, output, actions, limit: *limit })
                }
                _ => None,
            })
            .collect();
        let mut outcomes = self.engine.complete_and_claim_all(&calls).await.into_iter();
        let mut results = Vec::with_capacity(prepared.len());
        for p in prepared {
            let answer = match p {
                Prepared::Answered(answer) => answer,
                Prepared::Alone { lease, output } => self.complete_alone(&lease, &output).await,
                Prepared::WithClaim { lease, .. } => match outcomes.next() {
                    Some((report, claimed)) => self.answer(&lease, report, claimed).await,
                    None => Err(Status::internal("a completion of the batch was left unanswered")),
                },
            };
            results.push(pb::CompleteResult { result: Some(item_result(answer)) });
        }
        Ok(CompleteBatchResponse { results })
    }

    /// Checks `req` and answers a resend; what is left for the writer otherwise.
    async fn prepare(&self, req: CompleteRequest) -> Prepared {
        let checked = lease(&req.worker_id, req.lease).and_then(|l| Ok((l, json("output_json", &req.output_json)?)));
        let (lease, output) = match checked {
            Ok(checked) => checked,
            Err(status) => return Prepared::Answered(Err(status)),
        };
        if req.next_max_attempts == 0 {
            return Prepared::Alone { lease, output };
        }
        if let Some(answer) = self.replay(&lease).await {
            return Prepared::Answered(answer);
        }
        Prepared::WithClaim { lease, output, actions: req.next_actions, limit: req.next_max_attempts.clamp(1, 256) }
    }

    async fn complete_alone(&self, lease: &Lease, output: &Value) -> Result<ReportResponse, Status> {
        let report = self.engine.complete(lease, output).await.map_err(|e| unavailable(&e))?;
        Ok(outcome(report))
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

    /// The answer to a written completion and its claim, remembered for a resend.
    async fn answer(
        &self,
        lease: &Lease,
        report: StoreResult<Report>,
        claimed: StoreResult<Vec<Claimed>>,
    ) -> Result<ReportResponse, Status> {
        // A failed claim costs the worker nothing but this shortcut: its slot goes back to polling.
        let claimed = claimed.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "claim after a completion failed; the worker polls instead");
            Vec::new()
        });
        let report = match report {
            Ok(report) => report,
            Err(e) => {
                // The worker resends the report; the attempts claimed for it would otherwise wait unseen for
                // their leases to expire.
                self.engine.give_back(claimed, "not delivered: the completion it came with was not recorded").await;
                return Err(unavailable(&e));
            }
        };
        let now = self.engine.now_ms();
        let lease_ttl_ms = i64::try_from(self.engine.config().lease_ttl.as_millis()).unwrap_or(i64::MAX);
        self.replies.remember(lease, report, &claimed, now, lease_ttl_ms);
        let mut response = outcome(report);
        response.next = claimed.into_iter().map(|c| attempt(c, now)).collect();
        Ok(response)
    }
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
