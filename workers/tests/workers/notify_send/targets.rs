//! Which (recipient, channel) pairs are sent to, the ledger's skips, the success policies and the worker's own
//! channels.

use super::*;

const TEN_S: Duration = Duration::from_secs(10);

#[tokio::test]
async fn each_recipient_gets_its_bound_channels_once_and_each_pair_is_reported_when_done() {
    let ((url_a, hook_a), (url_b, hook_b)) = (hook(&[]).await, hook(&[]).await);
    let (notify, file, _dir) = action("bound", None);
    let recipients = vec![
        ("alice", recipient(json!({"webhook": {"url": url_a}, "file": {}}))),
        ("bob", recipient(json!({"webhook": {"url": url_b}}))),
    ];
    let sink = support::Recorder::new(true);
    let ctx = attempt(handed(recipients, vec![]), sink.clone(), TEN_S);

    let out = run(&notify, json!({"text": "Rain", "to": ["alice", "bob", "alice"], "city": "Wuhan"}), &ctx).await;

    let out = out.expect("every pair delivered");
    let pairs = [("alice", "webhook"), ("alice", "file"), ("bob", "webhook")];
    let expected: Vec<_> = pairs.iter().map(|(r, c)| (*r, *c, Outcome::Delivered, 1)).collect();
    assert_eq!(outcomes(&out), expected, "channel-type order per recipient, each recipient once");
    let delivered: Vec<_> = pairs.iter().map(|(r, c)| (*r, *c, DeliveryStatus::Delivered, 1)).collect();
    assert_eq!(reported(&sink.deliveries()), delivered, "one report per pair, in the order sent");
    assert_eq!(hook_a.keys(), ["run-1/remind/alice"], "the key names the step and the recipient");
    assert_eq!(hook_b.keys(), ["run-1/remind/bob"]);
    let (_, body) = &hook_a.received()[0];
    assert_eq!(
        (&body["recipient"], &body["channel"], &body["city"]),
        (&json!("alice"), &json!("webhook"), &json!("Wuhan"))
    );
    assert_eq!(body["to"], json!(["alice", "bob", "alice"]), "the payload carries `to` as given");
    let lines = file_lines(&file);
    assert_eq!((lines.len(), &lines[0]["recipient"], &lines[0]["channel"]), (1, &json!("alice"), &json!("file")));
}

#[tokio::test]
async fn channels_narrow_the_bound_ones_and_an_unbound_channel_fails_without_a_try() {
    let (url, hook) = hook(&[]).await;
    let (notify, file, _dir) = action("narrow", None);
    let recipients = vec![
        ("alice", recipient(json!({"webhook": {"url": url}, "file": {}}))),
        ("bob", recipient(json!({"webhook": {"url": "http://127.0.0.1:9/never"}}))),
    ];
    let sink = support::Recorder::new(true);
    let ctx = attempt(handed(recipients, vec![]), sink.clone(), TEN_S);

    let err = run(&notify, json!({"text": "t", "to": ["alice", "bob"], "channels": ["file"]}), &ctx).await;

    let err = err.expect_err("bob has no file channel and the policy is `all`");
    assert!(!err.retryable && err.did_not_take_effect && err.degraded, "{err:?}");
    assert_eq!(err.code, "invalid_args", "naming a channel the recipient lacks is the args' fault");
    let deliveries: Vec<Delivery> = serde_json::from_value(err.details["deliveries"].clone()).expect("records");
    let expected = [("alice", "file", Outcome::Delivered, 1), ("bob", "file", Outcome::Failed, 0)];
    assert_eq!(outcomes(&deliveries), expected);
    assert!(deliveries[1].error.as_deref().is_some_and(|e| e.contains("has no `file` channel")), "{deliveries:?}");
    assert_eq!(
        reported(&sink.deliveries()),
        [("alice", "file", DeliveryStatus::Delivered, 1)],
        "no report without a try"
    );
    assert!(hook.received().is_empty(), "alice's webhook was narrowed away");
    assert_eq!(file_lines(&file).len(), 1);
}

