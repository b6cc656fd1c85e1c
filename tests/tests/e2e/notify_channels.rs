//! `notify.send`'s real channels against the provider stand-ins (`cairn_tests::providers`), called directly with
//! an `ActionContext` that hands it recipients and records its delivery reports (no orchestrator): one message
//! over each channel (Telegram, a signed webhook, email over STARTTLS with AUTH, Slack, a signed Feishu bot,
//! ntfy), the tries a transient provider error takes, and permanent errors that end a channel at once.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn_core::delivery::{DeliveryReport, DeliveryStatus};
use cairn_core::recipient::Recipient;
use cairn_tests::http::{TempDir, within};
use cairn_tests::providers::{Fault, FeishuStub, NtfyStub, SlackStub, SmtpStub, TelegramStub, WebhookReceiver};
use cairn_workers::action::{Action, ActionError};
use cairn_workers::actions::address::AddressPolicy;
use cairn_workers::actions::notify::{Delivery, NotifyArgs, NotifyConfig, NotifySend, Outcome};
use cairn_workers::context::{ActionContext, Deliveries, ProgressSink};
use serde_json::{Value, json};

const TOKEN: &str = "123456:TEST-TOKEN";

/// Records every delivery report and accepts it.
#[derive(Default)]
struct Ledger(Mutex<Vec<DeliveryReport>>);

impl ProgressSink for Ledger {
    fn heartbeat(&self, _checkpoint: Option<Value>) -> futures::future::BoxFuture<'_, bool> {
        Box::pin(async { true })
    }

    fn delivery(&self, report: DeliveryReport) -> futures::future::BoxFuture<'_, bool> {
        self.0.lock().unwrap().push(report);
        Box::pin(async { true })
    }
}

/// Every stand-in, and a directory for the SMTP CA file.
struct Providers {
    telegram: TelegramStub,
    smtp: SmtpStub,
    slack: SlackStub,
    feishu: FeishuStub,
    webhook: WebhookReceiver,
    ntfy: NtfyStub,
    dir: TempDir,
}

impl Providers {
    async fn start() -> Providers {
        let dir = TempDir::new();
        let smtp = SmtpStub::start(Some(("cairn", "s3cret"))).await;
        smtp.write_ca(&dir.path().join("ca.pem"));
        Providers {
            telegram: TelegramStub::start(TOKEN).await,
            smtp,
            slack: SlackStub::start().await,
            feishu: FeishuStub::start(Some("feishu-secret")).await,
            webhook: WebhookReceiver::start(Some("hook-secret")).await,
            ntfy: NtfyStub::start().await,
            dir,
        }
    }

    /// The action with [`Self::config`].
    fn action(&self) -> NotifySend {
        NotifySend::with_addresses(self.config(), AddressPolicy::local())
    }

    /// The worker's settings for every channel, as `cairn worker` reads them from the environment.
    fn config(&self) -> NotifyConfig {
        let mut config = NotifyConfig { file_path: self.dir.path().join("notifications.jsonl"), ..Default::default() };
        config.telegram.api_url = self.telegram.url();
        config.telegram.bot_token = Some(TOKEN.to_owned().into());
        config.smtp.url = Some(self.smtp.url().into());
        config.smtp.from = Some("Cairn <cairn@example.com>".into());
        config.smtp.ca_file = Some(self.dir.path().join("ca.pem"));
        config.ntfy.server = self.ntfy.url();
        config
    }

    /// `alice`, bound to every provider channel.
    fn alice(&self) -> Recipient {
        serde_json::from_value(json!({"channels": {
            "telegram": {"chat_id": "42"},
            "email": {"address": "alice@example.com"},
            "slack": {"webhook_url": self.slack.url()},
            "feishu": {"webhook_url": self.feishu.url(), "secret": "feishu-secret"},
            "webhook": {"url": self.webhook.url(), "secret": "hook-secret"},
            "ntfy": {"topic": "alice-alerts"}}}))
        .unwrap()
    }
}

/// Attempt 1 of `run-1/remind`, handed `recipients`, reporting to `ledger`.
fn attempt(recipients: Vec<(&str, Recipient)>, ledger: &Arc<Ledger>) -> ActionContext {
    let recipients: BTreeMap<String, Option<Recipient>> =
        recipients.into_iter().map(|(id, r)| (id.to_owned(), Some(r))).collect();
    let sink: Arc<dyn ProgressSink> = ledger.clone();
    ActionContext::new("run-1", "remind", 1, Duration::from_secs(30), None, sink)
        .with_deliveries(Deliveries { recipients, ledger: Vec::new() })
}

async fn send(notify: &NotifySend, args: Value, ctx: &ActionContext) -> Result<Vec<Delivery>, ActionError> {
    let args: NotifyArgs = serde_json::from_value(args).unwrap();
    notify.run(args, ctx).await.map(|out| out.deliveries)
}

fn outcomes(deliveries: &[Delivery]) -> Vec<(&str, Outcome, u32)> {
    deliveries.iter().map(|d| (d.channel.as_str(), d.outcome, d.attempts)).collect()
}

