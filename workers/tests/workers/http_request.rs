//! `http.request` against local servers: what is sent, how failures are classified (a response by its status;
//! no answer by whether the request can have been received), that cancellation closes the connection, and which
//! destinations are refused.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{any, get};
use cairn_workers::action::{Action, ActionError};
use cairn_workers::actions::address::AddressPolicy;
use cairn_workers::actions::http::{HttpArgs, HttpConfig, HttpRequest};
use serde_json::{Value, json};
use support::RawAnswer;
use tokio::sync::oneshot;

fn args(value: Value) -> HttpArgs {
    serde_json::from_value(value).expect("args fit the schema")
}

async fn echo(headers: HeaderMap, body: String) -> impl IntoResponse {
    let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let content_type = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    Json(json!({"idempotency_key": key, "content_type": content_type, "body": body}))
}

/// A server answering `/status/{code}` with that status and, when given, `Retry-After`.
async fn status_server() -> std::net::SocketAddr {
    let router = axum::Router::new()
        .route("/echo", any(echo))
        .route("/text", get(|| async { "plain words" }))
        .route(
            "/status/{code}",
            any(|axum::extract::Path(code): axum::extract::Path<u16>| async move {
                let status = StatusCode::from_u16(code).expect("valid status");
                let retry_after = if matches!(code, 429 | 503) { "7" } else { "" };
                let mut headers = HeaderMap::new();
                if !retry_after.is_empty() {
                    headers.insert("retry-after", retry_after.parse().expect("header value"));
                }
                (status, headers, "nope")
            }),
        )
        .route(
            "/redirect-to-metadata",
            get(|| async { axum::response::Redirect::temporary("http://169.254.169.254/") }),
        )
        .route(
            "/redirect-to/{port}",
            any(|axum::extract::Path(port): axum::extract::Path<u16>| async move {
                axum::response::Redirect::temporary(&format!("http://127.0.0.1:{port}/"))
            }),
        );
    support::serve(router).await
}

/// The tests' servers are on 127.0.0.1, so their worker allows loopback (as `CAIRN_HTTP_ALLOW_LOOPBACK` does).
fn loopback_allowed() -> HttpConfig {
    HttpConfig { addresses: AddressPolicy { allow_loopback: true, ..AddressPolicy::default() } }
}

async fn call_with(config: HttpConfig, value: Value) -> Result<cairn_workers::actions::http::HttpOutput, ActionError> {
    HttpRequest::new(config).run(args(value), &support::ctx("fetch")).await
}

async fn call(value: Value) -> Result<cairn_workers::actions::http::HttpOutput, ActionError> {
    call_with(loopback_allowed(), value).await
}

#[tokio::test]
async fn sends_the_idempotency_key_and_a_json_body_and_parses_a_json_reply() {
    let addr = status_server().await;
    let out = call(json!({"method": "POST", "url": format!("http://{addr}/echo"), "body": {"a": 1}}))
        .await
        .expect("2xx succeeds");
    assert_eq!(out.status, 200);
    assert_eq!(out.body["idempotency_key"], "local/fetch", "the step's key is sent as Idempotency-Key");
    assert_eq!(out.body["content_type"], "application/json");
    assert_eq!(serde_json::from_str::<Value>(out.body["body"].as_str().expect("text")).expect("json"), json!({"a": 1}));
    assert!(out.headers["content-type"].contains("json"), "response headers are reported");
}

#[tokio::test]
async fn a_string_body_is_sent_as_text_and_a_text_reply_stays_text() {
    let addr = status_server().await;
    let out = call(json!({"method": "PUT", "url": format!("http://{addr}/echo"), "body": "hello"})).await.expect("ok");
    assert_eq!(out.body["body"], "hello");
    assert!(out.body["content_type"].as_str().expect("str").starts_with("text/plain"));
    let text = call(json!({"url": format!("http://{addr}/text")})).await.expect("ok");
    assert_eq!(text.body, json!("plain words"), "a non-JSON reply is returned as text");
}

#[tokio::test]
async fn statuses_are_classified_into_retryable_and_permanent_failures() {
    let addr = status_server().await;
    let cases: [(u16, &str, bool, Option<u64>); 6] = [
        (500, "action_error", true, None),
        (503, "action_error", true, Some(7)),
        (429, "rate_limited", true, Some(7)),
        (401, "unauthorized", false, None),
        (403, "unauthorized", false, None),
        (404, "not_found", false, None),
    ];
    for (status, code, retryable, retry_after) in cases {
        let err = call(json!({"url": format!("http://{addr}/status/{status}")})).await.expect_err("error status");
        assert_eq!(err.code, code, "HTTP {status} → {code}");
        assert_eq!(err.retryable, retryable, "HTTP {status} retryable = {retryable}");
        assert_eq!(err.retry_after, retry_after.map(Duration::from_secs), "HTTP {status} honours Retry-After");
        assert_eq!(err.details["status"], status);
        assert!(!err.did_not_take_effect, "HTTP {status} is an answer: the request was received");
    }
    let bad = call(json!({"url": format!("http://{addr}/status/400")})).await.expect_err("400");
    assert!(!bad.retryable && bad.code == "action_error", "other 4xx are permanent: {bad:?}");
}

