//! Failed logins (issue "Hardening"): a request with a wrong token, on the REST API or on the worker protocol,
//! is refused, counted in `cairn_auth_failures_total{api}` and logged with the client's address and the route,
//! never with the token. Runs a real `cairn serve` (build it first: `cargo build -p cairn-cli`), whose log is
//! what an operator reads.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use cairn_proto::v1::PollRequest;
use cairn_proto::v1::worker_service_client::WorkerServiceClient;
use cairn_tests::Backend;
use cairn_tests::http::{TempDir, within};
use cairn_tests::process::Orchestrator;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const LIMIT: Duration = Duration::from_secs(30);
const WRONG_API_TOKEN: &str = "wrong-api-token-7f3a9c";
const WRONG_WORKER_TOKEN: &str = "wrong-worker-token-c41d2e";

/// The process's log without terminal colour codes.
fn plain_log(dir: &TempDir) -> String {
    let text = std::fs::read_to_string(dir.path().join("serve-1.log")).unwrap_or_default();
    let mut plain = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters final-byte (a letter).
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}

/// `GET /v1/runs` with a wrong bearer token on a connection of our own; returns the status line and the
/// connection's local address (the client address the server saw).
async fn rest_call_with_wrong_token(base_url: &str) -> (String, std::net::SocketAddr) {
    let mut stream = TcpStream::connect(base_url.trim_start_matches("http://")).await.unwrap();
    let local = stream.local_addr().unwrap();
    let request = format!(
        "GET /v1/runs HTTP/1.1\r\nHost: cairn\r\nAuthorization: Bearer {WRONG_API_TOKEN}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(LIMIT, stream.read_to_end(&mut answer)).await.expect("an answer").unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    (answer.lines().next().unwrap_or_default().to_owned(), local)
}

async fn auth_failures(orchestrator: &Orchestrator, api: &str) -> Option<u64> {
    let text = reqwest::get(format!("{}/metrics", orchestrator.base_url)).await.ok()?.text().await.ok()?;
    let sample = format!("cairn_auth_failures_total{{api=\"{api}\"}} ");
    text.lines().find_map(|line| line.strip_prefix(&sample)).and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn a_wrong_token_on_either_api_is_counted_and_logged_with_the_address_but_never_the_token() {
    let dir = TempDir::new();
    let orchestrator = Orchestrator::start(Backend::Sqlite, dir.path(), 10_000).await;
    assert_eq!(auth_failures(&orchestrator, "rest").await, Some(0), "the counter starts at 0");
    assert_eq!(auth_failures(&orchestrator, "grpc").await, Some(0), "the counter starts at 0");

    let (status, client) = rest_call_with_wrong_token(&orchestrator.base_url).await;
    let mut worker = WorkerServiceClient::connect(orchestrator.grpc_url.clone()).await.unwrap();
    let mut poll = tonic::Request::new(PollRequest {
        worker_id: "w1".into(),
        actions: vec!["noop".into()],
        max_attempts: 1,
        wait_ms: 0,
    });
    poll.metadata_mut().insert("authorization", format!("Bearer {WRONG_WORKER_TOKEN}").parse().unwrap());
    let refused = worker.poll(poll).await.expect_err("a wrong worker token is refused");

    assert!(status.starts_with("HTTP/1.1 401"), "a wrong bearer token is refused: {status}");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "the worker protocol says why: {refused:?}");
    assert_eq!(auth_failures(&orchestrator, "rest").await, Some(1), "the REST failure is counted");
    assert_eq!(auth_failures(&orchestrator, "grpc").await, Some(1), "the worker protocol failure is counted");
    let log = within(LIMIT, "both failures are logged", || async {
        let log = plain_log(&dir);
        (log.matches("authentication failed").count() >= 2).then_some(log)
    })
    .await;
    let failures: Vec<&str> = log.lines().filter(|l| l.contains("authentication failed")).collect();
    let rest = failures.iter().find(|l| l.contains(r#"api="rest""#)).unwrap_or_else(|| panic!("{failures:#?}"));
    assert!(rest.contains(&format!("peer={client}")), "the REST line names the client's address: {rest}");
    assert!(rest.contains("GET /v1/runs"), "the REST line names the route: {rest}");
    let grpc = failures.iter().find(|l| l.contains(r#"api="grpc""#)).unwrap_or_else(|| panic!("{failures:#?}"));
    assert!(grpc.contains("peer=127.0.0.1:"), "the gRPC line names the client's address: {grpc}");
    assert!(grpc.contains("/cairn.v1.WorkerService/Poll"), "the gRPC line names the method: {grpc}");
    for secret in [WRONG_API_TOKEN, WRONG_WORKER_TOKEN, orchestrator.api_token(), orchestrator.worker_token()] {
        assert!(!log.contains(secret), "no token reaches the log:\n{log}");
    }
}
