//! Test harness for the worker runtime: a real orchestrator in-process (engine over a fresh SQLite file, the gRPC
//! worker service on 127.0.0.1 port 0, the lease reaper), scripted test actions, and a worker runtime running in
//! a task that a test can stop gracefully or kill.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use cairn_core::catalog::{ActionSpec, Effect, StaticCatalog};
use cairn_orchestrator::clock::SystemClock;
use cairn_orchestrator::grpc::WorkerGrpc;
use cairn_orchestrator::{Engine, EngineConfig, SubmitRequest};
use cairn_store::{AttemptRecord, RunSummary, StepSummary, Store};
use cairn_workers::action::{ActionError, BoxOutcome, DynAction};
use cairn_workers::context::ActionContext;
use cairn_workers::runtime::{self, RuntimeError, WorkerConfig};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;

/// The worker token the test orchestrator requires.
pub const TOKEN: &str = "runtime-test-token";

/// Engine settings for tests: short leases so lost attempts are reclaimed within seconds.
pub fn engine_config() -> EngineConfig {
    let lease_ttl = Duration::from_secs(2);
    EngineConfig {
        lease_ttl,
        reap_interval: Duration::from_millis(200),
        startup_grace: lease_ttl,
        ..EngineConfig::default()
    }
}

/// A running orchestrator: engine, gRPC service and (optionally) the reaper.
pub struct Orchestrator {
    pub engine: Engine,
    pub addr: SocketAddr,
    server: Option<(oneshot::Sender<()>, JoinHandle<()>)>,
    reaper: Option<JoinHandle<()>>,
    /// The database's directory, removed when the orchestrator is dropped.
    _db_dir: tempfile::TempDir,
}

impl Orchestrator {
    /// Engine, gRPC service and reaper over a fresh database.
    pub async fn start(config: EngineConfig) -> Self {
        let mut orchestrator = Self::start_without_reaper(config).await;
        orchestrator.reaper = Some(cairn_orchestrator::reaper::spawn(
            orchestrator.engine.clone(),
            tokio_util::sync::CancellationToken::new(),
        ));
        orchestrator
    }

    /// Engine and gRPC service only: nothing but the worker can time an attempt out.
    pub async fn start_without_reaper(config: EngineConfig) -> Self {
        let db_dir = tempfile::Builder::new().prefix("cairn-runtime-test-").tempdir().unwrap();
        let url = format!("sqlite:{}", db_dir.path().join("cairn.db").display());
        let store = Store::connect(&url).await.unwrap();
        let engine =
            Engine::start(store, Arc::new(SystemClock), Arc::new(StaticCatalog::builtin()), config).await.unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = Some(serve(engine.clone(), listener));
        Self { engine, addr, server, reaper: None, _db_dir: db_dir }
    }

    /// The address workers dial.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops the gRPC service (graceful: in-flight calls finish) and closes the port: the orchestrator is
    /// unreachable, as while it restarts.
    pub async fn stop_serving(&mut self) {
        if let Some((stop, handle)) = self.server.take() {
            let _ = stop.send(());
            tokio::time::timeout(Duration::from_secs(10), handle).await.expect("the gRPC service stops").unwrap();
        }
    }

    /// Serves again on the same port.
    pub async fn serve_again(&mut self) {
        let listener = within(Duration::from_secs(5), "the port can be bound again", || async {
            TcpListener::bind(self.addr).await.ok()
        })
        .await;
        self.server = Some(serve(self.engine.clone(), listener));
    }

    /// Waits until a worker registered `action`.
    pub async fn wait_registered(&self, action: &str) {
        within(Duration::from_secs(10), &format!("`{action}` is registered"), || async {
            self.engine.catalog().specs().iter().any(|s| s.name == action).then_some(())
        })
        .await;
    }

    /// Submits a plan and returns the run id.
    pub async fn submit(&self, plan: Value) -> String {
        let req = SubmitRequest { plan, input: None, idempotency_key: None, labels: Default::default() };
        match self.engine.submit(&req).await {
            Ok(submitted) => submitted.run_id,
            Err(e) => panic!("submit failed: {e}: {e:?}"),
        }
    }

    /// Waits until the run has one of `statuses`.
    pub async fn wait_run(&self, run_id: &str, statuses: &[&str], limit: Duration) -> RunSummary {
        within(limit, &format!("run {run_id} reaches one of {statuses:?}"), || async {
            let run = self.engine.store().run(run_id).await.unwrap()?;
            statuses.contains(&run.status.as_str()).then_some(run)
        })
        .await
    }

    /// Waits until step `step_id` of the run satisfies `ready`.
    pub async fn wait_step(
        &self,
        run_id: &str,
        step_id: &str,
        what: &str,
        limit: Duration,
        ready: impl Fn(&StepSummary) -> bool,
    ) -> StepSummary {
        within(limit, &format!("step {step_id}: {what}"), || async { self.step(run_id, step_id).await.filter(&ready) })
            .await
    }

    /// One step of a run.
    pub async fn step(&self, run_id: &str, step_id: &str) -> Option<StepSummary> {
        self.engine.store().steps(run_id).await.unwrap().into_iter().find(|s| s.id == step_id)
    }

    /// Every attempt of a run.
    pub async fn attempts(&self, run_id: &str) -> Vec<AttemptRecord> {
        self.engine.store().attempts(run_id).await.unwrap()
    }
}