#[tokio::test]
async fn a_503_of_a_post_is_a_response_decided_by_its_status_not_an_ambiguous_failure() {
    let addr = status_server().await;
    let err = call(json!({"method": "POST", "url": format!("http://{addr}/status/503"), "body": {"n": 1}}))
        .await
        .expect_err("503");
    assert_eq!(err.code, "action_error", "a 5xx keeps its status code, never `transport_error`: {err:?}");
    assert!(err.retryable && !err.did_not_take_effect, "retryable for an idempotent step, failed for another");
    assert_eq!(err.details["status"], 503);
}

#[tokio::test]
async fn a_refused_connection_is_retryable_and_did_not_take_effect() {
    let port = support::closed_port();
    let err =
        call(json!({"method": "POST", "url": format!("http://127.0.0.1:{port}/")})).await.expect_err("nothing listens");
    assert_eq!(err.code, "action_error");
    assert!(err.retryable, "connect errors are retryable: {err:?}");
    assert!(err.did_not_take_effect, "nothing was sent, so even a non-idempotent step may retry");
    assert_eq!(err.details["request"], "not_sent");
}

#[tokio::test]
async fn a_name_that_does_not_resolve_did_not_take_effect() {
    let err =
        call(json!({"method": "POST", "url": "http://nonexistent.invalid/hook"})).await.expect_err("no such name");
    assert_eq!(err.code, "action_error", "{err:?}");
    assert!(err.retryable && err.did_not_take_effect, "a DNS failure sends nothing: {err:?}");
    assert_eq!(err.details["request"], "not_sent");
}

#[tokio::test]
async fn a_connection_reset_after_the_request_was_read_may_have_taken_effect() {
    for answer in [RawAnswer::Reset, RawAnswer::Close] {
        let (addr, requests) = support::raw_server(answer).await;

        let err = call(json!({"method": "POST", "url": format!("http://{addr}/charge"), "body": {"amount": 5}}))
            .await
            .expect_err("no answer");

        assert_eq!(requests.load(std::sync::atomic::Ordering::SeqCst), 1, "{answer:?}: the server read the request");
        assert_eq!(err.code, "transport_error", "{answer:?}: an ambiguous code, so non-idempotent → outcome_unknown");
        assert!(err.retryable, "{answer:?}: an idempotent step may simply retry");
        assert!(!err.did_not_take_effect, "{answer:?}: the server had the request: {err:?}");
        assert_eq!(err.details["request"], "maybe_sent");
        assert!(err.message.contains("may have been received"), "{answer:?}: {}", err.message);
    }
}

#[tokio::test]
async fn a_server_silent_past_the_request_timeout_may_have_taken_effect() {
    let (addr, requests) = support::raw_server(RawAnswer::Silent).await;

    let err = call(json!({"method": "POST", "url": format!("http://{addr}/slow"), "timeout_ms": 300}))
        .await
        .expect_err("times out");

    assert_eq!(requests.load(std::sync::atomic::Ordering::SeqCst), 1, "the server read the request");
    assert_eq!(err.code, "timeout", "{err:?}");
    assert!(err.retryable && !err.did_not_take_effect, "the server may have acted on it: {err:?}");
    assert_eq!(err.details["request"], "maybe_sent");
}

#[tokio::test]
async fn a_refused_connection_after_an_answered_redirect_may_have_taken_effect() {
    let addr = status_server().await;
    let closed = support::closed_port();

    let err = call(json!({"method": "POST", "url": format!("http://{addr}/redirect-to/{closed}")}))
        .await
        .expect_err("the redirect target refuses");

    assert_eq!(err.code, "transport_error", "the first request was answered (307), so it was sent: {err:?}");
    assert!(!err.did_not_take_effect, "{err:?}");
}

#[tokio::test]
async fn link_local_and_metadata_destinations_are_refused_even_where_local_addresses_are_allowed() {
    let local = || HttpConfig { addresses: AddressPolicy::local() };
    for url in [
        "http://169.254.169.254/latest/meta-data/",
        "http://2852039166/",
        "http://[::ffff:169.254.169.254]/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://[fe80::1]/",
        "http://metadata.google.internal/",
    ] {
        let err = call_with(local(), json!({"url": url})).await.expect_err("refused");
        assert_eq!(err.code, "invalid_args", "{url} must be refused");
        assert!(!err.retryable && err.did_not_take_effect, "nothing was sent to {url}");
        assert!(err.message.contains("no setting allows it"), "{url}: {}", err.message);
        assert_eq!(err.details["refused"], "link_local_or_metadata");
    }
    let addr = status_server().await;
    let err = call_with(local(), json!({"url": format!("http://{addr}/redirect-to-metadata")}))
        .await
        .expect_err("redirect refused");
    assert_eq!(err.code, "invalid_args", "a redirect must not reach a metadata address: {err:?}");
    assert!(err.message.contains("169.254.169.254"), "{}", err.message);
}

