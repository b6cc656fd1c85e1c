//! Shared by the action tests: a local server on port 0, contexts, a progress recorder and scratch directories.
#![allow(dead_code, missing_docs)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// Records every heartbeat's checkpoint; answers `alive`.
#[derive(Debug)]
pub struct Recorder {
    pub checkpoints: Mutex<Vec<Value>>,
    pub alive: bool,
}

impl Recorder {
    pub fn new(alive: bool) -> Arc<Self> {
        Arc::new(Self { checkpoints: Mutex::new(Vec::new()), alive })
    }

    pub fn checkpoints(&self) -> Vec<Value> {
        self.checkpoints.lock().expect("not poisoned").clone()
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
