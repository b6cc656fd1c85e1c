//! `notify.send`: delivers a message to recipients over their bound channels — Telegram, email (SMTP), Slack,
//! Feishu, signed webhooks, ntfy, and `stdout`/`file` for development — with a record per (recipient,
//! channel) and never a second send to a pair the step's delivery ledger says was delivered.
//!
//! - [`targets`]: which pairs (`to` × the recipients' channels, narrowed by `channels`; without `to`, the
//!   worker's own channels with recipient `""`).
//! - [`tries`]: a channel's tries within the attempt (`channel_retry.delays_ms`, `Retry-After`).
//! - [`channel`]: one file per channel and how each provider's answers are classified.
//! - [`outcome`]: the records and the success policy (`all`, `any`, `{"min": N}`).
//!
//! The ledger is the orchestrator's: it hands each attempt the recipients its args name and the step's records
//! ([`ActionContext::deliveries`]); this action skips pairs recorded as delivered (`skipped_duplicate`) and
//! reports each pair's outcome as soon as it is known ([`ActionContext::report_delivery`]), a delivery right
//! after the provider accepted it, before the next channel is tried, so a crash later in the attempt cannot
//! make the next attempt send it again. A report that cannot be made ends the attempt: sending more that could
//! not be recorded would risk duplicates.

pub mod args;
pub mod channel;
mod outcome;
mod targets;
mod tries;

use std::path::PathBuf;
use std::time::Duration;

use cairn_core::catalog::Effect;
use cairn_core::delivery::{DeliveryReport, DeliveryStatus, MAX_ERROR_BYTES, MAX_PROVIDER_ID_BYTES, truncated};
use secrecy::SecretString;
use serde::Deserialize;
use serde_json::{Map, Value};

pub use self::args::{ChannelRetry, NotifyArgs, SuccessPolicy, To};
pub use self::channel::email::SmtpConfig;
pub use self::channel::ntfy::NtfyConfig;
pub use self::channel::telegram::TelegramConfig;
use self::channel::{Channels, Message};
use self::outcome::Tally;
pub use self::outcome::{Delivery, NotifyOutput, Outcome};
use self::targets::Target;
use super::address::AddressPolicy;
use super::cancelled;
use crate::action::{Action, ActionError};
use crate::context::ActionContext;

/// Configuration of `notify.send`: the worker's side of each channel (the recipient's side is its settings).
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct NotifyConfig {
    /// Where the `file` channel appends (`CAIRN_NOTIFY_FILE`; parent directories are created). Default
    /// `<temp dir>/cairn/notifications.jsonl`.
    pub file_path: PathBuf,
    /// Where the worker's own `webhook` channel posts, for steps without `to` (`CAIRN_NOTIFY_WEBHOOK`); `None`
    /// leaves it unconfigured. A secret: chat services' webhook URLs carry their credential in the path.
    pub webhook_url: Option<SecretString>,
    /// The Telegram Bot API.
    pub telegram: TelegramConfig,
    /// The SMTP server of the email channel.
    pub smtp: SmtpConfig,
    /// The default ntfy server.
    pub ntfy: NtfyConfig,
    /// Longest one try may take, in ms (the attempt's deadline may cut it shorter). Default 30 s.
    pub try_timeout_ms: u64,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        Self {
            file_path: std::env::temp_dir().join("cairn").join("notifications.jsonl"),
            webhook_url: None,
            telegram: TelegramConfig::default(),
            smtp: SmtpConfig::default(),
            ntfy: NtfyConfig::default(),
            try_timeout_ms: 30_000,
        }
    }
}

/// `notify.send` {text, title?, to?, channels?, success_policy?, channel_retry?, …} → {deliveries}.
///
/// The step fails when the policy does not hold; the failure carries the records in `details.deliveries`
/// (see [`outcome`] for its code and flags). Cancellation → `cancelled`.
#[derive(Debug)]
pub struct NotifySend {
    channels: Channels,
}

impl NotifySend {
    /// A `notify.send` delivering per `config`, recipients' URLs held to the default address policy (public
    /// destinations only).
    pub fn new(config: NotifyConfig) -> Self {
        Self::with_addresses(config, AddressPolicy::default())
    }

    /// A `notify.send` whose recipients' URLs (webhook, Slack, Feishu, their own ntfy server) may reach what
    /// `addresses` allows: the worker passes `http.request`'s policy, so one setting decides both.
    pub fn with_addresses(config: NotifyConfig, addresses: AddressPolicy) -> Self {
        super::install_crypto_provider();
        Self { channels: Channels::new(&config, addresses) }
    }

