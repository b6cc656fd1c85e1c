//! `notify.send`: delivers a message to one or more channels, one delivery record per channel, and never sends
//! twice to a channel that already succeeded for the step (see [`ledger`]).
//!
//! Channels: `stdout` (a line on the worker's standard output), `file` (a JSON line appended to
//! [`NotifyConfig::file_path`]), `webhook` (a JSON `POST` to [`NotifyConfig::webhook_url`]). Any other name
//! (`app`, `telegram`, …) or `webhook` without a URL yields a `failed` record "channel not configured".

pub mod ledger;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use cairn_core::catalog::Effect;
use cairn_core::failure::codes;
use cairn_core::machine::is_ambiguous;
use schemars::JsonSchema;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio::io::AsyncWriteExt;

use self::ledger::Ledger;
use super::cancelled;
use super::transport::{self, Client};
use crate::action::{Action, ActionError};
use crate::context::ActionContext;

/// Configuration of `notify.send`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct NotifyConfig {
    /// Where the `file` channel appends (parent directories are created). Default
    /// `<temp dir>/cairn/notifications.jsonl`.
    pub file_path: PathBuf,
    /// Where the `webhook` channel posts; `None` leaves the channel unconfigured. A secret: chat services'
    /// incoming-webhook URLs carry their credential in the path, so `Debug` prints `[REDACTED]`.
    pub webhook_url: Option<SecretString>,
    /// Directory of the per-key delivery ledger. Default `<temp dir>/cairn/notify-ledger`. Share it between
    /// workers on one host; across hosts the checkpoint (below) still prevents most re-sends.
    pub dedup_dir: PathBuf,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        let base = std::env::temp_dir().join("cairn");
        Self { file_path: base.join("notifications.jsonl"), webhook_url: None, dedup_dir: base.join("notify-ledger") }
    }
}

/// How the channel outcomes decide the step's outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SuccessPolicy {
    /// Every channel must be delivered (now or by an earlier attempt).
    #[default]
    All,
    /// One delivered channel is enough.
    Any,
}

/// Args of `notify.send`. Fields not listed are passed through to the `file` and `webhook` payloads.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct NotifyArgs {
    /// Message text.
    pub text: String,
    /// Optional title.
    pub title: Option<String>,
    /// Channel names, in delivery order (duplicates ignored); default `["stdout"]`; must not be empty.
    pub channels: Option<Vec<String>>,
    /// Recipient, passed to the payloads (the built-in channels do not route on it).
    pub to: Option<String>,
    /// Default `all`.
    pub success_policy: Option<SuccessPolicy>,
    /// Everything else, passed through.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// What happened on one channel in this attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Sent now.
    Delivered,
    /// Not sent: it failed (see `error`).
    Failed,
    /// Not sent: an earlier attempt already delivered it.
    SkippedDuplicate,
}

/// One channel's delivery record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Delivery {
    /// Channel name as given.
    pub channel: String,
    /// Outcome.
    pub outcome: Outcome,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Output of `notify.send`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NotifyOutput {
    /// One record per channel, in order.
    pub deliveries: Vec<Delivery>,
}

/// `notify.send` {text, title?, channels?, to?, success_policy?, …} → {deliveries}.
///
/// Channels already delivered for `ctx.idempotency_key` — per the ledger under `dedup_dir`, or per the
/// attempt's last checkpoint `{"delivered": [..]}` (saved after each delivery, so it follows the step to
/// another worker) — are `skipped_duplicate`. The webhook gets `Idempotency-Key` and the key in its body.
///
/// Outcome: with `all`, any `failed` channel fails the attempt; with `any`, the attempt fails only when no
/// channel is delivered or skipped. The failure carries the records in `details.deliveries`, is retryable when
/// any failed channel is (webhook 5xx, 429, connection errors), takes the code of a channel whose outcome is
/// ambiguous (a webhook `transport_error` or `timeout`: the receiver may have it, so a non-idempotent step goes to
/// `outcome_unknown`), else the failed channels' common code (`unauthorized`, …) or `action_error`, sets
/// `degraded` when some channel did get the message, and
/// `did_not_take_effect` when every failed channel failed before sending (unconfigured, connection refused):
/// then a retry is safe because delivered channels are never re-sent. Cancellation → `cancelled`.
#[derive(Debug)]
pub struct NotifySend {
    config: NotifyConfig,
    ledger: Ledger,
    client: Client,
}