#[tokio::test]
async fn a_worker_that_does_not_allow_loopback_sends_nothing_to_the_local_host() {
    let (addr, requests) = support::raw_server(RawAnswer::Close).await;
    let port = addr.port();
    for url in [
        format!("http://127.0.0.1:{port}/"),
        format!("http://localhost:{port}/"),
        format!("http://[::ffff:127.0.0.1]:{port}/"),
    ] {
        let err = call_with(HttpConfig::default(), json!({"method": "POST", "url": url})).await.expect_err("refused");
        assert_eq!(err.code, "invalid_args", "{url}: {err:?}");
        assert!(!err.retryable && err.did_not_take_effect, "{url}: {err:?}");
        assert!(err.message.contains("http_allow_loopback"), "the refusal names the setting: {}", err.message);
        assert_eq!(err.details["refused"], "loopback");
    }
    assert_eq!(requests.load(std::sync::atomic::Ordering::SeqCst), 0, "no request reached the server");
}

#[tokio::test]
async fn a_listed_host_is_reached_on_its_port_although_loopback_is_refused() {
    let addr = status_server().await;
    let other = status_server().await;
    let listed = || HttpConfig {
        addresses: AddressPolicy {
            allow_hosts: vec![format!("127.0.0.1:{}", addr.port()).parse().expect("an entry")],
            ..AddressPolicy::default()
        },
    };

    let out = call_with(listed(), json!({"url": format!("http://{addr}/text")})).await.expect("listed");
    assert_eq!(out.status, 200);
    let err = call_with(listed(), json!({"url": format!("http://{other}/text")})).await.expect_err("not listed");
    assert_eq!(err.details["refused"], "loopback", "{err:?}");
    let err = call_with(listed(), json!({"url": format!("http://{addr}/redirect-to/{}", other.port())}))
        .await
        .expect_err("a redirect to an unlisted port");
    assert_eq!(err.code, "invalid_args", "the redirect target is checked like the URL: {err:?}");
}

/// Sends on drop: tells the test the handler's future was dropped, i.e. the server saw the client go away.
struct DropSignal(Option<oneshot::Sender<()>>);

impl Drop for DropSignal {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

#[tokio::test]
async fn cancelling_the_context_aborts_the_request_and_closes_the_connection() {
    let (started_tx, started_rx) = oneshot::channel::<()>();
    let (dropped_tx, dropped_rx) = oneshot::channel::<()>();
    let slots = Arc::new(Mutex::new((Some(started_tx), Some(dropped_tx))));
    let router = axum::Router::new().route(
        "/slow",
        get(move || {
            let slots = Arc::clone(&slots);
            async move {
                let (started, dropped) = {
                    let mut slots = slots.lock().expect("not poisoned");
                    (slots.0.take(), slots.1.take())
                };
                let _signal = DropSignal(dropped);
                if let Some(started) = started {
                    let _ = started.send(());
                }
                tokio::time::sleep(Duration::from_secs(60)).await;
                "too late"
            }
        }),
    );
    let addr = support::serve(router).await;
    let ctx = support::ctx("slow");
    let action = HttpRequest::new(loopback_allowed());
    let call = {
        let ctx = ctx.clone();
        tokio::spawn(async move { action.run(args(json!({"url": format!("http://{addr}/slow")})), &ctx).await })
    };

    started_rx.await.expect("the server received the request");
    ctx.cancellation().cancel();
    let err = tokio::time::timeout(Duration::from_secs(5), call).await.expect("returns promptly").expect("no panic");
    assert_eq!(err.expect_err("cancelled").code, "cancelled");
    tokio::time::timeout(Duration::from_secs(5), dropped_rx)
        .await
        .expect("the server must see the client close the connection")
        .expect("signal sent by the handler's drop");
}

#[tokio::test]
async fn the_attempt_deadline_bounds_the_request() {
    let router = axum::Router::new().route(
        "/slow",
        get(|| async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            "too late"
        }),
    );
    let addr = support::serve(router).await;
    let mut ctx = support::ctx("slow");
    ctx.deadline = tokio::time::Instant::now() + Duration::from_millis(200);
    let err = HttpRequest::new(loopback_allowed())
        .run(args(json!({"url": format!("http://{addr}/slow")})), &ctx)
        .await
        .expect_err("times out");
    assert_eq!(err.code, "timeout");
    assert!(err.retryable && !err.did_not_take_effect, "the server may have acted on it: {err:?}");
}