fn by_channel<'a>(deliveries: &'a [Delivery], channel: &str) -> &'a Delivery {
    deliveries.iter().find(|d| d.channel == channel).unwrap()
}

#[tokio::test]
async fn one_message_reaches_every_channel_of_a_recipient() {
    let providers = Providers::start().await;
    let ledger = Arc::new(Ledger::default());
    let ctx = attempt(vec![("alice", providers.alice())], &ledger);
    let args = json!({"text": "Take an umbrella", "title": "Rain", "to": "alice",
        "channel_retry": {"delays_ms": [0, 10, 20]}});

    let out = send(&providers.action(), args, &ctx).await.expect("every channel delivered");

    let channels = ["telegram", "email", "slack", "feishu", "webhook", "ntfy"];
    assert_eq!(outcomes(&out), channels.map(|c| (c, Outcome::Delivered, 1)), "{out:#?}");
    let reports: Vec<_> = ledger.0.lock().unwrap().iter().map(|r| (r.channel.clone(), r.status, r.tries)).collect();
    assert_eq!(reports, channels.map(|c| (c.to_owned(), DeliveryStatus::Delivered, 1)), "one report per channel");

    let [telegram] = providers.telegram.messages_to("42").try_into().unwrap();
    assert_eq!(telegram.text, "Rain\nTake an umbrella");
    assert_eq!(telegram.entities, json!([{"type": "bold", "offset": 0, "length": 4}]), "the title is bold");
    assert_eq!(by_channel(&out, "telegram").provider_message_id.as_deref(), Some("1"), "Telegram's message_id");

    let [email] = providers.smtp.received().try_into().unwrap();
    assert!(email.tls && email.auth_user.as_deref() == Some("cairn"), "STARTTLS, then AUTH: {email:?}");
    assert_eq!(
        (email.mail_from.as_str(), email.rcpt_to.as_slice()),
        ("cairn@example.com", ["alice@example.com".to_owned()].as_slice())
    );
    assert_eq!(email.header("Subject").as_deref(), Some("Rain"));
    assert_eq!(
        email.header("Message-ID"),
        by_channel(&out, "email").provider_message_id,
        "the provider id is the Message-ID"
    );
    assert!(email.body().contains("Take an umbrella"), "{email:?}");

    assert_eq!(providers.slack.received()[0].text, "*Rain*\nTake an umbrella");
    let [feishu] = providers.feishu.received().try_into().unwrap();
    assert_eq!((feishu.msg_type.as_str(), feishu.text.as_str()), ("text", "Rain\nTake an umbrella"));
    assert!(feishu.timestamp.is_some() && providers.feishu.rejected() == 0, "signed, and the sign verified");

    let [hook] = providers.webhook.received().try_into().unwrap();
    assert!(hook.signed && providers.webhook.rejected().is_empty(), "the receiver verified the signature");
    assert_eq!(hook.idempotency_key.as_deref(), Some("run-1/remind/alice"));
    assert_eq!(
        (&hook.body["text"], &hook.body["recipient"], &hook.body["channel"]),
        (&json!("Take an umbrella"), &json!("alice"), &json!("webhook"))
    );

    let [ntfy] = providers.ntfy.received().try_into().unwrap();
    assert_eq!(
        (ntfy.topic.as_str(), ntfy.title.as_deref(), ntfy.message.as_str()),
        ("alice-alerts", Some("Rain"), "Take an umbrella")
    );
    assert_eq!(by_channel(&out, "ntfy").provider_message_id.as_deref(), Some(ntfy.id.as_str()));
}

#[tokio::test]
async fn a_telegram_500_is_tried_again_and_the_second_try_delivers() {
    let providers = Providers::start().await;
    providers.telegram.fail_next(1, Fault::Status(500));
    let ledger = Arc::new(Ledger::default());
    let ctx = attempt(vec![("alice", providers.alice())], &ledger);
    let args =
        json!({"text": "hi", "to": "alice", "channels": ["telegram"], "channel_retry": {"delays_ms": [0, 10, 20]}});

    let out = send(&providers.action(), args, &ctx).await.expect("delivered on the second try");

    assert_eq!(outcomes(&out), [("telegram", Outcome::Delivered, 2)]);
    assert_eq!((providers.telegram.arrivals(), providers.telegram.received().len()), (2, 1));
    assert_eq!(ledger.0.lock().unwrap()[0].tries, 2, "the report counts this attempt's tries");
}

