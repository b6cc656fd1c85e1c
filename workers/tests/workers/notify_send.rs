//! `notify.send` against local stand-ins: which pairs it delivers to, the ledger, the success policies
//! ([`targets`]), and each channel's tries, rate limits, cancellation and what reaches a failure ([`tries`]).

mod targets;
mod tries;

use crate::support;

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use cairn_core::delivery::{DeliveryRecord, DeliveryReport, DeliveryStatus};
use cairn_core::recipient::Recipient;
use cairn_workers::action::Action;
use cairn_workers::actions::address::AddressPolicy;
use cairn_workers::actions::notify::{Delivery, NotifyArgs, NotifyConfig, NotifySend, Outcome};
use cairn_workers::context::{ActionContext, Deliveries};
use serde_json::{Value, json};

/// One scripted answer: a status and, optionally, a `Retry-After` value.
type Answer = (u16, Option<&'static str>);

/// A webhook receiver that answers its script in order (then 200) and records every request.
#[derive(Default)]
struct Hook {
    script: Mutex<VecDeque<Answer>>,
    received: Mutex<Vec<(HeaderMap, Value)>>,
}

impl Hook {
    fn received(&self) -> Vec<(HeaderMap, Value)> {
        self.received.lock().expect("not poisoned").clone()
    }

    fn keys(&self) -> Vec<String> {
        let key = |h: &HeaderMap| h.get("idempotency-key").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        self.received().iter().map(|(headers, _)| key(headers)).collect()
    }
}

async fn receive(State(hook): State<Arc<Hook>>, headers: HeaderMap, body: Bytes) -> axum::response::Response {
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    hook.received.lock().expect("not poisoned").push((headers, body));
    let (status, retry_after) = hook.script.lock().expect("not poisoned").pop_front().unwrap_or((200, None));
    let status = StatusCode::from_u16(status).expect("a status");
    match retry_after {
        Some(after) => (status, [("retry-after", after)], "scripted").into_response(),
        None => (status, "scripted").into_response(),
    }
}

/// A webhook receiver answering `script` first; its URL and its record.
async fn hook(script: &[Answer]) -> (String, Arc<Hook>) {
    let hook = Arc::new(Hook { script: Mutex::new(script.iter().copied().collect()), ..Hook::default() });
    let router = axum::Router::new().route("/hook", post(receive)).with_state(Arc::clone(&hook));
    (format!("http://{}/hook", support::serve(router).await), hook)
}

/// A recipient bound to `channels` (settings as JSON).
fn recipient(channels: Value) -> Option<Recipient> {
    Some(serde_json::from_value(json!({ "channels": channels })).expect("a recipient"))
}

/// What the orchestrator hands an attempt: these recipients and ledger records.
fn handed(recipients: Vec<(&str, Option<Recipient>)>, ledger: Vec<DeliveryRecord>) -> Deliveries {
    let recipients: BTreeMap<String, Option<Recipient>> =
        recipients.into_iter().map(|(id, r)| (id.to_owned(), r)).collect();
    Deliveries { recipients, ledger }
}

/// A ledger record of an earlier attempt.
fn record(recipient: &str, channel: &str, status: DeliveryStatus) -> DeliveryRecord {
    DeliveryRecord {
        recipient_id: recipient.into(),
        channel: channel.into(),
        status,
        attempts: 1,
        last_error: None,
        provider_message_id: None,
    }
}

/// Attempt 1 of step `remind` of `run-1` with `deliveries`, reporting to `sink`, due in `timeout`.
fn attempt(deliveries: Deliveries, sink: Arc<support::Recorder>, timeout: Duration) -> ActionContext {
    ActionContext::new("run-1", "remind", 1, timeout, None, sink).with_deliveries(deliveries)
}

/// The action with its `file` channel in a scratch directory (removed when the guard drops).
fn action(name: &str, webhook_url: Option<String>) -> (NotifySend, PathBuf, tempfile::TempDir) {
    let dir = support::scratch_dir(name);
    let file_path = dir.path().join("out/notifications.jsonl");
    let config = NotifyConfig {
        file_path: file_path.clone(),
        webhook_url: webhook_url.map(Into::into),
        ..NotifyConfig::default()
    };
    // The stand-ins listen on loopback, which recipients' URLs may reach only when the policy allows it.
    (NotifySend::with_addresses(config, AddressPolicy::local()), file_path, dir)
}

/// Args with fast tries (`[0, 10, 20]` ms) unless they say otherwise.
fn args(mut value: Value) -> NotifyArgs {
    if value.get("channel_retry").is_none() {
        value["channel_retry"] = json!({"delays_ms": [0, 10, 20]});
    }
    serde_json::from_value(value).expect("args fit the schema")
}

fn outcomes(deliveries: &[Delivery]) -> Vec<(&str, &str, Outcome, u32)> {
    deliveries.iter().map(|d| (d.recipient.as_str(), d.channel.as_str(), d.outcome, d.attempts)).collect()
}

fn reported(reports: &[DeliveryReport]) -> Vec<(&str, &str, DeliveryStatus, u32)> {
    reports.iter().map(|r| (r.recipient_id.as_str(), r.channel.as_str(), r.status, r.tries)).collect()
}

/// The JSON lines the `file` channel wrote.
fn file_lines(path: &PathBuf) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().map(|line| serde_json::from_str(line).expect("a JSON line")).collect()
}

/// Runs the action once.
async fn run(
    notify: &NotifySend,
    value: Value,
    ctx: &ActionContext,
) -> Result<Vec<Delivery>, cairn_workers::action::ActionError> {
    notify.run(args(value), ctx).await.map(|out| out.deliveries)
}
