//! Failure records: the structured account of one failed attempt (contract §6).
//!
//! A failure record is written in the same transaction as the step's next state, so the history never shows a
//! step failed without saying why. Codes are stable strings; [`FailureCode`] lists those Cairn itself produces,
//! and actions may report their own codes (kept as given).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Failure codes produced by Cairn (contract §6). Actions may report others.
pub mod codes {
    /// The attempt ran past `timeout_ms` (retryable for idempotent steps).
    pub const TIMEOUT: &str = "timeout";
    /// No heartbeat within `heartbeat_timeout_ms` (retryable for idempotent steps).
    pub const HEARTBEAT_TIMEOUT: &str = "heartbeat_timeout";
    /// The worker stopped renewing its lease (crash, partition); retryable for idempotent steps.
    pub const LEASE_LOST: &str = "lease_lost";
    /// The request may have reached the remote service, but the connection failed before a complete answer
    /// arrived (reset or closed after the request was written, a broken response body). Ambiguous like
    /// `timeout`: retryable for idempotent steps, `outcome_unknown` for non-idempotent ones.
    pub const TRANSPORT_ERROR: &str = "transport_error";
    /// The action reported an error.
    pub const ACTION_ERROR: &str = "action_error";
    /// The resolved args were rejected by the action (not retryable).
    pub const INVALID_ARGS: &str = "invalid_args";
    /// A placeholder could not be resolved at dispatch (not retryable).
    pub const PLACEHOLDER_UNRESOLVED: &str = "placeholder_unresolved";
    /// The `when` condition could not be evaluated (not retryable).
    pub const CONDITION_ERROR: &str = "condition_error";
    /// The remote service is rate limiting (retryable, honours `retry_after_ms`).
    pub const RATE_LIMITED: &str = "rate_limited";
    /// Credentials were refused (not retryable).
    pub const UNAUTHORIZED: &str = "unauthorized";
    /// The target does not exist (not retryable).
    pub const NOT_FOUND: &str = "not_found";
    /// The step or run was cancelled.
    pub const CANCELLED: &str = "cancelled";
    /// A non-idempotent attempt ended ambiguously; an operator must decide.
    pub const OUTCOME_UNKNOWN: &str = "outcome_unknown";
    /// The output exceeded the configured size limit (not retryable: the same input gives the same size).
    pub const OUTPUT_TOO_LARGE: &str = "output_too_large";
    /// The output a worker reported is not JSON (a NaN or infinity, a lone surrogate, cut-off text), or does not
    /// fit the action's declared output schema (not retryable).
    pub const INVALID_OUTPUT: &str = "invalid_output";
    /// Retries are exhausted; the last attempt's code is in `details.last_code`.
    pub const RETRIES_EXHAUSTED: &str = "retries_exhausted";
    /// Persisted state is inconsistent (e.g. a step row is missing); the run is failed rather than left hanging.
    pub const INTEGRITY_ERROR: &str = "integrity_error";
    /// A person rejected a step waiting for approval (`approval.on_reject: fail`).
    pub const APPROVAL_REJECTED: &str = "approval_rejected";
    /// Nobody decided on a step's approval before its deadline (`approval.on_timeout: fail`).
    pub const APPROVAL_TIMEOUT: &str = "approval_timeout";
}

/// What a person or a planner should do about a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Suggestion {
    /// Trying again may work (transient).
    Retry,
    /// The args are wrong; fix them.
    RepairArgs,
    /// The plan is wrong; plan again.
    Replan,
    /// A person must decide (ambiguous outcome, missing permission).
    AskUser,
    /// The step can be skipped.
    Skip,
}

/// One failed attempt, as persisted and shown by the API (contract §6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailureRecord {
    /// Run id.
    pub run_id: String,
    /// Step id.
    pub step_id: String,
    /// 1-based attempt number.
    pub attempt: u32,
    /// Action name.
    pub action: String,
    /// Worker that held the attempt, if any.
    pub worker_id: Option<String>,
    /// Stable code (see [`codes`]).
    pub code: String,
    /// Human-readable message.
    pub message: String,
    /// Structured details (action-specific).
    pub details: Value,
    /// Whether another attempt might succeed.
    pub retryable: bool,
    /// Minimum wait before retrying, in milliseconds, when the failure says so (e.g. `Retry-After`).
    pub retry_after_ms: Option<u64>,
    /// What to do about it.
    pub suggestion: Suggestion,
    /// True when the action partly succeeded (e.g. one of two channels delivered).
    pub degraded: bool,
    /// Attempt start, RFC 3339.
    pub started_at: Option<String>,
    /// Attempt end, RFC 3339.
    pub ended_at: Option<String>,
}

/// A failure as reported by a worker or detected by the orchestrator, before it is tied to a run and step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    /// Stable code.
    pub code: String,
    /// Human-readable message.
    pub message: String,
    /// Structured details.
    #[serde(default)]
    pub details: Value,
    /// Whether another attempt might succeed.
    pub retryable: bool,
    /// Minimum wait before retrying, in milliseconds.
    #[serde(default)]
    pub retry_after_ms: Option<u64>,
    /// The worker is certain the action had no effect, so even a non-idempotent step may be retried.
    #[serde(default)]
    pub did_not_take_effect: bool,
    /// The action partly succeeded.
    #[serde(default)]
    pub degraded: bool,
}

impl Failure {
    /// A failure with the given code and message and no details.
    pub fn new(code: &str, message: impl Into<String>, retryable: bool) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            details: Value::Null,
            retryable,
            retry_after_ms: None,
            did_not_take_effect: false,
            degraded: false,
        }
    }

    /// The default suggestion for this failure's code.
    pub fn suggestion(&self) -> Suggestion {
        match self.code.as_str() {
            codes::INVALID_ARGS | codes::PLACEHOLDER_UNRESOLVED => Suggestion::RepairArgs,
            codes::CONDITION_ERROR | codes::INTEGRITY_ERROR | codes::OUTPUT_TOO_LARGE | codes::INVALID_OUTPUT => {
                Suggestion::Replan
            }
            codes::UNAUTHORIZED | codes::OUTCOME_UNKNOWN | codes::NOT_FOUND => Suggestion::AskUser,
            codes::CANCELLED => Suggestion::Skip,
            _ if self.retryable => Suggestion::Retry,
            _ => Suggestion::AskUser,
        }
    }
}