#[tokio::test]
async fn a_chat_the_bot_cannot_see_fails_after_one_try_and_any_succeeds_through_the_others() {
    let providers = Providers::start().await;
    providers.telegram.fail_next(3, Fault::chat_not_found());
    let ledger = Arc::new(Ledger::default());
    let ctx = attempt(vec![("alice", providers.alice())], &ledger);
    let args = json!({"text": "hi", "to": "alice", "channels": ["telegram", "webhook", "ntfy"],
        "success_policy": "any", "channel_retry": {"delays_ms": [0, 10, 20]}});

    let out = send(&providers.action(), args.clone(), &ctx).await.expect("the other channels delivered");

    let telegram = by_channel(&out, "telegram");
    assert_eq!((telegram.outcome, telegram.attempts), (Outcome::Failed, 1), "permanent: one try");
    assert!(telegram.error.as_deref().unwrap().contains("chat not found"), "{telegram:?}");
    assert_eq!(providers.telegram.arrivals(), 1);
    assert_eq!(outcomes(&out)[1..], [("webhook", Outcome::Delivered, 1), ("ntfy", Outcome::Delivered, 1)]);

    let mut all = args;
    all["success_policy"] = json!("all");
    let err = send(&providers.action(), all, &ctx).await.expect_err("`all` needs Telegram too");
    assert!(!err.retryable && err.degraded, "no retry will find the chat: {err:?}");
}

#[tokio::test]
async fn signatures_made_with_the_wrong_secret_are_refused_by_the_receivers() {
    let providers = Providers::start().await;
    let wrong: Recipient = serde_json::from_value(json!({"channels": {
        "webhook": {"url": providers.webhook.url(), "secret": "not-the-secret"},
        "feishu": {"webhook_url": providers.feishu.url(), "secret": "not-the-secret"}}}))
    .unwrap();
    let ledger = Arc::new(Ledger::default());
    let ctx = attempt(vec![("mallory", wrong)], &ledger);
    let args = json!({"text": "hi", "to": "mallory", "success_policy": "any", "channel_retry": {"delays_ms": [0, 10]}});

    let err = send(&providers.action(), args, &ctx).await.expect_err("both refused");

    assert!(!err.retryable, "a bad signature will not become good: {err:?}");
    assert_eq!(providers.webhook.rejected(), ["Cairn-Signature does not match"]);
    assert!(providers.webhook.received().is_empty());
    assert_eq!(providers.feishu.rejected(), 1, "Feishu's code 19021 is permanent: one try");
}

#[tokio::test]
async fn an_smtp_4xx_is_tried_again_and_a_5xx_is_not() {
    let providers = Providers::start().await;
    let ledger = Arc::new(Ledger::default());
    let ctx = attempt(vec![("alice", providers.alice())], &ledger);
    let args = json!({"text": "hi", "to": "alice", "channels": ["email"], "channel_retry": {"delays_ms": [0, 10, 20]}});

    providers.smtp.fail_next(1, Fault::Status(451));
    let out = send(&providers.action(), args.clone(), &ctx).await.expect("delivered on the second try");
    assert_eq!(outcomes(&out), [("email", Outcome::Delivered, 2)]);

    providers.smtp.fail_next(1, Fault::Status(550));
    let err = send(&providers.action(), args, &ctx).await.expect_err("rejected");
    assert!(!err.retryable && err.did_not_take_effect, "the server did not take the message: {err:?}");
    assert_eq!(err.details["deliveries"][0]["attempts"], 1);
    assert_eq!(providers.smtp.received().len(), 1, "only the first message was accepted");
}

#[tokio::test]
async fn a_held_send_waits_until_released_or_cancelled() {
    let providers = Providers::start().await;
    providers.webhook.hold();
    let ledger = Arc::new(Ledger::default());
    let ctx = attempt(vec![("alice", providers.alice())], &ledger);
    let args = json!({"text": "hi", "to": "alice", "channels": ["webhook"]});
    let notify = providers.action();

    let cancel = ctx.cancellation().clone();
    let sending = send(&notify, args, &ctx);
    let cancelling = async {
        within(Duration::from_secs(10), "the send arrives", || async {
            (providers.webhook.arrivals() == 1).then_some(())
        })
        .await;
        cancel.cancel();
    };
    let (err, ()) = tokio::join!(sending, cancelling);

    assert_eq!(err.expect_err("cancelled mid-send").code, "cancelled");
    assert!(ledger.0.lock().unwrap().is_empty(), "nothing is reported for a send cut short");
    providers.webhook.release();
}

/// The message is in once `DATA` ends; a server that never answers it may have queued it, so the email is
/// ambiguous (a non-idempotent step goes to `outcome_unknown`), not "nothing sent".
#[tokio::test]
async fn an_smtp_server_that_never_answers_the_data_leaves_the_email_ambiguous() {
    let providers = Providers::start().await;
    providers.smtp.hold();
    let ledger = Arc::new(Ledger::default());
    let ctx = attempt(vec![("alice", providers.alice())], &ledger);
    let notify =
        NotifySend::with_addresses(NotifyConfig { try_timeout_ms: 300, ..providers.config() }, AddressPolicy::local());
    let args = json!({"text": "hi", "to": "alice", "channels": ["email"], "channel_retry": {"delays_ms": [0]}});

    let err = send(&notify, args, &ctx).await.expect_err("no answer to DATA");

    assert_eq!(err.code, "timeout", "{err:?}");
    assert!(err.retryable && !err.did_not_take_effect, "the server may have the message: {err:?}");
    assert_eq!(providers.smtp.arrivals(), 1, "the whole message was sent");
    assert_eq!(ledger.0.lock().unwrap()[0].status, DeliveryStatus::Failed, "reported as failed for this attempt");
    providers.smtp.release();
}
