//! Long polls waiting for work, so the transaction that releases steps can claim them for a waiting worker in
//! the same commit (a hand-off) instead of waking every poller to race for them.
//!
//! A poll whose claim found nothing is registered as a [`Waiter`] (what it would claim, and where to send the
//! result) by the group-commit writer, before that writer's next batch. A batch
//! of reports that made steps due takes waiters, oldest first, until their free slots cover those steps; the
//! store claims for them inside the batch's transaction; after the commit each taken waiter receives its
//! claims (possibly none: another claimer may have been faster). A waiter that is woken or times out first
//! removes itself; if it was already taken, its result is on the way and it must wait for it.
//!
//! Nothing is lost when a poll ends while its waiter is taken (the worker disconnected or is shutting down):
//! sending then fails, and the engine undoes those claims (`Store::unclaim`), so the steps are ready again at
//! once, their attempts given back.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use cairn_store::{ClaimRequest, Claimed};
use tokio::sync::oneshot;

/// One waiting long poll.
#[derive(Debug)]
pub(crate) struct Waiter {
    ticket: u64,
    /// What the poll would claim (its `now_ms` is replaced by the batch's).
    pub(crate) request: ClaimRequest,
    /// Where its claims go; a send fails once the poll has ended.
    pub(crate) reply: oneshot::Sender<Vec<Claimed>>,
}

/// The waiting polls of this process, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    next_ticket: AtomicU64,
    queue: Mutex<VecDeque<Waiter>>,
}

impl Waiters {
    /// Registers a poll; returns its ticket and the receiver of a hand-off.
    pub(crate) fn register(&self, request: ClaimRequest) -> (u64, oneshot::Receiver<Vec<Claimed>>) {
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        let (reply, receiver) = oneshot::channel();
        self.lock().push_back(Waiter { ticket, request, reply });
        (ticket, receiver)
    }

    /// Removes a poll that stops waiting. False when it was already taken: its hand-off is on the way.
    pub(crate) fn remove(&self, ticket: u64) -> bool {
        let mut queue = self.lock();
        match queue.iter().position(|w| w.ticket == ticket) {
            Some(i) => queue.remove(i).is_some(),
            None => false,
        }
    }

    /// Takes the oldest waiters whose free slots together cover `steps` (fewer when not enough wait).
    pub(crate) fn take(&self, steps: usize) -> Vec<Waiter> {
        let mut queue = self.lock();
        let mut taken = Vec::new();
        let mut slots = 0usize;
        while slots < steps {
            let Some(waiter) = queue.pop_front() else { break };
            slots += usize::try_from(waiter.request.limit).unwrap_or(usize::MAX);
            taken.push(waiter);
        }
        taken
    }

    /// How many polls wait.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Waiter>> {
        // A panic while holding the lock cannot leave the queue half-updated (single push/pop/remove calls).
        self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(worker: &str, limit: u32) -> ClaimRequest {
        ClaimRequest { worker_id: worker.into(), actions: vec!["noop".into()], limit, now_ms: 0 }
    }

    #[test]
    fn takes_oldest_waiters_until_their_slots_cover_the_steps() {
        let waiters = Waiters::default();
        let (_a, _ra) = waiters.register(request("a", 2));
        let (_b, _rb) = waiters.register(request("b", 2));
        let (_c, _rc) = waiters.register(request("c", 2));
        let taken = waiters.take(3);
        let names: Vec<&str> = taken.iter().map(|w| w.request.worker_id.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(waiters.take(0).len(), 0);
        assert_eq!(waiters.take(10).len(), 1, "only c is left");
    }

    #[test]
    fn a_taken_waiter_cannot_be_removed_and_a_registered_one_can() {
        let waiters = Waiters::default();
        let (a, _ra) = waiters.register(request("a", 1));
        let (b, _rb) = waiters.register(request("b", 1));
        assert!(waiters.remove(b));
        assert!(!waiters.remove(b), "already removed");
        let taken = waiters.take(1);
        assert_eq!(taken.len(), 1);
        assert!(!waiters.remove(a), "taken: its hand-off is on the way");
    }
}
