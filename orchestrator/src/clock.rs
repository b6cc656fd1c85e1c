//! The orchestrator's clocks: the only place it reads a wall clock.
//!
//! Leases, deadlines and attempt records compare instants written by one orchestrator with instants read by
//! another (or by itself later), so a step of a host's clock — NTP correcting an hour, a VM resumed, `date -s` —
//! would expire every healthy lease at once, or end an attempt before it began. [`SteadyClock`] therefore never
//! jumps: it advances with the monotonic clock and slews toward its reference by at most [`MAX_SLEW`] (10 %) of
//! the time elapsed, in either direction, as NTP slews a system clock. Leases (a TTL four heartbeats long) and the
//! orchestrator's deadline backstop (10 % past `timeout_ms`, see the store's expiry query) absorb that rate.
//!
//! Its reference is the database's clock on PostgreSQL ([`ReferenceClock::sample`], kept by a background task),
//! so every orchestrator of a database keeps the same time whatever its own host's clock says, and the host's
//! clock on SQLite (one orchestrator, on the database's host).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn_core::clock::Clock;
use jiff::Timestamp;

/// Reads the operating system's clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// Milliseconds since the Unix epoch of `clock`'s now.
pub fn now_ms(clock: &dyn Clock) -> i64 {
    clock.now().as_millisecond()
}

/// Fastest rate at which [`SteadyClock`] catches up with (or waits for) its reference: 10 % of real time.
pub const MAX_SLEW: f64 = 0.1;

/// A monotonic source, injectable so the slewing can be tested without waiting.
pub trait Monotonic: Send + Sync + std::fmt::Debug {
    /// Time elapsed since an arbitrary fixed origin.
    fn elapsed(&self) -> Duration;
}

/// The process's monotonic clock.
#[derive(Debug)]
pub struct ProcessMonotonic(std::time::Instant);

impl Default for ProcessMonotonic {
    fn default() -> Self {
        Self(std::time::Instant::now())
    }
}

impl Monotonic for ProcessMonotonic {
    fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
}

/// A clock that follows `reference` without ever jumping (see the module docs).
#[derive(Debug)]
pub struct SteadyClock {
    reference: Arc<dyn Clock>,
    monotonic: Arc<dyn Monotonic>,
    /// The last instant returned (ns since the epoch) and when, on the monotonic clock.
    last: Mutex<(i128, Duration)>,
}

impl SteadyClock {
    /// A clock starting at `reference`'s now.
    pub fn new(reference: Arc<dyn Clock>) -> Self {
        Self::with_monotonic(reference, Arc::new(ProcessMonotonic::default()))
    }

    /// As [`SteadyClock::new`], over an injected monotonic source.
    pub fn with_monotonic(reference: Arc<dyn Clock>, monotonic: Arc<dyn Monotonic>) -> Self {
        let start = (reference.now().as_nanosecond(), monotonic.elapsed());
        Self { reference, monotonic, last: Mutex::new(start) }
    }
}

impl Clock for SteadyClock {
    fn now(&self) -> Timestamp {
        let mut last = self.last.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (value, at) = *last;
        let now = self.monotonic.elapsed();
        let elapsed = i128::try_from(now.saturating_sub(at).as_nanos()).unwrap_or(i128::MAX);
        let projected = value.saturating_add(elapsed);
        let error = self.reference.now().as_nanosecond() - projected;
        // At most MAX_SLEW of the elapsed time, so the clock always advances (at 90–110 % of real time).
        #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
        let room = (elapsed as f64 * MAX_SLEW) as i128;
        let next = projected + error.clamp(-room, room);
        *last = (next, now);
        Timestamp::from_nanosecond(next).unwrap_or(Timestamp::MAX)
    }
}

/// The database's clock as a reference for [`SteadyClock`]: the last sample of the database's time, advanced by
/// the monotonic time since it was taken (half the query's round trip included), so between samples it depends
/// on no host's wall clock. Before the first sample it reads the host's clock.
#[derive(Debug, Default)]
pub struct ReferenceClock {
    sample: Mutex<Option<(i128, std::time::Instant)>>,
}

impl ReferenceClock {
    /// Records that the database's clock read `database_ms` about `round_trip / 2` ago.
    pub fn sample(&self, database_ms: i64, round_trip: Duration) {
        let half = i128::try_from((round_trip / 2).as_nanos()).unwrap_or(0);
        let at = (i128::from(database_ms) * 1_000_000 + half, std::time::Instant::now());
        *self.sample.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(at);
    }
}

impl Clock for ReferenceClock {
    fn now(&self) -> Timestamp {
        let sample = *self.sample.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match sample {
            Some((ns, at)) => {
                let since = i128::try_from(at.elapsed().as_nanos()).unwrap_or(i128::MAX);
                Timestamp::from_nanosecond(ns.saturating_add(since)).unwrap_or(Timestamp::MAX)
            }
            None => Timestamp::now(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_core::clock::ManualClock;

    /// A monotonic source moved by hand.
    #[derive(Debug, Default)]
    struct Hand(Mutex<Duration>);

    impl Hand {
        fn advance(&self, by: Duration) {
            *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) += by;
        }
    }

    impl Monotonic for Hand {
        fn elapsed(&self) -> Duration {
            *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
        }
    }

    const HOUR: Duration = Duration::from_secs(3600);

    fn start() -> Timestamp {
        "2027-03-14T12:00:00Z".parse().unwrap_or(Timestamp::UNIX_EPOCH)
    }

    /// Steps of one second for `seconds`, moving the reference too; returns each step's advance of the clock.
    fn run(clock: &SteadyClock, reference: &ManualClock, hand: &Hand, seconds: u64) -> Vec<i64> {
        let mut advances = Vec::new();
        let mut previous = clock.now();
        for _ in 0..seconds {
            hand.advance(Duration::from_secs(1));
            reference.advance(Duration::from_secs(1));
            let now = clock.now();
            advances.push(now.as_millisecond() - previous.as_millisecond());
            previous = now;
        }
        advances
    }

    #[test]
    fn a_reference_stepping_an_hour_forward_is_followed_at_most_ten_percent_fast() {
        let (reference, hand) = (Arc::new(ManualClock::new(start())), Arc::new(Hand::default()));
        let clock = SteadyClock::with_monotonic(reference.clone(), hand.clone());
        run(&clock, &reference, &hand, 5);

        reference.advance(HOUR);
        let advances = run(&clock, &reference, &hand, 60);

        assert!(advances.iter().all(|&ms| ms == 1_100), "each real second is at most 1.1 s: {advances:?}");
    }

    #[test]
    fn a_reference_stepping_an_hour_back_never_moves_the_clock_backwards() {
        let (reference, hand) = (Arc::new(ManualClock::new(start())), Arc::new(Hand::default()));
        let clock = SteadyClock::with_monotonic(reference.clone(), hand.clone());
        run(&clock, &reference, &hand, 5);

        reference.set(reference.now() - jiff::SignedDuration::from_hours(1));
        let advances = run(&clock, &reference, &hand, 60);

        assert!(advances.iter().all(|&ms| ms == 900), "each real second is at least 0.9 s: {advances:?}");
    }

    #[test]
    fn small_differences_are_caught_up_within_seconds() {
        let (reference, hand) = (Arc::new(ManualClock::new(start())), Arc::new(Hand::default()));
        let clock = SteadyClock::with_monotonic(reference.clone(), hand.clone());

        reference.advance(Duration::from_millis(250));
        run(&clock, &reference, &hand, 3);

        assert_eq!(clock.now(), reference.now(), "a quarter second is made up in under three seconds");
    }
}