#[tokio::test]
async fn unknown_recipients_fail_without_a_try_and_any_succeeds_through_the_others() {
    let (url, hook) = hook(&[]).await;
    let (notify, _file, _dir) = action("unknown", None);
    let recipients = vec![("ghost", None), ("alice", recipient(json!({"webhook": {"url": url}})))];
    let sink = support::Recorder::new(true);
    let ctx = attempt(handed(recipients, vec![]), sink.clone(), TEN_S);

    let out = run(&notify, json!({"text": "t", "to": ["ghost", "alice"], "success_policy": "any"}), &ctx).await;

    let out = out.expect("alice was reached");
    let expected = [("ghost", "", Outcome::Failed, 0), ("alice", "webhook", Outcome::Delivered, 1)];
    assert_eq!(outcomes(&out), expected, "an unknown recipient's channels are unknown: one record, channel \"\"");
    assert!(out[0].error.as_deref().is_some_and(|e| e.contains("not known")), "{out:?}");
    assert_eq!(reported(&sink.deliveries()), [("alice", "webhook", DeliveryStatus::Delivered, 1)]);
    assert_eq!(hook.received().len(), 1);

    let narrowed = run(&notify, json!({"text": "t", "to": "ghost", "channels": ["email", "ntfy"]}), &ctx).await;
    let err = narrowed.expect_err("nobody to deliver to");
    assert_eq!(err.code, "not_found", "{err:?}");
    assert_eq!(err.details["deliveries"][1]["channel"], "ntfy", "with channels, one record per channel");
}

#[tokio::test]
async fn a_pair_the_ledger_has_as_delivered_is_skipped_and_never_sent_again() {
    let (url, hook) = hook(&[]).await;
    let (notify, file, _dir) = action("ledger", None);
    let recipients = vec![("alice", recipient(json!({"webhook": {"url": url}, "file": {}})))];
    let ledger =
        vec![record("alice", "webhook", DeliveryStatus::Delivered), record("alice", "file", DeliveryStatus::Failed)];
    let sink = support::Recorder::new(true);
    let ctx = attempt(handed(recipients, ledger), sink.clone(), TEN_S);

    let out = run(&notify, json!({"text": "t", "to": "alice"}), &ctx).await.expect("ok");

    let expected = [("alice", "webhook", Outcome::SkippedDuplicate, 0), ("alice", "file", Outcome::Delivered, 1)];
    assert_eq!(outcomes(&out), expected, "a failed record is tried again, a delivered one is not");
    assert!(hook.received().is_empty(), "nothing sent to the delivered pair");
    assert_eq!(reported(&sink.deliveries()), [("alice", "file", DeliveryStatus::Delivered, 1)]);
    assert_eq!(file_lines(&file).len(), 1);
}

#[tokio::test]
async fn the_policy_decides_all_any_and_min() {
    let ((failing, _), (working, _)) = (hook(&[(500, None); 40]).await, hook(&[]).await);
    let (notify, _file, _dir) = action("policy", None);
    let recipients = vec![
        ("down", recipient(json!({"webhook": {"url": failing}}))),
        ("up", recipient(json!({"webhook": {"url": working}, "file": {}}))),
    ];
    let ctx = attempt(handed(recipients, vec![]), support::Recorder::new(true), TEN_S);
    let send = |policy: Value| {
        let value = json!({"text": "t", "to": ["down", "up"], "success_policy": policy});
        run(&notify, value, &ctx)
    };

    let all = send(json!("all")).await.expect_err("one of three failed");
    assert!(all.retryable && all.degraded && !all.did_not_take_effect, "a 5xx answer may be retried: {all:?}");
    assert!(all.message.contains("1 of 3 deliveries failed") && all.message.contains("down/webhook"), "{all:?}");
    assert_eq!(all.details["deliveries"][0]["attempts"], 3, "the failed pair used its three tries");
    assert!(send(json!("any")).await.is_ok(), "one is enough for `any`");
    assert!(send(json!({"min": 2})).await.is_ok(), "two of three delivered");
    let three = send(json!({"min": 3})).await.expect_err("only two delivered");
    assert!(three.message.contains("`min 3` does not hold"), "{three:?}");
}

