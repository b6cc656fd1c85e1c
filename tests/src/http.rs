//! The HTTP test harness: the real orchestrator (in the test process) behind its REST API, real `cairn` processes, and local
//! recording stubs for the external services actions call (zero2prod's `spawn_app`, mini-redis' port 0).
//!
//! - [`HttpApp`]: [`Server`] (engine, REST API, worker gRPC, reaper) on `127.0.0.1:0` over a fresh database,
//!   with a [`ManualClock`] the test moves ([`HttpApp::set_time`] also wakes long-polling workers), and a REST
//!   client that sends the bearer token when one is configured.
//! - [`CairnProcess`]: a spawned `cairn` binary (`cairn worker …`), killed when dropped; [`cairn`] runs a
//!   one-shot command (`cairn show …`) and returns its output.
//! - [`Stub`]: a local HTTP server that records every request and answers through a test-supplied function
//!   (the weather API, a webhook receiver); [`ResetAfterRead`]: one that reads each request and resets the
//!   connection instead of answering.
//! - [`within`]: polls a probe until it yields, with a bounded deadline (never sleep-then-assert);
//!   [`holds_for`] asserts that something keeps holding over a period (that nothing happens).
//! - [`TempDir`]: a scratch directory removed on drop.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::IntoResponse;
use cairn_core::clock::ManualClock;
use cairn_orchestrator::api::ApiConfig;
use cairn_orchestrator::grpc::GrpcLimits;
use cairn_orchestrator::http_server::HttpLimits;
use cairn_orchestrator::server::{Server, ServerConfig};
use cairn_orchestrator::{Engine, EngineConfig};
use jiff::Timestamp;
use serde_json::{Value, json};

use crate::{Backend, postgres_url, sqlite_url};

/// How often [`within`] probes.
const POLL: Duration = Duration::from_millis(25);

/// Polls `probe` every 25 ms until it returns `Some`, panicking with `what` once `limit` has passed.
pub async fn within<T, F, Fut>(limit: Duration, what: &str, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    within_or(limit, probe, || format!("waiting until {what}")).await
}

