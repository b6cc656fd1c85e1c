//! Completions that queue up while calls are in flight go to the orchestrator together (`CompleteBatch`).
//!
//! Every slot's `Complete` passes through one task per worker process. Whenever fewer than [`IN_FLIGHT`] of this
//! worker's calls are out, the task sends everything queued in one call, so a lone completion (a chain step, a
//! quiet worker) leaves at once as a plain `Complete`, and under load the completions that finished while all
//! calls were out (or while the task was waking) share the next: one HTTP/2 exchange, one pass through the
//! orchestrator's service stack, and one message to its writer (so one transaction). A call carries at most
//! [`MAX_COMPLETE_BATCH_ITEMS`] completions and at most [`MAX_BATCH_BYTES`] of them (or one larger completion
//! alone), well under gRPC's 4 MiB message limit.
//!
//! Each item is answered as its own call would have been (the orchestrator runs `Complete`'s logic per item), so
//! the reporter's retries, fencing and resend rules are unchanged: a call that fails as a whole fails each of
//! its items with the call's status, and each is retried (or not) by its own reporter.
//!
//! Two cases a plain `Complete` handled by being cancelled:
//! - a reporter that gave up or was dropped (the runtime's drain timeout) before its completion left: the
//!   completion still goes, but asks for no next attempt;
//! - one dropped while its call was out: attempts its answer hands out are returned unstarted
//!   (`FailRequest.not_started`), so they are not left leased to nobody. Best effort: if the process exits
//!   first (the answer came after the drain), their leases expire instead, as for any attempt a worker lost.
//!
//! Batching is turned off for the rest of the process, and that call's items answered `UNAVAILABLE` (their
//! reporters resend them as plain `Complete`s, which a resend replay answers as the first time), when the
//! orchestrator answers `UNIMPLEMENTED` (it predates `CompleteBatch`) or refuses a message's size
//! (`OUT_OF_RANGE`, `RESOURCE_EXHAUSTED`: the answer, with the attempts handed out, outgrew the limit).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cairn_proto::MAX_COMPLETE_BATCH_ITEMS;
use cairn_proto::v1::{self as pb, CompleteBatchRequest, CompleteRequest, ReportResponse, complete_result};
use prost::Message as _;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tonic::{Code, Status};

use super::client::{CALL_TIMEOUT, OrchestratorClient, timed};
use super::fetch::return_unstarted;

/// Most encoded bytes of completions in one call, unless its first is bigger and goes alone (gRPC refuses
/// messages over 4 MiB by default; an output may be up to `max_output_bytes`, 1 MiB by default).
const MAX_BATCH_BYTES: usize = 1024 * 1024;
/// Calls carrying completions in flight at once, per worker process; what finishes while all are out waits for
/// the first to end and goes in the next. With 1 or 2, one worker × 16 slots loses throughput (the
/// orchestrator's writer waits for the calls' round trips between batches); from 4 to 32 it does not, and 16
/// lets 4 workers × 64 slots share calls under load (`docs/design/worker-runtime.md`).
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
    /// Starts the sending task for `client`'s worker. Must be called within a Tokio runtime.
    pub(crate) fn start(client: &OrchestratorClient) -> Self {
        let (queue, received) = mpsc::unbounded_channel();
        tokio::spawn(send_queued(client.without_completions(), received));
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

/// The task: waits for a free call, then sends what is queued (within the batch limits) in one call.
async fn send_queued(client: OrchestratorClient, mut received: mpsc::UnboundedReceiver<Queued>) {
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT));
    let batches = Arc::new(AtomicBool::new(true));
    let mut held: Option<Queued> = None;
    loop {
        let first = match held.take() {
            Some(queued) => queued,
            None => match received.recv().await {
                Some(queued) => queued,
                None => return,
            },
        };
        let Ok(permit) = Arc::clone(&in_flight).acquire_owned().await else { return };
        let mut bytes = first.request.encoded_len();
        let mut items = vec![first];
        while items.len() < MAX_COMPLETE_BATCH_ITEMS {
            let Ok(queued) = received.try_recv() else { break };
            bytes += queued.request.encoded_len();
            if bytes > MAX_BATCH_BYTES {
                held = Some(queued);
                break;
            }
            items.push(queued);
        }
        let (client, batches) = (client.clone(), Arc::clone(&batches));
        tokio::spawn(async move {
            send(&client, items, &batches).await;
            drop(permit);
        });
    }
}

