//! Answers to completions that handed out attempts, kept so that a resent completion gets the same attempts.
//!
//! A `Complete` may carry a claim for the slot it frees (`docs/architecture.md` §10, "Worker protocol and API"), and its answer then holds attempts
//! already leased to the worker. When that answer is lost on the way (a transport error: the worker never saw
//! it), the worker resends the same `Complete`. Answered from the store, the resend is `STALE` (the first one
//! was accepted) with nothing in `next`, and the attempts handed in the lost answer would sit leased until their
//! leases expire: reaped as `lease_lost`, each would use up an attempt, and a non-idempotent step would end in
//! `outcome_unknown`, waiting for an operator, although it never ran. So the answer is remembered under the
//! completing lease, and a completion under the same lease is answered with the same outcome and attempts.
//!
//! Only the worker's own resend reaches here with the same lease, and it resends only after the earlier call
//! failed, so an answer's attempts reach the worker's code once. An answer is replayed only during the first half
//! of its shortest attempt lease (`min(deadline, claimed at + heartbeat timeout or lease TTL)`), so the worker
//! still has half a lease to send its first heartbeat (it heartbeats several times per lease), and the caller
//! checks each replayed lease is still current (a heartbeat, which also extends it; a cancelled one is left
//! out). A later resend (workers resend for minutes while the orchestrator is unreachable) is answered from the
//! store: it must not start an attempt that may have been reaped, least of all a non-idempotent one parked as
//! `outcome_unknown`. Memory only: after an orchestrator
//! restart the attempts of a lost answer fall back to lease expiry, as before. Expired entries are dropped as new
//! ones arrive, and at most [`MAX_ENTRIES`] are kept, the oldest dropped first.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use cairn_store::{Claimed, Lease, Report};

/// Most answers remembered at once (about 300 bytes per attempt with small args; the worker runtime asks for one
/// attempt per completion, so tens of MB at most in practice).
pub const MAX_ENTRIES: usize = 65_536;

/// Remembered answers, by completing lease.
#[derive(Debug, Default)]
pub struct HandedReplies {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    by_lease: HashMap<Lease, Entry>,
    /// Insertion order, for dropping the oldest.
    order: VecDeque<Lease>,
}

#[derive(Debug)]
struct Entry {
    report: Report,
    next: Vec<Claimed>,
    /// Epoch ms from which the answer is no longer replayed.
    until_ms: i64,
}

impl HandedReplies {
    /// Remembers the answer to the completion under `lease`, given at `now_ms`, whose attempts hold leases of
    /// `lease_ttl_ms` unless they set a heartbeat timeout. Answers without attempts are not kept: a resend of
    /// those is answered correctly by the store (`STALE`, nothing lost). A `STALE` answer never replaces one
    /// kept for the lease: the lease was used up by the completion that answer belongs to (the same lease twice in
    /// one `CompleteBatch`, say), and a resend must get that first answer and its attempts back.
    pub fn remember(&self, lease: &Lease, report: Report, next: &[Claimed], now_ms: i64, lease_ttl_ms: i64) {
        let Some(until_ms) = next
            .iter()
            .map(|c| {
                // The claim set the deadline to its own time + `timeout_ms`, and the lease to the earlier of that
                // deadline and its time + the heartbeat timeout (or the lease TTL).
                let claimed_at = c.deadline_ms.saturating_sub(c.timeout_ms);
                let expires =
                    c.deadline_ms.min(claimed_at.saturating_add(c.heartbeat_timeout_ms.unwrap_or(lease_ttl_ms)));
                claimed_at.saturating_add(expires.saturating_sub(claimed_at) / 2)
            })
            .min()
        else {
            return;
        };
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        state.expire(now_ms);
        while state.order.len() >= MAX_ENTRIES {
            state.drop_oldest();
        }
        if report == Report::Stale && state.by_lease.contains_key(lease) {
            return;
        }
        let entry = Entry { report, next: next.to_vec(), until_ms };
        if state.by_lease.insert(lease.clone(), entry).is_none() {
            state.order.push_back(lease.clone());
        }
    }

