//! Abuse limits (issue "Hardening"): slow and greedy clients are cut off at documented limits while everyone
//! else is served. Real sockets on 127.0.0.1 against the in-process orchestrator, with limits set small:
//! request heads that stall (Slowloris) are disconnected, stalled bodies answered 408, live event streams
//! and connections capped, and worker protocol messages, streams and connections bounded.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use cairn_core::clock::ManualClock;
use cairn_orchestrator::grpc::GrpcLimits;
use cairn_orchestrator::http_server::HttpLimits;
use cairn_proto::v1::PollRequest;
use cairn_proto::v1::worker_service_client::WorkerServiceClient;
use cairn_tests::Backend;
use cairn_tests::http::{HttpApp, HttpAppOptions, holds_for, within};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest any condition below may take to come true.
const LIMIT: Duration = Duration::from_secs(10);
/// How long something that must not happen is watched for.
const QUIET: Duration = Duration::from_millis(600);

async fn app(options: HttpAppOptions) -> HttpApp {
    let clock = Arc::new(ManualClock::new("2027-03-14T12:00:00Z".parse().unwrap()));
    HttpApp::start_with(Backend::Sqlite, clock, options).await
}

fn http_limits(header_read_timeout: Duration, max_connections: usize) -> HttpLimits {
    HttpLimits { header_read_timeout, max_connections }
}

async fn connect(app: &HttpApp) -> TcpStream {
    TcpStream::connect(app.base_url.trim_start_matches("http://")).await.unwrap()
}

/// Reads until the server closes the connection (end of stream or reset), at most [`LIMIT`]; returns what it
/// sent before closing, or `None` when it kept the connection open.
async fn read_until_closed(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut received = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(LIMIT, read).await.ok().map(|()| received)
}

/// Sends `GET /healthz` on `stream` (keep-alive) and reads its answer.
async fn healthz_on(stream: &mut TcpStream) -> String {
    stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: cairn\r\n\r\n").await.unwrap();
    let mut received = Vec::new();
    let mut buf = [0u8; 1024];
    while !received.ends_with(b"\r\n\r\nok") {
        let n = tokio::time::timeout(LIMIT, stream.read(&mut buf)).await.expect("an answer").unwrap();
        assert!(n > 0, "the connection stays open for the answer");
        received.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&received).into_owned()
}

#[tokio::test]
async fn a_client_stalling_in_its_request_head_is_disconnected_while_others_are_served() {
    let timeout = Duration::from_millis(300);
    let app = app(HttpAppOptions { http: http_limits(timeout, 64), ..Default::default() }).await;
    let mut half_head = connect(&app).await;
    half_head.write_all(b"GET /healthz HTTP/1.1\r\nHost: cairn\r\n").await.unwrap();
    let mut silent = connect(&app).await;
    let mut idle = connect(&app).await;
    assert!(healthz_on(&mut idle).await.starts_with("HTTP/1.1 200"), "a full request head is served");

    let (status, _) = app.get("/healthz").await;
    assert_eq!(status, 200, "other clients are served while the slow ones stall");

    let sent = read_until_closed(&mut half_head).await;
    assert_eq!(sent, Some(Vec::new()), "half a request head is disconnected without an answer");
    let sent = read_until_closed(&mut silent).await;
    assert_eq!(sent, Some(Vec::new()), "a connection that never sends a head is disconnected");
    let sent = read_until_closed(&mut idle).await;
    assert_eq!(sent, Some(Vec::new()), "an idle keep-alive connection is closed after the header read timeout");
    // A fresh connection: the HTTP client's pooled one was idle past the timeout too, and the server may have
    // closed it just as the client reuses it.
    let mut fresh = connect(&app).await;
    assert!(healthz_on(&mut fresh).await.starts_with("HTTP/1.1 200"), "the server keeps serving");
}

