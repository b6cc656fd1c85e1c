//! Attempts the orchestrator returned in a completion's answer (`ReportResponse.next`), each with the slot of
//! the attempt whose report claimed it, waiting for the fetcher to give them to apalis.
//!
//! A `Complete` asks for one attempt for the slot it frees, so a dependent the report released starts without a
//! poll round trip. The slot moves from the reported attempt to the new one and is never free in between, so
//! the fetcher's count of free slots stays exact and the new attempt can start at once.

use std::collections::VecDeque;
use std::sync::Mutex;

use cairn_proto::v1 as pb;
use tokio::sync::{Notify, OwnedSemaphorePermit};

/// The queue between the reporter and the fetcher.
#[derive(Debug, Default)]
pub(crate) struct Handed {
    queue: Mutex<VecDeque<(pb::Attempt, OwnedSemaphorePermit)>>,
    arrived: Notify,
}

impl Handed {
    /// Queues `attempt` with the slot it will occupy and wakes the fetcher.
    pub(crate) fn push(&self, attempt: pb::Attempt, slot: OwnedSemaphorePermit) {
        self.lock().push_back((attempt, slot));
        // `notify_one` keeps a permit when the fetcher is not waiting yet, so no arrival is missed.
        self.arrived.notify_one();
    }

    /// The oldest queued attempt, if any.
    pub(crate) fn pop(&self) -> Option<(pb::Attempt, OwnedSemaphorePermit)> {
        self.lock().pop_front()
    }

    /// Resolves after a [`Handed::push`] (possibly one already popped: check with [`Handed::pop`]).
    pub(crate) async fn arrived(&self) {
        self.arrived.notified().await;
    }

    /// Every queued attempt, without its slot (for returning them unstarted).
    pub(crate) fn drain(&self) -> Vec<pb::Attempt> {
        self.lock().drain(..).map(|(attempt, _slot)| attempt).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(pb::Attempt, OwnedSemaphorePermit)>> {
        self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
