//! What one attempt of `notify.send` says: a record per target, and whether the success policy holds.

use std::time::Duration;

use cairn_core::failure::codes;
use cairn_core::machine::is_ambiguous;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::args::SuccessPolicy;
use crate::action::ActionError;

/// What happened to one target in this attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Sent now.
    Delivered,
    /// Not sent: it failed (see `error`).
    Failed,
    /// Not sent: the ledger says an earlier attempt delivered it.
    SkippedDuplicate,
}

/// One target's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Delivery {
    /// Recipient id (`""` for the worker's own channels).
    pub recipient: String,
    /// Channel type (`""` for a recipient whose channels are unknown).
    pub channel: String,
    /// Outcome.
    pub outcome: Outcome,
    /// Tries made by this attempt (0 when skipped or when the target could not be sent to).
    pub attempts: u32,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The provider's id of the delivered message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_message_id: Option<String>,
}

/// Output of `notify.send`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NotifyOutput {
    /// One record per target, in order.
    pub deliveries: Vec<Delivery>,
}

/// The records of one attempt so far, with the failures behind the failed ones.
#[derive(Debug, Default)]
pub struct Tally {
    deliveries: Vec<Delivery>,
    failures: Vec<ActionError>,
}

impl Tally {
    /// Adds a record; `failure` for a failed one.
    pub fn push(&mut self, delivery: Delivery, failure: Option<ActionError>) {
        self.deliveries.push(delivery);
        self.failures.extend(failure);
    }

    /// The attempt's output when `policy` holds, else its failure.
    ///
    /// # Errors
    /// The failure, as [`failure`] builds it.
    pub fn finish(self, policy: SuccessPolicy) -> Result<NotifyOutput, ActionError> {
        let delivered = self.deliveries.iter().filter(|d| d.outcome != Outcome::Failed).count();
        if policy.holds(delivered, self.deliveries.len()) {
            return Ok(NotifyOutput { deliveries: self.deliveries });
        }
        Err(failure(policy, self.deliveries, &self.failures))
    }
}

/// The attempt's failure once the policy says it failed: retryable when any failed target is; the code of a
/// target whose outcome is ambiguous (the provider may have the message, so a non-idempotent step goes to
/// `outcome_unknown`), else the failed targets' common code, else `action_error`; `degraded` when some target
/// did get the message; `did_not_take_effect` when no failed target reached its provider (a retry is then
/// safe: delivered targets are never sent again); `retry_after` the longest a provider asked for.
fn failure(policy: SuccessPolicy, deliveries: Vec<Delivery>, failures: &[ActionError]) -> ActionError {
    let first = failures.first().map(|f| f.code.as_str()).unwrap_or(codes::ACTION_ERROR);
    let ambiguous = failures.iter().find(|f| !f.did_not_take_effect && is_ambiguous(&f.code));
    let code = match ambiguous {
        Some(f) => f.code.as_str(),
        None if failures.iter().all(|f| f.code == first) => first,
        None => codes::ACTION_ERROR,
    };
    let failed: Vec<String> =
        deliveries.iter().filter_map(|d| Some(format!("{}: {}", name(d), d.error.as_deref()?))).collect();
    let message = format!(
        "notify.send: {} of {} deliveries failed, so `{}` does not hold ({})",
        failed.len(),
        deliveries.len(),
        policy_name(policy),
        failed.join("; ")
    );
    let mut error = if failures.iter().any(|f| f.retryable) {
        ActionError::retryable(code, message)
    } else {
        ActionError::permanent(code, message)
    };
    error.degraded = deliveries.iter().any(|d| d.outcome != Outcome::Failed);
    error.did_not_take_effect = failures.iter().all(|f| f.did_not_take_effect);
    error.retry_after = failures.iter().filter_map(|f| f.retry_after).max().filter(|d| *d > Duration::ZERO);
    error.details(json!({ "deliveries": deliveries }))
}

/// `recipient/channel`, or the channel alone for the worker's own channels.
fn name(delivery: &Delivery) -> String {
    if delivery.recipient.is_empty() {
        delivery.channel.clone()
    } else {
        format!("{}/{}", delivery.recipient, delivery.channel)
    }
}

fn policy_name(policy: SuccessPolicy) -> String {
    match policy {
        SuccessPolicy::All => "all".into(),
        SuccessPolicy::Any => "any".into(),
        SuccessPolicy::Min(n) => format!("min {n}"),
    }
}