/// Like [`within`], but the panic message is built only on timeout (so it can include a process log or the
/// latest state).
pub async fn within_or<T, F, Fut>(limit: Duration, mut probe: F, explain: impl FnOnce() -> String) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {limit:?}: {}", explain());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Asserts that `probe` holds at every poll (every 25 ms) for `period`: how a test shows something does **not**
/// happen (nothing delivered before its time) once the system had every chance to do it.
pub async fn holds_for<F, Fut>(period: Duration, what: &str, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + period;
    loop {
        assert!(probe().await, "{what} stopped holding");
        if tokio::time::Instant::now() >= end {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A fresh database URL on `backend`.
pub async fn database_url(backend: Backend) -> String {
    match backend {
        Backend::Sqlite => sqlite_url(),
        Backend::Postgres => postgres_url().await,
    }
}

/// Settings of an [`HttpApp`] beyond the defaults.
#[derive(Debug, Clone, Default)]
pub struct HttpAppOptions {
    /// Bearer token the REST API requires (`None`: auth off).
    pub token: Option<String>,
    /// Engine settings.
    pub engine: EngineConfig,
    /// REST body limit in bytes; `None` keeps the API default (8 MiB).
    pub max_body_bytes: Option<usize>,
    /// REST body read timeout; `None` keeps the API default (30 s).
    pub body_read_timeout: Option<Duration>,
    /// Most live event streams; `None` keeps the API default (256).
    pub max_sse_subscribers: Option<usize>,
    /// The REST API's connection limits (request head timeout, connection cap).
    pub http: HttpLimits,
    /// The worker protocol's limits (message size, streams per connection, connection cap).
    pub grpc: GrpcLimits,
}

/// A running orchestrator reached over HTTP, with a manual clock. Stops serving when dropped.
pub struct HttpApp {
    server: Option<Server>,
    /// The clock the orchestrator reads.
    pub clock: Arc<ManualClock>,
    /// REST API base URL, `http://127.0.0.1:PORT`.
    pub base_url: String,
    /// Worker protocol URL for `cairn worker --server`, `http://127.0.0.1:PORT`.
    pub grpc_url: String,
    /// The database URL.
    pub db_url: String,
    token: Option<String>,
    client: reqwest::Client,
    /// Drops the database when the app ends (after the server: fields drop in order).
    database: Option<crate::Dropped>,
}

impl HttpApp {
    /// Starts an orchestrator on `backend` (fresh database), clock `clock`, REST auth with `token` when given.
    pub async fn start(backend: Backend, clock: Arc<ManualClock>, token: Option<String>) -> HttpApp {
        Self::start_with(backend, clock, HttpAppOptions { token, ..HttpAppOptions::default() }).await
    }

    /// Starts an orchestrator with `options`.
    pub async fn start_with(backend: Backend, clock: Arc<ManualClock>, options: HttpAppOptions) -> HttpApp {
        let url = database_url(backend).await;
        let mut app = Self::start_on(url.clone(), clock, options).await;
        app.database = Some(crate::Dropped(url));
        app
    }

    /// Stops this orchestrator (gracefully) and starts another on the same database and clock, with the default
    /// options and the same token: an orchestrator restart. The ports change.
    pub async fn restart(mut self) -> HttpApp {
        if let Some(server) = self.server.take() {
            server.shutdown().await;
        }
        let options = HttpAppOptions { token: self.token.clone(), ..HttpAppOptions::default() };
        let mut app = Self::start_on(self.db_url.clone(), self.clock.clone(), options).await;
        app.database = self.database.take();
        app
    }

    async fn start_on(db_url: String, clock: Arc<ManualClock>, options: HttpAppOptions) -> HttpApp {
        cairn_workers::actions::install_crypto_provider();
        let local = SocketAddr::from(([127, 0, 0, 1], 0));
        let mut api = ApiConfig { token: options.token.clone().map(Into::into), ..ApiConfig::default() };
        if let Some(limit) = options.max_body_bytes {
            api.max_body_bytes = limit;
        }
        api.body_read_timeout = options.body_read_timeout.unwrap_or(api.body_read_timeout);
        api.max_sse_subscribers = options.max_sse_subscribers.unwrap_or(api.max_sse_subscribers);
        let config = ServerConfig {
            db_url: db_url.as_str().into(),
            db_answer_deadline: cairn_store::DEFAULT_ANSWER_DEADLINE,
            http_addr: local,
            grpc_addr: local,
            api,
            http: options.http,
            grpc: options.grpc,
            worker_token: None,
            engine: options.engine,
            shutdown_grace: Duration::from_secs(10),
        };
        let server = Server::start(config, clock.clone()).await.expect("the orchestrator starts");
        let client = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().expect("an HTTP client");
        HttpApp {
            base_url: format!("http://{}", server.http_addr),
            grpc_url: format!("http://{}", server.grpc_addr),
            server: Some(server),
            clock,
            db_url,
            token: options.token,
            client,
            database: None,
        }
    }

    /// The engine (for waking long polls and raw store checks).
    pub fn engine(&self) -> &Engine {
        &self.server.as_ref().expect("running").engine
    }

    /// Sets the clock to an RFC 3339 instant and wakes long-polling workers.
    pub fn set_time(&self, at: &str) {
        self.clock.set(at.parse::<Timestamp>().expect("an RFC 3339 instant"));
        self.engine().wake();
    }

    /// Sets the clock to epoch milliseconds and wakes long-polling workers.
    pub fn set_time_ms(&self, ms: i64) {
        self.clock.set(Timestamp::from_millisecond(ms).expect("a valid instant"));
        self.engine().wake();
    }

    /// Current clock time, epoch milliseconds.
    pub fn now_ms(&self) -> i64 {
        self.engine().now_ms()
    }

    /// A request to `path` (relative to the API base) carrying the bearer token when one is configured.
    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let builder = self.client.request(method, format!("{}{path}", self.base_url));
        match &self.token {
            Some(token) => builder.bearer_auth(token),
            None => builder,
        }
    }

    /// Sends `request` and returns the status and the body (JSON, or the text as a JSON string).
    pub async fn send(request: reqwest::RequestBuilder) -> (u16, Value) {
        let response = request.send().await.expect("the API answers");
        let status = response.status().as_u16();
        let bytes = response.bytes().await.expect("the answer has a body");
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (status, body)
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> (u16, Value) {
        Self::send(self.request(reqwest::Method::GET, path)).await
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        Self::send(self.request(reqwest::Method::POST, path).json(body)).await
    }

    /// `POST path` with raw bytes and an optional content type.
    pub async fn post_bytes(&self, path: &str, content_type: Option<&str>, body: Vec<u8>) -> (u16, Value) {
        let mut request = self.request(reqwest::Method::POST, path).body(body);
        if let Some(content_type) = content_type {
            request = request.header(reqwest::header::CONTENT_TYPE, content_type);
        }
        Self::send(request).await
    }

    /// Submits `plan` (`POST /v1/runs`), expecting 201; returns the run id.
    pub async fn submit(&self, plan: Value) -> String {
        let (status, run) = self.post("/v1/runs", &json!({"plan": plan})).await;
        assert_eq!(status, 201, "a valid plan is accepted: {run:#}");
        run["id"].as_str().expect("the run has an id").to_owned()
    }

    /// `GET /v1/runs/{id}`, expecting 200.
    pub async fn run(&self, run_id: &str) -> Value {
        let (status, run) = self.get(&format!("/v1/runs/{run_id}")).await;
        assert_eq!(status, 200, "run {run_id} can be read: {run:#}");
        run
    }

    /// Waits (up to `limit`) until the run, read over the API, satisfies `ready`; `what` names the condition.
    pub async fn wait_run(&self, run_id: &str, what: &str, limit: Duration, ready: impl Fn(&Value) -> bool) -> Value {
        within(limit, &format!("run {run_id}: {what}"), || async {
            let run = self.run(run_id).await;
            ready(&run).then_some(run)
        })
        .await
    }

    /// Every run the API lists (first 500).
    pub async fn runs(&self) -> Vec<Value> {
        let (status, answer) = self.get("/v1/runs?limit=500").await;
        assert_eq!(status, 200, "runs can be listed: {answer:#}");
        answer["runs"].as_array().cloned().unwrap_or_default()
    }

    /// Rows in every table a submission writes (plans, runs, steps, edges, attempts, events).
    pub async fn stored_rows(&self) -> i64 {
        const COUNT: &str = "SELECT (SELECT COUNT(*) FROM plans) + (SELECT COUNT(*) FROM runs) \
            + (SELECT COUNT(*) FROM steps) + (SELECT COUNT(*) FROM step_edges) \
            + (SELECT COUNT(*) FROM attempts) + (SELECT COUNT(*) FROM run_events)";
        crate::raw::fetch_i64(self.engine().store(), COUNT, COUNT, &[]).await
    }
}

impl Drop for HttpApp {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }
}

/// One step of a run view (`steps[]` entry with `id == step_id`).
pub fn step<'a>(run: &'a Value, step_id: &str) -> &'a Value {
    run["steps"]
        .as_array()
        .and_then(|steps| steps.iter().find(|s| s["id"] == step_id))
        .unwrap_or_else(|| panic!("run has step {step_id}: {run:#}"))
}

