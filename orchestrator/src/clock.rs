//! The system clock: the only place the orchestrator reads the wall clock.

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
