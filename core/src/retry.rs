//! Retry policies and backoff maths: exponential backoff with a cap and jitter, total for every attempt number.
//!
//! The contract (architecture §2 `retry`, §6 "Retries") asks for exponential backoff with a cap and jitter that
//! never overflows. Case C10 (Airflow computing `base × 2^(try−1)` before capping, and a Rust crate whose
//! `u64::pow` wrapped at attempt 64) is why every function here is total: any `attempt` up to `u32::MAX` and any
//! policy (even one [`validate_policy`] would reject) gives a delay in `[0, max_interval_ms]`, without panicking.
//!
//! - [`base_delay`]: `min(max_interval, initial × coefficient^(attempt−1))`, computed in `f64` with the cap
//!   applied before any conversion back to an integer; monotone non-decreasing in `attempt`.
//! - [`delay_range`] / [`next_delay`] / [`delay_from_sample`]: the base with [`Jitter`] applied
//!   (AWS Architecture Blog, "Exponential Backoff And Jitter", 2015).
//! - [`should_retry`]: whether a failed attempt gets another one.
//! - [`validate_policy`]: the static checks behind the `retry_invalid` diagnostic.

use std::fmt;
use std::time::Duration;

use rand::{Rng, RngExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a failed attempt is retried (contract §2 `retry`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Total attempts including the first; 1 means no retry.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// Delay before the first retry, in milliseconds.
    #[serde(default = "default_initial_interval_ms")]
    pub initial_interval_ms: u64,
    /// Multiplier applied to the delay after each attempt (≥ 1).
    #[serde(default = "default_backoff_coefficient")]
    pub backoff_coefficient: f64,
    /// Cap on any single delay, in milliseconds (≥ `initial_interval_ms`).
    #[serde(default = "default_max_interval_ms")]
    pub max_interval_ms: u64,
    /// How randomness is mixed into each delay.
    #[serde(default)]
    pub jitter: Jitter,
    /// Failure codes that are never retried.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub non_retryable_errors: Vec<String>,
}

/// Jitter mode (AWS Architecture Blog, "Exponential Backoff And Jitter", 2015).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Jitter {
    /// Uniform in `[0, d]`.
    #[default]
    Full,
    /// Uniform in `[d/2, d]`.
    Equal,
    /// Exactly `d`.
    None,
}

fn default_max_attempts() -> u32 {
    3
}
fn default_initial_interval_ms() -> u64 {
    1_000
}
fn default_backoff_coefficient() -> f64 {
    2.0
}
fn default_max_interval_ms() -> u64 {
    60_000
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: default_max_attempts(),
            initial_interval_ms: default_initial_interval_ms(),
            backoff_coefficient: default_backoff_coefficient(),
            max_interval_ms: default_max_interval_ms(),
            jitter: Jitter::default(),
            non_retryable_errors: Vec::new(),
        }
    }
}

/// Largest `max_attempts` a policy may ask for (inclusive). Larger values are almost always a typo and would
/// keep a failing step busy for days; [`validate_policy`] rejects them.
pub const MAX_ATTEMPTS_LIMIT: u32 = 10_000;

/// Largest `max_interval_ms` (and so `initial_interval_ms`) a policy may ask for: 365 days, in milliseconds.
/// Bounding it keeps `now + delay` far inside the timestamp range (Airflow #28171 crashed on a date overflow).
pub const MAX_INTERVAL_LIMIT_MS: u64 = 365 * 24 * 60 * 60 * 1_000;

/// The un-jittered delay before attempt `attempt + 1`, after attempt `attempt` (1-based) failed.
///
/// `min(max_interval_ms, initial_interval_ms × backoff_coefficient^(attempt − 1))` milliseconds, so attempt 1
/// gives `initial_interval_ms` (or the cap if that is smaller). Attempt 0 is treated as 1. The power is taken in
/// `f64` and compared with the cap before converting back, so nothing overflows for any `attempt`; a non-finite
/// intermediate (coefficient `inf` or NaN) saturates to the cap, and a coefficient below 1 (or negative) is
/// treated as 1 so the result never decreases. Monotone non-decreasing in `attempt`, equal to the cap once
/// saturated, never above it.
pub fn base_delay(policy: &RetryPolicy, attempt: u32) -> Duration {
    Duration::from_millis(base_delay_ms(policy, attempt))
}

