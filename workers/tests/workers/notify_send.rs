//! `notify.send`: per-channel delivery records, the success policy, and de-duplication across retries.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use cairn_workers::action::Action;
use cairn_workers::actions::notify::{NotifyArgs, NotifyConfig, NotifySend, Outcome};
use cairn_workers::context::ActionContext;
use serde_json::{Value, json};

/// A webhook receiver that fails the first `fail_first` requests with 500 and records every request.
#[derive(Default)]
struct Hook {
    fail_first: usize,
    seen: AtomicUsize,
    received: Mutex<Vec<(Option<String>, Value)>>,
}

async fn receive(State(hook): State<Arc<Hook>>, headers: HeaderMap, Json(body): Json<Value>) -> StatusCode {
    let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_owned);
    hook.received.lock().expect("not poisoned").push((key, body));
    if hook.seen.fetch_add(1, Ordering::SeqCst) < hook.fail_first {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::OK
    }
}

async fn webhook(fail_first: usize) -> (String, Arc<Hook>) {
    let hook = Arc::new(Hook { fail_first, ..Hook::default() });
    let router = axum::Router::new().route("/hook", post(receive)).with_state(Arc::clone(&hook));
    (format!("http://{}/hook", support::serve(router).await), hook)
}

/// The action's settings over a fresh scratch directory, and the directory's guard (it is removed when dropped).
fn config(name: &str, webhook_url: Option<String>) -> (NotifyConfig, tempfile::TempDir) {
    let dir = support::scratch_dir(name);
    let config = NotifyConfig {
        file_path: dir.path().join("out/notifications.jsonl"),
        webhook_url: webhook_url.map(Into::into),
        dedup_dir: dir.path().join("ledger"),
    };
    (config, dir)
}

fn args(value: Value) -> NotifyArgs {
    serde_json::from_value(value).expect("args fit the schema")
}

fn attempt(n: u32, last_checkpoint: Option<Value>) -> ActionContext {
    let sink = support::Recorder::new(true);
    ActionContext::new("run-1", "remind", n, Duration::from_secs(10), last_checkpoint, sink)
}

fn outcomes(deliveries: &[cairn_workers::actions::notify::Delivery]) -> Vec<(&str, Outcome)> {
    deliveries.iter().map(|d| (d.channel.as_str(), d.outcome)).collect()
}

#[tokio::test]
async fn a_retry_sends_only_to_the_channel_that_failed() {
    let (url, hook) = webhook(1).await;
    let (settings, _dir) = config("retry", Some(url));
    let file_path = settings.file_path.clone();
    let notify = NotifySend::new(settings);
    let message =
        json!({"text": "Take an umbrella", "title": "Rain", "channels": ["file", "webhook"], "city": "Wuhan"});

    let first = notify.run(args(message.clone()), &attempt(1, None)).await.expect_err("webhook failed");
    assert!(first.retryable, "a webhook 5xx is retryable: {first:?}");
    assert!(first.degraded, "the file channel got the message");
    assert_eq!(first.details["deliveries"][0], json!({"channel": "file", "outcome": "delivered"}));
    assert_eq!(first.details["deliveries"][1]["outcome"], "failed");

    let second = notify.run(args(message), &attempt(2, None)).await.expect("the webhook recovers");
    assert_eq!(outcomes(&second.deliveries), [("file", Outcome::SkippedDuplicate), ("webhook", Outcome::Delivered)]);

    let lines = std::fs::read_to_string(&file_path).expect("file written");
    assert_eq!(lines.lines().count(), 1, "the file channel is written exactly once across attempts");
    let received = hook.received.lock().expect("not poisoned").clone();
    assert_eq!(received.len(), 2, "the webhook is tried once per attempt and never after it succeeded");
    for (key, body) in &received {
        assert_eq!(key.as_deref(), Some("run-1/remind"), "Idempotency-Key is the step's key");
        assert_eq!(body["idempotency_key"], "run-1/remind");
        assert_eq!((body["text"].as_str(), body["title"].as_str()), (Some("Take an umbrella"), Some("Rain")));
        assert_eq!(body["city"], "Wuhan", "extra fields pass through");
    }

    let third = notify.run(args(json!({"text": "x", "channels": ["file", "webhook"]})), &attempt(3, None)).await;
    let third = third.expect("nothing left to send");
    assert!(third.deliveries.iter().all(|d| d.outcome == Outcome::SkippedDuplicate));
    assert_eq!(hook.received.lock().expect("not poisoned").len(), 2);
}

