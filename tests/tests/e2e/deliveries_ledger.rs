//! Reminders that reach people (issue 35 acceptance), on SQLite and on PostgreSQL: a recipient bound to Telegram,
//! a signed webhook and email, `notify.send` run by real `cairn worker` processes against local stand-ins of the
//! providers (`cairn_tests::providers`), and the delivery ledger read back over the REST API, the CLI and
//! `/metrics`.
//!
//! - one reminder reaches all three channels, one ledger record each, the webhook's HMAC signature verified;
//! - Telegram failing once is tried again inside the attempt (2 tries there, 1 on the others);
//! - a permanent Telegram error is not retried, and policy `any` still succeeds through the others;
//! - a worker killed after one channel was delivered: the step, retried on another worker process with another
//!   temp dir, sends nothing more on the delivered channel;
//! - a webhook signed with another secret is refused by the receiver and recorded as failed.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use cairn_core::clock::ManualClock;
use cairn_tests::http::{CairnProcess, HttpApp, TempDir, cairn, step, within};
use cairn_tests::providers::{Fault, SmtpStub, TelegramStub, WebhookReceiver};
use cairn_tests::{Backend, on_both_backends};
use serde_json::{Value, json};

const START: &str = "2027-03-14T12:00:00Z";
/// Generous: the worker is a separate process on a busy machine.
const LIMIT: Duration = Duration::from_secs(60);
const BOT_TOKEN: &str = "123456:test-bot-token";
const HMAC_SECRET: &str = "whsec-7f3a";
const CHAT: &str = "42";

/// The orchestrator, the three providers' stand-ins, and what a worker needs to reach them.
struct Scene {
    app: HttpApp,
    telegram: TelegramStub,
    webhook: WebhookReceiver,
    smtp: SmtpStub,
    dir: TempDir,
}

impl Scene {
    async fn start(backend: Backend) -> Scene {
        let clock = Arc::new(ManualClock::new(START.parse().unwrap()));
        let app = HttpApp::start(backend, clock, None).await;
        let scene = Scene {
            app,
            telegram: TelegramStub::start(BOT_TOKEN).await,
            webhook: WebhookReceiver::start(Some(HMAC_SECRET)).await,
            smtp: SmtpStub::start(None).await,
            dir: TempDir::new(),
        };
        std::fs::write(scene.dir.path().join("smtp-ca.pem"), scene.smtp.ca_pem()).unwrap();
        scene
    }

    /// A `cairn worker` process with its own temp dir under the scene's.
    fn worker(&self, name: &str) -> CairnProcess {
        let own = self.dir.path().join(name);
        std::fs::create_dir_all(&own).unwrap();
        let env = [
            ("CAIRN_NOTIFY_TELEGRAM_API_URL", self.telegram.url()),
            ("CAIRN_NOTIFY_TELEGRAM_BOT_TOKEN", BOT_TOKEN.to_owned()),
            ("CAIRN_NOTIFY_SMTP_URL", self.smtp.url()),
            ("CAIRN_NOTIFY_SMTP_FROM", "Cairn <cairn@example.com>".to_owned()),
            ("CAIRN_NOTIFY_SMTP_CA_FILE", self.dir.path().join("smtp-ca.pem").display().to_string()),
        ];
        CairnProcess::worker(name, &self.app.grpc_url, &own, &[], &env)
    }

    /// Binds `id` to Telegram, the webhook (signed with `secret`) and email.
    async fn recipient(&self, id: &str, secret: &str, channels: &[&str]) {
        let all = json!({"telegram": {"chat_id": CHAT}, "email": {"address": format!("{id}@example.com")},
            "webhook": {"url": format!("{}/hooks/{id}", self.webhook.url()), "secret": secret}});
        let bound: serde_json::Map<String, Value> =
            channels.iter().map(|c| ((*c).to_owned(), all[*c].clone())).collect();
        let request = self.app.request(reqwest::Method::PUT, &format!("/v1/recipients/{id}"));
        let (status, body) =
            HttpApp::send(request.json(&json!({"channels": bound, "timezone": "Asia/Shanghai"}))).await;
        assert_eq!(status, 201, "recipient {id} is created: {body:#}");
    }

