//! Real processes for crash tests: `cairn serve` ([`Orchestrator`]) over a database that outlives it, `cairn worker`
//! processes ([`Proc`]) that can be killed (`SIGKILL`), frozen (`SIGSTOP`) and thawed (`SIGCONT`), and
//! [`Endpoint`], a local service standing in for the outside world that records when each call started, when it
//! ended and whether the caller hung up before the answer.
//!
//! Every process is spawned with a clean `CAIRN_*` environment in a test's scratch directory, logs to
//! `<dir>/<name>.log`, and is killed when its guard is dropped. Ports are picked by binding port 0 and releasing
//! it, so an orchestrator restarted after a kill listens where its workers expect it.

use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use crate::Backend;
use crate::http::{cairn_bin, database_url, within_or};

/// How long an orchestrator may take to start answering.
const START_LIMIT: Duration = Duration::from_secs(30);

/// A port that was free a moment ago on 127.0.0.1 (bound to port 0, then released).
pub fn free_port() -> u16 {
    local_listener().local_addr().expect("a local address").port()
}

fn local_listener() -> StdListener {
    StdListener::bind("127.0.0.1:0").expect("a free port")
}

/// A `cairn` command in `dir` with no inherited `CAIRN_*` variable, `RUST_LOG=info`, `TMPDIR=dir` (the default
/// notification file is then private to the process's directory) and `envs`.
fn command(dir: &Path, args: &[&str], envs: &[(&str, String)]) -> Command {
    let mut command = Command::new(cairn_bin());
    command.args(args).current_dir(dir).env("RUST_LOG", "info").env("TMPDIR", dir);
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

/// Sends `signal` (`STOP`, `CONT`, …) to `pid` with `kill(1)`.
fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .unwrap_or_else(|e| panic!("running kill -{signal} {pid}: {e}"));
    assert!(status.success(), "kill -{signal} {pid} failed: {status}");
}

/// A spawned `cairn` process, killed (`SIGKILL`) and reaped when dropped. Output goes to `<dir>/<name>.log`.
pub struct Proc {
    name: String,
    child: Child,
    log: PathBuf,
    dead: bool,
}

impl Proc {
    /// Spawns `cairn ARGS` in `dir` with `envs`.
    pub fn spawn(name: &str, dir: &Path, args: &[&str], envs: &[(&str, String)]) -> Proc {
        std::fs::create_dir_all(dir).expect("the process directory");
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).expect("a log file");
        let err = out.try_clone().expect("a second handle on the log file");
        let child = command(dir, args, envs)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {} {args:?}: {e}", cairn_bin().display()));
        Proc { name: name.to_owned(), child, log, dead: false }
    }

    /// The name the process was spawned with.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `kill -9`: the process dies at once, without running any shutdown code; waits until it is reaped.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.dead = true;
    }

    /// `SIGTERM`, then waits (at most `limit`) for the process to exit; returns its exit code (`None`: killed by
    /// a signal). Panics if it is still running after `limit`.
    pub fn terminate(&mut self, limit: Duration) -> Option<i32> {
        signal(self.pid(), "TERM");
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.dead = true;
                return status.code();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{} still runs {limit:?} after SIGTERM:\n{}",
                self.name,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `SIGSTOP`: the process is frozen (sockets stay open, nothing runs).
    pub fn freeze(&self) {
        signal(self.pid(), "STOP");
    }

    /// `SIGCONT`: a frozen process runs again.
    pub fn thaw(&self) {
        signal(self.pid(), "CONT");
    }

    /// What the process printed so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether the process has exited (or was killed).
    pub fn exited(&mut self) -> bool {
        self.dead || matches!(self.child.try_wait(), Ok(Some(_)))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if !self.dead {
            self.kill();
        }
    }
}

