//! The args of `notify.send`: the shape of `cairn_core::catalog`'s `notify_args_schema`, typed.

use std::collections::BTreeSet;
use std::num::NonZeroU32;
use std::time::Duration;

use cairn_core::failure::codes;
use cairn_core::recipient::{ChannelType, MAX_RECIPIENTS_PER_STEP};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::action::ActionError;

/// Tries of one channel when a step gives no `channel_retry`: at once, after 1 s, after 3 s more.
pub const DEFAULT_DELAYS_MS: [u64; 3] = [0, 1000, 3000];
/// Most tries `channel_retry.delays_ms` may ask for (the catalog's `maxItems`).
pub const MAX_TRIES: usize = 10;
/// Longest pause before one try (the catalog's `maximum`).
pub const MAX_DELAY_MS: u64 = 60_000;

/// Who receives the message: one recipient id or a list of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum To {
    /// One recipient id.
    One(String),
    /// Several recipient ids, delivered in this order (repeats ignored).
    Many(Vec<String>),
}

impl To {
    /// The ids, in order, each once.
    pub fn ids(&self) -> Vec<&str> {
        let all: Vec<&str> = match self {
            To::One(id) => vec![id.as_str()],
            To::Many(ids) => ids.iter().map(String::as_str).collect(),
        };
        let mut seen = BTreeSet::new();
        all.into_iter().filter(|id| seen.insert(*id)).collect()
    }
}

/// How the deliveries decide the step's outcome. A `skipped_duplicate` delivery (sent by an earlier attempt)
/// counts as delivered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SuccessPolicy {
    /// Every target must be delivered.
    #[default]
    All,
    /// One delivered target is enough.
    Any,
    /// `{"min": N}`: at least N targets delivered.
    Min(NonZeroU32),
}

impl SuccessPolicy {
    /// Whether `delivered` of `targets` satisfies the policy.
    pub fn holds(self, delivered: usize, targets: usize) -> bool {
        match self {
            SuccessPolicy::All => delivered == targets,
            SuccessPolicy::Any => delivered >= 1,
            SuccessPolicy::Min(n) => delivered >= usize::try_from(n.get()).unwrap_or(usize::MAX),
        }
    }
}

/// Tries of each channel within one attempt.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChannelRetry {
    /// The pause before each try, in ms: `[0, 1000, 3000]` (the default) tries at once, 1 s after the first
    /// failure and 3 s after the second. A rate-limited try waits at least the provider's `Retry-After`. An
    /// empty list is one try at once.
    #[schemars(length(max = 10), inner(range(max = 60000)))]
    pub delays_ms: Option<Vec<u64>>,
}

/// Args of `notify.send`. Fields not listed are passed through to the `webhook` and `file` payloads.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct NotifyArgs {
    /// Message text.
    pub text: String,
    /// Optional title (the email's subject; bold or a header where the channel has one).
    pub title: Option<String>,
    /// Recipient ids. Without `to` the message goes to the worker's own development channels (`stdout`,
    /// `file`, and `webhook` when the worker has a global webhook URL).
    pub to: Option<To>,
    /// Narrows each recipient's bound channels to these, in this order; without `to`, the worker's channels
    /// to use (default `["stdout"]`). Must not be empty.
    pub channels: Option<Vec<ChannelType>>,
    /// Default `all`.
    pub success_policy: Option<SuccessPolicy>,
    /// Tries per channel within the attempt.
    pub channel_retry: Option<ChannelRetry>,
    /// Everything else, passed through.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl NotifyArgs {
    /// The channels asked for, each once in order; `None` when not given.
    ///
    /// # Errors
    /// Permanent `invalid_args` for an empty list.
    pub fn channels(&self) -> Result<Option<Vec<ChannelType>>, ActionError> {
        let Some(given) = &self.channels else { return Ok(None) };
        let mut seen = BTreeSet::new();
        let channels: Vec<ChannelType> = given.iter().copied().filter(|c| seen.insert(*c)).collect();
        if channels.is_empty() {
            return Err(invalid("channels must not be empty"));
        }
        Ok(Some(channels))
    }

    /// The recipient ids, each once in order; `None` without `to`.
    ///
    /// # Errors
    /// Permanent `invalid_args` when `to` names none or more than the step limit.
    pub fn recipient_ids(&self) -> Result<Option<Vec<&str>>, ActionError> {
        let Some(to) = &self.to else { return Ok(None) };
        let ids = to.ids();
        if ids.is_empty() {
            return Err(invalid("to must name at least one recipient"));
        }
        if ids.len() > MAX_RECIPIENTS_PER_STEP {
            return Err(invalid(format!("to names {} recipients; at most {MAX_RECIPIENTS_PER_STEP}", ids.len())));
        }
        Ok(Some(ids))
    }

    /// The pause before each try of a channel; at least one entry.
    ///
    /// # Errors
    /// Permanent `invalid_args` past the catalog's limits (a worker called without the validator).
    pub fn delays(&self) -> Result<Vec<Duration>, ActionError> {
        let given = self.channel_retry.as_ref().and_then(|r| r.delays_ms.clone());
        let mut delays = given.unwrap_or_else(|| DEFAULT_DELAYS_MS.to_vec());
        if delays.len() > MAX_TRIES || delays.iter().any(|d| *d > MAX_DELAY_MS) {
            return Err(invalid(format!(
                "channel_retry.delays_ms takes at most {MAX_TRIES} delays of at most {MAX_DELAY_MS} ms"
            )));
        }
        if delays.is_empty() {
            delays.push(0);
        }
        Ok(delays.into_iter().map(Duration::from_millis).collect())
    }
}

