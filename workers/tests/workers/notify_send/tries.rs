//! Each channel's tries within an attempt: counting, permanent errors, rate limits, cancellation, a ledger that
//! refuses reports, and what a failure says (and keeps secret).

use std::sync::atomic::Ordering;

use super::*;

const TEN_S: Duration = Duration::from_secs(10);

/// One recipient, `alice`, whose webhook is `url`.
fn alice(url: &str) -> Deliveries {
    handed(vec![("alice", recipient(json!({"webhook": {"url": url}})))], vec![])
}

#[tokio::test]
async fn a_transient_failure_is_tried_again_under_the_same_key_and_the_tries_are_counted() {
    let (url, hook) = hook(&[(500, None), (503, None)]).await;
    let (notify, _file, _dir) = action("transient", None);
    let sink = support::Recorder::new(true);

    let out = run(&notify, json!({"text": "t", "to": "alice"}), &attempt(alice(&url), sink.clone(), TEN_S)).await;

    assert_eq!(outcomes(&out.expect("the third try succeeds")), [("alice", "webhook", Outcome::Delivered, 3)]);
    assert_eq!(hook.keys(), ["run-1/remind/alice"; 3], "every try carries the same Idempotency-Key");
    assert_eq!(reported(&sink.deliveries()), [("alice", "webhook", DeliveryStatus::Delivered, 3)]);
}

#[tokio::test]
async fn tries_stop_when_the_delays_run_out() {
    let (url, hook) = hook(&[(502, None); 5]).await;
    let (notify, _file, _dir) = action("exhausted", None);
    let sink = support::Recorder::new(true);
    let value = json!({"text": "t", "to": "alice", "channel_retry": {"delays_ms": [0, 10]}});

    let err = run(&notify, value, &attempt(alice(&url), sink.clone(), TEN_S)).await.expect_err("still failing");

    assert!(err.retryable && !err.degraded, "another attempt may succeed: {err:?}");
    assert_eq!(hook.received().len(), 2, "two delays, two tries");
    let reports = sink.deliveries();
    assert_eq!(reported(&reports), [("alice", "webhook", DeliveryStatus::Failed, 2)], "a failure is reported too");
    assert_eq!(reports[0].last_error.as_deref(), Some("webhook: HTTP 502 Bad Gateway"));
}

#[tokio::test]
async fn a_permanent_failure_is_not_tried_again() {
    let (url, hook) = hook(&[(400, None), (400, None)]).await;
    let (notify, _file, _dir) = action("permanent", None);
    let sink = support::Recorder::new(true);

    let err = run(&notify, json!({"text": "t", "to": "alice"}), &attempt(alice(&url), sink.clone(), TEN_S)).await;

    let err = err.expect_err("refused");
    assert!(!err.retryable && !err.did_not_take_effect, "a 400 is an answer that retrying will not change: {err:?}");
    assert_eq!(hook.received().len(), 1, "one try only");
    assert_eq!(reported(&sink.deliveries()), [("alice", "webhook", DeliveryStatus::Failed, 1)]);
}

#[tokio::test]
async fn a_rate_limited_try_counts_and_is_tried_again() {
    let (url, hook) = hook(&[(429, Some("0"))]).await;
    let (notify, _file, _dir) = action("rate-limited", None);

    let ctx = attempt(alice(&url), support::Recorder::new(true), TEN_S);

    let out = run(&notify, json!({"text": "t", "to": "alice"}), &ctx).await.expect("the second try succeeds");

    assert_eq!(outcomes(&out), [("alice", "webhook", Outcome::Delivered, 2)]);
    assert_eq!(hook.received().len(), 2);
}

/// A `Retry-After` longer than the attempt has left is honoured by not trying within the attempt: the failure
/// carries the wait for the orchestrator's next attempt instead of a try 10 ms later.
#[tokio::test]
async fn a_retry_after_past_the_deadline_ends_the_tries_and_goes_into_the_failure() {
    let (url, hook) = hook(&[(429, Some("30")); 3]).await;
    let (notify, _file, _dir) = action("retry-after", None);
    let ctx = attempt(alice(&url), support::Recorder::new(true), Duration::from_secs(5));

    let err = run(&notify, json!({"text": "t", "to": "alice"}), &ctx).await.expect_err("rate limited");

    assert_eq!(hook.received().len(), 1, "not tried again before the provider's 30 s");
    assert_eq!((err.code.as_str(), err.retryable), ("rate_limited", true), "{err:?}");
    assert_eq!(err.retry_after, Some(Duration::from_secs(30)));
}