/// The `cairn` binary built from this workspace: `$CAIRN_BIN` when set, else `cairn` next to the test binary's
/// `deps/` directory (`target/debug/cairn`). `cargo test --workspace` builds it (the CLI has integration
/// tests); `cargo test -p cairn-tests` alone does not, so run `cargo build -p cairn-cli` first.
pub fn cairn_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("CAIRN_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>");
    let bin = profile_dir.join(format!("cairn{}", std::env::consts::EXE_SUFFIX));
    assert!(bin.exists(), "{} is missing: run `cargo build -p cairn-cli` first (or set CAIRN_BIN)", bin.display());
    bin
}

/// The setting every test worker gets: `cairn worker` refuses loopback destinations by default, and the tests'
/// stubs are on 127.0.0.1.
pub const ALLOW_LOOPBACK: (&str, &str) = ("CAIRN_HTTP_ALLOW_LOOPBACK", "true");

/// `envs` with [`ALLOW_LOOPBACK`] first, so an entry of `envs` for the same variable wins.
pub fn with_loopback_allowed<'a>(envs: &[(&'a str, String)]) -> Vec<(&'a str, String)> {
    let mut all = vec![(ALLOW_LOOPBACK.0, ALLOW_LOOPBACK.1.to_owned())];
    all.extend_from_slice(envs);
    all
}