/// The last `max` bytes of `text`, cut at a character boundary.
fn tail(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// The tails of every `*.log` in `dir`, for failure messages.
pub fn logs(dir: &Path) -> String {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    paths.retain(|p| p.extension().is_some_and(|e| e == "log"));
    paths.sort();
    let mut out = String::new();
    for path in paths {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        out.push_str(&format!("\n===== {} =====\n{}", path.display(), tail(&text, 6_000)));
    }
    out
}

/// `cairn serve` as a real process over a database that outlives it, reached over its REST API. It can be
/// killed and started again on the same database and ports (a crashed orchestrator coming back).
pub struct Orchestrator {
    dir: PathBuf,
    /// The database URL (`sqlite:<dir>/cairn.db` or a fresh PostgreSQL database).
    pub db_url: String,
    /// REST API base URL, `http://127.0.0.1:PORT`.
    pub base_url: String,
    /// Worker protocol URL for `cairn worker --server`.
    pub grpc_url: String,
    http: SocketAddr,
    grpc: SocketAddr,
    api_token: String,
    worker_token: String,
    lease_ttl_ms: u64,
    process: Option<Proc>,
    starts: usize,
    client: reqwest::Client,
    /// Drops the database when the orchestrator ends (after its process: fields drop in order).
    database: Option<crate::Dropped>,
}

impl Orchestrator {
    /// Starts `cairn serve` in `dir` on a fresh database on `backend`, with lease TTL `lease_ttl_ms`, and waits
    /// until it answers.
    pub async fn start(backend: Backend, dir: &Path, lease_ttl_ms: u64) -> Orchestrator {
        let db_url = match backend {
            Backend::Sqlite => format!("sqlite:{}", dir.join("cairn.db").display()),
            Backend::Postgres => database_url(backend).await,
        };
        let mut orchestrator = Self::start_on(db_url.clone(), dir, lease_ttl_ms).await;
        orchestrator.database = Some(crate::Dropped(db_url));
        orchestrator
    }

    /// As [`Orchestrator::start`], on the database at `db_url` (for example a PostgreSQL database reached
    /// through a [`crate::silent_proxy::SilentProxy`]).
    pub async fn start_on(db_url: String, dir: &Path, lease_ttl_ms: u64) -> Orchestrator {
        cairn_workers::actions::install_crypto_provider();
        // Both bound at once, so they differ; released before `cairn serve` binds them.
        let (first, second) = (local_listener(), local_listener());
        let http = first.local_addr().expect("a local address");
        let grpc = second.local_addr().expect("a local address");
        drop((first, second));
        let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("an HTTP client");
        let mut orchestrator = Orchestrator {
            dir: dir.to_owned(),
            db_url,
            base_url: format!("http://{http}"),
            grpc_url: format!("http://{grpc}"),
            http,
            grpc,
            api_token: format!("api-{}", uuid::Uuid::new_v4().simple()),
            worker_token: format!("worker-{}", uuid::Uuid::new_v4().simple()),
            lease_ttl_ms,
            process: None,
            starts: 0,
            client,
            database: None,
        };
        orchestrator.spawn().await;
        orchestrator
    }

    async fn spawn(&mut self) {
        assert!(self.process.is_none(), "the orchestrator is already running");
        self.starts += 1;
        let name = format!("serve-{}", self.starts);
        let (http, grpc) = (self.http.to_string(), self.grpc.to_string());
        let args = ["serve", "--db", &self.db_url, "--http", &http, "--grpc", &grpc];
        let envs = [
            ("CAIRN_API_TOKEN", self.api_token.clone()),
            ("CAIRN_WORKER_TOKEN", self.worker_token.clone()),
            ("CAIRN_LEASE_TTL_MS", self.lease_ttl_ms.to_string()),
        ];
        let mut process = Proc::spawn(&name, &self.dir, &args, &envs);
        let healthz = format!("{}/healthz", self.base_url);
        let client = self.client.clone();
        let dir = self.dir.clone();
        within_or(
            START_LIMIT,
            || {
                let (client, healthz) = (client.clone(), healthz.clone());
                let exited = process.exited();
                assert!(!exited, "`cairn serve` exited at start-up:{}", logs(&dir));
                async move {
                    let answer = client.get(healthz).timeout(Duration::from_secs(2)).send().await.ok()?;
                    answer.status().is_success().then_some(())
                }
            },
            || format!("waiting until `cairn serve` answers:{}", logs(&self.dir)),
        )
        .await;
        self.process = Some(process);
    }

    /// `SIGTERM` the orchestrator and wait (at most `limit`) for it to exit; returns its exit code.
    pub fn terminate(&mut self, limit: Duration) -> Option<i32> {
        let mut process = self.process.take().expect("the orchestrator is running");
        process.terminate(limit)
    }

    /// `kill -9` the orchestrator (the database stays).
    pub fn kill(&mut self) {
        let mut process = self.process.take().expect("the orchestrator is running");
        process.kill();
    }

    /// Starts the orchestrator again over the same database and ports; waits until it answers.
    pub async fn restart(&mut self) {
        self.spawn().await;
    }

    /// The API token.
    pub fn api_token(&self) -> &str {
        &self.api_token
    }

    /// The worker token.
    pub fn worker_token(&self) -> &str {
        &self.worker_token
    }

    /// Spawns `cairn worker --server GRPC --id NAME [FLAGS…]` with the worker token and `envs` (action settings),
    /// logging to `<dir>/NAME.log`; its temp dir is `<dir>/NAME/`, so workers share no scratch files. Loopback
    /// destinations are allowed (the recording endpoints are on 127.0.0.1) unless `envs` says otherwise.
    pub fn worker(&self, name: &str, flags: &[&str], envs: &[(&str, String)]) -> Proc {
        let tmp = self.dir.join(name);
        std::fs::create_dir_all(&tmp).expect("the worker's temp dir");
        let mut args = vec!["worker", "--server", &self.grpc_url, "--id", name];
        args.extend_from_slice(flags);
        let mut envs = crate::http::with_loopback_allowed(envs);
        envs.push(("CAIRN_WORKER_TOKEN", self.worker_token.clone()));
        envs.push(("TMPDIR", tmp.display().to_string()));
        Proc::spawn(name, &self.dir, &args, &envs)
    }

    /// Every process log in the test's directory (for failure messages).
    pub fn logs(&self) -> String {
        logs(&self.dir)
    }

    /// Sends `request` with the API token; returns the status and the JSON body (text as a JSON string).
    async fn send(&self, request: reqwest::RequestBuilder) -> (u16, Value) {
        let response = request.bearer_auth(&self.api_token).send().await.expect("the API answers");
        let status = response.status().as_u16();
        let bytes = response.bytes().await.expect("a body");
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (status, body)
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.send(self.client.get(format!("{}{path}", self.base_url))).await
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.send(self.client.post(format!("{}{path}", self.base_url)).json(body)).await
    }

    /// `PUT path` with a JSON body.
    pub async fn put(&self, path: &str, body: &Value) -> (u16, Value) {
        self.send(self.client.put(format!("{}{path}", self.base_url)).json(body)).await
    }

    /// Submits `plan`, expecting 201; returns the run id.
    pub async fn submit(&self, plan: Value) -> String {
        let (status, run) = self.post("/v1/runs", &json!({ "plan": plan })).await;
        assert_eq!(status, 201, "the plan is accepted: {run:#}");
        run["id"].as_str().expect("a run id").to_owned()
    }

    /// `GET /v1/runs/{id}`, expecting 200.
    pub async fn run(&self, run_id: &str) -> Value {
        let (status, run) = self.get(&format!("/v1/runs/{run_id}")).await;
        assert_eq!(status, 200, "run {run_id} can be read: {run:#}");
        run
    }

    /// Polls the run every 50 ms until `ready` holds (at most `limit`); on timeout, panics with the last view
    /// and every process log.
    pub async fn wait_run(&self, run_id: &str, what: &str, limit: Duration, ready: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            let run = self.run(run_id).await;
            if ready(&run) {
                return run;
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {limit:?} waiting until run {run_id}: {what}\nlast view: {run:#}\nlogs:{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

pub use crate::endpoint::{Call, Endpoint};