/// Sends `items`: one alone (or all, once batching is off) as plain `Complete`s, several as one
/// `CompleteBatch`; answers each.
async fn send(client: &OrchestratorClient, mut items: Vec<Queued>, batches: &AtomicBool) {
    for queued in &mut items {
        if queued.answer.is_closed() {
            // Its reporter is gone: nobody would start an attempt claimed for its slot.
            queued.request.next_max_attempts = 0;
        }
    }
    if items.len() == 1 || !batches.load(Ordering::Relaxed) {
        let calls = items.into_iter().map(|queued| async move {
            let answer = client.service().complete(timed(queued.request, CALL_TIMEOUT)).await;
            deliver(client, queued.answer, answer.map(tonic::Response::into_inner));
        });
        futures::future::join_all(calls).await;
        return;
    }
    let (requests, answers): (Vec<_>, Vec<_>) = items.into_iter().map(|q| (q.request, q.answer)).unzip();
    let call = CompleteBatchRequest { worker_id: client.worker_id().to_owned(), items: requests };
    let status = match client.service().complete_batch(timed(call, CALL_TIMEOUT)).await {
        Ok(response) => return answer_each(client, answers, response.into_inner().results),
        Err(status) if matches!(status.code(), Code::Unimplemented | Code::OutOfRange | Code::ResourceExhausted) => {
            // Nothing of it reached this worker: each reporter resends its completion, now as a plain `Complete`
            // (answered from the first answer when the batch did land).
            tracing::info!(code = ?status.code(), message = status.message(),
                "CompleteBatch refused; sending completions one by one from now on");
            batches.store(false, Ordering::Relaxed);
            Status::unavailable(format!("CompleteBatch refused ({}); resend as Complete", status.message()))
        }
        Err(status) => status,
    };
    for answer in answers {
        let _ = answer.send(Err(status.clone()));
    }
}

/// Gives `answer` to the completion's reporter; when the reporter is gone, returns the attempts the answer
/// handed out unstarted.
fn deliver(client: &OrchestratorClient, answer: Answer, result: Result<ReportResponse, Status>) {
    let Err(Ok(undelivered)) = answer.send(result) else { return };
    if undelivered.next.is_empty() {
        return;
    }
    let client = client.clone();
    tokio::spawn(async move {
        for attempt in undelivered.next {
            return_unstarted(&client, attempt).await;
        }
    });
}

/// Gives each waiting completion its item's answer; an item the orchestrator left unanswered (a response shorter
/// than the batch, or an empty result) fails with `UNKNOWN`, which the reporter retries: the resend is fenced by
/// its lease, so a completion that did land is answered as the first time or `STALE`.
fn answer_each(client: &OrchestratorClient, answers: Vec<Answer>, results: Vec<pb::CompleteResult>) {
    let mut results = results.into_iter();
    for answer in answers {
        let result = match results.next().and_then(|r| r.result) {
            Some(complete_result::Result::Response(response)) => Ok(response),
            Some(complete_result::Result::Error(e)) => Err(Status::new(Code::from(e.code), e.message)),
            None => Err(Status::unknown("the orchestrator's CompleteBatch answer left this completion out")),
        };
        deliver(client, answer, result);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    // A runtime: the client's lazily dialled channel spawns its buffer task when made.
    #[tokio::test]
    async fn each_completion_gets_its_own_items_answer_and_a_missing_one_is_retryable() {
        let (answers, mut answered): (Vec<Answer>, Vec<_>) = (0..3).map(|_| oneshot::channel()).unzip();
        let ok = pb::CompleteResult { result: Some(complete_result::Result::Response(ReportResponse::default())) };
        let refused = pb::CompleteResult {
            result: Some(complete_result::Result::Error(pb::ItemError { code: 3, message: "output_json".into() })),
        };

        let client = OrchestratorClient::new("http://127.0.0.1:9", None, "w1").unwrap();

        answer_each(&client, answers, vec![ok, refused]);

        assert!(answered[0].try_recv().unwrap().is_ok(), "the first item's response");
        let second = answered[1].try_recv().unwrap().unwrap_err();
        assert_eq!((second.code(), second.message()), (Code::InvalidArgument, "output_json"), "its own status");
        let third = answered[2].try_recv().unwrap().unwrap_err();
        assert_eq!(third.code(), Code::Unknown, "left out of the answer: resent by its reporter");
        assert!(crate::runtime::client::transient(&third), "and the reporter retries it");
    }
}
