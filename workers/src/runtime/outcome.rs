//! How an attempt ended without an output, and the failure record each ending is reported as.
//!
//! Choices, per ending:
//! - the action returned an [`ActionError`]: reported as the action described it;
//! - the deadline (`remaining_ms`) passed: code `timeout`, retryable, **not** `did_not_take_effect` (the action
//!   may have acted before it was stopped, so a non-idempotent step goes to `outcome_unknown`);
//! - the action panicked: code `action_error`, message `action panicked: …`, **not retryable** — a panic is a
//!   bug in the action, and the same args would most likely panic again; an operator decides;
//! - the orchestrator answered a heartbeat with `alive = false`: nothing is reported, the lease is gone (the run
//!   was cancelled, or the attempt was reclaimed and its failure already recorded);
//! - the action is not one this worker serves: the attempt is handed back unstarted (case D25).

use std::any::Any;

use cairn_core::failure::codes;
use cairn_proto::v1 as pb;
use serde_json::json;

use crate::action::ActionError;

/// Why an attempt produced no output.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AttemptError {
    /// The action failed and said how.
    #[error("{0}")]
    Action(ActionError),
    /// The attempt's deadline passed; the action was cancelled and its future dropped.
    #[error("the action ran past its deadline and was cancelled")]
    TimedOut {
        /// The step's `timeout_ms`.
        timeout_ms: u64,
    },
    /// The action panicked.
    #[error("action panicked: {0}")]
    Panicked(String),
    /// The orchestrator no longer counts the attempt; there is nothing to report.
    #[error("the lease is gone (run cancelled or attempt reclaimed)")]
    LeaseLost,
    /// The attempt's action is not one this worker serves (its registration changed, or another worker with this
    /// id serves more): it is handed back unstarted, so another worker takes it at once (case D25).
    #[error("this worker does not serve `{0}`")]
    NotServed(String),
}

impl AttemptError {
    /// The failure to report, or `None` when nothing must be reported.
    pub(crate) fn failure(&self) -> Option<pb::Failure> {
        match self {
            AttemptError::Action(e) => Some(to_proto(e.clone())),
            AttemptError::TimedOut { timeout_ms } => Some(to_proto(
                ActionError::retryable(
                    codes::TIMEOUT,
                    format!("the action ran past timeout_ms ({timeout_ms} ms) and was cancelled by the worker"),
                )
                .details(json!({"timeout_ms": timeout_ms})),
            )),
            AttemptError::Panicked(message) => Some(to_proto(
                ActionError::permanent(codes::ACTION_ERROR, format!("action panicked: {message}"))
                    .details(json!({"panic": message})),
            )),
            AttemptError::LeaseLost => None,
            AttemptError::NotServed(action) => Some(to_proto(
                ActionError::retryable(codes::ACTION_ERROR, format!("this worker does not serve `{action}`"))
                    .did_not_take_effect(),
            )),
        }
    }
}

/// The protocol form of an action error. Null details travel as empty text.
pub(crate) fn to_proto(error: ActionError) -> pb::Failure {
    let f = error.into_failure();
    pb::Failure {
        code: f.code,
        message: f.message,
        details_json: if f.details.is_null() { String::new() } else { f.details.to_string() },
        retryable: f.retryable,
        retry_after_ms: f.retry_after_ms,
        did_not_take_effect: f.did_not_take_effect,
        degraded: f.degraded,
    }
}

/// The panic handler given to apalis' `CatchPanicLayer`: the panic's message as an [`AttemptError`].
pub(crate) fn panicked(payload: &Box<dyn Any + Send>) -> AttemptError {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".to_owned());
    AttemptError::Panicked(message)
}