fn invalid(message: impl Into<String>) -> ActionError {
    ActionError::permanent(codes::INVALID_ARGS, message).did_not_take_effect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(value: Value) -> NotifyArgs {
        serde_json::from_value(value).expect("fits")
    }

    #[test]
    fn policies_read_as_the_catalog_spells_them() {
        let policy = |v: Value| parse(json!({"text": "t", "success_policy": v})).success_policy;
        assert_eq!(policy(json!("all")), Some(SuccessPolicy::All));
        assert_eq!(policy(json!("any")), Some(SuccessPolicy::Any));
        assert_eq!(policy(json!({"min": 2})), Some(SuccessPolicy::Min(NonZeroU32::new(2).expect("non-zero"))));
        for wrong in [json!({"min": 0}), json!("min"), json!("most"), json!({"max": 1})] {
            let args = json!({"text": "t", "success_policy": wrong});
            assert!(serde_json::from_value::<NotifyArgs>(args).is_err(), "{wrong} is refused");
        }
    }

    #[test]
    fn to_is_one_id_or_a_list_taken_once_each_in_order() {
        assert_eq!(parse(json!({"text": "t", "to": "a"})).recipient_ids().expect("ok"), Some(vec!["a"]));
        let many = parse(json!({"text": "t", "to": ["b", "a", "b"]}));
        assert_eq!(many.recipient_ids().expect("ok"), Some(vec!["b", "a"]));
        assert!(parse(json!({"text": "t", "to": []})).recipient_ids().is_err(), "an empty list names nobody");
    }

    #[test]
    fn delays_default_to_three_tries_and_an_empty_list_is_one_try() {
        let secs = |ms: u64| Duration::from_millis(ms);
        assert_eq!(parse(json!({"text": "t"})).delays().expect("ok"), [secs(0), secs(1000), secs(3000)]);
        let empty = parse(json!({"text": "t", "channel_retry": {"delays_ms": []}}));
        assert_eq!(empty.delays().expect("ok"), [secs(0)]);
        let long = parse(json!({"text": "t", "channel_retry": {"delays_ms": [60001]}}));
        assert_eq!(long.delays().expect_err("too long").code, codes::INVALID_ARGS);
        let wrong = json!({"text": "t", "channel_retry": {"delay": [1]}});
        assert!(serde_json::from_value::<NotifyArgs>(wrong).is_err(), "unknown retry fields are refused");
    }

    #[test]
    fn channels_are_channel_types_each_once() {
        let args = parse(json!({"text": "t", "channels": ["email", "telegram", "email"]}));
        assert_eq!(args.channels().expect("ok"), Some(vec![ChannelType::Email, ChannelType::Telegram]));
        assert!(parse(json!({"text": "t", "channels": []})).channels().is_err());
        assert!(serde_json::from_value::<NotifyArgs>(json!({"text": "t", "channels": ["app"]})).is_err());
    }
}
