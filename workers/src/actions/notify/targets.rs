//! Which (recipient, channel) pairs one step delivers to.
//!
//! With `to`: each recipient id in order, over the channels it is bound to (in channel-type order), or over
//! `channels` in their order when given. A pair that cannot be sent to is kept as a permanent failure with
//! no try, so the step's output still names it:
//! - an id the orchestrator does not know: one failure per `channels` entry, or one with channel `""` when
//!   `channels` is not given (its channels are unknown too);
//! - a `channels` entry the recipient is not bound to, or bound with settings that do not parse.
//!
//! Without `to`: the worker's own development channels (`channels`, default `["stdout"]`), recipient `""`.

use cairn_core::failure::codes;
use cairn_core::recipient::{ChannelSettings, ChannelType, Recipient};

use super::channel::Route;
use crate::action::ActionError;
use crate::context::Deliveries;

/// One (recipient, channel) pair.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// The recipient, `""` for the worker's own channels.
    pub recipient_id: String,
    /// The channel; `None` for an unknown recipient when no `channels` were given.
    pub channel: Option<ChannelType>,
    /// Where to send, or why it cannot be sent (a permanent, nothing-sent failure).
    pub route: Result<Route, ActionError>,
}

impl Target {
    /// The channel's name, `""` when unknown.
    pub fn channel_name(&self) -> &'static str {
        self.channel.map_or("", ChannelType::as_str)
    }

    /// Whether the ledger says an earlier attempt delivered this pair.
    pub fn delivered_before(&self, deliveries: &Deliveries) -> bool {
        use cairn_core::delivery::DeliveryStatus;
        deliveries.ledger.iter().any(|r| {
            r.status == DeliveryStatus::Delivered
                && r.recipient_id == self.recipient_id
                && r.channel == self.channel_name()
        })
    }
}

/// The targets of `ids` (or of the worker's own channels when `None`) narrowed by `channels`.
pub fn resolve(ids: Option<&[&str]>, channels: Option<&[ChannelType]>, deliveries: &Deliveries) -> Vec<Target> {
    let Some(ids) = ids else {
        let channels = channels.unwrap_or(&[ChannelType::Stdout]);
        return channels.iter().map(|c| target("", Some(*c), Ok(Route::Worker(*c)))).collect();
    };
    let mut targets = Vec::new();
    for id in ids {
        match deliveries.recipients.get(*id) {
            Some(Some(recipient)) => targets.extend(bound(id, recipient, channels)),
            _ => targets.extend(unknown(id, channels)),
        }
    }
    targets
}

fn target(recipient_id: &str, channel: Option<ChannelType>, route: Result<Route, ActionError>) -> Target {
    Target { recipient_id: recipient_id.to_owned(), channel, route }
}

fn unknown(id: &str, channels: Option<&[ChannelType]>) -> Vec<Target> {
    let failure = || {
        let message = format!("recipient `{id}` is not known to the orchestrator");
        ActionError::permanent(codes::NOT_FOUND, message).did_not_take_effect()
    };
    match channels {
        Some(channels) => channels.iter().map(|c| target(id, Some(*c), Err(failure()))).collect(),
        None => vec![target(id, None, Err(failure()))],
    }
}

fn bound(id: &str, recipient: &Recipient, channels: Option<&[ChannelType]>) -> Vec<Target> {
    let chosen: Vec<ChannelType> = match channels {
        Some(channels) => channels.to_vec(),
        None => recipient.channels.keys().copied().collect(),
    };
    chosen.into_iter().map(|channel| target(id, Some(channel), route(id, recipient, channel))).collect()
}

fn route(id: &str, recipient: &Recipient, channel: ChannelType) -> Result<Route, ActionError> {
    let name = channel.as_str();
    let Some(settings) = recipient.channels.get(&channel) else {
        let message = format!("recipient `{id}` has no `{name}` channel");
        return Err(ActionError::permanent(codes::INVALID_ARGS, message).did_not_take_effect());
    };
    ChannelSettings::parse(channel, settings).map(Route::Bound).map_err(|e| {
        let message = format!("recipient `{id}`: {e}");
        ActionError::permanent(codes::ACTION_ERROR, message).did_not_take_effect()
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;

    fn deliveries() -> Deliveries {
        let alice: Recipient = serde_json::from_value(json!({"channels": {
            "telegram": {"chat_id": "42"}, "email": {"address": "alice@example.com"}}}))
        .expect("a recipient");
        let recipients = BTreeMap::from([("alice".to_owned(), Some(alice)), ("ghost".to_owned(), None)]);
        Deliveries { recipients, ledger: Vec::new() }
    }

    fn pairs(targets: &[Target]) -> Vec<(&str, &str, bool)> {
        targets.iter().map(|t| (t.recipient_id.as_str(), t.channel_name(), t.route.is_ok())).collect()
    }

    #[test]
    fn a_recipient_gets_every_bound_channel_unless_channels_narrow_them() {
        let all = resolve(Some(&["alice"]), None, &deliveries());
        assert_eq!(pairs(&all), [("alice", "telegram", true), ("alice", "email", true)]);
        let narrowed = resolve(Some(&["alice"]), Some(&[ChannelType::Email]), &deliveries());
        assert_eq!(pairs(&narrowed), [("alice", "email", true)]);
        assert_eq!(narrowed[0].route, Ok(Route::Bound(ChannelSettings::Email { address: "alice@example.com".into() })));
    }

    #[test]
    fn unknown_recipients_and_unbound_channels_are_failures_without_a_try() {
        let narrowed = resolve(Some(&["ghost", "alice"]), Some(&[ChannelType::Slack]), &deliveries());
        assert_eq!(pairs(&narrowed), [("ghost", "slack", false), ("alice", "slack", false)]);
        let unknown = narrowed[0].route.clone().expect_err("unknown");
        assert_eq!(unknown.code, codes::NOT_FOUND);
        let unbound = narrowed[1].route.clone().expect_err("unbound");
        assert!(unbound.message.contains("has no `slack` channel") && unbound.did_not_take_effect, "{unbound:?}");
        let nobody = resolve(Some(&["nobody"]), None, &deliveries());
        assert_eq!(pairs(&nobody), [("nobody", "", false)], "an id missing from the map is unknown too");
    }

    #[test]
    fn without_to_the_worker_channels_are_used_with_an_empty_recipient() {
        let default = resolve(None, None, &deliveries());
        assert_eq!(default, [target("", Some(ChannelType::Stdout), Ok(Route::Worker(ChannelType::Stdout)))]);
        let chosen = resolve(None, Some(&[ChannelType::File, ChannelType::Webhook]), &deliveries());
        assert_eq!(pairs(&chosen), [("", "file", true), ("", "webhook", true)]);
    }
}