    async fn ledger(&self, run_id: &str) -> Vec<Value> {
        let (status, body) = self.app.get(&format!("/v1/runs/{run_id}/deliveries")).await;
        assert_eq!(status, 200, "the ledger can be read: {body:#}");
        body["deliveries"].as_array().unwrap().clone()
    }

    async fn finished(&self, run_id: &str) -> Value {
        self.app.wait_run(run_id, "the run finishes", LIMIT, |r| r["finished_at_ms"].is_i64()).await
    }
}

/// A reminder to `to` with fast channel retries (so a test never waits seconds).
fn reminder(to: &str, policy: &str) -> Value {
    json!({"goal": "Remind me to take an umbrella", "steps": [{"id": "remind", "action": "notify.send",
        "args": {"to": to, "title": "Umbrella", "text": "Rain expected (80%): take an umbrella",
            "success_policy": policy, "channel_retry": {"delays_ms": [0, 100, 200]}}}]})
}

/// The ledger record of `channel`.
fn record<'a>(ledger: &'a [Value], channel: &str) -> &'a Value {
    ledger.iter().find(|d| d["channel"] == channel).unwrap_or_else(|| panic!("a {channel} record in {ledger:#?}"))
}

fn outcomes(run: &Value) -> Vec<(String, String)> {
    let deliveries = step(run, "remind")["output"]["deliveries"].as_array().cloned().unwrap_or_default();
    let mut pairs: Vec<(String, String)> = deliveries
        .iter()
        .map(|d| (d["channel"].as_str().unwrap().to_owned(), d["outcome"].as_str().unwrap().to_owned()))
        .collect();
    pairs.sort();
    pairs
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
}