/// A `cairn` command with a clean environment for Cairn (no inherited `CAIRN_*`), run in `dir` so no stray
/// `cairn.toml` is read, with `envs` set.
fn command(dir: &Path, args: &[&str], envs: &[(&str, String)]) -> Command {
    let mut command = Command::new(cairn_bin());
    command.args(args).current_dir(dir).env("RUST_LOG", "info");
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("CAIRN_") {
            command.env_remove(name);
        }
    }
    for (name, value) in envs {
        command.env(name, value);
    }
    command
}

/// A spawned `cairn` process, killed (and reaped) when dropped. Its stdout and stderr go to a log file.
pub struct CairnProcess {
    child: Child,
    log: PathBuf,
}

impl CairnProcess {
    /// Spawns `cairn worker --server GRPC_URL [FLAGS…]` in `dir` with `envs` (action settings such as
    /// `CAIRN_WEATHER_FORECAST_URL`); logs to `dir/<name>.log`. `TMPDIR` is `dir`, so the default notification
    /// file is private to the test. The tests' stubs listen on 127.0.0.1, so the worker allows
    /// `http.request` to reach loopback ([`ALLOW_LOOPBACK`]) unless `envs` sets `CAIRN_HTTP_ALLOW_LOOPBACK`.
    pub fn worker(name: &str, grpc_url: &str, dir: &Path, flags: &[&str], envs: &[(&str, String)]) -> CairnProcess {
        let mut envs = with_loopback_allowed(envs);
        envs.push(("TMPDIR", dir.display().to_string()));
        let mut args = vec!["worker", "--server", grpc_url];
        args.extend_from_slice(flags);
        Self::spawn(name, dir, &args, &envs)
    }

    /// Spawns `cairn ARGS` in `dir`; output goes to `dir/<name>.log`.
    pub fn spawn(name: &str, dir: &Path, args: &[&str], envs: &[(&str, String)]) -> CairnProcess {
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).expect("a log file");
        let err = out.try_clone().expect("a second handle on the log file");
        let child = command(dir, args, envs)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {} {args:?}: {e}", cairn_bin().display()));
        CairnProcess { child, log }
    }

    /// What the process printed so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether the process has exited.
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }
}

