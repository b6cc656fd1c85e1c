//! Time is injected: everything that needs "now" asks a [`Clock`], so timers, DST and retries are tested by
//! setting the time instead of sleeping. The system clock lives in the orchestrator (core reads no clock).

use std::sync::Mutex;
use std::time::Duration;

use jiff::Timestamp;

/// A source of the current instant.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current instant (UTC).
    fn now(&self) -> Timestamp;
}

/// A clock that only moves when told to; for tests and reproducible runs.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<Timestamp>,
}

impl ManualClock {
    /// A clock stopped at `start`.
    pub fn new(start: Timestamp) -> Self {
        Self { now: Mutex::new(start) }
    }

    /// Sets the time (it may move backwards, as a misconfigured host's can).
    pub fn set(&self, at: Timestamp) {
        *self.now.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = at;
    }

    /// Moves the time forward by `by` (saturating at the maximum timestamp).
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let by = jiff::SignedDuration::try_from(by).unwrap_or(jiff::SignedDuration::MAX);
        *now = now.checked_add(by).unwrap_or(Timestamp::MAX);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.now.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