fn base_delay_ms(policy: &RetryPolicy, attempt: u32) -> u64 {
    let cap = policy.max_interval_ms;
    let initial = policy.initial_interval_ms.min(cap);
    let exponent = attempt.saturating_sub(1);
    if exponent == 0 || initial == 0 {
        return initial;
    }
    let coefficient = policy.backoff_coefficient;
    if coefficient.is_nan() {
        return cap;
    }
    if coefficient <= 1.0 {
        return initial;
    }
    let raw = (initial as f64) * coefficient.powf(f64::from(exponent));
    if !raw.is_finite() || raw >= cap as f64 {
        return cap;
    }
    // `raw` is finite, ≥ initial ≥ 1 and below the cap, so the conversion is exact enough and in range.
    (raw as u64).clamp(initial, cap)
}

/// The inclusive range `(low, high)` the jittered delay for `attempt` is drawn from, with `high` =
/// [`base_delay`]: full jitter → `[0, base]`, equal jitter → `[⌈base/2⌉, base]`, none → `[base, base]`.
pub fn delay_range(policy: &RetryPolicy, attempt: u32) -> (Duration, Duration) {
    let (low, high) = range_ms(policy, attempt);
    (Duration::from_millis(low), Duration::from_millis(high))
}

fn range_ms(policy: &RetryPolicy, attempt: u32) -> (u64, u64) {
    let base = base_delay_ms(policy, attempt);
    let low = match policy.jitter {
        Jitter::Full => 0,
        Jitter::Equal => base - base / 2,
        Jitter::None => base,
    };
    (low, base)
}

/// The delay before attempt `attempt + 1` after attempt `attempt` (1-based) failed: [`base_delay`] with the
/// policy's [`Jitter`], drawn uniformly (whole milliseconds) from [`delay_range`] using `rng`.
///
/// Never above `max_interval_ms`, never panics, for any `attempt` and any policy.
pub fn next_delay<R: Rng + ?Sized>(policy: &RetryPolicy, attempt: u32, rng: &mut R) -> Duration {
    let (low, high) = range_ms(policy, attempt);
    if low == high {
        return Duration::from_millis(high);
    }
    Duration::from_millis(rng.random_range(low..=high))
}

/// Like [`next_delay`], but with the randomness given as `sample`, a uniform value in `[0, 1)`: `0` gives the
/// low end of [`delay_range`], values near `1` the high end. Out-of-range samples are clamped (NaN counts as 0),
/// so the result stays inside the range. Useful for deterministic tests and replay.
pub fn delay_from_sample(policy: &RetryPolicy, attempt: u32, sample: f64) -> Duration {
    let (low, high) = range_ms(policy, attempt);
    let sample = if sample.is_nan() { 0.0 } else { sample.clamp(0.0, 1.0) };
    let span = high - low;
    // `span + 1` buckets so `high` is reachable; the product is at most 2^64, which `as` saturates.
    let offset = ((span as f64 + 1.0) * sample) as u64;
    Duration::from_millis(low.saturating_add(offset.min(span)))
}

/// Whether a failed attempt gets another one: `retryable` (the worker said so), `attempt < max_attempts`
/// (attempt is 1-based and counts the one that just failed), and `failure_code` is not listed in
/// `non_retryable_errors` (exact, case-sensitive match).
pub fn should_retry(policy: &RetryPolicy, attempt: u32, failure_code: &str, retryable: bool) -> bool {
    retryable && attempt < policy.max_attempts && !policy.non_retryable_errors.iter().any(|code| code == failure_code)
}

/// One reason a [`RetryPolicy`] is rejected by [`validate_policy`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyProblem {
    /// The offending field, named as in the plan (`"backoff_coefficient"`, `"max_interval_ms"`, …).
    pub field: &'static str,
    /// What is wrong and what is allowed, for a human.
    pub message: String,
}