impl Drop for CairnProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The result of a one-shot `cairn` command.
#[derive(Debug)]
pub struct CairnOutput {
    /// Exit code (`None` when killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Runs `cairn ARGS` in `dir` to completion (at most 60 s) and returns its output.
pub async fn cairn(dir: &Path, args: &[&str]) -> CairnOutput {
    cairn_with(dir, args, &[]).await
}

/// [`cairn`] with these environment variables set (`CAIRN_API_TOKEN`, say).
pub async fn cairn_with(dir: &Path, args: &[&str], envs: &[(&str, String)]) -> CairnOutput {
    let mut command = tokio::process::Command::from(command(dir, args, envs));
    command.stdin(Stdio::null()).kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .unwrap_or_else(|_| panic!("cairn {args:?} finishes within 60 s"))
        .unwrap_or_else(|e| panic!("running cairn {args:?}: {e}"));
    CairnOutput {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A scratch directory under the system temp dir, removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new empty directory.
    pub fn new() -> TempDir {
        let path = std::env::temp_dir().join("cairn-tests").join(uuid::Uuid::new_v4().simple().to_string());
        std::fs::create_dir_all(&path).expect("a temp dir");
        TempDir(path)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Default for TempDir {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One request a [`Stub`] received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Method.
    pub method: Method,
    /// Path, without the query.
    pub path: String,
    /// Query string (empty when none).
    pub query: String,
    /// Headers.
    pub headers: HeaderMap,
    /// Body bytes.
    pub body: Bytes,
}

impl Recorded {
    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// One query parameter's raw value.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query.split('&').filter_map(|pair| pair.split_once('=')).find(|(k, _)| *k == name).map(|(_, v)| v)
    }
}

type Responder = Arc<dyn Fn(&Recorded) -> (u16, Value) + Send + Sync>;

/// A local recording HTTP stub on `127.0.0.1:0`: records every request and answers with what `respond`
/// returns (status, JSON body). Stops when dropped.
pub struct Stub {
    addr: SocketAddr,
    calls: Arc<Mutex<Vec<Recorded>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Stub {
    /// Starts a stub answering through `respond`.
    pub async fn start(respond: impl Fn(&Recorded) -> (u16, Value) + Send + Sync + 'static) -> Stub {
        let calls: Arc<Mutex<Vec<Recorded>>> = Arc::default();
        let respond: Responder = Arc::new(respond);
        let recorder = calls.clone();
        let app = axum::Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
            let (calls, respond) = (recorder.clone(), respond.clone());
            async move {
                let path = uri.path().to_owned();
                let query = uri.query().unwrap_or_default().to_owned();
                let recorded = Recorded { method, path, query, headers, body };
                let (status, answer) = respond(&recorded);
                calls.lock().expect("the call log").push(recorded);
                let status = StatusCode::from_u16(status).expect("a valid status");
                (status, axum::Json(answer)).into_response()
            }
        });
        let (addr, task) = serve_local(app).await;
        Stub { addr, calls, task }
    }

    /// Base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far, in arrival order.
    pub fn calls(&self) -> Vec<Recorded> {
        self.calls.lock().expect("the call log").clone()
    }

    /// Requests to `path` so far.
    pub fn calls_to(&self, path: &str) -> Vec<Recorded> {
        self.calls().into_iter().filter(|c| c.path == path).collect()
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A TCP server on 127.0.0.1 that reads each request whole (head and `Content-Length` body), counts it, and
/// resets the connection (`SO_LINGER` 0) instead of answering: a service that received the request and crashed
/// before replying. Stops when dropped.
pub struct ResetAfterRead {
    addr: SocketAddr,
    requests: Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl ResetAfterRead {
    /// Starts the server.
    pub async fn start() -> ResetAfterRead {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a free port");
        let addr = listener.local_addr().expect("a local address");
        let requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = requests.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let counted = counted.clone();
                tokio::spawn(async move {
                    let (mut request, mut buf) = (Vec::new(), [0u8; 4096]);
                    while !whole_request(&request) {
                        match stream.read(&mut buf).await {
                            Ok(n @ 1..) => request.extend_from_slice(&buf[..n]),
                            _ => return,
                        }
                    }
                    counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let _ = stream.set_zero_linger();
                });
            }
        });
        ResetAfterRead { addr, requests, task }
    }

    /// Base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Requests read in full so far (each one then reset).
    pub fn requests(&self) -> usize {
        self.requests.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for ResetAfterRead {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether `bytes` hold a whole HTTP/1.1 request: its head and `Content-Length` bytes of body.
fn whole_request(bytes: &[u8]) -> bool {
    let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&bytes[..end]).to_ascii_lowercase();
    let length = head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok());
    bytes.len() >= end + 4 + length.unwrap_or(0)
}

/// Serves `app` on a free port of 127.0.0.1; returns the address and the server task (abort it to stop).
pub async fn serve_local(app: axum::Router) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a free port");
    let addr = listener.local_addr().expect("a local address");
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, task)
}