    /// The remembered answer to a completion under `lease`, if `now_ms` is within the first half of its attempts'
    /// leases (kept: a second lost answer is answered again).
    pub fn replay(&self, lease: &Lease, now_ms: i64) -> Option<(Report, Vec<Claimed>)> {
        let state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        state.by_lease.get(lease).filter(|e| now_ms < e.until_ms).map(|e| (e.report, e.next.clone()))
    }
}

impl State {
    /// Drops expired entries from the front. Entries are stored in time order, but their expiries vary; one that
    /// expired behind a live one is dropped later (and is never replayed meanwhile).
    fn expire(&mut self, now_ms: i64) {
        while self.order.front().and_then(|l| self.by_lease.get(l)).is_some_and(|e| e.until_ms <= now_ms) {
            self.drop_oldest();
        }
    }

    fn drop_oldest(&mut self) {
        if let Some(lease) = self.order.pop_front() {
            self.by_lease.remove(&lease);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(step: &str) -> Lease {
        Lease { run_id: "r".into(), step_id: step.into(), attempt: 1, worker_id: "w".into() }
    }

    /// An attempt claimed at `at_ms` with a 10 s timeout.
    fn claimed(step: &str, at_ms: i64) -> Claimed {
        Claimed {
            lease: lease(step),
            action: "noop".into(),
            args: serde_json::json!({}),
            idempotency_key: format!("r/{step}"),
            deadline_ms: at_ms + 10_000,
            due_at_ms: 0,
            timeout_ms: 10_000,
            heartbeat_timeout_ms: None,
            checkpoint: None,
            completion: cairn_store::CompletionHint::default(),
        }
    }

    #[test]
    fn an_answer_with_attempts_is_replayed_until_it_expires() {
        let replies = HandedReplies::default();
        replies.remember(&lease("a"), Report::Succeeded, &[claimed("b", 1_000)], 1_000, 500);
        replies.remember(&lease("x"), Report::Succeeded, &[], 1_000, 500);
        assert_eq!(replies.replay(&lease("a"), 1_100), Some((Report::Succeeded, vec![claimed("b", 1_000)])));
        assert_eq!(replies.replay(&lease("a"), 1_249).map(|(_, next)| next.len()), Some(1), "replayed again");
        assert_eq!(replies.replay(&lease("x"), 1_100), None, "an answer without attempts is not kept");
        let other_worker = Lease { worker_id: "w2".into(), ..lease("a") };
        assert_eq!(replies.replay(&other_worker, 1_100), None, "only the same lease, worker included");
        assert_eq!(replies.replay(&lease("a"), 1_250), None, "not after the first half of the attempt's lease");

        let short = Claimed { heartbeat_timeout_ms: Some(100), ..claimed("d", 2_000) };
        replies.remember(&lease("c"), Report::Succeeded, &[claimed("e", 2_000), short], 2_000, 500);
        assert!(replies.replay(&lease("c"), 2_049).is_some());
        assert_eq!(replies.replay(&lease("c"), 2_050), None, "the shortest lease bounds the answer");
    }

    #[test]
    fn a_stale_answer_never_replaces_the_answer_kept_for_its_lease() {
        let replies = HandedReplies::default();
        replies.remember(&lease("a"), Report::Succeeded, &[claimed("b", 1_000)], 1_000, 500);

        replies.remember(&lease("a"), Report::Stale, &[claimed("c", 1_000)], 1_000, 500);

        assert_eq!(replies.replay(&lease("a"), 1_100), Some((Report::Succeeded, vec![claimed("b", 1_000)])));
        replies.remember(&lease("x"), Report::Stale, &[claimed("y", 1_000)], 1_000, 500);
        assert_eq!(
            replies.replay(&lease("x"), 1_100).map(|(r, _)| r),
            Some(Report::Stale),
            "kept when it is the first"
        );
    }

    #[test]
    fn the_oldest_answers_are_dropped_beyond_the_limit() {
        let replies = HandedReplies::default();
        for i in 0..=MAX_ENTRIES {
            replies.remember(&lease(&format!("s{i}")), Report::Succeeded, &[claimed("n", 0)], 0, 5_000);
        }
        assert_eq!(replies.replay(&lease("s0"), 1), None, "the oldest made room");
        assert!(replies.replay(&lease("s1"), 1).is_some());
        assert!(replies.replay(&lease(&format!("s{MAX_ENTRIES}")), 1).is_some());
    }
}