impl fmt::Display for PolicyProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Every problem with `policy` (empty when it is valid), for the `retry_invalid` diagnostic (architecture §4,
/// case C10 variant c).
///
/// Rules: `1 ≤ max_attempts ≤` [`MAX_ATTEMPTS_LIMIT`]; `initial_interval_ms > 0`; `0 < max_interval_ms ≤`
/// [`MAX_INTERVAL_LIMIT_MS`]; `max_interval_ms ≥ initial_interval_ms`; `backoff_coefficient` finite and `≥ 1`
/// (NaN, infinities and negatives rejected). Negative intervals cannot reach here: they fail deserialisation.
pub fn validate_policy(policy: &RetryPolicy) -> Vec<PolicyProblem> {
    let mut problems = Vec::new();
    let mut push = |field: &'static str, message: String| problems.push(PolicyProblem { field, message });
    if policy.max_attempts == 0 {
        push("max_attempts", "must be at least 1 (1 means no retry)".to_owned());
    } else if policy.max_attempts > MAX_ATTEMPTS_LIMIT {
        let n = policy.max_attempts;
        push("max_attempts", format!("{n} is above the limit of {MAX_ATTEMPTS_LIMIT}"));
    }
    if policy.initial_interval_ms == 0 {
        push("initial_interval_ms", "must be greater than 0".to_owned());
    }
    if policy.max_interval_ms == 0 {
        push("max_interval_ms", "must be greater than 0".to_owned());
    } else if policy.max_interval_ms > MAX_INTERVAL_LIMIT_MS {
        let ms = policy.max_interval_ms;
        push("max_interval_ms", format!("{ms} ms is above the limit of {MAX_INTERVAL_LIMIT_MS} ms (365 days)"));
    }
    if policy.max_interval_ms < policy.initial_interval_ms {
        let (max, initial) = (policy.max_interval_ms, policy.initial_interval_ms);
        push("max_interval_ms", format!("{max} ms is below initial_interval_ms ({initial} ms)"));
    }
    let c = policy.backoff_coefficient;
    if !c.is_finite() {
        push("backoff_coefficient", format!("must be a finite number ≥ 1, got {c}"));
    } else if c < 1.0 {
        push("backoff_coefficient", format!("must be ≥ 1 (1 means a constant delay), got {c}"));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    const C10_ATTEMPTS: [u32; 7] = [1, 2, 63, 64, 65, 1100, u32::MAX];

    fn policy(initial: u64, coefficient: f64, max: u64, jitter: Jitter) -> RetryPolicy {
        RetryPolicy {
            max_attempts: 200,
            initial_interval_ms: initial,
            backoff_coefficient: coefficient,
            max_interval_ms: max,
            jitter,
            non_retryable_errors: vec!["invalid_args".to_owned()],
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn c10_delays_stay_under_the_cap_for_huge_attempt_numbers() {
        let mut rng = SmallRng::seed_from_u64(7);
        let cases = [(policy(1, 10.0, 50, Jitter::Full), 50), (policy(1, 2.0, 20, Jitter::None), 20)];
        for (p, cap) in cases {
            let mut previous = Duration::ZERO;
            for attempt in C10_ATTEMPTS {
                let base = base_delay(&p, attempt);
                assert!(base <= ms(cap) && base >= previous, "attempt {attempt}: {base:?}");
                previous = base;
                for _ in 0..100 {
                    assert!(next_delay(&p, attempt, &mut rng) <= ms(cap));
                }
            }
        }
    }

    #[test]
    fn c10_base_delay_equals_the_cap_once_saturated() {
        let tenfold = policy(1, 10.0, 50, Jitter::Full);
        assert_eq!(base_delay(&tenfold, 1), ms(1));
        assert_eq!(base_delay(&tenfold, 2), ms(10));
        for attempt in [3, 63, 64, 65, 1100, u32::MAX] {
            assert_eq!(base_delay(&tenfold, attempt), ms(50), "attempt {attempt}");
        }
        let doubling = policy(1, 2.0, 20, Jitter::None);
        let expected = [(1, 1), (2, 2), (3, 4), (5, 16), (6, 20), (63, 20), (64, 20), (65, 20), (1100, 20)];
        for (attempt, delay) in expected {
            assert_eq!(base_delay(&doubling, attempt), ms(delay), "attempt {attempt}");
        }
        let mut rng = SmallRng::seed_from_u64(1);
        assert_eq!(next_delay(&doubling, u32::MAX, &mut rng), ms(20));
    }

    #[test]
    fn c10_variant_c_policies_are_rejected_by_validation() {
        let fields = |p: &RetryPolicy| validate_policy(p).iter().map(|e| e.field).collect::<Vec<_>>();
        for c in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, 0.5] {
            assert_eq!(fields(&policy(1, c, 50, Jitter::Full)), ["backoff_coefficient"], "coefficient {c}");
        }
        let zero_attempts = RetryPolicy { max_attempts: 0, ..RetryPolicy::default() };
        assert_eq!(fields(&zero_attempts), ["max_attempts"]);
        assert_eq!(fields(&policy(100, 2.0, 50, Jitter::Full)), ["max_interval_ms"]);
        assert_eq!(fields(&policy(0, 2.0, 50, Jitter::Full)), ["initial_interval_ms"]);
        assert!(fields(&policy(0, 2.0, 0, Jitter::Full)).contains(&"max_interval_ms"));
        assert!(validate_policy(&RetryPolicy::default()).is_empty());
        assert!(validate_policy(&policy(1, 1.0, 1, Jitter::Equal)).is_empty());
    }

    #[test]
    fn validation_bounds_attempts_and_intervals_with_documented_limits() {
        let mut p = RetryPolicy { max_attempts: MAX_ATTEMPTS_LIMIT, ..RetryPolicy::default() };
        assert!(validate_policy(&p).is_empty());
        p.max_attempts += 1;
        assert_eq!(validate_policy(&p)[0].field, "max_attempts");
        let long = policy(1, 2.0, MAX_INTERVAL_LIMIT_MS + 1, Jitter::None);
        assert_eq!(validate_policy(&long)[0].to_string().split(':').next(), Some("max_interval_ms"));
    }

    #[test]
    fn invalid_policies_still_give_bounded_delays_without_panicking() {
        for c in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, 0.0, 0.5, f64::MAX, f64::MIN_POSITIVE] {
            for (initial, max) in [(0, 0), (100, 50), (u64::MAX, u64::MAX), (1, u64::MAX)] {
                let p = policy(initial, c, max, Jitter::Full);
                let mut previous = Duration::ZERO;
                for attempt in [0, 1, 2, 64, 1100, u32::MAX] {
                    let base = base_delay(&p, attempt);
                    assert!(base <= ms(max) && base >= previous, "{c} {initial} {max} {attempt}");
                    previous = base;
                    assert!(delay_from_sample(&p, attempt, 0.999_999) <= base);
                }
            }
        }
    }

    #[test]
    fn jitter_modes_draw_from_their_documented_ranges() {
        let full = policy(1_000, 2.0, 60_000, Jitter::Full);
        let equal = policy(1_001, 2.0, 60_000, Jitter::Equal);
        let none = policy(1_000, 2.0, 60_000, Jitter::None);
        assert_eq!(delay_range(&full, 1), (ms(0), ms(1_000)));
        assert_eq!(delay_range(&equal, 1), (ms(501), ms(1_001)));
        assert_eq!(delay_range(&none, 3), (ms(4_000), ms(4_000)));
        assert_eq!(delay_from_sample(&full, 1, 0.0), ms(0));
        assert_eq!(delay_from_sample(&full, 1, 0.999_999_9), ms(1_000));
        assert_eq!(delay_from_sample(&equal, 1, f64::NAN), ms(501));
        assert_eq!(delay_from_sample(&equal, 1, 7.0), ms(1_001));
        let mut rng = SmallRng::seed_from_u64(3);
        for _ in 0..1_000 {
            let d = next_delay(&equal, 1, &mut rng);
            assert!(d >= ms(501) && d <= ms(1_001));
        }
    }

    #[test]
    fn should_retry_needs_a_retryable_failure_attempts_left_and_a_retryable_code() {
        let p = RetryPolicy { max_attempts: 3, ..policy(1, 2.0, 10, Jitter::None) };
        assert!(should_retry(&p, 1, "timeout", true));
        assert!(should_retry(&p, 2, "timeout", true));
        assert!(!should_retry(&p, 3, "timeout", true));
        assert!(!should_retry(&p, 1, "timeout", false));
        assert!(!should_retry(&p, 1, "invalid_args", true));
    }
}
