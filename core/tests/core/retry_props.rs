//! Property tests for the retry maths (case C10): total, capped and monotone for every attempt number.

use std::time::Duration;

use cairn_core::retry::{Jitter, RetryPolicy, base_delay, delay_from_sample, delay_range, next_delay, validate_policy};
use proptest::prelude::*;
use rand::SeedableRng;
use rand::rngs::SmallRng;

/// Policies that pass [`validate_policy`], with intervals and coefficients spanning tiny to huge.
fn valid_policy() -> impl Strategy<Value = RetryPolicy> {
    let jitter = prop_oneof![Just(Jitter::Full), Just(Jitter::Equal), Just(Jitter::None)];
    let coefficient = prop_oneof![Just(1.0), 1.0..1.000_001f64, 1.0..4.0f64, 1.0..1e300f64];
    let max_interval = prop_oneof![1..=100u64, 1..=cairn_core::retry::MAX_INTERVAL_LIMIT_MS];
    (1..=10_000u32, max_interval, any::<u64>(), coefficient, jitter).prop_map(
        |(max_attempts, max_interval_ms, initial, backoff_coefficient, jitter)| RetryPolicy {
            max_attempts,
            initial_interval_ms: 1 + initial % max_interval_ms,
            backoff_coefficient,
            max_interval_ms,
            jitter,
            non_retryable_errors: Vec::new(),
        },
    )
}

/// Attempt numbers biased towards the edges where naive maths overflows.
fn attempt() -> impl Strategy<Value = u32> {
    prop_oneof![1..=200u32, 60..=70u32, 1_000..=1_100u32, any::<u32>(), Just(u32::MAX)]
}

proptest! {
    #[test]
    fn generated_policies_are_valid(policy in valid_policy()) {
        prop_assert!(validate_policy(&policy).is_empty(), "{:?}", validate_policy(&policy));
    }

    #[test]
    fn next_delay_never_panics_and_never_exceeds_the_cap(
        policy in valid_policy(), attempt in attempt(), seed in any::<u64>(), sample in any::<f64>(),
    ) {
        let cap = Duration::from_millis(policy.max_interval_ms);
        let mut rng = SmallRng::seed_from_u64(seed);
        let (low, high) = delay_range(&policy, attempt);
        for delay in [next_delay(&policy, attempt, &mut rng), delay_from_sample(&policy, attempt, sample)] {
            prop_assert!(delay <= cap, "{delay:?} > {cap:?}");
            prop_assert!(low <= delay && delay <= high, "{delay:?} outside {low:?}..={high:?}");
        }
    }

    #[test]
    fn base_delay_is_monotone_and_stays_at_the_cap_once_saturated(
        policy in valid_policy(), a in attempt(), b in attempt(),
    ) {
        let (earlier, later) = (a.min(b), a.max(b));
        let cap = Duration::from_millis(policy.max_interval_ms);
        prop_assert!(base_delay(&policy, earlier) <= base_delay(&policy, later));
        prop_assert!(base_delay(&policy, later) <= cap);
        prop_assert!(base_delay(&policy, later.saturating_add(1)) >= base_delay(&policy, later));
        if base_delay(&policy, earlier) == cap {
            prop_assert_eq!(base_delay(&policy, later), cap);
            prop_assert_eq!(base_delay(&policy, u32::MAX), cap);
        }
    }

    #[test]
    fn equal_jitter_is_at_least_half_the_base(
        policy in valid_policy(), attempt in attempt(), seed in any::<u64>(),
    ) {
        let policy = RetryPolicy { jitter: Jitter::Equal, ..policy };
        let base = base_delay(&policy, attempt);
        let mut rng = SmallRng::seed_from_u64(seed);
        let delay = next_delay(&policy, attempt, &mut rng);
        prop_assert!(delay * 2 >= base && delay <= base, "{delay:?} vs base {base:?}");
    }

    #[test]
    fn exponential_growth_matches_the_formula_below_the_cap(
        initial in 1..=1_000u64, attempt in 1..=20u32,
    ) {
        let policy = RetryPolicy {
            initial_interval_ms: initial,
            backoff_coefficient: 2.0,
            max_interval_ms: u64::MAX / 2,
            jitter: Jitter::None,
            ..RetryPolicy::default()
        };
        let expected = initial << (attempt - 1);
        prop_assert_eq!(base_delay(&policy, attempt), Duration::from_millis(expected));
    }
}
