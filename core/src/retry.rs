//! Retry policies and backoff maths: exponential backoff with a cap and jitter, total for every attempt number.
//!
//! SKELETON: the helper implementing this module replaces this comment with the real docs.

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