/// A channel failure (`Err`), or a reason to abandon the whole attempt (outer `Err`).
type ChannelResult = Result<Result<(), ActionError>, ActionError>;

impl NotifySend {
    /// A `notify.send` delivering per `config`.
    pub fn new(config: NotifyConfig) -> Self {
        let ledger = Ledger::new(config.dedup_dir.clone());
        Self { config, ledger, client: Client::standard() }
    }

    async fn deliver(&self, channel: &str, payload: &Value, ctx: &ActionContext) -> ChannelResult {
        match channel {
            "stdout" => {
                print_stdout(payload);
                Ok(Ok(()))
            }
            "file" => Ok(self.append_file(payload).await),
            "webhook" if self.config.webhook_url.is_some() => self.post_webhook(payload, ctx).await,
            _ => Ok(Err(ActionError::permanent(codes::ACTION_ERROR, "channel not configured").did_not_take_effect())),
        }
    }

    async fn append_file(&self, payload: &Value) -> Result<(), ActionError> {
        let path = &self.config.file_path;
        let failed = |e: std::io::Error| {
            ActionError::retryable(codes::ACTION_ERROR, format!("cannot append to {}: {e}", path.display()))
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            tokio::fs::create_dir_all(dir).await.map_err(failed)?;
        }
        let mut line = payload.to_string();
        line.push('\n');
        let mut file = tokio::fs::OpenOptions::new().create(true).append(true).open(path).await.map_err(failed)?;
        file.write_all(line.as_bytes()).await.map_err(failed)?;
        file.flush().await.map_err(failed)
    }

    async fn post_webhook(&self, payload: &Value, ctx: &ActionContext) -> ChannelResult {
        const WHAT: &str = "webhook";
        let url = self.config.webhook_url.as_ref().map(ExposeSecret::expose_secret).unwrap_or_default();
        let request = match self.client.get() {
            Ok(client) => client.post(url).header("Idempotency-Key", &ctx.idempotency_key).json(payload),
            Err(e) => return Ok(Err(e)),
        };
        // Cancellation and the deadline end the attempt (outer `Err`); a failed send fails the channel.
        let (sent, exchange) =
            transport::race(ctx, transport::exchange(request.timeout(ctx.remaining()).send())).await?;
        let response = match sent {
            Ok(response) => response,
            // reqwest names the URL in its message, which would put the secret into the failure record.
            Err(e) => return Ok(Err(transport::send_error(WHAT, &e.without_url(), exchange))),
        };
        let (status, headers) = (response.status(), response.headers().clone());
        if status.is_success() {
            return Ok(Ok(()));
        }
        let text = transport::race(ctx, transport::error_text(response)).await?;
        Ok(Err(transport::status_error(WHAT, status, &headers, &text)))
    }
}

fn print_stdout(payload: &Value) {
    let text = payload["text"].as_str().unwrap_or_default();
    match payload["title"].as_str() {
        Some(title) => println!("[notify] {title}: {text}"),
        None => println!("[notify] {text}"),
    }
}

/// What the `file` and `webhook` channels receive: the extra fields, then text, title, to and the key.
fn payload(args: NotifyArgs, ctx: &ActionContext) -> Value {
    let mut body = args.extra;
    body.insert("text".into(), Value::String(args.text));
    body.insert("title".into(), args.title.map_or(Value::Null, Value::String));
    body.insert("to".into(), args.to.map_or(Value::Null, Value::String));
    body.insert("idempotency_key".into(), Value::String(ctx.idempotency_key.clone()));
    Value::Object(body)
}

