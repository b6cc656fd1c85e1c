//! Answers to completions that handed out attempts, kept so that a resent completion gets the same attempts.
//!
//! A `Complete` may carry a claim for the slot it frees (architecture §8), and its answer then holds attempts
//! already leased to the worker. When that answer is lost on the way (a transport error: the worker never saw
//! it), the worker resends the same `Complete`. Answered from the store, the resend is `STALE` (the first one
//! was accepted) with nothing in `next`, and the attempts handed in the lost answer would sit leased until their
//! leases expire: reaped as `lease_lost`, each would use up an attempt, and a non-idempotent step would end in
//! `outcome_unknown`, waiting for an operator, although it never ran. So the answer is remembered under the
//! completing lease, and a completion under the same lease is answered with the same outcome and attempts.
//!
//! Only the worker's own resend reaches here with the same lease, and it resends only after the earlier call
//! failed, so an answer's attempts reach the worker's code once. Memory only: after an orchestrator restart the
//! attempts of a lost answer fall back to lease expiry, as before. An entry is kept for one lease TTL (by then
//! the attempts' leases have ended anyway) and at most [`MAX_ENTRIES`] are kept, the oldest dropped first.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use cairn_store::{Claimed, Lease, Report};

/// Most answers remembered at once (about 300 bytes each for small args: tens of MB at most).
pub const MAX_ENTRIES: usize = 65_536;

/// Remembered answers, by completing lease.
#[derive(Debug, Default)]
pub struct HandedReplies {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    by_lease: HashMap<Lease, (Report, Vec<Claimed>)>,
    /// Insertion order with the time each entry was stored (epoch ms), for expiry.
    order: VecDeque<(i64, Lease)>,
}

impl HandedReplies {
    /// Remembers the answer to the completion under `lease` until `now_ms + keep_ms`. Answers without attempts
    /// are not kept: a resend of those is answered correctly by the store (`STALE`, nothing lost).
    pub fn remember(&self, lease: &Lease, report: Report, next: &[Claimed], now_ms: i64, keep_ms: i64) {
        if next.is_empty() {
            return;
        }
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        state.expire(now_ms, keep_ms);
        while state.order.len() >= MAX_ENTRIES {
            state.drop_oldest();
        }
        if state.by_lease.insert(lease.clone(), (report, next.to_vec())).is_none() {
            state.order.push_back((now_ms, lease.clone()));
        }
    }

    /// The remembered answer to a completion under `lease`, if any (kept: a second lost answer is answered
    /// again).
    pub fn replay(&self, lease: &Lease) -> Option<(Report, Vec<Claimed>)> {
        let state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        state.by_lease.get(lease).cloned()
    }
}

impl State {
    fn expire(&mut self, now_ms: i64, keep_ms: i64) {
        while self.order.front().is_some_and(|(at, _)| at.saturating_add(keep_ms) <= now_ms) {
            self.drop_oldest();
        }
    }

    fn drop_oldest(&mut self) {
        if let Some((_, lease)) = self.order.pop_front() {
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

    fn claimed(step: &str) -> Claimed {
        Claimed {
            lease: lease(step),
            action: "noop".into(),
            args: serde_json::json!({}),
            idempotency_key: format!("r/{step}"),
            deadline_ms: 10_000,
            due_at_ms: 0,
            timeout_ms: 10_000,
            heartbeat_timeout_ms: None,
            checkpoint: None,
        }
    }

    #[test]
    fn an_answer_with_attempts_is_replayed_until_it_expires() {
        let replies = HandedReplies::default();
        replies.remember(&lease("a"), Report::Succeeded, &[claimed("b")], 1_000, 500);
        replies.remember(&lease("x"), Report::Succeeded, &[], 1_000, 500);
        assert_eq!(replies.replay(&lease("a")), Some((Report::Succeeded, vec![claimed("b")])));
        assert_eq!(replies.replay(&lease("a")).map(|(_, next)| next.len()), Some(1), "replayed again if needed");
        assert_eq!(replies.replay(&lease("x")), None, "an answer without attempts is not kept");
        let other_worker = Lease { worker_id: "w2".into(), ..lease("a") };
        assert_eq!(replies.replay(&other_worker), None, "only the same lease, worker included");

        replies.remember(&lease("c"), Report::Succeeded, &[claimed("d")], 1_500, 500);
        assert_eq!(replies.replay(&lease("a")), None, "kept for one lease TTL");
        assert!(replies.replay(&lease("c")).is_some());
    }

    #[test]
    fn the_oldest_answers_are_dropped_beyond_the_limit() {
        let replies = HandedReplies::default();
        for i in 0..=MAX_ENTRIES {
            replies.remember(&lease(&format!("s{i}")), Report::Succeeded, &[claimed("n")], 0, i64::MAX);
        }
        assert_eq!(replies.replay(&lease("s0")), None, "the oldest made room");
        assert!(replies.replay(&lease("s1")).is_some());
        assert!(replies.replay(&lease(&format!("s{MAX_ENTRIES}"))).is_some());
    }
}