on_both_backends!(
    one_reminder_reaches_telegram_webhook_and_email_with_one_ledger_record_each,
    flavor = "multi_thread",
    worker_threads = 2
);
async fn one_reminder_reaches_telegram_webhook_and_email_with_one_ledger_record_each(backend: Backend) {
    let scene = Scene::start(backend).await;
    scene.recipient("alice", HMAC_SECRET, &["telegram", "webhook", "email"]).await;
    let _worker = scene.worker("w1");

    let run_id = scene.app.submit(reminder("alice", "all")).await;
    let run = scene.finished(&run_id).await;

    assert_eq!(run["status"], "succeeded", "{backend:?}: the reminder is delivered: {run:#}");
    let expected = pairs(&[("email", "delivered"), ("telegram", "delivered"), ("webhook", "delivered")]);
    assert_eq!(outcomes(&run), expected, "{backend:?}: the step's output says each channel delivered");
    let messages = scene.telegram.messages_to(CHAT);
    assert_eq!(messages.len(), 1, "{backend:?}: one Telegram message: {messages:?}");
    assert!(messages[0].text.contains("take an umbrella"), "the text is sent: {messages:?}");
    let calls = scene.webhook.received();
    assert_eq!(calls.len(), 1, "{backend:?}: one webhook call");
    assert!(calls[0].signed, "the receiver verified the HMAC signature");
    assert!(scene.webhook.rejected().is_empty(), "no call failed the signature check");
    assert_eq!(calls[0].idempotency_key.as_deref(), Some(format!("{run_id}/remind/alice").as_str()));
    assert_eq!(scene.smtp.received().len(), 1, "{backend:?}: one email over STARTTLS");

    let ledger = scene.ledger(&run_id).await;
    assert_eq!(ledger.len(), 3, "{backend:?}: one ledger record per channel: {ledger:#?}");
    for d in &ledger {
        assert_eq!(
            (d["recipient_id"].as_str(), d["status"].as_str(), d["attempts"].as_u64()),
            (Some("alice"), Some("delivered"), Some(1)),
            "{backend:?}: {d:#}"
        );
        assert!(d["delivered_at"].is_i64(), "delivered records say when: {d:#}");
    }
    assert_eq!(record(&ledger, "telegram")["provider_message_id"], messages[0].message_id.to_string());
    assert!(record(&ledger, "email")["provider_message_id"].is_string(), "the email's Message-ID is kept");

    let shown = cairn(scene.dir.path(), &["show", &run_id, "--server", &scene.app.base_url]).await;
    assert_eq!(shown.code, Some(0), "cairn show works: {shown:?}");
    for channel in ["telegram", "webhook", "email"] {
        let line = shown.stdout.lines().find(|l| l.contains("alice") && l.contains(channel));
        assert!(
            line.is_some_and(|l| l.contains("delivered")),
            "cairn show lists the {channel} delivery:\n{}",
            shown.stdout
        );
    }
    let metrics = reqwest::get(format!("{}/metrics", scene.app.base_url)).await.unwrap().text().await.unwrap();
    assert!(metrics.contains(r#"cairn_deliveries_total{channel="telegram",outcome="delivered"} 1"#), "{metrics}");
}

on_both_backends!(telegram_failing_once_is_tried_again_inside_the_attempt, flavor = "multi_thread", worker_threads = 2);
async fn telegram_failing_once_is_tried_again_inside_the_attempt(backend: Backend) {
    let scene = Scene::start(backend).await;
    scene.recipient("alice", HMAC_SECRET, &["telegram", "webhook", "email"]).await;
    scene.telegram.fail_next(1, Fault::Status(502));
    let _worker = scene.worker("w1");

    let run_id = scene.app.submit(reminder("alice", "all")).await;
    let run = scene.finished(&run_id).await;

    assert_eq!(run["status"], "succeeded", "{backend:?}: {run:#}");
    assert_eq!(step(&run, "remind")["attempts"], 1, "{backend:?}: the channel retried, not the step");
    let ledger = scene.ledger(&run_id).await;
    let tries: Vec<(&str, u64)> = ["email", "telegram", "webhook"]
        .iter()
        .map(|c| (*c, record(&ledger, c)["attempts"].as_u64().unwrap()))
        .collect();
    assert_eq!(tries, [("email", 1), ("telegram", 2), ("webhook", 1)], "{backend:?}: {ledger:#?}");
    let telegram = record(&ledger, "telegram");
    assert_eq!(telegram["status"], "delivered");
    assert!(
        telegram["last_error"].as_str().is_some_and(|e| e.contains("502")),
        "why the first try failed: {telegram:#}"
    );
    assert_eq!(scene.telegram.messages_to(CHAT).len(), 1, "{backend:?}: delivered once");
    assert_eq!(scene.telegram.arrivals(), 2, "{backend:?}: two sends reached Telegram");
}

on_both_backends!(
    a_permanent_telegram_error_is_not_retried_and_policy_any_succeeds_through_the_others,
    flavor = "multi_thread",
    worker_threads = 2
);
async fn a_permanent_telegram_error_is_not_retried_and_policy_any_succeeds_through_the_others(backend: Backend) {
    let scene = Scene::start(backend).await;
    scene.recipient("alice", HMAC_SECRET, &["telegram", "webhook", "email"]).await;
    scene.telegram.fail_next(3, Fault::chat_not_found());
    let _worker = scene.worker("w1");

    let run_id = scene.app.submit(reminder("alice", "any")).await;
    let run = scene.finished(&run_id).await;

    assert_eq!(run["status"], "succeeded", "{backend:?}: any one channel is enough: {run:#}");
    let expected = pairs(&[("email", "delivered"), ("telegram", "failed"), ("webhook", "delivered")]);
    assert_eq!(outcomes(&run), expected, "{backend:?}");
    assert_eq!(scene.telegram.arrivals(), 1, "{backend:?}: a permanent error is not tried again");
    let ledger = scene.ledger(&run_id).await;
    let telegram = record(&ledger, "telegram");
    assert_eq!((telegram["status"].as_str(), telegram["attempts"].as_u64()), (Some("failed"), Some(1)), "{telegram:#}");
    assert!(telegram["last_error"].as_str().is_some_and(|e| e.contains("chat not found")), "{telegram:#}");
    assert_eq!(scene.webhook.received().len() + scene.smtp.received().len(), 2, "the others got it");
}

on_both_backends!(
    a_step_retried_on_another_worker_never_resends_a_delivered_channel,
    flavor = "multi_thread",
    worker_threads = 2
);
async fn a_step_retried_on_another_worker_never_resends_a_delivered_channel(backend: Backend) {
    let scene = Scene::start(backend).await;
    scene.recipient("bob", HMAC_SECRET, &["telegram", "webhook"]).await;
    scene.webhook.hold();
    let first = scene.worker("w1");

    let run_id = scene.app.submit(reminder("bob", "all")).await;
    within(LIMIT, "Telegram is recorded as delivered while the webhook hangs", || async {
        let ledger = scene.ledger(&run_id).await;
        let telegram = ledger.iter().any(|d| d["channel"] == "telegram" && d["status"] == "delivered");
        (telegram && scene.webhook.arrivals() >= 1).then_some(())
    })
    .await;
    drop(first); // SIGKILL, mid-send on the webhook.
    scene.webhook.release();
    scene.app.clock.advance(Duration::from_secs(120));
    scene.app.engine().reap().await.unwrap();
    let parked = scene
        .app
        .wait_run(&run_id, "the lost attempt is parked", LIMIT, |r| step(r, "remind")["status"] == "outcome_unknown")
        .await;
    assert_eq!(step(&parked, "remind")["attempts"], 1, "{backend:?}: {parked:#}");
    let (status, body) = scene.app.post(&format!("/v1/runs/{run_id}/steps/remind:retry"), &json!({"by": "ops"})).await;
    assert_eq!(status, 200, "{backend:?}: the operator retries the step: {body:#}");
    let _second = scene.worker("w2");
    let run = scene.finished(&run_id).await;

    assert_eq!(run["status"], "succeeded", "{backend:?}: {run:#}");
    let expected = pairs(&[("telegram", "skipped_duplicate"), ("webhook", "delivered")]);
    assert_eq!(outcomes(&run), expected, "{backend:?}: the second attempt skipped what the ledger held");
    assert_eq!(scene.telegram.messages_to(CHAT).len(), 1, "{backend:?}: no second Telegram message");
    let keys: Vec<Option<String>> = scene.webhook.received().into_iter().map(|c| c.idempotency_key).collect();
    assert!(
        !keys.is_empty() && keys.iter().all(|k| k.as_deref() == Some(&format!("{run_id}/remind/bob"))),
        "{backend:?}: every webhook send carries the same Idempotency-Key, so the receiver can drop a repeat: {keys:?}"
    );
    let ledger = scene.ledger(&run_id).await;
    assert_eq!(record(&ledger, "telegram")["attempts"], 1, "{backend:?}: Telegram was sent once: {ledger:#?}");
    assert_eq!(record(&ledger, "webhook")["status"], "delivered");
}

on_both_backends!(
    a_webhook_signed_with_another_secret_is_refused_and_recorded_as_failed,
    flavor = "multi_thread",
    worker_threads = 2
);
async fn a_webhook_signed_with_another_secret_is_refused_and_recorded_as_failed(backend: Backend) {
    let scene = Scene::start(backend).await;
    scene.recipient("mallory", "not-the-receivers-secret", &["webhook"]).await;
    let _worker = scene.worker("w1");

    let run_id = scene.app.submit(reminder("mallory", "all")).await;
    let run = scene.finished(&run_id).await;

    assert_eq!(run["status"], "failed", "{backend:?}: the only channel failed: {run:#}");
    assert!(scene.webhook.received().is_empty(), "{backend:?}: the receiver accepted nothing");
    assert_eq!(scene.webhook.rejected().len(), 1, "{backend:?}: it refused the bad signature once (401 is permanent)");
    let ledger = scene.ledger(&run_id).await;
    let webhook = record(&ledger, "webhook");
    assert_eq!((webhook["status"].as_str(), webhook["attempts"].as_u64()), (Some("failed"), Some(1)), "{webhook:#}");
}
