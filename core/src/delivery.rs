//! The delivery ledger's vocabulary: one record per (run, step, recipient, channel) of a step that delivers
//! messages (`notify.send`), kept by the orchestrator, handed to each attempt, and reported channel by channel as
//! deliveries happen — so a channel recorded as delivered is never sent to again for that step, whichever worker
//! runs the next attempt.

use serde::{Deserialize, Serialize};

/// Where a channel of a step stands in the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::EnumString, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum DeliveryStatus {
    /// The provider accepted the message. Final: never sent again for the step.
    Delivered,
    /// The last try failed (see `last_error`); a later attempt of the step may send again.
    Failed,
}

impl DeliveryStatus {
    /// The name the ledger and the API use.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One ledger record, as the orchestrator hands it to an attempt and serves it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryRecord {
    /// The recipient, or `""` for a worker's own development channels (a step without `to`).
    pub recipient_id: String,
    /// The channel type (`telegram`, `email`, …).
    pub channel: String,
    /// Where it stands.
    pub status: DeliveryStatus,
    /// Sends tried on this channel, over every attempt of the step.
    pub attempts: u32,
    /// Why the last try failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The provider's id of the delivered message (Telegram's `message_id`, the email's `Message-ID`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_message_id: Option<String>,
}

/// What an attempt reports about one channel as soon as its outcome is known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryReport {
    /// The recipient (`""` for a worker's own channels).
    pub recipient_id: String,
    /// The channel type.
    pub channel: String,
    /// The outcome of this attempt's tries so far.
    pub status: DeliveryStatus,
    /// Tries made on this channel by this attempt so far (a resent report repeats it, so it is counted once).
    pub tries: u32,
    /// Why the last try failed.
    pub last_error: Option<String>,
    /// The provider's message id, when delivered.
    pub provider_message_id: Option<String>,
}

/// Longest `last_error` kept in the ledger, in bytes; longer messages are cut at a character boundary.
pub const MAX_ERROR_BYTES: usize = 2048;
/// Longest provider message id kept, in bytes.
pub const MAX_PROVIDER_ID_BYTES: usize = 998;

/// `text` cut to at most `max` bytes at a character boundary.
pub fn truncated(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