#[tokio::test]
async fn a_report_the_ledger_refuses_ends_the_attempt_before_the_next_send() {
    let ((url_a, hook_a), (url_b, hook_b)) = (hook(&[]).await, hook(&[]).await);
    let (notify, _file, _dir) = action("refused-report", None);
    let recipients = vec![
        ("alice", recipient(json!({"webhook": {"url": url_a}}))),
        ("bob", recipient(json!({"webhook": {"url": url_b}}))),
    ];
    let ctx = attempt(handed(recipients, vec![]), support::Recorder::refusing_deliveries(), TEN_S);

    let err = run(&notify, json!({"text": "t", "to": ["alice", "bob"]}), &ctx).await.expect_err("stopped");

    assert_eq!(err.code, "cancelled", "{err:?}");
    assert_eq!((hook_a.received().len(), hook_b.received().len()), (1, 0), "nothing sent that cannot be recorded");
}

#[tokio::test]
async fn cancellation_cuts_a_wait_between_tries_short() {
    let (url, hook) = hook(&[(500, None)]).await;
    let (notify, _file, _dir) = action("cancel", None);
    let ctx = attempt(alice(&url), support::Recorder::new(true), Duration::from_secs(120));
    let value = json!({"text": "t", "to": "alice", "channel_retry": {"delays_ms": [0, 60000]}});
    let (watched, cancel) = (Arc::clone(&hook), ctx.cancellation().clone());
    tokio::spawn(async move {
        while watched.received().is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        cancel.cancel();
    });

    let err = run(&notify, value, &ctx).await.expect_err("cancelled");

    assert_eq!(err.code, "cancelled", "the 60 s wait ended with the cancellation, not the deadline: {err:?}");
    assert_eq!(hook.received().len(), 1);
}

#[tokio::test]
async fn a_webhook_reset_after_the_request_leaves_the_channel_ambiguous() {
    let (addr, requests) = support::raw_server(support::RawAnswer::Reset).await;
    let url = format!("http://{addr}/hook");
    let (notify, _file, _dir) = action("reset", None);
    let ctx = attempt(alice(&url), support::Recorder::new(true), TEN_S);

    let alone = run(&notify, json!({"text": "t", "to": "alice"}), &ctx).await.expect_err("no answer");
    assert_eq!(alone.code, "transport_error", "the receiver may have the message: {alone:?}");
    assert!(alone.retryable && !alone.did_not_take_effect, "{alone:?}");
    assert_eq!(requests.load(Ordering::SeqCst), 3, "read on every try");

    let value = json!({"text": "t", "to": "alice", "channels": ["email", "webhook"]});
    let mixed = run(&notify, value, &ctx).await.expect_err("both fail");
    assert_eq!(mixed.code, "transport_error", "an ambiguous pair makes the attempt ambiguous: {mixed:?}");
}

#[tokio::test]
async fn a_webhook_that_cannot_be_reached_did_not_take_effect() {
    let url = format!("http://127.0.0.1:{}/hook", support::closed_port());
    let (notify, _file, _dir) = action("refused", None);
    let ctx = attempt(alice(&url), support::Recorder::new(true), TEN_S);

    let err = run(&notify, json!({"text": "t", "to": "alice"}), &ctx).await.expect_err("refused");

    assert!(err.retryable && err.did_not_take_effect && !err.degraded, "{err:?}");
    assert_eq!(err.details["deliveries"][0]["attempts"], 3, "a refused connection is tried again");
}

/// Chat webhooks and the Telegram API carry their credential in the URL: neither is printed nor recorded.
#[tokio::test]
async fn credentials_in_urls_stay_out_of_debug_output_and_failures() {
    let port = support::closed_port();
    let mut config = NotifyConfig {
        webhook_url: Some(format!("http://127.0.0.1:{port}/hook/T0-secret-path").into()),
        ..NotifyConfig::default()
    };
    config.telegram.api_url = format!("http://127.0.0.1:{port}");
    config.telegram.bot_token = Some("123:BOT-SECRET".to_owned().into());
    let printed = format!("{config:?}");
    assert!(!printed.contains("T0-secret-path") && !printed.contains("BOT-SECRET"), "{printed}");
    let notify = NotifySend::new(config);
    let recipients = vec![("alice", recipient(json!({"telegram": {"chat_id": "42"}})))];
    let ctx = attempt(handed(recipients, vec![]), support::Recorder::new(true), TEN_S);

    let dev = run(&notify, json!({"text": "t", "channels": ["webhook"]}), &ctx).await.expect_err("refused");
    let telegram = run(&notify, json!({"text": "t", "to": "alice"}), &ctx).await.expect_err("refused");

    assert!(!format!("{dev:?}").contains("T0-secret-path"), "{dev:?}");
    assert!(!format!("{telegram:?}").contains("BOT-SECRET"), "{telegram:?}");
    assert!(telegram.did_not_take_effect, "{telegram:?}");
}