#[tokio::test]
async fn without_to_the_worker_channels_deliver_under_the_step_key() {
    let (url, hook) = hook(&[]).await;
    let (notify, file, _dir) = action("dev", Some(url));
    let sink = support::Recorder::new(true);
    let ctx = attempt(Deliveries::default(), sink.clone(), TEN_S);

    let value = json!({"text": "Take an umbrella", "title": "Rain", "channels": ["file", "webhook"], "city": "Wuhan"});
    let out = run(&notify, value, &ctx).await.expect("both delivered");

    assert_eq!(outcomes(&out), [("", "file", Outcome::Delivered, 1), ("", "webhook", Outcome::Delivered, 1)]);
    assert_eq!(hook.keys(), ["run-1/remind"], "the worker's own webhook gets the step's key alone");
    let line = &file_lines(&file)[0];
    assert_eq!(
        (&line["text"], &line["title"], &line["city"]),
        (&json!("Take an umbrella"), &json!("Rain"), &json!("Wuhan"))
    );
    assert_eq!((&line["idempotency_key"], &line["recipient"]), (&json!("run-1/remind"), &json!("")));
    let pairs = [("", "file", DeliveryStatus::Delivered, 1), ("", "webhook", DeliveryStatus::Delivered, 1)];
    assert_eq!(reported(&sink.deliveries()), pairs);

    let stdout = run(&notify, json!({"text": "hi"}), &ctx).await.expect("stdout by default");
    assert_eq!(outcomes(&stdout), [("", "stdout", Outcome::Delivered, 1)]);
}

#[tokio::test]
async fn a_channel_the_worker_has_no_settings_for_fails_as_not_configured_without_retrying() {
    let (notify, _file, _dir) = action("unconfigured", None);
    let recipients = vec![("alice", recipient(json!({"telegram": {"chat_id": "42"}, "stdout": {}})))];
    let ctx = attempt(handed(recipients, vec![]), support::Recorder::new(true), TEN_S);

    let err = run(&notify, json!({"text": "t", "to": "alice"}), &ctx).await.expect_err("no bot token");
    assert!(!err.retryable && err.did_not_take_effect && err.degraded, "{err:?}");
    let deliveries: Vec<Delivery> = serde_json::from_value(err.details["deliveries"].clone()).expect("records");
    assert_eq!(
        outcomes(&deliveries),
        [("alice", "telegram", Outcome::Failed, 1), ("alice", "stdout", Outcome::Delivered, 1)]
    );
    assert!(deliveries[0].error.as_deref().is_some_and(|e| e.contains("CAIRN_NOTIFY_TELEGRAM_BOT_TOKEN")));

    let dev = run(&notify, json!({"text": "t", "channels": ["webhook"]}), &ctx).await.expect_err("no global webhook");
    assert!(dev.message.contains("channel not configured"), "{dev:?}");
}

/// A recipient's URL is set through the API, so it is held to `http.request`'s address policy: by default the
/// worker's own host is refused, before anything is sent, and that is not retried.
#[tokio::test]
async fn a_recipient_webhook_on_a_refused_address_fails_without_sending() {
    let (url, hook) = hook(&[]).await;
    let dir = support::scratch_dir("guarded");
    let config = NotifyConfig { file_path: dir.path().join("n.jsonl"), ..NotifyConfig::default() };
    let notify = NotifySend::new(config);
    let sink = support::Recorder::new(true);
    let ctx = attempt(handed(vec![("alice", recipient(json!({"webhook": {"url": url}})))], vec![]), sink, TEN_S);

    let err = run(&notify, json!({"text": "t", "to": "alice"}), &ctx).await.expect_err("refused");

    assert_eq!(err.code, "invalid_args", "{err:?}");
    assert!(!err.retryable && err.did_not_take_effect, "{err:?}");
    assert_eq!(err.details["deliveries"][0]["attempts"], 1, "a refused destination is not tried again: {err:?}");
    assert!(err.message.contains("loopback"), "the refusal says why: {}", err.message);
    assert!(hook.received().is_empty(), "nothing reached the receiver");
}