/// Channels delivered according to a checkpoint written by this action.
fn checkpointed(checkpoint: Option<Value>) -> impl Iterator<Item = String> {
    let list = checkpoint.and_then(|c| c.get("delivered").and_then(Value::as_array).cloned()).unwrap_or_default();
    list.into_iter().filter_map(|v| v.as_str().map(str::to_owned))
}

/// The attempt's failure once the policy says it failed.
fn failure(deliveries: Vec<Delivery>, failures: &[ActionError]) -> ActionError {
    let first = failures.first().map(|f| f.code.as_str()).unwrap_or(codes::ACTION_ERROR);
    // A channel that may have received the message (a webhook reset after the request, a timeout) makes the
    // attempt's outcome ambiguous whatever the other channels did, so its code wins.
    let ambiguous = failures.iter().find(|f| !f.did_not_take_effect && is_ambiguous(&f.code));
    let code = match ambiguous {
        Some(f) => f.code.as_str(),
        None if failures.iter().all(|f| f.code == first) => first,
        None => codes::ACTION_ERROR,
    };
    let failed: Vec<String> =
        deliveries.iter().filter_map(|d| Some(format!("{}: {}", d.channel, d.error.as_deref()?))).collect();
    let message =
        format!("notify.send: {} of {} channels failed ({})", failed.len(), deliveries.len(), failed.join("; "));
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

impl Action for NotifySend {
    type Args = NotifyArgs;
    type Output = NotifyOutput;
    const NAME: &'static str = "notify.send";
    const DESCRIPTION: &'static str =
        "Deliver a message to one or more channels (stdout, file, webhook); one delivery record per channel.";
    const EFFECT: Effect = Effect::NonIdempotent;

    fn grounded_args(&self) -> Vec<String> {
        vec!["/to".into()]
    }

    async fn run(&self, mut args: NotifyArgs, ctx: &ActionContext) -> Result<NotifyOutput, ActionError> {
        let mut channels: Vec<String> = args.channels.take().unwrap_or_else(|| vec!["stdout".into()]);
        let mut seen = BTreeSet::new();
        channels.retain(|c| seen.insert(c.clone()));
        if channels.is_empty() {
            return Err(ActionError::permanent(codes::INVALID_ARGS, "channels must not be empty").did_not_take_effect());
        }
        let policy = args.success_policy.unwrap_or_default();
        let key = ctx.idempotency_key.clone();
        let mut done = self.ledger.delivered(&key).await.map_err(|e| {
            let message = format!("cannot read the delivery ledger {}: {e}", self.ledger.path(&key).display());
            ActionError::retryable(codes::ACTION_ERROR, message).did_not_take_effect()
        })?;
        done.extend(checkpointed(ctx.last_checkpoint()));
        let payload = payload(args, ctx);
        let (mut deliveries, mut failures) = (Vec::new(), Vec::new());
        for channel in channels {
            if done.contains(&channel) {
                deliveries.push(Delivery { channel, outcome: Outcome::SkippedDuplicate, error: None });
                continue;
            }
            if let Err(error) = self.deliver(&channel, &payload, ctx).await? {
                deliveries.push(Delivery { channel, outcome: Outcome::Failed, error: Some(error.message.clone()) });
                failures.push(error);
                continue;
            }
            if let Err(e) = self.ledger.record(&key, &channel).await {
                tracing::warn!(channel = %channel, error = %e, "notify.send: delivered but not recorded in the ledger");
            }
            done.insert(channel.clone());
            deliveries.push(Delivery { channel, outcome: Outcome::Delivered, error: None });
            if !ctx.checkpoint(json!({ "delivered": done })).await {
                return Err(cancelled());
            }
        }
        let succeeded = deliveries.iter().any(|d| d.outcome != Outcome::Failed);
        match policy {
            SuccessPolicy::All if failures.is_empty() => Ok(NotifyOutput { deliveries }),
            SuccessPolicy::Any if succeeded => Ok(NotifyOutput { deliveries }),
            _ => Err(failure(deliveries, &failures)),
        }
    }
}