impl Drop for Orchestrator {
    fn drop(&mut self) {
        if let Some(reaper) = self.reaper.take() {
            reaper.abort();
        }
        if let Some((stop, handle)) = self.server.take() {
            let _ = stop.send(());
            handle.abort();
        }
    }
}

fn serve(engine: Engine, listener: TcpListener) -> (oneshot::Sender<()>, JoinHandle<()>) {
    let (stop, stopped) = oneshot::channel::<()>();
    let handle = tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(WorkerGrpc::service(engine, Some(TOKEN.into())))
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    (stop, handle)
}

/// Polls `probe` every 20 ms until it returns `Some`, panicking with `what` after `limit`.
pub async fn within<T, F, Fut>(limit: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out after {limit:?} waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A worker runtime running in a task.
pub struct RunningWorker {
    handle: Option<JoinHandle<Result<(), RuntimeError>>>,
    stop: Option<oneshot::Sender<()>>,
}

impl RunningWorker {
    /// Starts `runtime::run(config, …)` in a task.
    pub fn spawn(config: WorkerConfig) -> Self {
        let (stop, stopped) = oneshot::channel::<()>();
        let handle = tokio::spawn(runtime::run(config, async move {
            let _ = stopped.await;
        }));
        Self { handle: Some(handle), stop: Some(stop) }
    }

    /// Signals shutdown (as SIGTERM would) and waits up to `limit` for the runtime to return.
    pub async fn shutdown(mut self, limit: Duration) -> Result<(), RuntimeError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let handle = self.handle.take().unwrap();
        tokio::time::timeout(limit, handle).await.expect("the runtime returns within the limit").unwrap()
    }

    /// Waits up to `limit` for the runtime to return by itself.
    pub async fn finished(mut self, limit: Duration) -> Result<(), RuntimeError> {
        let handle = self.handle.take().unwrap();
        tokio::time::timeout(limit, handle).await.expect("the runtime returns within the limit").unwrap()
    }

    /// Kills the runtime (its task is aborted mid-flight, like `kill -9` of a worker process).
    pub async fn kill(mut self) {
        let handle = self.handle.take().unwrap();
        handle.abort();
        let _ = handle.await;
    }
}

impl Drop for RunningWorker {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            handle.abort();
        }
    }
}

/// A worker configuration for the test orchestrator, with short waits.
pub fn worker_config(orchestrator: &Orchestrator, id: &str, actions: Vec<Arc<dyn DynAction>>) -> WorkerConfig {
    let mut config = WorkerConfig::new(orchestrator.url(), actions);
    config.token = Some(TOKEN.into());
    config.worker_id = id.to_owned();
    config.concurrency = 4;
    config.poll_wait = Duration::from_millis(500);
    config.drain_timeout = Duration::from_secs(5);
    config.report_give_up_after = Duration::from_secs(60);
    config
}

type Script = dyn Fn(Value, ActionContext) -> BoxFuture<'static, Result<Value, ActionError>> + Send + Sync;

/// A test action whose behaviour is a closure (a [`DynAction`] directly, so each test names its own).
pub struct Scripted {
    name: String,
    effect: Effect,
    script: Box<Script>,
}

impl Scripted {
    /// An action `name` with `effect` that runs `script` (given the args and a clone of the context).
    pub fn action<F, Fut>(name: &str, effect: Effect, script: F) -> Arc<dyn DynAction>
    where
        F: Fn(Value, ActionContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ActionError>> + Send + 'static,
    {
        Arc::new(Scripted {
            name: name.to_owned(),
            effect,
            script: Box::new(move |args, ctx| Box::pin(script(args, ctx))),
        })
    }
}

impl DynAction for Scripted {
    fn spec(&self) -> ActionSpec {
        ActionSpec {
            name: self.name.clone(),
            version: "1".into(),
            description: format!("test action {}", self.name),
            args_schema: json!({"type": "object"}),
            output_schema: json!({}),
            effect: self.effect,
            grounded_args: Vec::new(),
            recipient_args: Vec::new(),
            example_output: None,
        }
    }

    fn call<'a>(&'a self, args: Value, ctx: &'a ActionContext) -> BoxOutcome<'a> {
        (self.script)(args, ctx.clone())
    }
}

/// Sets a flag when dropped, recording whether the attempt's context was cancelled by then.
pub struct DropFlag {
    ctx: ActionContext,
    flags: Arc<Flags>,
}

/// What a [`DropFlag`] saw.
#[derive(Default)]
pub struct Flags {
    pub started: std::sync::atomic::AtomicBool,
    pub dropped: std::sync::atomic::AtomicBool,
    pub cancelled_at_drop: std::sync::atomic::AtomicBool,
}

impl Flags {
    pub fn get(flag: &std::sync::atomic::AtomicBool) -> bool {
        flag.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl DropFlag {
    /// Marks the attempt started; the returned guard marks it dropped.
    pub fn arm(ctx: &ActionContext, flags: &Arc<Flags>) -> Self {
        flags.started.store(true, std::sync::atomic::Ordering::SeqCst);
        Self { ctx: ctx.clone(), flags: flags.clone() }
    }
}

impl Drop for DropFlag {
    fn drop(&mut self) {
        let cancelled = self.ctx.cancellation().is_cancelled();
        self.flags.cancelled_at_drop.store(cancelled, std::sync::atomic::Ordering::SeqCst);
        self.flags.dropped.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}
