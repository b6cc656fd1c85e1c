//! Shared by the action tests: a local server on port 0, contexts, a progress recorder and scratch directories.
#![allow(dead_code, missing_docs)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn_core::delivery::DeliveryReport;
use cairn_workers::context::{ActionContext, ProgressSink};
use serde_json::Value;

/// Serves `router` on 127.0.0.1 with an OS-chosen port; the server lives until the test's runtime ends.
pub async fn serve(router: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move { axum::serve(listener, router).await.expect("serve") });
    addr
}

/// A context for attempt 1 of `step` with a 10 s deadline and no progress reporting.
pub fn ctx(step: &str) -> ActionContext {
    ActionContext::standalone(step, Duration::from_secs(10))
}

/// Records every heartbeat's checkpoint and every delivery report; answers `alive` to heartbeats and
/// `recorded` to delivery reports.
#[derive(Debug)]
pub struct Recorder {
    pub checkpoints: Mutex<Vec<Value>>,
    pub alive: bool,
    pub deliveries: Mutex<Vec<DeliveryReport>>,
    pub recorded: bool,
}

impl Recorder {
    pub fn new(alive: bool) -> Arc<Self> {
        Arc::new(Self { checkpoints: Mutex::default(), alive, deliveries: Mutex::default(), recorded: true })
    }

    /// A sink whose delivery ledger refuses every report (the orchestrator unreachable until the deadline).
    pub fn refusing_deliveries() -> Arc<Self> {
        Arc::new(Self { checkpoints: Mutex::default(), alive: true, deliveries: Mutex::default(), recorded: false })
    }

    pub fn checkpoints(&self) -> Vec<Value> {
        self.checkpoints.lock().expect("not poisoned").clone()
    }

    pub fn deliveries(&self) -> Vec<DeliveryReport> {
        self.deliveries.lock().expect("not poisoned").clone()
    }
}

impl ProgressSink for Recorder {
    fn heartbeat(&self, checkpoint: Option<Value>) -> futures::future::BoxFuture<'_, bool> {
        if let Some(c) = checkpoint {
            self.checkpoints.lock().expect("not poisoned").push(c);
        }
        let alive = self.alive;
        Box::pin(async move { alive })
    }

    fn delivery(&self, report: DeliveryReport) -> futures::future::BoxFuture<'_, bool> {
        self.deliveries.lock().expect("not poisoned").push(report);
        let recorded = self.recorded;
        Box::pin(async move { recorded })
    }
}

/// A fresh, empty directory under the system temp dir, removed when the returned guard is dropped.
pub fn scratch_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("cairn-workers-test-{name}-")).tempdir().expect("create scratch dir")
}

/// A local port nothing listens on (bound, then released).
pub fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// What a [`raw_server`] does once it has read a whole request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawAnswer {
    /// Resets the connection (`SO_LINGER` 0, then close: the client gets `ECONNRESET`).
    Reset,
    /// Closes the connection without a byte of answer.
    Close,
    /// Answers nothing and keeps the connection open until the client closes it.
    Silent,
}

/// A TCP server on 127.0.0.1 that reads each request in full (head and `Content-Length` body), counts it, and
/// then does `answer` instead of answering: a server that received the request and failed before replying.
/// Returns its address and the count of requests it read.
pub async fn raw_server(answer: RawAnswer) -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::AsyncReadExt;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local addr");
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&requests);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let counted = Arc::clone(&counted);
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let Ok(n @ 1..) = stream.read(&mut buf).await else { return };
                    request.extend_from_slice(&buf[..n]);
                    if request_complete(&request) {
                        break;
                    }
                }
                counted.fetch_add(1, Ordering::SeqCst);
                match answer {
                    RawAnswer::Reset => {
                        stream.set_zero_linger().expect("SO_LINGER 0");
                        drop(stream);
                    }
                    RawAnswer::Close => drop(stream),
                    RawAnswer::Silent => while let Ok(1..) = stream.read(&mut buf).await {},
                }
            });
        }
    });
    (addr, requests)
}

/// Whether `bytes` hold a whole HTTP/1.1 request: the head and as many body bytes as `Content-Length` says.
fn request_complete(bytes: &[u8]) -> bool {
    let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&bytes[..end]).to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    bytes.len() >= end + 4 + length
}