#[tokio::test]
async fn the_checkpoint_prevents_a_resend_on_a_worker_without_the_ledger() {
    let (settings, _dir) = config("checkpoint", None);
    let notify = NotifySend::new(settings);
    let ctx = attempt(2, Some(json!({"delivered": ["file"]})));
    let out = notify.run(args(json!({"text": "hi", "channels": ["file"]})), &ctx).await.expect("ok");
    assert_eq!(outcomes(&out.deliveries), [("file", Outcome::SkippedDuplicate)]);
}

#[tokio::test]
async fn unknown_channels_fail_as_not_configured_and_the_policy_decides() {
    let (settings, _dir) = config("policy", None);
    let notify = NotifySend::new(settings);
    let all =
        notify.run(args(json!({"text": "hi", "channels": ["stdout", "app", "telegram"]})), &attempt(1, None)).await;
    let err = all.expect_err("policy all fails on any failed channel");
    assert!(!err.retryable, "an unconfigured channel will not appear by retrying");
    assert!(err.degraded && err.did_not_take_effect, "stdout delivered; the failed channels sent nothing: {err:?}");
    assert_eq!(
        err.details["deliveries"][1],
        json!({"channel": "app", "outcome": "failed", "error": "channel not configured"})
    );

    let (settings, _dir) = config("policy-any", None);
    let notify = NotifySend::new(settings);
    let value = json!({"text": "hi", "channels": ["telegram", "stdout"], "success_policy": "any"});
    let out = notify.run(args(value), &attempt(1, None)).await.expect("one delivered channel is enough");
    assert_eq!(outcomes(&out.deliveries), [("telegram", Outcome::Failed), ("stdout", Outcome::Delivered)]);
    let value = json!({"text": "hi", "channels": ["telegram"], "success_policy": "any"});
    let none = notify.run(args(value), &attempt(1, None)).await;
    assert!(none.is_err(), "with no delivered channel even `any` fails");
}

#[tokio::test]
async fn a_webhook_that_cannot_be_reached_did_not_take_effect() {
    let url = format!("http://127.0.0.1:{}/hook", support::closed_port());
    let (settings, _dir) = config("refused", Some(url));
    let notify = NotifySend::new(settings);
    let err =
        notify.run(args(json!({"text": "hi", "channels": ["webhook"]})), &attempt(1, None)).await.expect_err("refused");
    assert!(err.retryable && err.did_not_take_effect && !err.degraded, "{err:?}");
}

/// Chat services' webhook URLs carry their credential in the path: it is neither printed nor recorded.
#[tokio::test]
async fn the_webhook_url_is_a_secret_kept_out_of_debug_output_and_failures() {
    let url = format!("http://127.0.0.1:{}/hook/T0-secret-path", support::closed_port());
    let (settings, _dir) = config("secret-url", Some(url));
    let printed = format!("{settings:?}");
    assert!(!printed.contains("T0-secret-path") && printed.contains("file_path"), "{printed}");

    let notify = NotifySend::new(settings);
    let err =
        notify.run(args(json!({"text": "hi", "channels": ["webhook"]})), &attempt(1, None)).await.expect_err("refused");

    assert!(!format!("{err:?}").contains("T0-secret-path"), "the failure names no URL: {err:?}");
}

#[tokio::test]
async fn a_webhook_reset_after_the_request_leaves_the_attempt_ambiguous() {
    let (addr, requests) = support::raw_server(support::RawAnswer::Reset).await;
    let (settings, _dir) = config("reset", Some(format!("http://{addr}/hook")));
    let notify = NotifySend::new(settings);

    let alone = notify.run(args(json!({"text": "hi", "channels": ["webhook"]})), &attempt(1, None)).await;
    let alone = alone.expect_err("no answer");
    assert_eq!(alone.code, "transport_error", "the receiver may have the message: {alone:?}");
    assert!(alone.retryable && !alone.did_not_take_effect, "{alone:?}");

    let second = attempt(2, None);
    let with_unconfigured = notify.run(args(json!({"text": "hi", "channels": ["app", "webhook"]})), &second).await;
    let with_unconfigured = with_unconfigured.expect_err("both fail");
    assert_eq!(
        with_unconfigured.code, "transport_error",
        "an ambiguous channel makes the attempt ambiguous whatever the others did: {with_unconfigured:?}"
    );
    assert!(!with_unconfigured.did_not_take_effect);
    assert_eq!(requests.load(Ordering::SeqCst), 2, "the webhook read both requests");
}
