//! Which expired leases a reaper pass may fail (contract §5 and §10, "Leases").
//!
//! A lease expires when its worker's heartbeats stop landing. Two situations stop them although the worker is
//! healthy, and in both the reaper waits one more lease TTL before failing what expired meanwhile:
//! - **start-up** (case C14): while no orchestrator ran, workers kept working and could not heartbeat; for
//!   `startup_grace` after start nothing is reaped;
//! - **a silent store** (issue "Hardening", F4): while the database did not answer (down, restarting, cut off),
//!   heartbeats and reports failed with it. Once it answers again, leases that expired after it was last heard
//!   from are spared for one lease TTL, which gives their workers' heartbeats and resent reports time to land;
//!   leases that expired before the silence began are reaped as usual. Without the spared TTL, the first reaper
//!   pass after a silence races the workers' resent reports (after a 40 s PostgreSQL silence it won by 9 ms)
//!   and parks healthy non-idempotent steps as `outcome_unknown`.
//!
//! Silence is measured on the monotonic clock (the reaper's passes are seconds apart, so a pass that finds the
//! store last heard from more than [`ReapGrace::silence`] ago, or a pass that itself took that long, saw it), and
//! the spared window is in the engine clock's milliseconds, like the stored lease expiries.

use std::time::Duration;

use tokio::time::Instant;

/// A window in which leases that expired after `expired_after` are not reaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Spare {
    /// Leases that expired at or before this time (engine ms) may still be reaped.
    expired_after: i64,
    /// The window ends at this time (engine ms).
    until: i64,
}

/// The reaper's memory of when the store last answered it.
#[derive(Debug)]
pub(crate) struct ReapGrace {
    lease_ttl_ms: i64,
    silence: Duration,
    heard: Instant,
    heard_ms: i64,
    spare: Option<Spare>,
}

impl ReapGrace {
    /// At start-up (`now_ms`, `now`): nothing is reaped for `startup_grace`; a silence is a store unheard from
    /// for longer than `silence`.
    pub(crate) fn new(
        now_ms: i64,
        now: Instant,
        startup_grace: Duration,
        lease_ttl: Duration,
        silence: Duration,
    ) -> Self {
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Self {
            lease_ttl_ms: ms(lease_ttl),
            silence,
            heard: now,
            heard_ms: now_ms,
            spare: Some(Spare { expired_after: i64::MIN, until: now_ms.saturating_add(ms(startup_grace)) }),
        }
    }

    /// Before a pass at `now_ms` (`now` on the monotonic clock): the latest lease expiry it may reap.
    pub(crate) fn cutoff(&mut self, now_ms: i64, now: Instant) -> i64 {
        if now.saturating_duration_since(self.heard) > self.silence {
            // The store has not answered for a while (failed or hung passes): spare what expired since.
            self.spare_after(self.heard_ms, now_ms);
        }
        match self.spare {
            Some(spare) if now_ms < spare.until => spare.expired_after.min(now_ms),
            _ => {
                self.spare = None;
                now_ms
            }
        }
    }

    /// After a pass the store answered: it began at `began_ms` (`began`) and was answered at `now_ms` (`now`).
    pub(crate) fn heard(&mut self, began_ms: i64, began: Instant, now_ms: i64, now: Instant) {
        if now.saturating_duration_since(began) > self.silence {
            // The pass itself waited out a silence: what expired during it is spared from now on.
            self.spare_after(began_ms, now_ms);
        }
        self.heard = now;
        self.heard_ms = now_ms;
    }

    /// Spares leases that expired after `expired_after` until one lease TTL after `now_ms`, widening a window
    /// already open.
    fn spare_after(&mut self, expired_after: i64, now_ms: i64) {
        let until = now_ms.saturating_add(self.lease_ttl_ms);
        let spare = match self.spare.filter(|open| now_ms < open.until) {
            Some(open) => Spare { expired_after: open.expired_after.min(expired_after), until: open.until.max(until) },
            None => Spare { expired_after, until },
        };
        if self.spare != Some(spare) {
            tracing::warn!(
                expired_after = spare.expired_after,
                until = spare.until,
                "the store was silent; leases that expired meanwhile are spared for one lease TTL"
            );
        }
        self.spare = Some(spare);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(10);
    const SILENCE: Duration = Duration::from_millis(2_500);

    /// A grace started at engine time `ms` (monotonic time 0) without a start-up grace.
    fn started(ms: i64) -> (ReapGrace, Instant) {
        let start = Instant::now();
        (ReapGrace::new(ms, start, Duration::ZERO, TTL, SILENCE), start)
    }

    /// A pass `at` ms after the start (engine time `base + at`) that the store answers 10 ms later; its cutoff.
    fn pass(grace: &mut ReapGrace, start: Instant, base: i64, at: u64) -> i64 {
        let (ms, now) = (base + i64::try_from(at).unwrap_or(0), start + Duration::from_millis(at));
        let cutoff = grace.cutoff(ms, now);
        grace.heard(ms, now, ms + 10, now + Duration::from_millis(10));
        cutoff
    }

    #[test]
    fn nothing_is_reaped_during_the_startup_grace_then_everything_expired() {
        let start = Instant::now();
        let mut grace = ReapGrace::new(1_000, start, TTL, TTL, SILENCE);

        assert_eq!(grace.cutoff(1_500, start + Duration::from_millis(500)), i64::MIN, "within the start-up grace");
        let cutoffs: Vec<i64> = (1..=12).map(|s| pass(&mut grace, start, 1_000, s * 1_000)).collect();

        assert_eq!(cutoffs[8], i64::MIN, "9 s after start, still nothing");
        assert_eq!(cutoffs[10], 12_000, "after it, every expired lease");
    }

    #[test]
    fn after_failed_passes_leases_expired_during_the_silence_are_spared_for_one_ttl() {
        let (mut grace, start) = started(100_000);
        assert_eq!(pass(&mut grace, start, 100_000, 1_000), 101_000, "an ordinary pass");

        // The passes of the next 40 s failed (the store never answered them); then it answers again.
        let cutoffs: Vec<i64> = (41..=52).map(|s| pass(&mut grace, start, 100_000, s * 1_000)).collect();

        assert_eq!(cutoffs[0], 101_010, "only leases expired before the silence began");
        assert_eq!(cutoffs[9], 101_010, "still spared just before one TTL passed");
        assert_eq!(cutoffs[10], 151_000, "one TTL after the store answered, the usual rule");
    }

    #[test]
    fn a_pass_that_hung_through_the_silence_spares_what_expired_while_it_waited() {
        let (mut grace, start) = started(100_000);
        assert_eq!(pass(&mut grace, start, 100_000, 1_000), 101_000, "an ordinary pass");
        let began = start + Duration::from_millis(2_000);
        assert_eq!(grace.cutoff(102_000, began), 102_000, "a pass that will wait 40 s for its answer");

        grace.heard(102_000, began, 142_000, start + Duration::from_millis(42_000));
        let cutoffs: Vec<i64> = (43..=53).map(|s| pass(&mut grace, start, 100_000, s * 1_000)).collect();

        assert_eq!(cutoffs[0], 102_000, "what expired while it waited is spared");
        assert_eq!(cutoffs[8], 102_000, "for one TTL after the answer");
        assert_eq!(cutoffs[9], 152_000, "and no longer");
    }

    #[test]
    fn a_short_pause_between_passes_spares_nothing() {
        let (mut grace, start) = started(5_000);
        assert_eq!(pass(&mut grace, start, 5_000, 0), 5_000);

        assert_eq!(pass(&mut grace, start, 5_000, 2_000), 7_000, "2 s without an answer is no silence");
    }
}