#[tokio::test]
async fn a_request_body_that_stalls_is_answered_408_in_json_and_nothing_is_stored() {
    let app = app(HttpAppOptions { body_read_timeout: Some(Duration::from_millis(300)), ..Default::default() }).await;
    let mut stream = connect(&app).await;
    let head =
        "POST /v1/runs HTTP/1.1\r\nHost: cairn\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(br#"{"plan": {"steps": [{"id": "a", "#).await.unwrap();

    let answer = read_until_closed(&mut stream).await.expect("the server answers and closes the connection");

    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or_else(|| panic!("an HTTP answer: {answer:?}"));
    assert!(head.starts_with("HTTP/1.1 408"), "a stalled body is a 408: {answer}");
    assert!(head.to_ascii_lowercase().contains("connection: close"), "the connection is closed: {head}");
    let error: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("a JSON body ({e}): {body}"));
    assert_eq!(error["code"], "body_timeout", "the error names the limit: {error:#}");
    assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()), "a message says why: {error:#}");
    assert_eq!(error["details"]["timeout_ms"], 300, "the details give the limit: {error:#}");
    assert!(app.runs().await.is_empty(), "nothing was stored");
}

#[tokio::test]
async fn a_body_that_arrives_in_slow_pieces_within_the_timeout_is_accepted() {
    let app = app(HttpAppOptions { body_read_timeout: Some(Duration::from_secs(5)), ..Default::default() }).await;
    let body = serde_json::to_vec(&json!({"plan": {"steps": [{"id": "a", "action": "noop"}]}})).unwrap();
    let mut stream = connect(&app).await;
    let head = format!(
        "POST /v1/runs HTTP/1.1\r\nHost: cairn\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    for piece in body.chunks(body.len() / 3 + 1) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        stream.write_all(piece).await.unwrap();
    }

    let answer = read_until_closed(&mut stream).await.expect("an answer");

    let answer = String::from_utf8_lossy(&answer).into_owned();
    assert!(answer.starts_with("HTTP/1.1 201"), "a slow but timely body is accepted: {answer}");
}

/// Opens a live event stream of `run_id`; returns the response (open while it is kept).
async fn subscribe(app: &HttpApp, run_id: &str) -> reqwest::Response {
    app.request(reqwest::Method::GET, &format!("/v1/runs/{run_id}/events"))
        .header(reqwest::header::ACCEPT, "text/event-stream")
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn the_live_stream_over_the_cap_gets_503_until_one_closes() {
    let app = app(HttpAppOptions { max_sse_subscribers: Some(2), ..Default::default() }).await;
    // No worker: the run stays open, and so do its streams.
    let run_id = app.submit(json!({"steps": [{"id": "a", "action": "noop"}]})).await;
    let first = subscribe(&app, &run_id).await;
    let second = subscribe(&app, &run_id).await;
    assert_eq!((first.status().as_u16(), second.status().as_u16()), (200, 200), "streams within the cap open");

    let refused = subscribe(&app, &run_id).await;

    assert_eq!(refused.status().as_u16(), 503, "the stream over the cap is refused");
    assert!(refused.headers().contains_key(reqwest::header::RETRY_AFTER), "it says when to retry");
    let error: Value = refused.json().await.unwrap();
    assert_eq!(error["code"], "too_many_subscribers", "the error names the limit: {error:#}");
    let (status, _) = app.get(&format!("/v1/runs/{run_id}/events")).await;
    assert_eq!(status, 200, "the history as JSON is still served at the cap");

    drop(first);
    let third = within(LIMIT, "a stream opens once another closed", || async {
        let response = subscribe(&app, &run_id).await;
        (response.status() == 200).then_some(response)
    })
    .await;
    assert_eq!(third.status(), 200);
    drop((second, third));
}

#[tokio::test]
async fn connections_over_the_cap_wait_in_the_queue_until_one_closes() {
    let app = app(HttpAppOptions { http: http_limits(Duration::from_secs(30), 2), ..Default::default() }).await;
    let (mut first, mut second) = (connect(&app).await, connect(&app).await);
    assert!(healthz_on(&mut first).await.starts_with("HTTP/1.1 200"), "the first connection is served");
    assert!(healthz_on(&mut second).await.starts_with("HTTP/1.1 200"), "the second connection is served");

    let mut third = connect(&app).await;
    let waiting = tokio::spawn(async move { healthz_on(&mut third).await });
    holds_for(QUIET, "the connection over the cap is not served", || async { !waiting.is_finished() }).await;

    drop(first);

    let answer = tokio::time::timeout(LIMIT, waiting).await.expect("served once a connection closed").unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "the waiting connection is served: {answer}");
    assert!(healthz_on(&mut second).await.starts_with("HTTP/1.1 200"), "open connections keep being served");
}

fn poll(worker_id: &str, actions: Vec<String>, wait_ms: u64) -> PollRequest {
    PollRequest { worker_id: worker_id.into(), actions, max_attempts: 1, wait_ms }
}

#[tokio::test]
async fn a_worker_message_over_the_limit_fails_its_call_and_the_server_keeps_serving() {
    let grpc = GrpcLimits { max_message_bytes: 64 * 1024, ..GrpcLimits::default() };
    let app = app(HttpAppOptions { grpc, ..Default::default() }).await;
    let mut worker = WorkerServiceClient::connect(app.grpc_url.clone()).await.unwrap();

    let oversized = worker.poll(poll("w1", vec!["x".repeat(100 * 1024)], 0)).await;

    let status = oversized.expect_err("a message over the limit is refused");
    assert!(
        matches!(status.code(), tonic::Code::OutOfRange | tonic::Code::ResourceExhausted),
        "the refusal says the message is too large: {status:?}"
    );
    let answer = worker.poll(poll("w1", vec!["noop".into()], 0)).await;
    assert!(answer.is_ok(), "the same connection keeps serving calls within the limit: {answer:?}");
}

#[tokio::test]
async fn worker_calls_over_the_stream_cap_wait_for_a_free_stream() {
    let grpc = GrpcLimits { max_concurrent_streams: 1, ..GrpcLimits::default() };
    let app = app(HttpAppOptions { grpc, ..Default::default() }).await;
    let channel = tonic::transport::Endpoint::from_shared(app.grpc_url.clone()).unwrap().connect().await.unwrap();
    // A first call, so the client has the server's HTTP/2 settings (a stream opened before they arrive is
    // refused, which a worker's client retries as UNAVAILABLE).
    let warm_up = WorkerServiceClient::new(channel.clone()).poll(poll("w0", vec!["noop".into()], 0)).await;
    assert!(warm_up.is_ok(), "a call is served: {warm_up:?}");
    let calls: Vec<_> = (0..2)
        .map(|i| {
            let mut worker = WorkerServiceClient::new(channel.clone());
            tokio::spawn(async move { worker.poll(poll(&format!("w{i}"), vec!["noop".into()], 1500)).await })
        })
        .collect();

    within(LIMIT, "a long poll waits on the orchestrator", || async {
        (app.engine().waiting_polls() >= 1).then_some(())
    })
    .await;
    holds_for(QUIET, "at most one call is in flight on the connection", || async { app.engine().waiting_polls() <= 1 })
        .await;

    for call in calls {
        let answer = tokio::time::timeout(LIMIT, call).await.expect("each call ends").unwrap();
        assert!(answer.is_ok(), "the queued call is served once the stream is free: {answer:?}");
    }
}

#[tokio::test]
async fn worker_connections_over_the_cap_wait_until_one_closes() {
    let grpc = GrpcLimits { max_connections: 1, ..GrpcLimits::default() };
    let app = app(HttpAppOptions { grpc, ..Default::default() }).await;
    let mut first = WorkerServiceClient::connect(app.grpc_url.clone()).await.unwrap();
    assert!(first.poll(poll("w1", vec!["noop".into()], 0)).await.is_ok(), "the first connection is served");

    let url = app.grpc_url.clone();
    let waiting = tokio::spawn(async move {
        let mut second = WorkerServiceClient::connect(url).await.map_err(|e| e.to_string())?;
        second.poll(poll("w2", vec!["noop".into()], 0)).await.map_err(|e| e.to_string()).map(drop)
    });
    holds_for(QUIET, "the connection over the cap is not served", || async { !waiting.is_finished() }).await;

    drop(first);

    let served = tokio::time::timeout(LIMIT, waiting).await.expect("served once a connection closed").unwrap();
    assert!(served.is_ok(), "the waiting connection is served: {served:?}");
}