    /// Delivers to one target (unless the ledger says it was) and reports the outcome.
    async fn deliver(
        &self,
        target: Target,
        base: &Map<String, Value>,
        args: &NotifyArgs,
        delays: &[Duration],
        ctx: &ActionContext,
    ) -> Result<(Delivery, Option<ActionError>), ActionError> {
        let record = |outcome, attempts, error: Option<String>, id| Delivery {
            recipient: target.recipient_id.clone(),
            channel: target.channel_name().to_owned(),
            outcome,
            attempts,
            error,
            provider_message_id: id,
        };
        if target.delivered_before(ctx.deliveries()) {
            return Ok((record(Outcome::SkippedDuplicate, 0, None, None), None));
        }
        let route = match &target.route {
            Ok(route) => route,
            Err(unsendable) => {
                return Ok((
                    record(Outcome::Failed, 0, Some(unsendable.message.clone()), None),
                    Some(unsendable.clone()),
                ));
            }
        };
        let message = Message {
            text: &args.text,
            title: args.title.as_deref(),
            idempotency_key: &ctx.idempotency_key,
            recipient_id: &target.recipient_id,
            payload: payload(base, &target),
        };
        let tried = tries::deliver(&self.channels, route, &message, delays, ctx).await?;
        let earlier_error = tried.last_error;
        let (delivery, failure) = match tried.result {
            Ok(sent) => (record(Outcome::Delivered, tried.tries, None, sent.provider_message_id), None),
            Err(error) => {
                let failure = error.into_action_error();
                (record(Outcome::Failed, tried.tries, Some(failure.message.clone()), None), Some(failure))
            }
        };
        if !ctx.report_delivery(report(&delivery, earlier_error.as_deref())).await {
            return Err(cancelled());
        }
        Ok((delivery, failure))
    }
}

/// The ledger's view of a record that was tried; a delivery keeps the error of an earlier failed try.
fn report(delivery: &Delivery, earlier_error: Option<&str>) -> DeliveryReport {
    let status =
        if delivery.outcome == Outcome::Delivered { DeliveryStatus::Delivered } else { DeliveryStatus::Failed };
    DeliveryReport {
        recipient_id: delivery.recipient.clone(),
        channel: delivery.channel.clone(),
        status,
        tries: delivery.attempts,
        last_error: delivery.error.as_deref().or(earlier_error).map(|e| truncated(e, MAX_ERROR_BYTES).to_owned()),
        provider_message_id: delivery
            .provider_message_id
            .as_deref()
            .map(|id| truncated(id, MAX_PROVIDER_ID_BYTES).to_owned()),
    }
}

/// The fields every target's payload shares: the extra args, then text, title, to and the step's key.
fn base_payload(args: &NotifyArgs, ctx: &ActionContext) -> Map<String, Value> {
    let mut body = args.extra.clone();
    body.insert("text".into(), Value::String(args.text.clone()));
    body.insert("title".into(), args.title.clone().map_or(Value::Null, Value::String));
    body.insert("to".into(), serde_json::to_value(&args.to).unwrap_or(Value::Null));
    body.insert("idempotency_key".into(), Value::String(ctx.idempotency_key.clone()));
    body
}

/// What the `webhook` and `file` channels of `target` carry.
fn payload(base: &Map<String, Value>, target: &Target) -> Value {
    let mut body = base.clone();
    body.insert("recipient".into(), Value::String(target.recipient_id.clone()));
    body.insert("channel".into(), Value::String(target.channel_name().into()));
    Value::Object(body)
}

impl Action for NotifySend {
    type Args = NotifyArgs;
    type Output = NotifyOutput;
    const NAME: &'static str = "notify.send";
    const DESCRIPTION: &'static str = "Deliver a message to recipients over their bound channels (telegram, email, \
        slack, feishu, webhook, ntfy; stdout and file for development); one delivery record per recipient and \
        channel.";
    const EFFECT: Effect = Effect::NonIdempotent;

    fn recipient_args(&self) -> Vec<String> {
        vec!["/to".into()]
    }

    fn args_schema(&self) -> Option<Value> {
        Some(cairn_core::catalog::notify_args_schema())
    }

    async fn run(&self, args: NotifyArgs, ctx: &ActionContext) -> Result<NotifyOutput, ActionError> {
        let channels = args.channels()?;
        let ids = args.recipient_ids()?;
        let delays = args.delays()?;
        let policy = args.success_policy.unwrap_or_default();
        let targets = targets::resolve(ids.as_deref(), channels.as_deref(), ctx.deliveries());
        let base = base_payload(&args, ctx);
        let mut tally = Tally::default();
        for target in targets {
            let (delivery, failure) = self.deliver(target, &base, &args, &delays, ctx).await?;
            tally.push(delivery, failure);
        }
        tally.finish(policy)
    }
}
