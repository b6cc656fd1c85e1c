//! [`Endpoint`], a local recording HTTP service standing in for the outside world: it records when each call
//! started, when it ended and whether the caller hung up before the answer.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::IntoResponse;
use serde_json::{Value, json};
use tokio::time::Instant;

/// One request an [`Endpoint`] received.
#[derive(Debug, Clone)]
pub struct Call {
    /// 1-based arrival order, over all paths.
    pub n: usize,
    /// Method.
    pub method: Method,
    /// Path, without the query.
    pub path: String,
    /// Query string.
    pub query: String,
    /// Headers.
    pub headers: HeaderMap,
    /// Body bytes.
    pub body: Bytes,
    /// When it arrived (monotonic).
    pub started: Instant,
    /// When it arrived (wall clock).
    pub started_at: SystemTime,
    /// When it ended: answered, or the caller hung up.
    pub ended: Option<Instant>,
    /// Whether it was answered (false while running, or when the caller hung up first).
    pub answered: bool,
}

impl Call {
    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// Whether the caller closed the connection before the answer.
    pub fn hung_up(&self) -> bool {
        self.ended.is_some() && !self.answered
    }

    /// One query parameter's raw value.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query.split('&').filter_map(|pair| pair.split_once('=')).find(|(k, _)| *k == name).map(|(_, v)| v)
    }
}

type Calls = Arc<Mutex<Vec<Call>>>;
type Responder = Arc<dyn Fn(&Call) -> (u16, Value) + Send + Sync>;

/// Marks a call ended when dropped: hyper drops a handler's future when its client goes away, so a call whose
/// guard drops before [`EndGuard::answered`] was set was abandoned by the caller.
struct EndGuard {
    calls: Calls,
    index: usize,
    answered: bool,
}

impl Drop for EndGuard {
    fn drop(&mut self) {
        let mut calls = self.calls.lock().expect("the call log");
        calls[self.index].ended = Some(Instant::now());
        calls[self.index].answered = self.answered;
    }
}

/// A local recording HTTP service on `127.0.0.1:0`, standing in for every external service.
///
/// - `/slow?ms=N[&then=M]` waits `N` ms on its first call and `M` ms (default `N`) on later ones, then answers
///   `{"call": <n>, "slow_call": <k>}` (`k`: 1-based among `/slow` calls), recording if the caller hung up first.
///   `ms=held` makes the first call wait until [`Endpoint::release`] instead, so a test decides when it is
///   answered rather than racing a timer.
/// - Any other path answers what the responder returns (status, JSON body) at once.
pub struct Endpoint {
    addr: SocketAddr,
    calls: Calls,
    released: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Endpoint {
    /// Starts the service; paths other than `/slow` answer through `respond`.
    pub async fn start(respond: impl Fn(&Call) -> (u16, Value) + Send + Sync + 'static) -> Endpoint {
        let calls: Calls = Arc::default();
        let (released, gate) = tokio::sync::watch::channel(false);
        let service = Service { calls: calls.clone(), respond: Arc::new(respond), gate };
        let app = axum::Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
            let service = service.clone();
            async move { service.handle(method, uri, headers, body).await }
        });
        let (addr, task) = crate::http::serve_local(app).await;
        Endpoint { addr, calls, released, task }
    }

    /// Lets a held first `/slow` call (`ms=held`) answer, now or as soon as it arrives.
    pub fn release(&self) {
        self.released.send_replace(true);
    }

    /// Base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every call so far, in arrival order.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().expect("the call log").clone()
    }

    /// Calls to `path` so far.
    pub fn calls_to(&self, path: &str) -> Vec<Call> {
        self.calls().into_iter().filter(|c| c.path == path).collect()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the endpoint's handler shares across calls.
#[derive(Clone)]
struct Service {
    calls: Calls,
    respond: Responder,
    gate: tokio::sync::watch::Receiver<bool>,
}

impl Service {
    async fn handle(self, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> axum::response::Response {
        let Service { calls, respond, mut gate } = self;
        let path = uri.path().to_owned();
        let query = uri.query().unwrap_or_default().to_owned();
        let (index, slow_call) = {
            let mut log = calls.lock().expect("the call log");
            let slow_call = log.iter().filter(|c| c.path == "/slow").count() + usize::from(path == "/slow");
            let n = log.len() + 1;
            log.push(Call {
                n,
                method,
                path: path.clone(),
                query,
                headers,
                body,
                started: Instant::now(),
                started_at: SystemTime::now(),
                ended: None,
                answered: false,
            });
            (log.len() - 1, slow_call)
        };
        let mut guard = EndGuard { calls: calls.clone(), index, answered: false };
        let call = calls.lock().expect("the call log")[index].clone();
        let (status, answer) = if path == "/slow" {
            let ms = |name: &str| call.param(name).and_then(|v| v.parse::<u64>().ok());
            if slow_call == 1 && call.param("ms") == Some("held") {
                gate.wait_for(|released| *released).await.expect("the endpoint outlives its calls");
            } else {
                let first = ms("ms").unwrap_or(0);
                let wait = if slow_call == 1 { first } else { ms("then").unwrap_or(first) };
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
            (200, json!({"call": call.n, "slow_call": slow_call}))
        } else {
            respond(&call)
        };
        guard.answered = true;
        drop(guard);
        (StatusCode::from_u16(status).expect("a valid status"), axum::Json(answer)).into_response()
    }
}
