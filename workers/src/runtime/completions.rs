//! Completions that queue up while one is in flight go to the orchestrator together (`CompleteBatch`, issue 8).
//!
//! Every slot's `Complete` passes through one task per worker process. The task sends what is queued as soon as
//! fewer than [`IN_FLIGHT`] of this worker's calls are out, so a lone completion (a chain step, a quiet worker)
//! leaves at once as a plain `Complete`, and under load the completions that finished while all calls were out
//! share the next: one HTTP/2 exchange, one pass through the orchestrator's service stack, and items that reach
//! its writer together.
//! Each item is answered as its own call would have been (the orchestrator runs `Complete`'s logic per item), so
//! the reporter's retries, fencing and resend rules are unchanged: a call that fails as a whole fails each of
//! its items with the call's status, and each is retried (or not) by its own reporter.
//!
//! An orchestrator that predates `CompleteBatch` answers `UNIMPLEMENTED`; the task then sends every later
//! completion as a plain `Complete`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cairn_proto::v1::{self as pb, CompleteBatchRequest, CompleteRequest, ReportResponse, complete_result};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tonic::{Code, Status};

use super::client::{CALL_TIMEOUT, Service, timed};

/// Most completions in one `CompleteBatch` (the protocol's limit).
pub(crate) const MAX_BATCH_ITEMS: usize = 256;
/// Calls carrying completions in flight at once, per worker process; what finishes while all are out waits for
/// the first to end and goes in the next. Measured with `cairn bench throughput` (README "Performance", window
/// M): with 1 or 2, one worker × 16 slots lost 10–25 % (its writer waited for the one call's round trip); with
/// 4 to 32, 1 × 16 was unchanged within the noise and 4 workers × 64 gained 15–45 %.
const IN_FLIGHT: usize = 16;

/// Where one completion's answer goes.
type Answer = oneshot::Sender<Result<ReportResponse, Status>>;

/// A completion waiting to be sent, and where its answer goes.
struct Queued {
    request: CompleteRequest,
    answer: Answer,
}

/// The sending side of a worker's completion queue. Cheap to clone; the task ends when every clone is dropped.
#[derive(Debug, Clone)]
pub(crate) struct Completions {
    queue: mpsc::UnboundedSender<Queued>,
}

impl std::fmt::Debug for Queued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queued").field("lease", &self.request.lease).finish_non_exhaustive()
    }
}

impl Completions {
    /// Starts the sending task for `worker_id` over `service`. Must be called within a Tokio runtime.
    pub(crate) fn start(service: Service, worker_id: Arc<str>) -> Self {
        let (queue, received) = mpsc::unbounded_channel();
        tokio::spawn(send_queued(service, worker_id, received));
        Self { queue }
    }

    /// Sends `request` with whatever else is queued, and returns its own answer.
    ///
    /// # Errors
    /// The status its own `Complete` would have failed with, or the whole call's status; `UNAVAILABLE` when the
    /// sending task is gone (the runtime is shutting down).
    pub(crate) async fn complete(&self, request: CompleteRequest) -> Result<ReportResponse, Status> {
        let (answer, answered) = oneshot::channel();
        self.queue
            .send(Queued { request, answer })
            .map_err(|_| Status::unavailable("the worker's completion queue has stopped"))?;
        answered.await.map_err(|_| Status::unavailable("the worker's completion queue dropped a completion"))?
    }
}

/// The task: waits for a free call, then sends everything queued (up to [`MAX_BATCH_ITEMS`]) in one call.
async fn send_queued(service: Service, worker_id: Arc<str>, mut received: mpsc::UnboundedReceiver<Queued>) {
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT));
    let batches = Arc::new(AtomicBool::new(true));
    while let Some(first) = received.recv().await {
        let Ok(permit) = Arc::clone(&in_flight).acquire_owned().await else { return };
        let mut items = vec![first];
        while items.len() < MAX_BATCH_ITEMS {
            match received.try_recv() {
                Ok(queued) => items.push(queued),
                Err(_) => break,
            }
        }
        let (service, worker_id, batches) = (service.clone(), Arc::clone(&worker_id), Arc::clone(&batches));
        tokio::spawn(async move {
            send(service, &worker_id, items, &batches).await;
            drop(permit);
        });
    }
}

/// Sends `items`: one alone (or all, once the orchestrator is known not to take batches) as plain `Complete`s,
/// several as one `CompleteBatch`; answers each.
async fn send(service: Service, worker_id: &str, items: Vec<Queued>, batches: &AtomicBool) {
    if items.len() == 1 || !batches.load(Ordering::Relaxed) {
        let calls = items.into_iter().map(|queued| {
            let mut service = service.clone();
            async move {
                let answer = service.complete(timed(queued.request, CALL_TIMEOUT)).await;
                let _ = queued.answer.send(answer.map(tonic::Response::into_inner));
            }
        });
        futures::future::join_all(calls).await;
        return;
    }
    let (requests, answers): (Vec<_>, Vec<_>) = items.into_iter().map(|q| (q.request, q.answer)).unzip();
    let call = CompleteBatchRequest { worker_id: worker_id.to_owned(), items: requests };
    let status = match service.clone().complete_batch(timed(call, CALL_TIMEOUT)).await {
        Ok(response) => return answer_each(answers, response.into_inner().results),
        Err(status) if status.code() == Code::Unimplemented => {
            // Nothing was recorded: each reporter resends its completion, which now goes as a plain `Complete`.
            tracing::info!("the orchestrator takes no CompleteBatch; sending completions one by one");
            batches.store(false, Ordering::Relaxed);
            Status::unavailable("the orchestrator takes no CompleteBatch; resend as Complete")
        }
        Err(status) => status,
    };
    for answer in answers {
        let _ = answer.send(Err(status.clone()));
    }
}

/// Gives each waiting completion its item's answer; an item the orchestrator left unanswered (a response shorter
/// than the batch, or an empty result) fails with `UNKNOWN`, which the reporter retries: the resend is fenced by
/// its lease, so a completion that did land is answered as the first time or `STALE`.
fn answer_each(answers: Vec<Answer>, results: Vec<pb::CompleteResult>) {
    let mut results = results.into_iter();
    for answer in answers {
        let result = match results.next().and_then(|r| r.result) {
            Some(complete_result::Result::Response(response)) => Ok(response),
            Some(complete_result::Result::Error(e)) => Err(Status::new(Code::from(e.code), e.message)),
            None => Err(Status::unknown("the orchestrator's CompleteBatch answer left this completion out")),
        };
        let _ = answer.send(result);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn each_completion_gets_its_own_items_answer_and_a_missing_one_is_retryable() {
        let (answers, mut answered): (Vec<Answer>, Vec<_>) = (0..3).map(|_| oneshot::channel()).unzip();
        let ok = pb::CompleteResult { result: Some(complete_result::Result::Response(ReportResponse::default())) };
        let refused = pb::CompleteResult {
            result: Some(complete_result::Result::Error(pb::ItemError { code: 3, message: "output_json".into() })),
        };

        answer_each(answers, vec![ok, refused]);

        assert!(answered[0].try_recv().unwrap().is_ok(), "the first item's response");
        let second = answered[1].try_recv().unwrap().unwrap_err();
        assert_eq!((second.code(), second.message()), (Code::InvalidArgument, "output_json"), "its own status");
        let third = answered[2].try_recv().unwrap().unwrap_err();
        assert_eq!(third.code(), Code::Unknown, "left out of the answer: resent by its reporter");
        assert!(super::super::client::transient(&third), "and the reporter retries it");
    }
}
